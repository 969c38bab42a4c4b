"""The file journal: segments of checksummed frames under ``<world>/journal/``.

Format. A segment is ``<first seq, 20 digits>.log``: a 16-byte header, then frames.

    header  magic b"WJRNL1\\n" (7) | format version u8 (= 1) | first seq u64 LE (= the file name)
    frame   payload length u32 LE | crc32(payload) u32 LE | crc32(the 8 bytes before) u32 LE
            | payload (``kernel.journal.encode_record``: canonical CBOR of the record map)

Checksums are ``zlib.crc32``: one C call, about 0.1 µs for a small record against 0.5 µs for a
truncated blake3, and a CRC catches every burst error up to 32 bits, which is what torn writes and
media errors look like; the journal defends against accidents, not adversaries (content hashes
do that). The header carries its own CRC so that a damaged length field is seen as damage: with
only a payload CRC, a flipped length bit in a middle frame would point past the end of the file
and look exactly like a torn tail, and opening would silently cut acknowledged records.

Writing. ``append`` encodes and buffers; ``commit`` writes every buffered frame of one segment
with one ``write`` and one ``fdatasync`` (which covers the file size; a full ``fsync`` would add
a metadata flush for nothing). A segment rolls over when the next frame would take it past
``segment_bytes_max``; a new segment is created whole (temp file with the header, fsync, rename,
fsync the directory) before any frame goes into it, so a segment file never has a partial header.
A failed write or sync poisons the handle: the file's state is unknown until it is reopened.

Opening scans the last segment, and every earlier segment without a trusted seal (below), in
order, and checks each frame's header CRC, payload CRC and seq (from the payload's fixed prefix,
without decoding). The first bad frame decides. It is a **torn tail** (dropped: the segment is
truncated there and fsynced, and ``dropped`` says where and how much) only if it is in the last
segment and one of these holds:

    short_header   fewer than 12 bytes remain;
    short_payload  the header is intact and its length runs past the end of the file;
    zero_fill      every byte from the frame to the end of the file is zero (a power loss after
                   the file grew but before its pages were written);
    partial_write  the header is intact, the payload CRC fails, a 512-byte-aligned chunk of the
                   payload (at least 8 bytes) is all zeros, and only zeros follow the frame.

Everything else raises ``JournalCorrupt(segment, offset, seq, reason)``: a bad frame followed by
real data, any bad frame in an earlier segment, a bad CRC with no sign of a partial write (bit rot
in the last record is reported, not dropped), a seq gap, a foreign segment header. A ``kill -9``
always leaves a prefix of the last write, so it is always torn; a power loss that persisted a
later page of the final write but not an earlier one is reported as corruption, and ``repair``
cuts it (no such record was ever acknowledged, since ``commit`` had not returned).

Seals. When the writer rolls over, it creates the next segment and then writes
``<segment>.seal`` next to the full one with ``atomic_write`` (temp, fsync, rename, fsync dir):
the canonical CBOR map

    format 1 | first_seq | record_count | size_bytes (the segment file's length)
    | last_frame_offset | index_stride (256) | index_offsets (u64 LE offset of every 256th frame)
    | crc32 (of the canonical CBOR of the map without this field)

Every frame of the segment was synced by the commit that wrote it, before the roll, so a crash
leaves either no seal (the segment is scanned, as before seals) or a whole one. A writable open
writes the missing seal of every earlier segment it scanned cleanly (a crash between the roll
and the seal, or a journal from before seals), after an fsync of that segment. Creating a
segment first removes any stale seal of that name; ``repair`` backs up and removes the seals of
the segments it cuts or removes.

What each path checks:

    open    the name, order and header of every segment. An earlier segment whose seal decodes
            strictly, has the right CRC and consistent fields, whose ``size_bytes`` equals the
            file's size, and whose last frame (CRCs, seq ``first_seq + record_count - 1``, ending
            at the end of the file) is intact, is taken from the seal: its count and index,
            without reading its frames. Any other seal is ignored, never trusted: the segment is
            scanned, and damage found is ``JournalCorrupt`` as before. The last segment is always
            scanned, with the torn-tail rule above, and its seal (if any) ignored.
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
import shutil
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

from air import cbor
from air.errors import CborError, UsageError
from kernel.journal import (
    RECORD_BYTES_MAX,
    JournalCorrupt,
    JournalRecord,
    check_read_args,
    decode_record,
    decode_record_fast,
    filter_records,
    prepare_payload,
    record_prefix,
)
from world.fsutil import atomic_write, fsync_dir

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

SEGMENT_MAGIC: Final = b"WJRNL1\n"
SEGMENT_VERSION: Final = 1
SEGMENT_BYTES_MAX: Final = 64 * 1024 * 1024
_SEGMENT_HEADER: Final = struct.Struct("<7sBQ")
SEGMENT_HEADER_BYTES: Final = _SEGMENT_HEADER.size
_FRAME_HEAD: Final = struct.Struct("<III")
_LEN_CRC: Final = struct.Struct("<II")
FRAME_HEADER_BYTES: Final = _FRAME_HEAD.size
_SEGMENT_NAME_RE: Final = re.compile(r"(\d{20})\.log")
_INDEX_STRIDE: Final = 256  # a sparse seq -> offset index: one entry per this many records
_SECTOR_BYTES: Final = 512
_ZERO_CHUNK_MIN: Final = 8
_TORN_ALWAYS: Final = frozenset({"short_header", "short_payload"})
SEAL_SUFFIX: Final = ".seal"
_SEAL_FORMAT: Final = 1
_SEAL_KEYS: Final = frozenset(
    {
        "format",
        "first_seq",
        "record_count",
        "size_bytes",
        "last_frame_offset",
        "index_stride",
        "index_offsets",
        "crc32",
    }
)
_SEAL_BYTES_MAX: Final = 64 * 1024 * 1024  # a seal is ~8 bytes per 256 records; refuse absurd ones


def segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}.log"


def seal_name(segment: str) -> str:
    """The name of the seal of the segment file ``segment``."""
    return segment + SEAL_SUFFIX


def _frame_parts(payload: bytes) -> tuple[bytes, bytes]:
    length, crc = len(payload), zlib.crc32(payload)
    head = _LEN_CRC.pack(length, crc)
    return head + zlib.crc32(head).to_bytes(4, "little"), payload


# --- reports ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TornTail:
    """An incomplete last write, dropped on open: where it started, how many bytes, and why."""

    segment: str
    offset: int
    bytes_dropped: int
    reason: str


@dataclass(frozen=True, slots=True)
class JournalProblem:
    """The first bad place in a journal, as ``verify`` reports it (fields of ``JournalCorrupt``)."""

    segment: str
    offset: int
    seq: int | None
    reason: str
    detail: str = ""

    def error(self) -> JournalCorrupt:
        return JournalCorrupt(self.segment, self.offset, self.seq, self.reason, self.detail)


@dataclass(frozen=True, slots=True)
class VerifyReport:
    segments: tuple[str, ...]
    records: int
    seq_last_good: int | None
    problem: JournalProblem | None
    torn_tail: TornTail | None

    @property
    def ok(self) -> bool:
        """No corruption (a torn tail is not corruption: opening drops it)."""
        return self.problem is None


@dataclass(frozen=True, slots=True)
class RepairReport:
    changed: bool
    cut_segment: str | None
    cut_offset: int | None
    bytes_removed: int
    segments_moved: tuple[str, ...]
    backup_files: tuple[str, ...]
    seq_next: int
    before: VerifyReport


# --- scanning --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Bad:
    reason: str
    end: int | None = None  # where the frame ends, when its header could be trusted
    detail: str = ""


@dataclass(slots=True)
class _Segment:
    """What the journal knows about one segment: its records, size and sparse offset index."""

    name: str
    first_seq: int
    count: int = 0
    size: int = SEGMENT_HEADER_BYTES
    index: list[int] = field(default_factory=list)
    last_offset: int = 0  # of the last frame, when count > 0

    def add(self, offsets: Sequence[int], end: int) -> None:
        for offset in offsets:
            if self.count % _INDEX_STRIDE == 0:
                self.index.append(offset)
            self.count += 1
        if offsets:
            self.last_offset = offsets[-1]
        self.size = end


@dataclass(slots=True)
class _Scan:
    segments: list[_Segment] = field(default_factory=list)
    problem: JournalProblem | None = None
    torn: TornTail | None = None
    unsealed: list[_Segment] = field(default_factory=list)  # earlier segments scanned, not sealed

    @property
    def seq_next(self) -> int:
        last = self.segments[-1] if self.segments else None
        return 0 if last is None else last.first_seq + last.count


def _check_frame(data: bytes, view: memoryview, offset: int, seq: int, strict: bool) -> int | _Bad:
    """Check the frame at ``offset`` holding ``seq``; return where it ends, or what is wrong."""
    if len(data) - offset < FRAME_HEADER_BYTES:
        return _Bad("short_header")
    length: int
    length, crc, head_crc = _FRAME_HEAD.unpack_from(data, offset)
    if zlib.crc32(view[offset : offset + 8]) != head_crc:
        return _Bad("header_checksum")
    start, end = offset + FRAME_HEADER_BYTES, offset + FRAME_HEADER_BYTES + length
    if end > len(data):
        return _Bad("short_payload", end)
    if zlib.crc32(view[start:end]) != crc:
        return _Bad("payload_checksum", end)
    if not data.startswith(record_prefix(seq), start):
        return _Bad("seq_mismatch", end)
    if strict:
        try:
            decode_record(data[start:end])
        except CborError as exc:
            return _Bad("record_decode", end, f"{exc.pointer}: {exc.detail} [{exc.code}]")
    return end


def _all_zero(data: bytes, start: int, end: int) -> bool:
    return data.count(0, start, end) == end - start


def _has_zero_chunk(data: bytes, start: int, end: int) -> bool:
    while start < end:
        stop = min(end, (start // _SECTOR_BYTES + 1) * _SECTOR_BYTES)
        if stop - start >= _ZERO_CHUNK_MIN and _all_zero(data, start, stop):
            return True
        start = stop
    return False


def _torn_reason(data: bytes, offset: int, bad: _Bad) -> str | None:
    """Why the bad frame at ``offset`` of the last segment is a torn tail, or None if it is not."""
    if bad.reason in _TORN_ALWAYS:
        return bad.reason
    if _all_zero(data, offset, len(data)):
        return "zero_fill"
    if (
        bad.reason == "payload_checksum"
        and bad.end is not None
        and _all_zero(data, bad.end, len(data))
        and _has_zero_chunk(data, offset + FRAME_HEADER_BYTES, bad.end)
    ):
        return "partial_write"
    return None


def _check_segment_header(name: str, data: bytes, first_seq: int) -> JournalProblem | None:
    if len(data) < SEGMENT_HEADER_BYTES:
        return JournalProblem(name, 0, first_seq, "segment_header", "shorter than its header")
    magic, version, header_seq = _SEGMENT_HEADER.unpack_from(data)
    if magic != SEGMENT_MAGIC or version != SEGMENT_VERSION:
        return JournalProblem(name, 0, first_seq, "segment_header", "not a journal segment")
    if header_seq != first_seq:
        return JournalProblem(name, 0, first_seq, "segment_header", f"header says {header_seq}")
    return None


def _scan_segment(
    scan: _Scan, name: str, data: bytes, first_seq: int, is_last: bool, strict: bool
) -> None:
    """Append the segment to ``scan``; set ``scan.problem`` or ``scan.torn`` where it goes bad."""
    scan.problem = _check_segment_header(name, data, first_seq)
    if scan.problem is not None:
        return
    segment = _Segment(name, first_seq)
    scan.segments.append(segment)
    view, offset, offsets = memoryview(data), SEGMENT_HEADER_BYTES, list[int]()
    while offset < len(data):
        checked = _check_frame(data, view, offset, first_seq + len(offsets), strict)
        if isinstance(checked, _Bad):
            _classify(scan, name, data, offset, first_seq + len(offsets), checked, is_last)
            break
        offsets.append(offset)
        offset = checked
    segment.add(offsets, offset)


def _classify(
    scan: _Scan, name: str, data: bytes, offset: int, seq: int, bad: _Bad, is_last: bool
) -> None:
    torn = _torn_reason(data, offset, bad) if is_last else None
    if torn is None:
        scan.problem = JournalProblem(name, offset, seq, bad.reason, bad.detail)
    else:
        scan.torn = TornTail(name, offset, len(data) - offset, torn)


def _list_segments(directory: Path) -> list[tuple[int, str]]:
    if not directory.is_dir():
        return []
    found = (_SEGMENT_NAME_RE.fullmatch(entry.name) for entry in os.scandir(directory))
    return sorted((int(match.group(1)), match.group(0)) for match in found if match)


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


# --- seals -----------------------------------------------------------------------------------


def _encode_seal(segment: _Segment) -> bytes:
    fields = {
        "format": _SEAL_FORMAT,
        "first_seq": segment.first_seq,
        "record_count": segment.count,
        "size_bytes": segment.size,
        "last_frame_offset": segment.last_offset,
        "index_stride": _INDEX_STRIDE,
        "index_offsets": struct.pack(f"<{len(segment.index)}Q", *segment.index),
    }
    return cbor.dumps({**fields, "crc32": zlib.crc32(cbor.dumps(fields))})


def _decode_seal(data: bytes, name: str, first_seq: int) -> _Segment | None:
    """The segment a seal describes, or None if the seal is damaged or inconsistent."""
    try:
        fields = cbor.loads(data)
    except CborError:
        return None
    if type(fields) is not dict or fields.keys() != _SEAL_KEYS:
        return None
    crc = fields.pop("crc32")
    offsets_bytes = fields.pop("index_offsets")
    if type(offsets_bytes) is not bytes or any(type(value) is not int for value in fields.values()):
        return None
    if crc != zlib.crc32(cbor.dumps({**fields, "index_offsets": offsets_bytes})):
        return None
    count, size, last = fields["record_count"], fields["size_bytes"], fields["last_frame_offset"]
    strides = -(-count // _INDEX_STRIDE)
    if (
        (fields["format"], fields["index_stride"], fields["first_seq"])
        != (_SEAL_FORMAT, _INDEX_STRIDE, first_seq)
        or count < 1
        or len(offsets_bytes) != 8 * strides
    ):
        return None
    index = list(struct.unpack(f"<{strides}Q", offsets_bytes))
    ordered = all(a < b for a, b in zip(index, [*index[1:], last + 1], strict=True))
    if index[0] != SEGMENT_HEADER_BYTES or not ordered or last + FRAME_HEADER_BYTES >= size:
        return None
    return _Segment(name, first_seq, count, size, index, last)


def _trusted_seal(directory: Path, name: str, first_seq: int) -> _Segment | None:
    """The segment as its seal describes it, if the seal is whole and agrees with the file:
    same size, an intact header, and an intact last frame holding the last seq at the end."""
    try:
        with open(directory / seal_name(name), "rb") as file:
            data = file.read(_SEAL_BYTES_MAX + 1)
    except OSError:  # no seal (or an unreadable one): the segment is scanned
        return None
    segment = _decode_seal(data, name, first_seq) if len(data) <= _SEAL_BYTES_MAX else None
    if segment is None:
        return None
    with open(directory / name, "rb") as file:
        if os.fstat(file.fileno()).st_size != segment.size:
            return None
        header = file.read(SEGMENT_HEADER_BYTES)
        file.seek(segment.last_offset)
        frame = file.read(segment.size - segment.last_offset)
    if _check_segment_header(name, header, first_seq) is not None:
        return None
    last_seq = first_seq + segment.count - 1
    if _check_frame(frame, memoryview(frame), 0, last_seq, strict=False) != len(frame):
        return None
    return segment


def _write_seal(directory: Path, segment: _Segment) -> None:
    atomic_write(directory / seal_name(segment.name), _encode_seal(segment))


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
_READ_BUFFER_BYTES: Final = 1024 * 1024
_sync_data = getattr(os, "fdatasync", os.fsync)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _truncate(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def _prepare_directory(directory: Path) -> None:
    """Create the journal directory durably if needed and remove temp files of a crashed roll."""
    if not directory.is_dir():
        directory.mkdir(parents=True)
        fsync_dir(directory.parent)
    for entry in os.scandir(directory):
        if _TEMP_NAME_RE.fullmatch(entry.name):
            os.unlink(entry.path)


def _create_segment(directory: Path, first_seq: int) -> _Segment:
    """Create a segment holding only its header; a stale seal of that name goes first (the
    directory sync that makes the segment durable makes the removal durable too)."""
    name = segment_name(first_seq)
    header = _SEGMENT_HEADER.pack(SEGMENT_MAGIC, SEGMENT_VERSION, first_seq)
    (directory / seal_name(name)).unlink(missing_ok=True)
    atomic_write(directory / name, header)
    return _Segment(name, first_seq)


def _read_payload(file: BinaryIO, name: str, offset: int, seq: int) -> bytes:
    """Read and check the frame at the file's position (``offset``); return its payload."""
    head = file.read(FRAME_HEADER_BYTES)
    if len(head) < FRAME_HEADER_BYTES:
        raise JournalCorrupt(name, offset, seq, "short_header")
    length, crc, head_crc = _FRAME_HEAD.unpack(head)
    if zlib.crc32(head[:8]) != head_crc:
        raise JournalCorrupt(name, offset, seq, "header_checksum")
    payload: bytes = file.read(length)
    if len(payload) < length:
        raise JournalCorrupt(name, offset, seq, "short_payload")
    if zlib.crc32(payload) != crc:
        raise JournalCorrupt(name, offset, seq, "payload_checksum")
    return payload


