"""The file journal: segments of checksummed frames under ``<world>/journal/``.

This module holds ``FileJournal`` (writing, opening, reading, refreshing), the walk over a
journal's segments that opening and ``verify`` share, and the public surface. The on-disk format,
the check of one segment and the torn-tail rule are in ``world.journal._frames``, the segment
files in ``world.journal._segments``, seals in ``world.journal._seals``, the undo of a failed
commit in ``world.journal._commit``; the reports, the cutting that ``repair`` does and
``salvage`` are in ``world.journal._repair``. Every public
name is importable from here. Every durable operation (creating a segment or a seal, writing,
``fdatasync``, truncating, removing, directory syncs) goes through ``world._fileio``, and every
``OSError`` leaves as a ``StorageError`` naming the operation, the path and the errno.

Writing. ``append`` encodes and buffers; ``commit`` writes the buffered records as one *batch*:
their frames, joined, with one ``write`` and one ``fdatasync`` (which covers the file size), into
one segment. A batch never spans two segments: if it does not fit in the space the last segment
has left under ``segment_bytes_max``, the writer rolls over first (creates the next segment
whole: temp file with the header, fsync, rename; seals the full one the same way; one fsync of
the directory for both), and a batch larger than ``segment_bytes_max`` gets a segment of its own,
which then exceeds the limit. So a commit touches the bytes of one segment and syncs once.
Rejected: filling a segment and carrying the rest of the batch over (what this module did
before), which wrote and synced per segment, so that a failure in the second segment left the
first chunk durable, and a rollback would have had to cut several files. The price: where
segments end depends on how records were grouped into commits, so a replay that commits
differently reproduces a journal longer than one segment record for record, not byte for byte.

Failure. A commit is all or nothing under I/O errors: a failed one is undone and raises
``JournalWriteFailed`` (``world.journal._commit``, "Failure", says how and what is left).

Crash. After a crash, every commit that returned is whole; of one that had not, reopening
finds a prefix of its records, each whole (``world.journal._commit``, "Crash", says exactly).

What each path checks:

    open    the name, order and header of every segment. An earlier segment whose seal decodes
            strictly and agrees with the file (size, header, last frame) is taken from the
            seal: its count and index, without reading its frames. Any other seal (damaged, of
            format 1) is not trusted: the segment is scanned, damage found is
            ``JournalCorrupt``, and a writable open seals it (again). The last segment is
            always scanned, with the torn-tail rule, and its seal (if any) ignored.
    read    both CRCs and the seq of every frame it returns, so damage anywhere is reported, as
            ``JournalCorrupt(segment, offset, seq, reason)``, by the first read that reaches it.
    verify  every frame of every segment, strictly, and the blake3 of every seal against its
            file (a seal that disagrees is reported as stale; ``repair`` removes it, and the
            next writable open scans and seals that segment again). Given ``trusted`` (the
            verify cache's segments: verified before, unchanged since), those are taken from
            their seal as opening takes them.

So opening costs the last segment and a few small reads per earlier one, not the journal's size.
Comparing every seal's blake3 at every open was rejected (``world.journal._seals``). The last segment
is scanned at every open, so ``SEGMENT_BYTES_MAX`` bounds that scan (``world.journal._frames``).

Readers. ``readonly=True`` performs no operation through ``world._fileio`` at all (it works on a
read-only or full file system): it creates, truncates, seals and removes nothing, and a torn
tail at the end is read as the end (a live writer's commit in flight), not as damage.
``refresh()`` takes in what a writer committed since: it rescans only the last segment it knew,
from where it stopped, and any new segments. A reader sees a batch once it is written, before it
is synced; if the writer then rolls it back, the reader's next ``refresh`` finds the segment
shorter and rescans. Not here: locking (the world directory layer holds it), archiving
sealed segments and restoring them (``world._archive``, ``world._repair``), the verify cache
(``world.journal._verified``, used by ``world._repair``), or deciding what the kernel journals.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from air import cbor
from air.errors import UsageError
from kernel.errors import JournalProblem
from kernel.journal import (
    PROBLEM_REASONS,
    RECORD_BYTES_MAX,
    JournalRecord,
    check_read_args,
    filter_records,
    prepare_payload,
    record_prefix,
)
from world import _fileio as fileio
from world.errors import JournalWriteFailed, StorageError, storage_error, storage_errors
from world.journal._batch import (
    BATCH_NAME,
    Marker,
    clear_marker,
    cut_partial_batch,
    write_marker,
)
from world.journal._commit import Commit, close_fd, prepare_directory, roll_back
from world.journal._frames import (
    FRAME_HEADER_BYTES,
    FRAME_PAYLOAD_BYTES_MAX,
    SEAL_SUFFIX,
    SEGMENT_BYTES_MAX,
    SEGMENT_HEADER_BYTES,
    SEGMENT_MAGIC,
    SEGMENT_VERSION,
    TORN_REASONS,
    TornTail,
    _Scan,
    _scan_segment,
    _Segment,
    frame_batch,
    seal_name,
    segment_header,
    segment_name,
)
from world.journal._repair import RepairReport, VerifyReport, cut_after_last_good, salvage
from world.journal._seals import seal_bytes, seal_scanned, stale_seal, trusted_seal
from world.journal._segments import (
    decode_at,
    fsync_dir,
    list_segments,
    read_file,
    read_segment,
    truncate,
    unlink,
    write_temp,
)

__all__ = [
    "FRAME_HEADER_BYTES",
    "PROBLEM_REASONS",
    "SEAL_SUFFIX",
    "SEGMENT_BYTES_MAX",
    "SEGMENT_HEADER_BYTES",
    "SEGMENT_MAGIC",
    "SEGMENT_VERSION",
    "TORN_REASONS",
    "FileJournal",
    "JournalProblem",
    "RepairReport",
    "TornTail",
    "VerifyReport",
    "repair",
    "salvage",
    "seal_name",
    "segment_name",
    "verify",
]

# --- scanning --------------------------------------------------------------------------------

# ``_scan_journal`` stays in this module, not in ``world.journal._frames``, so that the name it calls
# (``_scan_segment``) is looked up here: tests replace it on ``world.journal._file`` to count scans.


def _resume(
    directory: Path,
    scan: _Scan,
    listed: list[tuple[int, str]],
    known: Sequence[_Segment],
    strict: bool,
) -> int:
    """Take ``known`` segments (a reader's earlier scan) into ``scan`` and rescan the last of
    them from where it stopped; return how many listed segments that covers (0: start over)."""
    names = [name for _, name in listed[: len(known)]]
    if not known or names != [segment.name for segment in known]:
        return 0
    last, path = known[-1], directory / known[-1].name
    with storage_errors("stat", path):
        if os.stat(path).st_size < last.size:
            return 0  # the segment shrank (a writer rolled a batch back, or a repair cut it)
    data = read_file(path, last.size)
    scan.segments.extend(known[:-1])
    is_last = len(known) == len(listed)
    _scan_segment(scan, last.name, data, last.first_seq, is_last, strict, last.copy())
    return len(known)


def _scan_journal(
    directory: Path,
    *,
    strict: bool,
    trust_seals: bool,
    known: Sequence[_Segment] = (),
    trusted: Collection[str] = (),
) -> _Scan:
    """Check every segment in order, stopping at the first problem.

    With ``trust_seals``, an earlier segment whose seal agrees with its file (``trusted_seal``:
    a few small reads) is taken from the seal instead of being scanned; the last segment is
    always scanned. With ``known``, the segments of an earlier scan that are still there are
    taken as they were, and the last of them is scanned from where that scan stopped. The
    segments named in ``trusted`` are taken from their seal as with ``trust_seals`` (``verify``
    with its cache: segments verified before and unchanged since).
    """
    listed, scan = list_segments(directory), _Scan()
    start = _resume(directory, scan, listed, known, strict) if known else 0
    for position, (first_seq, name) in enumerate(listed[start:], start):
        if scan.problem is not None:
            break
        if first_seq != scan.seq_next:
            detail = f"expected a segment starting at seq {scan.seq_next}"
            scan.problem = JournalProblem(name, 0, scan.seq_next, "segment_gap", detail)
            break
        is_last = position == len(listed) - 1
        by_seal = (trust_seals or name in trusted) and not is_last
        sealed = trusted_seal(directory, name, first_seq) if by_seal else None
        if sealed is not None:
            scan.segments.append(sealed)
            scan.from_seals.append(name)
            continue
        _scan_segment(scan, name, read_file(directory / name), first_seq, is_last, strict)
        if scan.problem is None and not is_last:
            scan.unsealed.append(scan.segments[-1])
    cut_partial_batch(directory, scan, strict)
    return scan


# --- the journal -----------------------------------------------------------------------------


class FileJournal:
    """A ``Journal`` kept in segment files in ``directory`` (a world's ``journal/``).

    Opening drops a torn tail (see ``dropped``) and raises ``JournalCorrupt`` for anything else
    that is wrong, ``StorageError`` if the OS fails it. A writable open cuts the torn tail and
    seals the earlier segments it had to scan. ``readonly=True`` does no durable operation and
    refuses appends: for readers next to a live writer (``refresh`` catches up), and for
    inspection. ``check_writes``/``check_reads`` turn on the strict round-trip on append and the
    strict decode on read and on open of the segments it scans (tests run with both).
    ``commit`` raises ``JournalWriteFailed`` (see the module docstring).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_bytes_max: int = SEGMENT_BYTES_MAX,
        record_bytes_max: int = RECORD_BYTES_MAX,
        readonly: bool = False,
        check_writes: bool = False,
        check_reads: bool = False,
    ) -> None:
        if segment_bytes_max <= SEGMENT_HEADER_BYTES + FRAME_HEADER_BYTES:
            raise UsageError(f"segment_bytes_max {segment_bytes_max} is too small")
        if not 0 < record_bytes_max <= FRAME_PAYLOAD_BYTES_MAX:
            raise UsageError(f"record_bytes_max must be in 1..{FRAME_PAYLOAD_BYTES_MAX}")
        self._dir = Path(directory)
        self._segment_bytes_max = segment_bytes_max
        self._record_bytes_max = record_bytes_max
        self._readonly = readonly
        self._check_writes = check_writes
        self._check_reads = check_reads
        self._watch_prefix: str | None = None
        self._watched: list[tuple[int, str]] = []
        if not readonly:
            prepare_directory(self._dir)
        scan = _scan_journal(self._dir, strict=check_reads, trust_seals=True)
        if scan.problem is not None:
            raise scan.problem.error()
        if not readonly:
            if scan.torn is not None:
                truncate(self._dir / scan.torn.segment, scan.torn.offset)
            if (self._dir / BATCH_NAME).exists():
                clear_marker(self._dir)  # its batch is whole, or was just cut, or never began
            seal_scanned(self._dir, scan.unsealed)
        self.dropped: TornTail | None = scan.torn
        self._segments = scan.segments
        self._seq_committed = scan.seq_next
        self._pending: list[bytes] = []
        self._fd: int | None = None
        self._fd_path: Path | None = None  # of the last segment, which ``_fd`` is open on
        self._state = "open"

    @classmethod
    def open(cls, directory: str | os.PathLike[str], **options: Any) -> FileJournal:
        """``FileJournal(directory, **options)``, for callers that read better with a verb."""
        return cls(directory, **options)

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def segments(self) -> tuple[str, ...]:
        """The segment file names, oldest first."""
        return tuple(segment.name for segment in self._segments)

    @property
    def seq_next(self) -> int:
        return self._seq_committed + len(self._pending)

    @property
    def seq_next_committed(self) -> int:
        return self._seq_committed

    def watch(self, prefix: str) -> list[tuple[int, str]]:
        """From now on, note ``(seq, subject)`` of every appended record whose subject starts
        with ``prefix`` in the returned list (its owner takes entries out; a rolled-back batch's
        records stay noted, so the owner keeps only seqs below ``seq_next_committed``)."""
        self._watch_prefix, self._watched = prefix, []
        return self._watched

    def append(self, kind: str, subject: str, body: Any) -> int:
        self._check_writable()
        seq = self.seq_next
        self._pending.append(self._encode(seq, kind, subject, body))
        if self._watch_prefix is not None and subject.startswith(self._watch_prefix):
            self._watched.append((seq, subject))
        return seq

    def append_many(self, entries: Iterable[tuple[str, str, Any]]) -> range:
        self._check_writable()
        first = self.seq_next
        payloads, noted, prefix = [], [], self._watch_prefix
        for index, (kind, subject, body) in enumerate(entries):
            payloads.append(self._encode(first + index, kind, subject, body))
            if prefix is not None and subject.startswith(prefix):
                noted.append((first + index, subject))
        self._pending.extend(payloads)
        self._watched.extend(noted)
        return range(first, self.seq_next)

    def commit(self, *, atomic: bool = False) -> int:
        """Write and sync every pending record as one batch; return the next seq. ``atomic``:
        durable whole or not at all, also under a crash or a power cut inside the write
        (``world.journal._batch``: a marker first, for a batch of more than one record)."""
        self._check_writable()
        if not self._pending:
            return self._seq_committed
        marked = atomic and len(self._pending) > 1
        if marked:
            marker = Marker(self._seq_committed, len(self._pending), cbor.digest(self._pending[0]))
            try:
                write_marker(self._dir, marker)
            except BaseException as exc:
                self._fail(Commit(), exc)
        self._commit_batch(self._pending)
        if marked:
            with contextlib.suppress(StorageError):  # the batch is durable; a stale marker of
                clear_marker(self._dir)  # a whole batch is harmless
        return self._seq_committed

    def refresh(self) -> int:
        """Take in what a writer committed since this read-only journal was opened or last
        refreshed; return the new ``seq_next``. Raises ``JournalCorrupt`` as opening does."""
        self._check_open()
        if not self._readonly:
            raise UsageError("refresh is for read-only journals; a writer knows its records")
        known = self._segments
        scan = _scan_journal(self._dir, strict=self._check_reads, trust_seals=True, known=known)
        if scan.problem is not None:
            raise scan.problem.error()
        self._segments, self._seq_committed, self.dropped = scan.segments, scan.seq_next, scan.torn
        return self._seq_committed

    def read(
        self,
        from_seq: int = 0,
        subject_pattern: str | None = None,
        *,
        committed_only: bool = False,
    ) -> Iterator[JournalRecord]:
        self._check_open()
        pattern = check_read_args(from_seq, subject_pattern)
        plan = self._plan(from_seq, self._seq_committed)
        skip = max(0, from_seq - self._seq_committed)
        pending = [] if committed_only else self._pending[skip:]
        records = self._iter_records(plan, pending, self._seq_committed + skip)
        return filter_records(records, pattern)

    def close(self) -> None:
        """Release the file; records not committed are dropped, as a crash would drop them."""
        self._close_fd()
        self._pending = []
        self._state = "closed"

    def __enter__(self) -> FileJournal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _encode(self, seq: int, kind: str, subject: str, body: Any) -> bytes:
        return prepare_payload(seq, kind, subject, body, self._record_bytes_max, self._check_writes)

    def _check_open(self) -> None:
        if self._state == "closed":
            raise UsageError("journal is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._readonly:
            raise UsageError("journal is open read-only")
        if self._state == "failed":
            raise UsageError("journal refuses writes after a failed rollback; reopen it")

    def _close_fd(self) -> None:
        if self._fd is not None:
            close_fd(self._fd)
            self._fd, self._fd_path = None, None

    def _plan(self, from_seq: int, end_seq: int) -> list[tuple[_Segment, int, int]]:
        plan = []
        for segment in self._segments:
            low = max(from_seq, segment.first_seq)
            high = min(end_seq, segment.first_seq + segment.count)
            if low < high:
                plan.append((segment, low, high))
        return plan

    def _iter_records(
        self, plan: list[tuple[_Segment, int, int]], pending: list[bytes], pending_seq: int
    ) -> Iterator[JournalRecord]:
        for segment, low, high in plan:
            yield from read_segment(self._dir, segment, low, high, self._check_reads)
        for payload in pending:
            yield decode_at(payload, "<pending>", 0, pending_seq, self._check_reads)
            pending_seq += 1

    # --- committing ----------------------------------------------------------------------------

    def _commit_batch(self, payloads: list[bytes]) -> None:
        commit = Commit()
        try:
            if self._check_writes:  # the write-side half of the seq check every read makes
                self._check_seqs(payloads)
            data, offsets = frame_batch(payloads)
            segment, fd, path = self._segment_for(len(data), commit)
            commit.written = (path, segment.size)
            commit.step = "write"
            fileio.write(fd, data, path)
            commit.step = "fdatasync"
            fileio.fdatasync(fd, path)
        except BaseException as exc:
            self._fail(commit, exc)
        if commit.fd is not None:  # rolled over: the new segment is the last one
            self._close_fd()
            self._fd, self._fd_path = commit.fd, path
            self._segments.append(segment)
        segment.add(offsets, segment.size, segment.size + len(data))
        self._seq_committed += len(payloads)
        self._pending = []

    def _check_seqs(self, payloads: list[bytes]) -> None:
        for index, payload in enumerate(payloads):
            if not payload.startswith(record_prefix(self._seq_committed + index)):
                raise AssertionError(
                    f"frame for seq {self._seq_committed + index} holds another seq"
                )

    def _segment_for(self, batch_bytes: int, commit: Commit) -> tuple[_Segment, int, Path]:
        """The segment the batch goes into (its fd, its path), rolling over if it does not fit."""
        last = self._segments[-1] if self._segments else None
        if last is not None and (
            not last.count or last.size + batch_bytes <= self._segment_bytes_max
        ):
            if self._fd is None or self._fd_path is None:
                path = self._dir / last.name
                with storage_errors("open", path):
                    self._fd, self._fd_path = fileio.open_append(path), path
            return last, self._fd, self._fd_path
        return self._roll(last, commit)

    def _roll(self, last: _Segment | None, commit: Commit) -> tuple[_Segment, int, Path]:
        """Create the next segment, and seal the full one; the commit undoes both if it fails.
        A stale seal of the new segment's name goes first, and is not put back."""
        segment = _Segment(segment_name(self._seq_committed), self._seq_committed)
        path = self._dir / segment.name
        if (self._dir / seal_name(segment.name)).exists():
            unlink(self._dir / seal_name(segment.name))
        targets = [path]
        commit.temps.append(write_temp(self._dir, segment.name, segment_header(segment.first_seq)))
        if last is not None and last.count:  # every frame of it was synced by its commit
            targets.append(self._dir / seal_name(last.name))
            commit.temps.append(
                write_temp(self._dir, targets[-1].name, seal_bytes(self._dir, last))
            )
        for temp, target in zip(commit.temps, targets, strict=True):
            with storage_errors("replace", target):
                fileio.replace(temp, target)
            commit.created.append(target)
        fsync_dir(self._dir)
        with storage_errors("open", path):
            commit.fd = fileio.open_append(path)
        return segment, commit.fd, path

    def _fail(self, commit: Commit, exc: BaseException) -> NoReturn:
        """Roll ``commit`` back and raise: ``JournalWriteFailed`` for an I/O error."""
        self._pending = []
        self._watched[:] = [noted for noted in self._watched if noted[0] < self._seq_committed]
        self._close_fd()
        undo_error: StorageError | None = None
        try:
            roll_back(self._dir, commit)
        except StorageError as error:
            undo_error = error
            self._state = "failed"
        finally:
            if commit.fd is not None:
                close_fd(commit.fd)
        if isinstance(exc, OSError):  # from the write or the fdatasync of the batch
            path = self._dir if commit.written is None else commit.written[0]
            exc = storage_error(exc, commit.step, path)
        if not isinstance(exc, StorageError):
            raise exc
        detail = (
            exc.detail if undo_error is None else f"{exc.detail}; rollback failed: {undo_error}"
        )
        raise JournalWriteFailed(
            exc.path, exc.operation, exc.errno_name, detail, rolled_back=undo_error is None
        ) from exc


# --- verify and repair -----------------------------------------------------------------------


def verify(directory: str | os.PathLike[str], *, trusted: Collection[str] = ()) -> VerifyReport:
    """Check every frame of the journal in ``directory`` strictly; change nothing (no operation
    through ``world._fileio``). The earlier segments named in ``trusted`` (which the caller
    verified before and knows unchanged since: ``world.journal._verified``) are taken from
    their seal if it agrees with the file (``trusted_seal``), their frames and digest not read
    again; ``VerifyReport.trusted`` names them."""
    path = Path(directory)
    if not path.is_dir():
        raise UsageError(f"no journal directory at {path}")
    scan = _scan_journal(path, strict=True, trust_seals=False, trusted=trusted)
    records = scan.seq_next
    names = tuple(name for _, name in list_segments(path))
    last_good = records - 1 if records else None
    whole = scan.segments if scan.problem is None else scan.segments[:-1]
    taken = tuple(scan.from_seals)
    checked = [seg for seg in whole if seg.name not in taken]
    stale = tuple(seg.name for seg in checked if stale_seal(path, seg.name, seg.first_seq))
    return VerifyReport(names, records, last_good, scan.problem, scan.torn, stale, taken)


def repair(directory: str | os.PathLike[str], backup_dir: str | os.PathLike[str]) -> RepairReport:
    """Cut the journal after its last whole commit before the first problem or torn tail,
    backing up whatever is changed or removed (``salvage`` reads the backup).

    What is copied, cut and removed: ``world.journal._repair.cut_after_last_good``.
    """
    path, backup_path = Path(directory), Path(backup_dir)
    return cut_after_last_good(path, backup_path, verify(path))
