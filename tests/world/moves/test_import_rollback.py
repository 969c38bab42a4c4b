"""No silent rollback: ``cells import`` refuses a file that would replace a cell whose state
the file does not know (the cell stepped after the export, or it is another world's file over a
cell with a state of its own) unless ``--force``, naming both sides; a refusal journals nothing.

Worlds: ``a`` (the importer) and ``b`` (another world whose cell ``a`` has the same state as
``a``'s, and a cell ``z`` that ``a`` lacks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from world import World
from world.errors import CellFileRefused
from world.moves import Trust, export_all, export_cell, import_path, read_cell_file

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

WORLD_BIN = Path(sys.executable).with_name("world")
ANY = Trust.of(any_signer=True)


def _make(path: Path, events: list[tuple[str, int]]) -> Path:
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add(k, n)) for k, n in events])
        world.run_until_idle()
    return path


def _step(path: Path, key: str, n: int) -> None:
    with World.open(path) as world:
        world.send(EVENT, add(key, n))
        world.run_until_idle()


def _export(path: Path, key: str, out: Path) -> Path:
    with World.open(path, readonly=True) as world:
        export_cell(world, COUNTER, key, out, force=True)
    return out


def _counts(path: Path) -> dict[str, Any]:
    with World.open(path, readonly=True) as world:
        return {view.key: view.state["count"] for view in world.cells(COUNTER)}


def _height(path: Path) -> int:
    with World.open(path, readonly=True) as world:
        return world.journal.seq_next


@pytest.fixture
def a(tmp_path: Path) -> Path:
    return _make(tmp_path / "a", [("a", 1), ("b", 2), ("a", 4)])


@pytest.fixture
def b(tmp_path: Path) -> Path:
    return _make(tmp_path / "b", [("a", 1), ("a", 4), ("z", 9)])


def _refused(world_dir: Path, file: Path, trust: Trust | None = None) -> str:
    """The refusal's text; the world's cells and journal unchanged by it."""
    counts, height = _counts(world_dir), _height(world_dir)
    with World.open(world_dir) as world, pytest.raises(CellFileRefused) as caught:
        import_path(world, file, trust)
    assert (_counts(world_dir), _height(world_dir)) == (counts, height)
    return str(caught.value)


def test_an_older_export_of_a_cell_that_stepped_since_is_refused_naming_both(
    a: Path, tmp_path: Path
) -> None:
    old = _export(a, "a", tmp_path / "old.cbor")
    exported_at = read_cell_file(old).journal_seq
    _step(a, "a", 1)
    with World.open(a, readonly=True) as world:
        last_active = world.kernel.cell_of(COUNTER, read_cell_file(old).key_cbor)[0].last_active  # type: ignore[index]
    text = _refused(a, old)
    assert "would roll demo/Counter@1 key 'a' back" in text
    assert f"last active at seq {last_active}" in text
    assert f"exported at seq {exported_at}" in text
    assert "--force" in text
    assert _counts(a)["a"] == 6
    with World.open(a) as world:
        assert import_path(world, old, force=True) == 1
    assert _counts(a)["a"] == 5  # rolled back, because it was asked for


def test_an_export_of_a_cell_that_has_not_stepped_since_is_taken(a: Path, tmp_path: Path) -> None:
    old = _export(a, "a", tmp_path / "old.cbor")
    _step(a, "b", 1)  # another cell steps: "a" is as exported
    with World.open(a) as world:
        assert import_path(world, old) == 1
    assert _counts(a) == {"a": 5, "b": 3}


def test_a_cell_the_world_lacks_is_taken_from_any_trusted_world(
    a: Path, b: Path, tmp_path: Path
) -> None:
    theirs = _export(b, "z", tmp_path / "z.cbor")
    with World.open(a) as world:
        assert import_path(world, theirs, ANY) == 1
    assert _counts(a)["z"] == 9


def test_another_worlds_file_with_the_same_state_is_taken(a: Path, b: Path, tmp_path: Path) -> None:
    theirs = _export(b, "a", tmp_path / "a_from_b.cbor")  # count 5 in both
    with World.open(a) as world:
        assert import_path(world, theirs, ANY) == 1


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_another_lineage_over_a_cell_of_its_own_is_refused(
    a: Path, b: Path, tmp_path: Path, signed: bool
) -> None:
    _step(b, "a", 10)  # b's "a" now differs from a's
    theirs = _export(b, "a", tmp_path / "a_from_b.cbor")
    if not signed:
        unsigned = tmp_path / "unsigned.cbor"
        unsigned.write_bytes(read_cell_file(theirs).to_bytes())
        theirs = unsigned
    text = _refused(a, theirs, ANY)
    assert "which has a state of its own" in text
    assert "another lineage" in text
    assert ("an unsigned file" in text) == (not signed)
    with World.open(a) as world:
        assert import_path(world, theirs, ANY, force=True) == 1
    assert _counts(a)["a"] == 15


def test_one_rollback_in_a_tree_refuses_the_whole_tree(a: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    with World.open(a, readonly=True) as world:
        export_all(world, COUNTER, tree)
    _step(a, "b", 1)
    text = _refused(a, tree)
    assert "key 'b' back" in text
    assert _counts(a) == {"a": 5, "b": 3}


def test_the_cli_refuses_with_exit_1_and_takes_force(a: Path, tmp_path: Path) -> None:
    old = _export(a, "a", tmp_path / "old.cbor")
    _step(a, "a", 1)
    done = subprocess.run(
        [str(WORLD_BIN), "cells", "import", str(a), str(old)], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "would roll demo/Counter@1 key 'a' back" in done.stderr
    assert "Traceback" not in done.stderr
    done = subprocess.run(
        [str(WORLD_BIN), "cells", "import", str(a), str(old), "--force"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert _counts(a)["a"] == 5
