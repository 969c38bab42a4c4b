"""AIR in AgentOS's strict form: a loaded world's own defs rewritten in the spellings AgentOS's
AIR v1 JSON Schemas describe (``world air normalize``), each feature of ours that has no
AgentOS form kept as it is and reported.

What is respelled (each is a spelling our loader reads the same, so the def keeps its canonical
form and hash; ``tests/air/test_normalize.py`` checks it for every bundled manifest):
- types: every primitive shorthand in its object form (``"nat"`` -> ``{"nat": {}}``), a
  schema name as ``{"ref": name}`` (``air.types.type_to_obj``, the canonical type); where
  AgentOS takes a schema *name* (``key_schema``, plan ``locals``) a ``{"ref": n}`` is written
  ``n``; an inline type is lifted (``key_schema``, below) or kept and reported (``locals``);
- Exprs where AgentOS takes an Expr (edge ``when``, ``await_receipt.for``, ``await_event.where``,
  ``invariants``), and an Expr in an ExprOrValue position: each constant in its tagged form
  (``200`` -> ``{"int": 200}``, ``"GET"`` -> ``{"text": "GET"}``, ``null``/``{"none": {}}``/
  ``{"unit": {}}`` -> ``{"null": {}}``, ``{"bytes": b}`` -> ``{"bytes_b64": b}``, ``{"some":
  e}`` -> ``e``, ``{"lit": v}`` -> its constant), recursively; a plain JSON literal in an
  ExprOrValue position is left as written (AgentOS reads it through the schema, as we do);
- a module's ``wasm`` path -> ``wasm_hash``, ``sha256:<hex>`` of the module's bytes (AgentOS's
  ``Hash``); the manifest's def lists written in full, each ``{name, hash}``; ``air_version``.

What is rewritten into a form of AgentOS's that does the same (``NormalizedAir.rewritten``,
one line each; the def's canonical form and hash differ, so the manifest hash does):
- an inline ``key_schema`` (``"text"``) is lifted into a defschema ``ns/NameKey@v`` (the
  module's name with ``Key``), written and listed, and named by the module;
- our ``raise_event {reducer, key, event}`` becomes the routed ``{event, value}`` when the
  manifest delivers it the same way: its event record names its schema, which has one route,
  to that reducer, and no trigger, and the route's ``key_field`` of the record is the same Expr
  as ``key`` (``_routed``); otherwise it is kept and reported;
- a policy rule's ``method`` is left out when the grant its ``cap_name`` names allows that
  method alone: the capability check, which runs first, already holds the intent to it;
- a reducer's cap slot naming a defcap is written as that defcap's cap type when the
  manifest's ``module_bindings`` bind the slot to a grant of that defcap (the binding is what
  narrows it).

What differs for our loader, exactly: a module given by its ``wasm`` path is written with its
``sha256`` ``wasm_hash`` and no path, and our loader cannot rehash bytes it is not given, so that
module's canonical form carries the sha256 text where ours has the blake3 of the same bytes:
that module's def hash differs, and so does the manifest hash (defined over the def hashes);
every other def hashes the same. The manifest lists' hashes are ``sha256`` over *our* canonical
CBOR of each def (AgentOS's schema requires a hash there; AgentOS's own CBOR differs, so its
tools recompute theirs): our loader reports them ``air.hash.foreign`` and does not check them.

Integer constants: our constants are untyped (``{"int": 5}``, ``{"nat": 5}`` and ``5`` are one
value), so a bare integer is written ``{"int": n}`` (``{"nat": n}`` above the i64 range): the
position's schema types it in both systems.

Pure: the caller loads the AIR (with its wasm bytes) and writes the documents.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Final

from air import cbor
from air._canonical import def_canonical
from air._loaded import LoadedAir, Located
from air._model import (
    AIR_KINDS,
    DefCap,
    DefEffect,
    DefModule,
    DefPlan,
    DefPolicy,
    DefPureModule,
    DefSchema,
    DefSecret,
)
from air.expr import is_expr_form, parse_expr, to_json
from air.types import parse_type, type_refs, type_to_obj

__all__ = ["NormalizedAir", "Unmapped", "normalize_air"]

_I64_MAX: Final = 2**63 - 1

FILES: Final[dict[type, str]] = {
    DefSchema: "schemas.air.json",
    DefModule: "modules.air.json",
    DefPureModule: "modules.air.json",
    DefPlan: "plans.air.json",
    DefCap: "caps.air.json",
    DefPolicy: "policies.air.json",
    DefEffect: "effects.air.json",
    DefSecret: "secrets.air.json",
}
"""The file of each kind in the output folder (the manifest is ``manifest.air.json``)."""

_LISTS: Final[dict[type, str]] = {
    DefSchema: "schemas",
    DefModule: "modules",
    DefPureModule: "modules",
    DefPlan: "plans",
    DefCap: "caps",
    DefPolicy: "policies",
    DefEffect: "effects",
    DefSecret: "secrets",
}

_KEPT_CONSTS: Final = frozenset(
    {"int", "nat", "text", "bool", "hash", "uuid", "dec128", "time_ns", "duration_ns", "null"}
)
"""AgentOS's constant forms, kept as written (``bytes_b64`` too)."""

