"""``world cells export|import``: self-describing cell files and trees, verified on import,
journaled as ``cell.imported`` so replay reproduces the world.

Until ``Kernel.apply`` dispatches ``cell.imported``/``world.migrated`` itself (the hook in
kernel/_core.py), the ``move_hook`` fixture patches it to do so."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cli.moves  # noqa: F401  (registers cells export/import)
from air import cbor
from cli.main import app
from world import World
from world import _fileio as fileio
from world.errors import CellFileRefused, StorageError
from world.history import verify_world
from world.journal._batch import BATCH_NAME
from world.moves import Trust, export_all, export_cell, import_path, read_cell_file

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT, add

TRUST = Trust(any_signer=True)
"""These tests import one world's exports into another; signers are tests/world/moves/test_signed_exports.py's."""


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source"
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add(k, n)) for k, n in [("a", 1), ("b", 2), ("c", 3), ("a", 4)]])
        world.run_until_idle()
    return path


def states(path: Path) -> dict[str, object]:
    with World.open(path, readonly=True) as world:
        return {view.key: view.state for view in world.cells(COUNTER)}


def replays_exactly(path: Path) -> bool:
    report = verify_world(path)
    return report.divergence is None and not report.mismatches and not report.damaged


def test_export_then_import_into_a_fresh_world_gives_the_same_cells(
    source: Path, tmp_path: Path
) -> None:
    with World.open(source, readonly=True) as world:
        export_cell(world, COUNTER, "a", tmp_path / "a.cbor")
        assert export_all(world, COUNTER, tmp_path / "tree") == 3
    with World.create(tmp_path / "one", COUNTER_AIR) as world:
        assert import_path(world, tmp_path / "a.cbor", TRUST) == 1
    with World.create(tmp_path / "all", COUNTER_AIR) as world:
        assert import_path(world, tmp_path / "tree", TRUST) == 3
    assert states(tmp_path / "one") == {"a": states(source)["a"]}
    assert states(tmp_path / "all") == states(source)
    assert replays_exactly(tmp_path / "one")
    assert replays_exactly(tmp_path / "all")


def test_imported_cells_keep_stepping_and_survive_reopen(source: Path, tmp_path: Path) -> None:
    with World.open(source, readonly=True) as world:
        export_all(world, COUNTER, tmp_path / "tree")
    target = tmp_path / "target"
    with World.create(target, COUNTER_AIR) as world:
        import_path(world, tmp_path / "tree", TRUST)
        world.send(EVENT, add("a", 10))
        world.run_until_idle()
    assert states(target)["a"] == {"count": 15, "events": 3}
    assert replays_exactly(target)


def test_the_exported_file_is_self_describing(source: Path, tmp_path: Path) -> None:
    with World.open(source, readonly=True) as world:
        export_cell(world, COUNTER, "b", tmp_path / "b.cbor")
        seq_last = world.journal.seq_next - 1
        manifest = cbor.hash_to_raw(world.air.manifest_hash)
        module = bytes.fromhex(world.kernel.module_hash(COUNTER))
    cell = read_cell_file(tmp_path / "b.cbor")
    assert (cell.reducer, cell.module_hash, cell.journal_seq) == (COUNTER, module, seq_last)
    assert cell.manifest_hash == manifest
    assert cbor.loads(cell.key_cbor) == "b"
    assert cbor.loads(cell.state_cbor) == {"count": 2, "events": 1}


def _exported(source: Path, out: Path) -> bytes:
    with World.open(source, readonly=True) as world:
        export_cell(world, COUNTER, "a", out)
    return out.read_bytes()


def _refused(target: Path, path: Path) -> CellFileRefused:
    with World.open(target) as world:
        before = world.journal.seq_next
        with pytest.raises(CellFileRefused) as caught:
            import_path(world, path, TRUST)
        assert world.journal.seq_next == before  # nothing journaled
    return caught.value


@pytest.mark.parametrize("where", [0, 5, 40, -3, -1])
def test_an_altered_byte_is_refused(source: Path, tmp_path: Path, where: int) -> None:
    data = bytearray(_exported(source, tmp_path / "a.cbor"))
    data[where] ^= 0x01
    (tmp_path / "bad.cbor").write_bytes(bytes(data))
    World.create(tmp_path / "t", COUNTER_AIR).close()
    assert _refused(tmp_path / "t", tmp_path / "bad.cbor").path == str(tmp_path / "bad.cbor")


@pytest.mark.parametrize("keep", [0, 1, 10, -1])
def test_a_truncated_file_is_refused(source: Path, tmp_path: Path, keep: int) -> None:
    data = _exported(source, tmp_path / "a.cbor")
    (tmp_path / "cut.cbor").write_bytes(data[:keep])
    World.create(tmp_path / "t", COUNTER_AIR).close()
    _refused(tmp_path / "t", tmp_path / "cut.cbor")


def _reseal(data: bytes, **changes: object) -> bytes:
    """``data`` changed, with its checksum recomputed: unsigned (format 1), as only the
    exporting world can sign."""
    obj = cbor.loads(data)
    obj.update(changes, format=1)
    obj.pop("signer")
    obj.pop("signature")
    fields = {k: v for k, v in obj.items() if k != "checksum"}
    return cbor.dumps({**fields, "checksum": cbor.digest(cbor.dumps(fields))})


def test_a_cell_of_another_module_is_refused(source: Path, tmp_path: Path) -> None:
    data = _exported(source, tmp_path / "a.cbor")
    (tmp_path / "other.cbor").write_bytes(_reseal(data, module_hash=b"\x07" * 32))
    World.create(tmp_path / "t", COUNTER_AIR).close()
    assert "module" in _refused(tmp_path / "t", tmp_path / "other.cbor").reason


def test_a_state_that_does_not_fit_the_schema_is_refused(source: Path, tmp_path: Path) -> None:
    data = _exported(source, tmp_path / "a.cbor")
    state = cbor.dumps({"count": "many", "events": 1})
    altered = _reseal(data, state=state, state_hash=cbor.digest(state))
    (tmp_path / "schema.cbor").write_bytes(altered)
    World.create(tmp_path / "t", COUNTER_AIR).close()
    _refused(tmp_path / "t", tmp_path / "schema.cbor")


def test_a_keyed_cell_into_a_non_keyed_reducer_is_refused(source: Path, tmp_path: Path) -> None:
    _exported(source, tmp_path / "a.cbor")
    World.create(tmp_path / "v1", ROOT / "manifests" / "counter_v1").close()
    _refused(tmp_path / "v1", tmp_path / "a.cbor")


def test_a_tree_whose_index_lies_is_refused(source: Path, tmp_path: Path) -> None:
    with World.open(source, readonly=True) as world:
        export_all(world, COUNTER, tmp_path / "tree")
    cell = next((tmp_path / "tree").rglob("cells/*.cbor"))
    cell.unlink()
    World.create(tmp_path / "t", COUNTER_AIR).close()
    _refused(tmp_path / "t", tmp_path / "tree")


def test_cli_export_and_import_round_trip(source: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "tree"
    result = runner.invoke(app, ["cells", "export", str(source), COUNTER, "--all", "-o", str(out)])
    assert result.exit_code == 0, result.output
    one = tmp_path / "new" / "folder" / "c.cbor"  # its folder is made, as --all makes its tree
    result = runner.invoke(app, ["cells", "export", str(source), COUNTER, "c", "-o", str(one)])
    assert result.exit_code == 0, result.output
    World.create(tmp_path / "t", COUNTER_AIR).close()
    result = runner.invoke(
        app, ["cells", "import", str(tmp_path / "t"), str(out), "--json", "--trust"]
    )
    assert result.exit_code == 0, result.output
    assert states(tmp_path / "t") == states(source)
    one.write_bytes(one.read_bytes()[:-2])
    result = runner.invoke(app, ["cells", "import", str(tmp_path / "t"), str(one)])
    assert result.exit_code == 1
    assert "CellFileRefused" in result.output
    assert "Traceback" not in result.output


def _failing_at(at: int, code: int) -> Callable[[str, str], None]:
    seen = 0

    def hook(_op: str, path: str) -> None:
        nonlocal seen
        seen += 1
        if seen - 1 == at:
            raise OSError(code, os.strerror(code), path)

    return hook


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_an_io_error_during_export_leaves_only_whole_verified_files(
    source: Path, tmp_path: Path, code: int
) -> None:
    ops: list[str] = []
    with World.open(source, readonly=True) as world:
        with fileio.fault_hook(lambda op, _p: ops.append(op)):
            export_all(world, COUNTER, tmp_path / "counted")
        for at in range(len(ops)):
            out = tmp_path / f"at{at}"
            with fileio.fault_hook(_failing_at(at, code)), pytest.raises(StorageError):
                export_all(world, COUNTER, out)
            for path in out.rglob("*.cbor"):
                if path.name != "index.cbor":
                    read_cell_file(path)  # whole and verified, or not there at all


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_an_io_error_during_import_imports_all_or_nothing(
    source: Path, tmp_path: Path, code: int
) -> None:
    with World.open(source, readonly=True) as world:
        export_all(world, COUNTER, tmp_path / "tree")
    ops: list[tuple[str, str]] = []
    with (
        World.create(tmp_path / "counted", COUNTER_AIR) as world,
        fileio.fault_hook(lambda op, path: ops.append((op, path))),
    ):
        import_path(world, tmp_path / "tree", TRUST)
    # The last step removes the batch marker of a batch already durable: its failure is not
    # the import's (the marker of a whole batch is harmless), so it imports everything.
    clears_marker = [op == "unlink" and path.endswith(BATCH_NAME) for op, path in ops]
    assert clears_marker[-1]
    for at in range(len(ops)):
        target = tmp_path / f"at{at}"
        World.create(target, COUNTER_AIR).close()
        with World.open(target) as world, fileio.fault_hook(_failing_at(at, code)):
            if clears_marker[at]:
                import_path(world, tmp_path / "tree", TRUST)
            else:
                with pytest.raises(StorageError):
                    import_path(world, tmp_path / "tree", TRUST)
        if clears_marker[at]:
            assert states(target) == states(source)
        else:
            assert states(target) in ({}, states(source))
        assert replays_exactly(target)
