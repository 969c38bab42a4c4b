"""Work a long-running command repeats in the background: ``Periodic`` runs a function on its
own thread every ``interval_s`` seconds until stopped (``world run``/``serve`` with
``--archive`` archive the segments sealed since, with ``--verify-every`` check the journal).

The work must be safe beside the world's writer on another thread: a reader's (the archive and
``check_world`` take the world's shared lock and open their own handles; they share no memory
with the engine). An error the work raises is handed to ``report`` and the thread goes on at
the next interval: a full archive disk must not stop a world. ``stop`` wakes the thread and
waits for the run in progress to end, then runs the work once more if ``final`` (so what was
sealed at the very end is archived too). Not in ``kernel/``: it is a clock and a thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

__all__ = ["Periodic"]


class Periodic:
    """Run ``work`` every ``interval_s`` seconds on a daemon thread (see the module docstring)."""

    def __init__(
        self,
        interval_s: float,
        work: Callable[[], None],
        report: Callable[[BaseException], None],
        *,
        name: str = "world-periodic",
        final: bool = False,
    ) -> None:
        if not interval_s > 0:
            raise ValueError("interval_s must be positive")
        self.interval_s = interval_s
        self.runs = 0
        self._work, self._report, self._final = work, report, final
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # one run at a time: the thread's or the final one
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> Periodic:
        self._thread.start()
        return self

    def run_once(self) -> None:
        """Run the work now, on this thread; an error goes to ``report``."""
        with self._lock:
            try:
                self._work()
            except Exception as exc:  # reported, and the thread goes on
                self._report(exc)
            self.runs += 1

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._final:
            self.run_once()

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self.run_once()

    def __enter__(self) -> Periodic:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
