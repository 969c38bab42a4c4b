"""Cells belong to their reducer, not to their wasm's hash (issue 21, item 1).

The store used to key each reducer's cells by its module hash: two reducers declared with the
same wasm shared every cell (each stepped on the other's state), and any change to a reducer's
code would have orphaned its cells. Now each reducer's cells live in its own space
(``kernel.cells.cell_space``). A world made before keeps its cells under module hashes: it
opens, is converted (its derived store rebuilt from the journal, crash-safe as any rebuild), and
replays; ``tests/fixtures/world_before_cell_spaces.tar.gz`` is such a world, written by the
code of the commit before this change.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from kernel.cells import cell_space
from world import World
from world.cellstore import FileCellStore

from worldkit import COUNTER, COUNTER_AIR, EVENT, add, extract_fixture

ROOT = Path(__file__).resolve().parents[3]
OLD_WORLD = ROOT / "tests" / "fixtures" / "world_before_cell_spaces.tar.gz"
TALLY = "demo/Tally@1"
runner = CliRunner()


def _twins(folder: Path) -> Path:
    """The counter AIR with a second reducer, ``demo/Tally@1``, of the very same wasm, routed
    the same events."""
    folder.mkdir()
    for source in COUNTER_AIR.iterdir():
        shutil.copy(source, folder / source.name)
    docs = json.loads((folder / "counter.air.json").read_text())
    module, manifest = docs
    module["wasm"] = str((COUNTER_AIR / module["wasm"]).resolve())
    twin = {**module, "name": TALLY}
    route = manifest["routing"]["events"][0]
    manifest["routing"]["events"].append({**route, "reducer": TALLY})
    (folder / "counter.air.json").write_text(json.dumps([module, twin, manifest]))
    return folder


def test_two_reducers_of_the_same_wasm_keep_separate_cells(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", _twins(tmp_path / "air")) as world:
        assert world.kernel.module_hash(COUNTER) == world.kernel.module_hash(TALLY)
        assert world.kernel.cell_space(COUNTER) != world.kernel.cell_space(TALLY)
        world.send_many([(EVENT, add("a", 3)), (EVENT, add("a", 4))])
        world.run_until_idle()
        # each saw its own two events, not the other's as well (which made 14 before)
        assert world.state(COUNTER, "a") == {"count": 7, "events": 2}
        assert world.state(TALLY, "a") == {"count": 7, "events": 2}
        world.send(EVENT, {"key": "a", "op": "Clear"})
        world.run_until_idle()
        assert world.cell_count(COUNTER) == world.cell_count(TALLY)
    with World.open(tmp_path / "w", readonly=True) as world:
        assert world.state(TALLY, "a") == world.state(COUNTER, "a")
    verified = runner.invoke(app, ["replay", str(tmp_path / "w"), "--verify"])
    assert verified.exit_code == 0, verified.output


def test_the_space_is_the_reducers_name_not_its_code() -> None:
    assert cell_space(COUNTER) == cell_space(COUNTER)
    assert cell_space(COUNTER) != cell_space(TALLY)
    assert len(cell_space(COUNTER)) == 64
    assert cell_space(COUNTER) == cell_space(COUNTER).lower()


def _old_world(tmp_path: Path) -> Path:
    extract_fixture(OLD_WORLD, tmp_path)
    return tmp_path / "w"


def test_a_world_made_before_cell_spaces_opens_converted_and_replays(tmp_path: Path) -> None:
    path = _old_world(tmp_path)
    store = FileCellStore(path, readonly=True)
    with World.open(path, readonly=True) as peek:
        module = peek.kernel.module_hash(COUNTER)
    assert store.checkpoint_modules() == [module]  # the old layout: a module hash
    with World.open(path) as world:
        assert any("converted" in notice for notice in world.notices), world.notices
        assert world.state(COUNTER, "a") == {"count": 7, "events": 2}
        assert world.state(COUNTER, "b") == {"count": 2, "events": 1}
        assert world.cell_count(COUNTER) == 3
        world.send(EVENT, add("b", 1))
        world.run_until_idle()
        world.snapshot()
    assert FileCellStore(path, readonly=True).checkpoint_modules() == [cell_space(COUNTER)]
    with World.open(path) as world:
        assert world.notices == []  # converted once, for good
        assert world.state(COUNTER, "b") == {"count": 3, "events": 2}
    verified = runner.invoke(app, ["replay", str(path), "--verify"])
    assert verified.exit_code == 0, verified.output
    shown = runner.invoke(app, ["cells", "ls", str(path), COUNTER, "--json"])
    assert shown.exit_code == 0, shown.output
    assert len(json.loads(shown.stdout)["cells"]) == 3


def test_an_old_world_read_without_a_writer_shows_its_cells(tmp_path: Path) -> None:
    """A reader converts nothing (it writes nothing) but reads the right cells all the same."""
    path = _old_world(tmp_path)
    before = sorted(p.name for p in (path / "state").rglob("*"))
    with World.open(path, readonly=True) as world:
        assert world.state(COUNTER, "c") == {"count": 2, "events": 1}
    assert sorted(p.name for p in (path / "state").rglob("*")) == before


def test_an_export_tree_still_names_the_module_and_imports_back(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", _twins(tmp_path / "air")) as world:
        world.send(EVENT, add("k", 5))
        world.run_until_idle()
        module = world.kernel.module_hash(TALLY)
    out = tmp_path / "tree"
    exported = runner.invoke(
        app, ["cells", "export", str(tmp_path / "w"), TALLY, "--all", "-o", str(out)]
    )
    assert exported.exit_code == 0, exported.output
    assert (out / "state" / "reducers" / module / "cells").is_dir()
    World.create(tmp_path / "v", _twins(tmp_path / "air2")).close()
    imported = runner.invoke(app, ["cells", "import", str(tmp_path / "v"), str(out), "--trust"])
    assert imported.exit_code == 0, imported.output
    with World.open(tmp_path / "v", readonly=True) as world:
        assert world.state(TALLY, "k") == {"count": 5, "events": 1}
        assert world.cell_count(COUNTER) == 0  # the same wasm, another reducer: untouched
