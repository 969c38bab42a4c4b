"""The deterministic kernel: routing, cells, ticks, and the journal records they produce.

``Kernel`` is a state machine over three injected stores: a ``Journal`` (the source of truth),
a ``CellStore`` (the materialised states) and a reducer ``Runner`` (the WASM host). It reads no
clock and no file; everything that happens enters through ``ingest`` (an event from outside)
and ``tick`` (one step of one ready entity), and is written as journal records:

    kind          subject                                   body
    event.in      /world/event/<schema>                     {schema, value, id?}
    step          /world/cell/<reducer>/<key hash>/step     {reducer, key, src, idx, out_hash,
                  /world/reducer/<reducer>/step               state_hash, events?, effects?}
    step.failed   (same subjects, leaf step.failed)         {reducer, key, src, idx, reason}

``id`` is the sender's idempotency key, when it gave one: the kernel journals it and routes the
event, and holds no memory of ids; which events of a batch are new is the world's to say before
it asks the kernel to journal them (``world._event_ids``: an index of every id ever journaled,
derived from the journal, too big for a kernel's snapshot). ``src, idx`` is the delivery's identity (the seq of the record that produced it and its
position there); ``events``/``effects`` are present only when the step emitted some. ``out_hash`` is blake3 of the
reducer's raw output bytes, so replay can say exactly where behaviour first differed.

Replay. ``apply(record)`` re-executes a journal record instead of creating one: ``event.in``
is routed again, ``step``/``step.failed`` runs the next tick and compares the record it would
have written with the one in the journal, raising ``ReplayDivergence`` at the first difference.
Recovery (snapshot + journal tail) and ``world replay --verify`` (from genesis) both use it.

Parts. The kernel owns, as objects: its ``Recorder`` (a tick's records appended, or compared
on replay), its ``Scheduler`` (mailboxes, fair ready queue), ``CellSteps`` (one cell's step),
``PlanRuns`` (the live plan runs), ``EffectManager`` (intents, capabilities, policy, budgets)
and ``DeadLetters``. This module routes between them: events to mailboxes and runs, a tick to
a cell or a run, receipts and approvals to where their intent came from.

Queries. What is outside the kernel (the operations of ``world.ops``, the inspector, the
world layer) reads it through the methods under "queries" below, never through its parts:
``counts`` (its counters, one frozen value), ``intents``/``live_intents``/``intent``/
``held_receipt`` (effects), ``runs``/``run_failures``/``run_cancel_body`` (plan runs),
``dead_letter_list``/``dead_letter``, and the cell lookups (``cell_of``, ``state_of``,
``state_schema``, ``module_hash``, ``cell_space``, ``cell_spaces``). What they return is the
kernel's own (a run's locals, an intent): read it, never change it. The parts are still
attributes (the world layer's effect pump and an upgrade's shadow drive them); reading the
world's state through them is what these replace.

Consistency. ``consistent`` is the kernel's to say: every ``ingest_*`` brackets its own
append and apply (``_journaling``), as ``tick`` does through its recorder, so a caller that
journals a batch of inputs needs no bracket of its own. After an error that escaped with a
record in, it stays False: memory is behind the journal, do not checkpoint. (Its setter is
left only for the callers that still bracket an input themselves; the property's comment.)

Native path. Normalising sent events, canonical encoding of keys and replay comparisons go
through ``kernel.native`` (C when built and enabled, the pure functions otherwise, the same bytes
either way).

Semantics (SPEC §6): a keyed route takes the key from the normalised event's ``key_field``; the
first event for a key steps the cell with ``state=null``; a reducer returning ``state=null``
deletes its cell. Events a step emits are routed after the step, so they run no earlier than
the next tick. A step that fails (trap, fuel, bad output, a module the host refuses to load for
its own bytes) is journaled as ``step.failed`` with its reason, its delivery goes to the
dead-letter list, and the world goes on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import cbor2

from air import LoadedAir, SchemaCheckers, cbor, same_state_shape
from air.errors import (
    CborError,
    InvalidArgument,
    LimitExceeded,
    UnknownName,
    UsageError,
    ValueMismatch,
    WorldError,
)
from air.types import Ref
from air.values import normalise
from kernel import abi, native
from kernel._deadletters import DEAD_LETTER_KINDS, DeadLetter, DeadLetters
from kernel._effects import CapDenied, EffectManager, Intent, Settled
from kernel._eras import Era, Eras, LoadAir
from kernel._moves import MOVE_KINDS, moved_cell
from kernel._partition import OUTBOX_DELIVERED, Outgoing, Partition
from kernel._plans import PlanEngine, Run
from kernel._recorder import Record, Recorder
from kernel._runs import RUN_CANCELLED, PlanRuns
from kernel._scheduler import Delivery, Entity, Scheduler
from kernel._steps import CellSteps, Runner
from kernel._upgrades import UPGRADED, UpgradeBatch, upgrade_batch
from kernel.cells import (
    NULL_KEY_CBOR,
    NULL_KEY_HASH,
    CellEntry,
    CellStore,
    key_hash,
)
from kernel.errors import (
    CellRefused,
    ReducerError,
    ReplayDivergence,
    StepRejected,
)
from kernel.journal import Journal, JournalRecord
from kernel.subjects import make_subject

__all__ = [
    "EVENTS_PER_STEP_MAX",
    "GOV_KINDS",
    "OWED_KINDS",
    "TICK_KINDS",
    "DeadLetter",
    "Kernel",
    "KernelCounts",
    "KernelLimits",
    "Runner",
    "reducer_fault",
]

EVENTS_PER_STEP_MAX: Final = 64
STEPS_PER_RUN_MAX: Final = 1_000_000
DEAD_LETTERS_KEPT: Final = 10_000
_ENTITIES_CACHED_MAX: Final = 65_536  # per reducer


@dataclass(frozen=True)
class KernelLimits:
    """Named limits; each has a test that hits it."""

    events_per_step_max: int = EVENTS_PER_STEP_MAX
    steps_per_run_max: int = STEPS_PER_RUN_MAX
    dead_letters_kept: int = DEAD_LETTERS_KEPT


@dataclass(frozen=True)
class KernelCounts:
    """The kernel's counters at one moment (``Kernel.counts``)."""

    steps_total: int
    steps_failed: int
    """Failed steps (each made a dead letter)."""
    pending_deliveries: int
    ready_entities: int
    runs_started: int
    """Runs started so far: the next run's id (kept in snapshots)."""
    runs_begun: int
    """Runs this kernel object saw journal ``plan.started`` (not kept in snapshots)."""
    runs_ended: int
    """Runs this kernel object saw end: ok, error or cancelled (not kept in snapshots)."""
    runs_failed: int
    dead_letters_total: int
    dead_letters_kept: int


