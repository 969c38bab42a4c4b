"""Threads and receipt delivery shared by the adapters: ``Outbox`` and ``WorkerPool``.

``Outbox`` is the one place a receipt leaves an adapter. It calls ``done`` under a lock and
refuses to once closed, so "no ``done`` after ``close()`` began" holds even for a worker that
finishes while the adapter is closing. A ``done`` that raises is reported through
``threading.excepthook`` (``report_exception``), whichever thread called it, and the adapter
goes on: one bad callback must not stop the timer thread or shrink a worker pool. The lock is re-entrant: a ``done`` that submits the next
intent, or closes the adapter, from inside the callback does not deadlock.

``WorkerPool`` runs jobs on a fixed number of daemon threads, in submission order per thread.
``close()`` sets ``closing`` (backoff waits watch it and give up), drops jobs not yet started,
and waits at most ``wait_s`` in all for the threads to end. Daemon threads, unlike
``concurrent.futures.ThreadPoolExecutor``'s, do not hold the interpreter open at exit, and
``ThreadPoolExecutor.shutdown`` has no bounded wait. A job that raises (a bug: adapters turn
every failure into a receipt) is reported the same way, and the thread goes on.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Final

from air.errors import WrongMode
from world.effects._adapters import ADAPTER_CLOSE_WAIT_S, Done, Receipt

__all__ = ["Outbox", "WorkerPool", "report_exception"]

Job = Callable[[], None]
_STOP: Final = None


def report_exception() -> None:
    """Hand the exception being handled to ``threading.excepthook``, as if it had ended the
    thread (so it is printed, and a test fails), while the thread goes on."""
    exc_type, exc, tb = sys.exc_info()
    threading.excepthook(threading.ExceptHookArgs([exc_type, exc, tb, threading.current_thread()]))


class Outbox:
    """Delivers receipts until closed; after ``close()`` returns, never again."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def deliver(self, done: Done, receipt: Receipt) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                done(receipt)
            except Exception:  # the receiver's bug: report it, and keep delivering the others
                report_exception()

    def close(self) -> None:
        with self._lock:
            self._closed = True


class WorkerPool:
    def __init__(self, name: str, workers: int) -> None:
        self.closing = threading.Event()
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def run(self, job: Job) -> None:
        if self.closing.is_set():
            raise WrongMode("submit an intent", "closed")
        self._jobs.put(job)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP or self.closing.is_set():
                return
            try:
                job()
            except Exception:
                report_exception()

    def close(self, wait_s: float = ADAPTER_CLOSE_WAIT_S) -> None:
        self.closing.set()
        for _ in self._threads:
            self._jobs.put(_STOP)
        deadline = time.monotonic() + wait_s
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
