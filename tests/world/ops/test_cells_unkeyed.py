"""``cells.show`` of an unkeyed reducer: its one cell, with ``key`` null (the era it is pinned
to is what a user asks after an upgrade), now or ``at`` a position; a key given is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from air.errors import KeyMismatch
from world import World
from world.ops import open as open_world
from world.sdk import example_path

REDUCER = "demo/Counter@1"


def test_an_unkeyed_reducer_shows_its_one_cell_with_its_era(tmp_path: Path) -> None:
    path = tmp_path / "w"
    World.create(path, example_path("counter_v1")).close()
    with open_world(path) as handle:
        empty = handle.cell(REDUCER, None)
        assert (empty.state, empty.era) == (None, None)
        handle.send("demo/CounterEvent@1", {"key": "alice", "op": {"$tag": "Add", "$value": 2}})
        handle.world.run_until_idle()
        shown = handle.cell(REDUCER, None)
        assert shown.state == handle.state(REDUCER)
        assert shown.state is not None
        assert shown.era == shown.current_era == handle.info().manifest_hash
        assert shown.state_cbor is not None
        with pytest.raises(KeyMismatch, match="is not keyed: give no key"):
            handle.cell(REDUCER, "alice")
    with open_world(path, readonly=True) as reader:
        before, after = reader.cell(REDUCER, None, at=1), reader.cell(REDUCER, None, at=2)
    assert before.state is None
    assert (after.state, after.era) == (shown.state, shown.era)
