"""The file journal: segments of checksummed frames under ``<world>/journal/``.

This module holds ``FileJournal`` (writing, opening, reading), the walk over a journal's segments
that opening and ``verify`` share, and the public surface. The on-disk format, the check of one
segment, the torn-tail rule and seals are in ``world._segments``; the reports and the cutting
that ``repair`` does are in ``world._journal_repair``. Every public name is importable from here.

Writing. ``append`` encodes and buffers; ``commit`` writes every buffered frame of one segment
with one ``write`` and one ``fdatasync`` (which covers the file size; a full ``fsync`` would add
a metadata flush for nothing). A segment rolls over when the next frame would take it past
``segment_bytes_max``; a new segment is created whole (temp file with the header, fsync, rename,
fsync the directory) before any frame goes into it, so a segment file never has a partial header.
A failed write or sync poisons the handle: the file's state is unknown until it is reopened.

What each path checks:

    open    the name, order and header of every segment. An earlier segment whose seal decodes
            strictly, has the right CRC and consistent fields, whose ``size_bytes`` equals the
            file's size, and whose last frame (CRCs, seq ``first_seq + record_count - 1``, ending
            at the end of the file) is intact, is taken from the seal: its count and index,
            without reading its frames. Any other seal is ignored, never trusted: the segment is
            scanned, and damage found is ``JournalCorrupt`` as before. The last segment is always
            scanned, with the torn-tail rule of ``world._segments``, and its seal (if any)
            ignored.
    read    both CRCs and the seq of every frame it returns, so damage inside a sealed segment
            is reported, as ``JournalCorrupt(segment, offset, seq, reason)``, by the first read
            that reaches it, and a seal that lied about the index is caught the same way.
    verify  every frame of every segment, strictly; seals are ignored.

So open cost follows the last segment, not the journal: a 2,000,000-record journal in 64 MiB
segments opens in 0.11 s against 2.2 s scanned whole, and a full 64 MiB last segment (~380,000
records) costs ~0.45 s whatever the journal's length (BENCHMARKS.md). The trade: open no
longer notices bit rot in the frames of old sealed segments that nobody reads; ``verify`` and
the first read do. Rejected: scanning every segment on every open (what this module did before
seals), since a 1,000,000-cell world has at least 2,000,000 records and its open budget is 2 s
in all; and a CRC of the whole segment in the seal, since checking it means reading the segment.

Reading checks both CRCs and the seq again and decodes with ``decode_record_fast`` (the CRC
proves the bytes are the ones written, and the writer wrote canonical CBOR); ``check_reads=True``
decodes strictly (on read, and on open for the segments it scans). ``verify`` checks everything
strictly and changes nothing; ``repair`` backs up, then cuts after the last good record. Not
here: locking (the world directory layer holds it), archiving old segments, or deciding what the
kernel journals.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

from air.errors import UsageError
from kernel.journal import (
    RECORD_BYTES_MAX,
    JournalRecord,
    check_read_args,
    filter_records,
    prepare_payload,
    record_prefix,
)
from world._journal_repair import RepairReport, VerifyReport, _cut_after_last_good
from world._segments import (
    FRAME_HEADER_BYTES,
    SEAL_SUFFIX,
    SEGMENT_BYTES_MAX,
    SEGMENT_HEADER_BYTES,
    SEGMENT_MAGIC,
    JournalProblem,
    TornTail,
    _create_segment,
    _decode_at,
    _frame_parts,
    _list_segments,
    _read_segment,
    _Scan,
    _scan_segment,
    _Segment,
    _truncate,
    _trusted_seal,
    _write_seal,
    seal_name,
    segment_name,
)
from world._segments import SEGMENT_VERSION as SEGMENT_VERSION
from world.fsutil import fsync_dir

__all__ = [
    "FRAME_HEADER_BYTES",
    "SEAL_SUFFIX",
    "SEGMENT_BYTES_MAX",
    "SEGMENT_HEADER_BYTES",
    "SEGMENT_MAGIC",
    "FileJournal",
    "JournalProblem",
    "RepairReport",
    "TornTail",
    "VerifyReport",
    "repair",
    "seal_name",
    "segment_name",
    "verify",
]

# --- scanning --------------------------------------------------------------------------------

# ``_scan_journal``, ``_seal_scanned``, ``_write_all`` and the writer stay in this module, not in
# ``world._segments``, so that the names they call (``_scan_segment``, ``_write_seal``,
# ``_write_all``) are looked up here: tests and the crash children replace those names on
# ``world.journal`` to count scans and inject crashes, and must keep working after the split.


def _scan_journal(directory: Path, *, strict: bool, trust_seals: bool) -> _Scan:
    """Check every segment in order, stopping at the first problem.

    With ``trust_seals``, an earlier segment whose seal agrees with its file is taken from the
    seal instead of being scanned; the last segment is always scanned.
    """
    scan, listed = _Scan(), _list_segments(directory)
    for position, (first_seq, name) in enumerate(listed):
        if first_seq != scan.seq_next:
            detail = f"expected a segment starting at seq {scan.seq_next}"
            scan.problem = JournalProblem(name, 0, scan.seq_next, "segment_gap", detail)
            break
        is_last = position == len(listed) - 1
        sealed = _trusted_seal(directory, name, first_seq) if trust_seals and not is_last else None
        if sealed is not None:
            scan.segments.append(sealed)
            continue
        data = (directory / name).read_bytes()
        _scan_segment(scan, name, data, first_seq, is_last, strict)
        if scan.problem is not None:
            break
        if not is_last:
            scan.unsealed.append(scan.segments[-1])
    return scan


def _seal_scanned(directory: Path, segments: Iterable[_Segment]) -> None:
    """Seal earlier segments that open had to scan, once their bytes are surely durable."""
    for segment in segments:
        fd = os.open(directory / segment.name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _write_seal(directory, segment)


# --- files -----------------------------------------------------------------------------------

# The temp names ``world.fsutil.atomic_write`` gives a segment or a seal while writing it.
_TEMP_NAME_RE: Final = re.compile(r"\.\d{20}\.log(\.seal)?\..*\.tmp")
_sync_data = getattr(os, "fdatasync", os.fsync)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _prepare_directory(directory: Path) -> None:
    """Create the journal directory durably if needed and remove temp files of a crashed roll."""
    if not directory.is_dir():
        directory.mkdir(parents=True)
        fsync_dir(directory.parent)
    for entry in os.scandir(directory):
        if _TEMP_NAME_RE.fullmatch(entry.name):
            os.unlink(entry.path)


# --- the journal -----------------------------------------------------------------------------


class FileJournal:
    """A ``Journal`` kept in segment files in ``directory`` (a world's ``journal/``).

    Opening drops a torn tail (see ``dropped``) and raises ``JournalCorrupt`` for anything else
    that is wrong. A writable open seals the earlier segments it had to scan (see
    ``world._segments``). ``readonly=True`` creates, truncates, seals and removes nothing (a torn tail is
    only skipped) and refuses appends: for readers next to a live writer, and for inspection.
    ``check_writes``/``check_reads`` turn on the strict round-trip on append and the strict
    decode on read and on open of the segments it scans (tests run with both).
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
        self._dir = Path(directory)
        self._segment_bytes_max = segment_bytes_max
        self._record_bytes_max = record_bytes_max
        self._readonly = readonly
        self._check_writes = check_writes
        self._check_reads = check_reads
        if not readonly:
            _prepare_directory(self._dir)
        scan = _scan_journal(self._dir, strict=check_reads, trust_seals=True)
        if scan.problem is not None:
            raise scan.problem.error()
        if not readonly:
            if scan.torn is not None:
                _truncate(self._dir / scan.torn.segment, scan.torn.offset)
            _seal_scanned(self._dir, scan.unsealed)
        self.dropped: TornTail | None = scan.torn
        self._segments = scan.segments
        self._seq_committed = scan.seq_next
        self._pending: list[bytes] = []
        self._fd: int | None = None
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

    def append(self, kind: str, subject: str, body: Any) -> int:
        self._check_writable()
        seq = self.seq_next
        self._pending.append(self._encode(seq, kind, subject, body))
        return seq

    def append_many(self, entries: Iterable[tuple[str, str, Any]]) -> range:
        self._check_writable()
        first = self.seq_next
        payloads = [
            self._encode(first + index, kind, subject, body)
            for index, (kind, subject, body) in enumerate(entries)
        ]
        self._pending.extend(payloads)
        return range(first, self.seq_next)

    def commit(self) -> int:
        """Write and sync every pending record; return the next seq. One sync per segment."""
        self._check_writable()
        if self._pending:
            try:
                self._flush()
            except BaseException:
                self._state = "failed"
                raise
            self._seq_committed += len(self._pending)
            self._pending = []
        return self._seq_committed

    def read(
        self,
        from_seq: int = 0,
        subject_pattern: str | None = None,
        *,
        committed_only: bool = False,
    ) -> Iterator[JournalRecord]:
        if self._state != "open":
            raise UsageError(f"journal is {self._state}")
        pattern = check_read_args(from_seq, subject_pattern)
        plan = self._plan(from_seq, self._seq_committed)
        skip = max(0, from_seq - self._seq_committed)
        pending = [] if committed_only else self._pending[skip:]
        records = self._iter_records(plan, pending, self._seq_committed + skip)
        return filter_records(records, pattern)

    def close(self) -> None:
        """Release the file; records not committed are dropped, as a crash would drop them."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._pending = []
        self._state = "closed"

    def __enter__(self) -> FileJournal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _encode(self, seq: int, kind: str, subject: str, body: Any) -> bytes:
        return prepare_payload(seq, kind, subject, body, self._record_bytes_max, self._check_writes)

    def _check_writable(self) -> None:
        if self._state != "open":
            raise UsageError(f"journal is {self._state}")
        if self._readonly:
            raise UsageError("journal is open read-only")

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
            yield from _read_segment(self._dir, segment, low, high, self._check_reads)
        for payload in pending:
            yield _decode_at(payload, "<pending>", 0, pending_seq, self._check_reads)
            pending_seq += 1

    def _flush(self) -> None:
        payloads, seq, start = self._pending, self._seq_committed, 0
        while start < len(payloads):
            segment = self._segment_for(seq, FRAME_HEADER_BYTES + len(payloads[start]))
            stop, size = start + 1, segment.size + FRAME_HEADER_BYTES + len(payloads[start])
            while stop < len(payloads):
                size += FRAME_HEADER_BYTES + len(payloads[stop])
                if size > self._segment_bytes_max:
                    break
                stop += 1
            self._write_chunk(segment, payloads[start:stop])
            seq, start = seq + stop - start, stop

    def _segment_for(self, seq: int, frame_bytes: int) -> _Segment:
        """The segment the frame for ``seq`` goes into, rolling over to a new one if it is full."""
        last = self._segments[-1] if self._segments else None
        if last is None or (last.count and last.size + frame_bytes > self._segment_bytes_max):
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            full, last = last, _create_segment(self._dir, seq)
            self._segments.append(last)
            if full is not None:  # every frame of it was synced by the commit that wrote it
                _write_seal(self._dir, full)
        if self._fd is None:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
            self._fd = os.open(self._dir / last.name, flags)
        return last

    def _write_chunk(self, segment: _Segment, payloads: list[bytes]) -> None:
        assert self._fd is not None
        parts, offsets, end = list[bytes](), list[int](), segment.size
        if self._check_writes:  # the write-side half of the seq check every read makes
            seq = segment.first_seq + segment.count
            for index, payload in enumerate(payloads):
                if not payload.startswith(record_prefix(seq + index)):
                    raise AssertionError(f"frame for seq {seq + index} holds another seq")
        for payload in payloads:
            parts.extend(_frame_parts(payload))
            offsets.append(end)
            end += FRAME_HEADER_BYTES + len(payload)
        _write_all(self._fd, b"".join(parts))
        _sync_data(self._fd)
        segment.add(offsets, end)


# --- verify and repair -----------------------------------------------------------------------


def verify(directory: str | os.PathLike[str]) -> VerifyReport:
    """Check every frame of the journal in ``directory`` strictly; change nothing."""
    path = Path(directory)
    if not path.is_dir():
        raise UsageError(f"no journal directory at {path}")
    scan = _scan_journal(path, strict=True, trust_seals=False)
    records = scan.seq_next
    names = tuple(name for _, name in _list_segments(path))
    last_good = records - 1 if records else None
    return VerifyReport(names, records, last_good, scan.problem, scan.torn)


def repair(directory: str | os.PathLike[str], backup_dir: str | os.PathLike[str]) -> RepairReport:
    """Cut the journal after its last good record, backing up whatever is changed or removed.

    The segment holding the first bad frame is copied to ``backup_dir`` and truncated before that
    frame; later segments (and a segment whose header is bad) are copied and then removed. The
    seals of all these segments are copied and removed first, so that no seal outlives the bytes
    it describes. The copies are synced before any original is touched.
    """
    path, backup_path = Path(directory), Path(backup_dir)
    return _cut_after_last_good(path, backup_path, verify(path))
