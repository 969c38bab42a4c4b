"""``Sim``: one world in one process, the actions done to it (``do_<kind>``), its crashes,
power cuts and disk faults, and the invariants checked after each action (``check``) and at
the end (``final``). The tool's docstring (``tools/simulate.py``) lists both."""

from __future__ import annotations

import contextlib
import errno
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powerloss import PowerLoss  # type: ignore[import-not-found]

import world
from air import cbor
from air.errors import UsageError, WorldError
from simulation._script import Action
from simulation._world import (
    ANSWERS,
    COUNTER,
    CYCLES_MAX,
    EVENT,
    FETCH,
    POWER_ACTIONS,
    SECRET,
    Failure,
    SimAdapter,
    air_folders,
    under_power,
)
from world import Engine
from world import _fileio as fileio
from world.history import verify_world


@dataclass
class Sent:
    """A batch as sent: its events (schema, value, id) and, once acknowledged, its seqs."""

    events: list[tuple[str, Any, str | None]]
    seqs: list[int] | None = None


@dataclass
class DiskFault:
    """A ``world._fileio`` fault hook: ``OSError(code)`` once, at durable operation ``at``."""

    code: str
    at: int
    seen: int = 0
    fired: bool = False

    def __call__(self, op: str, path: str) -> None:
        if self.fired:
            return
        if self.seen == self.at:
            self.fired = True
            number = getattr(errno, self.code)
            raise OSError(number, os.strerror(number), path)
        self.seen += 1