Outside = tuple[str, bytes, Any, "str | None"]
"""An event from outside: ``(schema, value_cbor, value or None, id or None)``."""


@dataclass(frozen=True)
class _Route:
    reducer: str
    key_field: str | None


class Kernel:
    def __init__(
        self,
        air: LoadedAir,
        journal: Journal,
        cells: CellStore,
        runner: Runner,
        limits: KernelLimits | None = None,
        load: LoadAir | None = None,
    ) -> None:
        """``air`` is the world's genesis AIR; ``load`` loads the AIR of a later era from its
        stored address (``kernel._eras``; without it, an upgrade cannot be applied)."""
        self.journal = journal
        self.cells = cells
        self.runner = runner
        self.limits = limits or KernelLimits()
        self.recorder = Recorder(journal)
        self.scheduler = Scheduler()
        self.eras = Eras(air, load)
        self._steps_of_era: dict[bytes, CellSteps] = {}
        self._engines: dict[bytes, PlanEngine] = {}
        self.effects = EffectManager(air)
        self.dead_letters = DeadLetters(self.limits.dead_letters_kept)
        self.plans = PlanRuns(
            air, self._engine_of, self.scheduler, self.recorder, self.effects, self.dead_letters
        )
        self.plans.place = self._place_raised
        self.plans.route = self._route
        self.steps_total = 0
        self._event_subjects: dict[str, str] = {}
        self._entities: dict[str, dict[bytes | None, Entity]] = {}
        self.partition: Partition | None = None
        """Set by the genesis record of a partitioned world (``kernel._partition``)."""
        self._enter(self.eras.current)

    def _enter(self, era: Era) -> None:
        """Make ``era`` the one the kernel routes, triggers and checks effects by."""
        air = self.air = era.air
        self.steps = self._steps_of(era)
        self.effects.use(air)
        self.plans.use(air)
        self._routes: dict[str, list[_Route]] = {}
        for route in air.manifest.routing.events:
            self._routes.setdefault(route.event, []).append(_Route(route.reducer, route.key_field))
        self._module_hash = {
            name: air.wasm_hashes[name].removeprefix("blake3:") for name in air.modules
        }
        self._space = era.spaces
        self._manifest_raw = era.manifest_raw
        self._norm_programs: dict[str, tuple[Any, ...]] = {}
        self._same: dict[tuple[bytes, str], bool] = {}

    def _steps_of(self, era: Era) -> CellSteps:
        steps = self._steps_of_era.get(era.manifest_raw)
        if steps is None:
            checkers = SchemaCheckers(era.air.schemas)
            steps = CellSteps(era.air, self.runner, self.limits.events_per_step_max, checkers)
            self._steps_of_era[era.manifest_raw] = steps
        return steps

    def _engine_of(self, manifest_raw: bytes) -> PlanEngine:
        """The plan engine of a run pinned to ``manifest_raw``'s era."""
        engine = self._engines.get(manifest_raw)
        if engine is None:
            era = self.eras.of(manifest_raw)
            steps = self._steps_of(era)
            engine = PlanEngine(era.air, steps.check_schema, era.air.key_types)
            self._engines[manifest_raw] = engine
        return engine

    @property
    def consistent(self) -> bool:
        """Whether memory equals the journal's records (``kernel._recorder`` says when not)."""
        return self.recorder.consistent

    @contextmanager
    def _journaling(self) -> Iterator[None]:
        """Bracket an input's append and apply: ``consistent`` is False in between, and stays
        False after an error that escaped with a record in (memory is behind the journal). An
        error before anything was appended changes nothing, so it leaves the flag as it was;
        so does success, a flag already False (an earlier failure) staying False."""
        recorder = self.recorder
        was = recorder.consistent
        before = self.journal.seq_next
        recorder.consistent = False
        try:
            yield
        except BaseException:
            recorder.consistent = was and self.journal.seq_next == before
            raise
        recorder.consistent = was

    # --- ingress ----------------------------------------------------------------------------

    def normalise_event(self, schema: str, value: Any) -> tuple[bytes, Any]:
        """Normalise an outside value (either lens) by its schema: (canonical CBOR, value)."""
        if schema not in self.air.schemas:
            raise UnknownName("event schema", schema, sorted(self._routes))
        triggers = self.plans.triggers
        if (
            schema not in self._routes
            and schema not in triggers
            and not self.plans.observes(schema)
        ):
            # Taken: a route, a trigger, or a live run waiting for it (``await_event``). One
            # that nothing takes is refused, not journaled to vanish.
            raise UnknownName("route for", schema, sorted(self._routes | triggers))
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
        return self.ingest_many([(schema, value_cbor, value, None)])[0]

    def ingest_many(self, events: Sequence[Outside]) -> list[int]:
        """Journal outside events ``(schema, value_cbor, value, id)`` and route them; their
        seqs, consecutive. Every record is encoded before any is appended, so one that cannot
        be (too large) leaves nothing pending. Each is journaled, ``id`` and all: dropping an
        event already journaled under its id is the caller's (``world._event_ids``)."""
        records: list[Record] = []
        for schema, value_cbor, _value, event_id in events:
            body: dict[str, Any] = {"schema": schema, "value": value_cbor}
            if event_id is not None:
                body["id"] = event_id
            records.append(("event.in", self._event_subject(schema), body))
        with self._journaling():
            appended = self.journal.append_many(records)
            for seq, (schema, value_cbor, value, _id) in zip(appended, events, strict=True):
                self._route(seq, 0, schema, value_cbor, value)
        return list(appended)

    def _event_subject(self, schema: str) -> str:
        subject = self._event_subjects.get(schema)
        if subject is None:
            subject = self._event_subjects[schema] = make_subject("world", "event", schema)
        return subject

    def _route(
        self,
        src_seq: int,
        first_index: int,
        schema: str,
        value_cbor: bytes,
        value: Any = None,
        *,
        forwarded: bool = False,
    ) -> int:
        """Deliver one event to every route for its schema; return the next delivery index.
        ``value_cbor`` was validated when it entered the journal, so it is decoded trusted.
        In a partition, a delivery another partition owns is owed to it instead (one entry
        per owner), unless the event was ``forwarded`` here: its source owes each owner."""
        index = first_index
        routes = self._routes.get(schema, ())
        if value is None and any(r.key_field for r in routes):
            value = cbor2.loads(value_cbor)
        part = self.partition
        owed: list[int] = []
        for route in routes:
            key_cbor = native.dumps(value[route.key_field]) if route.key_field else None
            entity = self._entity(route.reducer, key_cbor)
            if part is None or (owner := part.owner(key_cbor, entity.store_key_hash)) == part.index:
                self.scheduler.deliver(entity, Delivery(src_seq, index, schema, value_cbor))
            elif not forwarded and owner not in owed:
                owed.append(owner)
            index += 1
        if owed:
            assert part is not None
            for owner in sorted(owed):
                part.owe(Outgoing(owner, src_seq, first_index, schema, value_cbor))
        if not forwarded and self.plans.watching(schema):
            index = self.plans.observe(src_seq, index, schema, value_cbor, value)
        return index

    def _place_raised(self, entity: Entity, delivery: Delivery) -> None:
        """A plan's ``raise_event`` to one cell: queued here, or owed to its owner."""
        part = self.partition
        owner = 0 if part is None else part.owner(entity.key_cbor, entity.store_key_hash)
        if part is None or owner == part.index:
            self.scheduler.deliver(entity, delivery)
        else:
            target = (entity.reducer, entity.key_cbor)
            part.owe(
                Outgoing(
                    owner,
                    delivery.src_seq,
                    delivery.index,
                    delivery.schema,
                    delivery.value_cbor,
                    target,
                )
            )

    # --- partitions (``kernel._partition``) -------------------------------------------------

    def ingest_forwarded(self, source: int, entries: Sequence[Outgoing]) -> tuple[int, int] | None:
        """Journal the entries partition ``source`` owes this one that are past its cursor
        (in order; a second delivery is not journaled again) and route them. Returns the
        cursor after them: the last origin of ``source`` journaled here. An entry is input:
        its schema and value are checked as a step's output is, nothing appended if one
        fails."""
        part = self._partitioned()
        records: list[Record] = []
        for entry in part.new_entries(source, entries):
            try:
                self.steps.check_schema(entry.schema, cbor.loads(entry.value_cbor))
                if entry.target is not None and entry.target[0] not in self.air.modules:
                    raise UnknownName("reducer", entry.target[0], sorted(self.air.modules))
            except WorldError as exc:
                where = f"from partition {source}, its seq {entry.seq} index {entry.idx}"
                raise InvalidArgument("entry", where, f"{entry.schema}: {exc}") from exc
            body = Partition.forwarded_body(source, entry)
            records.append(("event.in", self._event_subject(entry.schema), body))
        with self._journaling():
            for seq, (_kind, _subject, body) in zip(
                self.journal.append_many(records), records, strict=True
            ):
                self._route_forwarded(seq, body)
        return part.cursor(source)

    def _route_forwarded(self, seq: int, body: dict[str, Any]) -> None:
        part = self._partitioned()
        source, seq_there, idx = body["origin"]
        part.take((source, seq_there, idx))
        delivery = Delivery(seq, 0, body["schema"], body["value"])
        if "to" in body:
            reducer, key_cbor = body["to"]
            self.scheduler.deliver(self._entity(reducer, key_cbor), delivery)
        else:
            self._route(seq, 0, body["schema"], body["value"], forwarded=True)

    def ingest_outbox_delivered(self, to: int, seq: int, idx: int) -> int:
        """Journal that partition ``to`` holds every entry owed to it up to origin
        ``(seq, idx)``, and drop those from the outbox; its seq."""
        self._partitioned()
        body = {"to": to, "seq": seq, "idx": idx}
        subject = make_subject("world", "outbox", str(to), "delivered")
        with self._journaling():
            appended = self.journal.append(OUTBOX_DELIVERED, subject, body)
            self._apply_outbox_delivered(body)
        return appended

    def _apply_outbox_delivered(self, body: dict[str, Any]) -> None:
        self._partitioned().delivered(body["to"], body["seq"], body["idx"])

    def _partitioned(self) -> Partition:
        if self.partition is None:
            raise UsageError("this world is not a partition of a partitioned world")
        return self.partition

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
            self.plans.tick(entity, delivery, expected)
            self.steps_total += 1
            self.recorder.consistent = True
            return True
        if entity.reducer not in self._space:  # queued under an older era's name
            entity = self._entity(
                self.eras.name_now(entity.reducer) or entity.reducer, entity.key_cbor
            )
        out: abi.StepOutput | None = None
        extra: list[Record] = []
        intents: list[Intent] = []
        current = None
        try:
            steps, name = self.steps, None
            if entity.reducer not in self._space:
                raise CellRefused("era.reducer_removed", f"no reducer {entity.reducer} any more")
            current = self._load_state(entity)
            if current is not None and current[0].manifest_hash != self._manifest_raw:
                steps, name = self._pinned(entity, current[0].manifest_hash, delivery.schema)
            kind, body, out = steps.run(entity, delivery, current, name)
            if out.effects:
                extra, intents = self.effects.reducer_intents(entity, delivery, out)
        except WorldError as exc:
            if not reducer_fault(exc):
                raise
            kind, body, out = "step.failed", self.steps.failure_body(entity, delivery, exc), None
        except CapDenied as denied:
            kind, body = "step.failed", self.steps.failure_body(entity, delivery, denied)
            out, extra, intents = None, [], []
        records = [(kind, self.steps.subject(entity, kind), body), *extra]
        seq = self.recorder.append(records, expected)
        self.scheduler.consume()
        self.steps_total += 1
        if out is None:
            self.dead_letters.add(
                seq, entity.reducer, entity.key_cbor, delivery, body["reason"], failed_step=True
            )
        else:
            self._commit_step(seq, entity, current, body["state_hash"], out)
            for intent in intents:
                self.effects.add(intent)
        self.recorder.consistent = True
        return True

    def _pinned(self, entity: Entity, manifest_raw: bytes, schema: str) -> tuple[CellSteps, str]:
        """The steps and module name of a cell pinned to an older era (``kernel._eras``);
        ``CellRefused`` when that era's module does not take events of ``schema``."""
        era = self.eras.by_manifest.get(manifest_raw)
        if era is None:  # a cell of no known era (none before eras existed): the current
            return self.steps, entity.reducer
        name = era.names.get(self._space[entity.reducer])
        if name is not None and self._same_module(era, name, entity.reducer):
            return self.steps, entity.reducer  # the same module and state: nothing to pin
        if name is None or not era.accepts(name, schema):
            raise CellRefused(
                "era.event_not_accepted",
                f"the cell is pinned to era {cbor.raw_to_hash(manifest_raw)}, whose module "
                f"takes no {schema}: upgrade the cell (world cells upgrade)",
            )
        return self._steps_of(era), name

    def _same_module(self, era: Era, name: str, reducer: str) -> bool:
        """Whether ``era``'s reducer ``name`` runs the current ``reducer``'s wasm on the same
        state schema: a cell of that era then steps exactly as a current one (and takes every
        event the current manifest routes to it)."""
        key = (era.manifest_raw, reducer)
        same = self._same.get(key)
        if same is None:
            same = self._same[key] = era.air.wasm_hashes[name] == self.air.wasm_hashes[
                reducer
            ] and same_state_shape(era.air, name, self.air, reducer)
        return same

    def _observed(self, schema: str) -> bool:
        """Whether anything takes an event of ``schema``: a route, a trigger, a waiting run."""
        return schema in self._routes or self.plans.observes(schema)

    def _store_key(self, entity: Entity) -> tuple[str, bytes]:
        return self._space[entity.reducer], entity.store_key_hash

    def _load_state(self, entity: Entity) -> tuple[CellEntry, bytes] | None:
        return self.cells.get(*self._store_key(entity))

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
                self.dead_letters.add(seq, entity.reducer, entity.key_cbor, unrouted, reason)
                continue
            index = self._route(seq, index, event.schema, event.value_cbor, value)

    # --- receipts, approvals and moves (inputs, like event.in) -----------------------------

    def ingest_receipt(self, body: dict[str, Any]) -> int:
        """Journal a receipt (``{intent_hash, adapter_id, status, payload, sig}``, verified
        by the caller) and deliver it; return its seq."""
        subject = make_subject("world", "effect", body["intent_hash"].hex(), "receipt")
        with self._journaling():
            seq = self.journal.append("receipt", subject, body)
            self._apply_receipt(seq, body)
        return seq

    def _apply_receipt(self, seq: int, body: dict[str, Any]) -> None:
        payload = cbor2.loads(body["payload"])
        intent = self.effects.apply_receipt(body["intent_hash"], body["status"], payload)
        if intent is None:
            return
        origin = intent.origin
        if body["status"] != "ok":
            reducer = str(origin.get("name"))
            letter = Delivery(seq, 0, intent.kind, body["payload"])
            reason = {"code": "effect_failed", "detail": f"{intent.kind} ended {body['status']}"}
            self.dead_letters.add(seq, reducer, origin.get("key"), letter, reason)
        if origin["kind"] == "plan":
            self.plans.receipt_arrived(seq, intent)
            return
        effect = self.air.effects.get(intent.kind)
        schema = None if effect is None else effect.receipt_event
        if schema is None:
            return
        value = {
            "intent_hash": intent.intent_hash,
            "status": body["status"],
            "requested": cbor2.loads(intent.params_cbor),
            "receipt": payload,
        }
        self.scheduler.deliver(
            Entity(str(origin["name"]), origin.get("key")),
            Delivery(seq, 0, schema, cbor.dumps(value)),
        )

    def ingest_approval(self, intent_hash_raw: bytes, approved: bool) -> int:
        """Journal an approver's decision on a parked intent and apply it; return its seq."""
        body = {"intent_hash": intent_hash_raw, "approved": approved}
        subject = make_subject("world", "effect", intent_hash_raw.hex(), "approval")
        with self._journaling():
            seq = self.journal.append("effect.approval", subject, body)
            self._apply_approval(seq, body)
        return seq

    def _apply_approval(self, seq: int, body: dict[str, Any]) -> None:
        intent = self.effects.approve(body["intent_hash"], bool(body["approved"]))
        if intent is None or body["approved"]:
            return
        origin = intent.origin
        if origin["kind"] == "plan":
            self.plans.denied(seq, intent)
        elif origin["kind"] == "reducer":
            letter = Delivery(seq, 0, intent.kind, intent.params_cbor)
            reason = {"code": "effect_denied", "detail": "an approver denied it"}
            self.dead_letters.add(seq, str(origin["name"]), origin.get("key"), letter, reason)

    def ingest_dead_letter(self, kind: str, letter_id: str) -> int:
        """Journal an operator's ``deadletter.retried`` or ``deadletter.dropped`` on the kept
        letter ``letter_id`` and apply it (``kernel._deadletters``); return its seq."""
        kind, subject, body = self.dead_letters.record(kind, letter_id)
        with self._journaling():
            seq = self.journal.append(kind, subject, body)
            self._apply_dead_letter(JournalRecord(seq, subject, kind, body))
        return seq

    def _apply_dead_letter(self, record: JournalRecord) -> None:
        retry = self.dead_letters.apply(record)
        if retry is not None:
            reducer, key_cbor, delivery = retry
            self.scheduler.deliver(self._entity(reducer, key_cbor), delivery)

    def ingest_run_cancel(self, run_id: int) -> int:
        """Journal ``run.cancelled`` for live run ``run_id`` and apply it (``kernel._runs``);
        its seq."""
        with self._journaling():
            return self.plans.cancel(run_id)

    def ingest_moves(self, records: Sequence[Record]) -> list[int]:
        """Journal records that move cells in (``kernel._moves``) and apply them; their seqs.
        Every record is encoded before any is appended (one too large leaves none pending);
        the caller checked the cells (``check_cell``), which applying checks again. In a
        partition, a cell whose key another partition owns is refused, nothing appended."""
        if self.partition is not None:
            self.partition.refuse_foreign(records)
        with self._journaling():
            seqs = list(self.journal.append_many(records))
            for seq, (kind, subject, body) in zip(seqs, records, strict=True):
                self._apply_move(JournalRecord(seq, subject, kind, body))
        return seqs

    def ingest_gov(self, records: Sequence[Record]) -> list[int]:
        """Journal governance records (``GOV_KINDS``, ``world.gov``) and apply them; their
        seqs. A proposal or an approval carries no kernel state (the journal is where they
        live); ``gov.applied`` starts a new era (``kernel._eras``): its AIR is loaded and
        checked before anything is appended."""
        for kind, _subject, body in records:
            if kind not in GOV_KINDS:
                raise UsageError(f"not a governance record: {kind}")
            if kind == APPLIED:
                self.eras.check(body)
        with self._journaling():
            seqs = list(self.journal.append_many(records))
            for seq, (kind, subject, body) in zip(seqs, records, strict=True):
                self._apply_gov(JournalRecord(seq, subject, kind, body))
        return seqs

    def _apply_gov(self, record: JournalRecord) -> None:
        if record.kind == APPLIED:
            self._enter(self.eras.apply(record.seq, record.body))

    def ingest_cell_upgrade(
        self, reducer: str, key_cbors: Sequence[bytes]
    ) -> tuple[int, dict[str, Any]] | None:
        """Upgrade ``reducer``'s cells ``key_cbors`` to the current era (``kernel._upgrades``):
        journal one ``cell.upgraded`` record and apply it; its seq and body, or None when none
        of the cells needed it (nothing journaled)."""
        if reducer not in self._space:
            raise UnknownName("reducer", reducer, sorted(self._space))
        batch = self._upgrade_batch(reducer, key_cbors, self.journal.seq_next)
        if not batch.body["cells"] and not batch.body["failed"]:
            return None
        with self._journaling():
            seq = self.journal.append(UPGRADED, batch.subject, batch.body)
            self._put_upgraded(batch)
        return seq, batch.body

    def _upgrade_batch(self, reducer: str, key_cbors: Sequence[bytes], seq: int) -> UpgradeBatch:
        return upgrade_batch(
            self.eras, self.cells, self._steps_of, reducer_fault, reducer, key_cbors, seq
        )

    def _apply_cell_upgrade(self, record: JournalRecord) -> None:
        body = record.body
        keys = [line[0] for line in body["cells"]] + [line[0] for line in body["failed"]]
        batch = self._upgrade_batch(body["reducer"], keys, record.seq)
        if batch.body != body:
            raise ReplayDivergence(
                record.seq, record.subject, "the upgrade the journal holds", "another outcome"
            )
        self._put_upgraded(batch)

    def _put_upgraded(self, batch: UpgradeBatch) -> None:
        space = self._space[batch.reducer]
        for khash, (entry, state) in batch.puts.items():
            self.cells.put(space, khash, entry, state)

    def _apply_move(self, record: JournalRecord) -> None:
        cell = moved_cell(self.air, record)
        if cell is None:
            return
        reducer, key_cbor, state_cbor = cell
        khash = NULL_KEY_HASH if key_cbor is None else key_hash(key_cbor)
        entry = CellEntry.of(
            NULL_KEY_CBOR if key_cbor is None else key_cbor,
            state_cbor,
            last_active=record.seq,
            manifest_hash=self._manifest_raw,
        )
        self.cells.put(self.cell_space(reducer), khash, entry, state_cbor)

    # --- replay -----------------------------------------------------------------------------

    def apply(self, record: JournalRecord) -> None:
        """Re-execute one journal record (recovery and verification). A tick that journals
        several records is run at its first; the others are compared as they come."""
        if self.recorder.settle(record):
            return
        if record.kind == "event.in":
            body = record.body
            if "origin" in body:
                self._route_forwarded(record.seq, body)
            else:
                self._route(record.seq, 0, body["schema"], body["value"])
        elif record.kind in TICK_KINDS:
            self.tick(expected=record)
        elif record.kind == "receipt":
            self._apply_receipt(record.seq, record.body)
        elif record.kind == "effect.approval":
            self._apply_approval(record.seq, record.body)
        elif record.kind in MOVE_KINDS:
            self._apply_move(record)
        elif record.kind in GOV_KINDS:
            self._apply_gov(record)
        elif record.kind == UPGRADED:
            self._apply_cell_upgrade(record)
        elif record.kind == RUN_CANCELLED:
            self.plans.apply_cancel(record)
        elif record.kind in DEAD_LETTER_KINDS:
            self._apply_dead_letter(record)
        elif record.kind == OUTBOX_DELIVERED:
            self._apply_outbox_delivered(record.body)
        elif record.kind == "world.created":
            self.partition = Partition.from_genesis(record.body)
        elif record.kind in OWED_KINDS:
            raise ReplayDivergence(record.seq, record.subject, "a tick's record", record.kind)
        # other kinds carry no kernel state

    def owed_records(self) -> list[Record]:
        """Records the last replayed tick produced that the journal does not hold (it was cut
        inside a tick's commit): the caller appends them to complete the tick."""
        return self.recorder.take_owed()

    # --- queries (the module docstring, "Queries") -----------------------------------------

    def counts(self) -> KernelCounts:
        """The kernel's counters now: steps, deliveries, runs, dead letters."""
        plans, letters = self.plans, self.dead_letters
        return KernelCounts(
            steps_total=self.steps_total,
            steps_failed=letters.steps_failed,
            pending_deliveries=self.scheduler.pending,
            ready_entities=self.scheduler.ready_count(),
            runs_started=plans.started,
            runs_begun=plans.begun,
            runs_ended=plans.ended,
            runs_failed=plans.failed_total,
            dead_letters_total=letters.total,
            dead_letters_kept=len(letters.letters),
        )

    def intents(self) -> list[Intent | Settled]:
        """The live intents (queued, parked) and the recently settled ones, in hash order."""
        return self.effects.listing()

    def live_intents(self) -> list[Intent]:
        """The intents queued (for an adapter, or in flight) or parked (awaiting approval),
        in hash order."""
        return [i for _h, i in sorted(self.effects.intents.items())]

    def intent(self, intent_hash: bytes) -> Intent | None:
        """The live (queued or parked) intent ``intent_hash`` (raw), None if none is."""
        return self.effects.intents.get(intent_hash)

    def held_receipt(self, intent_hash: bytes) -> dict[str, Any] | None:
        """``{status, payload}`` of a plan's settled intent whose run may still await it."""
        return self.effects.receipt_of(intent_hash)

    def runs(self) -> dict[int, Run]:
        """The live plan runs (running or waiting) by id, in id order."""
        return dict(sorted(self.plans.runs.items()))

    def run_failures(self) -> dict[int, dict[str, Any]]:
        """The last ``kernel._runs.FAILURES_KEPT`` failed runs, oldest first: run id ->
        ``{plan, seq, code, step, pointer}`` (derived by re-execution, not journaled)."""
        return dict(self.plans.failures)

    def run_cancel_body(self, run_id: int) -> dict[str, Any]:
        """The body ``ingest_run_cancel(run_id)`` would journal now: ``{run_id, plan,
        intents}`` (``KeyError`` if the run is not live)."""
        return self.plans.cancel_body(run_id)[1]

    def dead_letter_list(self) -> list[DeadLetter]:
        """The kept dead letters, oldest first (``counts`` has how many there ever were)."""
        return list(self.dead_letters.letters)

    def dead_letter(self, letter_id: str) -> DeadLetter:
        """The kept dead letter ``letter_id`` (exact), or ``UnknownName`` listing them."""
        return self.dead_letters.get(letter_id)

    def state_of(self, reducer: str, key_cbor: bytes | None) -> bytes | None:
        found = self._load_state(Entity(reducer, key_cbor))
        return None if found is None else found[1]

    def cell_of(self, reducer: str, key_cbor: bytes | None) -> tuple[CellEntry, bytes] | None:
        """A cell's entry (its era in ``manifest_hash``) and state, None if it has none."""
        return self._load_state(Entity(reducer, key_cbor))

    def state_schema(self, reducer: str, manifest_raw: bytes) -> tuple[str, LoadedAir]:
        """The state schema of ``reducer``'s cells pinned to ``manifest_raw``'s era, and that
        era's AIR (whose schemas define it): a cell is read through its own era's schema."""
        pinned = self._era_name(reducer, manifest_raw)
        if pinned is None:
            return self.air.modules[reducer].abi.reducer.state, self.air
        era, name = pinned
        return era.air.modules[name].abi.reducer.state, era.air

    def module_hash(self, reducer: str, manifest_raw: bytes | None = None) -> str:
        """The hash (hex) of ``reducer``'s wasm module: what its cells run, and the folder of
        an export tree (``state/reducers/<module_hash>/``). With ``manifest_raw``, the module
        a cell pinned to that era runs (the current one for an era the kernel does not know,
        or that had no such reducer)."""
        pinned = None if manifest_raw is None else self._era_name(reducer, manifest_raw)
        if pinned is None:
            return self._module_hash[reducer]
        era, name = pinned
        return era.air.wasm_hashes[name].removeprefix("blake3:")

    def _era_name(self, reducer: str, manifest_raw: bytes) -> tuple[Era, str] | None:
        """``manifest_raw``'s era and the name ``reducer``'s cells had in it, if it knew them."""
        era = self.eras.by_manifest.get(manifest_raw)
        name = None if era is None else era.names.get(self._space[reducer])
        return None if era is None or name is None else (era, name)

    def cell_space(self, reducer: str) -> str:
        """The store space (hex) of ``reducer``'s cells (``kernel.cells.cell_space``)."""
        return self._space[reducer]

    def cell_spaces(self) -> list[str]:
        """Every reducer's store space (hex), in reducer-name order."""
        return [self._space[name] for name in sorted(self._space)]

    def snapshot_obj(self, seq_next: int) -> dict[str, Any]:
        obj = {
            "seq_next": seq_next,
            "manifest_hash": self._manifest_raw,
            "scheduler": self.scheduler.to_obj(),
            "dead_letters": [d.to_obj() for d in self.dead_letters.letters],
            "steps_total": self.steps_total,
            "dead_letters_total": self.dead_letters.total,
            **self.dead_letters.extra_obj(),
            "runs": self.plans.to_obj(),
            "runs_started": self.plans.started,
            "effects": self.effects.to_obj(),
        }
        failures = self.plans.failures_obj()
        if failures is not None:  # absent before the first failed run: older snapshots' shape
            obj["run_failures"] = failures
        eras = self.eras.to_obj()
        if eras:  # absent before the first upgrade: older snapshots' shape
            obj["eras"] = eras
        if self.partition is not None:  # absent in an ordinary world
            obj["partition"] = self.partition.to_obj()
        return obj

    def restore(self, obj: dict[str, Any]) -> None:
        self.eras.restore(obj.get("eras", []))
        self._enter(self.eras.current)
        self.scheduler.restore(obj["scheduler"])
        self.dead_letters.restore(
            obj["dead_letters"], obj["dead_letters_total"], obj.get("steps_failed", 0)
        )
        self.steps_total = obj["steps_total"]
        self.plans.restore(obj.get("runs", []), obj.get("runs_started", 0))
        self.plans.restore_failures(obj.get("run_failures"))
        self.effects.restore(obj.get("effects"))
        self.effects.keep_runs(set(self.plans.runs))  # an older snapshot held every receipt
        # An older snapshot's "event_ids" (the last ids, when the kernel kept them) is not read:
        # the world's index of every id (``world._event_ids``) is derived from the journal.
        part = obj.get("partition")
        self.partition = None if part is None else Partition.from_obj(part)


