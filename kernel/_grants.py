"""What a grant and a policy rule admit: the checks ``kernel._effects`` makes of an intent
before it is queued, on the URL ``kernel._urls`` reads (the one normaliser).

``check_http`` is the capability check of an ``http.out`` grant: the URL readable at all
(``cap.url_invalid``), its host among ``hosts`` (``host`` on any port, ``host:port`` on that one;
``cap.host_not_allowed``), a ``Host`` header naming the URL's own authority
(``cap.host_header``), no header the client alone writes (framing and connection-specific
fields, ``air.sys.ondemand.HTTP_HEADERS_REFUSED``; ``cap.header_not_allowed``), the method among ``verbs`` (or AgentOS's ``methods``;
``cap.method_not_allowed``), the path under one of ``path_prefixes``, whole segments only
(``cap.path_not_allowed``). An empty set allows nothing; an absent one restricts nothing.
``check_llm`` is the capability check of an ``llm.basic`` grant (AgentOS's enforcer
``sys/CapEnforceLlmBasic@1``): the provider among ``providers`` (``cap.provider_not_allowed``),
the model among ``models`` (``cap.model_not_allowed``), the intent's ``max_tokens`` at most the
grant's (``cap.max_tokens_exceeded``), every tool the intent names among ``tools_allow``
(``cap.tool_not_allowed``); an absent field restricts nothing, an empty set allows nothing.
``check_workspace`` is the check of a ``workspace`` grant (the enforcer
``sys/CapEnforceWorkspace@1``'s): the effect's op (``resolve``, ``list``, ``diff``, ``read``:
``read_ref``/``read_bytes``/``annotations_get``, ``write``: the rest) among ``ops``
(``cap.workspace_op_not_allowed``), a ``resolve``/``empty_root``'s workspace among
``workspaces`` (``cap.workspace_not_allowed``), and the path an op names (``list``'s ``path``,
``diff``'s ``prefix``, the annotations' ``path``: absent is the root, ``""``) under one of
``path_prefixes``, whole segments (``cap.path_not_allowed``; a prefix ``""`` is every path).
Absent restricts nothing; unlike AgentOS's, an empty list allows nothing, as everywhere here.
``rule_matches`` is a policy rule's ``when``: effect kind, grant, origin, and for a rule that
names a ``host`` glob or a ``path_prefix`` only an intent with a readable URL. Each failure is a
``CapDenied`` with its code: the kernel journals it as the reason, no caller sees it.
"""

from __future__ import annotations

from typing import Any, Final

from air.sys.ondemand import HTTP_HEADERS_REFUSED, http_header_refused
from kernel._urls import (
    Url,
    UrlRefused,
    host_matches_glob,
    path_has_prefix,
    read_authority,
    read_host_entry,
    read_url,
)

__all__ = ["CapDenied", "check_http", "check_llm", "check_workspace", "rule_matches"]

_HTTP_VERB_FIELDS: Final = ("verbs", "methods")


class CapDenied(Exception):
    """A capability check failed: ``code`` (``cap.*``) and ``detail``; for a URL that cannot
    be read (``cap.url_invalid``), ``reason`` names the rule (``kernel._urls``). Internal to
    the kernel: code and detail become a journaled reason, never an error a caller sees."""

    def __init__(self, code: str, detail: str, *, reason: str | None = None) -> None:
        self.code = code
        self.detail = detail
        self.reason = reason
        super().__init__(f"{detail} [{code}]")


def _read_url(params: Any) -> Url:
    """The intent's URL normalised (``kernel._urls``), or ``CapDenied`` naming why not."""
    try:
        return read_url(params.get("url") if isinstance(params, dict) else None)
    except UrlRefused as exc:
        raise CapDenied(exc.code, exc.detail, reason=exc.reason) from exc


def check_http(cap: str, grant_params: Any, params: Any) -> None:
    url = _read_url(params)
    if not any(_admits(entry, url) for entry in grant_params.get("hosts") or []):
        raise CapDenied("cap.host_not_allowed", f"host {url.authority!r} is outside grant {cap}")
    _check_host_header(params, url)
    _check_client_headers(params)
    verbs = _granted_verbs(grant_params)
    method = str(params.get("method", "")).upper()
    if verbs is not None and method not in verbs:
        raise CapDenied("cap.method_not_allowed", f"method {method} is outside grant {cap}")
    prefixes = grant_params.get("path_prefixes")
    if prefixes is not None and not any(path_has_prefix(url.path, str(p)) for p in prefixes):
        raise CapDenied("cap.path_not_allowed", f"path {url.path!r} is outside grant {cap}")


def check_llm(cap: str, grant_params: Any, params: Any) -> None:
    params = params if isinstance(params, dict) else {}
    for field, name, code in (
        ("providers", "provider", "cap.provider_not_allowed"),
        ("models", "model", "cap.model_not_allowed"),
    ):
        allowed = grant_params.get(field)
        if allowed is not None and params.get(name) not in allowed:
            raise CapDenied(code, f"{name} {params.get(name)!r} is outside grant {cap}")
    limit = grant_params.get("max_tokens")
    asked = params.get("max_tokens")
    if limit is not None and not (isinstance(asked, int) and asked <= limit):
        raise CapDenied(
            "cap.max_tokens_exceeded", f"max_tokens {asked!r} exceeds {limit} of grant {cap}"
        )
    tools = grant_params.get("tools_allow")
    named = [t for t in params.get("tools") or [] if tools is not None and t not in tools]
    if named:
        raise CapDenied("cap.tool_not_allowed", f"tool {named[0]!r} is outside grant {cap}")


