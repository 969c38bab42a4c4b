"""The file journal under failing and crashing disks, at every file operation (SQLite's ioerr
tests): a scripted run of commits across several segments fails, or dies, at operation N of
``world._fileio`` for every N.

Failing: the operation raises ``EIO`` or ``ENOSPC`` once. The commit it hits raises
``JournalWriteFailed(rolled_back=True)``, nothing of its batch is on disk, every earlier record
reads back, and the same batch committed again succeeds. When the disk keeps failing (the
rollback fails too) the handle refuses writes and a reopen finds the last batch whole or absent.

Crashing: a child process runs the script and ``os._exit``s just before operation N (or halfway
through the ``write`` that is operation N). After a writable reopen, every acknowledged commit is
intact, and the batch in flight is exactly what the crash guarantee in ``world.journal._file`` says: all
of it if its ``write`` had completed, none of it before, and the frames wholly inside the written
half when the ``write`` itself was cut.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from air.errors import UsageError
from kernel.journal import encode_record
from world import _fileio as fileio
from world.errors import JournalWriteFailed, StorageError
from world.journal import FRAME_HEADER_BYTES, FileJournal, seal_name, verify

SUBJECT = "/world/event/test/Fault@1"
SEGMENT_BYTES = 600
SCRIPT = (1, 3, 2, 5, 1, 4, 2, 6, 1)  # records per commit; the run rolls over four times
CHECKED = {"check_writes": True, "check_reads": True}
CHUNKS = 6  # every test over "every N" is split this many ways, so that xdist spreads it

# One source for the bodies, run here and in the child process.
_BODY_SOURCE = """
def body(seq, attempt):
    return {"n": seq, "try": attempt, "pad": bytes([seq % 251]) * (seq % 13 + 20)}
"""
_namespace: dict[str, Any] = {}
exec(_BODY_SOURCE, _namespace)
body = _namespace["body"]

# The children's crash: a fault hook that exits just before operation ``crash_at`` ("exit") or
# halfway through the write that is that operation ("mid-write").
_CRASH_HOOK_SOURCE = """
count = 0
real_write = os.write

