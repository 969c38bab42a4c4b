"""Batches that are durable whole or not at all: the marker of an atomic commit.

A commit is one write and one ``fdatasync``; a crash or a power cut inside it leaves a prefix of
its records (``world.journal._commit``, "Crash"). For the journal's own rhythm (the ticks of a
run) a prefix is fine: nothing in it was acknowledged, and replay re-derives the rest. For a
batch of *inputs* (a ``world send --file``, a ``world cells import``) it is not: a prefix of a
batch that was never acknowledged would be durable, and the client's retry would duplicate it.
So ``FileJournal.commit(atomic=True)`` of more than one record first writes, durably, a marker
``journal/batch.pending``: the canonical CBOR map ``{format: 1, first_seq, count, digest}``
(``digest``: blake3 of the batch's first record payload), then the batch, and after the batch's
``fdatasync`` removes the marker (a removal that does not happen leaves a marker of a whole
batch, which is harmless).

Every scan of the journal (opening, ``refresh``, ``verify``) reads the marker: when the journal
ends inside the marked batch (``first_seq < seq_next < first_seq + count``) and the record at
``first_seq`` is the one the marker names, the batch's records are a torn tail (reason
``partial_batch``): a writable open cuts them, a reader stops before them. A marker that names
another record (a batch rolled back, whose seqs later records took), a whole batch or none at
all is left alone, and a writable open removes it. A marker that does not decode was torn while
it was written: no byte of its batch had been written yet.

Rejected: a flag in every frame saying "more of this commit follows" (it writes the commit
grouping into every frame, so a replay that commits differently could not reproduce a journal
byte for byte, and it changes the frame format of every existing world); and a batch frame
holding many records (every reader of frames would have to learn it). The marker costs two
fsyncs per atomic batch, none per record, and leaves the journal's bytes as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from air import cbor
from air.errors import CborError
from kernel.errors import JournalCorrupt
from world import _fileio as fileio
from world.errors import storage_error, storage_errors
from world.journal._frames import (
    _FRAME_HEAD,
    _INDEX_STRIDE,
    FRAME_HEADER_BYTES,
    SEGMENT_HEADER_BYTES,
    TornTail,
    _Scan,
    _scan_segment,
)
from world.journal._segments import fsync_dir, open_file, read_file, unlink, write_temp

__all__ = [
    "BATCH_NAME",
    "Marker",
    "clear_marker",
    "cut_partial_batch",
    "read_marker",
    "write_marker",
]

BATCH_NAME: Final = "batch.pending"
_FORMAT: Final = 1
_MARKER_BYTES_MAX: Final = 256  # ours are ~70 bytes; a larger file there is not a marker


@dataclass(frozen=True, slots=True)
class Marker:
    """An atomic batch in flight: ``count`` records from ``first_seq``, the first of which has
    the payload digest ``digest``."""

    first_seq: int
    count: int
    digest: bytes


def write_marker(directory: Path, marker: Marker) -> None:
    """Make ``marker`` durable (temp, fsync, rename, fsync the directory)."""
    data = cbor.dumps(
        {
            "format": _FORMAT,
            "first_seq": marker.first_seq,
            "count": marker.count,
            "digest": marker.digest,
        }
    )
    temp = write_temp(directory, BATCH_NAME, data)
    with storage_errors("replace", directory / BATCH_NAME):
        fileio.replace(temp, directory / BATCH_NAME)
    fsync_dir(directory)


def read_marker(directory: Path) -> Marker | None:
    """The marker in ``directory``; None if there is none or it does not decode (torn)."""
    path = directory / BATCH_NAME
    try:
        with open_file(path) as file:
            data = file.read(_MARKER_BYTES_MAX + 1)
    except (FileNotFoundError, JournalCorrupt):  # none, or not a file (so not ours)
        return None
    except OSError as exc:
        raise storage_error(exc, "read", path) from exc
    try:
        obj = cbor.loads(data)
    except CborError:  # torn, or not ours
        return None
    if not isinstance(obj, dict) or obj.get("format") != _FORMAT:
        return None
    first_seq, count, digest = obj.get("first_seq"), obj.get("count"), obj.get("digest")
    if type(first_seq) is not int or type(count) is not int or not isinstance(digest, bytes):
        return None
    return Marker(first_seq, count, digest)


def clear_marker(directory: Path) -> None:
    """Remove the marker, if any (not synced: a marker that comes back is harmless)."""
    unlink(directory / BATCH_NAME)


def cut_partial_batch(directory: Path, scan: _Scan, strict: bool) -> None:
    """If the scanned journal ends inside the batch the marker names, make the batch's records a
    torn tail (``partial_batch``) of ``scan``, with the last segment's view cut before them."""
    if scan.problem is not None or not scan.segments:
        return
    marker = read_marker(directory)
    if marker is None or not marker.first_seq < scan.seq_next < marker.first_seq + marker.count:
        return
    last = scan.segments[-1]
    if marker.first_seq < last.first_seq:
        return  # a batch never spans segments: not this journal's marker
    data = read_file(directory / last.name)
    offset = _frame_offset(data, last.index, last.first_seq, marker.first_seq)
    length = _FRAME_HEAD.unpack_from(data, offset)[0]
    payload = data[offset + FRAME_HEADER_BYTES : offset + FRAME_HEADER_BYTES + length]
    if cbor.digest(payload) != marker.digest:
        return  # the marker of a batch that was rolled back; these are other records
    kept = _Scan()
    _scan_segment(kept, last.name, data[:offset], last.first_seq, True, strict)
    scan.segments[-1] = kept.segments[-1]
    scan.torn = TornTail(last.name, offset, len(data) - offset, "partial_batch", marker.first_seq)


def _frame_offset(data: bytes, index: list[int], first_seq: int, seq: int) -> int:
    """The offset of frame ``seq`` in a segment's bytes, from its sparse index (every
    ``_INDEX_STRIDE``-th frame) and the frames' length fields."""
    position = seq - first_seq
    slot = min(position // _INDEX_STRIDE, len(index) - 1)
    offset = index[slot] if slot >= 0 else SEGMENT_HEADER_BYTES
    for _ in range(position - max(slot, 0) * _INDEX_STRIDE):
        offset += FRAME_HEADER_BYTES + _FRAME_HEAD.unpack_from(data, offset)[0]
    return offset
