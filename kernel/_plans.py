"""The plan engine: runs of AIR plans as entities in the fair scheduler (SPEC §6 "Plans").

A trigger starts a run when its event is journaled (from outside, emitted by a reducer, or
raised by a plan): the run gets the next ``run_id`` and a *start* delivery carrying the event.
A run is an entity beside the cells, so one tick runs one thing of one run:

* the start tick journals ``plan.started {plan, run_id, input_hash, manifest_hash, src,
  idx}`` (``src``, ``idx``: the delivery of the trigger event, ``kernel._runs``);
* each later tick executes exactly one ready step (ready: not done, not waiting, every incoming
  edge's source done and its ``when`` guard true; ties by step id) and journals
  ``plan.step {run_id, step, op, ...}``, plus, for ``emit_effect``, the effect manager's
  ``effect.queued`` and ``policy.decision``;
* ``end``, a failure, or nothing left to run journals ``plan.ended {run_id, status, result?,
  error?}`` and the run is gone.

Where a run failed is not journaled (``error`` is ``{code, detail}``, and a new field would make
every older journal's failures differ on replay): it is *derived* by re-execution. A tick keeps
``RunOutcome.at``, the JSON pointer into the plan of what it is evaluating (``/steps/2/expr``,
``/edges/1/when``, ``/invariants/0``), and a failure sets ``RunOutcome.where`` to ``{step,
pointer}``, the pointer extended by an Expr error's own pointer inside that Expr
(``/steps/2/expr/args/0``). ``kernel._runs`` keeps it among the recent failures.

``await_receipt`` and ``await_event`` take two ticks: one that starts waiting and one, when the
receipt or event has been delivered to the run's mailbox, that binds it. ``await_event`` sees
only events routed after it started waiting (future-only); a run started by a trigger with
``correlate_by`` matches only events whose field of that name equals its correlation value.

What a run does while it waits is its *semantics*, a number ``plan.started`` carries
(``semantics``; absent: 1) so that a journal replays as it ran:

* **1** (runs journaled before the field existed): a run waits for one thing at a time. While
  an await waits, no other step of the run executes, even a ready one.
* **2** (every run started now): a run has any number of waits. While some wait, the run goes
  on executing its ready steps, one per tick, so ``emit_a, await_a, emit_b, await_b`` has both
  requests in flight before either answer (AgentOS's fan-out, whatever the step ids). Each wait
  binds exactly the delivery that matched it (``matched`` names it by ``[src, idx]``); one
  event that matches two waits of a run is delivered to each. The run ends when nothing is
  ready and nothing is awaited (or at an ``end`` step: what it still awaited is released).
  A run is woken (one ``CONTINUE`` in its mailbox, ``Run.awake``) only when a step is ready or
  nothing is awaited; if it wakes and finds nothing ready while it still waits (a binding
  changed what a guard reads after the wake was decided), the tick journals ``plan.waiting
  {run_id, steps}``, the steps it waits in, since every tick journals something.
Invariants are evaluated after every executed step; a false one ends the run with
``plan.invariant``. Every failure (a missing ref, a type error, a division by zero, a value
that does not match its schema, a denied effect) ends the run with status ``error`` and a code;
the world goes on. A run pins the manifest hash at its start.

``raise_event`` to a cell names its target; a routed one (``{event, value}``) is handed to the
kernel's one router (``kernel._runs.PlanRuns.route``: ``Kernel._route``), which delivers it as
it would an outside event of that schema, after the engine checked each keyed route of the
run's era finds its ``key_field`` in the value (``plan.raise_event.key_field`` otherwise).

The engine is pure: it reads the run, the delivery and the kernel's tables, and returns the
records to journal and the consequences (events to route, an intent) for ``kernel._core`` to
apply. A run's whole state is a CBOR-able list for snapshots.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from air import cbor
from air.errors import ExprError, ValueMismatch, WorldError
from air.expr import Env, evaluate, parse_expr, record_schema
from air.values import check as check_value

__all__ = [
    "CONTINUE",
    "DENIED",
    "RECEIPT",
    "SEMANTICS",
    "START",
    "PlanEngine",
    "Run",
    "RunOutcome",
    "input_hash",
    "ready_steps",
]

START: Final = "sys/start"
"""The schema of the delivery that starts a run (it carries the trigger's event)."""
CONTINUE: Final = ""
"""The schema of a delivery that only wakes a run to execute its next ready step."""
RECEIPT: Final = "sys/receipt"
"""The schema of a delivery that hands a run the receipt it awaits."""
DENIED: Final = "sys/denied"
"""The schema of a delivery that tells a run an approver denied its effect."""
SEMANTICS: Final = 2
"""The semantics every run started now has (the module docstring: 1 waits for one thing at a
time, 2 goes on with its ready steps while it waits)."""


@dataclass
class Run:
    run_id: int
    plan: str
    input: Any
    correlation: Any
    correlate_by: str | None
    manifest_hash: bytes
    vars: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    done: list[str] = field(default_factory=list)
    waits: list[dict[str, Any]] = field(default_factory=list)
    """What the run awaits, in the order its await steps began: ``{step, op, as, intent |
    event, since?, matched?}`` (semantics 1 has at most one)."""
    semantics: int = SEMANTICS
    awake: bool = False
    """Semantics 2: a ``CONTINUE`` is in the run's mailbox (it is never put there twice)."""

    @property
    def waiting(self) -> dict[str, Any] | None:
        """The first thing the run awaits (None: it awaits nothing)."""
        return self.waits[0] if self.waits else None

    def to_obj(self) -> list[Any]:
        """A CBOR-able list: semantics 1 in the ten fields it always had (the wait, or None,
        last); semantics 2 adds an eleventh, ``{semantics, waits, awake}``."""
        head = [
            self.run_id,
            self.plan,
            self.input,
            self.correlation,
            self.correlate_by,
            self.manifest_hash,
            self.vars,
            self.results,
            self.done,
        ]
        if self.semantics == 1:
            return [*head, self.waiting]
        more = {"semantics": self.semantics, "waits": self.waits, "awake": self.awake}
        return [*head, None, more]

    @classmethod
    def from_obj(cls, obj: list[Any]) -> Run:
        run = cls(*obj[:9])
        if len(obj) > 10:
            run.semantics = obj[10]["semantics"]
            run.waits = list(obj[10]["waits"])
            run.awake = obj[10]["awake"]
        else:
            run.semantics = 1
            run.waits = [] if obj[9] is None else [obj[9]]
        return run


@dataclass
class RunOutcome:
    """What one tick of a run did: records to journal (kind, body) in order, events to
    raise (schema, value_cbor, reducer, key_cbor; reducer None: routed by the manifest), an
    effect to enqueue, and whether the run ended (then ``records`` ends with ``plan.ended``)
    or wants another tick."""

    records: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    raised: list[tuple[str, bytes, str | None, bytes | None]] = field(default_factory=list)
    effect: dict[str, Any] | None = None
    ended: bool = False
    again: bool = False
    at: str = ""
    """The pointer into the plan of what the tick is evaluating (not journaled)."""
    step: str | None = None
    """The step the tick is executing, if any (not journaled)."""
    where: dict[str, Any] | None = None
    """For a failure: ``{step, pointer}``, where in the plan it failed (not journaled)."""


class RunFailed(Exception):
    """A step failed deterministically: ``code`` and ``detail`` end the run."""

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        self.detail = detail
        super().__init__(detail)


def _expr(obj: Any) -> Any:
    return parse_expr(obj)


def env_of(run: Run, schemas: Mapping[str, Any], event: Any = None) -> Env:
    """What a run's Exprs read: its input, vars and step results (and ``@event`` in a
    ``where``), its id (``@run.id``), and the schemas its era knows (``json_encode``/``json_decode`` read by them)."""
    if event is None:
        return Env(run.input, run.vars, run.results, schemas=schemas, run_id=run.run_id)
    return Env(run.input, run.vars, run.results, event, schemas=schemas, run_id=run.run_id)


def ready_steps(
    plan: Any, run: Run, schemas: Mapping[str, Any], out: RunOutcome | None = None
) -> list[Any]:
    """The steps that may run now, by step id (``out.at`` follows the guards evaluated)."""
    done = set(run.done)
    waiting = {w["step"] for w in run.waits}
    incoming: dict[str, list[tuple[int, Any]]] = {}
    for index, edge in enumerate(plan.edges):
        incoming.setdefault(edge.to, []).append((index, edge))
    ready = []
    env = env_of(run, schemas)
    for step in plan.steps:
        if step.id in done or step.id in waiting:
            continue
        edges = incoming.get(step.id, [])
        if all(e.from_step in done and _guard(e, env, i, out) for i, e in edges):
            ready.append(step)
    return sorted(ready, key=lambda s: s.id)


def _guard(edge: Any, env: Env, index: int = 0, out: RunOutcome | None = None) -> bool:
    if edge.when is None:
        return True
    if out is not None:
        out.at, out.step = f"/edges/{index}/when", edge.to
    value = evaluate(_expr(edge.when), env)
    if type(value) is not bool:
        raise RunFailed("plan.guard", f"guard on {edge.from_step} -> {edge.to} is not a bool")
    return value


def check_invariants(
    plan: Any, run: Run, schemas: Mapping[str, Any], out: RunOutcome | None = None
) -> None:
    """Every invariant must hold after each step; one that reads a var or step result not
    bound yet (``expr.ref.missing``) is not checked until it can be."""
    env = env_of(run, schemas)
    for index, raw in enumerate(plan.invariants):
        if out is not None:
            out.at = f"/invariants/{index}"
        try:
            holds = evaluate(_expr(raw), env)
        except ExprError as exc:
            if exc.code == "expr.ref.missing":
                continue
            raise
        if holds is not True:
            raise RunFailed("plan.invariant", f"invariant {index} does not hold")


def failure(exc: BaseException) -> tuple[str, str]:
    """The journaled (code, detail) of a run's deterministic failure."""
    if isinstance(exc, RunFailed):
        return exc.code, exc.detail
    if isinstance(exc, ExprError | ValueMismatch):
        return exc.code, str(exc)[:500]
    if isinstance(exc, WorldError):
        return getattr(exc, "code", None) or type(exc).__name__, str(exc)[:500]
    return type(exc).__name__, str(exc)[:500]


_STEP_FIELD: Final = MappingProxyType(
    {
        "end": "/result",
        "assign": "/expr",
        "raise_event": "/event",
        "emit_effect": "/params",
        "await_receipt": "/for",
    }
)
"""The field of a step that a tick evaluates, by op: where a failure in it points."""


def _step_pointer(plan: Any, step_id: str) -> str:
    """``/steps/<index>`` of step ``step_id`` in the plan as authored."""
    for index, step in enumerate(plan.steps):
        if step.id == step_id:
            return f"/steps/{index}"
    return ""


def input_hash(value: Any) -> bytes:
    return cbor.digest(cbor.dumps(value))


class PlanEngine:
    """Executes run ticks over a world's AIR. ``checkers`` checks canonical values against
    schemas; ``enqueue(kind, params, cap, origin, idempotency)`` asks the effect manager and
    returns ``(intent_hash, records, failure)``."""

    def __init__(self, air: Any, check: Any, key_types: dict[str, Any]) -> None:
        self.air = air
        self.check = check
        self.key_types = key_types

    def tick(
        self, run: Run, schema: str, value: Any, at: tuple[int, int] | None = None
    ) -> RunOutcome:
        """One tick of ``run`` for a delivery of ``schema`` (``CONTINUE``, ``RECEIPT``,
        ``DENIED`` or an awaited event's schema) carrying ``value``; ``at``: the delivery's
        ``(src, idx)``, which names the wait it binds (semantics 2)."""
        out = RunOutcome()
        plan = self.air.plans[run.plan]
        try:
            if schema == DENIED:
                self._at_waiting(plan, run, out)
                raise RunFailed("effect.denied", "an approver denied the run's effect")
            if run.waits and schema != CONTINUE:
                wait = self._wait_of(run, at)
                out.step, out.at = wait["step"], _step_pointer(plan, wait["step"])
                self._bind_awaited(run, wait, schema, value, out)
            else:
                ready = ready_steps(plan, run, self.air.schemas, out)
                if not ready and run.waits and run.semantics > 1:
                    steps = [w["step"] for w in run.waits]
                    out.records.append(("plan.waiting", {"run_id": run.run_id, "steps": steps}))
                    return out
                if not ready:
                    return self._end(run, out, "ok", None)
                self._execute(plan, run, ready[0], out)
            if out.ended:
                return out
            check_invariants(plan, run, self.air.schemas, out)
            out.again = not run.waits or (run.semantics > 1 and self._any_ready(plan, run))
        except RunFailed as exc:
            return self.fail(run, out, exc.code, exc.detail)
        except (ExprError, ValueMismatch, WorldError) as exc:
            code, detail = failure(exc)
            inside = exc.pointer if isinstance(exc, ExprError) else ""
            return self.fail(run, out, code, detail, inside)
        return out

    def _any_ready(self, plan: Any, run: Run) -> bool:
        """Whether a step is ready now (semantics 2's wake). A guard that fails here wakes
        the run: the tick that executes it fails where the failure is, as it would have."""
        try:
            return bool(ready_steps(plan, run, self.air.schemas))
        except (RunFailed, ExprError, ValueMismatch, WorldError):
            return True

    def _at_waiting(self, plan: Any, run: Run, out: RunOutcome) -> None:
        """Point ``out`` at the (first) step the run waits in, if any."""
        waiting = run.waiting
        if waiting is not None:
            out.step = waiting["step"]
            out.at = _step_pointer(plan, waiting["step"])

    @staticmethod
    def _wait_of(run: Run, at: tuple[int, int] | None) -> dict[str, Any]:
        """The wait a delivery binds: semantics 1's one wait; semantics 2's wait that the
        delivery ``at`` matched."""
        if run.semantics == 1:
            return run.waits[0]
        for wait in run.waits:
            if wait.get("matched") == list(at or ()):
                return wait
        raise RunFailed("plan.not_waiting", f"run {run.run_id} got a delivery it did not await")

    def where_of(self, run: Run, step_id: str) -> Any:
        """The parsed ``where`` of the run's await_event step ``step_id`` (None if absent)."""
        for step in self.air.plans[run.plan].steps:
            if step.id == step_id and step.op == "await_event" and step.where is not None:
                return _expr(step.where)
        return None

    def matches(self, run: Run, where: Any, event: Any) -> bool:
        """``where`` over ``@event``; an Expr failure is "no match", never an error."""
        try:
            return evaluate(where, env_of(run, self.air.schemas, event)) is True
        except (ExprError, ValueMismatch):
            return False

    def _bind_awaited(
        self, run: Run, wait: dict[str, Any], schema: str, value: Any, out: RunOutcome
    ) -> None:
        step = wait["step"]
        run.waits.remove(wait)
        run.done.append(step)
        run.results[step] = value
        run.vars[wait["as"]] = value
        body: dict[str, Any] = {"run_id": run.run_id, "step": step, "op": wait["op"]}
        if schema == RECEIPT:
            body["intent_hash"] = wait["intent"]
        else:
            body["event"] = [schema, cbor.dumps(value)]
        out.records.append(("plan.step", body))

    def _execute(self, plan: Any, run: Run, step: Any, out: RunOutcome) -> None:
        env = env_of(run, self.air.schemas)
        body: dict[str, Any] = {"run_id": run.run_id, "step": step.id, "op": step.op}
        base = _step_pointer(plan, step.id)
        out.step, out.at = step.id, base + _STEP_FIELD.get(step.op, "")
        if step.op == "end":
            result = None if step.result is None else evaluate(_expr(step.result), env)
            if result is not None and plan.output is not None:
                self.check(plan.output, result)
            run.done.append(step.id)
            self._end(run, out, "ok", result)
            return
        if step.op == "assign":
            value = evaluate(_expr(step.expr), env)
            run.vars[step.bind.as_] = value
            run.results[step.id] = value
        elif step.op == "raise_event":
            self._raise(step, env, body, out)
            run.results[step.id] = cbor.loads(body["event"][1])
        elif step.op == "emit_effect":
            params = evaluate(_expr(step.params), env)
            effect = self.air.effects.get(step.kind)
            if effect is None:
                raise RunFailed("effect.unknown", f"unknown effect kind {step.kind}")
            self.check(effect.params_schema, params)
            out.effect = {
                "kind": step.kind,
                "params": params,
                "cap": step.cap,
                "bind": step.bind.effect_id_as,
                "step": step.id,
            }
            if step.idempotency_key is not None:
                out.effect["key"] = self._idempotency_key(step, env, out)
            return  # kernel._core checks and decides it, then journals the step
        elif step.op == "await_receipt":
            wanted = evaluate(_expr(step.for_), env)
            if type(wanted) is not bytes or len(wanted) != 32:
                raise RunFailed("plan.await_receipt.for", "await_receipt.for is not an effect id")
            run.waits.append(
                {"step": step.id, "op": step.op, "as": step.bind.as_, "intent": wanted}
            )
            body["waiting"] = wanted
            out.records.append(("plan.step", body))
            return
        elif step.op == "await_event":
            run.waits.append(
                {"step": step.id, "op": step.op, "as": step.bind.as_, "event": step.event}
            )
            body["waiting"] = step.event
            out.records.append(("plan.step", body))
            return
        run.done.append(step.id)
        out.records.insert(0, ("plan.step", body))

    @staticmethod
    def _idempotency_key(step: Any, env: Env, out: RunOutcome) -> str | bytes:
        """``emit_effect.idempotency_key``'s value: text or bytes (a hash is bytes)."""
        out.at = out.at.removesuffix("/params") + "/idempotency_key"
        key = evaluate(_expr(step.idempotency_key), env)
        if not isinstance(key, str | bytes):
            detail = f"idempotency_key of {step.id!r} is not text or bytes"
            raise RunFailed("plan.emit_effect.idempotency_key", detail)
        out.at = out.at.removesuffix("/idempotency_key") + "/params"
        return key

    def _raise_routed(self, step: Any, env: Env, body: dict[str, Any], out: RunOutcome) -> None:
        """A routed ``raise_event``: typed by its schema, then routed by the kernel as an
        event from outside of that schema is (``kernel._runs.PlanRuns.route``). Each keyed route of the
        run's era must find its ``key_field`` in the value; one that does not ends the run
        (``plan.raise_event.key_field``) before anything is raised."""
        out.at = out.at.removesuffix("/event") + "/value"
        schema = step.event
        if schema not in self.air.schemas:
            raise RunFailed("plan.raise_event.schema", f"unknown event schema {schema}")
        value = evaluate(_expr(step.value), env)
        self.check(schema, value)
        for route in self.air.manifest.routing.events:
            if route.event != schema or route.key_field is None:
                continue
            if not isinstance(value, dict) or route.key_field not in value:
                detail = (
                    f"{schema} is routed to {route.reducer} by key_field "
                    f"{route.key_field!r}, which the value does not have"
                )
                raise RunFailed("plan.raise_event.key_field", detail)
        value_cbor = cbor.dumps(value)
        body["event"] = [schema, value_cbor]
        out.raised.append((schema, value_cbor, None, None))

    def _raise(self, step: Any, env: Env, body: dict[str, Any], out: RunOutcome) -> None:
        if step.routed:
            self._raise_routed(step, env, body, out)
            return
        module = self.air.modules.get(step.reducer)
        if module is None:
            raise RunFailed("plan.raise_event.reducer", f"unknown reducer {step.reducer}")
        expr = _expr(step.event)
        schema = record_schema(expr) or module.abi.reducer.event
        value = evaluate(expr, env)
        self.check(schema, value)
        key_cbor = None
        key_type = self.key_types.get(step.reducer)
        if key_type is not None:
            if step.key is None:
                raise RunFailed("plan.raise_event.key", f"{step.reducer} is keyed: give a key")
            out.at = out.at.removesuffix("/event") + "/key"
            key = evaluate(_expr(step.key), env)
            check_value(key_type, key, self.air.schemas)
            key_cbor = cbor.dumps(key)
        value_cbor = cbor.dumps(value)
        body["event"] = [schema, value_cbor]
        body["reducer"] = step.reducer
        body["key"] = key_cbor
        out.raised.append((schema, value_cbor, step.reducer, key_cbor))

    def _end(self, run: Run, out: RunOutcome, status: str, result: Any) -> RunOutcome:
        body: dict[str, Any] = {"run_id": run.run_id, "status": status}
        if result is not None:
            body["result"] = cbor.dumps(result)
        out.records.append(("plan.ended", body))
        out.ended = True
        out.again = False
        return out

    def fail(
        self, run: Run, out: RunOutcome, code: str, detail: str, inside: str = ""
    ) -> RunOutcome:
        """End ``run`` with status error: drop what the tick did, journal only the end.
        ``out.where`` says where in the plan (``inside``: an Expr error's own pointer)."""
        out.where = {"step": out.step, "pointer": out.at + inside}
        out.records = [r for r in out.records if r[0] != "plan.step"]
        out.raised = []
        out.effect = None
        body = {"run_id": run.run_id, "status": "error", "error": {"code": code, "detail": detail}}
        out.records.append(("plan.ended", body))
        out.ended = True
        out.again = False
        return out