_POLICY_OURS: Final = ("host", "path_prefix", "method")
"""Policy match fields of ours that AgentOS's ``Match`` lacks."""


@dataclass(frozen=True)
class Unmapped:
    """A feature of ours kept in the output because AgentOS's AIR v1 has no form for it."""

    name: str
    pointer: str
    detail: str

    def render(self) -> str:
        return f"{self.name}:{self.pointer or '/'}: {self.detail}"

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "pointer": self.pointer, "detail": self.detail}


@dataclass
class NormalizedAir:
    """The strict documents by file name (an array of defs each, or the manifest object),
    what was kept as ours (``unmapped``), and what was rewritten into a form of AgentOS's that
    does the same but hashes differently (``rewritten``; the module docstring)."""

    files: dict[str, Any] = field(default_factory=dict)
    unmapped: list[Unmapped] = field(default_factory=list)
    rewritten: list[Unmapped] = field(default_factory=list)
    lifted: dict[str, str] = field(default_factory=dict)
    """Module -> the defschema its inline ``key_schema`` was lifted into."""


def _strict_expr(obj: Any) -> Any:
    """An Expr in AgentOS's tagged spelling (see the module docstring)."""
    if obj is None:
        return {"null": {}}
    if type(obj) is bool:
        return {"bool": obj}
    if type(obj) is int:
        return {"int": obj} if obj <= _I64_MAX else {"nat": obj}
    if type(obj) is str:
        return {"text": obj}
    if type(obj) is not dict:
        return obj  # not an Expr: AgentOS's validation says so
    if "op" in obj and isinstance(obj.get("args"), list):
        return {"op": obj["op"], "args": [_strict_expr(a) for a in obj["args"]]}
    if len(obj) != 1:
        return obj
    form, body = next(iter(obj.items()))
    if form in _KEPT_CONSTS or form in ("ref", "bytes_b64"):
        return obj
    if form in ("none", "unit"):
        return {"null": {}}
    if form == "bytes":
        return {"bytes_b64": body}
    if form == "some":
        return _strict_expr(body)
    if form == "lit":
        return _strict_expr(to_json(parse_expr(obj)))
    if form == "record" and isinstance(body, dict):
        return {"record": {k: v if k == "$schema" else _strict_expr(v) for k, v in body.items()}}
    if form in ("list", "set") and isinstance(body, list):
        return {form: [_strict_expr(v) for v in body]}
    if form == "map" and isinstance(body, list):
        return {"map": [_strict_entry(e) for e in body]}
    if form == "variant" and isinstance(body, dict) and "value" in body:
        return {"variant": {**body, "value": _strict_expr(body["value"])}}
    return obj


def _strict_entry(entry: Any) -> Any:
    if isinstance(entry, dict) and set(entry) == {"key", "value"}:
        return {"key": _strict_expr(entry["key"]), "value": _strict_expr(entry["value"])}
    return entry


