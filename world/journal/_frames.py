"""Journal segments as bytes: the frame format, the scan of one segment, the torn-tail rule.

Pure: bytes in, a verdict out (``_scan_segment`` fills a ``_Scan``; nothing here opens a file).
Private to ``world.journal``: ``world.journal._file`` re-exports the public names here (the
format constants, ``segment_name``, ``seal_name``, ``TornTail``) and decides when to scan,
truncate, seal and read. Not here: the files themselves (listing, opening, reading a segment
with every check, temp files, truncation, syncs: ``world.journal._segments``), the order of
segments in a journal and the walk over them (``world.journal._file``), repair
(``world.journal._repair``), seals (``world.journal._seals``).

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

Opening (``world.journal._file``) scans the last segment, and every earlier segment without a trusted
seal (``world.journal._seals``), in order, and checks each frame's header CRC, payload CRC and seq
(from the payload's fixed prefix, without decoding). The first bad frame decides. It is a **torn tail**
(dropped: a writable open truncates the segment there and a reader stops before it;
``FileJournal.dropped`` says where and how much) only if it is in the last segment and one of
these holds:

    short_header   fewer than 12 bytes remain;
    short_payload  the header is intact and its length runs past the end of the file;
    zero_fill      every byte from the frame to the end of the file is zero (a power loss after
                   the file grew but before its pages were written);
    partial_write  the header is intact, the payload CRC fails, a 512-byte-aligned chunk of the
                   payload (at least 8 bytes) is all zeros, and only zeros follow the frame.

Everything else raises ``JournalCorrupt(segment, offset, seq, reason)``: a bad frame followed by
real data, any bad frame in an earlier segment, a bad CRC with no sign of a partial write (bit
rot in the last record is reported, not dropped), a seq gap, a foreign segment header.
A ``kill -9`` always leaves a prefix of the last write, so it is always torn; a power loss that
persisted a later page of the final write but not an earlier one is reported as corruption, and
``repair`` cuts it (no such record was ever acknowledged, since ``commit`` had not returned).
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from air.errors import CborError
from kernel.errors import JournalProblem
from kernel.journal import decode_record, record_prefix

SEGMENT_MAGIC: Final = b"WJRNL1\n"
SEGMENT_VERSION: Final = 1
# Every open scans the whole last segment (~1 µs a frame), so this bounds what an open costs:
# 8 MiB is ~40,000 records of a keyed counter, ~40 ms. Earlier segments cost a few small reads
# each (``trusted_seal``), so more of them cost little; 64 MiB made a full last segment a
# ~0.3 s scan, most of issue 9's 0.4 s budget for a whole `world send`.
SEGMENT_BYTES_MAX: Final = 8 * 1024 * 1024
_SEGMENT_HEADER: Final = struct.Struct("<7sBQ")
SEGMENT_HEADER_BYTES: Final = _SEGMENT_HEADER.size
_FRAME_HEAD: Final = struct.Struct("<III")
_LEN_CRC: Final = struct.Struct("<II")
FRAME_HEADER_BYTES: Final = _FRAME_HEAD.size
FRAME_PAYLOAD_BYTES_MAX: Final = 2**32 - 1
_SEGMENT_NAME_RE: Final = re.compile(r"(\d{20})\.log")
_INDEX_STRIDE: Final = 256  # a sparse seq -> offset index: one entry per this many records
_SECTOR_BYTES: Final = 512
_ZERO_CHUNK_MIN: Final = 8
_TORN_ALWAYS: Final = frozenset({"short_header", "short_payload"})
TORN_REASONS: Final = frozenset(
    {"short_header", "short_payload", "zero_fill", "partial_write", "partial_batch"}
)
SEAL_SUFFIX: Final = ".seal"


def segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}.log"


def seal_name(segment: str) -> str:
    """The name of the seal of the segment file ``segment``."""
    return segment + SEAL_SUFFIX


def segment_header(first_seq: int) -> bytes:
    return _SEGMENT_HEADER.pack(SEGMENT_MAGIC, SEGMENT_VERSION, first_seq)


def frame_batch(payloads: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """The frames of one commit, joined, and each frame's offset from the start of the batch."""
    parts, offsets, end = list[bytes](), list[int](), 0
    crc32, pack = zlib.crc32, _LEN_CRC.pack
    for payload in payloads:
        head = pack(len(payload), crc32(payload))
        parts += (head, crc32(head).to_bytes(4, "little"), payload)
        offsets.append(end)
        end += FRAME_HEADER_BYTES + len(payload)
    return b"".join(parts), offsets


# --- reports ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TornTail:
    """An incomplete last write: where it starts, the seq it would have held, how many bytes,
    and how it is torn (one of ``TORN_REASONS``). A writable open cuts it; a reader stops before
    it."""

    segment: str
    offset: int
    bytes_dropped: int
    reason: str
    seq: int

    def problem(self) -> JournalProblem:
        """The torn tail as a finding: reason ``torn_tail``, detail the kind and the bytes."""
        detail = f"{self.reason}, {self.bytes_dropped} bytes"
        return JournalProblem(self.segment, self.offset, self.seq, "torn_tail", detail)

    def as_json(self) -> dict[str, Any]:
        """``{segment, offset, seq, bytes_dropped, reason}``."""
        return {
            "segment": self.segment,
            "offset": self.offset,
            "seq": self.seq,
            "bytes_dropped": self.bytes_dropped,
            "reason": self.reason,
        }


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

    def add(self, offsets: Sequence[int], base: int, end: int) -> None:
        """Count frames at ``base + offset`` for each offset; the segment now ends at ``end``."""
        for offset in offsets:
            if self.count % _INDEX_STRIDE == 0:
                self.index.append(base + offset)
            self.count += 1
        if offsets:
            self.last_offset = base + offsets[-1]
        self.size = end

    def copy(self) -> _Segment:
        return _Segment(
            self.name, self.first_seq, self.count, self.size, [*self.index], self.last_offset
        )


