"""Upgrades in the crash matrix (issue 21): kill -9, ``EIO`` and ``ENOSPC`` at every durable write
of propose, apply and a batched cell upgrade lose nothing acknowledged and leave the world in
one era or the other, never a mix. (Power loss: ``test_power_loss``, scenarios ``proposal``,
``apply`` and ``cell_upgrade``.)

How, as ``test_world_faults`` does it. ``upgrade_fault_child.SCRIPT`` (open; propose
counter_v2, a state schema change; apply it; send two events, one to an old cell, one making a
cell in the new era, and run them; upgrade the cells in 4 batches of 2, one batch with a
failure line; snapshot; close) is played once under a counting ``world._fileio`` hook: that
gives its durable operations, each labelled with its action, and the journal a whole run leaves
(the *reference*). Then:

* a crash (a process forked by ``upgrade_fault_child.py --serve`` ``os._exit(137)``s there) at
  every operation but the proposal's, and of the proposal at the first of each shape
  (``_shape``) and at every one from its last CAS object on: its 26 CAS puts repeat one code
  path, and a crash anywhere among them leaves only objects no record names;
* ``EIO`` at every operation of the apply, the send, the run and the upgrade, at the first of
  each shape of the proposal's, and at the first of each kind of the open's and the
  snapshot's (a failed checkpoint is a notice; ``test_world_faults`` fails every write of
  one); ``ENOSPC`` at the same, but for the operations that allocate nothing;

and the world is opened again (``World.open``, with no hook; no repair: unlike
``test_world_faults``, none is ever needed here) and checked (``check_outcome``):

* its journal is a prefix of the reference (so no batch is half there: a record is a batch)
  and holds every record committed when the last acknowledgement was made;
* ``verify_world`` agrees (replay from genesis gives the same records);
* one era (``one_era``): the current manifest is counter_v2's if and only if ``gov.applied``
  is journaled; every cell is wholly in one era with the state its journal says: in the new
  one, upgraded, if and only if a journaled ``cell.upgraded`` names it (or born there after
  the apply), else in the old one with its old-schema state;
* running the rest again on the same handle (propose if no proposal is journaled, apply if
  the world is not in its era, run what is queued, then ``upgrade_cells`` of what is left)
  finishes the job: one proposal, one apply, every cell but ``big`` in the new era, each
  upgraded once.

Counts (fixed by the script, never by time): 185 operations; 67 crash points, 36 ``EIO`` and
32 ``ENOSPC`` points. The checks are shared with the power-loss scenarios
(``upgrade_fault_child.one_era``, ``finish``).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from matrixkit import first_of_each_kind
from serverkit import LineServer
from upgrade_fault_child import (
    CELLS,
    SCRIPT,
    Record,
    finish,
    make_world,
    one_era,
    records_of,
    run_script,
    upgraded_keys,
)
from world_fault_child import CRASH_STATUS, NO_FLUSH, no_flush

from world import World
from world import _fileio as fileio
from world.errors import JournalWriteFailed, StorageError
from world.history import verify_world

HERE = Path(__file__).resolve().parents[2]
CHILD = HERE / "upgrade_fault_child.py"


@pytest.fixture(autouse=True)
def _no_disk_flushes(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in ``test_world_faults``: these tests fail calls and kill processes, they do not cut
    power, so a real flush changes nothing they can observe (the fault hook still sees it).
    ``fileio._sync_data`` too: it holds ``os.fdatasync`` as imported (the journal's flush)."""
    for name in NO_FLUSH:
        monkeypatch.setattr(os, name, no_flush)
    monkeypatch.setattr(fileio, "_sync_data", no_flush)


# --- the script's durable operations, and the journal of a whole run --------------------------


@dataclass(frozen=True)
class Op:
    index: int
    action: int
    op: str
    path: str  # relative to the world's folder

    @property
    def action_name(self) -> str:
        return SCRIPT[self.action]

    @property
    def id(self) -> str:
        return f"{self.index}-{self.action_name}-{self.op}"


@dataclass(frozen=True)
class Reference:
    ops: tuple[Op, ...]
    records: tuple[Record, ...]
    old: str  # the manifest hashes before and after the apply
    new: str
    old_wasm: str  # the hash of the module the upgraded cells came from


