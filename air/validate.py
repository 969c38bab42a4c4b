"""Semantic validation of AIR: cross-references, routing, plans, effects, capabilities, wasm.

Runs after shapes and names are known (``air.loader``). Each check records diagnostics with a
stable code (``air.diagnostics``) and carries on. Checks that need a def that failed to parse are
skipped for that def rather than reported twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from air import cbor, expr
from air.diagnostics import Diagnostics, escape_pointer
from air.errors import ExprError, ValueMismatch
from air.model import (
    AwaitEvent,
    AwaitReceipt,
    DefCap,
    DefEffect,
    DefModule,
    DefPlan,
    DefPolicy,
    DefSchema,
    EmitEffect,
    End,
    RaiseEvent,
)
from air.types import Record, TypeNode, parse_type, resolve, type_to_obj
from air.values import normalise

if TYPE_CHECKING:
    from air.loader import InspectWasm, LoadedAir, Located, ReadWasm

__all__ = ["REQUIRED_EXPORTS", "validate"]

REQUIRED_EXPORTS = {"memory": "memory", "alloc": "func", "step": "func"}


@dataclass
class _Ctx:
    air: LoadedAir
    diags: Diagnostics

    def loc(self, name: str) -> Located:
        return self.air.defs[name]

    def is_kind(self, name: str, model_type: type) -> bool:
        return name in self.air.defs and isinstance(self.air.defs[name].model, model_type)

    def need(self, name: str, model_type: type, file: str, pointer: str, code: str) -> bool:
        if self.is_kind(name, model_type):
            return True
        self.diags.add(file, pointer, code, f"unknown {code.rsplit('_', 1)[-1]} {name}")
        return False

    def need_schema(self, name: str, file: str, pointer: str) -> bool:
        if name in self.air.schemas:
            return True
        if not self.is_kind(name, DefSchema):
            self.diags.add(file, pointer, "air.ref.unknown_schema", f"unknown schema {name}")
        return False


def validate(
    air: LoadedAir,
    manifest: Located,
    diags: Diagnostics,
    read_wasm: ReadWasm | None,
    inspect_wasm: InspectWasm | None,
) -> None:
    ctx = _Ctx(air, diags)
    _manifest_lists(ctx, manifest)
    for name, loc in air.defs.items():
        if isinstance(loc.model, DefModule):
            _module(ctx, name, loc, read_wasm, inspect_wasm)
        elif isinstance(loc.model, DefCap):
            _type_field(ctx, loc, loc.model.schema_, "/schema")
        elif isinstance(loc.model, DefEffect):
            for field_name in ("params_schema", "receipt_schema"):
                ctx.need_schema(
                    getattr(loc.model, field_name), loc.file, f"{loc.pointer}/{field_name}"
                )
    _routing(ctx, manifest)
    _defaults(ctx, manifest)
    correlated = {t.plan for t in manifest.model.triggers if t.correlate_by}
    for name, loc in air.defs.items():
        if isinstance(loc.model, DefPlan):
            _plan(ctx, loc, correlated_by_trigger=name in correlated)
    _triggers(ctx, manifest)


def _type_field(ctx: _Ctx, loc: Located, raw: Any, pointer: str) -> TypeNode | None:
    try:
        node = parse_type(raw, loc.pointer + pointer)
    except ValueMismatch as exc:
        ctx.diags.add(loc.file, exc.pointer, "air.type.invalid", exc.detail)
        return None
    from air.types import type_refs

    ok = all(
        ctx.need_schema(ref, loc.file, loc.pointer + pointer) for ref in sorted(type_refs(node))
    )
    return node if ok else None


def _manifest_lists(ctx: _Ctx, manifest: Located) -> None:
    lists = {
        "schemas": (DefSchema, "air.ref.unknown_schema"),
        "modules": (DefModule, "air.ref.unknown_module"),
        "plans": (DefPlan, "air.ref.unknown_plan"),
        "caps": (DefCap, "air.ref.unknown_cap"),
        "policies": (DefPolicy, "air.ref.unknown_policy"),
        "effects": (DefEffect, "air.ref.unknown_effect"),
    }
    for field_name, (model_type, code) in lists.items():
        for i, item in enumerate(getattr(manifest.model, field_name)):
            name = item if isinstance(item, str) else item.name
            ctx.need(name, model_type, manifest.file, f"{manifest.pointer}/{field_name}/{i}", code)


def _module(
    ctx: _Ctx, name: str, loc: Located, read_wasm: ReadWasm | None, inspect: InspectWasm | None
) -> None:
    model: DefModule = loc.model
    abi = model.abi.reducer
    base = f"{loc.pointer}/abi/reducer"
    for field_name in ("state", "event", "annotations"):
        ref = getattr(abi, field_name)
        if ref is not None:
            ctx.need_schema(ref, loc.file, f"{base}/{field_name}")
    if model.key_schema is not None:
        key = _type_field(ctx, loc, model.key_schema, "/key_schema")
        if key is not None:
            ctx.air.key_types[name] = key
    effects = ctx.air.effects
    for i, kind in enumerate(abi.effects_emitted):
        _effect_origin(ctx, effects, kind, "reducer", loc.file, f"{base}/effects_emitted/{i}")
    for slot, cap in abi.cap_slots.items():
        ctx.need(
            cap, DefCap, loc.file, f"{base}/cap_slots/{escape_pointer(slot)}", "air.ref.unknown_cap"
        )
    _wasm(ctx, name, loc, read_wasm, inspect)


def _effect_origin(
    ctx: _Ctx, effects: dict[str, DefEffect], kind: str, origin: str, file: str, pointer: str
) -> DefEffect | None:
    effect = effects.get(kind)
    if effect is None:
        ctx.diags.add(
            file, pointer, "air.ref.unknown_effect", f"no defeffect provides effect kind {kind!r}"
        )
        return None
    if origin not in effect.origins:
        allowed = " or ".join(effect.origins)
        ctx.diags.add(
            file,
            pointer,
            "air.effect.origin",
            f"effect {kind} may be emitted by {allowed}, not a {origin}",
        )
        return None
    return effect


def _wasm(
    ctx: _Ctx, name: str, loc: Located, read_wasm: ReadWasm | None, inspect: InspectWasm | None
) -> None:
    """Hash and inspect the module's binary. With no ``read_wasm`` the caller asked for no
    binaries: nothing is read or reported, and a written ``wasm_hash`` is taken as it is."""
    from air.loader import resolve_relative

    model: DefModule = loc.model
    if model.wasm is None and model.wasm_hash is None:
        ctx.diags.add(
            loc.file,
            loc.pointer,
            "air.module.wasm_missing",
            f"module {name} names neither a wasm file nor a wasm_hash",
        )
        return
    data = read_wasm(resolve_relative(loc.file, model.wasm)) if model.wasm and read_wasm else None
    if data is None:
        if model.wasm_hash is not None:
            ctx.air.wasm_hashes[name] = model.wasm_hash
        elif read_wasm is not None:
            ctx.diags.add(
                loc.file,
                f"{loc.pointer}/wasm",
                "air.module.wasm_missing",
                f"wasm file {model.wasm} of module {name} is missing or cannot be read",
            )
        return
    actual = cbor.content_hash(data)
    if model.wasm_hash is not None and model.wasm_hash != actual:
        ctx.diags.add(
            loc.file,
            f"{loc.pointer}/wasm_hash",
            "air.hash.mismatch",
            f"wasm_hash {model.wasm_hash} but {model.wasm} hashes to {actual}",
        )
    ctx.air.wasm_hashes[name] = actual
    ctx.air.wasm_bytes[name] = data
    if inspect is not None:
        _inspect(ctx, loc, inspect(data))


def _inspect(ctx: _Ctx, loc: Located, info: Any) -> None:
    pointer = f"{loc.pointer}/wasm"
    if info.error is not None:
        ctx.diags.add(
            loc.file, pointer, "air.module.wasm_invalid", f"not a valid wasm module: {info.error}"
        )
        return
    if info.imports:
        ctx.diags.add(
            loc.file,
            pointer,
            "air.module.imports",
            f"reducers import nothing; found {', '.join(info.imports)}",
        )
    missing = [n for n, kind in REQUIRED_EXPORTS.items() if info.exports.get(n) != kind]
    if missing:
        ctx.diags.add(
            loc.file, pointer, "air.module.exports", f"missing ABI exports: {', '.join(missing)}"
        )


def _record_field(ctx: _Ctx, schema: str, field_name: str) -> TypeNode | None:
    try:
        node = resolve(ctx.air.schemas[schema], ctx.air.schemas)
    except ValueMismatch:
        return None
    if not isinstance(node, Record):
        return None
    return node.field_map().get(field_name)


def _same_type(ctx: _Ctx, a: TypeNode, b: TypeNode) -> bool:
    try:
        return bool(
            type_to_obj(resolve(a, ctx.air.schemas)) == type_to_obj(resolve(b, ctx.air.schemas))
        )
    except ValueMismatch:
        return False


def _routing(ctx: _Ctx, manifest: Located) -> None:
    for i, route in enumerate(manifest.model.routing.events):
        at = f"{manifest.pointer}/routing/events/{i}"
        ok_event = ctx.need_schema(route.event, manifest.file, f"{at}/event")
        if not ctx.need(
            route.reducer, DefModule, manifest.file, f"{at}/reducer", "air.ref.unknown_module"
        ):
            continue
        keyed = ctx.loc(route.reducer).model.key_schema is not None
        if route.key_field is not None and not keyed:
            ctx.diags.add(
                manifest.file,
                f"{at}/key_field",
                "air.route.keyed_to_unkeyed",
                f"route has key_field but {route.reducer} has no key_schema",
            )
        elif route.key_field is None and keyed:
            ctx.diags.add(
                manifest.file,
                at,
                "air.route.unkeyed_to_keyed",
                f"{route.reducer} is keyed; the route needs a key_field",
            )
        elif route.key_field is not None and ok_event:
            _route_key(ctx, manifest, at, route)


def _route_key(ctx: _Ctx, manifest: Located, at: str, route: Any) -> None:
    field_type = _record_field(ctx, route.event, route.key_field)
    if field_type is None:
        ctx.diags.add(
            manifest.file,
            f"{at}/key_field",
            "air.route.key_field_missing",
            f"field {route.key_field!r} not in schema {route.event}",
        )
        return
    key_type = ctx.air.key_types.get(route.reducer)
    if key_type is not None and not _same_type(ctx, field_type, key_type):
        ctx.diags.add(
            manifest.file,
            f"{at}/key_field",
            "air.route.key_type_mismatch",
            f"field {route.key_field!r} does not have {route.reducer}'s key_schema type",
        )


def _triggers(ctx: _Ctx, manifest: Located) -> None:
    for i, trigger in enumerate(manifest.model.triggers):
        at = f"{manifest.pointer}/triggers/{i}"
        ok_event = ctx.need_schema(trigger.event, manifest.file, f"{at}/event")
        if not ctx.need(trigger.plan, DefPlan, manifest.file, f"{at}/plan", "air.ref.unknown_plan"):
            continue
        if ok_event and ctx.loc(trigger.plan).model.input != trigger.event:
            ctx.diags.add(
                manifest.file,
                f"{at}/event",
                "air.trigger.input_mismatch",
                f"{trigger.plan} takes {ctx.loc(trigger.plan).model.input}, not {trigger.event}",
            )
        if (
            ok_event
            and trigger.correlate_by
            and _record_field(ctx, trigger.event, trigger.correlate_by) is None
        ):
            ctx.diags.add(
                manifest.file,
                f"{at}/correlate_by",
                "air.trigger.correlate_missing",
                f"field {trigger.correlate_by!r} not in schema {trigger.event}",
            )


def _defaults(ctx: _Ctx, manifest: Located) -> None:
    model = manifest.model
    base = f"{manifest.pointer}/defaults"
    if model.defaults.policy is not None:
        ctx.need(
            model.defaults.policy,
            DefPolicy,
            manifest.file,
            f"{base}/policy",
            "air.ref.unknown_policy",
        )
    for i, grant in enumerate(model.defaults.cap_grants):
        at = f"{base}/cap_grants/{i}"
        if not ctx.need(grant.cap, DefCap, manifest.file, f"{at}/cap", "air.ref.unknown_cap"):
            continue
        cap_loc = ctx.loc(grant.cap)
        try:
            node = parse_type(cap_loc.model.schema_)
            normalise(node, grant.params, ctx.air.schemas, f"{at}/params")
        except ValueMismatch as exc:
            ctx.diags.add(manifest.file, exc.pointer, "air.value.mismatch", exc.detail)
    grants = {g.name for g in model.defaults.cap_grants}
    for module, binding in model.module_bindings.items():
        at = f"{manifest.pointer}/module_bindings/{escape_pointer(module)}"
        if not ctx.need(module, DefModule, manifest.file, at, "air.ref.unknown_module"):
            continue
        slots = ctx.loc(module).model.abi.reducer.cap_slots
        for slot, grant in binding.slots.items():
            if slot not in slots:
                ctx.diags.add(
                    manifest.file,
                    f"{at}/slots/{escape_pointer(slot)}",
                    "air.ref.unknown_slot",
                    f"{module} declares no cap slot {slot!r}",
                )
            if grant not in grants:
                ctx.diags.add(
                    manifest.file,
                    f"{at}/slots/{escape_pointer(slot)}",
                    "air.ref.unknown_cap_grant",
                    f"no cap grant named {grant!r} in defaults.cap_grants",
                )


# --- plans -----------------------------------------------------------------------------------


def _plan(ctx: _Ctx, loc: Located, correlated_by_trigger: bool) -> None:
    plan: DefPlan = loc.model
    ctx.need_schema(plan.input, loc.file, f"{loc.pointer}/input")
    if plan.output is not None:
        ctx.need_schema(plan.output, loc.file, f"{loc.pointer}/output")
    for var, raw in plan.locals.items():
        _type_field(ctx, loc, raw, f"/locals/{escape_pointer(var)}")
    steps = _plan_steps(ctx, loc)
    _plan_edges(ctx, loc, steps)
    variables = set(plan.locals) | {s.var for s in plan.steps if s.op == "assign"}
    for i, step in enumerate(plan.steps):
        _plan_step(ctx, loc, i, step, steps, variables, correlated_by_trigger)
    for i, raw in enumerate(plan.invariants):
        _expr(ctx, loc, raw, f"/invariants/{i}", steps, variables, allow_event=False)


def _plan_steps(ctx: _Ctx, loc: Located) -> dict[str, Any]:
    steps: dict[str, Any] = {}
    for i, step in enumerate(loc.model.steps):
        if step.id in steps:
            ctx.diags.add(
                loc.file,
                f"{loc.pointer}/steps/{i}/id",
                "air.plan.step.duplicate",
                f"step id {step.id!r} is used twice",
            )
        steps[step.id] = step
    return steps


def _plan_edges(ctx: _Ctx, loc: Located, steps: dict[str, Any]) -> None:
    graph: dict[str, list[str]] = {sid: [] for sid in steps}
    for i, edge in enumerate(loc.model.edges):
        at = f"{loc.pointer}/edges/{i}"
        for end, pointer in ((edge.from_step, "from"), (edge.to, "to")):
            if end not in steps:
                ctx.diags.add(
                    loc.file, f"{at}/{pointer}", "air.plan.edge.unknown_step", f"no step {end!r}"
                )
        if edge.from_step in steps and edge.to in steps:
            graph[edge.from_step].append(edge.to)
        if edge.when is not None:
            _expr(
                ctx,
                loc,
                edge.when,
                f"/edges/{i}/when",
                steps,
                set(loc.model.locals),
                allow_event=False,
            )
    cycle = _find_cycle(graph)
    if cycle:
        ctx.diags.add(
            loc.file,
            f"{loc.pointer}/edges",
            "air.plan.cycle",
            f"plan edges form a cycle: {' -> '.join(cycle)}",
        )


def _find_cycle(graph: dict[str, list[str]]) -> list[str]:
    """A cycle as a list of step ids (first repeated at the end), or [] for a DAG."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for succ in graph[node]:
            if state.get(succ) == 1:
                return [*path[path.index(succ) :], succ]
            if succ not in state and (found := visit(succ)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def _plan_step(
    ctx: _Ctx,
    loc: Located,
    i: int,
    step: Any,
    steps: dict[str, Any],
    variables: set[str],
    correlated: bool,
) -> None:
    at = f"/steps/{i}"
    check: Callable[[Any, str, bool], expr.Expr | None] = lambda raw, sub, ev: _expr(  # noqa: E731
        ctx, loc, raw, f"{at}/{sub}", steps, variables, allow_event=ev
    )
    if isinstance(step, EmitEffect):
        _emit_effect(ctx, loc, at, step, check(step.params, "params", False))
    elif isinstance(step, AwaitReceipt):
        if not isinstance(steps.get(step.for_step), EmitEffect):
            ctx.diags.add(
                loc.file,
                f"{loc.pointer}{at}/for",
                "air.plan.await_receipt.for",
                f"{step.for_step!r} is not an emit_effect step of this plan",
            )
    elif isinstance(step, RaiseEvent):
        _raise_event(ctx, loc, at, step, check(step.value, "value", False))
        if step.key is not None:
            check(step.key, "key", False)
    elif isinstance(step, AwaitEvent):
        ctx.need_schema(step.event, loc.file, f"{loc.pointer}{at}/event")
        if step.where is not None:
            check(step.where, "where", True)
        elif correlated:
            ctx.diags.add(
                loc.file,
                f"{loc.pointer}{at}",
                "air.plan.await_event.where_required",
                "a plan started by a correlated trigger must filter awaited events with 'where'",
            )
    elif isinstance(step, End):
        if step.result is not None:
            check(step.result, "result", False)
    else:
        check(step.value, "value", False)


def _emit_effect(
    ctx: _Ctx, loc: Located, at: str, step: EmitEffect, params: expr.Expr | None
) -> None:
    effect = _effect_origin(
        ctx, ctx.air.effects, step.kind, "plan", loc.file, f"{loc.pointer}{at}/kind"
    )
    if effect is None:
        return
    if step.cap is not None:
        grants = {g.name: g for g in ctx.air.manifest.defaults.cap_grants}
        grant = grants.get(step.cap)
        if grant is None:
            ctx.diags.add(
                loc.file,
                f"{loc.pointer}{at}/cap",
                "air.ref.unknown_cap_grant",
                f"no cap grant named {step.cap!r} in defaults.cap_grants",
            )
        elif (
            ctx.is_kind(grant.cap, DefCap) and ctx.loc(grant.cap).model.cap_type != effect.cap_type
        ):
            ctx.diags.add(
                loc.file,
                f"{loc.pointer}{at}/cap",
                "air.cap.type_mismatch",
                f"grant {step.cap!r} is a {ctx.loc(grant.cap).model.cap_type} capability; {step.kind} needs {effect.cap_type}",
            )
    _literal(ctx, loc, f"{at}/params", params, effect.params_schema)


def _raise_event(
    ctx: _Ctx, loc: Located, at: str, step: RaiseEvent, value: expr.Expr | None
) -> None:
    if not ctx.need_schema(step.event, loc.file, f"{loc.pointer}{at}/event"):
        return
    if step.reducer is not None and ctx.need(
        step.reducer, DefModule, loc.file, f"{loc.pointer}{at}/reducer", "air.ref.unknown_module"
    ):
        keyed = ctx.loc(step.reducer).model.key_schema is not None
        if keyed != (step.key is not None):
            need = "needs a key" if keyed else "is not keyed; drop the key"
            ctx.diags.add(
                loc.file,
                f"{loc.pointer}{at}/key",
                "air.plan.raise_event.key",
                f"{step.reducer} {need}",
            )
    _literal(ctx, loc, f"{at}/value", value, step.event)


def _literal(ctx: _Ctx, loc: Located, at: str, node: expr.Expr | None, schema: str) -> None:
    """A constant expression (no refs) is evaluated now and checked against its schema."""
    if node is None or expr.refs(node) or schema not in ctx.air.schemas:
        return
    try:
        value = expr.evaluate(node, expr.Env(plan_input=None, vars={}, steps={}))
        normalise(ctx.air.schemas[schema], value, ctx.air.schemas, f"{loc.pointer}{at}")
    except ExprError as exc:
        ctx.diags.add(loc.file, f"{loc.pointer}{at}", f"air.{exc.code}", exc.detail)
    except ValueMismatch as exc:
        ctx.diags.add(
            loc.file,
            exc.pointer,
            "air.value.mismatch",
            f"literal does not match {schema}: {exc.detail}",
        )


def _expr(
    ctx: _Ctx,
    loc: Located,
    raw: Any,
    at: str,
    steps: dict[str, Any],
    variables: set[str],
    allow_event: bool,
) -> expr.Expr | None:
    try:
        node = expr.parse_expr(raw, f"{loc.pointer}{at}")
    except ExprError as exc:
        ctx.diags.add(loc.file, exc.pointer, f"air.{exc.code}", exc.detail)
        return None
    for root in sorted(expr.refs(node)):
        kind, _, name = root.partition(":")
        if kind == "step" and name not in steps:
            ctx.diags.add(
                loc.file,
                f"{loc.pointer}{at}",
                "air.plan.ref.unknown_step",
                f"@step:{name} names no step",
            )
        elif kind == "var" and name not in variables:
            ctx.diags.add(
                loc.file,
                f"{loc.pointer}{at}",
                "air.plan.ref.unknown_var",
                f"@var:{name} is not a local",
            )
        elif root == "event" and not allow_event:
            ctx.diags.add(
                loc.file,
                f"{loc.pointer}{at}",
                "air.plan.ref.event_outside_where",
                "@event is only available inside await_event.where",
            )
    return node
