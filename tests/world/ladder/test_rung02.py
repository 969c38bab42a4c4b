"""Rung 02 (``world.ladder.rung02``): put then get returns the same bytes."""

from __future__ import annotations

from pathlib import Path

from plans_kit import of_kind, records

from air import cbor
from world.history import verify_world
from world.ladder import drive
from world.ladder.rung02 import DATA


def test_the_bytes_put_come_back_from_get_and_the_world_replays(tmp_path: Path) -> None:
    path = drive("rung02", tmp_path)
    put, got = (r.body for r in of_kind(records(path), "receipt"))
    assert (put["status"], got["status"]) == ("ok", "ok")
    assert cbor.loads(got["payload"])["data"] == DATA
    assert verify_world(path).ok
