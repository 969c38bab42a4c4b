"""Rung 04 (``world.ladder.rung04``): three requests answered out of order, joined once."""

from __future__ import annotations

from pathlib import Path

from plans_kit import of_kind, records

from air import cbor
from world.history import verify_world
from world.ladder import drive
from world.ladder.rung04 import TARGETS


def test_three_requests_answered_out_of_order_are_joined_and_the_world_replays(
    tmp_path: Path,
) -> None:
    path = drive("rung04", tmp_path)
    journal = records(path)
    previews = sorted(
        cbor.loads(r.body["payload"])["body_preview"] for r in of_kind(journal, "receipt")
    )
    assert previews == sorted(f"{name} says hi" for name in TARGETS.values())
    started = list(of_kind(journal, "plan.started"))
    assert len(started) == 1
    assert verify_world(path).ok
