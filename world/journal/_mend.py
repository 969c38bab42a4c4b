"""Putting a damaged *sealed* segment back as it was sealed, its seal's blake3 the proof: from a
copy, by undoing one changed byte per damaged stretch, or by re-framing records re-derived for a
damaged stretch; and reading, around the damage, what a re-derivation needs (the stretch, the
kind of its record, the records before it). A journal cut back to its last good record is
``world.journal._repair``'s; which way to try, and when, is ``world._repair``'s.

Restoring (``restore_segment``) is the repair that loses nothing: a damaged *sealed* segment is
replaced by a copy (from an archive: ``world._archive``) whose bytes have the blake3 its seal
holds, so the copy is the segment as it was sealed, byte for byte. The damaged file is backed
up first, like a cut segment; the copy goes in through a synced temp file and a rename. Where
no such copy exists the journal is cut as above.

Mending (``mend_segment``) is restoring without a copy, for the damage flipped bytes or bad
sector bytes leave: the seal's blake3 says what the whole file was, so a sealed segment whose
damaged stretches (each a frame whose CRCs fail, up to the next frame whose CRCs hold, at most
``MEND_FRAME_BYTES_MAX``) become, each with one byte changed, frames whose CRCs hold *and* a
file with the seal's blake3, is the segment as it was sealed: nothing is guessed, the digest
proves it. A damaged segment header is rebuilt from the file's name the same way. Every
one-byte change of a stretch is tried (the frame's CRCs first, the digest only for the
changes they accept, all stretches at once, as the digest is of the whole file). A stretch
with more than one damaged byte, or damage in the unsealed last segment (nothing vouches for
a candidate there), is not mended (``world._rederive`` may re-derive it).
"""

from __future__ import annotations

import itertools
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from air.errors import CborError, UsageError
from kernel.journal import JournalRecord, decode_record_fast
from kernel.subjects import is_kind
from world import _fileio as fileio
from world._fsutil import mkdir_durable
from world.errors import storage_errors
from world.journal._frames import (
    FRAME_HEADER_BYTES,
    SEGMENT_HEADER_BYTES,
    frame_batch,
    seal_name,
    segment_header,
)
from world.journal._repair import FRAME_HEAD, backup_file, salvage
from world.journal._seals import SealInfo, digest_bytes
from world.journal._segments import (
    fsync_dir,
    read_file,
    write_temp,
)

# --- mending from the seal ------------------------------------------------------------------

MEND_FRAME_BYTES_MAX: Final = 4096 + FRAME_HEADER_BYTES
"""The longest damaged stretch ``mend_segment`` tries every one-byte change of (~255 CRCs of
it per byte: under a second at this size)."""


MEND_STRETCHES_MAX: Final = 16
"""The most damaged stretches in one segment that ``mend_segment`` tries to mend together."""


def mend_segment(directory: str | os.PathLike[str], info: SealInfo) -> bytes | None:
    """The bytes of the sealed segment ``info`` describes with each damaged stretch (a frame
    whose CRCs fail, up to the next frame whose CRCs hold; a damaged segment header) undone by
    one changed byte, proven by the seal's blake3; None if no such changes give it (see the
    module docstring). Every stretch must be mended at once: the digest is of the whole file."""
    data = read_file(Path(directory) / info.name)
    if len(data) != info.size_bytes or not _damaged_pieces(data, info.first_seq):
        return None
    return _mended(data, info)


def _mended(data: bytes, info: SealInfo) -> bytes | None:
    """``data`` with each damaged stretch undone by one changed byte (none: as it is), if
    that gives the seal's blake3; else None."""
    pieces = _damaged_pieces(data, info.first_seq)
    if pieces is None:
        return None
    choices = itertools.product(*(candidates for _start, _end, candidates in pieces))
    for choice in itertools.islice(choices, 256):
        parts: list[bytes] = []
        position = 0
        for (start, end, _candidates), stretch in zip(pieces, choice, strict=True):
            parts += (data[position:start], stretch)
            position = end
        mended = b"".join([*parts, data[position:]])
        if digest_bytes(mended) == info.blake3:
            return mended
    return None


def _damaged_pieces(data: bytes, first_seq: int) -> list[tuple[int, int, list[bytes]]] | None:
    """``(start, end, one-byte changes that make it whole)`` of each damaged stretch of a
    segment's bytes, in order; None if one has no such change or there are too many."""
    pieces: list[tuple[int, int, list[bytes]]] = []
    header = segment_header(first_seq)
    if data[:SEGMENT_HEADER_BYTES] != header:
        pieces.append((0, SEGMENT_HEADER_BYTES, [header]))
    position = SEGMENT_HEADER_BYTES
    while position < len(data):
        end = _frame_end(data, position)
        if end is not None:
            position = end
            continue
        found = _next_frame(data, position, MEND_FRAME_BYTES_MAX)
        if found is None or len(pieces) >= MEND_STRETCHES_MAX:
            return None
        candidates = list(itertools.islice(_one_byte_changes(data[position:found]), 4))
        if not candidates:
            return None
        pieces.append((position, found, candidates))
        position = found
    return pieces


