"""Plan runs and effects inside the kernel: the half of ``Kernel`` that starts and ticks runs,
turns effects into intents, and applies receipts and approvals.

A mixin of ``kernel._core.Kernel`` (it uses the kernel's scheduler, journal and tables, declared
below for the type checker). The rules it implements are in ``kernel._plans`` (the run engine)
and ``kernel._effects`` (capabilities, policy, budgets); this module places their records in the
journal and their consequences in the scheduler, with the same discipline as a cell's tick:
nothing changes in memory before the tick's records are appended.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import cbor2

from air import cbor
from kernel import _abi as abi
from kernel._divergence import ReplayDivergence
from kernel._effects import CapDenied, EffectManager, Intent, intent_hash
from kernel._journal import JournalRecord
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
from kernel._scheduler import Delivery, Entity, Scheduler
from kernel._subjects import make_subject

if TYPE_CHECKING:
    from air import LoadedAir
    from kernel._journal import Journal

__all__ = ["Orchestration"]

Records = list[tuple[str, str, dict[str, Any]]]


class Orchestration:
    if TYPE_CHECKING:
        air: LoadedAir
        journal: Journal
        scheduler: Scheduler
        effects: EffectManager
        runs: dict[int, Run]
        runs_started: int
        steps_total: int
        consistent: bool
        _engine: PlanEngine
        _triggers: dict[str, list[Any]]
        _modules: dict[str, Any]
        _manifest_raw: bytes

        def _append(self, records: Records, expected: JournalRecord | None) -> int: ...

        def _dead_letter(
            self,
            seq: int,
            reducer: str,
            key_cbor: bytes | None,
            delivery: Delivery,
            reason: dict[str, Any],
        ) -> None: ...

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

    def _tick_run(self, entity: Entity, delivery: Delivery, expected: JournalRecord | None) -> None:
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
            for left in self.scheduler.drop(entity):  # an ended run takes nothing more
                reason = {"code": "run_ended", "detail": f"run {run_id} had already ended"}
                self._dead_letter(seq, work.plan, None, left, reason)
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
