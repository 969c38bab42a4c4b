"""Plan checks for ``air._validate``: the AIR v1 step shapes (SPEC §3), refs, types and bounds.

What is checked, per plan (each finding a diagnostic with a stable code, then the next check):

* Names: the input, output and locals' types exist; step ids are unique; edges name steps; the
  edges form a DAG.
* Refs, in every Expr: ``@step:x`` names a step; ``@var:x`` is a local or is bound (``bind``)
  by a step *before* this one in the DAG (for an edge guard: by its source or before it);
  ``@event`` only inside ``await_event.where``; a ref's path exists in its schema where the
  ref is typed (``@plan.input`` by the input schema, ``@event`` by the awaited schema, a var by
  its local type, its awaited receipt or event schema).
* Steps: ``emit_effect`` names a plan-origin effect, a grant of the effect's cap type and stays
  inside ``allowed_effects`` / ``required_caps`` when those are given, and an HTTP one sets no
  header, named by a constant, that the client alone writes (``air.plan.http_header``); ``await_receipt.for`` is
  ``{"ref": "@var:x"}`` for an ``x`` an earlier ``emit_effect`` bound with ``effect_id_as``;
  ``raise_event`` to a reducer targets a reducer, has a key exactly when the reducer is keyed,
  and raises a schema that is the reducer's ABI event or routed to it; a routed ``raise_event``
  (``{event, value}``) names a schema that a route, a trigger or an ``await_event`` takes;
  ``emit_effect.idempotency_key``, when given, is text or bytes; ``end`` has a result when the plan
  declares an output, and every path ends at an ``end`` then.
* Values: where an Expr's shape is known it is checked against the schema it must produce
  (effect params, the raised event, the key, the result, an assign to a typed local) by
  ``air._plan_types``, with the pointer of the offending field; the args and results of the
  typed ops too, and the schema a ``json_encode`` / ``json_decode`` names exists.
* ExprOrValue: ``emit_effect.params`` and ``idempotency_key``, ``raise_event.event`` (a routed
  one's ``value``), ``assign.expr`` and ``end.result``
  may hold a plain JSON literal (AgentOS's convention), read through the schema the position
  expects (the effect's params, the reducer's ABI event, the local's type, the plan's output;
  none known: the plain JSON value), by the rule in ``air._plan_types.read_expr_or_value``.
  Such a literal is the one thing this module changes: the plan def (``ctx.air.defs``) is
  replaced by a copy whose step holds the literal's equivalent Expr (``air.expr.to_json`` of the
  constant), so canonical hashing (``air._canonical``) and the kernel see only Exprs.

Not here: running plans (``kernel._plans``), whether a guard can ever be true, or the earlier
step shapes the loader reports (``air._plan_old_shapes``).

One idea, kept whole: checking one plan's body against its scope. The scope (``_Plan``: steps,
the DAG, who binds each var and with what type) is built by the same pass that reports the name
and DAG findings, and every step check and every Expr check reads it and reports through it;
cut apart, each part would reach into the others' private helpers. What stands alone is
already apart: the static types of values (``air._plan_types``) and the old shapes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from air import expr
from air._ctx import Ctx
from air._diagnostics import escape_pointer
from air._expr_eval import children
from air._loaded import Located
from air._model import (
    Assign,
    AwaitEvent,
    AwaitReceipt,
    DefModule,
    DefPlan,
    EmitEffect,
    End,
    RaiseEvent,
)
from air._plan_types import PlanTypes, describe, read_expr_or_value
from air.errors import ExprError
from air.sys.ondemand import HTTP_HEADERS_REFUSED, HTTP_KINDS, http_header_refused
from air.types import Prim, Ref, TypeNode, type_to_obj

__all__ = ["check_plan"]

_NO_EVENT: TypeNode = Prim("$no_event")
"""The event type outside ``await_event.where``: ``@event`` is not allowed there."""
_EFFECT_ID: TypeNode = Prim("hash")
"""The type of a var bound by ``emit_effect.bind.effect_id_as`` (the intent hash)."""


# --- the plan's scope: steps, the DAG, and what each var holds ----------------------------------


@dataclass
class _Plan:
    ctx: Ctx
    loc: Located
    steps: dict[str, Any] = field(default_factory=dict)
    preds: dict[str, set[str]] = field(default_factory=dict)
    binders: dict[str, list[Any]] = field(default_factory=dict)  # var -> steps that bind it
    var_types: dict[str, TypeNode | None] = field(default_factory=dict)
    input_type: TypeNode | None = None
    types: PlanTypes = field(init=False)
    local_types: dict[str, TypeNode | None] = field(default_factory=dict)
    lifted: dict[tuple[int, str], Any] = field(default_factory=dict)
    """(step index, field) -> the Expr JSON of a literal read there (ExprOrValue)."""
    _ancestors: dict[str, set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.types = PlanTypes(self.ctx.air.schemas, self.add_typed)

    @property
    def model(self) -> DefPlan:
        plan: DefPlan = self.loc.model
        return plan

    def add(self, pointer: str, code: str, message: str) -> None:
        self.ctx.diags.add(self.loc.file, pointer, code, message)

    def add_typed(self, pointer: str, code: str, message: str) -> None:
        """``add`` for a finding of the static types (``PlanTypes``), which names the plan,
        the step (by its id) and the step's field it is in, besides the pointer."""
        self.add(pointer, code, f"{self._where(pointer)}{message}")

    def _where(self, pointer: str) -> str:
        parts = pointer.removeprefix(self.loc.pointer).split("/")
        where = f"plan {self.model.name}"
        if len(parts) >= 4 and parts[1] == "steps" and parts[2].isdigit():
            steps = self.model.steps
            index = int(parts[2])
            step = f"step {steps[index].id!r}" if index < len(steps) else f"step {index}"
            where += f", {step}, field {parts[3]}"
        return f"{where}: "

    def at(self, sub: str) -> str:
        return f"{self.loc.pointer}{sub}"

    def ancestors(self, step_id: str) -> set[str]:
        """Every step with a path to ``step_id`` (cycle-safe: cycles are reported elsewhere)."""
        if step_id not in self._ancestors:
            seen: set[str] = set()
            todo = list(self.preds.get(step_id, ()))
            while todo:
                sid = todo.pop()
                if sid not in seen:
                    seen.add(sid)
                    todo.extend(self.preds.get(sid, ()))
            self._ancestors[step_id] = seen
        return self._ancestors[step_id]

    def visible(self, before: set[str]) -> set[str]:
        """The vars an Expr may read when the steps ``before`` have run: locals and their binds."""
        bound = {v for v, steps in self.binders.items() if any(s.id in before for s in steps)}
        return set(self.model.locals) | bound