@functools.cache
def reference() -> Reference:
    """Play the script once under a counting hook (at collection: the ids name operations)."""
    traced: list[tuple[str, str]] = []
    ends: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w"
        make_world(path)
        with World.open(path, readonly=True) as world:
            old = world.air.manifest_hash
            old_wasm = world.air.wasm_hashes["demo/Counter@1"]
        with fileio.fault_hook(lambda op, p: traced.append((op, p))):
            failed = run_script(
                path, lambda _i, _w, done: ends.append(len(traced)) if done is None else None
            )
        assert failed is None, failed
        with World.open(path, readonly=True) as world:
            records, new = tuple(records_of(world)), world.air.manifest_hash
    ops = []
    for index, (op, p) in enumerate(traced):
        action = next(a for a, end in enumerate(ends) if index < end)
        ops.append(Op(index, action, op, os.path.relpath(p, path)))
    return Reference(tuple(ops), records, old, new, old_wasm)


def _shape(path: str) -> str:
    """A path with its hashes, fan-out folders and random temp suffixes taken out: the CAS
    puts of 26 objects have one shape."""
    path = re.sub(r"\.[A-Za-z0-9_]{8}\.tmp$", ".R.tmp", path)
    path = re.sub(r"[0-9a-f]{16,}", "H", path)
    return re.sub(r"(^|/)[0-9a-f]{2}(?=/|$)", r"\1F", path)


def _first_of_each_shape(ops: Iterable[Op]) -> set[int]:
    """The first operation of each (action, operation, path shape): each code path once."""
    first: dict[tuple[int, str, str], int] = {}
    for op in ops:
        first.setdefault((op.action, op.op, _shape(op.path)), op.index)
    return set(first.values())


def crash_points(ops: tuple[Op, ...]) -> list[Op]:
    """Every operation of the open, the apply, the send, the run, the upgrade and the snapshot;
    of the proposal, the first of each shape and every one from its last CAS object on (its 26 puts are one code path; a
    crash anywhere among them leaves only unnamed objects, which the power-loss ``proposal``
    scenario cuts too)."""
    propose = [op for op in ops if op.action_name == "propose"]
    last_object = max(op.index for op in propose if op.op == "replace")
    last_object = max(op.index for op in propose if op.op == "replace" and op.index < last_object)
    keep = _first_of_each_shape(propose) | {op.index for op in propose if op.index > last_object}
    return [op for op in ops if op.action_name != "propose" or op.index in keep]


def error_points(ops: tuple[Op, ...]) -> list[Op]:
    """Every operation of the apply, the send, the run and the upgrade; of the proposal, the
    first of each shape; of
    the open and the snapshot (a checkpoint: a failure there is a notice, and every write of
    one is failed by ``test_world_faults``), the first of each operation."""
    shapes = _first_of_each_shape(ops)
    first: dict[tuple[int, str], int] = {}
    for op in ops:
        first.setdefault((op.action, op.op), op.index)
    return [
        op
        for op in ops
        if op.action_name in ("apply", "send", "run", "upgrade")
        or (op.action_name == "propose" and op.index in shapes)
        or op.index in first.values()
    ]


