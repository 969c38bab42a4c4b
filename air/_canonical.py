"""Canonical forms of AIR defs and the manifest, and their content hashes.

The canonical form is what gets hashed and stored (``<world>/air/`` keeps it as canonical CBOR).
Two authorings that mean the same thing produce the same form: types in their one canonical
object, expressions through ``air.expr.to_json``, literal values normalised by their schema,
plan steps sorted by id and edges by (from, to), set-like lists sorted and deduplicated.
Order that carries meaning is kept: routing entries (delivery order), triggers, policy rules
(first match wins), plan invariants. ``air_version`` is always written (``"1"`` when the author
left it out), so the two authorings hash the same; a ``$schema`` in a record Expr is kept (it
picks the raised event's schema). A plain-JSON literal in a step's ExprOrValue position (AgentOS's
``"params": {"method": "GET", ...}``) arrives here already replaced by its equivalent Expr
(``air._plan_checks``), so it hashes as that constant written as an Expr does.
A ``defsecret``'s canonical form sorts and deduplicates ``allowed_caps`` and ``allowed_plans``
and leaves out what is absent or empty; the manifest's ``secrets`` list is written only when
the world has a secret, so every manifest without one keeps its hash.
"""

from __future__ import annotations

from typing import Any

from air import cbor, expr
from air._diagnostics import Diagnostics
from air._loaded import LoadedAir, Located
from air._model import (
    DefCap,
    DefEffect,
    DefModule,
    DefPlan,
    DefPolicy,
    DefPureModule,
    DefSchema,
    DefSecret,
    Manifest,
)
from air.errors import CborError, ValueMismatch
from air.types import parse_type, type_to_obj
from air.values import normalise

__all__ = ["def_canonical", "fill_hashes", "manifest_canonical"]


def _drop_none(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if v is not None and v != [] and v != {}}


def _type(raw: Any) -> Any:
    return type_to_obj(parse_type(raw))


def _expr(raw: Any) -> Any:
    return None if raw is None else expr.to_json(expr.parse_expr(raw))


_STEP_EXPRS: dict[str, tuple[str, ...]] = {
    "emit_effect": ("params", "idempotency_key"),
    "await_receipt": ("for",),
    "raise_event": ("key", "event", "value"),
    "await_event": ("where",),
    "assign": ("expr",),
    "end": ("result",),
}
"""The fields of each step op that hold an Expr (``await_event.event`` is a schema name, and so
is a routed ``raise_event``'s ``event``). A field left out (``idempotency_key``, ``value``) is not
written, so every plan without one keeps its hash."""


def _step(step: Any) -> dict[str, Any]:
    data: dict[str, Any] = step.model_dump(by_alias=True, exclude_none=True)
    for field_name in _STEP_EXPRS[step.op]:
        if field_name == "event" and getattr(step, "routed", False):
            continue
        if field_name in data:
            data[field_name] = _expr(data[field_name])
    return data


def _plan(model: DefPlan) -> dict[str, Any]:
    edges = [
        _drop_none({"from": e.from_step, "to": e.to, "when": _expr(e.when)}) for e in model.edges
    ]
    return _drop_none(
        {
            "$kind": "defplan",
            "name": model.name,
            "input": model.input,
            "output": model.output,
            "locals": {k: _type(v) for k, v in model.locals.items()},
            "steps": sorted((_step(s) for s in model.steps), key=lambda s: str(s["id"])),
            "edges": sorted(edges, key=lambda e: (e["from"], e["to"], cbor.dumps(e.get("when")))),
            "required_caps": sorted(set(model.required_caps)),
            "allowed_effects": sorted(set(model.allowed_effects)),
            "invariants": [_expr(i) for i in model.invariants],
        }
    )


def _module(model: DefModule, wasm_hash: str | None) -> dict[str, Any]:
    abi = model.abi.reducer
    return _drop_none(
        {
            "$kind": "defmodule",
            "name": model.name,
            "module_kind": model.module_kind,
            "wasm_hash": wasm_hash,
            "key_schema": None if model.key_schema is None else _type(model.key_schema),
            "abi": {
                "reducer": _drop_none(
                    {
                        "state": abi.state,
                        "event": abi.event,
                        "annotations": abi.annotations,
                        "effects_emitted": sorted(set(abi.effects_emitted)),
                        "cap_slots": dict(abi.cap_slots),
                    }
                )
            },
        }
    )