def check_plan(ctx: Ctx, loc: Located, correlated: bool) -> None:
    plan = _Plan(ctx, loc)
    model = plan.model
    if ctx.need_schema(model.input, loc.file, plan.at("/input")):
        plan.input_type = Ref(model.input)
    if model.output is not None:
        ctx.need_schema(model.output, loc.file, plan.at("/output"))
    local_types = {
        var: ctx.type_field(loc, raw, f"/locals/{escape_pointer(var)}")
        for var, raw in model.locals.items()
    }
    plan.local_types = local_types
    _steps_and_edges(plan)
    _bind_types(plan, local_types)
    for i, step in enumerate(model.steps):
        _step(plan, i, step, correlated)
    for i, edge in enumerate(model.edges):
        if edge.when is not None:
            before = plan.ancestors(edge.from_step) | {edge.from_step}
            _expr(plan, edge.when, f"/edges/{i}/when", plan.visible(before))
    everything = set(plan.steps)
    for i, raw in enumerate(model.invariants):
        _expr(plan, raw, f"/invariants/{i}", plan.visible(everything))
    _bounds(plan)
    _output_paths(plan)
    _lift_literals(plan)


def _lift_literals(plan: _Plan) -> None:
    """Replace the plan def by a copy whose literal positions hold their Expr JSON."""
    if not plan.lifted:
        return
    steps = list(plan.model.steps)
    for (i, name), json_expr in plan.lifted.items():
        steps[i] = steps[i].model_copy(update={name: json_expr})
    model = plan.model.model_copy(update={"steps": steps})
    plan.ctx.air.defs[model.name] = dataclasses.replace(plan.loc, model=model)