def write_half_then_exit(fd, data):
    real_write(fd, bytes(data)[: len(data) // 2])
    os._exit(71)

def hook(op, path):
    global count
    if count == crash_at:
        if mode == "exit":
            os._exit(71)
        os.write = write_half_then_exit
    count += 1
"""

_CHILD = (
    """
import json, os, sys
from world import _fileio as fileio
from world.journal import FileJournal
"""
    + _BODY_SOURCE
    + """
directory, mode, crash_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
script, segment_bytes, subject = json.loads(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
"""
    + _CRASH_HOOK_SOURCE
    + """
with fileio.fault_hook(hook):
    journal = FileJournal(directory, segment_bytes_max=segment_bytes)
    seq = 0
    for index, size in enumerate(script):
        journal.append_many(("event.in", subject, body(seq + i, 0)) for i in range(size))
        journal.commit()
        seq += size
        print(index, flush=True)
os._exit(0)
"""
)


def _entries(first: int, size: int, attempt: int) -> Iterator[tuple[str, str, Any]]:
    return (("event.in", SUBJECT, body(seq, attempt)) for seq in range(first, first + size))


@dataclass(frozen=True)
class Op:
    name: str
    path: str  # relative to the journal's parent directory
    batch: int  # the index in SCRIPT of the commit it belongs to; -1 for the open


@cache
def _trace() -> tuple[Op, ...]:
    """Every fileio operation of a run of SCRIPT without faults, in order."""
    ops: list[Op] = []
    batch = [-1]
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)

        def record(op: str, path: str) -> None:
            ops.append(Op(op, str(Path(path).relative_to(root)), batch[0]))

        with fileio.fault_hook(record):
            journal = FileJournal(root / "journal", segment_bytes_max=SEGMENT_BYTES)
            for index, size in enumerate(SCRIPT):
                batch[0] = index
                journal.append_many(_entries(journal.seq_next, size, 0))
                journal.commit()
            journal.close()
    return tuple(ops)


def _frame_write(batch: int) -> int:
    """The index of the operation that writes ``batch``'s frames into its segment."""
    (index,) = [
        index
        for index, op in enumerate(_trace())
        if op.batch == batch and op.name == "write" and op.path.endswith(".log")
    ]
    return index


def _frame_bytes(seq: int) -> int:
    return FRAME_HEADER_BYTES + len(encode_record(seq, SUBJECT, "event.in", body(seq, 0)))


def _my_share(chunk: int, count: int) -> range:
    return range(chunk, count, CHUNKS)


def _check_reopened(directory: Path, bodies: list[Any]) -> None:
    """A writable open finds exactly ``bodies``, leaves a clean, sealed journal, and commits."""
    with FileJournal(directory, segment_bytes_max=SEGMENT_BYTES, **CHECKED) as journal:
        assert [record.body for record in journal.read()] == bodies
        assert [record.seq for record in journal.read()] == list(range(len(bodies)))
        segments = journal.segments
    assert verify(directory).clean
    assert sorted(path.name for path in directory.glob("*.seal")) == [
        seal_name(name) for name in segments[:-1]
    ]
    assert not list(directory.glob(".*.tmp"))
    with FileJournal(directory, segment_bytes_max=SEGMENT_BYTES, **CHECKED) as journal:
        journal.append_many(_entries(len(bodies), 2, 9))
        journal.commit()
    assert verify(directory).records == len(bodies) + 2


def _open(directory: Path) -> FileJournal | StorageError:
    try:
        return FileJournal(directory, segment_bytes_max=SEGMENT_BYTES, **CHECKED)
    except StorageError as exc:
        return exc


def _commit(journal: FileJournal) -> JournalWriteFailed | None:
    try:
        journal.commit()
    except JournalWriteFailed as exc:
        return exc
    return None


def _readers_view(directory: Path) -> list[Any]:
    with FileJournal(directory, readonly=True, **CHECKED) as reader:
        return [record.body for record in reader.read()]


# --- failing once at every operation -----------------------------------------------------------


def _run_failing_once(directory: Path, fail_at: int, error: int) -> tuple[Op, bool]:
    """Run SCRIPT; operation ``fail_at`` raises ``error``. Check the failure where it surfaces,
    retry, and finish the script. Return the failed operation and whether a commit failed."""
    trace, counter = _trace(), itertools.count()
    expected_op = trace[fail_at]
    name = errno.errorcode[error]

    def fail_once(op: str, path: str) -> None:
        if next(counter) == fail_at:
            assert (op, path) == (expected_op.name, str(directory.parent / expected_op.path))
            raise OSError(error, os.strerror(error), path)

    where = (expected_op.name, str(directory.parent / expected_op.path), name)
    bodies: list[Any] = []
    commit_failed = False
    with fileio.fault_hook(fail_once):
        journal = _open(directory)
        if isinstance(journal, StorageError):  # the fault hit the open: the retry works
            assert not isinstance(journal, JournalWriteFailed)
            assert (journal.operation, journal.path, journal.errno_name) == where
            journal = FileJournal(directory, segment_bytes_max=SEGMENT_BYTES, **CHECKED)
        with journal:
            for size in SCRIPT:
                first, attempt = journal.seq_next, 0
                journal.append_many(_entries(first, size, 0))
                failure = _commit(journal)
                if failure is not None:
                    commit_failed = True
                    assert failure.rolled_back
                    assert (failure.operation, failure.path, failure.errno_name) == where
                    assert journal.seq_next == journal.seq_next_committed == first
                    assert _readers_view(directory) == bodies
                    journal.append_many(_entries(first, size, 1))
                    journal.commit()
                    attempt = 1
                bodies += [body(seq, attempt) for seq in range(first, first + size)]
    _check_reopened(directory, bodies)
    return expected_op, commit_failed


@pytest.mark.parametrize("error", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_a_failure_at_any_operation_rolls_the_commit_back_and_the_next_one_works(
    tmp_path: Path, error: int, chunk: int
) -> None:
    for fail_at in _my_share(chunk, len(_trace())):
        (tmp_path / f"fail-{fail_at}").mkdir()  # as in the trace: only the journal is created
        op, commit_failed = _run_failing_once(
            tmp_path / f"fail-{fail_at}" / "journal", fail_at, error
        )
        assert commit_failed == (op.batch >= 0), op


def test_every_kind_of_operation_was_failed_in_a_commit() -> None:
    kinds = {op.name for op in _trace() if op.batch >= 0}
    assert kinds == {"create", "write", "fsync", "replace", "fsync_dir", "fdatasync"}


def test_a_short_write_then_enospc_leaves_no_frame_of_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FileJournal(tmp_path, **CHECKED) as journal:
        journal.append_many(_entries(0, 3, 0))
        journal.commit()
        segment = tmp_path / journal.segments[-1]
        size = segment.stat().st_size
        frames = [_frame_bytes(seq) for seq in (3, 4, 5)]
        short = frames[0] + frames[1] + 5  # two whole frames and a piece of the third
        real_write, calls = os.write, [0]

        def short_then_full_disk(fd: int, data: Any) -> int:
            calls[0] += 1
            if calls[0] == 1:
                return real_write(fd, bytes(data)[:short])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        journal.append_many(_entries(3, 3, 0))
        monkeypatch.setattr(os, "write", short_then_full_disk)
        with pytest.raises(JournalWriteFailed) as raised:
            journal.commit()
        monkeypatch.undo()
        error = raised.value
        assert (error.operation, error.path, error.errno_name) == ("write", str(segment), "ENOSPC")
        assert error.rolled_back
        assert segment.stat().st_size == size
        assert _readers_view(tmp_path) == [body(seq, 0) for seq in range(3)]
        journal.append_many(_entries(3, 3, 1))
        journal.commit()
    _check_reopened(
        tmp_path, [body(seq, 0) for seq in range(3)] + [body(seq, 1) for seq in range(3, 6)]
    )


# --- failing for good from every operation on --------------------------------------------------


def _run_failing_from(directory: Path, fail_from: int, error: int) -> None:
    counter = itertools.count()

    def fail_from_now_on(op: str, path: str) -> None:
        if next(counter) >= fail_from:
            raise OSError(error, os.strerror(error), path)

    bodies: list[Any] = []
    with fileio.fault_hook(fail_from_now_on):
        journal = FileJournal(directory, segment_bytes_max=SEGMENT_BYTES, **CHECKED)
        for size in SCRIPT:
            first = journal.seq_next
            journal.append_many(_entries(first, size, 0))
            failure = _commit(journal)
            if failure is not None:
                failed = (first, size, failure.rolled_back)
                break
            bodies += [body(seq, 0) for seq in range(first, first + size)]
        else:
            raise AssertionError("no commit failed")
        first, size, rolled_back = failed
        if rolled_back:
            journal.append_many(_entries(first, size, 1))
            with pytest.raises(JournalWriteFailed):
                journal.commit()  # the disk is still failing
        else:
            with pytest.raises(UsageError):
                journal.append("event.in", SUBJECT, None)
            with pytest.raises(UsageError):
                journal.commit()
        assert [record.body for record in journal.read()] == bodies
        journal.close()
    with FileJournal(directory, readonly=True) as reader:
        found = [record.body for record in reader.read()]
    # The batch the rollback could not cut: whole (its write had completed) or absent.
    batch = [body(seq, 0) for seq in range(first, first + size)]
    assert found in (bodies, bodies + batch)
    assert found == bodies or not rolled_back
    _check_reopened(directory, found)


@pytest.mark.parametrize("error", [errno.EIO, errno.EROFS], ids=["EIO", "EROFS"])
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_when_the_rollback_fails_too_the_handle_refuses_writes_until_reopened(
    tmp_path: Path, error: int, chunk: int
) -> None:
    opened = sum(1 for op in _trace() if op.batch < 0)
    for fail_from in _my_share(chunk, len(_trace())):
        if fail_from >= opened:
            (tmp_path / f"from-{fail_from}").mkdir()
            _run_failing_from(tmp_path / f"from-{fail_from}" / "journal", fail_from, error)


# --- crashing at every operation ---------------------------------------------------------------


def _crash(directory: Path, mode: str, crash_at: int) -> list[int]:
    """Run the script in a child that dies at operation ``crash_at``; return the acknowledged
    batches."""
    argv = [sys.executable, "-c", _CHILD, str(directory), mode, str(crash_at)]
    argv += [json.dumps(SCRIPT), str(SEGMENT_BYTES), SUBJECT]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 71, done.stderr
    return [int(line) for line in done.stdout.split()]


def _records_before(batch: int) -> int:
    return sum(SCRIPT[:batch])


def _frames_in_half(batch: int) -> int:
    """How many frames of ``batch`` lie wholly in the first half of its bytes."""
    first = _records_before(batch)
    sizes = [_frame_bytes(seq) for seq in range(first, first + SCRIPT[batch])]
    half, whole, end = sum(sizes) // 2, 0, 0
    for size in sizes:
        end += size
        if end > half:
            break
        whole += 1
    return whole


def _expected_after_crash(mode: str, crash_at: int) -> int:
    """How many records a crash just before (or, for ``mid-write``, inside) operation
    ``crash_at`` leaves: every batch whose write had completed, and with the write cut in half,
    the frames of its batch that lie wholly in the written half."""
    trace = _trace()
    written = [batch for batch in range(len(SCRIPT)) if _frame_write(batch) < crash_at]
    count = sum(SCRIPT[batch] for batch in written)
    op = trace[crash_at]
    if mode == "mid-write" and op.batch >= 0 and crash_at == _frame_write(op.batch):
        count += _frames_in_half(op.batch)
    return count


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("mode", ["exit", "mid-write"])
def test_a_crash_at_any_operation_keeps_every_acknowledged_commit_and_no_part_of_a_frame(
    tmp_path: Path, mode: str, chunk: int
) -> None:
    trace = _trace()
    points = (
        range(len(trace))
        if mode == "exit"
        else [i for i, op in enumerate(trace) if op.name == "write"]
    )
    for crash_at in _my_share(chunk, len(points)):
        point = points[crash_at]
        directory = tmp_path / f"{mode}-{point}" / "journal"
        directory.parent.mkdir()
        acknowledged = _crash(directory, mode, point)
        expected = _expected_after_crash(mode, point)
        assert _records_before(len(acknowledged)) <= expected
        assert acknowledged == list(range(len(acknowledged)))
        _check_reopened(directory, [body(seq, 0) for seq in range(expected)])


def test_the_crash_points_cover_each_batch_before_during_and_after_its_write() -> None:
    for batch in range(len(SCRIPT)):
        write = _frame_write(batch)
        assert _trace()[write + 1].name == "fdatasync"
        assert _expected_after_crash("exit", write) == _records_before(batch)
        assert _expected_after_crash("exit", write + 1) == _records_before(batch + 1)
    assert any(_frames_in_half(batch) > 0 for batch in range(len(SCRIPT)))


# --- resealing at a writable open --------------------------------------------------------------

_RESEAL_CHILD = (
    """
import os, sys
from world import _fileio as fileio
from world.journal import FileJournal
directory, crash_at, segment_bytes, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
"""
    + _CRASH_HOOK_SOURCE
    + """
with fileio.fault_hook(hook):
    FileJournal(directory, segment_bytes_max=segment_bytes).close()
os._exit(0)
"""
)


@cache
def _unsealed_template() -> tuple[Path, tuple[Op, ...]]:
    """A journal of SCRIPT whose rolled segments have lost their seals (its writer died before
    sealing them), and every operation of the writable open that reseals it."""
    root = Path(tempfile.mkdtemp(prefix="unsealed-"))
    directory = root / "template" / "journal"
    with FileJournal(directory, segment_bytes_max=SEGMENT_BYTES) as journal:
        for size in SCRIPT:
            journal.append_many(_entries(journal.seq_next, size, 0))
            journal.commit()
        rolled = len(journal.segments) - 1
    seals = list(directory.glob("*.seal"))
    assert len(seals) == rolled >= 3
    for seal in seals:
        seal.unlink()
    scratch = root / "trace" / "journal"
    shutil.copytree(directory, scratch)
    ops: list[Op] = []
    with fileio.fault_hook(
        lambda op, path: ops.append(Op(op, str(Path(path).relative_to(scratch.parent)), -1))
    ):
        FileJournal(scratch, segment_bytes_max=SEGMENT_BYTES).close()
    return directory, tuple(ops)


def _unsealed_copy(tmp_path: Path, name: str) -> Path:
    directory = tmp_path / name / "journal"
    shutil.copytree(_unsealed_template()[0], directory)
    return directory


def test_a_writable_open_reseals_what_it_scanned_with_durable_writes() -> None:
    """Per unsealed segment: its bytes synced, its seal written beside it, synced and renamed
    into place; then the folder synced once. These are the operations failed and crashed below."""
    ops = _unsealed_template()[1]
    rolled = (len(ops) - 1) // 5
    assert [op.name for op in ops] == [
        *["fsync", "create", "write", "fsync", "replace"] * rolled,
        "fsync_dir",
    ]
    assert len({op.path for op in ops if op.name == "replace"}) == rolled >= 3


def _failing_once(fail_at: int, error: int) -> Callable[[str, str], None]:
    """A fault hook that raises ``error`` at operation ``fail_at`` only."""
    counter = itertools.count()

    def hook(op: str, path: str) -> None:
        if next(counter) == fail_at:
            raise OSError(error, os.strerror(error), path)

    return hook


@pytest.mark.parametrize("error", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_a_failure_while_resealing_fails_the_open_and_loses_nothing(
    tmp_path: Path, error: int
) -> None:
    """Every operation of the resealing open fails once: the open raises a ``StorageError``
    naming it, nothing is lost (a reader sees every record), and the next writable open
    reseals the journal."""
    ops = _unsealed_template()[1]
    bodies = [body(seq, 0) for seq in range(sum(SCRIPT))]
    for fail_at, expected in enumerate(ops):
        directory = _unsealed_copy(tmp_path, f"fail-{fail_at}")
        with fileio.fault_hook(_failing_once(fail_at, error)):
            opened = _open(directory)
        assert isinstance(opened, StorageError), expected
        assert opened.path == str(directory.parent / expected.path), (opened, expected)
        assert opened.errno_name == errno.errorcode[error]
        assert _readers_view(directory) == bodies
        _check_reopened(directory, bodies)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_a_crash_while_resealing_loses_nothing(tmp_path: Path, chunk: int) -> None:
    """A process that dies at any operation of the resealing open, or halfway through writing a
    seal, leaves every record, and the next writable open reseals the journal (no stray
    temporary file, seals that verify)."""
    ops = _unsealed_template()[1]
    points = [(at, "exit") for at in range(len(ops))]
    points += [(at, "mid-write") for at, op in enumerate(ops) if op.name == "write"]
    bodies = [body(seq, 0) for seq in range(sum(SCRIPT))]
    for crash_at, mode in (points[i] for i in _my_share(chunk, len(points))):
        directory = _unsealed_copy(tmp_path, f"crash-{mode}-{crash_at}")
        argv = [sys.executable, "-c", _RESEAL_CHILD, str(directory), str(crash_at)]
        done = subprocess.run(
            [*argv, str(SEGMENT_BYTES), mode],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 71, done.stderr
        _check_reopened(directory, bodies)
