"""The effect side of a world's loop: queued intents out to adapters, signed receipts back in.

    dispatch: every queued intent not yet sent  ->  Dispatcher (adapter threads)
    done:     a receipt, on the thread that finished it  ->  signed, queued
    take:     the queued receipts  ->  verified, journaled (one commit per batch)

``EffectPump`` is owned by the world's loop (``world._engine.Engine``), which decides when to
dispatch and take; the pump never ticks the kernel. A receipt is signed where it arrives:
``_signed``, the ``done`` callback, runs on the thread that finished the receipt (an adapter's;
the loop's own for an answer made inside ``dispatch``), signs it with the world's key
(``world.effects._receipts``), puts it with its signature on a queue and calls ``wake`` (so a
loop waiting on its wakeup fd looks). ``take``, on the loop's thread, signs nothing: it verifies
each signature (a receipt altered after it was signed is refused, ``ReceiptRefused``), checks
the receipt against the kernel's intents (an unknown intent is refused with
``ReceiptRefused``; a duplicate of one already journaled is ignored and noted while the kernel
still remembers it settled, among the last ``kernel._effects.SETTLED_RECENT_MAX``, and refused
as unknown after that), and journals it. Replay never gets here: it reuses the journaled
receipts. An ``http.request`` under a byte budget goes out with its reservation as
``bytes_max`` (``kernel._effects``).

Time. ``sim=True`` runs the timer adapter on a simulated clock that starts at the kernel's
logical ``now_ns``; ``advance_sim`` jumps it to the next deadline when only timers are in
flight, so a timer world runs at once and writes the same journal bytes on every run of the
same world; blobs are then put and got inside ``dispatch`` (not on a worker thread), so their
receipts too arrive at a tick that does not depend on the machine's load (an HTTP answer
still does: it comes from outside). Without it, timers fire on the wall clock. Given its own ``adapters``, the pump
advances a simulated ``TimerAdapter`` among them, if there is one.

Effects that are not live. ``effects`` (``world.effects._modes``: ``live``, ``replay``, ``stub``,
``deny``) decides who answers the outward intents (``http.request``; timers and blobs always go
to their adapters): in any mode but ``live`` they never reach an adapter; ``NotLive`` answers
each inside ``dispatch`` and the answer goes through ``_signed`` like an adapter's (there on the
loop's thread), so it is signed, verified and journaled by the same path, and taken in the same
cycle.

Secrets. The default HTTP adapter resolves ``defsecret`` references at dispatch
(``world.effects._secrets``) from ``local.json``'s bindings; a pump with live effects refuses
to start (``UsageError`` naming each secret and how to bind it) while a declared secret has no
usable binding on this machine. Effects that are not live need none.

Intents still in flight when the pump closes are dispatched again by the next pump (at least
once; adapters see the same intent hash).
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from air import cbor
from air.errors import UsageError
from air.sys.ondemand import HTTP_KINDS
from kernel import Kernel
from world._localconfig import read_local_config
from world.effects._adapters import Adapter, Dispatcher, Intent, Receipt
from world.effects._blob import BlobAdapter, BlobStore
from world.effects._modes import EffectsMode, JournaledReceipts, NotLive
from world.effects._receipts import ReceiptKey
from world.effects._secrets import SecretResolver
from world.effects._timer import SimClock, TimerAdapter
from world.effects._workspace import WorkspaceAdapter, cell_history
from world.errors import ReceiptRefused

__all__ = ["RECEIPT_WAIT_S", "EffectPump", "PumpReport", "accept_receipt", "decide_parked"]

RECEIPT_WAIT_S: Final = 0.05
"""How long a blocking ``take`` waits for a receipt before its loop looks at its flags again."""


class World(Protocol):
    """What the pump uses of an open world (``world._world.World``): its folder (for the
    receipt key), its content store (for the blob and HTTP adapters), its kernel (looked up
    at each use: a rebuild replaces it) and ``commit``."""

    @property
    def path(self) -> Path: ...
    @property
    def cas(self) -> BlobStore: ...
    @property
    def kernel(self) -> Kernel: ...
    @property
    def journal(self) -> Any: ...
    def commit(self) -> int: ...


@dataclass
class PumpReport:
    """What the pump did: intents sent (``not_live`` of them answered without an adapter),
    receipts journaled, duplicates ignored, notes."""

    dispatched: int = 0
    not_live: int = 0
    receipts: int = 0
    duplicates: int = 0
    notes: list[str] = field(default_factory=list)


class EffectPump:
    def __init__(
        self,
        world: World,
        *,
        sim: bool = False,
        adapters: Iterable[Adapter] | None = None,
        wake: Callable[[], None] | None = None,
        effects: EffectsMode = "live",
    ) -> None:
        self.world = world
        self.sim = sim
        self.key = ReceiptKey.load_or_create(world.path)
        journaled = JournaledReceipts(world.journal, world.path) if effects == "replay" else None
        self.not_live = NotLive(effects, journaled)
        if adapters is None:
            clock = SimClock(start_ns=world.kernel.effects.now_ns) if sim else None
            blobs = BlobAdapter(world.cas, synchronous=sim)
            local = read_local_config(world.path)  # this machine's settings
            secrets = SecretResolver(
                lambda: world.kernel.effects.air.secrets, local.secrets, world.path
            )
            if effects == "live":
                unbound = secrets.unbound()
                if unbound:
                    raise UsageError("cannot run with live effects: " + "; ".join(unbound))
            # Here, not at the top: httpx costs every command that opens a world ~60 ms.
            from world.effects._http import IDEMPOTENCY_CONTEXT, HttpAdapter
            from world.effects._llm import LlmAdapter

            http = HttpAdapter(
                world.cas,
                secrets=secrets,
                idempotency_secret=self.key.derive(IDEMPOTENCY_CONTEXT),
                **local.http.given(),
            )
            llm = LlmAdapter(
                world.cas,
                http=http,
                providers={name: p.base_url for name, p in local.llm.providers.items()},
                secrets=secrets,
                **local.llm.model_dump(exclude_none=True, exclude={"providers"}),
            )
            spaces = WorkspaceAdapter(world.cas, history=cell_history(world))
            adapters = [TimerAdapter(clock), blobs, spaces, llm, http]  # llm before its client
        adapters = list(adapters)
        self.dispatcher = Dispatcher(adapters)
        self._timer = next(
            (a for a in adapters if isinstance(a, TimerAdapter) and a.simulated), None
        )
        self._wake = wake
        self._inbox: queue.SimpleQueue[tuple[Receipt, bytes]] = queue.SimpleQueue()
        self._sent: set[bytes] = set()

    @property
    def effects(self) -> EffectsMode:
        return self.not_live.mode

    def close(self) -> None:
        try:
            self.dispatcher.close()
        finally:
            self.not_live.close()

    @property
    def in_flight(self) -> int:
        return self.dispatcher.in_flight

    def dispatch(self, report: PumpReport) -> int:
        """Send every queued intent not sent yet to its adapter; return how many."""
        sent = 0
        for intent in self.world.kernel.effects.queued():
            if intent.intent_hash in self._sent:
                continue
            self._sent.add(intent.intent_hash)
            params = cbor.loads(intent.params_cbor)
            origin = str(intent.origin.get("name", ""))
            bytes_max = intent.reserved if intent.kind in HTTP_KINDS and intent.reserved else None
            outgoing = Intent(intent.intent_hash, intent.kind, params, origin, bytes_max)
            if self.not_live.covers(intent.kind):
                self._signed(self.not_live.answer(outgoing))
                report.not_live += 1
            else:
                self.dispatcher.submit(outgoing, self._signed)
            sent += 1
        report.dispatched += sent
        return sent

    def _signed(self, receipt: Receipt) -> None:
        """The adapters' callback (any thread): sign at the source, verify when journaling."""
        self._inbox.put((receipt, self.key.sign(receipt)))
        if self._wake is not None:
            self._wake()

    def take(self, report: PumpReport, *, wait: bool = False) -> bool:
        """Journal the receipts that have arrived (waiting up to ``RECEIPT_WAIT_S`` for one if
        ``wait``), with one commit; True if there were any."""
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
        return bool(got)

    def _accept(self, receipt: Receipt, sig: bytes, report: PumpReport) -> None:
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

    def advance_sim(self) -> bool:
        """With simulated time, when only timers are left in flight, fire the next one(s)."""
        timer = self._timer
        if not self.sim or timer is None or timer.next_deadline() is None:
            return False
        if self.dispatcher.in_flight != self._timers_sent():
            return False
        timer.advance()
        return True

    def _timers_sent(self) -> int:
        return sum(1 for h in self._sent if self._kind(h) == "timer.set")

    def only_timers_left(self) -> bool:
        """Every intent in flight is a timer (a run that returns at idle need not wait)."""
        return all(self._kind(h) == "timer.set" for h in self._sent)

    def _kind(self, intent_hash: bytes) -> str | None:
        """A sent intent's kind; None once it is no longer live (settled meanwhile)."""
        intent = self.world.kernel.effects.intents.get(intent_hash)
        return None if intent is None else intent.kind


def accept_receipt(world: World, key: ReceiptKey, receipt: Receipt, sig: bytes) -> bool:
    """Verify ``receipt`` and journal it (not committed); False for a duplicate of one
    already journaled. ``ReceiptRefused`` for a forged or altered one, or an unknown intent."""
    key.verify(receipt, sig)
    status = world.kernel.effects.status_of(receipt.intent_hash)
    if status is None:
        raise ReceiptRefused(receipt.intent_hash.hex(), "unknown_intent")
    if status == "done":
        return False
    if status != "queued":
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


def decide_parked(world: World, intent: str, approved: bool) -> int:
    """Approve or deny a parked intent (``world effects approve|deny``), named by its hash or a
    unique prefix of it (``world.by_prefix``); durable on return."""
    from world._prefixes import by_prefix

    parked = {i.intent_hash.hex(): i for i in world.kernel.effects.parked()}
    chosen = parked[by_prefix("parked intent", intent, parked)]
    seq = world.kernel.ingest_approval(chosen.intent_hash, approved)
    world.commit()
    return seq