def _expr_or_value(obj: Any) -> Any:
    return _strict_expr(obj) if is_expr_form(obj) else obj


def _type(raw: Any) -> Any:
    return type_to_obj(parse_type(raw))


def _schema_name(raw: Any, name: str, pointer: str, out: NormalizedAir) -> Any:
    """A position where AgentOS takes a schema name: the name, else our inline type, reported."""
    canonical = _type(raw)
    if set(canonical) == {"ref"}:
        return canonical["ref"]
    detail = "an inline type where AgentOS takes a schema name (SchemaRef): kept"
    out.unmapped.append(Unmapped(name, pointer, detail))
    return canonical


_STEP_STRICT: Final = {"await_receipt": ("for",), "await_event": ("where",)}
_STEP_EXPR_OR_VALUE: Final = {
    "emit_effect": ("params", "idempotency_key"),
    "assign": ("expr",),
    "end": ("result",),
    "raise_event": ("value",),
}


def _routed(air: LoadedAir, step: dict[str, Any]) -> dict[str, Any] | None:
    """Our ``raise_event {reducer, key?, event}`` as AgentOS's routed ``{event, value}``, when
    the manifest delivers it the same way: its event is a record Expr naming its schema S
    (``$schema``), S has one route, to that reducer, and no trigger, and the route's
    ``key_field`` (if any) is an Expr of the record the same as ``key`` (none without one).
    None otherwise."""
    event = step.get("event")
    body = event.get("record") if isinstance(event, dict) and len(event) == 1 else None
    if not isinstance(body, dict) or not isinstance(body.get("$schema"), str):
        return None
    schema = body["$schema"]
    routes = [r for r in air.manifest.routing.events if r.event == schema]
    if len(routes) != 1 or routes[0].reducer != step["reducer"]:
        return None
    if any(t.event == schema for t in air.manifest.triggers):
        return None
    field_name = routes[0].key_field
    if field_name is None:
        if step.get("key") is not None:
            return None
    elif not (
        "key" in step
        and field_name in body
        and _canonical_expr(body[field_name]) == _canonical_expr(step["key"])
    ):
        return None
    value = {k: v for k, v in body.items() if k != "$schema"}
    data = {k: v for k, v in step.items() if k not in ("reducer", "key", "event")}
    return {**data, "event": schema, "value": _strict_expr({"record": value})}


def _canonical_expr(raw: Any) -> Any:
    return to_json(parse_expr(raw))


def _step(
    air: LoadedAir, step: dict[str, Any], name: str, pointer: str, out: NormalizedAir
) -> dict[str, Any]:
    op = step.get("op")
    if op == "raise_event" and "reducer" in step:
        routed = _routed(air, step)
        if routed is not None:
            detail = (
                "raise_event {reducer, key, event} (ours) written as the routed {event, value}: "
                "the manifest routes its schema to that reducer alone, by the same key"
            )
            out.rewritten.append(Unmapped(name, pointer, detail))
            return routed
        detail = (
            "raise_event {reducer, key?, event} (ours): AgentOS's last v1 has only the routed "
            "{event, value}; kept"
        )
        out.unmapped.append(Unmapped(name, pointer, detail))
        return step
    data = dict(step)
    for key in _STEP_STRICT.get(str(op), ()):
        if key in data:
            data[key] = _strict_expr(data[key])
    for key in _STEP_EXPR_OR_VALUE.get(str(op), ()):
        if key in data:
            data[key] = _expr_or_value(data[key])
    return data


def _plan(air: LoadedAir, raw: dict[str, Any], name: str, out: NormalizedAir) -> dict[str, Any]:
    data = dict(raw)
    if "locals" in data:
        data["locals"] = {
            var: _schema_name(t, name, f"/locals/{var}", out) for var, t in raw["locals"].items()
        }
    data["steps"] = [
        _step(air, s, name, f"/steps/{i}", out) if isinstance(s, dict) else s
        for i, s in enumerate(raw["steps"])
    ]
    if "edges" in data:
        data["edges"] = [
            {**e, "when": _strict_expr(e["when"])} if "when" in e else e for e in raw["edges"]
        ]
    if "invariants" in data:
        data["invariants"] = [_strict_expr(i) for i in raw["invariants"]]
    return data