RESYNC_BYTES_MAX: Final = 1024 * 1024
"""How far past a damaged frame ``damaged_stretch`` looks for the next frame whose CRCs hold."""


@dataclass(frozen=True, slots=True)
class DamagedStretch:
    """The bytes ``offset .. end`` of sealed segment ``segment`` that held seqs ``seq_first ..
    seq_end - 1`` and do not read: the frames before and after them do."""

    segment: str
    offset: int
    end: int
    seq_first: int
    seq_end: int


def damaged_stretch(
    directory: str | os.PathLike[str], info: SealInfo, offset: int, seq: int
) -> DamagedStretch | None:
    """The damaged stretch of sealed segment ``info`` that starts with the frame of ``seq`` at
    ``offset``: up to the next frame whose CRCs hold and whose record decodes (its seq says
    how many were lost), or to the end of the file (the seal's record count says); None if
    that is not found within ``RESYNC_BYTES_MAX`` or the file is not the seal's size."""
    data = read_file(Path(directory) / info.name)
    if len(data) != info.size_bytes or offset < SEGMENT_HEADER_BYTES:
        return None
    end = _next_frame(data, offset, RESYNC_BYTES_MAX)
    if end is None:
        return None
    if end == len(data):
        seq_end = info.first_seq + info.record_count
    else:
        length = FRAME_HEAD.unpack_from(data, end)[0]
        try:
            start = end + FRAME_HEADER_BYTES
            seq_end = decode_record_fast(data[start : start + length]).seq
        except CborError:
            return None
    if seq_end <= seq:
        return None
    return DamagedStretch(info.name, offset, end, seq, seq_end)


def reframe(
    directory: str | os.PathLike[str],
    info: SealInfo,
    stretch: DamagedStretch,
    payloads: list[bytes],
) -> bytes | None:
    """The sealed segment's bytes with ``stretch`` replaced by the frames of ``payloads`` (the
    records it held, re-derived) and any other damaged stretch mended (``mend_segment``), if
    that gives the file the seal's blake3; else None."""
    data = read_file(Path(directory) / info.name)
    frames, _offsets = frame_batch(payloads)
    if len(frames) != stretch.end - stretch.offset:
        return None
    return _mended(data[: stretch.offset] + frames + data[stretch.end :], info)


_KIND_KEY: Final = b"\x64kind"  # the CBOR text "kind", a record map's key


def damaged_kind(directory: str | os.PathLike[str], segment: str, offset: int) -> str | None:
    """The kind the damaged frame at ``offset`` still shows, if its ``kind`` key and text
    survived the damage (a record's payload is ``{seq, body, kind, subject}`` in canonical
    CBOR); None if they did not. A hint for naming what was lost, never a record."""
    path = Path(directory) / segment
    if not path.is_file():
        return None
    data = read_file(path)
    if offset < SEGMENT_HEADER_BYTES or offset >= len(data):
        return None
    end = _next_frame(data, offset, RESYNC_BYTES_MAX) or len(data)
    found = data.find(_KIND_KEY, offset, end)
    start = found + len(_KIND_KEY)
    if found < 0 or start >= end:
        return None
    head = data[start]
    if 0x60 <= head <= 0x77:  # a text of up to 23 bytes: its length is in its head
        length, start = head - 0x60, start + 1
    elif head == 0x78 and start + 1 < end:
        length, start = data[start + 1], start + 2
    else:
        return None
    try:
        kind = data[start : start + length].decode()
    except UnicodeDecodeError:
        return None
    return kind if is_kind(kind) else None


def records_before(directory: str | os.PathLike[str], seq_end: int) -> Iterator[JournalRecord]:
    """The records ``0 .. seq_end - 1`` of the journal in ``directory``, which ``verify``
    found good (the first problem is at ``seq_end``); stops early at any that does not read."""
    for expected, record in enumerate(salvage(directory)):
        if record.seq != expected or expected >= seq_end:
            return
        yield record


def _frame_end(data: bytes, start: int) -> int | None:
    """Where the frame at ``start`` ends, if both its CRCs hold; else None."""
    if len(data) - start < FRAME_HEADER_BYTES:
        return None
    length, crc, head_crc = FRAME_HEAD.unpack_from(data, start)
    end = start + FRAME_HEADER_BYTES + length
    if zlib.crc32(data[start : start + 8]) != head_crc or end > len(data):
        return None
    return end if zlib.crc32(data[start + FRAME_HEADER_BYTES : end]) == crc else None


