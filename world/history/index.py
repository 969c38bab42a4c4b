"""An index of each cell's journal records, so that time travel reads one cell, not the journal.

``world cells show --at SEQ`` re-executes a cell's own steps (``world.history._timetravel``); without an
index, finding them means reading every record of the journal (~7 s at 1,000,000 events). This
index lists, per cell, the seqs of its records (subjects ``/world/cell/<reducer>/<key hash>/...``)
and, now and then, the cell's state right after one of its steps, so that re-execution starts
from the nearest such state instead of the cell's first step. It is derived data: a world whose
index is missing, damaged or behind works as before, and readers fall back to reading the
journal for any stretch the index does not cover.

Layout (``<world>/cache/history/``)::

    ranges.cbor     the commit record: {format, genesis, ranges: [[seq_from, seq_to]],
                    sizes: [256 shard sizes]} (replaced by a rename)
    <2 hex>.log     one of 64 shards (by the cell's key hash): batches, each
                    header "<4sQQII": magic, seq_from, seq_to, payload length, crc32(payload)
                    payload: one group per cell, "<8sII": key hash (first 8 bytes), count,
                    state length; then count seqs (u64 LE, ascending), then the state bytes

A cell id is its subject without the leaf: ``/world/cell/<reducer>/<key hash hex>``. A group
with a state carries the cell's state CBOR right after its last seq, which is one of the cell's
steps; a reader uses it only after checking it against the ``state_hash`` that step journaled.

Writing (a writable world only). The world asks its journal to note every cell record it
appends (``FileJournal.watch``). ``flush`` (at a checkpoint, at close, and every
``FLUSH_ENTRIES`` noted records) appends one batch to each shard that has entries, then
replaces ``ranges.cbor`` (temp and rename) with the new sizes and the range ``[seq_from,
seq_to)`` it now covers. A crash between the appends and the rename leaves bytes past the
recorded sizes, which readers ignore and the next flush cuts off first. Nothing is fsynced: the
index is derived, and a reader checks what it reads (each shard has exactly its recorded size
and is whole batches with good CRCs, ``ranges.cbor`` decodes), so what a power loss can do to
unsynced files (a shorter file, zeros, an old ``ranges.cbor``) makes readers ignore the index
and the next writer start a new one; it never makes them trust a wrong entry. Nor does a FIFO,
a device or a folder in place of one of its files: it is read by ``world._fileio``'s safe
reader, which refuses it unopened, and counts as damage. A flush costs no
sync on the path of a ``world send`` or a checkpoint. Records a world re-executed at open (a crash before its last flush) fall in a gap
between ranges: readers read those from the journal.

A journal that no longer holds what the index describes (its record 0 is another, or it ends
before the last range: a repair cut it, or the world was forked or migrated with its cache) makes
the writer start a new index and readers ignore the old one. Not here: which records to
re-execute and how (``world.history._timetravel``).
"""

from __future__ import annotations

import os
import stat
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import blake3

from air import cbor
from air.errors import CborError
from kernel import Kernel
from kernel.cells import CellStore
from kernel.journal import JournalRecord
from world import _fileio as fileio
from world._fsutil import write_unsynced
from world.errors import StorageError, StoreDamaged
from world.journal import FileJournal

__all__ = [
    "CELL_PREFIX",
    "FLUSH_ENTRIES",
    "RANGES_BYTES_MAX",
    "SINCE_STATE_CELLS_MAX",
    "STATE_BYTES_MAX",
    "STATE_EVERY",
    "CellRecords",
    "HistoryWriter",
    "cell_id",
    "genesis_digest",
    "read_cell",
]

CELL_PREFIX: Final = "/world/cell/"
FLUSH_ENTRIES: Final = 16_384
"""Noted records kept in memory before a flush (~50 bytes each)."""
STATE_EVERY: Final = 64
"""A flush stores a cell's state when it stepped this many times since its last stored state,
so a time-travel read re-executes at most about this many steps (or one flush's worth)."""
STATE_BYTES_MAX: Final = 4096
"""Larger states are not stored (the reader re-executes from an earlier one)."""
SINCE_STATE_CELLS_MAX: Final = 262_144
"""Cells whose steps since their last stored state a writer counts (~150 bytes each); past
this the counts start again, so a world of more active cells stores their states later (each
such cell steps rarely, so its re-execution stays short)."""

RANGES_BYTES_MAX: Final = 1 << 20
"""The largest ``ranges.cbor`` read (64 sizes and the ranges: a few KB); past it, no index."""