def _decode_at(payload: bytes, name: str, offset: int, seq: int, strict: bool) -> JournalRecord:
    try:
        record = decode_record(payload) if strict else decode_record_fast(payload)
    except CborError as exc:
        raise JournalCorrupt(name, offset, seq, "record_decode", exc.code) from exc
    if record.seq != seq:
        raise JournalCorrupt(name, offset, seq, "seq_mismatch", f"record says {record.seq}")
    return record


def _read_segment(
    directory: Path, segment: _Segment, from_seq: int, end_seq: int, strict: bool
) -> Iterator[JournalRecord]:
    """Yield ``segment``'s records with ``from_seq <= seq < end_seq``, checking every frame."""
    stride = (from_seq - segment.first_seq) // _INDEX_STRIDE
    seq, offset = segment.first_seq + stride * _INDEX_STRIDE, segment.index[stride]
    with open(directory / segment.name, "rb", buffering=_READ_BUFFER_BYTES) as file:
        file.seek(offset)
        while seq < end_seq:
            payload = _read_payload(file, segment.name, offset, seq)
            if seq >= from_seq:
                yield _decode_at(payload, segment.name, offset, seq, strict)
            offset += FRAME_HEADER_BYTES + len(payload)
            seq += 1


# --- the journal -----------------------------------------------------------------------------