@dataclass
class Sim:
    """The world at ``path`` as the script drives it: its handle, loop and adapter while its
    process lives, the batches sent and what acknowledged them, the fault armed if any."""

    path: Path
    batches: list[Sent] = field(default_factory=list)
    next_id: int = 0
    handle: Any = None
    engine: Engine | None = None
    adapter: SimAdapter | None = None
    power: PowerLoss | None = None  # the fake file layer, while a power cut is armed
    power_left: int = 0  # actions it stays armed for
    _power_on: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    disk: DiskFault | None = None  # an I/O error armed
    disk_left: int = 0
    _disk_on: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    # --- the process ------------------------------------------------------------------------

    def start(self) -> None:
        self.handle = world.open(self.path)
        w = self.handle.world
        self.adapter = SimAdapter(w)
        self.engine = Engine(w, adapters=[self.adapter])
        self.engine.start()

    def die(self) -> None:
        """The process dies: no checkpoint, no close of anything that writes; the adapter's
        held intents are gone with it. Whatever was half started (a cut inside a reopen) too."""
        if self.engine is not None:
            self.engine.close()
        elif self.adapter is not None:
            self.adapter.close()
        if self.handle is not None:
            w = self.handle.world
            w._closed = True  # the handle's close must not checkpoint
            with contextlib.suppress(Exception):
                w.journal.close()
            w._lock.release()
        self.handle = self.engine = self.adapter = None

    def stop(self) -> None:
        if self.handle is not None:
            assert self.engine is not None
            self.engine.close()
            self.handle.close()
            self.handle = self.engine = None

    # --- running the loop -------------------------------------------------------------------

    def settle(self) -> None:
        """Cycles until nothing is ready and no receipt is waiting (held intents may remain)."""
        assert self.engine is not None
        for _ in range(CYCLES_MAX):
            before = self.handle.world.journal.seq_next
            self.engine.process_one_cycle()
            if self.engine.busy() is False and self.handle.world.journal.seq_next == before:
                return
        raise Failure(f"the loop was still busy after {CYCLES_MAX} cycles")

    # --- actions ----------------------------------------------------------------------------

    def act(self, action: Action) -> str:
        """Do ``action``; what happened, as one deterministic line."""
        do = getattr(self, f"do_{action.kind}")
        if self.disk is not None:
            return self._under_disk_fault(do, action)
        if self.power is None:
            return str(do(*action.args))
        return under_power(self, do, action.args, self._reopened)

    def _reopened(self) -> str:
        self.replay_matches()
        return "reopened from what was durable"

    def _under_disk_fault(self, do: Callable[..., str], action: Action) -> str:
        fault, self.disk_left = self.disk, self.disk_left - 1
        assert fault is not None
        try:
            said = str(do(*action.args))
        except (WorldError, OSError) as exc:  # a failing disk is a refusal, never a loss
            said = f"refused: {type(exc).__name__}"
        if not fault.fired and self.disk_left > 0:
            return said
        self.disk = None
        self._disk_on.close()
        if not fault.fired:
            return said + "; no fault (the disk held)"
        self.die()  # the operator restarts the process on a failing disk's error
        self.start()
        self.replay_matches()
        return said + f"; {fault.code} at durable operation {fault.at}; restarted"

    def do_disk(self, code: str, at: int) -> str:
        if self.disk is not None or self.power is not None:
            return "a fault is armed already"
        self.disk, self.disk_left = DiskFault(code, at), POWER_ACTIONS
        self._disk_on = contextlib.ExitStack()
        self._disk_on.enter_context(fileio.fault_hook(self.disk))
        return f"armed {code} at durable operation {at} of the next {POWER_ACTIONS} actions"

    def do_send(self, *events: tuple[str, str, int, bool]) -> str:
        batch = Sent([])
        for schema, key, n, with_id in events:
            event_id = None
            if with_id:
                event_id, self.next_id = f"e{self.next_id}", self.next_id + 1
            if schema == "fetch":
                batch.events.append((FETCH, {"key": key, "n": n}, event_id))
            else:
                batch.events.append(
                    (EVENT, {"key": key, "op": {"$tag": "Add", "$value": n}}, event_id)
                )
        self.batches.append(batch)
        return self._send(batch)

    def _send(self, batch: Sent) -> str:
        """Send ``batch`` (one request per schema: a handle's send carries one); the first
        acknowledgement is kept, and a later one must give each id its first seq."""
        by_event = [0] * len(batch.events)
        for schema in (EVENT, FETCH):
            part = [k for k, (s, _v, _i) in enumerate(batch.events) if s == schema]
            if part:
                values = [batch.events[k][1] for k in part]
                ids = [batch.events[k][2] for k in part]
                sent = self.handle.send_many(schema, values, ids=ids)
                for k, seq in zip(part, sent.seqs, strict=True):
                    by_event[k] = seq
        if batch.seqs is None:
            batch.seqs = by_event
            return f"acknowledged seqs {by_event}"
        for (_s, _v, event_id), old, new in zip(batch.events, batch.seqs, by_event, strict=True):
            if event_id is not None and old != new:
                raise Failure(
                    f"resent id {event_id} answered seq {new}, first acknowledged at {old}"
                )
        return f"acknowledged seqs {by_event}"

    def do_resend(self, pick: int) -> str:
        if not self.batches:
            return "nothing to resend"
        index = pick % len(self.batches)
        batch = self.batches[index]
        again = "again" if batch.seqs is not None else "never acknowledged"
        return self._send(batch) + f" (batch {index}, {again})"

    def do_run(self) -> str:
        self.settle()
        held = len(self.adapter.held) if self.adapter else 0
        return f"ran; {held} intent(s) held"

    def do_answer(self, pick: int, how: str) -> str:
        assert self.adapter is not None
        if not self.adapter.held:
            return "no intent held"
        intent = self.adapter.answer(pick, how)
        self.settle()
        return f"answered {intent} {how}"

    def do_crash(self) -> str:
        self.die()
        self.start()
        self.replay_matches()
        return "crashed and reopened"

    def do_power(self, cut_at: int) -> str:
        if self.power is not None or self.disk is not None:
            return "a power cut is armed already"
        self.power, self.power_left = PowerLoss(self.path, cut_at=cut_at, seed=None), POWER_ACTIONS
        self._power_on = contextlib.ExitStack()
        self._power_on.enter_context(self.power.installed())
        return (
            f"armed a power cut at durable operation {cut_at} of the next {POWER_ACTIONS} actions"
        )

    def do_checkpoint(self) -> str:
        self.handle.snapshot()
        return "checkpointed"

    def do_dead(self, pick: int) -> str:
        letters = self.handle.dead_letters().letters
        if not letters:
            return "no dead letter"
        letter_id = str(letters[pick % len(letters)]["id"])
        verb, act = ("retried", self.handle.retry_dead_letter)
        if pick % 2 == 0:
            verb, act = ("dropped", self.handle.drop_dead_letter)
        try:
            act(letter_id)
        except UsageError as refused:  # the operations layer's answer, not a broken invariant
            return f"dead letter {letter_id} not {verb}: {type(refused).__name__}"
        return f"{verb} dead letter {letter_id}"

    def _parked(self) -> list[str]:
        intents = self.handle.effects().intents
        return sorted(
            i["intent_hash"].removeprefix("blake3:") for i in intents if i["status"] == "parked"
        )

    def do_decide(self, pick: int, verdict: str) -> str:
        parked = self._parked()
        if not parked:
            return "no intent parked"
        chosen = parked[pick % len(parked)]
        self.handle.decide(chosen, verdict == "approve")
        self.settle()
        return f"{'approved' if verdict == 'approve' else 'denied'} {chosen[:12]}"

    def do_cancel(self, pick: int) -> str:
        live = sorted(
            r["run_id"] for r in self.handle.runs() if r["status"] in ("running", "waiting")
        )
        if not live:
            return "no run to cancel"
        run_id = live[pick % len(live)]
        try:
            self.handle.cancel_run(run_id)
        except UsageError as refused:
            return f"run {run_id} not cancelled: {type(refused).__name__}"
        self.settle()
        return f"cancelled run {run_id}"

    def do_upgrade(self, stage: str, pick: int) -> str:
        """A stage of an upgrade to the AIR that parks the other key's fetches (``a`` or
        ``b``, by ``pick``), or of the newest proposal not yet applied."""
        h = self.handle
        try:
            if stage == "propose":
                parks = "ab"[pick % 2]
                shown = h.propose(air_folders() / f"air_{parks}")
                return f"proposed {shown.id} (parks {parks})"
            pending = [p["id"] for p in h.proposals().proposals if p.get("applied") is None]
            if not pending:
                return "no proposal pending"
            chosen = max(pending)
            if stage == "shadow":
                h.shadow(chosen)
            elif stage == "approve":
                h.approve(chosen)
            else:
                h.apply(chosen)
                self.settle()
        except WorldError as refused:  # the operations layer's answer (stale, not approved)
            return f"{stage} refused: {type(refused).__name__}"
        return f"{stage} {chosen}"

    # --- invariants -------------------------------------------------------------------------

    def records(self) -> list[Any]:
        return list(self.handle.world.journal.read(0))

    def check(self) -> None:
        recs = self.records()
        self._acknowledged_once(recs)
        self._one_receipt_each(recs, final=False)
        self._no_secret_on_disk()

    def final(self) -> None:
        if self.power is not None:  # the script ended before the cut: the power stays on
            self.power = None
            self._power_on.close()
        if self.disk is not None:
            self.disk = None
            self._disk_on.close()
        assert self.adapter is not None
        self.settle()
        for turn in range(1000):
            parked = self._parked()
            if parked:
                self.handle.decide(parked[0], True)
            elif self.adapter.held:
                self.adapter.answer(0, ANSWERS[turn % len(ANSWERS)])
            else:
                break
            self.settle()
        recs = self.records()
        self._acknowledged_once(recs)
        self._one_receipt_each(recs, final=True)
        self._cells_match(recs)
        self._no_secret_on_disk()
        self.replay_matches()

    def _acknowledged_once(self, recs: list[Any]) -> None:
        by_seq = {r.seq: r for r in recs}
        ids = Counter(r.body["id"] for r in recs if r.kind == "event.in" and "id" in r.body)
        for event_id, count in ids.items():
            if count > 1:
                raise Failure(f"event id {event_id} journaled {count} times")
        for batch in self.batches:
            if batch.seqs is None:
                continue
            for (schema, value, event_id), seq in zip(batch.events, batch.seqs, strict=True):
                rec = by_seq.get(seq)
                if rec is None or rec.kind != "event.in":
                    raise Failure(
                        f"acknowledged seq {seq} ({schema} {value}) is not in the journal"
                    )
                got = (rec.body["schema"], cbor.loads(rec.body["value"]), rec.body.get("id"))
                if got != (schema, value, event_id):
                    raise Failure(
                        f"acknowledged seq {seq} holds {got}, not {(schema, value, event_id)}"
                    )

    def _one_receipt_each(self, recs: list[Any], *, final: bool) -> None:
        receipts = Counter(r.body["intent_hash"] for r in recs if r.kind == "receipt")
        for intent_hash, count in receipts.items():
            if count > 1:
                raise Failure(f"intent {intent_hash.hex()[:12]} has {count} receipts")
        if not final:
            return
        ended = {r.body["run_id"]: r.body["status"] for r in recs if r.kind == "plan.ended"}
        for rec in recs:
            ok = rec.kind == "effect.queued" and ended.get(rec.body["origin"]["run_id"]) == "ok"
            if ok and receipts[rec.body["intent_hash"]] != 1:
                raise Failure(f"intent {rec.body['intent_hash'].hex()[:12]} ended with no receipt")

    def _runs_once(self, recs: list[Any]) -> dict[int, str]:
        """Every ``Fetch`` has exactly one run, and every run ended; each ``Fetch``'s seq with
        its run's status. Runs are numbered from 0 in the order their triggers are journaled,
        and a run cancelled before its first tick ends with no ``plan.started``."""
        fetches = [r.seq for r in recs if r.kind == "event.in" and r.body["schema"] == FETCH]
        started = Counter(r.body["src"] for r in recs if r.kind == "plan.started")
        src_of = {r.body["run_id"]: r.body["src"] for r in recs if r.kind == "plan.started"}
        ended: dict[int, str] = {}
        for rec in recs:
            if rec.kind in ("plan.ended", "run.cancelled"):
                run_id = rec.body["run_id"]
                if run_id >= len(fetches) or src_of.get(run_id, fetches[run_id]) != fetches[run_id]:
                    raise Failure(f"run {run_id} is not the run of a Fetch")
                if fetches[run_id] in ended:
                    raise Failure(f"run {run_id} ended twice")
                ended[fetches[run_id]] = rec.body.get("status", "cancelled")
        for seq in fetches:
            if started[seq] > 1:
                raise Failure(f"the Fetch at seq {seq} started {started[seq]} runs")
            if seq not in ended:
                raise Failure(f"the run of the Fetch at seq {seq} never ended")
        return ended

    def _cells_match(self, recs: list[Any]) -> None:
        """The counter cells are the sum of every ``Add`` journaled and of every ``Fetch``
        whose run ended ``ok`` (a denied or cancelled one adds nothing)."""
        ended = self._runs_once(recs)
        model: dict[str, list[int]] = {}
        for rec in recs:
            if rec.kind != "event.in":
                continue
            value = cbor.loads(rec.body["value"])
            if rec.body["schema"] == EVENT:
                n = value["op"]["$value"]
            elif ended[rec.seq] == "ok":
                n = value["n"]
            else:
                continue
            cell = model.setdefault(value["key"], [0, 0])
            cell[0] += n
            cell[1] += 1
        w = self.handle.world
        got = {c.key: w.state(COUNTER, c.key) for c in w.cells(COUNTER)}
        want = {k: {"count": c, "events": e} for k, (c, e) in model.items()}
        if got != want:
            raise Failure(
                f"cells {sorted(got.items())} differ from the model {sorted(want.items())}"
            )

    def _no_secret_on_disk(self) -> None:
        for file in sorted(self.path.rglob("*")):
            if file.is_file() and not file.is_symlink() and SECRET in file.read_bytes():
                raise Failure(f"the secret is in {file.relative_to(self.path)}")

    def replay_matches(self) -> None:
        self.handle.world.commit()
        report = verify_world(self.path)
        if report.divergence is not None or report.mismatches or report.bad_receipt is not None:
            what = report.divergence or report.bad_receipt or report.mismatches[:3]
            raise Failure(f"replay differs: {what}")
