"""Journal seals: what a full segment's ``<segment>.seal`` holds, when opening trusts one, and
when ``verify`` calls one stale.

When the writer rolls over, it writes ``<segment>.seal`` next to the full segment (temp,
fsync, rename, fsync dir): the canonical CBOR map

    format 2 | first_seq | record_count | size_bytes (the segment file's length)
    | last_frame_offset | index_stride (256) | index_offsets (u64 LE offset of every 256th frame)
    | blake3 (32 bytes: the digest of the segment file's bytes)
    | crc32 (of the canonical CBOR of the map without this field)

Every frame of the segment was synced by the commit that wrote it, before the roll, so a crash
leaves either no seal (the segment is scanned, as before seals) or a whole one. Opening trusts a
seal only if it decodes strictly, its CRC and fields agree, the file has ``size_bytes``, and its
header and last frame are intact (``trusted_seal``); ``verify`` also compares the blake3 of the
file with the seal's (``stale_seal``), and every read checks each frame's CRCs, so a flipped
byte in a sealed segment is reported by the first command that reads it. A seal of format 1 (no
digest) is not trusted: the segment is scanned, and a writable open seals it again. A writable
open writes the missing seal of every earlier segment it scanned cleanly, after an fsync of that
segment. Creating a segment first removes any stale seal of that name; ``repair`` backs up and
removes the seals of the segments it cuts.

Rejected (it was ``world.journal._file``'s rule for a while): comparing every seal's blake3 at every open,
so that bit rot in an old sealed segment was noticed by ``world info``, ``send`` and ``run``.
It read the whole journal at every open: at 1,000,000 events (~400 MB in 6 sealed segments) the
digests alone took 0.31 s, against issue 9's 0.4 s for a whole ``send``, and they grow with the
journal. Damage in a segment no command reads is found by ``world journal verify`` and by the
first replay or time-travel read that reaches it; ``--repair`` then puts back the archive's
copy whose blake3 is the seal's (``world._archive``), or without one the bytes the seal's blake3
proves (a byte undone, records re-derived: ``world._repair``), and cuts only where neither does.

Private to ``world.journal._file``; it builds on ``world.journal._frames`` (the segment record, the
frame and header checks) and ``world.journal._segments`` (the files).
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

import blake3

from air import cbor
from air.errors import CborError
from kernel.errors import JournalCorrupt
from world import _fileio as fileio
from world.errors import storage_errors
from world.journal._frames import (
    _INDEX_STRIDE,
    FRAME_HEADER_BYTES,
    SEGMENT_HEADER_BYTES,
    _check_frame,
    _check_segment_header,
    _Segment,
    seal_name,
)
from world.journal._segments import fsync_dir, fsync_file, open_file, write_temp

__all__ = [
    "SealInfo",
    "digest_bytes",
    "read_seal_info",
    "seal_bytes",
    "seal_scanned",
    "stale_seal",
    "trusted_seal",
]

_SEAL_FORMAT: Final = 2
_SEAL_KEYS: Final = frozenset(
    {
        "format",
        "first_seq",
        "record_count",
        "size_bytes",
        "last_frame_offset",
        "index_stride",
        "index_offsets",
        "blake3",
        "crc32",
    }
)
_SEAL_BYTES_MAX: Final = 64 * 1024 * 1024  # a seal is ~8 bytes per 256 records; refuse absurd ones


def _digest(file: BinaryIO, size: int) -> bytes:
    """blake3 of the first ``size`` bytes of ``file``, without copying them. On one thread: a
    multi-threaded blake3 would start rayon's global pool, which lives as long as the process
    and does not survive a ``fork``."""
    with mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as view:
        return blake3.blake3(view).digest()


def _encode_seal(segment: _Segment, digest: bytes) -> bytes:
    fields = {
        "format": _SEAL_FORMAT,
        "first_seq": segment.first_seq,
        "record_count": segment.count,
        "size_bytes": segment.size,
        "last_frame_offset": segment.last_offset,
        "index_stride": _INDEX_STRIDE,
        "index_offsets": struct.pack(f"<{len(segment.index)}Q", *segment.index),
        "blake3": digest,
    }
    return cbor.dumps({**fields, "crc32": zlib.crc32(cbor.dumps(fields))})


def _decode_seal(data: bytes, name: str, first_seq: int) -> tuple[_Segment, bytes] | None:
    """The segment a seal describes and its digest, or None if the seal is damaged, inconsistent
    or of another format."""
    try:
        fields = cbor.loads(data)
    except CborError:
        return None
    if type(fields) is not dict or fields.keys() != _SEAL_KEYS:
        return None
    crc, offsets_bytes, digest = fields.pop("crc32"), fields.pop("index_offsets"), fields["blake3"]
    if type(offsets_bytes) is not bytes or type(digest) is not bytes or len(digest) != 32:
        return None
    if any(type(value) is not int for key, value in fields.items() if key != "blake3"):
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
    return _Segment(name, first_seq, count, size, index, last), digest


def _read_seal(directory: Path, name: str, first_seq: int) -> tuple[_Segment, bytes] | None:
    """The segment and digest ``name``'s seal holds; None if there is no seal or it does not
    read or decode strictly."""
    try:
        with open_file(directory / seal_name(name)) as file:
            data = file.read(_SEAL_BYTES_MAX + 1)
    except (OSError, JournalCorrupt):  # not a regular file: as a damaged seal, the segment is
        return None  # scanned (and a writable open writes a new seal over it)
    return _decode_seal(data, name, first_seq) if len(data) <= _SEAL_BYTES_MAX else None


@dataclass(frozen=True, slots=True)
class SealInfo:
    """What a seal that decodes strictly says of its segment: its first seq, record count,
    size and blake3 (for the archive and the verify cache, which compare digests)."""

    name: str
    first_seq: int
    record_count: int
    size_bytes: int
    blake3: bytes


def read_seal_info(directory: Path, name: str) -> SealInfo | None:
    """What ``name``'s seal in ``directory`` says (``name`` is a segment file name); None if
    there is no seal or it does not decode strictly."""
    try:
        first_seq = int(name.removesuffix(".log"))
    except ValueError:
        return None
    sealed = _read_seal(directory, name, first_seq)
    if sealed is None:
        return None
    segment, digest = sealed
    return SealInfo(name, first_seq, segment.count, segment.size, digest)


def digest_bytes(data: bytes) -> bytes:
    """The blake3 a seal would hold for a segment of these bytes (one thread: ``_digest``)."""
    return blake3.blake3(data).digest()


def trusted_seal(directory: Path, name: str, first_seq: int) -> _Segment | None:
    """The segment as its seal describes it, if the seal is whole and agrees with the file:
    same size, an intact header, and an intact last frame holding the last seq at the end.
    None sends the segment to a scan.

    The seal's blake3 is not compared here: that reads the whole segment, and opening must cost
    what the command needs, not the journal's size (at 1,000,000 events, ~400 MB of sealed
    segments took 0.31 s of digests on every open). Every read checks each frame's CRCs, and
    ``stale_seal`` (run by ``verify``) compares the digest."""
    sealed = _read_seal(directory, name, first_seq)
    if sealed is None:  # no seal, an unreadable or a damaged one: the segment is scanned
        return None
    segment, _digest_unchecked = sealed
    with storage_errors("read", directory / name), open_file(directory / name) as file:
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


def stale_seal(directory: Path, name: str, first_seq: int) -> bool:
    """Whether ``name`` has a seal that decodes but whose blake3 is not that of the file (or
    whose size is not the file's): a seal that no longer describes its segment."""
    sealed = _read_seal(directory, name, first_seq)
    if sealed is None:
        return False
    segment, digest = sealed
    with storage_errors("read", directory / name), open_file(directory / name) as file:
        if os.fstat(file.fileno()).st_size != segment.size:
            return True
        return _digest(file, segment.size) != digest


def seal_bytes(directory: Path, segment: _Segment) -> bytes:
    """The seal of ``segment``, with the digest of its file's bytes as they are now."""
    with (
        storage_errors("read", directory / segment.name),
        open_file(directory / segment.name) as file,
    ):
        return _encode_seal(segment, _digest(file, segment.size))


def seal_scanned(directory: Path, segments: Iterable[_Segment]) -> None:
    """Seal earlier segments that open had to scan, once their bytes are surely durable."""
    sealed = False
    for segment in segments:
        fsync_file(directory / segment.name)
        target = directory / seal_name(segment.name)
        temp = write_temp(directory, target.name, seal_bytes(directory, segment))
        with storage_errors("replace", target):
            fileio.replace(temp, target)
        sealed = True
    if sealed:
        fsync_dir(directory)
