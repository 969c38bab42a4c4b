"""Rung 00 (``world.ladder.rung00``): Start {target: 3}, three Ticks, Done with 0 remaining."""

from __future__ import annotations

from pathlib import Path

from world import World
from world.history import verify_world
from world.ladder import drive


def test_the_counter_counts_down_to_done_and_replays(tmp_path: Path) -> None:
    said: list[str] = []
    path = drive("rung00", tmp_path, said.append)
    with World.open(path) as world:
        assert world.state("demo/CounterSM@1") == {"pc": "Done", "remaining": 0}
    assert said
    assert verify_world(path).ok