def _module(air: LoadedAir, raw: dict[str, Any], name: str, out: NormalizedAir) -> dict[str, Any]:
    data = {k: v for k, v in raw.items() if k != "wasm"}
    wasm = air.wasm_bytes.get(name)
    if wasm is not None:
        data["wasm_hash"] = "sha256:" + hashlib.sha256(wasm).hexdigest()
    elif data.get("wasm_hash") is None:
        detail = "names no wasm: AgentOS requires wasm_hash (its build fills it in); left out"
        out.unmapped.append(Unmapped(name, "/wasm_hash", detail))
    elif not str(data["wasm_hash"]).startswith("sha256:"):
        detail = "wasm_hash is blake3 and the bytes were not given: AgentOS's is sha256; kept"
        out.unmapped.append(Unmapped(name, "/wasm_hash", detail))
    if "key_schema" in data:
        canonical = _type(raw["key_schema"])
        if set(canonical) == {"ref"}:
            data["key_schema"] = canonical["ref"]
        else:
            lifted = out.lifted[name] = _key_schema_name(air, name)
            data["key_schema"] = lifted
            detail = f"inline key_schema lifted into the defschema {lifted} (AgentOS's SchemaRef)"
            out.rewritten.append(Unmapped(name, "/key_schema", detail))
    slots = raw.get("abi", {}).get("reducer", {}).get("cap_slots", {})
    bound = air.manifest.module_bindings.get(name)
    grants = {g.name: g.cap for g in air.manifest.defaults.cap_grants}
    for slot, cap in slots.items():
        if "/" not in cap:
            continue
        at = f"/abi/reducer/cap_slots/{slot}"
        grant = None if bound is None else bound.slots.get(slot)
        if grant is not None and grants.get(grant) == cap and cap in air.caps:
            data = _with_slot(data, slot, air.caps[cap].cap_type)
            detail = (
                f"cap slot {slot} names the defcap {cap}: written as its cap type, which the "
                f"manifest's binding to grant {grant} (of {cap}) makes as narrow"
            )
            out.rewritten.append(Unmapped(name, at, detail))
            continue
        detail = f"cap slot {slot} names a defcap ({cap}) where AgentOS takes a cap type: kept"
        out.unmapped.append(Unmapped(name, at, detail))
    return data


def _with_slot(data: dict[str, Any], slot: str, cap_type: str) -> dict[str, Any]:
    reducer = data["abi"]["reducer"]
    slots = {**reducer["cap_slots"], slot: cap_type}
    return {**data, "abi": {**data["abi"], "reducer": {**reducer, "cap_slots": slots}}}


def _key_schema_name(air: LoadedAir, module: str) -> str:
    """``ns/NameKey@v`` for module ``ns/Name@v`` (``Key2``, ``Key3``... if the name is taken)."""
    stem, _, version = module.rpartition("@")
    n = 1
    while True:
        name = f"{stem}Key{'' if n == 1 else n}@{version}"
        if name not in air.defs:
            return name
        n += 1


def _implied_method(air: LoadedAir, when: dict[str, Any]) -> bool:
    """A rule's ``method`` that its ``cap_name``'s grant already implies: the grant allows that
    method alone (``verbs``/``methods``), and the capability check runs before the policy."""
    grant = next(
        (g for g in air.manifest.defaults.cap_grants if g.name == when.get("cap_name")), None
    )
    if grant is None or not isinstance(grant.params, dict) or "record" in grant.params:
        return False
    verbs = {str(v).upper() for f in ("verbs", "methods") for v in grant.params.get(f) or []}
    given = [grant.params.get(f) for f in ("verbs", "methods") if grant.params.get(f) is not None]
    return bool(given) and verbs == {str(when["method"]).upper()}


