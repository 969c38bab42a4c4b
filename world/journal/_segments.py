"""Journal segment files: listing them, opening one, reading its records with every check
again, writing a temp file, truncating, removing and syncing.

Private to ``world.journal``. Each helper touches one segment, seal or marker file; every durable
operation goes through ``world._fileio``, and an ``OSError`` leaves as a ``StorageError`` that
names the operation and the path. A FIFO, a device or a folder under a journal file's name is
never opened for reading (``open_file``). What the bytes of a segment mean, and the scan that
checks them at open, are ``world.journal._frames``; when to read, truncate and sync is
``world.journal._file``'s to decide.

Reading (``read_segment``) checks both CRCs and the seq of every frame again, whatever a seal
said, so damage that appears after open is reported by the first read that reaches it.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

from air.errors import CborError
from kernel.errors import JournalCorrupt
from kernel.journal import JournalRecord, decode_record, decode_record_fast
from world import _fileio as fileio
from world.errors import storage_error, storage_errors
from world.journal._frames import (
    _FRAME_HEAD,
    _INDEX_STRIDE,
    _SEGMENT_NAME_RE,
    FRAME_HEADER_BYTES,
    SEGMENT_HEADER_BYTES,
    _check_segment_header,
    _Segment,
)

_TEMP_SUFFIX: Final = ".new.tmp"


def list_segments(directory: Path) -> list[tuple[int, str]]:
    """``(first seq, name)`` of every segment file in ``directory``, in order."""
    try:
        if not directory.is_dir():
            return []
        found = [_SEGMENT_NAME_RE.fullmatch(entry.name) for entry in os.scandir(directory)]
    except OSError as exc:
        raise storage_error(exc, "list", directory) from exc
    return sorted((int(match.group(1)), match.group(0)) for match in found if match)


def open_file(path: Path, buffering: int = -1) -> BinaryIO:
    """Open a journal file (a segment, a seal, the batch marker) for reading: a regular file
    only. A FIFO, a device or a folder under a segment's name is never opened for reading (a
    FIFO would block the open forever, a device would read without end): it is
    ``JournalCorrupt`` naming the file (reason ``segment_header``, the detail saying what it
    is). ``OSError`` otherwise, as ``open``."""
    return fileio.open_regular(path, damaged=_not_a_file, buffering=buffering)


def _not_a_file(path: str, what: str) -> JournalCorrupt:
    return JournalCorrupt(os.path.basename(path), 0, None, "segment_header", what)


def read_file(path: Path, start: int = 0) -> bytes:
    """The bytes of ``path`` from ``start`` on (``open_file``)."""
    with storage_errors("read", path), open_file(path) as file:
        file.seek(start)
        return file.read()


# --- temp files ------------------------------------------------------------------------------


def write_temp(directory: Path, name: str, data: bytes) -> Path:
    """Write ``data`` to the temp file of ``name`` and fsync it; return the temp file's path
    (``.<name>.new.tmp``: a writable open removes any it finds)."""
    temp = directory / f".{name}{_TEMP_SUFFIX}"
    with storage_errors("create", temp):
        fd = fileio.create(temp)
    try:
        with storage_errors("write", temp):
            fileio.write(fd, data, temp)
        with storage_errors("fsync", temp):
            fileio.fsync(fd, temp)
    finally:
        os.close(fd)
    return temp


# --- segment files ---------------------------------------------------------------------------

_READ_BUFFER_BYTES: Final = 1024 * 1024


def truncate(path: Path, size: int) -> None:
    with storage_errors("truncate", path):
        fileio.truncate(path, size)


def unlink(path: Path) -> None:
    with storage_errors("unlink", path):
        fileio.unlink(path, missing_ok=True)


def fsync_dir(path: Path) -> None:
    with storage_errors("fsync_dir", path):
        fileio.fsync_dir(path)


def fsync_file(path: Path) -> None:
    with storage_errors("fsync", path):
        fileio.fsync_file(path)


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


def decode_at(payload: bytes, name: str, offset: int, seq: int, strict: bool) -> JournalRecord:
    try:
        record = decode_record(payload) if strict else decode_record_fast(payload)
    except CborError as exc:
        raise JournalCorrupt(name, offset, seq, "record_decode", exc.code) from exc
    if record.seq != seq:
        raise JournalCorrupt(name, offset, seq, "seq_mismatch", f"record says {record.seq}")
    return record


def read_segment(
    directory: Path, segment: _Segment, from_seq: int, end_seq: int, strict: bool
) -> Iterator[JournalRecord]:
    """Yield ``segment``'s records with ``from_seq <= seq < end_seq``, checking every frame."""
    stride = (from_seq - segment.first_seq) // _INDEX_STRIDE
    seq, offset = segment.first_seq + stride * _INDEX_STRIDE, segment.index[stride]
    path = directory / segment.name
    with storage_errors("read", path), open_file(path, _READ_BUFFER_BYTES) as file:
        file.seek(offset)
        while seq < end_seq:
            payload = _read_payload(file, segment.name, offset, seq)
            if seq >= from_seq:
                yield decode_at(payload, segment.name, offset, seq, strict)
            offset += FRAME_HEADER_BYTES + len(payload)
            seq += 1


def read_genesis(directory: Path) -> JournalRecord | None:
    """Record 0 of the journal in ``directory``, read from its first segment with every check
    a read makes; None if there is no segment starting at seq 0. ``JournalCorrupt`` if it is
    damaged. (What names a world: ``world._archive``.)"""
    listed = list_segments(directory)
    if not listed or listed[0][0] != 0:
        return None
    name = listed[0][1]
    path = directory / name
    with storage_errors("read", path), open_file(path) as file:
        problem = _check_segment_header(name, file.read(SEGMENT_HEADER_BYTES), 0)
        if problem is not None:
            raise problem.error()
        payload = _read_payload(file, name, SEGMENT_HEADER_BYTES, 0)
    return decode_at(payload, name, SEGMENT_HEADER_BYTES, 0, strict=True)
