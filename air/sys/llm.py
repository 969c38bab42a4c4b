"""The built-in LLM and vault defs (on-demand, ``air.sys.ondemand``), as AgentOS's
``spec/defs`` has them at its last plan-era commit, where its own ladder reads more.

* ``sys/llm.generate@1`` (effect kind ``llm.generate``, from plans, cap type ``llm.basic``):
  one chat completion. ``sys/LlmGenerateParams@1`` ``{provider, model, temperature,
  max_tokens, message_refs, tools, api_key}`` (``tools`` and ``api_key`` options): each of
  ``message_refs`` names a blob holding one message (``{"role", "content"}`` JSON), a list of
  them, or plain text (a user message); ``api_key`` is a literal or, as it should be, a secret
  reference (``sys/TextOrSecretRef@1``), resolved by the adapter as it sends and never
  journaled. ``temperature`` is a decimal written as text (``"0"``, ``"0.7"``), as AgentOS's
  Rust type and its example write it (its JSON Schema says ``dec128``). ``tools`` is what
  AgentOS's rung 07 passes (an empty list): the adapter takes no tools yet, so a non-empty
  one is an ``error`` receipt. AgentOS's schema has ``tool_refs`` and ``tool_choice`` instead,
  options its plans leave out; a record here has every field (an option written null), so
  they are not here until tools are.
* ``sys/LlmGenerateReceipt@1``: AgentOS's ``{output_ref, token_usage {prompt, completion},
  cost_cents, provider_id}`` and the fields its rung 07's plan reads (which AgentOS's mock
  harness writes and its schema lacks): ``summary_preview`` (the reply's first characters),
  ``tokens_prompt``, ``tokens_completion``, ``cost_millis``. ``output_ref`` is an option here:
  a receipt that got no reply (an error, a stub) names no output. A chat-completions endpoint
  reports no price, so the costs are 0.
* ``sys/llm.basic@1`` ``{providers?, models?, max_tokens?, tools_allow?}``, whose checks
  (``kernel._grants.check_llm``) are the enforcer ``sys/CapEnforceLlmBasic@1``'s: an absent set
  restricts nothing, an empty one allows nothing.
* ``sys/VaultPutParams@1``, ``sys/VaultPutReceipt@1``, ``sys/VaultRotateParams@1``,
  ``sys/VaultRotateReceipt@1``: the schemas, which AgentOS's rung 07 lists. Their effects
  (``vault.put``, ``vault.rotate``) are not here: nothing in this build could carry them out.
"""

from __future__ import annotations

from typing import Final

__all__ = ["LLM_FILE", "LLM_KIND", "LLM_TEXT"]

LLM_FILE: Final = "<builtin>/sys_llm.air.json"
LLM_KIND: Final = "llm.generate"

LLM_TEXT: Final = """[
  {"$kind": "defschema", "name": "sys/LlmGenerateParams@1",
   "type": {"record": {
     "provider": "text", "model": "text", "temperature": "text", "max_tokens": "nat",
     "message_refs": {"list": "hash"},
     "tools": {"option": {"list": "text"}},
     "api_key": {"option": "sys/TextOrSecretRef@1"}}}},
  {"$kind": "defschema", "name": "sys/LlmGenerateReceipt@1",
   "type": {"record": {
     "output_ref": {"option": "hash"},
     "token_usage": {"record": {"prompt": "nat", "completion": "nat"}},
     "cost_cents": "nat", "provider_id": "text",
     "summary_preview": "text", "tokens_prompt": "nat", "tokens_completion": "nat",
     "cost_millis": "nat"}}},
  {"$kind": "defeffect", "name": "sys/llm.generate@1", "effect_kind": "llm.generate",
   "params_schema": "sys/LlmGenerateParams@1", "receipt_schema": "sys/LlmGenerateReceipt@1",
   "cap_type": "llm.basic", "origins": ["plan"]},
  {"$kind": "defschema", "name": "sys/LlmBasicCap@1",
   "type": {"record": {
     "providers": {"option": {"set": "text"}}, "models": {"option": {"set": "text"}},
     "max_tokens": {"option": "nat"}, "tools_allow": {"option": {"set": "text"}}}}},
  {"$kind": "defcap", "name": "sys/llm.basic@1", "cap_type": "llm.basic",
   "schema": "sys/LlmBasicCap@1", "enforcer": {"module": "sys/CapEnforceLlmBasic@1"}},
  {"$kind": "defschema", "name": "sys/VaultPutParams@1",
   "type": {"record": {"alias": "text", "binding_id": "text", "value_ref": "hash",
                       "expected_digest": "hash"}}},
  {"$kind": "defschema", "name": "sys/VaultPutReceipt@1",
   "type": {"record": {"alias": "text", "version": "nat", "binding_id": "text",
                       "digest": "hash"}}},
  {"$kind": "defschema", "name": "sys/VaultRotateParams@1",
   "type": {"record": {"alias": "text", "version": "nat", "binding_id": "text",
                       "expected_digest": "hash"}}},
  {"$kind": "defschema", "name": "sys/VaultRotateReceipt@1",
   "type": {"record": {"alias": "text", "version": "nat", "binding_id": "text",
                       "digest": "hash"}}}
]
"""