def _policy(air: LoadedAir, raw: dict[str, Any], name: str, out: NormalizedAir) -> dict[str, Any]:
    raw = {**raw, "rules": [dict(r) for r in raw["rules"]]}
    for i, rule in enumerate(raw["rules"]):
        if "method" in rule["when"] and _implied_method(air, rule["when"]):
            rule["when"] = {k: v for k, v in rule["when"].items() if k != "method"}
            detail = (
                "match field 'method' left out: the grant it names allows that method alone, "
                "and the capability check runs before the policy"
            )
            out.rewritten.append(Unmapped(name, f"/rules/{i}/when/method", detail))
        for key in _POLICY_OURS:
            if key in rule["when"]:
                detail = f"match field {key!r} (ours): AgentOS's Match has none; kept"
                out.unmapped.append(Unmapped(name, f"/rules/{i}/when/{key}", detail))
        if rule["decision"] == "require_approval":
            detail = "decision require_approval (ours): AgentOS's v1 has allow and deny; kept"
            out.unmapped.append(Unmapped(name, f"/rules/{i}/decision", detail))
    return raw


def _def(air: LoadedAir, loc: Located, out: NormalizedAir) -> dict[str, Any]:
    model, raw, name = loc.model, loc.raw, loc.model.name
    if isinstance(model, DefSchema):
        return {**raw, "type": _type(raw["type"])}
    if isinstance(model, DefCap):
        return {**raw, "schema": _type(raw["schema"])}
    if isinstance(model, DefModule):
        return _module(air, raw, name, out)
    if isinstance(model, DefPlan):
        return _plan(air, raw, name, out)
    if isinstance(model, DefPolicy):
        return _policy(air, raw, name, out)
    if isinstance(model, DefEffect):
        detail = (
            "defeffect in our shape (effect_kind, origins, receipt_event); AgentOS's is "
            "{kind, origin_scope} and our loader reads only ours: kept"
        )
        out.unmapped.append(Unmapped(name, "", detail))
        return dict(raw)
    if isinstance(model, DefSecret) and str(raw.get("expected_digest", "")).startswith("blake3:"):
        detail = "expected_digest is blake3: AgentOS's Hash is sha256; kept"
        out.unmapped.append(Unmapped(name, "/expected_digest", detail))
    return dict(raw)


def _names(*names: str | None) -> set[str]:
    return {n for n in names if n is not None}


def _type_names(raw: Any) -> set[str]:
    return set() if raw is None else type_refs(parse_type(raw))


def _def_refs(air: LoadedAir, model: Any) -> set[str]:
    """The defs ``model`` names: schemas in its types and fields, effects by their kind,
    defcaps (a plan's Exprs name none but ``$schema``, which only our ``raise_event`` has)."""
    effects = {kind: e.name for kind, e in air.effects.items()}
    if isinstance(model, DefSchema):
        return _type_names(model.type)
    if isinstance(model, DefCap):
        return _type_names(model.schema_)
    if isinstance(model, DefEffect):
        return _names(model.params_schema, model.receipt_schema, model.receipt_event)
    if isinstance(model, DefModule):
        abi = model.abi.reducer
        names = _names(abi.state, abi.event, abi.annotations) | _type_names(model.key_schema)
        names |= {effects[k] for k in abi.effects_emitted if k in effects}
        return names | {c for c in abi.cap_slots.values() if "/" in c}
    if isinstance(model, DefPlan):
        names = _names(model.input, model.output)
        for local in model.locals.values():
            names |= _type_names(local)
        for step in model.steps:
            if step.op == "emit_effect" and step.kind in effects:
                names.add(effects[step.kind])
            elif step.op == "await_event":
                names.add(step.event)
        return names
    if isinstance(model, DefPolicy):
        kinds = {r.when.effect_kind for r in model.rules}
        return {effects[k] for k in kinds if k in effects}
    return set()


def _listed(air: LoadedAir, written: list[str]) -> set[str]:
    """Every def written, and each built-in they or the manifest name, and theirs in turn:
    AgentOS's manifest lists the built-ins a world uses."""
    manifest = air.manifest
    named = {
        item if isinstance(item, str) else item.name
        for list_name in _LISTS.values()
        for item in getattr(manifest, list_name)
    }
    named |= {g.cap for g in manifest.defaults.cap_grants}
    named |= {r.event for r in manifest.routing.events} | {t.event for t in manifest.triggers}
    seen: set[str] = set()
    todo = [*written, *named]
    while todo:
        name = todo.pop()
        if name in seen or name not in air.defs:
            continue
        seen.add(name)
        todo.extend(_def_refs(air, air.defs[name].model))
    return seen


