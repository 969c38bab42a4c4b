"""The built-in capability enforcers: AgentOS's ``sys/CapEnforce*@1`` pure modules, as
on-demand defs (``air.sys.ondemand``), and which of them each cap type has.

In AgentOS a ``defcap`` names an ``enforcer`` module, a pure WASM module given the grant's
params and the intent's (``sys/CapCheckInput@1``) that answers allow or deny
(``sys/CapCheckOutput@1``); its built-in ones carry a zero ``wasm_hash`` patched at load. Here
the checks of each built-in cap type are native (``kernel._grants``), so an enforcer module is a
name with an ABI and no code: a defcap's ``enforcer`` must be the built-in one of its cap type
(``ENFORCERS``), or ``sys/CapAllowAll@1`` for a cap type with no checks of its own beyond what
every grant has (its cap type, expiry and budget); anything else is refused at validation
(``air.cap.enforcer``), since this build would not run it. The enforcer adds nothing the cap
type does not say, so it is not part of the defcap's hash.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ALLOW_ALL", "ENFORCERS", "ENFORCERS_FILE", "ENFORCERS_TEXT"]

ENFORCERS_FILE: Final = "<builtin>/sys_enforcers.air.json"

ALLOW_ALL: Final = "sys/CapAllowAll@1"

ENFORCERS: Final[dict[str, str]] = {
    "http.out": "sys/CapEnforceHttpOut@1",
    "llm.basic": "sys/CapEnforceLlmBasic@1",
    "workspace": "sys/CapEnforceWorkspace@1",
}
"""Cap type -> the built-in enforcer whose checks ``kernel._grants`` carries out for it."""


def _pure(name: str) -> str:
    return (
        f'  {{"$kind": "defmodule", "name": "{name}", "module_kind": "pure",\n'
        '   "abi": {"pure": {"input": "sys/CapCheckInput@1", "output": "sys/CapCheckOutput@1"}}}'
    )


ENFORCERS_TEXT: Final = (
    """[
  {"$kind": "defschema", "name": "sys/CapCheckInput@1",
   "type": {"record": {
     "cap_def": "text", "grant_name": "text", "cap_params": "bytes", "effect_kind": "text",
     "effect_params": "bytes", "origin": {"record": {"kind": "text", "name": "text"}},
     "logical_now_ns": "nat"}}},
  {"$kind": "defschema", "name": "sys/CapCheckOutput@1",
   "type": {"record": {
     "constraints_ok": "bool",
     "deny": {"option": {"record": {"code": "text", "message": "text"}}}}}},
"""
    + ",\n".join(_pure(name) for name in (ALLOW_ALL, *ENFORCERS.values()))
    + "\n]\n"
)