_ENVIRONMENT_CODES: Final = frozenset(("engine", "instantiate"))
TICK_KINDS: Final = frozenset(
    ("step", "step.failed", "plan.started", "plan.step", "plan.waiting", "plan.ended")
)
"""Record kinds that begin a tick (replay runs the tick at them)."""
OWED_KINDS: Final = frozenset(("effect.queued", "policy.decision"))
"""Record kinds that only follow a tick's first record, in the same tick."""
APPLIED: Final = "gov.applied"
GOV_KINDS: Final = frozenset(("gov.proposed", "gov.approved", "gov.shadowed", APPLIED))
"""Governance records (``world.gov``), journaled from outside; only ``gov.applied`` changes
kernel state (a new era)."""


def reducer_fault(exc: WorldError) -> bool:
    """True when ``exc`` is the reducer's own deterministic failure (trap, fuel, memory, output
    too large or out of bounds, output that fails decoding or validation, too many events):
    the same input fails the same way on every machine, so it is journaled as ``step.failed``.
    So is a module the host refuses at load for its own bytes (``ReducerLoadError``: off the
    ABI, over a limit, a start function that traps or loops; ``kernel.wasm._host``): every
    delivery to it fails the same way, and the rest of the world goes on. Everything else (a
    wasmtime engine error, an instantiation the engine refused, a missing or damaged object,
    an I/O error) is the environment's fault: it stops the run and the delivery stays
    queued."""
    if isinstance(exc, ReducerError):
        return exc.code not in _ENVIRONMENT_CODES
    if isinstance(exc, LimitExceeded):
        return exc.limit == "events_per_step_max"
    return isinstance(exc, (StepRejected, CellRefused, CborError, ValueMismatch))
