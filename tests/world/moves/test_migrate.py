"""``world migrate cells``: a v1 map-in-state reducer becomes a keyed one, one cell per entry.

The issue asks for 10,000 keys; the test uses 1,000 to stay quick (same code path). Until
``Kernel.apply`` dispatches ``cell.imported``/``world.migrated`` (the kernel/_core.py hook), the
``move_hook`` fixture and the crash child patch it."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from test_export_import import replays_exactly
from typer.testing import CliRunner

from air.errors import UnknownName
from cli import moves
from world import World
from world import _fileio as fileio
from world._directory import recover_swap
from world.errors import MigrationRefused, StorageError
from world.moves import migrate_cells

from worldkit import COUNTER, EVENT, ROOT, add

V1_AIR = ROOT / "manifests" / "counter_v1"
TESTS = Path(__file__).resolve().parents[2]
CHILD = """
import os, sys
sys.path[:0] = [sys.argv[3], sys.argv[4]]
from world import _fileio as fileio
from world.moves import migrate_cells

at, ops = int(sys.argv[2]), 0


def hook(op, path):
    global ops
    if ops == at:
        os._exit(137)
    ops += 1


with fileio.fault_hook(hook):
    migrate_cells(sys.argv[1], "demo/Counter@1", "key")
print("ops", ops)
"""


def v1_world(path: Path, keys: int) -> dict[str, object]:
    with World.create(path, V1_AIR) as world:
        world.send_many([(EVENT, add(f"k{i}", i)) for i in range(keys)])
        world.send_many([(EVENT, add("k1", 100))])
        world.run_until_idle()
        state = world.state(COUNTER)
    assert isinstance(state, dict)
    return state


def cells_of(path: Path) -> dict[object, object]:
    with World.open(path, readonly=True) as world:
        return {view.key: view.state for view in world.cells(COUNTER)}


def tree_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_v1_counter_world_of_1000_keys_migrates_to_1000_equal_cells(tmp_path: Path) -> None:
    path = tmp_path / "w"
    before = v1_world(path, 1000)
    plan = migrate_cells(path, COUNTER, "key")
    assert len(plan.cells) == 1000
    assert cells_of(path) == before
    with World.open(path) as world:
        assert world.air.modules[COUNTER].key_schema is not None
        world.send_many([(EVENT, add("k7", 1)), (EVENT, add("fresh", 2))])
        world.run_until_idle()
        assert world.state(COUNTER, "k7") == {"count": 8, "events": 2}
        assert world.state(COUNTER, "fresh") == {"count": 2, "events": 1}
        assert world.state(COUNTER, "k1") == {"count": 101, "events": 2}
    assert replays_exactly(path)
    with World.open(Path(plan.backup), readonly=True) as old:  # the old history is kept whole
        assert old.state(COUNTER) == before


def test_the_new_journal_starts_with_genesis_then_the_migration(tmp_path: Path) -> None:
    path = tmp_path / "w"
    v1_world(path, 3)
    migrate_cells(path, COUNTER, "key")
    with World.open(path, readonly=True) as world:
        kinds = [r.kind for r in world.journal.read(0)]
        migrated = next(iter(world.journal.read(1))).body
    assert kinds == ["world.created", "world.migrated"] + ["cell.imported"] * 3
    assert migrated["cells"] == 3
    assert migrated["key_field"] == "key"
    assert migrated["migrated_from"]["journal_seq"] > 0


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "w"
    v1_world(path, 10)
    listing, files = sorted(p.name for p in tmp_path.iterdir()), tree_bytes(path)
    plan = migrate_cells(path, COUNTER, "key", dry_run=True)
    assert plan.summary()["cells"] == 10
    assert plan.summary()["key_schema"] == "text"
    assert plan.routes == [EVENT]
    assert sorted(p.name for p in tmp_path.iterdir()) == listing
    assert tree_bytes(path) == files


def _record_state_air(folder: Path) -> Path:
    docs = json.loads((V1_AIR / "counter_v1.air.json").read_text())
    for doc in docs:
        if doc.get("$kind") == "defmodule":
            doc["abi"]["reducer"]["state"] = "demo/CounterState@1"
            doc["wasm"] = str(ROOT / "reducers" / "counter" / "counter.wasm")
    folder.mkdir()
    (folder / "a.air.json").write_text(json.dumps(docs))
    return folder


def test_a_state_that_is_not_a_map_is_refused(tmp_path: Path) -> None:
    World.create(tmp_path / "w", _record_state_air(tmp_path / "air")).close()
    files = tree_bytes(tmp_path / "w")
    with pytest.raises(MigrationRefused) as caught:
        migrate_cells(tmp_path / "w", COUNTER, "key")
    assert caught.value.reducer == COUNTER
    assert tree_bytes(tmp_path / "w") == files


def test_an_event_schema_without_the_key_field_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "w"
    v1_world(path, 3)
    with pytest.raises(MigrationRefused) as caught:
        migrate_cells(path, COUNTER, "order_id")
    assert caught.value.reducer == COUNTER
    with World.open(path, readonly=True) as world:
        assert world.air.modules[COUNTER].key_schema is None


def test_a_keyed_or_unknown_reducer_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "w"
    v1_world(path, 2)
    migrate_cells(path, COUNTER, "key")
    with pytest.raises(MigrationRefused):
        migrate_cells(path, COUNTER, "key")
    with pytest.raises(UnknownName):
        migrate_cells(path, "demo/Nope@1", "key")


def test_cli_migrate_cells_dry_run_and_refusal(tmp_path: Path) -> None:
    root = typer.Typer()
    root.add_typer(moves.app, name="migrate")
    path = tmp_path / "w"
    v1_world(path, 4)
    runner = CliRunner()
    args = ["migrate", "cells", str(path), COUNTER, "--key-field", "key"]
    result = runner.invoke(root, [*args, "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["cells"] == 4
    result = runner.invoke(root, ["migrate", "cells", str(path), COUNTER, "--key-field", "x"])
    assert result.exit_code == 1
    assert "MigrationRefused" in result.output
    result = runner.invoke(root, args)
    assert result.exit_code == 0, result.output
    assert len(cells_of(path)) == 4


def _child(world: Path, at: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(world), str(at), str(ROOT), str(TESTS)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_crash_at_any_point_leaves_the_old_or_the_new_world(tmp_path: Path) -> None:
    pristine = tmp_path / "pristine"
    before = v1_world(pristine, 20)
    trial = tmp_path / "trial" / "w"
    shutil.copytree(pristine, trial)
    done = _child(trial, -1)
    assert done.returncode == 0, done.stderr
    ops = int(done.stdout.split()[1])
    points = sorted({0, 1, ops // 4, ops // 2, 3 * ops // 4, *range(max(ops - 8, 0), ops)})
    outcomes = set()
    for at in points:
        case = tmp_path / f"at{at}"
        shutil.copytree(pristine, case / "w")
        crashed = _child(case / "w", at)
        assert crashed.returncode == 137, (at, crashed.stderr)
        recover_swap(case / "w")
        with World.open(case / "w", readonly=True) as world:
            keyed = world.air.modules[COUNTER].key_schema is not None
            if not keyed:
                assert world.state(COUNTER) == before
        if keyed:
            assert cells_of(case / "w") == before
        outcomes.add(keyed)
        assert not (case / ".w.migrating").exists()
        assert not (case / ".w.ready").exists()
    assert outcomes == {False, True}


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_an_io_error_at_any_point_leaves_the_old_or_the_new_world(
    tmp_path: Path, code: int
) -> None:
    pristine = tmp_path / "pristine"
    before = v1_world(pristine, 20)
    counted = tmp_path / "counted" / "w"
    shutil.copytree(pristine, counted)
    # The cell history index (cache/history) is derived: a failure there is a notice, not a
    # failed migration (tests/world/history/test_history.py), so its operations are not points here.
    ops: list[str] = []
    with fileio.fault_hook(lambda op, path: None if _derived(path) else ops.append(op)):
        migrate_cells(counted, COUNTER, "key")
    points = sorted({0, 1, len(ops) // 4, len(ops) // 2, 3 * len(ops) // 4, len(ops) - 1})
    for at in points:
        case = tmp_path / f"at{at}" / "w"
        shutil.copytree(pristine, case)
        seen = 0

        def hook(_op: str, path: str, at: int = at) -> None:
            nonlocal seen
            if _derived(path):
                return
            seen += 1
            if seen - 1 == at:
                raise OSError(code, os.strerror(code), path)

        with fileio.fault_hook(hook), pytest.raises(StorageError) as failed:
            migrate_cells(case, COUNTER, "key")
        assert failed.value.errno_name == errno.errorcode[code]
        recover_swap(case)
        with World.open(case, readonly=True) as world:
            keyed = world.air.modules[COUNTER].key_schema is not None
            if not keyed:
                assert world.state(COUNTER) == before
        if keyed:
            assert cells_of(case) == before
        assert not (case.parent / ".w.migrating").exists()
        assert not (case.parent / ".w.ready").exists()


def _derived(path: object) -> bool:
    return "/cache/history" in str(path)
