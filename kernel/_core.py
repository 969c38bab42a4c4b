"""The deterministic kernel: routing, cells, ticks, and the journal records they produce.

``Kernel`` is a state machine over three injected stores: a ``Journal`` (the source of truth),
a ``CellStore`` (the materialised states) and a reducer ``Runner`` (the WASM host). It reads no
clock and no file; everything that happens enters through ``ingest`` (an event from outside)
and ``tick`` (one step of one ready entity), and is written as journal records:

    kind          subject                                   body
    event.in      /world/event/<schema>                     {schema, value}
    step          /world/cell/<reducer>/<key hash>/step     {reducer, key, src, idx, out_hash,
                  /world/reducer/<reducer>/step               state_hash, events?, effects?}
    step.failed   (same subjects, leaf step.failed)         {reducer, key, src, idx, reason}

``src, idx`` is the delivery's identity (the seq of the record that produced it and its
position there); ``events``/``effects`` are present only when the step emitted some. ``out_hash`` is blake3 of the
reducer's raw output bytes, so replay can say exactly where behaviour first differed.

Replay. ``apply(record)`` re-executes a journal record instead of creating one: ``event.in``
is routed again, ``step``/``step.failed`` runs the next tick and compares the record it would
have written with the one in the journal, raising ``ReplayDivergence`` at the first difference.
Recovery (snapshot + journal tail) and ``world replay --verify`` (from genesis) both use it.

Native path. Normalising sent events, canonical encoding of keys and replay comparisons go
through ``kernel.native`` (C when built and enabled, the pure functions otherwise, the same bytes
either way); one cell's step is the ``_stepping`` mixin.

Semantics (SPEC §6): a keyed route takes the key from the normalised event's ``key_field``; the
first event for a key steps the cell with ``state=null``; a reducer returning ``state=null``
deletes its cell. Events a step emits are routed after the step, so they run no earlier than
the next tick. A step that fails (trap, fuel, bad output) is journaled as ``step.failed`` with
its reason, its delivery goes to the dead-letter list, and the world goes on.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import cbor2

from air import LoadedAir, SchemaCheckers, cbor
from air.errors import CborError, LimitExceeded, UnknownName, ValueMismatch, WorldError
from air.types import Ref
from air.values import normalise
from kernel import _abi as abi
from kernel import native
from kernel._abi import StepRejected
from kernel._cells import NULL_KEY_CBOR, CellEntry, CellStore
from kernel._divergence import ReplayDivergence, first_difference, show_value
from kernel._effects import CapDenied, EffectManager, Intent
from kernel._journal import Journal, JournalRecord
from kernel._moves import MOVE_KINDS, apply_move
from kernel._orchestration import Orchestration
from kernel._plans import (
    PlanEngine,
    Run,
)
from kernel._scheduler import Delivery, Entity, Scheduler
from kernel._stepping import Stepping
from kernel._subjects import make_subject
from kernel.wasm._host import ReducerError, ReducerLoadError

__all__ = [
    "EVENTS_PER_STEP_MAX",
    "TICK_KINDS",
    "DeadLetter",
    "Kernel",
    "KernelLimits",
    "ReplayDivergence",
    "Runner",
    "first_difference",
    "reducer_fault",
    "show_value",
]

EVENTS_PER_STEP_MAX: Final = 64
STEPS_PER_RUN_MAX: Final = 1_000_000
DEAD_LETTERS_KEPT: Final = 10_000
_ENTITIES_CACHED_MAX: Final = 65_536  # per reducer


class Runner(Protocol):
    """Runs one reducer step: canonical envelope in, raw output bytes out (or a WorldError)."""

    def run(self, reducer: str, input_cbor: bytes) -> bytes: ...


@dataclass(frozen=True)
class KernelLimits:
    """Named limits; each has a test that hits it."""

    events_per_step_max: int = EVENTS_PER_STEP_MAX
    steps_per_run_max: int = STEPS_PER_RUN_MAX
    dead_letters_kept: int = DEAD_LETTERS_KEPT


@dataclass(frozen=True)
class DeadLetter:
    seq: int
    reducer: str
    key_cbor: bytes | None
    schema: str
    value_cbor: bytes
    code: str
    detail: str

    def to_obj(self) -> list[Any]:
        return [
            self.seq,
            self.reducer,
            self.key_cbor,
            self.schema,
            self.value_cbor,
            self.code,
            self.detail,
        ]


@dataclass(frozen=True)
class _Route:
    reducer: str
    key_field: str | None


@dataclass
class Kernel(Stepping, Orchestration):
    air: LoadedAir
    journal: Journal
    cells: CellStore
    runner: Runner
    limits: KernelLimits = field(default_factory=KernelLimits)
    scheduler: Scheduler = field(default_factory=Scheduler)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    steps_total: int = 0
    dead_letters_total: int = 0
    _routes: dict[str, list[_Route]] = field(default_factory=dict)
    _module_hash: dict[str, str] = field(default_factory=dict)
    _manifest_raw: bytes = b""
    _reducer_effects: dict[str, str] = field(default_factory=dict)
    _modules: dict[str, Any] = field(default_factory=dict)
    _event_subjects: dict[str, str] = field(default_factory=dict)
    _checkers: SchemaCheckers = field(init=False)
    consistent: bool = True
    runs: dict[int, Run] = field(default_factory=dict)
    runs_started: int = 0
    effects: EffectManager = field(init=False)
    _engine: PlanEngine = field(init=False)
    _triggers: dict[str, list[Any]] = field(default_factory=dict)
    _owed: deque[tuple[str, str, dict[str, Any]]] = field(default_factory=deque)
    _subjects: dict[str, dict[Entity, str]] = field(default_factory=dict)
    _output_rules: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    _norm_programs: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    _entities: dict[str, dict[bytes | None, Entity]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for route in self.air.manifest.routing.events:
            self._routes.setdefault(route.event, []).append(_Route(route.reducer, route.key_field))
        self._modules = self.air.modules  # computed once: LoadedAir.modules builds a dict per call
        for name in self._modules:
            self._module_hash[name] = self.air.wasm_hashes[name].removeprefix("blake3:")
        self._manifest_raw = cbor.hash_to_raw(self.air.manifest_hash)
        self._checkers = SchemaCheckers(self.air.schemas)
        self._reducer_effects = {
            k: e.params_schema for k, e in self.air.effects.items() if "reducer" in e.origins
        }
        self.effects = EffectManager(self.air)
        self._engine = PlanEngine(self.air, self._check_schema, self.air.key_types)
        for trigger in self.air.manifest.triggers:
            self._triggers.setdefault(trigger.event, []).append(trigger)

    # --- ingress ----------------------------------------------------------------------------

    def normalise_event(self, schema: str, value: Any) -> tuple[bytes, Any]:
        """Normalise an outside value (either lens) by its schema: (canonical CBOR, value)."""
        if schema not in self.air.schemas:
            raise UnknownName("event schema", schema, sorted(self._routes))
        if schema not in self._routes and schema not in self._triggers:
            raise UnknownName("route for", schema, sorted(self._routes | self._triggers))
        program = self._norm_programs.get(schema)
        if program is None:
            program = self._norm_programs[schema] = native.norm_program(
                Ref(schema), self.air.schemas
            )
        handled, normalised = native.normalise(program, value)
        if not handled:
            normalised = normalise(Ref(schema), value, self.air.schemas)
        return native.dumps(normalised), normalised

    def ingest(self, schema: str, value_cbor: bytes, value: Any = None) -> int:
        """Journal an outside event and route it; return its seq. ``value`` is the decoded
        ``value_cbor`` when the caller has it (saves a decode)."""
        subject = self._event_subjects.get(schema)
        if subject is None:
            subject = self._event_subjects[schema] = make_subject("world", "event", schema)
        seq = self.journal.append("event.in", subject, {"schema": schema, "value": value_cbor})
        self._route(seq, 0, schema, value_cbor, value)
        return seq

    def _route(
        self, src_seq: int, first_index: int, schema: str, value_cbor: bytes, value: Any = None
    ) -> int:
        """Deliver one event to every route for its schema; return the next delivery index.
        ``value_cbor`` was validated when it entered the journal, so it is decoded trusted."""
        index = first_index
        routes = self._routes.get(schema, ())
        if value is None and any(r.key_field for r in routes):
            value = cbor2.loads(value_cbor)
        for route in routes:
            key_cbor = native.dumps(value[route.key_field]) if route.key_field else None
            self.scheduler.deliver(
                self._entity(route.reducer, key_cbor), Delivery(src_seq, index, schema, value_cbor)
            )
            index += 1
        if schema in self._triggers or self.runs:
            index = self._observe(src_seq, index, schema, value_cbor, value)
        return index

    def _entity(self, reducer: str, key_cbor: bytes | None) -> Entity:
        """The entity of a cell, shared by its deliveries (an ``Entity`` hashes its key once).
        Cached per reducer, so a lookup builds no tuple: in a world of new cells every cached
        entity outlives the collector's youngest generation, and fewer such objects per event
        is less of its work (BENCHMARKS.md, "Cells at scale")."""
        cached = self._entities.get(reducer)
        if cached is None:
            cached = self._entities[reducer] = {}
        entity = cached.get(key_cbor)
        if entity is None:
            if len(cached) >= _ENTITIES_CACHED_MAX:
                cached.clear()  # bounded; equal entities are interchangeable
            entity = cached[key_cbor] = Entity(reducer, key_cbor)
        return entity

    # --- ticks ------------------------------------------------------------------------------

    def idle(self) -> bool:
        return self.scheduler.idle()

    def tick(self, expected: JournalRecord | None = None) -> bool:
        """Run one step of the next ready entity; False when nothing is ready.

        The delivery leaves its mailbox only after the step's record is appended, so any error
        before that (a damaged store, an I/O or engine error, an interrupt) leaves the kernel
        exactly as it was and the delivery queued. Only a reducer's own deterministic failure
        (``reducer_fault``) becomes ``step.failed``. From the append to the end of the tick
        the kernel only updates memory; ``consistent`` is False while it does, so a caller
        that sees an exception escape with ``consistent`` False knows not to checkpoint.
        """
        taken = self.scheduler.peek()
        if taken is None:
            if expected is not None:
                raise ReplayDivergence(
                    expected.seq, expected.subject, expected.kind, "nothing ready"
                )
            return False
        entity, delivery = taken
        if entity.run_id is not None:
            self._tick_run(entity, delivery, expected)
            return True
        current = self._load_state(entity)
        out: abi.StepOutput | None = None
        extra: list[tuple[str, str, dict[str, Any]]] = []
        intents: list[Intent] = []
        try:
            kind, body, out = self._step(entity, delivery, current)
            if out.effects:
                extra, intents = self._reducer_effects_of(entity, delivery, out)
        except WorldError as exc:
            if not reducer_fault(exc):
                raise
            kind, body, out = "step.failed", self._failure_body(entity, delivery, exc), None
        except CapDenied as denied:
            kind, body, out = "step.failed", self._failure_body(entity, delivery, denied), None
            extra, intents = [], []
        records = [(kind, self._entity_subject(entity, kind), body), *extra]
        seq = self._append(records, expected)
        self.scheduler.consume()
        self.steps_total += 1
        if out is None:
            self._dead_letter(seq, entity.reducer, entity.key_cbor, delivery, body["reason"])
        else:
            self._commit_step(seq, entity, current, body["state_hash"], out)
            for intent in intents:
                self.effects.add(intent)
        self.consistent = True
        return True

    def _append(
        self, records: list[tuple[str, str, dict[str, Any]]], expected: JournalRecord | None
    ) -> int:
        """Journal a tick's records (or, replaying, check the first against ``expected`` and
        owe the rest to the records that follow it); return the first one's seq. Leaves
        ``consistent`` False: the caller applies the tick to memory, then sets it True."""
        appended_before = self.journal.seq_next
        self.consistent = False
        try:
            kind, subject, body = records[0]
            seq = self._record(kind, subject, body, expected)
            for kind, subject, body in records[1:]:
                if expected is None:
                    self.journal.append(kind, subject, body)
                else:
                    self._owed.append((kind, subject, body))
        except BaseException:
            # Trusted again only if no record got in; otherwise the journal holds a step whose
            # delivery is still queued, and memory must not be checkpointed.
            self.consistent = self.journal.seq_next == appended_before
            raise
        return seq

    def _observed(self, schema: str) -> bool:
        """Whether anything takes an event of ``schema``: a route, a trigger, a waiting run."""
        return (
            schema in self._routes
            or schema in self._triggers
            or any((r.waiting or {}).get("event") == schema for r in self.runs.values())
        )

    def _store_key(self, entity: Entity) -> tuple[str, bytes]:
        return self._module_hash[entity.reducer], entity.store_key_hash

    def _load_state(self, entity: Entity) -> tuple[CellEntry, bytes] | None:
        return self.cells.get(*self._store_key(entity))

    def _record(
        self, kind: str, subject: str, body: dict[str, Any], expected: JournalRecord | None
    ) -> int:
        if expected is None:
            return self.journal.append(kind, subject, body)
        actual = native.dumps({"kind": kind, "subject": subject, "body": body})
        wanted = native.dumps(
            {"kind": expected.kind, "subject": expected.subject, "body": expected.body}
        )
        if actual != wanted:
            name, was, now = first_difference(
                {"kind": expected.kind, "subject": expected.subject, "body": expected.body},
                {"kind": kind, "subject": subject, "body": body},
            )
            raise ReplayDivergence(expected.seq, subject, was, now, name)
        return expected.seq

    def _dead_letter(
        self,
        seq: int,
        reducer: str,
        key_cbor: bytes | None,
        delivery: Delivery,
        reason: dict[str, Any],
    ) -> None:
        letter = DeadLetter(
            seq,
            reducer,
            key_cbor,
            delivery.schema,
            delivery.value_cbor,
            reason["code"],
            reason["detail"],
        )
        self.dead_letters.append(letter)
        self.dead_letters_total += 1
        excess = len(self.dead_letters) - self.limits.dead_letters_kept
        if excess > 0:
            del self.dead_letters[:excess]

    def _commit_step(
        self,
        seq: int,
        entity: Entity,
        current: tuple[CellEntry, bytes] | None,
        state_hash: bytes | None,
        out: abi.StepOutput,
    ) -> None:
        module, khash = self._store_key(entity)
        if out.state_cbor is None or state_hash is None:
            if current is not None:
                self.cells.delete(module, khash)
        else:
            pinned = current[0].manifest_hash if current else self._manifest_raw
            key_cbor = NULL_KEY_CBOR if entity.key_cbor is None else entity.key_cbor
            # The state hash is the one the step record carries; computed once per step.
            entry = CellEntry(key_cbor, state_hash, len(out.state_cbor), seq, pinned)
            self.cells.put(module, khash, entry, out.state_cbor)
        index = 0
        values = out.values.events if out.values is not None else (None,) * len(out.domain_events)
        for event, value in zip(out.domain_events, values, strict=True):
            if not self._observed(event.schema):
                # Nothing vanishes: an emitted event no route takes is a dead letter of its step.
                unrouted = Delivery(seq, index, event.schema, event.value_cbor)
                reason = {"code": "no_route", "detail": f"no route for emitted {event.schema}"}
                self._dead_letter(seq, entity.reducer, entity.key_cbor, unrouted, reason)
                continue
            index = self._route(seq, index, event.schema, event.value_cbor, value)

    # --- replay -----------------------------------------------------------------------------

    def apply(self, record: JournalRecord) -> None:
        """Re-execute one journal record (recovery and verification). A tick that journals
        several records is run at its first; the others are compared as they come."""
        if self._owed:
            kind, subject, body = self._owed.popleft()
            self._record(kind, subject, body, record)
        elif record.kind == "event.in":
            self._route(record.seq, 0, record.body["schema"], record.body["value"])
        elif record.kind in TICK_KINDS:
            self.tick(expected=record)
        elif record.kind == "receipt":
            self._apply_receipt(record.seq, record.body)
        elif record.kind == "effect.approval":
            self._apply_approval(record.seq, record.body)
        elif record.kind in MOVE_KINDS:
            apply_move(self, record)
        elif record.kind in OWED_KINDS:
            raise ReplayDivergence(record.seq, record.subject, "a tick's record", record.kind)
        # other kinds (world.created) carry no kernel state

    def owed_records(self) -> list[tuple[str, str, dict[str, Any]]]:
        """Records the last replayed tick produced that the journal does not hold (it was cut
        inside a tick's commit): the caller appends them to complete the tick."""
        owed = list(self._owed)
        self._owed.clear()
        return owed

    # --- views ------------------------------------------------------------------------------

    def state_of(self, reducer: str, key_cbor: bytes | None) -> bytes | None:
        found = self._load_state(Entity(reducer, key_cbor))
        return None if found is None else found[1]

    def module_hash(self, reducer: str) -> str:
        return self._module_hash[reducer]

    def module_hashes(self) -> list[str]:
        """Every reducer's module hash (hex), in reducer-name order."""
        return [self._module_hash[name] for name in sorted(self._module_hash)]

    def snapshot_obj(self, seq_next: int) -> dict[str, Any]:
        return {
            "seq_next": seq_next,
            "manifest_hash": self._manifest_raw,
            "scheduler": self.scheduler.to_obj(),
            "dead_letters": [d.to_obj() for d in self.dead_letters],
            "steps_total": self.steps_total,
            "dead_letters_total": self.dead_letters_total,
            "runs": [run.to_obj() for _id, run in sorted(self.runs.items())],
            "runs_started": self.runs_started,
            "effects": self.effects.to_obj(),
        }

    def restore(self, obj: dict[str, Any]) -> None:
        self.scheduler = Scheduler.from_obj(obj["scheduler"])
        self.dead_letters = [DeadLetter(*d) for d in obj["dead_letters"]]
        self.steps_total = obj["steps_total"]
        self.dead_letters_total = obj["dead_letters_total"]
        self.runs = {r[0]: Run.from_obj(r) for r in obj.get("runs", [])}
        self.runs_started = obj.get("runs_started", 0)
        self.effects.restore(obj.get("effects"))


_ENVIRONMENT_CODES: Final = frozenset(("engine", "instantiate"))
TICK_KINDS: Final = frozenset(("step", "step.failed", "plan.started", "plan.step", "plan.ended"))
"""Record kinds that begin a tick (replay runs the tick at them)."""
OWED_KINDS: Final = frozenset(("effect.queued", "policy.decision"))
"""Record kinds that only follow a tick's first record, in the same tick."""


def reducer_fault(exc: WorldError) -> bool:
    """True when ``exc`` is the reducer's own deterministic failure (trap, fuel, memory, output
    too large or out of bounds, output that fails decoding or validation, too many events):
    the same input fails the same way on every machine, so it is journaled as ``step.failed``.
    Everything else (a wasmtime engine error, a module that will not load or instantiate, a
    missing or damaged object, an I/O error) is the environment's fault: it stops the run and
    the delivery stays queued."""
    if isinstance(exc, ReducerLoadError):
        return False
    if isinstance(exc, ReducerError):
        return exc.code not in _ENVIRONMENT_CODES
    if isinstance(exc, LimitExceeded):
        return exc.limit == "events_per_step_max"
    return isinstance(exc, (StepRejected, CborError, ValueMismatch))