@dataclass(slots=True)
class _Scan:
    segments: list[_Segment] = field(default_factory=list)
    problem: JournalProblem | None = None
    torn: TornTail | None = None
    unsealed: list[_Segment] = field(default_factory=list)  # earlier segments scanned, not sealed
    from_seals: list[str] = field(default_factory=list)  # earlier segments taken from their seal

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
    start = offset + FRAME_HEADER_BYTES
    end = start + length
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


def _has_zero_chunk(data: bytes, start: int, end: int, base: int) -> bool:
    """Whether ``data[start:end]`` holds a sector-aligned run of zeros (``data`` is the file
    from byte ``base`` on)."""
    while start < end:
        stop = min(end, ((base + start) // _SECTOR_BYTES + 1) * _SECTOR_BYTES - base)
        if stop - start >= _ZERO_CHUNK_MIN and _all_zero(data, start, stop):
            return True
        start = stop
    return False


def _torn_reason(data: bytes, offset: int, bad: _Bad, base: int) -> str | None:
    """Why the bad frame at ``offset`` of the last segment is a torn tail, or None if it is not."""
    if bad.reason in _TORN_ALWAYS:
        return bad.reason
    if _all_zero(data, offset, len(data)):
        return "zero_fill"
    if (
        bad.reason == "payload_checksum"
        and bad.end is not None
        and _all_zero(data, bad.end, len(data))
        and _has_zero_chunk(data, offset + FRAME_HEADER_BYTES, bad.end, base)
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
    scan: _Scan,
    name: str,
    data: bytes,
    first_seq: int,
    is_last: bool,
    strict: bool,
    resume: _Segment | None = None,
) -> None:
    """Append the segment to ``scan``; set ``scan.problem`` or ``scan.torn`` where it goes bad.

    ``data`` is the whole file, or with ``resume`` (what an earlier scan knew) the file from
    ``resume.size`` on.
    """
    if resume is None:
        scan.problem = _check_segment_header(name, data, first_seq)
        if scan.problem is not None:
            return
        segment, base, offset = _Segment(name, first_seq), 0, SEGMENT_HEADER_BYTES
    else:
        segment, base, offset = resume, resume.size, 0
    scan.segments.append(segment)
    view, seq = memoryview(data), segment.first_seq + segment.count
    offsets = [] if strict else _good_frames(data, view, offset, seq)
    if offsets:
        offset = _FRAME_HEAD.unpack_from(data, offsets[-1])[0] + offsets[-1] + FRAME_HEADER_BYTES
    while offset < len(data):
        checked = _check_frame(data, view, offset, seq + len(offsets), strict)
        if isinstance(checked, _Bad):
            _classify(scan, name, data, (base, offset), seq + len(offsets), checked, is_last)
            break
        offsets.append(offset)
        offset = checked
    segment.add(offsets, base, base + offset)


def _good_frames(data: bytes, view: memoryview, offset: int, seq: int) -> list[int]:
    """The offsets of the frames from ``offset`` on that pass ``_check_frame`` (not strict), up
    to the first that does not (which the caller checks again, to learn why).

    The same checks as ``_check_frame``, inlined: opening scans the whole last segment, and a
    call per frame was half the cost (~1.8 µs a frame against ~0.9 µs here).
    """
    offsets: list[int] = []
    size, unpack, crc32 = len(data), _FRAME_HEAD.unpack_from, zlib.crc32
    fixed, width, run_end = b"", 0, seq
    while size - offset >= FRAME_HEADER_BYTES:
        length, crc, head_crc = unpack(data, offset)
        start = offset + FRAME_HEADER_BYTES
        end = start + length
        if seq >= run_end:
            fixed, width, run_end = _prefix_run(seq)
        prefix = fixed + seq.to_bytes(width, "big") if width else fixed
        if (
            crc32(view[offset : offset + 8]) != head_crc
            or end > size
            or crc32(view[start:end]) != crc
            or not data.startswith(prefix, start)
        ):
            break
        offsets.append(offset)
        offset, seq = end, seq + 1
    return offsets


def _prefix_run(seq: int) -> tuple[bytes, int, int]:
    """``(fixed, width, end)``: for every ``s`` from ``seq`` up to ``end``, ``record_prefix(s)``
    is ``fixed`` followed by ``s`` in ``width`` big-endian bytes (CBOR's uint head keeps its
    width over these runs; below 24 the value is in the head byte, so each run is one seq)."""
    full = record_prefix(seq)
    if seq < 24:
        return full, 0, seq + 1
    for width, end in ((1, 0x100), (2, 0x1_0000), (4, 0x1_0000_0000)):
        if seq < end:
            return full[:-width], width, end
    return full[:-8], 8, 2**64


def _classify(
    scan: _Scan,
    name: str,
    data: bytes,
    where: tuple[int, int],
    seq: int,
    bad: _Bad,
    is_last: bool,
) -> None:
    """Record the bad frame at ``where`` (base of ``data`` in the file, offset in ``data``)."""
    base, offset = where
    torn = _torn_reason(data, offset, bad, base) if is_last else None
    if torn is None:
        scan.problem = JournalProblem(name, base + offset, seq, bad.reason, bad.detail)
    else:
        scan.torn = TornTail(name, base + offset, len(data) - offset, torn, seq)
