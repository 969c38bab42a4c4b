"""Rung 05 (``world.ladder.rung05``): charge, reserve, notify; and the refund when the
reservation fails. A result for a phase that is not waiting for it changes nothing."""

from __future__ import annotations

from pathlib import Path

from plans_kit import of_kind, records

from world import World
from world.history import verify_world
from world.ladder import drive
from world.ladder.rung05 import REDUCER


def test_one_saga_completes_and_one_is_compensated_and_the_world_replays(tmp_path: Path) -> None:
    path = drive("rung05", tmp_path)
    started = [r.body["plan"] for r in of_kind(records(path), "plan.started")]
    assert started == [
        "demo/charge_plan@1", "demo/reserve_plan@1", "demo/notify_plan@1",
        "demo/charge_plan@1", "demo/reserve_plan@1", "demo/refund_plan@1",
    ]  # fmt: skip
    assert verify_world(path).ok


def test_a_repeated_result_does_not_run_the_next_step_again(tmp_path: Path) -> None:
    """AgentOS's reducer takes a ChargeCompleted in any phase, so a second one would reserve
    twice; ours takes it only while Charging."""
    path = drive("rung05", tmp_path)
    with World.open(path) as world:
        before = world.state(REDUCER)
        stale = {"request_id": 1, "status": 200, "body_preview": "charged"}
        world.send("demo/ChainEvent@1", {"ChargeCompleted": stale})
        world.run_until_idle()
        assert world.state(REDUCER) == before
    assert len(list(of_kind(records(path), "plan.started"))) == 6
