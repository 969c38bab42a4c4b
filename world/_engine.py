"""The one loop of a world (after the CSP engine): ``start``, ``process_one_cycle``, ``finish``,
with a thread-safe ``push`` and a wakeup file descriptor. ``world run`` drives it with ``run``,
``world serve`` one cycle per turn between requests, and a program embedding a world may drive
it from its own loop (``loop.add_reader(engine.wakeup_fd, ...)`` for asyncio).

One thread drives the loop; any thread may ``push`` events, and adapter threads hand back
receipts. A cycle, in this order:

    1. ingest pushed events: one durable batch (one group commit)
    2. run ticks: up to ``ticks_per_cycle_max`` (``run``: until idle), committing as it goes
    3. dispatch the intents the ticks queued (``world.effects.EffectPump``)
    4. take the receipts that have arrived: verified, journaled, one commit

Events pushed or receipts arriving during a cycle wait for the next one, so what a cycle sees
is fixed at its start (beat N's inputs; their consequences show at N+1). Each pushed event is
judged on its own: one that fails normalisation is reported (to ``on_reject`` and in
``rejected``, the last ``REJECTED_KEPT``) and left out; the good ones of the same cycle go on as
one batch.

The wakeup descriptor is the read end of a non-blocking pipe: ``push`` and every receipt write
a byte, the cycle drains it. So ``process_one_cycle(max_wait)`` sleeps until there is something
to do, and a selector loop (``world serve``) wakes for receipts as for requests.

``run(until_idle)`` repeats cycles until the world is done: nothing ready and no effect in
flight; with ``until_idle=True`` it returns as soon as only real-time timers are left. With
simulated time (``sim=True``) the timer clock jumps to the next deadline when only timers are
in flight, so a timer world runs at once and writes the same journal bytes every time. ``effects``
(``world.effects._modes``) says who answers outward intents: the adapters (``live``), or, with
nothing sent, a stub, a replayed or a denied receipt; an engine does not read the world's mode
file itself (``choose_mode`` is the commands' part), so an embedding program says what it wants.
An interrupt (``World.interrupt``) stops it at a tick or receipt boundary with ``Interrupted``,
everything up to it committed.

Rejected: a loop per command (``world run`` had the effect loop, ``world serve`` a turn of it,
and this engine was used only by tests). They differed in when receipts were taken and whether
pushed events were seen at all; one cycle now serves all three.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from air.errors import WorldError, WrongMode
from world._world import World
from world.effects import RECEIPT_WAIT_S, Adapter, EffectPump, EffectsMode, PumpReport
from world.errors import EventRejected, Interrupted

__all__ = ["REJECTED_KEPT", "TICKS_PER_CYCLE_MAX", "Engine", "LoopReport", "Rejected"]

TICKS_PER_CYCLE_MAX: Final = 1024
"""Ticks one ``process_one_cycle`` runs at most (``run`` runs until idle)."""
REJECTED_KEPT: Final = 1000

Rejected = tuple[str, Any, WorldError]


@dataclass
class LoopReport(PumpReport):
    """What the loop did: steps run, and the pump's intents, receipts and notes."""

    steps: int = 0


class Engine:
    def __init__(
        self,
        world: World,
        *,
        sim: bool = False,
        adapters: Iterable[Adapter] | None = None,
        ticks_per_cycle_max: int = TICKS_PER_CYCLE_MAX,
        on_reject: Callable[[str, Any, WorldError], None] | None = None,
        effects: EffectsMode = "live",
    ) -> None:
        self.world = world
        self.ticks_per_cycle_max = ticks_per_cycle_max
        self.on_reject = on_reject
        self.rejected: deque[Rejected] = deque(maxlen=REJECTED_KEPT)
        self.report = LoopReport()
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._running = False
        try:
            self.pump = EffectPump(
                world, sim=sim, adapters=adapters, wake=self._wake, effects=effects
            )
        except BaseException:
            self._close_pipe()
            raise

    @property
    def wakeup_fd(self) -> int:
        return self._read_fd

    def push(self, schema: str, value: Any) -> None:
        """Queue an event from any thread; it enters the world at the next cycle."""
        self._inbox.put((schema, value))
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe means a wakeup is already due
            os.write(self._write_fd, b"\x01")

    # --- the cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._running:
            raise WrongMode("start the engine", "already started")
        self._running = True

    def busy(self) -> bool:
        """Ticks are ready (a cycle now would step)."""
        return not self.world.kernel.idle()

    def process_one_cycle(self, max_wait: float = 0.0) -> int:
        """One cycle (the module docstring's four parts); wait up to ``max_wait`` s for
        something to do first when nothing is ready. Returns the number of steps run."""
        if not self._running:
            raise WrongMode("process a cycle", "not started; call start() first")
        if max_wait > 0 and not self.busy() and self._inbox.empty():
            select.select([self._read_fd], [], [], max_wait)
        steps, _took = self._cycle(self.ticks_per_cycle_max, None)
        return steps

    def _cycle(self, ticks: int | None, max_steps: int | None) -> tuple[int, bool]:
        """Ingest, tick (``ticks`` of them, or until idle within ``max_steps``), dispatch,
        take; return (steps run, whether receipts were taken)."""
        self._drain_wakeups()
        self._ingest()
        world = self.world
        if ticks is None:
            steps = world.run_until_idle(max_steps)
        else:
            steps = world.step(ticks) if not world.kernel.idle() else 0
        self.report.steps += steps
        self.pump.dispatch(self.report)
        took = self.pump.take(self.report)
        if world.take_interrupt():  # the receipts taken are journaled before stopping
            raise Interrupted(world.journal.seq_next)
        return steps, took

    def _ingest(self) -> None:
        batch = []
        while not self._inbox.empty():
            batch.append(self._inbox.get_nowait())
        while batch:
            try:
                self.world.send_many(batch)
            except EventRejected as exc:
                schema, value = batch.pop(exc.index)
                self.rejected.append((schema, value, exc.cause))
                if self.on_reject is not None:
                    self.on_reject(schema, value, exc.cause)
                continue
            break

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass

    # --- running to the end --------------------------------------------------------------

    def run(self, *, until_idle: bool = True, max_steps: int | None = None) -> LoopReport:
        """Cycles until the world is done (the module docstring says when); the report of
        everything this engine did so far. ``max_steps`` bounds each stretch of ticks
        (``LimitExceeded`` past it, after committing)."""
        if not self._running:
            self.start()
        pump = self.pump
        while True:
            _steps, took = self._cycle(None, max_steps)
            if took or pump.advance_sim():
                continue
            if pump.in_flight == 0 and self._inbox.empty():
                return self.report
            if until_idle and not pump.sim and pump.only_timers_left():
                return self.report
            select.select([self._read_fd], [], [], RECEIPT_WAIT_S)

    def finish(self) -> int:
        """Ingest what is still pushed, run until idle (effects included, real-time timers
        left pending), and stop; the steps this took."""
        before = self.report.steps
        self.run(until_idle=True)
        self._running = False
        return self.report.steps - before

    def close(self) -> None:
        """Stop the adapters (bounded wait) and close the wakeup pipe. Safe to call twice."""
        self._running = False
        self.pump.close()
        self._close_pipe()

    def _close_pipe(self) -> None:
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._read_fd = self._write_fd = -1

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
