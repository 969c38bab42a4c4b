"""Journal segments on disk: the frame format, scanning one segment, the torn-tail rule, seals.

Private to ``world.journal``, which re-exports the public names here (the format constants,
``segment_name``, ``seal_name``, ``TornTail``, ``JournalProblem``) and decides when to scan,
truncate, seal and read. The checks are pure (bytes in, a verdict out); the file helpers each
touch one segment or one seal file. Not here: the order of segments in a journal and the walk
over them, the writer, and repair (``world.journal``, ``world._journal_repair``).

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

Opening (``world.journal``) scans the last segment, and every earlier segment without a trusted
seal (below), in order, and checks each frame's header CRC, payload CRC and seq (from the
payload's fixed prefix, without decoding). The first bad frame decides. It is a **torn tail**
(dropped: the segment is truncated there and fsynced, and ``FileJournal.dropped`` says where and
how much) only if it is in the last segment and one of these holds:

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

Reading (``_read_segment``) checks both CRCs and the seq of every frame again, whatever a seal
said, so damage inside a sealed segment is reported by the first read that reaches it.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final

from air import cbor
from air.errors import CborError
from kernel.journal import (
    JournalCorrupt,
    JournalRecord,
    decode_record,
    decode_record_fast,
    record_prefix,
)
from world.fsutil import atomic_write

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


# --- segment files ---------------------------------------------------------------------------

_READ_BUFFER_BYTES: Final = 1024 * 1024


def _truncate(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


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
