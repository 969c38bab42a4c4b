"""``timer.set``: deliver a receipt once a deadline has passed, on the wall clock or a simulated one.

Params ``{deliver_at_ns: nat, key: text|None}``; receipt ``{delivered_at_ns: nat, key}``
(SPEC §6). Deadlines and ``delivered_at_ns`` are nanoseconds since the Unix epoch.

Two modes, chosen by the clock given to ``TimerAdapter``:

* **Wall** (``WallClock`` by default, or any ``Clock`` that is not a ``SimClock``; adapter id
  ``timer``): one thread keeps the pending timers in a heap and fires each once
  ``clock.now_ns()`` has reached its deadline; ``delivered_at_ns`` is the clock's reading at
  firing, so never before the deadline. The thread sleeps at most ``wait_slice_s`` (default
  ``TIMER_WAIT_SLICE_S``) at a time before reading the clock again: the
  sleep itself runs on the monotonic clock, and a wall clock stepped forward (NTP, a resumed
  laptop) must not leave a due timer waiting for the old deadline.
* **Simulated** (``SimClock``, for ``world run --sim``; adapter id ``timer.sim``): nothing
  fires by itself and there is no thread. ``next_deadline()`` tells the earliest pending
  deadline; ``advance()`` moves the clock to it and fires exactly the timers due then (ties in
  submission order), calling ``done`` synchronously before it returns. The clock never runs
  backwards: ``delivered_at_ns`` is ``max(deliver_at_ns, now)``, which is ``deliver_at_ns``
  unless the timer was set for a time already past. A simulated run is therefore a pure
  function of the intents and the order of ``advance()`` calls.

Every timer receipt is ``ok``: a timer cannot fail. Params that are not of the schema (the
kernel normalises them first, so only a bug sends them) get an ``error`` receipt shaped
``{delivered_at_ns: 0, key: None}``.

Rejected alternative: one ``threading.Timer`` per intent. A world can have many pending timers
(one per cell), and a thread each costs a stack and an OS thread for as long as it waits.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Any, Final, Protocol

from air.errors import WrongMode
from world.effects._adapters import ADAPTER_CLOSE_WAIT_S, Done, Intent, Receipt
from world.effects._workers import Outbox

__all__ = ["TIMER_KIND", "TIMER_WAIT_SLICE_S", "Clock", "SimClock", "TimerAdapter", "WallClock"]

TIMER_KIND: Final = "timer.set"
TIMER_WAIT_SLICE_S: Final = 1.0
"""Longest the wall-mode thread sleeps before reading the clock again."""


class Clock(Protocol):
    def now_ns(self) -> int:
        """Nanoseconds since the Unix epoch."""
        ...


class WallClock:
    """``time.time_ns()``."""

    def now_ns(self) -> int:
        return time.time_ns()


class SimClock:
    """A clock that moves only when told to (``TimerAdapter.advance`` does), never backwards."""

    def __init__(self, start_ns: int = 0) -> None:
        self._now_ns = start_ns
        self._lock = threading.Lock()

    def now_ns(self) -> int:
        with self._lock:
            return self._now_ns

    def advance_to(self, ns: int) -> int:
        """Move to ``ns`` unless already past it; return the time now."""
        with self._lock:
            self._now_ns = max(self._now_ns, ns)
            return self._now_ns


_Pending = tuple[int, int, Intent, str | None, Done]  # (deadline, order, intent, key, done)


def _timer_params(params: Any) -> tuple[int, str | None] | None:
    if not isinstance(params, dict):
        return None
    deadline, key = params.get("deliver_at_ns"), params.get("key")
    if type(deadline) is not int or deadline < 0 or not (key is None or isinstance(key, str)):
        return None
    return deadline, key


class TimerAdapter:
    kinds: frozenset[str] = frozenset({TIMER_KIND})

    def __init__(
        self, clock: Clock | None = None, *, wait_slice_s: float = TIMER_WAIT_SLICE_S
    ) -> None:
        self.clock: Clock = clock if clock is not None else WallClock()
        self.wait_slice_s = wait_slice_s
        self.simulated = isinstance(self.clock, SimClock)
        self.adapter_id = "timer.sim" if self.simulated else "timer"
        self._pending: list[_Pending] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._closing = False
        self._outbox = Outbox()
        self._thread: threading.Thread | None = None
        if not self.simulated:
            self._thread = threading.Thread(target=self._run, name="timer", daemon=True)
            self._thread.start()

    def submit(self, intent: Intent, done: Done) -> None:
        parsed = _timer_params(intent.params)
        if parsed is None:
            payload = {"delivered_at_ns": 0, "key": None}
            self._outbox.deliver(
                done, Receipt(intent.intent_hash, self.adapter_id, "error", payload)
            )
            return
        with self._wake:
            if self._closing:
                raise WrongMode("submit an intent", "closed")
            deadline, key = parsed
            heapq.heappush(self._pending, (deadline, next(self._order), intent, key, done))
            self._wake.notify()

    @property
    def pending(self) -> int:
        with self._wake:
            return len(self._pending)

    def next_deadline(self) -> int | None:
        """The earliest pending deadline, or None when no timer is pending."""
        with self._wake:
            return self._pending[0][0] if self._pending else None

    def advance(self) -> int:
        """Simulated mode: jump to the next deadline and fire the timers due then; return how
        many fired (0 when none is pending)."""
        if not self.simulated:
            raise WrongMode("advance the timer clock", "on the wall clock")
        with self._wake:
            if not self._pending:
                return 0
            deadline = self._pending[0][0]
            due = self._pop_due(deadline)
        assert isinstance(self.clock, SimClock)
        self._fire(due, self.clock.advance_to(deadline))
        return len(due)

    def _pop_due(self, now_ns: int) -> list[_Pending]:
        due = []
        while self._pending and self._pending[0][0] <= now_ns:
            due.append(heapq.heappop(self._pending))
        return due

    def _fire(self, due: list[_Pending], now_ns: int) -> None:
        for _deadline, _order, intent, key, done in due:
            payload = {"delivered_at_ns": now_ns, "key": key}
            receipt = Receipt(intent.intent_hash, self.adapter_id, "ok", payload)
            self._outbox.deliver(done, receipt)

    def _run(self) -> None:
        while True:
            with self._wake:
                if self._closing:
                    return
                now_ns = self.clock.now_ns()
                due = self._pop_due(now_ns)
                if not due:
                    wait_s = self.wait_slice_s
                    if self._pending:
                        wait_s = min(wait_s, (self._pending[0][0] - now_ns) / 1e9)
                    self._wake.wait(wait_s)
                    continue
            self._fire(due, now_ns)

    def close(self) -> None:
        self._outbox.close()
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(ADAPTER_CLOSE_WAIT_S)