def _steps_and_edges(plan: _Plan) -> None:
    for i, step in enumerate(plan.model.steps):
        if step.id in plan.steps:
            detail = f"step id {step.id!r} is used twice"
            plan.add(plan.at(f"/steps/{i}/id"), "air.plan.step.duplicate", detail)
        plan.steps[step.id] = step
    graph: dict[str, list[str]] = {sid: [] for sid in plan.steps}
    for i, edge in enumerate(plan.model.edges):
        for end, name in ((edge.from_step, "from"), (edge.to, "to")):
            if end not in plan.steps:
                at = plan.at(f"/edges/{i}/{name}")
                plan.add(at, "air.plan.edge.unknown_step", f"no step {end!r}")
        if edge.from_step in plan.steps and edge.to in plan.steps:
            graph[edge.from_step].append(edge.to)
            plan.preds.setdefault(edge.to, set()).add(edge.from_step)
    cycle = _find_cycle(graph)
    if cycle:
        detail = f"plan edges form a cycle: {' -> '.join(cycle)}"
        plan.add(plan.at("/edges"), "air.plan.cycle", detail)


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


def _bind_types(plan: _Plan, local_types: dict[str, TypeNode | None]) -> None:
    """Who binds each var, and its type where every binder agrees on one."""
    effect_of = {s.bind.effect_id_as: s.kind for s in plan.model.steps if isinstance(s, EmitEffect)}
    types: dict[str, list[TypeNode | None]] = {}
    for step in plan.model.steps:
        var, bound = _bound(plan, step, effect_of)
        if var is not None:
            plan.binders.setdefault(var, []).append(step)
            types.setdefault(var, []).append(bound)
    for var, found in types.items():
        shapes = {json.dumps(type_to_obj(t), sort_keys=True) for t in found if t is not None}
        plan.var_types[var] = found[0] if None not in found and len(shapes) == 1 else None
    for var in plan.model.locals:
        plan.var_types[var] = local_types.get(var)


def _bound(plan: _Plan, step: Any, effect_of: dict[str, str]) -> tuple[str | None, TypeNode | None]:
    """The var ``step`` binds and the type of what it puts there (None when unknown)."""
    schemas = plan.ctx.air.schemas
    if isinstance(step, EmitEffect):
        return step.bind.effect_id_as, _EFFECT_ID
    if isinstance(step, AwaitReceipt):
        raw = step.for_
        name = raw.get("ref", "") if isinstance(raw, dict) else ""
        kind = effect_of.get(name.removeprefix("@var:")) if isinstance(name, str) else None
        effect = plan.ctx.air.effects.get(kind) if kind else None
        known = effect is not None and effect.receipt_schema in schemas
        return step.bind.as_, Ref(effect.receipt_schema) if known and effect else None
    if isinstance(step, AwaitEvent):
        return step.bind.as_, Ref(step.event) if step.event in schemas else None
    if isinstance(step, Assign):
        return step.bind.as_, None
    return None, None


# --- steps ------------------------------------------------------------------------------------


def _step(plan: _Plan, i: int, step: Any, correlated: bool) -> None:
    at = f"/steps/{i}"
    visible = plan.visible(plan.ancestors(step.id))
    if isinstance(step, EmitEffect):
        effect = plan.ctx.air.effects.get(step.kind)
        want = None if effect is None else _schema_type(plan, effect.params_schema)
        params = _value(plan, i, "params", step.params, visible, want)
        _emit_effect(plan, at, step, params)
        if step.idempotency_key is not None:
            key = _value(plan, i, "idempotency_key", step.idempotency_key, visible, None)
            if key is not None:
                _idempotency_key(plan, key)
    elif isinstance(step, AwaitReceipt):
        _await_receipt(plan, at, step)
    elif isinstance(step, RaiseEvent) and step.reducer is None:
        _raise_routed(plan, i, at, step, visible)
    elif isinstance(step, RaiseEvent):
        _raise_to_cell(plan, i, at, step, step.reducer or "", visible)
    elif isinstance(step, AwaitEvent):
        _await_event(plan, at, step, visible, correlated)
    elif isinstance(step, Assign):
        want = plan.local_types.get(step.bind.as_)
        node = _value(plan, i, "expr", step.expr, visible, want)
        if node is not None and want is not None:
            _conform(plan, node, want)
    elif isinstance(step, End):
        _end(plan, i, step, visible)


