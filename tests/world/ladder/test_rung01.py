"""Rung 01 (``world.ladder.rung01``): a timer set by the reducer fires: TimerFired → Done."""

from __future__ import annotations

from pathlib import Path

from plans_kit import of_kind, records

from world.history import verify_world
from world.ladder import drive


def test_the_timer_fires_once_and_the_world_replays(tmp_path: Path) -> None:
    path = drive("rung01", tmp_path)
    [receipt] = of_kind(records(path), "receipt")
    assert receipt.body["status"] == "ok"
    assert verify_world(path).ok