_FORMAT: Final = 4  # 4: by key hash XOR reducer (3: by key hash; 2: a blake3 of the id; 1: flat)
_SHARDS: Final = 64
_MAGIC: Final = b"WHB2"
_BATCH: Final = struct.Struct("<4sQQII")
_GROUP: Final = struct.Struct("<8sII")
_GROUP_ONE: Final = struct.Struct("<8sIIQ")  # a group of one seq: _GROUP and the seq
_RANGES: Final = "ranges.cbor"


def cell_id(subject: str) -> str:
    """The cell a cell record's subject belongs to: the subject without its leaf."""
    return subject.rpartition("/")[0]


def _cell_hash(cell: str) -> bytes:
    """8 bytes naming a cell in its shard: the first 8 of its key hash, which the cell id ends
    with (64 hex digits), XOR a digest of the rest of the id (its reducer), cached per reducer:
    one blake3 per reducer, not per cell. Two reducers' cells of one key then have two names,
    so neither reads the other's stored state (the one ``read_cell`` returns is the newest
    under the name). An id that does not end so (none the kernel writes) is named by a blake3
    of it instead."""
    try:
        named = bytes.fromhex(cell[-64:-48])
    except ValueError:
        named = b""
    if len(named) != 8 or cell[-65:-64] != "/":
        return blake3.blake3(cell.encode()).digest(8)
    owner = cell[:-65]
    mask = _owner_masks.get(owner)
    if mask is None:
        if len(_owner_masks) >= _OWNERS_CACHED_MAX:
            _owner_masks.clear()
        mask = _owner_masks[owner] = int.from_bytes(blake3.blake3(owner.encode()).digest(8))
    return (int.from_bytes(named) ^ mask).to_bytes(8)


_owner_masks: dict[str, int] = {}
_OWNERS_CACHED_MAX: Final = 4_096


def _shard_of(cell_hash: bytes) -> int:
    return cell_hash[0] % _SHARDS


def _shard_path(directory: Path, shard: int) -> Path:
    return directory / f"{shard:02x}.log"


@dataclass
class _Ranges:
    genesis: bytes
    ranges: list[list[int]]
    sizes: list[int]

    def encode(self) -> bytes:
        fields = {"format": _FORMAT, "genesis": self.genesis, "ranges": self.ranges}
        return cbor.dumps({**fields, "sizes": self.sizes})


def _load_ranges(directory: Path) -> _Ranges | None:
    """The committed ranges, or None if there is no index or it does not decode as one (or
    ``ranges.cbor`` is not a file of at most ``RANGES_BYTES_MAX`` bytes)."""
    try:
        data = fileio.read_regular(directory / _RANGES, RANGES_BYTES_MAX)
        obj = cbor.loads(data) if data is not None else None
    except (StorageError, StoreDamaged, CborError):
        return None
    if not isinstance(obj, dict) or obj.get("format") != _FORMAT:
        return None
    genesis, ranges, sizes = obj.get("genesis"), obj.get("ranges"), obj.get("sizes")
    if not isinstance(genesis, bytes) or not isinstance(ranges, list):
        return None
    if not isinstance(sizes, list) or len(sizes) != _SHARDS:
        return None
    if not all(type(size) is int and size >= 0 for size in sizes):
        return None
    ends = [0]
    for pair in ranges:
        if not (isinstance(pair, list) and len(pair) == 2 and all(type(n) is int for n in pair)):
            return None
        if not ends[-1] <= pair[0] < pair[1]:
            return None
        ends.append(pair[1])
    return _Ranges(genesis, ranges, sizes)


def _batches(data: bytes) -> list[bytes] | None:
    """The payload of each batch in ``data``, or None if ``data`` is not whole batches."""
    offset, payloads = 0, []
    while len(data) - offset >= _BATCH.size:
        magic, _seq_from, _seq_to, length, crc = _BATCH.unpack_from(data, offset)
        start = offset + _BATCH.size
        payload = data[start : start + length]
        if magic != _MAGIC or len(payload) != length or zlib.crc32(payload) != crc:
            return None
        payloads.append(payload)
        offset = start + length
    return payloads if offset == len(data) else None


def _groups(payload: bytes) -> Iterator[tuple[bytes, int, int, int]]:
    """``(cell hash, offset of its seqs, count, state length)`` of each group in ``payload``."""
    offset = 0
    while offset + _GROUP.size <= len(payload):
        cell_hash, count, state_length = _GROUP.unpack_from(payload, offset)
        offset += _GROUP.size
        yield cell_hash, offset, count, state_length
        offset += 8 * count + state_length