def _schema_type(plan: _Plan, name: str) -> TypeNode | None:
    return Ref(name) if name in plan.ctx.air.schemas else None


def _value(
    plan: _Plan, i: int, name: str, raw: Any, visible: set[str], want: TypeNode | None
) -> expr.Expr | None:
    """An ExprOrValue position: its Expr (a literal read through ``want`` is lifted, see the
    module docstring), with refs checked as ``_expr`` does; None (reported) if unreadable."""
    node, findings = read_expr_or_value(
        raw, plan.at(f"/steps/{i}/{name}"), want, plan.types.schemas
    )
    for pointer, code, detail in findings:
        plan.add(pointer, code, detail)
    if node is None:
        return None
    if not expr.is_expr_form(raw):
        plan.lifted[(i, name)] = expr.to_json(node)
    return _checked(plan, node, visible, _NO_EVENT)


def _emit_effect(plan: _Plan, at: str, step: EmitEffect, params: expr.Expr | None) -> None:
    ctx, model = plan.ctx, plan.model
    effect = ctx.effect_for(step.kind, "plan", plan.loc.file, plan.at(f"{at}/kind"))
    if model.allowed_effects and step.kind not in model.allowed_effects:
        detail = f"effect {step.kind} is not in the plan's allowed_effects"
        plan.add(plan.at(f"{at}/kind"), "air.plan.allowed_effects", detail)
    if model.required_caps and step.cap not in model.required_caps:
        detail = f"cap grant {step.cap!r} is not in the plan's required_caps"
        plan.add(plan.at(f"{at}/cap"), "air.plan.required_caps", detail)
    grant = next((g for g in ctx.air.manifest.defaults.cap_grants if g.name == step.cap), None)
    if grant is None:
        detail = f"no cap grant named {step.cap!r} in defaults.cap_grants"
        plan.add(plan.at(f"{at}/cap"), "air.ref.unknown_cap_grant", detail)
    elif effect is not None:
        cap_type = ctx.cap_type(grant.cap)
        if cap_type is not None and cap_type != effect.cap_type:
            detail = f"grant {step.cap!r} is a {cap_type} capability; {step.kind} needs {effect.cap_type}"
            plan.add(plan.at(f"{at}/cap"), "air.cap.type_mismatch", detail)
    if effect is not None and params is not None:
        _conform(plan, params, Ref(effect.params_schema))
    if step.kind in HTTP_KINDS and params is not None:
        _client_headers(plan, at, step.params, params)


def _client_headers(plan: _Plan, at: str, raw: Any, params: expr.Expr) -> None:
    """A header named by a constant that only the HTTP client writes (framing and
    connection-specific fields, ``air.sys.ondemand.HTTP_HEADERS_REFUSED``). A name computed
    at run time is the capability check's (``cap.header_not_allowed``)."""
    base = plan.at(f"{at}/params")
    for name, pointer in _constant_header_names(params):
        if http_header_refused(name):
            detail = (
                f"header {name!r} is the HTTP client's to write (the message's framing or "
                f"its connection), not a plan's; refused: {', '.join(sorted(HTTP_HEADERS_REFUSED))}"
            )
            where = _written_header_pointer(raw, base, name) or pointer or base
            plan.add(where, "air.plan.http_header", detail)


def _written_header_pointer(raw: Any, base: str, name: object) -> str | None:
    """Where the author wrote header ``name`` in the params JSON ``raw`` (plain JSON, ``lit``,
    ``record`` and ``map`` forms), when a constant folded it out of the Expr's own pointers."""
    pointer = base
    for form in ("lit", "record"):
        if isinstance(raw, dict) and list(raw) == [form]:
            raw, pointer = raw[form], f"{pointer}/{form}"
    headers = raw.get("headers") if isinstance(raw, dict) else None
    pointer = f"{pointer}/headers"
    if isinstance(headers, dict) and list(headers) == ["lit"]:
        headers, pointer = headers["lit"], f"{pointer}/lit"
    if isinstance(headers, dict) and list(headers) == ["map"] and isinstance(headers["map"], list):
        for index, entry in enumerate(headers["map"]):
            key = entry.get("key") if isinstance(entry, dict) else None
            if name in (key, key.get("text") if isinstance(key, dict) else None):
                return f"{pointer}/map/{index}/key"
        return None
    if isinstance(headers, dict) and isinstance(name, str) and name in headers:
        return f"{pointer}/{escape_pointer(name)}"
    return None


