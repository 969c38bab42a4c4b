"""Hostile modules against cell upgrades and eras (issue 21): an upgrade step that emits an
event, deletes the cell, returns a state of the wrong schema or traps fails that cell's
upgrade, journaled with the reason; the cell stays in its era with its state, and replay
agrees. An event the new manifest routes to an old-era cell whose module does not take it is a
dead letter that says to upgrade the cell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from air import cbor
from world import World
from world.gov import apply, propose, upgrade_cells
from world.history import verify_world

from worldkit import body_wasm, const_wasm, manifest, module, output, schema, write_world_air

R, S1, S2, E, F = "t/R@1", "t/S@1", "t/S@2", "t/E@1", "t/F@1"


def _air(folder: Path, wasm: bytes, state: str, *, extra_route: bool = False) -> Path:
    routes = [{"event": E, "reducer": R, "key_field": "key"}]
    if extra_route:
        routes.append({"event": F, "reducer": R, "key_field": "key"})
    docs: list[dict[str, Any]] = [
        schema(E, {"record": {"key": "text"}}),
        schema(F, {"record": {"key": "text"}}),
        schema(S1, {"record": {"n": "int"}}),
        schema(S2, {"record": {"n": "int", "m": "int"}}),
        module(R, state, E, key_schema="text"),
        manifest(routes),
    ]
    return write_world_air(folder, {R: wasm}, docs)


V1 = const_wasm(output({"n": 1}))


@pytest.mark.parametrize(
    ("wasm", "code"),
    [
        pytest.param(
            const_wasm(output({"n": 1, "m": 2}, [(E, {"key": "x"})])), "upgrade.output", id="emits"
        ),
        pytest.param(const_wasm(output(None)), "upgrade.state", id="deletes"),
        pytest.param(
            const_wasm(output({"n": "one", "m": 2})), "schema_mismatch", id="wrong-schema"
        ),
        pytest.param(body_wasm("unreachable"), "trap", id="traps"),
    ],
)
def test_a_hostile_upgrade_fails_the_cell_and_leaves_it_in_its_era(
    tmp_path: Path, wasm: bytes, code: str
) -> None:
    path = tmp_path / "w"
    with World.create(path, _air(tmp_path / "v1", V1, S1)) as world:
        world.send_many([(E, {"key": "a"}), (E, {"key": "b"})])
        world.run_until_idle()
        old = world.air.manifest_hash
        made, _ = propose(world, _air(tmp_path / "v2", wasm, S2))
        apply(world, made.id)
        done = upgrade_cells(world, R)
        assert done.upgraded == 0
        assert sorted(key for key, _ in done.failed) == ["a", "b"]
        reasons = {reason.get("code") for _, reason in done.failed}
        reasons |= {reason.get("error") for _, reason in done.failed}
        assert code in reasons
        for key in ("a", "b"):
            view = world.cell(R, key)
            assert view is not None
            assert cbor.raw_to_hash(view.entry.manifest_hash) == old
            assert view.state == {"n": 1}
    assert verify_world(path).ok


def test_an_event_an_old_era_module_does_not_take_is_a_dead_letter_saying_to_upgrade(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w"
    with World.create(path, _air(tmp_path / "v1", V1, S1)) as world:
        world.send(E, {"key": "a"})
        world.run_until_idle()
        v2 = const_wasm(output({"n": 2}))  # another module, the same state schema
        made, _ = propose(world, _air(tmp_path / "v2", v2, S1, extra_route=True))
        apply(world, made.id)
        world.send_many([(F, {"key": "a"}), (F, {"key": "new"})])
        world.run_until_idle()
        info = world.info()
        (letter,) = info["dead_letters"]
        assert letter["code"] == "era.event_not_accepted"
        assert "world cells upgrade" in letter["detail"]
        assert world.state(R, "new") == {"n": 2}  # a new cell: the new era's module
        assert world.state(R, "a") == {"n": 1}
        upgrade_cells(world, R, ["a"])
        world.send(F, {"key": "a"})
        world.run_until_idle()
        assert world.state(R, "a") == {"n": 2}  # upgraded: it takes the event now
    assert verify_world(path).ok


def test_a_cell_of_an_era_with_the_same_module_steps_as_a_current_one(tmp_path: Path) -> None:
    """Only a route changed: the old era's module is the current one, so an old cell takes the
    newly routed event without an upgrade."""
    path = tmp_path / "w"
    with World.create(path, _air(tmp_path / "v1", V1, S1)) as world:
        world.send(E, {"key": "a"})
        world.run_until_idle()
        made, _ = propose(world, _air(tmp_path / "v2", V1, S1, extra_route=True))
        apply(world, made.id)
        world.send(F, {"key": "a"})
        world.run_until_idle()
        assert world.info()["dead_letters"] == []
        assert world.info()["steps_total"] == 2
    assert verify_world(path).ok