_WORKSPACE_OPS: Final = {
    "workspace.resolve": "resolve",
    "workspace.list": "list",
    "workspace.diff": "diff",
    "workspace.read_ref": "read",
    "workspace.read_bytes": "read",
    "workspace.annotations_get": "read",
    "workspace.empty_root": "write",
    "workspace.write_bytes": "write",
    "workspace.remove": "write",
    "workspace.annotations_set": "write",
}
"""The op an ``ops`` list names each effect by, as AgentOS's enforcer does."""

_WORKSPACE_PATH_FIELD: Final = {
    "workspace.list": "path",
    "workspace.read_ref": "path",
    "workspace.read_bytes": "path",
    "workspace.write_bytes": "path",
    "workspace.remove": "path",
    "workspace.diff": "prefix",
    "workspace.annotations_get": "path",
    "workspace.annotations_set": "path",
}


def check_workspace(cap: str, grant_params: Any, kind: str, params: Any) -> None:
    params = params if isinstance(params, dict) else {}
    op = _WORKSPACE_OPS.get(kind, kind)
    ops = grant_params.get("ops")
    if ops is not None and op not in {str(o).lower() for o in ops}:
        raise CapDenied("cap.workspace_op_not_allowed", f"op {op!r} is outside grant {cap}")
    workspaces = grant_params.get("workspaces")
    named = kind in ("workspace.resolve", "workspace.empty_root")
    if named and workspaces is not None and params.get("workspace") not in workspaces:
        detail = f"workspace {params.get('workspace')!r} is outside grant {cap}"
        raise CapDenied("cap.workspace_not_allowed", detail)
    field = _WORKSPACE_PATH_FIELD.get(kind)
    prefixes = grant_params.get("path_prefixes")
    if field is not None and prefixes is not None:
        path = params.get(field) or ""
        if not any(_under(str(path), str(p)) for p in prefixes):
            raise CapDenied("cap.path_not_allowed", f"path {path!r} is outside grant {cap}")


def _under(path: str, prefix: str) -> bool:
    """``path`` is ``prefix`` or inside it, whole segments (``a/b`` is under ``a``, ``ab``
    is not); every path is under ``""``."""
    return not prefix or path == prefix or path.startswith(prefix.rstrip("/") + "/")


def _admits(entry: Any, url: Url) -> bool:
    """A grant's ``hosts`` entry: ``host`` on any port, or ``host:port`` on that port."""
    read = read_host_entry(str(entry))
    if read is None:
        return False
    host, port = read
    return host == url.host and (port is None or port == url.effective_port)


def _granted_verbs(grant_params: Any) -> set[str] | None:
    """The methods a grant allows (``verbs`` and ``methods`` together); None if it names
    neither (no restriction). A named but empty set allows no method."""
    given = [grant_params.get(name) for name in _HTTP_VERB_FIELDS]
    if all(v is None for v in given):
        return None
    return {str(v).upper() for verbs in given for v in verbs or []}


def _check_host_header(params: Any, url: Url) -> None:
    """A ``Host`` header (any case) must name the URL's own authority: otherwise the request
    would reach the granted address while asking its server for another site."""
    headers = params.get("headers")
    if not isinstance(headers, dict):
        return
    for name, value in headers.items():
        if str(name).strip().lower() != "host":
            continue
        try:
            same = read_authority(str(value).strip(), url.scheme) == (url.host, url.port)
        except UrlRefused:
            same = False
        if not same:
            raise CapDenied(
                "cap.host_header", f"Host header {value!r} is not the URL's {url.authority!r}"
            )


def _check_client_headers(params: Any) -> None:
    """No header the HTTP client alone writes (``HTTP_HEADERS_REFUSED``): a plan that set
    ``Content-Length`` beside ``Transfer-Encoding`` would send a message two parsers frame
    differently."""
    headers = params.get("headers")
    if not isinstance(headers, dict):
        return
    for name in headers:
        if http_header_refused(name):
            raise CapDenied(
                "cap.header_not_allowed",
                f"header {name!r} is the HTTP client's to write, not a plan's (refused: "
                f"{', '.join(sorted(HTTP_HEADERS_REFUSED))})",
            )


def rule_matches(when: Any, kind: str, params: Any, cap: str, origin: dict[str, Any]) -> bool:
    """Whether a policy rule's ``when`` (``air._model.PolicyMatch``: every field given must
    match) matches an intent."""
    if when.effect_kind is not None and when.effect_kind != kind:
        return False
    if when.cap_name is not None and when.cap_name != cap:
        return False
    if when.origin_kind is not None and when.origin_kind != origin["kind"]:
        return False
    if when.origin_name is not None and when.origin_name != origin["name"]:
        return False
    glob, prefix = when.host, when.path_prefix
    if glob is not None or prefix is not None:
        try:  # only an intent with a readable URL has a host and a path to match
            url = read_url(params.get("url") if isinstance(params, dict) else None)
        except UrlRefused:
            return False
        if glob is not None and not host_matches_glob(url.host, glob):
            return False
        if prefix is not None and not path_has_prefix(url.path, prefix):
            return False
    method = when.method
    if method is not None:
        asked = str(params.get("method", "")).upper() if isinstance(params, dict) else ""
        if asked != method.upper():
            return False
    return True
