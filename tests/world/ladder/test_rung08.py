"""Rung 08 (``world.ladder.rung08``): three attempts with backoff timers between, then Failed."""

from __future__ import annotations

from pathlib import Path

from plans_kit import of_kind, records

from air import cbor
from world import World
from world.history import verify_world
from world.ladder import drive


def test_three_attempts_with_two_doubling_timers_then_failed(tmp_path: Path) -> None:
    path = drive("rung08", tmp_path)
    with World.open(path) as world:
        assert world.state("demo/RetrySM@1") == {
            "pc": "Failed",
            "attempt": 3,
            "max_attempts": 3,
            "base_delay_ms": 10,
            "anchor_ns": 1_000,
            "payload": "p",
            "req_id": "req-123",
        }
    recs = records(path)
    assert len(of_kind(recs, "plan.started")) == 3
    timers = [cbor.loads(r.body["params"]) for r in of_kind(recs, "effect.queued")]
    assert timers == [
        {"deliver_at_ns": 1_000 + 10_000_000, "key": "req-123"},
        {"deliver_at_ns": 1_000 + 20_000_000, "key": "req-123"},
    ]
    assert verify_world(path).ok
