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

Semantics (SPEC §6): a keyed route takes the key from the normalised event's ``key_field``; the
first event for a key steps the cell with ``state=null``; a reducer returning ``state=null``
deletes its cell. Events a step emits are routed after the step, so they run no earlier than
the next tick. A step that fails (trap, fuel, bad output) is journaled as ``step.failed`` with
its reason, its delivery goes to the dead-letter list, and the world goes on.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import cbor2

from air import cbor
from air.errors import CborError, LimitExceeded, UnknownName, ValueMismatch, WorldError
from air.loader import LoadedAir
from air.types import Ref
from air.values import SchemaCheckers, normalise
from kernel import abi
from kernel.abi import StepRejected
from kernel.cells import NULL_KEY_CBOR, CellEntry, CellStore
from kernel.effects import CapDenied, EffectManager, Intent, intent_hash
from kernel.host import ReducerError, ReducerLoadError
from kernel.journal import Journal, JournalRecord, make_subject
from kernel.plans import (
    CONTINUE,
    DENIED,
    RECEIPT,
    START,
    PlanEngine,
    Run,
    RunOutcome,
    input_hash,
)
from kernel.scheduler import Delivery, Entity, Scheduler

__all__ = [
    "EVENTS_PER_STEP_MAX",
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


class Runner(Protocol):
    """Runs one reducer step: canonical envelope in, raw output bytes out (or a WorldError)."""

    def run(self, reducer: str, input_cbor: bytes) -> bytes: ...


class ReplayDivergence(WorldError):
    """Re-executing the journal produced something other than what it recorded: at record
    ``seq`` (for ``entity``), the first differing ``field`` (``kind``, ``subject`` or
    ``body.<name>``) was ``expected`` in the journal and ``actual`` on re-execution."""

    def __init__(
        self, seq: int, entity: str, expected: str, actual: str, field: str = "record"
    ) -> None:
        self.seq = seq
        self.entity = entity
        self.field = field
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"replay diverged at seq {seq} ({entity}): {field} expected {expected}, got {actual}"
        )


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
class Kernel:
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
        normalised = normalise(Ref(schema), value, self.air.schemas)
        return cbor.dumps(normalised), normalised

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
            key_cbor = cbor.dumps(value[route.key_field]) if route.key_field else None
            self.scheduler.deliver(
                Entity(route.reducer, key_cbor), Delivery(src_seq, index, schema, value_cbor)
            )
            index += 1
        if schema in self._triggers or self.runs:
            index = self._observe(src_seq, index, schema, value_cbor, value)
        return index

    def _observe(self, src_seq: int, index: int, schema: str, value_cbor: bytes, value: Any) -> int:
        """Plans see every journaled event: triggers start runs, and a run waiting for this
        schema (since before ``src_seq``, with its correlation and ``where``) gets it."""
        if value is None:
            value = cbor2.loads(value_cbor)
        for trigger in self._triggers.get(schema, ()):
            run_id = self.runs_started
            self.runs_started += 1
            by = trigger.correlate_by
            correlation = value.get(by) if by and isinstance(value, dict) else None
            self.runs[run_id] = Run(
                run_id, trigger.plan, value, correlation, by, self._manifest_raw
            )
            self.scheduler.deliver(
                Entity(trigger.plan, None, run_id=run_id),
                Delivery(src_seq, index, START, value_cbor),
            )
            index += 1
        for run in list(self.runs.values()):
            if self._awaits(run, schema, value, src_seq):
                waiting = run.waiting
                if waiting is not None:
                    waiting["matched"] = True
                self.scheduler.deliver(
                    Entity(run.plan, None, run_id=run.run_id),
                    Delivery(src_seq, index, schema, value_cbor),
                )
                index += 1
        return index

    def _awaits(self, run: Run, schema: str, value: Any, src_seq: int) -> bool:
        waiting = run.waiting
        if waiting is None or waiting.get("event") != schema or waiting.get("matched"):
            return False
        if src_seq <= waiting.get("since", src_seq):
            return False  # future-only: journaled after the run began to wait
        if run.correlate_by is not None and (
            not isinstance(value, dict) or value.get(run.correlate_by) != run.correlation
        ):
            return False
        where = self._engine.where_of(run, waiting["step"])
        return where is None or self._engine.matches(run, where, value)

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

    # --- plan runs and effects ----------------------------------------------------------------

    def _tick_run(self, entity: Entity, delivery: Delivery, expected: JournalRecord | None) -> None:
        """One tick of a plan run (``kernel.plans``): its records, then its consequences."""
        run_id = entity.run_id
        if run_id is None or run_id not in self.runs:
            raise ReplayDivergence(-1, entity.reducer, "a live run", f"no run {run_id}")
        work = copy.deepcopy(self.runs[run_id])  # the run changes only once its records are in
        subject = make_subject("world", "run", work.plan, str(run_id))
        intent: Intent | None = None
        if delivery.schema == START:
            body = {
                "plan": work.plan,
                "run_id": run_id,
                "input_hash": input_hash(work.input),
                "manifest_hash": work.manifest_hash,
            }
            records = [("plan.started", f"{subject}/started", body)]
            out = RunOutcome(again=True)
        else:
            value = None
            if delivery.schema not in (CONTINUE, DENIED):
                value = cbor2.loads(delivery.value_cbor)
            out = self._engine.tick(work, delivery.schema, value)
            effect_records: list[tuple[str, str, dict[str, Any]]] = []
            if out.effect is not None:
                intent, effect_records = self._plan_effect(work, out)
            records = [(k, f"{subject}/{k.removeprefix('plan.')}", b) for k, b in out.records]
            records[1:1] = effect_records
        seq = self._append(records, expected)
        self.scheduler.consume()
        self.steps_total += 1
        if out.ended:
            self.runs.pop(run_id, None)
        else:
            self.runs[run_id] = work
            if work.waiting is not None and "since" not in work.waiting:
                work.waiting["since"] = seq
        if intent is not None:
            self.effects.add(intent)
        index = 0
        for schema, value_cbor, reducer, key_cbor in out.raised:
            self.scheduler.deliver(
                Entity(reducer, key_cbor), Delivery(seq, index, schema, value_cbor)
            )
            index = self._observe(seq, index + 1, schema, value_cbor, None)
        if out.again:
            self.scheduler.deliver(entity, Delivery(seq, index, CONTINUE, b""))
        elif not out.ended and work.waiting is not None and "intent" in work.waiting:
            self._hand_receipt(seq, index, work)
        self.consistent = True

    def _plan_effect(
        self, work: Run, out: RunOutcome
    ) -> tuple[Intent | None, list[tuple[str, str, dict[str, Any]]]]:
        """A plan step's effect: check and decide it, bind its id; a refusal ends the run."""
        effect = out.effect or {}
        origin = {"kind": "plan", "name": work.plan, "run_id": work.run_id, "step": effect["step"]}
        idem = f"run:{work.run_id}:{effect['step']}"
        try:
            intent = self._new_intent(effect["kind"], effect["params"], effect["cap"], origin, idem)
        except CapDenied as denied:
            self._engine.fail(work, out, denied.code, denied.detail)
            return None, []
        step_body = {
            "run_id": work.run_id,
            "step": effect["step"],
            "op": "emit_effect",
            "intent_hash": intent.intent_hash,
        }
        if intent.status == "denied":
            self._engine.fail(work, out, "policy.denied", f"policy denied {effect['kind']}")
            out.records.insert(0, ("plan.step", step_body))
        else:
            out.records = [("plan.step", step_body)]
            work.vars[effect["bind"]] = intent.intent_hash
            work.results[effect["step"]] = intent.intent_hash
            work.done.append(effect["step"])
            out.again = True
        return intent, self._effect_records(intent)

    def _new_intent(
        self, kind: str, params: Any, cap: str, origin: dict[str, Any], idem: str
    ) -> Intent:
        """Capability check (``CapDenied``), then policy: an intent ``queued``, ``parked`` or
        ``denied`` (``reserved`` holds the bytes it reserves)."""
        reserved = self.effects.check_cap(kind, params, cap)
        decision, rule = self.effects.decide(kind, params, cap, origin)
        params_cbor = cbor.dumps(params)
        status = {"allow": "queued", "require_approval": "parked"}.get(decision, "denied")
        intent = Intent(
            intent_hash(kind, params_cbor, cap, idem),
            kind,
            params_cbor,
            cap,
            {**origin, "rule_index": rule, "decision": decision},
            status,
            reserved if status != "denied" else 0,
        )
        return intent

    def _effect_records(self, intent: Intent) -> list[tuple[str, str, dict[str, Any]]]:
        hexed = intent.intent_hash.hex()
        origin = {k: v for k, v in intent.origin.items() if k not in ("rule_index", "decision")}
        return [
            (
                "effect.queued",
                make_subject("world", "effect", hexed, "queued"),
                {
                    "origin": origin,
                    "intent_hash": intent.intent_hash,
                    "kind": intent.kind,
                    "params": intent.params_cbor,
                    "cap": intent.cap,
                },
            ),
            (
                "policy.decision",
                make_subject("world", "effect", hexed, "decision"),
                {
                    "intent_hash": intent.intent_hash,
                    "rule_index": intent.origin["rule_index"],
                    "decision": intent.origin["decision"],
                },
            ),
        ]

    def _reducer_effects_of(
        self, entity: Entity, delivery: Delivery, out: abi.StepOutput
    ) -> tuple[list[tuple[str, str, dict[str, Any]]], list[Intent]]:
        """A reducer step's micro-effects as intents; ``CapDenied`` if one is refused."""
        records: list[tuple[str, str, dict[str, Any]]] = []
        intents = []
        key_hex = entity.store_key_hash.hex()
        for index, effect in enumerate(out.effects):
            cap = self._grant_for(entity.reducer, effect.kind, effect.cap_slot)
            params = cbor2.loads(effect.params_cbor)
            origin: dict[str, Any] = {
                "kind": "reducer",
                "name": entity.reducer,
                "key": entity.key_cbor,
            }
            idem = f"cell:{entity.reducer}:{key_hex}:{delivery.src_seq}:{delivery.index}:{index}"
            intent = self._new_intent(effect.kind, params, cap, origin, idem)
            if intent.status == "denied":
                raise CapDenied("policy.denied", f"policy denied {effect.kind}")
            records += self._effect_records(intent)
            intents.append(intent)
        return records, intents

    def _grant_for(self, reducer: str, kind: str, cap_slot: str | None) -> str:
        """The cap grant a reducer's effect uses: its slot's binding in ``module_bindings``;
        without a slot, the one slot of the effect's cap type (validation ensures one)."""
        abi_slots = dict(self._modules[reducer].abi.reducer.cap_slots)
        effect = self.air.effects.get(kind)
        if cap_slot is None:
            want = None if effect is None else effect.cap_type
            fits = [
                slot
                for slot, cap in sorted(abi_slots.items())
                if (c := self.air.caps.get(cap)) is not None and c.cap_type == want
            ]
            if len(fits) != 1:
                raise CapDenied("cap.slot_missing", f"{reducer} has no single slot for {kind}")
            cap_slot = fits[0]
        binding = self.air.manifest.module_bindings.get(reducer)
        if binding is not None and cap_slot in binding.slots:
            return str(binding.slots[cap_slot])
        cap_name = abi_slots.get(cap_slot)
        grants = [g.name for g in self.air.manifest.defaults.cap_grants if g.cap == cap_name]
        if len(grants) != 1:
            raise CapDenied("cap.grant_missing", f"no grant bound to slot {cap_slot} of {reducer}")
        return grants[0]

    def _hand_receipt(self, seq: int, index: int, run: Run) -> int:
        """If the intent a run waits for already has its receipt, deliver it to the run."""
        waiting = run.waiting or {}
        intent = self.effects.intents.get(waiting.get("intent", b""))
        if intent is None or intent.receipt is None or waiting.get("matched"):
            return index
        waiting["matched"] = True
        self.scheduler.deliver(
            Entity(run.plan, None, run_id=run.run_id),
            Delivery(seq, index, RECEIPT, cbor.dumps(intent.receipt["payload"])),
        )
        return index + 1

    # --- receipts and approvals (inputs, like event.in) -------------------------------------

    def ingest_receipt(self, body: dict[str, Any]) -> int:
        """Journal a receipt (``{intent_hash, adapter_id, status, payload, sig}``, verified
        by the caller) and deliver it; return its seq."""
        subject = make_subject("world", "effect", body["intent_hash"].hex(), "receipt")
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
            self._dead_letter(seq, reducer, origin.get("key"), letter, reason)
        if origin["kind"] == "plan":
            run = self.runs.get(origin["run_id"])
            if run is not None and (run.waiting or {}).get("intent") == intent.intent_hash:
                self._hand_receipt(seq, 0, run)
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
        seq = self.journal.append("effect.approval", subject, body)
        self._apply_approval(seq, body)
        return seq

    def _apply_approval(self, seq: int, body: dict[str, Any]) -> None:
        intent = self.effects.approve(body["intent_hash"], bool(body["approved"]))
        if intent is None or body["approved"]:
            return
        origin = intent.origin
        if origin["kind"] == "plan" and origin["run_id"] in self.runs:
            run = self.runs[origin["run_id"]]
            self.scheduler.deliver(
                Entity(run.plan, None, run_id=run.run_id), Delivery(seq, 0, DENIED, b"")
            )
        elif origin["kind"] == "reducer":
            letter = Delivery(seq, 0, intent.kind, intent.params_cbor)
            reason = {"code": "effect_denied", "detail": "an approver denied it"}
            self._dead_letter(seq, str(origin["name"]), origin.get("key"), letter, reason)

    def _entity_subject(self, entity: Entity, leaf: str) -> str:
        if entity.key_cbor is None:
            return make_subject("world", "reducer", entity.reducer, leaf)
        return make_subject("world", "cell", entity.reducer, entity.store_key_hash.hex(), leaf)

    def _store_key(self, entity: Entity) -> tuple[str, bytes]:
        return self._module_hash[entity.reducer], entity.store_key_hash

    def _load_state(self, entity: Entity) -> tuple[CellEntry, bytes] | None:
        return self.cells.get(*self._store_key(entity))

    def _step(
        self, entity: Entity, delivery: Delivery, current: tuple[CellEntry, bytes] | None
    ) -> tuple[str, dict[str, Any], abi.StepOutput]:
        module = self._modules[entity.reducer]
        cell_mode = module.key_schema is not None
        state_cbor = current[1] if current else None
        envelope = abi.encode_input(
            state_cbor, delivery.schema, delivery.value_cbor, entity.key_cbor, cell_mode
        )
        raw = self.runner.run(entity.reducer, envelope)
        out = abi.decode_output(raw, module=entity.reducer)
        self._validate(entity, out)
        body: dict[str, Any] = {
            "reducer": entity.reducer,
            "key": entity.key_cbor,
            "src": delivery.src_seq,
            "idx": delivery.index,
            "out_hash": cbor.digest(raw),
            "state_hash": None if out.state_cbor is None else cbor.digest(out.state_cbor),
        }
        # Empty lists are left out, so the common body is flat (the journal's fast encode path).
        if out.domain_events:
            body["events"] = [[e.schema, e.value_cbor] for e in out.domain_events]
        if out.effects:
            body["effects"] = [[e.kind, e.params_cbor, e.cap_slot] for e in out.effects]
        return "step", body, out

    def _validate(self, entity: Entity, out: abi.StepOutput) -> None:
        if len(out.domain_events) > self.limits.events_per_step_max:
            raise LimitExceeded("events_per_step_max", self.limits.events_per_step_max)
        reducer_abi = self._modules[entity.reducer].abi.reducer
        abi.validate_output(
            out,
            check=self._check_schema,
            state_schema=reducer_abi.state,
            effects_emitted=frozenset(reducer_abi.effects_emitted),
            reducer_effect_kinds=self._reducer_effects,
            effect_params=self._reducer_effects,
            ann_schema=reducer_abi.annotations,
            cap_slots=frozenset(reducer_abi.cap_slots),
            module=entity.reducer,
        )

    def _check_schema(self, name: str, obj: Any) -> None:
        if name not in self.air.schemas:
            raise ValueMismatch("/", "schema.unknown", f"unknown schema {name}")
        self._checkers.check(name, obj)

    def _failure_body(self, entity: Entity, delivery: Delivery, exc: Exception) -> dict[str, Any]:
        code = getattr(exc, "code", None) or getattr(exc, "limit", None) or type(exc).__name__
        return {
            "reducer": entity.reducer,
            "key": entity.key_cbor,
            "src": delivery.src_seq,
            "idx": delivery.index,
            "reason": {"code": str(code), "error": type(exc).__name__, "detail": str(exc)[:500]},
        }

    def _record(
        self, kind: str, subject: str, body: dict[str, Any], expected: JournalRecord | None
    ) -> int:
        if expected is None:
            return self.journal.append(kind, subject, body)
        actual = cbor.dumps({"kind": kind, "subject": subject, "body": body})
        wanted = cbor.dumps(
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
            if event.schema not in self._routes:
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


_ABSENT: Final = object()


def first_difference(expected: Any, actual: Any, path: str = "") -> tuple[str, str, str]:
    """The first place two decoded records (or any CBOR values) differ, in key order:
    ``(dotted path, expected shown, actual shown)``. Never returns two equal renderings for
    values that differ (a nested difference is named by its own path)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(expected.keys() | actual.keys(), key=str):
            was, now = expected.get(key, _ABSENT), actual.get(key, _ABSENT)
            if was != now:
                return first_difference(was, now, f"{path}.{key}" if path else str(key))
    elif isinstance(expected, list) and isinstance(actual, list):
        for index, (was, now) in enumerate(zip(expected, actual, strict=False)):
            if was != now:
                return first_difference(was, now, f"{path}[{index}]")
        if len(expected) != len(actual):
            return f"{path}.length", str(len(expected)), str(len(actual))
    return path or "value", show_value(expected), show_value(actual)


def show_value(value: Any) -> str:
    """A short, faithful rendering for messages: hashes as ``blake3:``, bytes as hex."""
    if value is _ABSENT:
        return "(absent)"
    if isinstance(value, bytes):
        if len(value) == 32:
            return cbor.raw_to_hash(value)
        text = value.hex()
        return text if len(text) <= 80 else f"{text[:64]}... ({len(value)} bytes)"
    if isinstance(value, list | dict):
        return f"{type(value).__name__} {cbor.content_hash(cbor.dumps(value))}"
    return repr(value)
