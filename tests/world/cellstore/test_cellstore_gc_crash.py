"""Collection under kill -9: a world SIGKILLed at every durable operation of a checkpoint
(``cellstore_crash_child``) opens at the old or the new checkpoint, holds exactly the files of
a clean run that ended there (nothing leaked, nothing collected too early), replays, and its
next checkpoint collects as usual."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from cellstore_crash_child import INLINE_BYTES_MAX, base_events, change_events
from cellstore_kit import cas_objects, store_files
from serverkit import LineServer

from air import cbor
from world import World
from world.cellstore import FileCellStore
from world.history import verify_world

from worldkit import COUNTER, COUNTER_AIR

HERE = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> Iterator[LineServer]:
    started = LineServer(str(HERE / "cellstore_crash_child.py"))
    yield started
    started.close()


def expected_cells() -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {}
    for _schema, event in base_events() + change_events():
        key, op = str(event["key"]), event["op"]
        if op == "Clear":
            totals.pop(key, None)
            continue
        assert isinstance(op, dict)
        cell = totals.setdefault(key, {"count": 0, "events": 0})
        cell["count"] += op["$value"]
        cell["events"] += 1
    return totals


def snapshot_file(world: Path) -> str:
    meta = FileCellStore(world, readonly=True).last_checkpoint()
    raw = cbor.loads(meta)["snapshot"].hex()
    return f"cas/{raw[:2]}/{raw[2:]}"


def test_a_kill_at_every_durable_operation_of_a_checkpoint_leaves_a_whole_world(
    tmp_path: Path, server: LineServer
) -> None:
    base = tmp_path / "base"
    with World.create(base, COUNTER_AIR) as world:
        world.send_many(base_events())
        world.run_until_idle()
    old_files = store_files(base)
    reference = tmp_path / "reference"
    shutil.copytree(base, reference)
    assert server.ask(f"-1 {reference} {tmp_path / 'ops'}") == "exit 0"
    ops = int((tmp_path / "ops").read_text().split()[1])
    new_files = store_files(reference)
    new_snapshot = snapshot_file(reference)
    orphan = bytes.fromhex(new_snapshot.removeprefix("cas/").replace("/", ""))
    air = {bytes.fromhex(p.parent.name + p.name) for p in cas_objects(base)}
    outcomes = set()
    for k in range(ops):
        case = tmp_path / f"kill-{k}"
        shutil.copytree(base, case)
        assert server.ask(f"{k} {case} {tmp_path / 'ops'}") == "killed", k
        with World.open(case) as world:
            files = store_files(case)
            outcome = "new" if files.keys() >= new_files.keys() else "old"
            if outcome == "old":
                files.pop(new_snapshot, None)  # put before the flush planned anything
            assert files == (new_files if outcome == "new" else old_files), k
            outcomes.add(outcome)
            world.run_until_idle()
            assert {v.key: v.state for v in world.cells(COUNTER)} == expected_cells()
            world.snapshot()
            live = FileCellStore(case, readonly=True).reachable_objects()
            names = {bytes.fromhex(p.parent.name + p.name) for p in cas_objects(case)}
            assert names - air - live <= {orphan}, k
        assert verify_world(case).ok, k
    assert outcomes == {"old", "new"}


def test_the_child_workload_moves_states_out_of_line_and_shares_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the kills above cut through: out-of-line states, one of them held by two cells."""
    defaults = FileCellStore.__init__.__kwdefaults__
    assert defaults is not None
    monkeypatch.setitem(defaults, "cell_inline_bytes_max", INLINE_BYTES_MAX)
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        world.send_many(base_events() + change_events())
        world.run_until_idle()
        world.snapshot()
        store = FileCellStore(tmp_path / "w", readonly=True)
        module = world.kernel.cell_space(COUNTER)
        found = {k: store.get(module, cbor.digest(world.key_cbor(COUNTER, k))) for k in "abci"}
        hashes = {k: cell[0].state_hash for k, cell in found.items() if cell is not None}
        assert hashes["a"] == hashes["b"]
        assert store._cp.shared == {hashes["a"]: 2}
        assert {hashes["c"], hashes["i"], hashes["a"]} <= store.reachable_objects()
