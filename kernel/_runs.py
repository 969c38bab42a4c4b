"""Plan runs inside the kernel: starting them, ticking them, handing them receipts and denials.

``PlanRuns`` is owned by ``kernel._core.Kernel`` and holds every live run. The rules of one run
are ``kernel._plans`` (the pure run engine); the rules of its effects are ``kernel._effects``
(capabilities, policy, budgets). This module places their records in the journal (through the
kernel's ``Recorder``) and their consequences in the scheduler, with the same discipline as a
cell's tick: nothing changes in memory before the tick's records are appended (a run is worked
on as a copy and put back after).

Runs observe every journaled event (``observe``): a trigger starts a run (the next ``run_id``),
and a run waiting in ``await_event`` for that schema, since before the event, with its
correlation and ``where``, gets it. A run is an entity of the scheduler beside the cells, so one
tick (``tick``) executes one thing of one run.

Cancelling. ``cancel(run_id)`` journals ``run.cancelled`` (subject
``/world/run/<plan>/<run_id>/cancelled``, body ``{run_id, plan, intents}``: ``intents`` the
hashes of the run's live intents, in hash order) and applies it; replay applies the journaled
one (``apply_cancel``), re-deriving ``intents`` and refusing a record that differs. Applying:
the run leaves the live runs (it ended, status ``cancelled``: no ``plan.ended`` is written,
this record is its end), its intents settle ``cancelled`` with their reservations refunded
(``EffectManager.cancel_run``), so a receipt an adapter sends later is refused, never
journaled, and no run is revived; what its mailbox still held becomes dead letters
(``run_cancelled``), as an ended run's does.

Failures. Where a failed run failed (``kernel._plans``: ``{step, pointer}``) is derived, not
journaled; ``failures`` keeps the last ``FAILURES_KEPT`` failed runs (run id -> ``{plan, seq,
code, step, pointer}``) and ``failed_total`` counts them all, both in the snapshot, both
re-derived by replay. ``ended`` counts the runs this kernel object saw end (for a command's
summary; not kept), ``begun`` the runs it saw journal ``plan.started``.

A run names its trigger: ``plan.started`` carries ``src`` and ``idx``, the delivery that started
it (the seq of the record that journaled the trigger event, as a ``step``'s ``src``), and the
``plan.step`` that binds an awaited event carries the same for that event, so the causes of
what a run did can be followed back exactly (``world why``). A record journaled before these
fields existed has neither; replay compares it without them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Final

import cbor2

from air import LoadedAir, cbor
from kernel._deadletters import DeadLetters
from kernel._effects import CapDenied, EffectManager, Intent
from kernel._plans import (
    CONTINUE,
    DENIED,
    RECEIPT,
    START,
    PlanEngine,
    Run,
    RunOutcome,
    input_hash,
)
from kernel._recorder import Record, Recorder
from kernel._scheduler import Delivery, Entity, Scheduler
from kernel.errors import ReplayDivergence
from kernel.journal import JournalRecord
from kernel.subjects import make_subject

__all__ = ["FAILURES_KEPT", "RUN_CANCELLED", "PlanRuns"]

RUN_CANCELLED: Final = "run.cancelled"
"""The record that cancels a live run (``world runs cancel``)."""
FAILURES_KEPT: Final = 1024
"""How many failed runs' derived ``{plan, seq, code, step, pointer}`` the kernel keeps."""