def _constant_header_names(params: expr.Expr) -> Iterator[tuple[object, str]]:
    """``(name, pointer)`` of each header name the params give as a constant: a map entry's
    key at its own pointer, a constant map's keys (or a constant record's) at the constant's."""
    if isinstance(params, expr.Const):
        value = params.value
        headers = value.get("headers") if isinstance(value, dict) else None
        if isinstance(headers, dict):
            yield from ((name, params.pointer) for name in headers)
        return
    node = dict(params.fields).get("headers") if isinstance(params, expr.MakeRecord) else None
    if isinstance(node, expr.Const) and isinstance(node.value, dict):
        yield from ((name, node.pointer) for name in node.value)
    elif isinstance(node, expr.MakeMap):
        for key, _value in node.entries:
            if isinstance(key, expr.Const):
                yield key.value, key.pointer


def _await_receipt(plan: _Plan, at: str, step: AwaitReceipt) -> None:
    pointer = plan.at(f"{at}/for")
    try:
        node = expr.parse_expr(step.for_, pointer)
    except ExprError as exc:
        plan.add(exc.pointer, f"air.{exc.code}", exc.detail)
        return
    if not (isinstance(node, expr.Ref) and node.scope == "var" and not node.path):
        detail = 'await_receipt.for is {"ref": "@var:<x>"} for an emit_effect\'s bind.effect_id_as'
        plan.add(pointer, "air.plan.await_receipt.for", detail)
        return
    emits = [s for s in plan.binders.get(node.name, []) if isinstance(s, EmitEffect)]
    if not emits:
        detail = f"@var:{node.name} is not bound by any emit_effect's bind.effect_id_as"
        plan.add(pointer, "air.plan.await_receipt.for", detail)
    elif not any(s.id in plan.ancestors(step.id) for s in emits):
        detail = (
            f"emit_effect {emits[0].id!r} binds @var:{node.name} but does not come before this step"
        )
        plan.add(pointer, "air.plan.await_receipt.for", detail)


def _raise_to_cell(
    plan: _Plan, i: int, at: str, step: RaiseEvent, reducer: str, visible: set[str]
) -> None:
    key = None if step.key is None else _expr(plan, step.key, f"{at}/key", visible)
    module = plan.ctx.air.modules.get(reducer)
    want = None if module is None else _schema_type(plan, module.abi.reducer.event)
    event = _value(plan, i, "event", step.event, visible, want)
    _raise_event(plan, at, step, reducer, event, key)


def _raise_event(
    plan: _Plan,
    at: str,
    step: RaiseEvent,
    reducer: str,
    event: expr.Expr | None,
    key: expr.Expr | None,
) -> None:
    ctx = plan.ctx
    pointer = plan.at(f"{at}/reducer")
    if not ctx.need(reducer, DefModule, plan.loc.file, pointer, "air.ref.unknown_module"):
        return
    module: DefModule = ctx.loc(reducer).model
    if module.key_schema is not None and step.key is None:
        detail = f"{reducer} is keyed: give the cell's key"
        plan.add(plan.at(at), "air.plan.raise_event.key", detail)
    elif module.key_schema is None and step.key is not None:
        detail = f"{reducer} is not keyed: drop the key"
        plan.add(plan.at(f"{at}/key"), "air.plan.raise_event.key", detail)
    elif key is not None and reducer in ctx.air.key_types:
        _conform(plan, key, ctx.air.key_types[reducer])
    if event is None:
        return
    named = expr.record_schema(event)
    schema = named or module.abi.reducer.event
    if schema not in ctx.air.schemas:
        return  # an unknown $schema is reported by _expr; an unknown ABI event by the module
    routed = schema == module.abi.reducer.event or any(
        r.event == schema and r.reducer == reducer for r in ctx.air.manifest.routing.events
    )
    if not routed:
        where = f"{at}/event/record/$schema" if named else f"{at}/event"
        detail = f"{schema} is neither {reducer}'s ABI event nor routed to it"
        plan.add(plan.at(where), "air.plan.raise_event.unrouted", detail)
        return
    _conform(plan, event, Ref(schema))