def _group(cell_hash: bytes, seqs: list[int], state: bytes) -> bytes:
    if len(seqs) == 1:  # most groups of a world of many cells: one struct, no format string
        return _GROUP_ONE.pack(cell_hash, 1, len(state), seqs[0]) + state
    head = _GROUP.pack(cell_hash, len(seqs), len(state))
    return head + struct.pack(f"<{len(seqs)}Q", *seqs) + state


@dataclass(frozen=True)
class CellRecords:
    """What the index knows of one cell up to a position: the seqs of its records (ascending),
    the latest stored state at or before the position (``state_seq``, ``state``: the state
    right after the step at ``state_seq``), and the stretches ``[seq_from, seq_to)`` it does
    not cover, which the reader must read from the journal."""

    seqs: list[int]
    state_seq: int | None
    state: bytes | None
    gaps: list[tuple[int, int]]


def read_cell(
    world: Path, cell: str, seq_to: int, genesis: bytes, seq_next: int
) -> CellRecords | None:
    """The index's view of ``cell`` over ``[0, seq_to)`` for a journal whose record 0 hashes to
    ``genesis`` and which ends at ``seq_next``; None if the index does not describe that
    journal (absent, damaged, another journal, or one that was cut)."""
    directory = world / "cache" / "history"
    ranges = _load_ranges(directory)
    if ranges is None or ranges.genesis != genesis:
        return None
    if ranges.ranges and ranges.ranges[-1][1] > seq_next:
        return None
    wanted = _cell_hash(cell)
    shard = _shard_of(wanted)
    try:
        with fileio.open_regular(_shard_path(directory, shard)) as file:
            data = file.read(ranges.sizes[shard])
    except FileNotFoundError:
        data = b""
    except (OSError, StoreDamaged):  # unreadable, or not a file: ignored, as damage is
        return None
    payloads = _batches(data) if len(data) == ranges.sizes[shard] else None
    if payloads is None:  # shorter than committed, or damaged: a step could be missing
        return None
    covered = [(a, min(b, seq_to)) for a, b in ranges.ranges if a < seq_to]
    seqs: list[int] = []
    state_seq: int | None = None
    state: bytes | None = None
    for payload in payloads:
        for cell_hash, offset, count, state_length in _groups(payload):
            if cell_hash != wanted:
                continue
            found = struct.unpack_from(f"<{count}Q", payload, offset)
            seqs.extend(seq for seq in found if seq < seq_to)
            last = found[-1] if found else None
            newer = last is not None and last < seq_to and (state_seq is None or last > state_seq)
            if state_length and newer:
                start = offset + 8 * count
                state_seq, state = last, payload[start : start + state_length]
    gaps, start = [], 0
    for a, b in covered:
        if start < a:
            gaps.append((start, a))
        start = b
    if start < seq_to:
        gaps.append((start, seq_to))
    return CellRecords(sorted(set(seqs)), state_seq, state, gaps)


class _Reset(Exception):
    """A shard is shorter than the index says: start a new index."""