def _manifest(
    air: LoadedAir, written: list[str], out: NormalizedAir, changed: dict[str, bytes]
) -> dict[str, Any]:
    """The manifest with its lists in full (``_listed``, and each lifted key schema), each
    entry ``{name, hash}`` (sha256 over our canonical CBOR of the def as written: ``changed``
    for those rewritten)."""
    manifest = air.manifest
    listed = _listed(air, written) | set(out.lifted.values())
    lists: dict[str, list[dict[str, str]]] = {k: [] for k in _LISTS.values() if k != "secrets"}
    for def_name in sorted(listed):
        encoded = changed.get(def_name)
        if encoded is None:
            encoded = air.def_cbor[def_name]
        digest = "sha256:" + hashlib.sha256(encoded).hexdigest()
        model = air.defs[def_name].model if def_name in air.defs else DefSchema
        kind = _LISTS[model if isinstance(model, type) else type(model)]
        lists.setdefault(kind, []).append({"name": def_name, "hash": digest})
    data: dict[str, Any] = {"$kind": "manifest", "air_version": manifest.air_version, **lists}
    dumped = manifest.model_dump(by_alias=True, exclude_defaults=True)
    for key in ("routing", "triggers", "defaults", "module_bindings"):
        if key in dumped:
            data[key] = dumped[key]
    for i, grant in enumerate(manifest.defaults.cap_grants):
        data["defaults"]["cap_grants"][i].setdefault("params", {})  # AgentOS requires it
        if grant.budget is not None:
            detail = "cap grant budget (ours): AgentOS's CapGrant has none; kept"
            out.unmapped.append(Unmapped("manifest", f"/defaults/cap_grants/{i}/budget", detail))
    if manifest.governance is not None and manifest.governance.apply_requires:
        data["governance"] = dumped["governance"]
        detail = "governance.apply_requires (ours): AgentOS's manifest has none; kept"
        out.unmapped.append(Unmapped("manifest", "/governance", detail))
    return data


def normalize_air(air: LoadedAir) -> NormalizedAir:
    """The world's own defs (not the built-ins) and its manifest in AgentOS's strict form,
    by output file, each in name order; and what was kept as ours."""
    out = NormalizedAir()
    written = []
    docs: dict[str, dict[str, Any]] = {}
    for name in sorted(air.defs):
        loc = air.defs[name]
        if loc.builtin:
            continue
        written.append(name)
        docs[name] = _def(air, loc, out)
        out.files.setdefault(FILES[type(loc.model)], []).append(docs[name])
    for module, schema in out.lifted.items():
        docs[schema] = {
            "$kind": "defschema",
            "name": schema,
            "type": _type(air.defs[module].raw["key_schema"]),
        }
        out.files.setdefault(FILES[DefSchema], []).append(docs[schema])
    out.files[FILES[DefSchema]] = sorted(out.files.get(FILES[DefSchema], []), key=_by_name)
    if not out.files[FILES[DefSchema]]:
        del out.files[FILES[DefSchema]]
    changed = {
        n: _cbor(docs[n]) for n in {u.name for u in out.rewritten} | set(out.lifted.values())
    }
    out.files["manifest.air.json"] = _manifest(air, written, out, changed)
    return out


def _by_name(doc: dict[str, Any]) -> str:
    return str(doc["name"])


def _cbor(doc: dict[str, Any]) -> bytes:
    """Our canonical CBOR of a def as written (for its manifest list hash)."""
    kind = DefPureModule if doc.get("module_kind") == "pure" else AIR_KINDS[doc["$kind"]]
    model = kind.model_validate(doc)
    wasm_hash = doc.get("wasm_hash") if isinstance(model, DefModule) else None
    return cbor.dumps(def_canonical(model, wasm_hash))