def def_canonical(model: Any, wasm_hash: str | None = None) -> dict[str, Any]:
    """The canonical form of one def (not the manifest)."""
    if isinstance(model, DefSchema):
        return {"$kind": "defschema", "name": model.name, "type": _type(model.type)}
    if isinstance(model, DefModule):
        return _module(model, wasm_hash)
    if isinstance(model, DefPureModule):
        abi = model.abi.pure
        pure = {"input": abi.input, "output": abi.output}
        return {
            "$kind": "defmodule",
            "name": model.name,
            "module_kind": "pure",
            "abi": {"pure": pure},
        }
    if isinstance(model, DefPlan):
        return _plan(model)
    if isinstance(model, DefCap):
        return {
            "$kind": "defcap",
            "name": model.name,
            "cap_type": model.cap_type,
            "schema": _type(model.schema_),
        }
    if isinstance(model, DefEffect):
        data = model.model_dump(by_alias=True, exclude_none=True)
        data["origins"] = sorted(set(model.origins))
        return data
    if isinstance(model, DefSecret):
        return _drop_none(
            {
                "$kind": "defsecret",
                "name": model.name,
                "binding_id": model.binding_id,
                "expected_digest": model.expected_digest,
                "allowed_caps": sorted(set(model.allowed_caps)),
                "allowed_plans": sorted(set(model.allowed_plans)),
            }
        )
    assert isinstance(model, DefPolicy)
    return model.model_dump(by_alias=True, exclude_none=True)


_LISTS = ("schemas", "modules", "plans", "caps", "policies", "effects", "secrets")
"""The manifest's lists of defs, by kind."""


def manifest_canonical(air: LoadedAir, manifest: Manifest) -> dict[str, Any]:
    lists: dict[str, list[Any]] = {k: [] for k in _LISTS}
    kind_list: dict[type, str] = {
        DefSchema: "schemas",
        DefModule: "modules",
        DefPureModule: "modules",
        DefPlan: "plans",
        DefCap: "caps",
        DefPolicy: "policies",
        DefEffect: "effects",
        DefSecret: "secrets",  # absent when empty (``_drop_none``): other manifests keep hashes
    }
    for name in sorted(air.defs):
        entry = {"name": name, "hash": cbor.hash_to_raw(air.def_hashes[name])}
        lists[kind_list[type(air.defs[name].model)]].append(entry)
    grants = []
    for grant in sorted(manifest.defaults.cap_grants, key=lambda g: g.name):
        params = normalise(parse_type(air.defs[grant.cap].model.schema_), grant.params, air.schemas)
        budget = None if grant.budget is None else grant.budget.model_dump(exclude_none=True)
        grants.append(
            _drop_none(
                {
                    "name": grant.name,
                    "cap": grant.cap,
                    "params": params,
                    "expiry_ns": grant.expiry_ns,
                    "budget": budget,
                }
            )
        )
    routing: dict[str, Any] = {
        "events": [r.model_dump(exclude_none=True) for r in manifest.routing.events]
    }
    if manifest.routing.inboxes:  # absent when empty, so older manifests keep their hashes
        routing["inboxes"] = [i.model_dump() for i in manifest.routing.inboxes]
    out = _drop_none(
        {
            "$kind": "manifest",
            "air_version": manifest.air_version,
            **lists,
            "routing": routing,
            "triggers": [t.model_dump(exclude_none=True) for t in manifest.triggers],
            "defaults": _drop_none({"policy": manifest.defaults.policy, "cap_grants": grants}),
            "module_bindings": {
                m: {"slots": dict(b.slots)} for m, b in manifest.module_bindings.items()
            },
        }
    )
    needs = [] if manifest.governance is None else manifest.governance.apply_requires
    if needs:  # absent when nothing is required, so other manifests keep their hashes
        out["governance"] = {"apply_requires": sorted(set(needs))}
    return out


def _check_declared_hashes(air: LoadedAir, manifest_loc: Located, diags: Diagnostics) -> None:
    for field_name in _LISTS:
        for i, item in enumerate(getattr(air.manifest, field_name)):
            if isinstance(item, str) or item.hash is None or item.name not in air.def_hashes:
                continue
            if not item.hash.startswith("blake3:"):  # AgentOS's sha256 of its own CBOR
                diags.add(
                    manifest_loc.file,
                    f"{manifest_loc.pointer}/{field_name}/{i}/hash",
                    "air.hash.foreign",
                    f"{item.name}'s hash {item.hash[:16]}… is not a blake3 hash of this build's "
                    "canonical form: not checked",
                    "warning",
                )
                continue
            if item.hash != air.def_hashes[item.name]:
                diags.add(
                    manifest_loc.file,
                    f"{manifest_loc.pointer}/{field_name}/{i}/hash",
                    "air.hash.mismatch",
                    f"{item.name} hashes to {air.def_hashes[item.name]}, not {item.hash}",
                )


def fill_hashes(air: LoadedAir, manifest_loc: Located, diags: Diagnostics) -> None:
    """Compute every def's canonical CBOR and hash, then the manifest's."""
    for name, loc in air.defs.items():
        try:
            data = cbor.dumps(def_canonical(loc.model, air.wasm_hashes.get(name)))
        except (ValueMismatch, CborError) as exc:  # validation should have caught it: defence
            diags.add(
                loc.file, loc.pointer + exc.pointer.rstrip("/"), "air.value.mismatch", exc.detail
            )
            continue
        air.def_cbor[name] = data
        air.def_hashes[name] = cbor.content_hash(data)
    _check_declared_hashes(air, manifest_loc, diags)
    if diags.errors:
        return
    air.manifest_cbor = cbor.dumps(manifest_canonical(air, air.manifest))
    air.manifest_hash = cbor.content_hash(air.manifest_cbor)