def _next_frame(data: bytes, offset: int, bytes_max: int) -> int | None:
    """The end of the damaged stretch from ``offset``: where the next frame whose CRCs hold
    starts (the damaged frame's own length first, if its header holds), or the end of the
    file; None if that is more than ``bytes_max`` away."""
    if len(data) - offset < FRAME_HEADER_BYTES:
        return len(data) if len(data) - offset <= bytes_max else None
    length, _crc, head_crc = FRAME_HEAD.unpack_from(data, offset)
    if zlib.crc32(data[offset : offset + 8]) == head_crc:
        end = offset + FRAME_HEADER_BYTES + length
        if end == len(data) or (end < len(data) and _frame_end(data, end) is not None):
            return end if end - offset <= bytes_max else None
    last = min(len(data), offset + bytes_max)
    for start in range(offset + FRAME_HEADER_BYTES + 1, last - FRAME_HEADER_BYTES + 1):
        if _frame_end(data, start) is not None:
            return start
    return len(data) if len(data) - offset <= bytes_max else None


def _one_byte_changes(frame: bytes) -> Iterator[bytes]:
    """Each way of changing one byte of ``frame`` that makes it a frame whose CRCs hold."""
    if len(frame) < FRAME_HEADER_BYTES:
        return
    length, crc, head_crc = FRAME_HEAD.unpack_from(frame)
    head, payload = frame[:FRAME_HEADER_BYTES], frame[FRAME_HEADER_BYTES:]
    if zlib.crc32(head[:8]) == head_crc:  # the header holds: the changed byte is the payload's
        if length == len(payload):
            yield from (head + changed for changed in _payload_changes(payload, crc))
        return
    for position in range(FRAME_HEADER_BYTES):
        for value in range(256):
            if value == head[position]:
                continue
            changed = head[:position] + bytes((value,)) + head[position + 1 :]
            length, crc, head_crc = FRAME_HEAD.unpack(changed)
            whole = zlib.crc32(changed[:8]) == head_crc and length == len(payload)
            if whole and zlib.crc32(payload) == crc:
                yield changed + payload


def _payload_changes(payload: bytes, crc: int) -> Iterator[bytes]:
    """Each one-byte change of ``payload`` whose CRC is ``crc`` (the CRC of the bytes before
    the changed one carried along, so each try costs the CRC of the bytes after it)."""
    before = 0
    for position, old in enumerate(payload):
        after = payload[position + 1 :]
        for value in range(256):
            if value != old and zlib.crc32(after, zlib.crc32(bytes((value,)), before)) == crc:
                yield payload[:position] + bytes((value,)) + after
        before = zlib.crc32(payload[position : position + 1], before)


# --- restoring -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RestoredSegment:
    """A damaged sealed segment put back from a copy whose blake3 is its seal's: ``records``
    records from seq ``seq_first``, read from ``source``; the damaged file (and the seal, when
    the copy's seal replaced it) kept in ``backup_files``. Nothing was cut."""

    segment: str
    seq_first: int
    records: int
    source: str
    backup_files: tuple[str, ...]
    seal_restored: bool

    def describe(self) -> str:
        last = self.seq_first + self.records - 1
        seal = " and its seal" if self.seal_restored else ""
        return (
            f"restored {self.segment}{seal} ({self.records} record(s), seq "
            f"{self.seq_first}..{last}) from {self.source}, whose blake3 is the seal's; "
            f"the damaged file is in {', '.join(self.backup_files)}"
        )

    def as_json(self) -> dict[str, Any]:
        """``{segment, seq_first, records, source, backup_files: [path], seal_restored}``."""
        return {
            "segment": self.segment,
            "seq_first": self.seq_first,
            "records": self.records,
            "source": self.source,
            "backup_files": list(self.backup_files),
            "seal_restored": self.seal_restored,
        }


def restore_segment(
    directory: str | os.PathLike[str],
    info: SealInfo,
    data: bytes,
    seal: bytes | None,
    *,
    source: str,
    backup_dir: str | os.PathLike[str],
) -> RestoredSegment:
    """Put ``data`` (a copy of the sealed segment ``info`` describes, whose blake3 the caller
    compared with ``info.blake3``) in place of the damaged segment in ``directory``, and
    ``seal`` (when given: the world's seal was missing or damaged) in place of its seal.

    The damaged files are copied to ``backup_dir`` and synced first; then each new file is
    written to a temp file, fsynced and renamed over the old one, and the directory fsynced:
    a crash leaves the damaged file or the good copy, never a mix."""
    if digest_bytes(data) != info.blake3 or len(data) != info.size_bytes:
        raise UsageError(f"the copy of {info.name} from {source} does not match its seal")
    path, backup_path = Path(directory), Path(backup_dir)
    names = [info.name] + ([seal_name(info.name)] if seal is not None else [])
    with storage_errors("mkdir", backup_path):
        mkdir_durable(backup_path)
    backups = [backup_file(path / name, backup_path) for name in names if (path / name).exists()]
    fsync_dir(backup_path)
    for name, content in zip(names, (data, seal), strict=False):
        assert content is not None
        temp = write_temp(path, name, content)
        with storage_errors("replace", path / name):
            fileio.replace(temp, path / name)
    fsync_dir(path)
    return RestoredSegment(
        info.name,
        info.first_seq,
        info.record_count,
        source,
        tuple(str(file) for file in backups),
        seal is not None,
    )
