"""The effect loop: a world's queued intents go to adapters, their receipts come back signed,
verified and journaled, and the kernel runs what they wake. What ``world run`` drives.

    tick until idle  ->  dispatch new queued intents  ->  take receipts  ->  repeat

Receipts arrive on adapter threads; they are only put on a queue there. The loop's own thread
signs nothing it did not verify: each receipt is signed with the world's key as it is taken
(``world.effects._receipts``), verified, checked against the kernel's intents (an unknown intent is
refused with ``ReceiptRefused``; a duplicate of one already journaled is ignored and noted), and
journaled with one group commit per batch. Replay never gets here: it reuses the journaled
receipts.

Time. With ``sim=True`` the timer adapter runs on a simulated clock that starts at the kernel's
logical ``now_ns``: when nothing else is ready or in flight, the clock jumps to the next
deadline, so a timer world runs at once and writes the same journal bytes on every run of the
same world. Without it, timers fire on the wall clock.

Stopping. ``until_idle=False`` (``world run``) keeps going until nothing is ready and nothing
is pending, real-time timers included; ``until_idle=True`` (``world run --until-idle``)
returns as soon as nothing is ready and no effect but real-time timers is in flight. An interrupt stops at a tick or
receipt boundary (``World.interrupt``). Intents still in flight when the loop stops are
dispatched again by the next loop (at least once; adapters see the same intent hash).
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Any, Final

from air import cbor
from air.errors import UnknownName
from kernel._effects import Intent as KernelIntent
from world._world import World
from world.effects._adapters import Dispatcher, Intent, Receipt
from world.effects._blob import BlobAdapter
from world.effects._http import HttpAdapter
from world.effects._receipts import ReceiptKey, ReceiptRefused
from world.effects._timer import SimClock, TimerAdapter
from world.errors import Interrupted

__all__ = ["RECEIPT_WAIT_S", "EffectLoop", "LoopReport"]

RECEIPT_WAIT_S: Final = 0.05
"""How long the loop waits for a receipt before it looks at its interrupt flag again."""


@dataclass
class LoopReport:
    steps: int = 0
    dispatched: int = 0
    receipts: int = 0
    duplicates: int = 0
    notes: list[str] = field(default_factory=list)


class EffectLoop:
    """Runs a world with its adapters live. One per ``World`` session; ``close`` stops the
    adapters (bounded wait)."""

    def __init__(self, world: World, *, sim: bool = False, dispatcher: Dispatcher | None = None):
        self.world = world
        self.sim = sim
        self.key = ReceiptKey.load_or_create(world.path)
        self._clock = SimClock(start_ns=world.kernel.effects.now_ns) if sim else None
        self._timer: TimerAdapter | None = None
        if dispatcher is None:
            self._timer = TimerAdapter(self._clock)
            dispatcher = Dispatcher([self._timer, BlobAdapter(world.cas), HttpAdapter(world.cas)])
        self.dispatcher = dispatcher
        self._inbox: queue.SimpleQueue[tuple[Receipt, bytes]] = queue.SimpleQueue()
        self._sent: set[bytes] = set()

    def close(self) -> None:
        self.dispatcher.close()

    def __enter__(self) -> EffectLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, *, until_idle: bool = True, max_steps: int | None = None) -> LoopReport:
        report = LoopReport()
        while True:
            report.steps += self.world.run_until_idle(max_steps)
            report.dispatched += self._dispatch()
            if self._take(report, wait=False):
                continue
            if self._advance_sim():
                continue
            if self.dispatcher.in_flight == 0:
                return report
            if until_idle and self._clock is None and self._only_timers_left():
                return report
            self._take(report, wait=True)

    def _advance_sim(self) -> bool:
        """With simulated time, when only timers are left in flight, fire the next one(s)."""
        timer = self._timer
        if self._clock is None or timer is None or timer.next_deadline() is None:
            return False
        if self.dispatcher.in_flight != self._timers_pending():
            return False
        timer.advance()
        return True

    def _timers_pending(self) -> int:
        return sum(1 for h in self._sent if self._intent(h).kind == "timer.set")

    def _only_timers_left(self) -> bool:
        return all(self._intent(h).kind == "timer.set" for h in self._sent)

    def _intent(self, intent_hash: bytes) -> KernelIntent:
        return self.world.kernel.effects.intents[intent_hash]

    def _dispatch(self) -> int:
        sent = 0
        for intent in self.world.kernel.effects.queued():
            if intent.intent_hash in self._sent:
                continue
            self._sent.add(intent.intent_hash)
            params = cbor.loads(intent.params_cbor)
            origin = str(intent.origin.get("name", ""))
            self.dispatcher.submit(
                Intent(intent.intent_hash, intent.kind, params, origin), self._signed
            )
            sent += 1
        return sent

    def _signed(self, receipt: Receipt) -> None:
        """The adapters' callback (any thread): sign at the source, verify when journaling."""
        self._inbox.put((receipt, self.key.sign(receipt)))

    def _take(self, report: LoopReport, *, wait: bool) -> bool:
        """Journal the receipts that have arrived (waiting briefly for one if ``wait``)."""
        got: list[tuple[Receipt, bytes]] = []
        try:
            got.append(
                self._inbox.get(timeout=RECEIPT_WAIT_S) if wait else self._inbox.get_nowait()
            )
            while True:
                got.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        for receipt, sig in got:
            self._accept(receipt, sig, report)
        if got:
            self.world.commit()
        if self.world.take_interrupt():  # the receipts taken are journaled before stopping
            raise Interrupted(self.world.journal.seq_next)
        return bool(got)

    def _accept(self, receipt: Receipt, sig: bytes, report: LoopReport) -> None:
        try:
            accepted = accept_receipt(self.world, self.key, receipt, sig)
        except ReceiptRefused as refused:
            report.notes.append(str(refused))
            return
        self._sent.discard(receipt.intent_hash)
        if accepted:
            report.receipts += 1
        else:
            report.duplicates += 1
            report.notes.append(f"duplicate receipt for {receipt.intent_hash.hex()} ignored")


def accept_receipt(world: World, key: ReceiptKey, receipt: Receipt, sig: bytes) -> bool:
    """Verify ``receipt`` and journal it (not committed); False for a duplicate of one
    already journaled. ``ReceiptRefused`` for a forged or altered one, or an unknown intent."""
    key.verify(receipt, sig)
    intent = world.kernel.effects.intents.get(receipt.intent_hash)
    if intent is None:
        raise ReceiptRefused(receipt.intent_hash.hex(), "unknown_intent")
    if intent.status == "done":
        return False
    if intent.status != "queued":
        raise ReceiptRefused(receipt.intent_hash.hex(), "not_queued")
    body: dict[str, Any] = {
        "intent_hash": receipt.intent_hash,
        "adapter_id": receipt.adapter_id,
        "status": receipt.status,
        "payload": receipt.payload_cbor,
        "sig": sig,
    }
    world.kernel.ingest_receipt(body)
    return True


def decide_parked(world: World, intent_hex: str, approved: bool) -> int:
    """Approve or deny a parked intent (``world effects approve|deny``); durable on return."""
    try:
        raw = bytes.fromhex(intent_hex.removeprefix("blake3:"))
    except ValueError:
        raw = b""
    intent = world.kernel.effects.intents.get(raw)
    if intent is None or intent.status != "parked":
        parked = [i.intent_hash.hex() for i in world.kernel.effects.parked()]
        raise UnknownName("parked intent", intent_hex, parked)
    seq = world.kernel.ingest_approval(raw, approved)
    world.commit()
    return seq
