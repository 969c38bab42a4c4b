"""Rung 09 (``world.ladder.rung09``): the workspace flow its README gives, and replay."""

from __future__ import annotations

from pathlib import Path

from plans_kit import of_kind, records

from world.history import verify_world
from world.ladder import drive


def test_two_workspaces_seeded_then_one_again_and_the_world_replays(tmp_path: Path) -> None:
    path = drive("rung09", tmp_path)
    journal = records(path)
    ended = [r.body["status"] for r in of_kind(journal, "plan.ended")]
    assert ended == ["ok", "ok", "ok"]
    adapters = {r.body["adapter_id"] for r in of_kind(journal, "receipt")}
    assert adapters == {"workspace"}
    assert all(r.body["status"] == "ok" for r in of_kind(journal, "receipt"))
    assert verify_world(path).ok
