"""Rung 06 (``world.ladder.rung06``): air.v1, then air.v2 proposed, shadowed, approved and
applied; the journal holds the governance loop in order and replays exactly."""

from __future__ import annotations

from pathlib import Path

from plans_kit import records

from world.history import verify_world
from world.ladder import drive


def test_the_upgrade_goes_through_the_governance_loop_and_the_world_replays(
    tmp_path: Path,
) -> None:
    path = drive("rung06", tmp_path)
    journal = records(path)
    kinds = [r.kind for r in journal if r.kind.startswith("gov.")]
    assert kinds == ["gov.proposed", "gov.shadowed", "gov.approved", "gov.applied"]
    plans = [r.body["plan"] for r in journal if r.kind == "plan.started"]
    assert plans == ["demo/fetch_plan@1", "demo/fetch_plan@2"]
    applied = next(r.seq for r in journal if r.kind == "gov.applied")
    assert next(r.seq for r in journal if r.kind == "plan.started" and
                r.body["plan"] == "demo/fetch_plan@2") > applied  # fmt: skip
    assert verify_world(path).ok