class HistoryWriter:
    """The index's writer for one writable world session (see the module docstring)."""

    def __init__(self, world: Path, journal: FileJournal) -> None:
        """Start noting ``journal``'s cell records from its current end."""
        self._dir = world / "cache" / "history"
        self._journal = journal
        self._noted = journal.watch(CELL_PREFIX)
        self._seq_from = journal.seq_next
        self._since_state: dict[str, int] = {}
        self._ranges: _Ranges | None = None

    def due(self) -> bool:
        return len(self._noted) >= FLUSH_ENTRIES

    def flush_quietly(self, kernel: Kernel, store: CellStore) -> str | None:
        """``flush``; on a storage failure, a notice (the index is derived: the world goes on,
        and this writer stops)."""
        try:
            self.flush(kernel, store)
        except (StorageError, OSError) as exc:
            return f"cell history index not written ({exc}); time travel reads the journal"
        return None

    def flush(self, kernel: Kernel, store: CellStore) -> None:
        """Append what was noted below the journal's committed end and commit the range since
        the last flush; store the states (read from ``store``, which must hold the kernel's
        state as of that end) of cells that stepped ``STATE_EVERY`` times since their last
        stored state. Raises ``StorageError``."""
        seq_to = self._journal.seq_next_committed
        if seq_to <= self._seq_from:
            return
        if self._ranges is None:
            self._ranges = self._start(self._genesis())
        try:
            self._flush(kernel, store, seq_to)
        except _Reset:
            self._ranges = self._start(b"")
            self._flush(kernel, store, seq_to)

    def _flush(self, kernel: Kernel, store: CellStore, seq_to: int) -> None:
        ranges = self._ranges
        assert ranges is not None
        by_cell: dict[str, list[int]] = {}
        later: set[str] = set()
        for seq, subject in self._noted:
            cell = subject[: subject.rindex("/")]  # cell_id, inlined: once per noted record
            if seq < seq_to:
                if cell in by_cell:
                    by_cell[cell].append(seq)
                else:
                    by_cell[cell] = [seq]
            else:
                later.add(cell)
        by_shard: dict[int, list[bytes]] = {}
        if len(self._since_state) > SINCE_STATE_CELLS_MAX:
            self._since_state.clear()  # bounded memory; cells then store a state a bit later
        for cell, seqs in by_cell.items():
            seqs.sort()
            digest = _cell_hash(cell)
            since = self._since_state.get(cell, 0) + len(seqs)
            state = b""
            if since >= STATE_EVERY and cell not in later:
                state = _state(kernel, store, cell) or b""
                if len(state) > STATE_BYTES_MAX:
                    state = b""
            if state:
                self._since_state.pop(cell, None)
            else:
                self._since_state[cell] = since
            by_shard.setdefault(_shard_of(digest), []).append(_group(digest, seqs, state))
        sizes = list(ranges.sizes)
        for shard, parts in by_shard.items():
            self._append(sizes, shard, parts, seq_to)
        spans = [list(pair) for pair in ranges.ranges]
        if spans and spans[-1][1] == self._seq_from:
            spans[-1][1] = seq_to
        else:
            spans.append([self._seq_from, seq_to])
        committed = _Ranges(ranges.genesis, spans, sizes)
        _replace(self._dir / _RANGES, committed.encode())
        self._ranges, self._seq_from = committed, seq_to
        self._noted[:] = [entry for entry in self._noted if entry[0] >= seq_to]

    def _genesis(self) -> bytes:
        first = next(iter(self._journal.read(0)), None)
        return b"" if first is None else genesis_digest(first)

    def _start(self, genesis: bytes) -> _Ranges:
        """The committed index to extend, or a new, empty one if it does not describe this
        journal (or ends after where this session began). ``genesis`` b"": always new."""
        fileio.mkdir(self._dir, parents=True, exist_ok=True)
        found = _load_ranges(self._dir)
        if (
            found is not None
            and genesis
            and found.genesis == genesis
            and (not found.ranges or found.ranges[-1][1] <= self._seq_from)
        ):
            return found
        for shard in sorted(self._dir.glob("*.log")):
            fileio.unlink(shard, missing_ok=True)
        fresh = _Ranges(genesis or self._genesis(), [], [0] * _SHARDS)
        _replace(self._dir / _RANGES, fresh.encode())
        return fresh

    def _append(self, sizes: list[int], shard: int, parts: list[bytes], seq_to: int) -> None:
        path = _shard_path(self._dir, shard)
        size = sizes[shard]
        try:
            found = os.stat(path)
        except FileNotFoundError:
            found = None
        if found is not None and not stat.S_ISREG(found.st_mode):
            raise _Reset  # a FIFO, a device, a folder: a new index unlinks it
        actual = 0 if found is None else found.st_size
        if actual < size:
            raise _Reset
        if actual > size:  # a flush that crashed before its commit
            fileio.truncate(path, size)
        payload = b"".join(parts)
        batch = _BATCH.pack(_MAGIC, self._seq_from, seq_to, len(payload), zlib.crc32(payload))
        fd = fileio.create(path) if actual == 0 else fileio.open_append(path)
        try:
            fileio.write(fd, batch + payload, path)
        finally:
            os.close(fd)
        sizes[shard] = size + len(batch) + len(payload)


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` beside ``path`` and rename it over ``path``, without fsync (see the module
    docstring: a reader checks what it reads, so a power loss costs at most the index)."""
    temp = path.with_name(path.name + ".tmp")
    write_unsynced(temp, data)
    fileio.replace(temp, path)


def genesis_digest(record: JournalRecord) -> bytes:
    """What identifies a journal: the hash of its record 0."""
    return cbor.digest(cbor.dumps(record.as_map()))


def _state(kernel: Kernel, store: CellStore, cell: str) -> bytes | None:
    """The current state CBOR of ``cell`` (``/world/cell/<reducer>/<key hash hex>``)."""
    reducer, _, key_hex = cell.removeprefix(CELL_PREFIX).rpartition("/")
    try:
        found = store.get(kernel.cell_space(reducer), bytes.fromhex(key_hex))
    except (KeyError, ValueError):
        return None
    return None if found is None else found[1]