def _raise_routed(plan: _Plan, i: int, at: str, step: RaiseEvent, visible: set[str]) -> None:
    """The routed form: the schema exists, ``value`` types against it, and something takes
    an event of it (a route, a trigger, or a plan's ``await_event``), as the kernel asks of an
    event from outside (``Kernel.normalise_event``). None taking it is an error, not a
    warning: the raised event would be journaled and reach nothing, which is what the kernel
    refuses for an outside event, and is almost surely a route the author forgot."""
    schema = step.event
    known = plan.ctx.need_schema(schema, plan.loc.file, plan.at(f"{at}/event"))
    want = Ref(schema) if known else None
    value = _value(plan, i, "value", step.value, visible, want)
    if value is not None and want is not None:
        _conform(plan, value, want)
    if known and not _taken(plan.ctx, schema):
        detail = (
            f"{schema} is routed to no reducer, starts no plan and no plan awaits it: "
            f"add a route for it to manifest.routing.events (or raise it to a reducer)"
        )
        plan.add(plan.at(f"{at}/event"), "air.plan.raise_event.unrouted", detail)


def _taken(ctx: Ctx, schema: str) -> bool:
    manifest = ctx.air.manifest
    if any(r.event == schema for r in manifest.routing.events):
        return True
    if any(t.event == schema for t in manifest.triggers):
        return True
    return any(
        isinstance(s, AwaitEvent) and s.event == schema
        for p in ctx.air.plans.values()
        for s in p.steps
    )


_IDEMPOTENCY_KINDS = frozenset({"text", "bytes"})
"""What ``emit_effect.idempotency_key`` may evaluate to (a hash or uuid is bytes)."""


def _idempotency_key(plan: _Plan, key: expr.Expr) -> None:
    """The key is text or bytes where its kind is known now (the kernel checks it again)."""
    kinds, shown = plan.types.value_kinds(key, lambda ref: _ref_type(plan, ref, _NO_EVENT))
    if kinds is not None and not kinds <= _IDEMPOTENCY_KINDS:
        detail = f"{plan.model.name}: idempotency_key must be text or bytes, not {shown}"
        plan.add(key.pointer, "air.plan.emit_effect.idempotency_key", detail)


def _await_event(
    plan: _Plan, at: str, step: AwaitEvent, visible: set[str], correlated: bool
) -> None:
    known = plan.ctx.need_schema(step.event, plan.loc.file, plan.at(f"{at}/event"))
    if step.where is not None:
        event_type: TypeNode | None = Ref(step.event) if known else None
        _expr(plan, step.where, f"{at}/where", visible, event_type)
    elif correlated:
        detail = "a plan started by a correlated trigger must filter awaited events with 'where'"
        plan.add(plan.at(at), "air.plan.await_event.where_required", detail)


def _end(plan: _Plan, i: int, step: End, visible: set[str]) -> None:
    output = plan.model.output
    if step.result is None:
        if output is not None:
            detail = f"the plan declares output {output}: this end needs a result"
            plan.add(plan.at(f"/steps/{i}"), "air.plan.end.result_missing", detail)
        return
    want = None if output is None else _schema_type(plan, output)
    result = _value(plan, i, "result", step.result, visible, want)
    if result is not None and want is not None:
        _conform(plan, result, want)


def _bounds(plan: _Plan) -> None:
    """``required_caps`` name grants and ``allowed_effects`` name effect kinds."""
    ctx, model = plan.ctx, plan.model
    grants = {g.name for g in ctx.air.manifest.defaults.cap_grants}
    for j, name in enumerate(model.required_caps):
        if name not in grants:
            detail = f"no cap grant named {name!r} in defaults.cap_grants"
            plan.add(plan.at(f"/required_caps/{j}"), "air.ref.unknown_cap_grant", detail)
    effects = ctx.air.effects
    for j, kind in enumerate(model.allowed_effects):
        if kind not in effects:
            detail = f"no defeffect provides effect kind {kind!r}"
            plan.add(plan.at(f"/allowed_effects/{j}"), "air.ref.unknown_effect", detail)


