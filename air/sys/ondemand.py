"""The on-demand built-in ``sys/`` defs: a second catalogue beside ``sys.air.json``.

The defs of ``sys.air.json`` are in every world. These are not: one enters a world's AIR (and so
its manifest and its hash) only when that AIR refers to it, directly or through another
on-demand def it pulled in (``air._builtins``'s docstring has the rule). So adding a def here
changes no existing world's manifest hash, which adding one to ``sys.air.json`` would.

Python text rather than a ``.air.json`` file beside ``sys.air.json``: ``air/`` reads no files
(``tests/project/test_purity.py``), and the loader takes this catalogue itself (a world's stored sources
do not carry it). So an on-demand def, once released, is never changed: a change is a new
``@version``, or worlds that use it would load to another hash.

Each topic's defs may live in a module of their own beside this one (``air.sys.enforcers``: the
capability enforcers; ``air.sys.llm``: ``llm.generate`` and the vault schemas;
``air.sys.workspace``: workspaces and the HTTP publish registry), listed in
``ONDEMAND_SOURCES``, which the loader reads.

What is here (issue 22, secrets, as AgentOS's ``spec/17-secrets.md`` lays them out):

* ``sys/SecretRef@1`` ``{alias: text, version: nat}``: names a ``defsecret`` (``alias@version``);
  canonically ``{"$tag": "secret", "$value": {"alias": ..., "version": ...}}`` inside the two
  variants below.
* ``sys/TextOrSecretRef@1`` and ``sys/BytesOrSecretRef@1``: ``literal`` (text / bytes) or
  ``secret`` (a ``sys/SecretRef@1``).
* ``sys/HttpRequestParams@2`` and the effect ``sys/http.request@2`` of kind
  ``HTTP_SECRET_KIND`` (``http.request.v2``): an HTTP request whose header values may be secret
  references and whose body may be given inline (``body``, at most
  ``HTTP_INLINE_BODY_BYTES_MAX`` bytes, literal or a secret) or by ``body_ref`` (a blob:
  any size), not both. Its receipt is ``sys/HttpRequestReceipt@1``, as ``http.request``'s, under
  the same ``http.out`` capability. ``sys/HttpRequestParams@1`` stays as it is: AgentOS's is the
  same, and AgentOS AIR redefines it.
"""

from __future__ import annotations

from typing import Final

from air.sys import enforcers, llm, workspace

__all__ = [
    "HTTP_HEADERS_REFUSED",
    "HTTP_INLINE_BODY_BYTES_MAX",
    "HTTP_KINDS",
    "HTTP_SECRET_KIND",
    "ONDEMAND_FILE",
    "ONDEMAND_SOURCES",
    "ONDEMAND_TEXT",
    "SECRET_REF",
    "http_header_refused",
]

ONDEMAND_FILE: Final = "<builtin>/sys_ondemand.air.json"
"""The file name diagnostics give these defs."""

SECRET_REF: Final = "sys/SecretRef@1"
HTTP_SECRET_KIND: Final = "http.request.v2"

ONDEMAND_TEXT: Final = """[
  {"$kind": "defschema", "name": "sys/SecretRef@1",
   "type": {"record": {"alias": "text", "version": "nat"}}},
  {"$kind": "defschema", "name": "sys/TextOrSecretRef@1",
   "type": {"variant": {"literal": "text", "secret": "sys/SecretRef@1"}}},
  {"$kind": "defschema", "name": "sys/BytesOrSecretRef@1",
   "type": {"variant": {"literal": "bytes", "secret": "sys/SecretRef@1"}}},
  {"$kind": "defschema", "name": "sys/HttpRequestParams@2",
   "type": {"record": {
     "method": "text",
     "url": "text",
     "headers": {"map": {"key": "text", "value": "sys/TextOrSecretRef@1"}},
     "body": {"option": "sys/BytesOrSecretRef@1"},
     "body_ref": {"option": "hash"}}}},
  {"$kind": "defeffect", "name": "sys/http.request@2", "effect_kind": "http.request.v2",
   "params_schema": "sys/HttpRequestParams@2", "receipt_schema": "sys/HttpRequestReceipt@1",
   "cap_type": "http.out", "origins": ["plan"]}
]
"""

ONDEMAND_SOURCES: Final[tuple[tuple[str, str], ...]] = (
    (ONDEMAND_FILE, ONDEMAND_TEXT),
    (enforcers.ENFORCERS_FILE, enforcers.ENFORCERS_TEXT),
    (llm.LLM_FILE, llm.LLM_TEXT),
    (workspace.WORKSPACE_FILE, workspace.WORKSPACE_TEXT),
)
"""Every on-demand catalogue as ``(file name for diagnostics, JSON text)``: this one's and one
per topic module beside it (``air.sys.enforcers``, ...), each a JSON list of defs."""

HTTP_KINDS: Final = frozenset({"http.request", HTTP_SECRET_KIND})
"""The effect kinds the HTTP adapter serves, charged alike under a ``bytes`` budget."""

HTTP_HEADERS_REFUSED: Final = frozenset(
    {
        "connection",
        "content-length",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
"""Header names (compared trimmed and lower-cased) a plan may not set on an HTTP request, what
the client alone writes. The message's framing: ``content-length`` and ``transfer-encoding``,
which the client derives from the body (one that disagrees with the body, or both at once,
which RFC 9112 §6.1 forbids, makes a message that two parsers on the way frame differently:
request smuggling). The connection-specific fields of RFC 9110 §7.6.1 (``connection``,
``keep-alive``, ``proxy-connection``, ``te``, ``upgrade``) and ``trailer``: they describe one
hop and the client's own connection, which the plan does not own. Refused when the AIR is
validated where the name is a constant (``air.plan.http_header``), and by the capability check
otherwise (``cap.header_not_allowed``); the HTTP adapter refuses them too, for an intent queued
before this rule. ``host`` is not here: one naming the URL's own authority is allowed, and
dropped (``cap.host_header`` refuses any other). ``expect`` is allowed: it asks for an interim
answer and does not change how the message is framed."""


def http_header_refused(name: object) -> bool:
    """Whether ``name`` is a header a plan may not set (``HTTP_HEADERS_REFUSED``)."""
    return str(name).strip().lower() in HTTP_HEADERS_REFUSED


HTTP_INLINE_BODY_BYTES_MAX: Final = 64 * 1024
"""The largest inline ``body`` of an ``http.request.v2`` (literal bytes): the kernel refuses a
larger one (``params.body_too_large``), since the params are journaled with the intent. A
larger body goes to the blob store first (``blob.put``) and is sent by ``body_ref``. A body
that is a secret is not counted here: its value is read by the adapter only."""