class FileJournal:
    """A ``Journal`` kept in segment files in ``directory`` (a world's ``journal/``).

    Opening drops a torn tail (see ``dropped``) and raises ``JournalCorrupt`` for anything else
    that is wrong. A writable open seals the earlier segments it had to scan (see the module
    docstring). ``readonly=True`` creates, truncates, seals and removes nothing (a torn tail is
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


def _backup(source: Path, backup_dir: Path) -> Path:
    target = backup_dir / source.name
    if target.exists():
        raise UsageError(f"backup {target} already exists")
    shutil.copyfile(source, target)
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return target


def repair(directory: str | os.PathLike[str], backup_dir: str | os.PathLike[str]) -> RepairReport:
    """Cut the journal after its last good record, backing up whatever is changed or removed.

    The segment holding the first bad frame is copied to ``backup_dir`` and truncated before that
    frame; later segments (and a segment whose header is bad) are copied and then removed. The
    seals of all these segments are copied and removed first, so that no seal outlives the bytes
    it describes. The copies are synced before any original is touched.
    """
    path, backup_path = Path(directory), Path(backup_dir)
    before = verify(path)
    cut = before.problem or before.torn_tail
    if cut is None:
        return RepairReport(False, None, None, 0, (), (), before.records, before)
    names = before.segments
    position = names.index(cut.segment)
    whole = cut.offset < SEGMENT_HEADER_BYTES
    moved = names[position:] if whole else names[position + 1 :]
    cut_names = () if whole else (cut.segment,)
    seals = [seal_name(name) for name in (*cut_names, *moved) if (path / seal_name(name)).exists()]
    backup_path.mkdir(parents=True, exist_ok=True)
    backups = [_backup(path / name, backup_path) for name in (*cut_names, *moved, *seals)]
    fsync_dir(backup_path)
    for seal in seals:
        os.unlink(path / seal)
    if seals:
        fsync_dir(path)
    removed = sum((path / name).stat().st_size for name in moved)
    if not whole:
        removed += (path / cut.segment).stat().st_size - cut.offset
        _truncate(path / cut.segment, cut.offset)
    for name in moved:
        os.unlink(path / name)
    fsync_dir(path)
    backup_names = tuple(str(file) for file in backups)
    return RepairReport(
        True, cut.segment, cut.offset, removed, moved, backup_names, before.records, before
    )