def _output_paths(plan: _Plan) -> None:
    """With an output declared, every path ends at an ``end`` (a step with no successor is one)."""
    output = plan.model.output
    if output is None:
        return
    has_successor = {p for preds in plan.preds.values() for p in preds}
    for i, step in enumerate(plan.model.steps):
        if step.id not in has_successor and not isinstance(step, End):
            detail = f"the plan declares output {output}, but the path through {step.id!r} ends without an end step"
            plan.add(plan.at(f"/steps/{i}"), "air.plan.end.missing", detail)


# --- Exprs: refs and types --------------------------------------------------------------------


def _expr(
    plan: _Plan, raw: Any, at: str, visible: set[str], event: TypeNode | None = _NO_EVENT
) -> expr.Expr | None:
    """Parse ``raw`` and check its refs and ``$schema`` names; None if it does not parse.
    ``event`` is the type of ``@event`` (None: allowed, untyped; ``_NO_EVENT``: not allowed)."""
    try:
        node = expr.parse_expr(raw, plan.at(at))
    except ExprError as exc:
        plan.add(exc.pointer, f"air.{exc.code}", exc.detail)
        return None
    return _checked(plan, node, visible, event)


def _checked(plan: _Plan, node: expr.Expr, visible: set[str], event: TypeNode | None) -> expr.Expr:
    """Check ``node``'s ``$schema`` and op schema names, its refs and its typed ops' args."""
    for sub in _nodes(node):
        name = expr.record_schema(sub)
        if name is not None:
            plan.ctx.need_schema(name, plan.loc.file, f"{sub.pointer}/record/$schema")
        if isinstance(sub, expr.Op) and sub.name in ("json_encode", "json_decode"):
            named = sub.args[1]
            if isinstance(named, expr.Const):
                plan.ctx.need_schema(named.value, plan.loc.file, named.pointer)
    for ref in expr.iter_refs(node):
        if _ref_known(plan, ref, visible, event):
            _ref_type(plan, ref, event, report=True)
    plan.types.check_ops(node, lambda ref: _ref_type(plan, ref, event))
    return node


def _nodes(node: expr.Expr) -> Iterator[expr.Expr]:
    yield node
    for child in children(node):
        yield from _nodes(child)


def _ref_known(plan: _Plan, ref: expr.Ref, visible: set[str], event: TypeNode | None) -> bool:
    if ref.scope == "step" and ref.name not in plan.steps:
        plan.add(ref.pointer, "air.plan.ref.unknown_step", f"@step:{ref.name} names no step")
        return False
    if ref.scope == "var" and ref.name not in visible:
        detail = f"@var:{ref.name} is not a local, and no step before this one binds it"
        plan.add(ref.pointer, "air.plan.ref.unknown_var", detail)
        return False
    if ref.scope == "event" and event is _NO_EVENT:
        detail = "@event is only available inside await_event.where"
        plan.add(ref.pointer, "air.plan.ref.event_outside_where", detail)
        return False
    return True


def _ref_type(
    plan: _Plan, ref: expr.Ref, event: TypeNode | None, report: bool = False
) -> TypeNode | None:
    """The type of what ``ref`` reads, where it can be known; with ``report``, a path segment
    its schema does not have is an ``air.plan.ref.unknown_field``."""
    if ref.scope == "plan.input":
        root = plan.input_type
    elif ref.scope == "var":
        root = plan.var_types.get(ref.name)
    elif ref.scope == "event":
        root = None if event is _NO_EVENT else event
    elif ref.scope == "run.id":
        root = Prim("nat")
    else:
        root = None
    if root is None:
        return None
    node, bad = plan.types.walk(root, ref.path)
    if bad is not None and report:
        path = ".".join(ref.path[: bad + 1])
        detail = f"@{ref.root}.{path}: {describe(root)} has no field {ref.path[bad]!r} there"
        plan.add(ref.pointer, "air.plan.ref.unknown_field", detail)
    return node


def _conform(plan: _Plan, node: expr.Expr, want: TypeNode) -> None:
    """Check ``node`` against the type it must produce; refs typed as outside ``where``."""
    plan.types.conform(node, want, lambda ref: _ref_type(plan, ref, _NO_EVENT))
