"""The one loop (``world._engine.Engine``): what ``world run`` and ``world serve`` both drive.

A cycle ingests pushed events, ticks, dispatches the intents the ticks queued and takes the
receipts that came back; receipts and pushes wake its descriptor; ``run`` repeats cycles until
the world is done. (Pushes from several threads and a bad event among good ones are in
``test_world_core`` and ``test_world_faults``.)
"""

from __future__ import annotations

import select
import threading
from pathlib import Path

import pytest

from world import Engine, World
from world.effects import Done, Intent, Receipt, SimClock, TimerAdapter
from world.errors import Interrupted

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT, add

TIMER_AIR = ROOT / "manifests" / "timer"
TIMER_EVENT = "demo/TimerEvent@1"


class _HeldTimer:
    """A timer adapter that answers only when ``release`` is called (from any thread)."""

    adapter_id = "timer.held"
    kinds = frozenset({"timer.set"})

    def __init__(self) -> None:
        self.held: list[tuple[Intent, Done]] = []
        self.submitted = threading.Event()

    def submit(self, intent: Intent, done: Done) -> None:
        self.held.append((intent, done))
        self.submitted.set()

    def release(self) -> None:
        for intent, done in self.held:
            payload = {"delivered_at_ns": intent.params["deliver_at_ns"], "key": None}
            done(Receipt(intent.intent_hash, self.adapter_id, "ok", payload))
        self.held.clear()

    def close(self) -> None:
        return


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_a_cycle_ticks_dispatches_and_a_receipt_wakes_the_descriptor_for_the_next(
    tmp_path: Path,
) -> None:
    held = _HeldTimer()
    with World.create(tmp_path / "w", TIMER_AIR) as world, Engine(world, adapters=[held]) as e:
        world.send(TIMER_EVENT, {"key": "t", "deliver_at_ns": 5})
        e.start()
        assert e.process_one_cycle() == 1  # the step that sets the timer, and its dispatch
        assert held.submitted.is_set()
        assert world.state("demo/Timer@1", "t")["fired"] == 0
        e._drain_wakeups()
        assert not _readable(e.wakeup_fd)
        threading.Thread(target=held.release).start()
        assert select.select([e.wakeup_fd], [], [], 10)[0] == [e.wakeup_fd]  # the receipt
        assert e.process_one_cycle() == 0  # takes the receipt: journaled, not yet stepped
        assert e.report.receipts == 1
        assert e.process_one_cycle() == 1  # the receipt's delivery to the cell
        assert world.state("demo/Timer@1", "t")["fired"] == 1


def test_run_ingests_events_pushed_before_it_and_ends_when_nothing_is_in_flight(
    tmp_path: Path,
) -> None:
    with World.create(tmp_path / "w", COUNTER_AIR) as world, Engine(world) as engine:
        for n in range(3):
            engine.push(EVENT, add("a", n + 1))
        report = engine.run(until_idle=False)
        assert report.steps == 3
        assert world.state(COUNTER, "a")["count"] == 6


def test_simulated_time_fires_timers_in_deadline_order_within_one_run(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", TIMER_AIR) as world:
        world.send_many([(TIMER_EVENT, {"key": "t", "deliver_at_ns": ns}) for ns in (30, 10, 20)])
        timer = TimerAdapter(SimClock(start_ns=0))
        with Engine(world, sim=True, adapters=[timer]) as engine:
            report = engine.run(until_idle=False)
        assert report.receipts == 3
        assert world.state("demo/Timer@1", "t") == {"armed": 3, "fired": 3, "last_fired_ns": 30}


def test_an_interrupt_stops_the_run_at_a_receipt_boundary_with_everything_committed(
    tmp_path: Path,
) -> None:
    held = _HeldTimer()
    w = tmp_path / "w"
    with World.create(w, TIMER_AIR) as world, Engine(world, adapters=[held]) as engine:
        world.send(TIMER_EVENT, {"key": "t", "deliver_at_ns": 5})
        engine.start()
        engine.process_one_cycle()
        held.release()
        world.interrupt()
        with pytest.raises(Interrupted) as stopped:
            engine.process_one_cycle()
        seq_next = world.journal.seq_next
        assert stopped.value.seq_next == seq_next
        assert world.journal.seq_next_committed == seq_next
        assert engine.report.receipts == 1


def test_a_cycle_before_start_is_refused(tmp_path: Path) -> None:
    from air.errors import WrongMode

    with World.create(tmp_path / "w", COUNTER_AIR) as world, Engine(world) as engine:
        with pytest.raises(WrongMode) as refused:
            engine.process_one_cycle()
        assert refused.value.operation == "process a cycle"
        engine.start()
        with pytest.raises(WrongMode):
            engine.start()
