"""The world as a decomposed loop (after the CSP engine): ``start``, ``process_one_cycle``,
``finish``, with a thread-safe ``push`` and a wakeup file descriptor an asyncio loop can watch.

One thread drives the loop; any thread may ``push`` events. A cycle drains every pushed event
into one durable batch (one group commit), then runs ticks until the world is idle or
``ticks_per_cycle_max`` ran, and commits. Events pushed during a cycle wait for the next one,
so what a cycle sees is fixed at its start (beat N's inputs; their effects show at N+1).

The wakeup descriptor is the read end of a non-blocking pipe: ``push`` writes a byte, the
loop drains it. ``loop.add_reader(engine.wakeup_fd, ...)`` integrates with asyncio.

Each pushed event is judged on its own: one that fails normalisation is reported (to
``on_reject`` and in ``rejected``, the last ``REJECTED_KEPT``) and left out; the good ones of the
same cycle go on as one batch.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from air.errors import WorldError, WrongMode
from world._world import EventRejected, World

__all__ = ["REJECTED_KEPT", "TICKS_PER_CYCLE_MAX", "Engine", "Rejected"]

TICKS_PER_CYCLE_MAX: Final = 1024
REJECTED_KEPT: Final = 1000

Rejected = tuple[str, Any, WorldError]


class Engine:
    def __init__(
        self,
        world: World,
        ticks_per_cycle_max: int = TICKS_PER_CYCLE_MAX,
        on_reject: Callable[[str, Any, WorldError], None] | None = None,
    ) -> None:
        self.world = world
        self.ticks_per_cycle_max = ticks_per_cycle_max
        self.on_reject = on_reject
        self.rejected: deque[Rejected] = deque(maxlen=REJECTED_KEPT)
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._running = False

    @property
    def wakeup_fd(self) -> int:
        return self._read_fd

    def push(self, schema: str, value: Any) -> None:
        """Queue an event from any thread; it enters the world at the next cycle."""
        self._inbox.put((schema, value))
        with contextlib.suppress(BlockingIOError):  # a full pipe means a wakeup is already due
            os.write(self._write_fd, b"\x01")

    def start(self) -> None:
        if self._running:
            raise WrongMode("start the engine", "already started")
        self._running = True

    def process_one_cycle(self, max_wait: float = 0.0) -> int:
        """Ingest pushed events, run ticks; wait up to ``max_wait`` s when there is nothing to do.
        Returns the number of steps run."""
        if not self._running:
            raise WrongMode("process a cycle", "not started; call start() first")
        if self.world.kernel.idle() and self._inbox.empty() and max_wait > 0:
            select.select([self._read_fd], [], [], max_wait)
        self._drain_wakeups()
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
        return self.world.step(self.ticks_per_cycle_max) if not self.world.kernel.idle() else 0

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass

    def finish(self) -> int:
        """Ingest what is still queued, run until idle, and stop. Returns steps run."""
        steps = self.process_one_cycle()
        steps += self.world.run_until_idle()
        self._running = False
        os.close(self._read_fd)
        os.close(self._write_fd)
        return steps
