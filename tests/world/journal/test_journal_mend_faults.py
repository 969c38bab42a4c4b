"""The durable writes of a salvaging repair under faults: the damage mark a check leaves, the
backups, the segments put back (mended by their seal, re-derived) and the mark's removal. An
``EIO`` or ``ENOSPC`` at any of them, or a crash (the process killed there), loses nothing that
was intact: the next ``repair_world`` puts back the rest, and the world holds every record it
had before the damage. Power loss at each of them is ``tests/world/test_power_loss.py``'s
``salvage`` scenario."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from matrixkit import first_of_each_kind
from test_power_loss import Acked, damaged_sealed_world

from air.errors import WorldError
from world import _fileio as fileio
from world._repair import DAMAGE_MARK, check_world, repair_world
from world.journal import FileJournal

ROOT = Path(__file__).resolve().parents[3]
CRASH_STATUS = 137
CHILD = """
import os, sys
from pathlib import Path
from world import _fileio as fileio
from world._repair import check_world, repair_world
root, at, seen = Path(sys.argv[1]), int(sys.argv[2]), [0]
def hook(op, path):
    if seen[0] == at:
        os._exit(137)
    seen[0] += 1
with fileio.fault_hook(hook):
    check_world(root / "w", cache=True)
    repair_world(root / "w", root / "backup")
"""


def _records(world: Path) -> list[tuple[int, str, str, object]]:
    with FileJournal.open(world / "journal", readonly=True) as journal:
        return [(r.seq, r.subject, r.kind, r.body) for r in journal.read(0)]


def _salvage(root: Path) -> None:
    check_world(root / "w", cache=True)
    repair_world(root / "w", root / "backup")


@functools.cache
def repair_ops() -> tuple[str, ...]:
    """The durable operations of a check and a repair of the damaged world, in order."""
    ops: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        damaged_sealed_world(Path(tmp), Acked())
        with fileio.fault_hook(lambda op, _path: ops.append(op)):
            _salvage(Path(tmp))
    return tuple(ops)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "at" in metafunc.fixturenames:
        ops = repair_ops()
        marks = first_of_each_kind(ops)
        params = [
            pytest.param(i, id=f"{i}-{op}", marks=m)
            for i, (op, m) in enumerate(zip(ops, marks, strict=True))
        ]
        metafunc.parametrize("at", params)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[object]]:
    root = tmp_path_factory.mktemp("base")
    acked = Acked()
    damaged_sealed_world(root, acked)
    return root, acked.facts["records"]


def _copy(base: tuple[Path, list[object]], tmp_path: Path) -> Path:
    shutil.copytree(base[0], tmp_path / "r")
    return tmp_path / "r"


def _nothing_intact_lost(root: Path, records: list[object]) -> None:
    fixed = repair_world(root / "w", root / "backup-again")
    assert fixed.journal is None, "nothing was cut"
    assert _records(root / "w") == records
    assert check_world(root / "w").clean
    assert not (root / "w" / DAMAGE_MARK).exists()


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_an_io_error_in_a_repair_loses_nothing_that_was_intact(
    base: tuple[Path, list[object]], tmp_path: Path, at: int, code: int
) -> None:
    root = _copy(base, tmp_path)
    seen = [0]

    def hook(_op: str, path: str) -> None:
        seen[0] += 1
        if seen[0] - 1 == at:
            raise OSError(code, os.strerror(code), path)

    with fileio.fault_hook(hook), contextlib.suppress(WorldError):
        _salvage(root)  # the mark is written on a best effort (see DAMAGE_MARK): no error then
    _nothing_intact_lost(root, base[1])


def test_a_crash_in_a_repair_loses_nothing_that_was_intact(
    base: tuple[Path, list[object]], tmp_path: Path, at: int
) -> None:
    root = _copy(base, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), str(at)], cwd=ROOT, env=env, check=False
    )
    assert done.returncode == CRASH_STATUS
    _nothing_intact_lost(root, base[1])