class PlanRuns:
    def __init__(
        self,
        air: LoadedAir,
        engine_of: Callable[[bytes], PlanEngine],
        scheduler: Scheduler,
        recorder: Recorder,
        effects: EffectManager,
        dead_letters: DeadLetters,
    ) -> None:
        """``engine_of(manifest_hash)``: the engine of a run pinned to that era (a run
        finishes on the plan it started with, ``kernel._eras``)."""
        self.engine_of = engine_of
        self.scheduler = scheduler
        self.place: Callable[[Entity, Delivery], None] = scheduler.deliver
        """Where a ``raise_event``'s delivery to one cell goes: the kernel's (queued, or owed
        to the partition owning the cell: ``kernel._partition``)."""
        self.route: Callable[[int, int, str, bytes, Any], int] = self.observe
        """How a routed ``raise_event`` (``{event, value}``) is delivered: the kernel's
        ``_route``, the one router of every event (its routes, then ``observe``); returns the
        next delivery index. Alone (no kernel), only plans observe it."""
        self.recorder = recorder
        self.effects = effects
        self.dead_letters = dead_letters
        self.runs: dict[int, Run] = {}
        self.started = 0
        """Runs started so far: the next run's id."""
        self.failures: dict[int, dict[str, Any]] = {}
        """The last ``FAILURES_KEPT`` failed runs, oldest first (derived, not journaled)."""
        self.failed_total = 0
        self.ended = 0
        """Runs this object saw end (ok, error or cancelled); not kept in snapshots."""
        self.begun = 0
        """Runs this object saw journal ``plan.started``; not kept in snapshots."""
        self.use(air)

    def use(self, air: LoadedAir) -> None:
        """Start new runs by ``air``'s triggers and plans (the current era)."""
        self.manifest_raw = cbor.hash_to_raw(air.manifest_hash)
        self.triggers: dict[str, list[Any]] = {}
        for trigger in air.manifest.triggers:
            self.triggers.setdefault(trigger.event, []).append(trigger)

    # --- events ------------------------------------------------------------------------------

    def watching(self, schema: str) -> bool:
        """Whether an event of ``schema`` may start or wake a run (a quick test before
        ``observe``): a trigger takes it, or any run is live."""
        return schema in self.triggers or bool(self.runs)

    def observes(self, schema: str) -> bool:
        """Whether an event of ``schema`` is taken now: a trigger, or a run waiting for it."""
        return schema in self.triggers or any(
            w.get("event") == schema for r in self.runs.values() for w in r.waits
        )

    def observe(self, src_seq: int, index: int, schema: str, value_cbor: bytes, value: Any) -> int:
        """Plans see every journaled event: triggers start runs, and a run waiting for this
        schema (since before ``src_seq``, with its correlation and ``where``) gets it. Returns
        the next delivery index of record ``src_seq``."""
        if value is None:
            value = cbor2.loads(value_cbor)
        for trigger in self.triggers.get(schema, ()):
            run_id = self.started
            self.started += 1
            by = trigger.correlate_by
            correlation = value.get(by) if by and isinstance(value, dict) else None
            self.runs[run_id] = Run(run_id, trigger.plan, value, correlation, by, self.manifest_raw)
            self.scheduler.deliver(
                Entity(trigger.plan, None, run_id=run_id),
                Delivery(src_seq, index, START, value_cbor),
            )
            index += 1
        for run in list(self.runs.values()):
            for wait in run.waits:
                if self._awaits(run, wait, schema, value, src_seq):
                    wait["matched"] = True if run.semantics == 1 else [src_seq, index]
                    self.scheduler.deliver(
                        Entity(run.plan, None, run_id=run.run_id),
                        Delivery(src_seq, index, schema, value_cbor),
                    )
                    index += 1
        return index

    def _awaits(
        self, run: Run, waiting: dict[str, Any], schema: str, value: Any, src_seq: int
    ) -> bool:
        if waiting.get("event") != schema or waiting.get("matched"):
            return False
        if src_seq <= waiting.get("since", src_seq):
            return False  # future-only: journaled after the run began to wait
        if run.correlate_by is not None and (
            not isinstance(value, dict) or value.get(run.correlate_by) != run.correlation
        ):
            return False
        engine = self.engine_of(run.manifest_hash)
        where = engine.where_of(run, waiting["step"])
        return where is None or engine.matches(run, where, value)

    # --- ticks -------------------------------------------------------------------------------

    def tick(self, entity: Entity, delivery: Delivery, expected: JournalRecord | None) -> None:
        """One tick of a plan run (``kernel._plans``): its records, then its consequences."""
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
                "src": delivery.src_seq,
                "idx": delivery.index,
            }
            if expected is not None and "src" not in expected.body:
                del body["src"], body["idx"]  # journaled before runs named their trigger
            if expected is not None and "semantics" not in expected.body:
                work.semantics = 1  # journaled before runs named their semantics
            else:
                body["semantics"] = work.semantics
            records: list[Record] = [("plan.started", f"{subject}/started", body)]
            self.begun += 1
            out = RunOutcome(again=True)
        else:
            value = None
            if delivery.schema not in (CONTINUE, DENIED):
                value = cbor2.loads(delivery.value_cbor)
            if delivery.schema == CONTINUE:
                work.awake = False
            at = (delivery.src_seq, delivery.index)
            out = self.engine_of(work.manifest_hash).tick(work, delivery.schema, value, at)
            _name_the_awaited(out.records, delivery, expected)
            effect_records: list[Record] = []
            if out.effect is not None:
                intent, effect_records = self._plan_effect(work, out)
            records = [(k, f"{subject}/{k.removeprefix('plan.')}", b) for k, b in out.records]
            records[1:1] = effect_records
        seq = self.recorder.append(records, expected)
        self.scheduler.consume()
        if out.ended:
            self.ended += 1
            end_body = records[-1][2]
            if end_body.get("status") == "error":
                self._failed(work.plan, seq + len(records) - 1, end_body, out.where)
            self.runs.pop(run_id, None)
            self.effects.release_run(run_id)  # the receipts it could still await
            for left in self.scheduler.drop(entity):  # an ended run takes nothing more
                reason = {"code": "run_ended", "detail": f"run {run_id} had already ended"}
                self.dead_letters.add(seq, work.plan, None, left, reason)
        else:
            self.runs[run_id] = work
            for wait in work.waits:
                wait.setdefault("since", seq)
        if intent is not None:
            self.effects.add(intent)
        index = 0
        for schema, value_cbor, reducer, key_cbor in out.raised:
            if reducer is None:  # routed: as an event from outside of that schema
                index = self.route(seq, index, schema, value_cbor, None)
                continue
            self.place(Entity(reducer, key_cbor), Delivery(seq, index, schema, value_cbor))
            index = self.observe(seq, index + 1, schema, value_cbor, None)
        if out.again and not work.awake:
            self.scheduler.deliver(entity, Delivery(seq, index, CONTINUE, b""))
            index += 1
            work.awake = work.semantics > 1
        if not out.ended:
            for wait in work.waits:
                if "intent" in wait:
                    index = self.hand_receipt(seq, index, work, wait)

    def _plan_effect(self, work: Run, out: RunOutcome) -> tuple[Intent | None, list[Record]]:
        """A plan step's effect: check and decide it, bind its id; a refusal ends the run."""
        effect = out.effect or {}
        origin = {"kind": "plan", "name": work.plan, "run_id": work.run_id, "step": effect["step"]}
        idem = f"run:{work.run_id}:{effect['step']}"
        try:
            intent = self.effects.intent_for(
                effect["kind"], effect["params"], effect["cap"], origin, idem, effect.get("key")
            )
        except CapDenied as denied:
            out.at = out.at.removesuffix("/params") + "/cap"
            self.engine_of(work.manifest_hash).fail(work, out, denied.code, denied.detail)
            return None, []
        step_body = {
            "run_id": work.run_id,
            "step": effect["step"],
            "op": "emit_effect",
            "intent_hash": intent.intent_hash,
        }
        if intent.status == "denied":
            engine = self.engine_of(work.manifest_hash)
            engine.fail(work, out, "policy.denied", f"policy denied {effect['kind']}")
            out.records.insert(0, ("plan.step", step_body))
        else:
            out.records = [("plan.step", step_body)]
            work.vars[effect["bind"]] = intent.intent_hash
            work.results[effect["step"]] = intent.intent_hash
            work.done.append(effect["step"])
            out.again = True
        return intent, self.effects.records_of(intent)

    # --- receipts and approvals ----------------------------------------------------------------

    def hand_receipt(self, seq: int, index: int, run: Run, waiting: dict[str, Any]) -> int:
        """If the intent of a run's wait already has its receipt (and the wait has not been
        handed it), deliver it to the run; the next delivery index of record ``seq``."""
        receipt = self.effects.receipt_of(waiting.get("intent", b""))
        if receipt is None or waiting.get("matched"):
            return index
        waiting["matched"] = True if run.semantics == 1 else [seq, index]
        self.scheduler.deliver(
            Entity(run.plan, None, run_id=run.run_id),
            Delivery(seq, index, RECEIPT, cbor.dumps(receipt["payload"])),
        )
        return index + 1

    def receipt_arrived(self, seq: int, intent: Intent) -> None:
        """The receipt (record ``seq``) of a plan's ``intent`` is in: to its run, if it waits."""
        run = self.runs.get(intent.origin["run_id"])
        if run is None:
            self.effects.release(intent.intent_hash)  # no run left to await it
        else:
            index = 0
            for wait in run.waits:
                if wait.get("intent") == intent.intent_hash:
                    index = self.hand_receipt(seq, index, run, wait)

    def denied(self, seq: int, intent: Intent) -> None:
        """An approver denied a plan's parked ``intent`` (record ``seq``): its run is told."""
        run = self.runs.get(intent.origin["run_id"])
        if run is not None:
            self.scheduler.deliver(
                Entity(run.plan, None, run_id=run.run_id), Delivery(seq, 0, DENIED, b"")
            )

    # --- failures and cancelling ---------------------------------------------------------

    def _failed(
        self, plan: str, seq: int, body: dict[str, Any], where: dict[str, Any] | None
    ) -> None:
        where = where or {}
        self.failures[body["run_id"]] = {
            "plan": plan,
            "seq": seq,
            "code": (body.get("error") or {}).get("code"),
            "step": where.get("step"),
            "pointer": where.get("pointer"),
        }
        self.failed_total += 1
        while len(self.failures) > FAILURES_KEPT:
            del self.failures[next(iter(self.failures))]

    def cancel_body(self, run_id: int) -> tuple[str, dict[str, Any]]:
        """The subject and body of the ``run.cancelled`` that would cancel live run
        ``run_id`` now (``KeyError`` if it is not live)."""
        run = self.runs[run_id]
        intents = [i.intent_hash for i in self.effects.run_intents(run_id)]
        subject = make_subject("world", "run", run.plan, str(run_id))
        return f"{subject}/cancelled", {"run_id": run_id, "plan": run.plan, "intents": intents}

    def cancel(self, run_id: int) -> int:
        """Journal ``run.cancelled`` for live run ``run_id`` and apply it; its seq."""
        subject, body = self.cancel_body(run_id)
        seq = self.recorder.journal.append(RUN_CANCELLED, subject, body)
        self._cancel(seq, run_id)
        return seq

    def apply_cancel(self, record: JournalRecord) -> None:
        """Replay a journaled ``run.cancelled``: the run must be live and its live intents
        the ones the record names."""
        run_id = record.body.get("run_id") if isinstance(record.body, dict) else None
        if not isinstance(run_id, int) or run_id not in self.runs:
            raise ReplayDivergence(record.seq, record.subject, "a live run", f"no run {run_id}")
        subject, body = self.cancel_body(run_id)
        if (subject, body) != (record.subject, record.body):
            raise ReplayDivergence(
                record.seq, record.subject, "the cancel the journal holds", repr(body)
            )
        self._cancel(record.seq, run_id)

    def _cancel(self, seq: int, run_id: int) -> None:
        run = self.runs.pop(run_id)
        self.ended += 1
        self.effects.cancel_run(run_id)
        entity = Entity(run.plan, None, run_id=run_id)
        for left in self.scheduler.drop(entity):
            reason = {"code": "run_cancelled", "detail": f"run {run_id} was cancelled"}
            self.dead_letters.add(seq, run.plan, None, left, reason)

    # --- snapshots ---------------------------------------------------------------------------

    def to_obj(self) -> list[Any]:
        return [run.to_obj() for _id, run in sorted(self.runs.items())]

    def restore(self, runs: list[Any], started: int) -> None:
        self.runs = {r[0]: Run.from_obj(r) for r in runs}
        self.started = started

    def failures_obj(self) -> dict[str, Any] | None:
        """The failures for a snapshot; None when there never was one (older snapshots'
        shape)."""
        if not self.failed_total:
            return None
        recent = [[run_id, f] for run_id, f in self.failures.items()]
        return {"total": self.failed_total, "recent": recent}

    def restore_failures(self, obj: dict[str, Any] | None) -> None:
        """Read ``failures_obj``'s form (None: none, or a snapshot older than it)."""
        obj = obj or {}
        self.failed_total = int(obj.get("total", 0))
        self.failures = {run_id: dict(f) for run_id, f in obj.get("recent", [])}


def _name_the_awaited(
    records: list[tuple[str, dict[str, Any]]], delivery: Delivery, expected: JournalRecord | None
) -> None:
    """Give the ``plan.step`` that binds an awaited event (a tick's first record) the
    delivery it bound: ``src``, ``idx``, unless replay is at one journaled without them."""
    if not records:
        return
    kind, body = records[0]
    if kind != "plan.step" or body.get("op") != "await_event" or "event" not in body:
        return
    if expected is not None and "src" not in expected.body:
        return  # journaled before bindings named their event's record
    body["src"], body["idx"] = delivery.src_seq, delivery.index