NO_SPACE_NEEDED = ("unlink", "fsync_dir")
"""Operations that allocate nothing, so never fail with ``ENOSPC`` (``EIO`` only)."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    ops = reference().ops
    if "crash" in metafunc.fixturenames:
        crashes = crash_points(ops)
        marks = first_of_each_kind((op.action, op.op) for op in crashes)
        metafunc.parametrize(
            "crash",
            [pytest.param(op, id=op.id, marks=m) for op, m in zip(crashes, marks, strict=True)],
        )
    if "error" in metafunc.fixturenames:
        errors = [
            (op, code)
            for code in (errno.EIO, errno.ENOSPC)
            for op in error_points(ops)
            if code == errno.EIO or op.op not in NO_SPACE_NEEDED
        ]
        marks = first_of_each_kind((op.action, op.op, code) for op, code in errors)
        params = [
            pytest.param(op, code, id=f"{op.id}-{errno.errorcode[code]}", marks=m)
            for (op, code), m in zip(errors, marks, strict=True)
        ]
        metafunc.parametrize(("error", "code"), params)


@pytest.fixture(scope="module")
def base_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("upgrade_base") / "w"
    make_world(path)
    return path


# --- checking a world after the fault ---------------------------------------------------------


def check_outcome(path: Path, acked_seq: int, acked: list[str]) -> None:
    """The checks of the module docstring; ``acked_seq``: the journal's committed ``seq_next``
    when the last acknowledgement was made; ``acked``: the actions that returned."""
    ref = reference()
    with World.open(path) as world:  # no repair needed: a kill -9 tears no record
        records = records_of(world)
        assert records == list(ref.records[: len(records)]), "not a prefix of a whole run"
        assert len(records) >= acked_seq, "an acknowledged record was lost"
        if "apply" in acked:
            assert any(r[2] == "gov.applied" for r in records)
        if "upgrade" in acked:
            assert sorted(upgraded_keys(records)) == sorted(k for k in CELLS if k != "big")
        one_era(world, records, ref.old, ref.new, ref.old_wasm)
        assert verify_world(path).ok  # a reader beside the writer: replay from genesis agrees
        finish(world)
        records = records_of(world)
        kinds = [r[2] for r in records]
        assert (kinds.count("gov.proposed"), kinds.count("gov.applied")) == (1, 1)
        one_era(world, records, ref.old, ref.new, ref.old_wasm)


# --- kill -9 at every durable operation -------------------------------------------------------


@pytest.fixture(scope="module")
def crash_server() -> Iterator[LineServer]:
    server = LineServer(str(CHILD), "--serve")
    yield server
    server.close()


def _acks(lines: list[str]) -> tuple[list[str], int]:
    """The actions acknowledged (``batch`` for each upgrade batch) and the last ack's seq."""
    acks = [line.split() for line in lines if line.startswith("ack ")]
    names = [SCRIPT[int(label)] if label != "batch" else label for _ack, label, _seq in acks]
    return names, max((int(seq) for *_rest, seq in acks), default=0)


def test_the_script_runs_whole_in_the_server_with_the_same_operations(
    tmp_path: Path, base_world: Path, crash_server: LineServer
) -> None:
    shutil.copytree(base_world, tmp_path / "w")
    status = int(crash_server.ask(f"-1 {tmp_path / 'w'} {tmp_path / 'acks'}"))
    lines = (tmp_path / "acks").read_text().splitlines()
    names, seq = _acks(lines)
    assert (status, lines[-1]) == (0, f"ops {len(reference().ops)}")
    assert names == [*SCRIPT[:5], *["batch"] * 4, *SCRIPT[5:]]
    assert seq == len(reference().records)
    check_outcome(tmp_path / "w", seq, list(SCRIPT))


def test_a_crash_at_every_durable_operation_leaves_one_era_and_loses_nothing_acknowledged(
    tmp_path: Path, base_world: Path, crash: Op, crash_server: LineServer
) -> None:
    shutil.copytree(base_world, tmp_path / "w")
    status = int(crash_server.ask(f"{crash.index} {tmp_path / 'w'} {tmp_path / 'acks'}"))
    assert status == CRASH_STATUS
    names, seq = _acks((tmp_path / "acks").read_text().splitlines())
    assert [n for n in names if n != "batch"] == list(SCRIPT[: crash.action])
    check_outcome(tmp_path / "w", seq, names)


# --- EIO and ENOSPC ----------------------------------------------------------------------------


def test_an_io_error_at_a_durable_operation_leaves_one_era_and_loses_nothing_acknowledged(
    tmp_path: Path, base_world: Path, error: Op, code: int
) -> None:
    path = tmp_path / "w"
    shutil.copytree(base_world, path)
    count = 0

    def hook(_op: str, p: str) -> None:
        nonlocal count
        count += 1
        if count - 1 == error.index:
            raise OSError(code, os.strerror(code), p)

    acked: list[str] = []
    seq = 0

    def on_ack(index: int, world: World, done: int | None) -> None:
        nonlocal seq
        acked.append(SCRIPT[index] if done is None else "batch")
        seq = world.journal.seq_next_committed

    with fileio.fault_hook(hook):
        failed = run_script(path, on_ack)
    if failed is not None:
        index, exc = failed
        assert index == error.action, "the call that performed the operation failed"
        assert isinstance(exc, StorageError | JournalWriteFailed), repr(exc)
        if isinstance(exc, JournalWriteFailed):
            assert exc.rolled_back, "the fault came once, so the rollback had to work"
    else:
        assert error.action_name == "snapshot", "only a checkpoint may fail (as a notice)"
    check_outcome(path, seq, acked)
