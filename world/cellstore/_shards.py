"""The file cell store's objects (format 2): packed shards, the shard group objects that hold
them, and each reducer's index object. Pure: bytes in, values out; ``world.cellstore._store``
does the I/O. These are the immutable, content-addressed part of the store, where a lookup
goes; the records that commit a set of them (the checkpoint and the flush plan) are
``world.cellstore._checkpoint``.

Shard group object, a CAS object holding one or more non-empty shards of one reducer::

    {"format": 2, "module": <module hash, 32 raw bytes>, "shards": {prefix: packed shard}}

    packed shard = {
     "keys":       n key hashes of 32 bytes, ascending, concatenated
     "entries":    the n entries' canonical CBOR (``kernel.cells.encode_entry``), concatenated
     "entry_ends": n big-endian end offsets into "entries" (4 bytes each; 8 past 4 GiB)
     "states":     the inline states, concatenated
     "state_ends": n end offsets into "states", as "entry_ends"}

A flush packs the shards it rewrites into groups of up to ``GROUP_BYTES_TARGET`` (128 KiB) in
prefix order, so a small world's checkpoint writes a few objects rather than one per shard
(creating a file costs 100-600 µs on our disk), and a million-cell world's shards (~45 KB) are
two to a group. At 64 KiB (one shard a group at a million cells) a checkpoint of 200,000 new
cells in a world of 600,000 took 3.9-4.5 s, 4,096 file creations being most of it; at 128 KiB
2.4 s, at 256 KiB 1.8 s. A cold lookup reads and verifies its whole group, so the target stays
where that is still a fraction of a millisecond (BENCHMARKS.md, "Cells at scale"). A dirty shard's whole group is rewritten, so a group is used whole by one
checkpoint or not at all. A record's state is inline when its slice of ``states`` is ``size``
bytes long; an empty slice of a non-empty state means the state is the CAS object named by its
``state_hash`` (the writer never puts a 0-byte state out of line, so the rule needs no flag).
The logical shard of ``kernel.cells`` (whose digest the index root is built from) is a head
and a concatenation of ``keys`` and ``entries``: a flush re-encodes dirty entries only. A
lookup is one ``bytes.find`` in ``keys``, two slices, and the decoding of one entry
(``PackedShard.lookup``); nothing builds the shard's other entries. The module hash is in the
object so no two reducers can share one, which the collector relies on.

Index object, a CAS object per reducer: ``{"format": 2, "module", "shard_bits": 12, "shards":
{prefix: [logical root, count, group object hash]}}`` (≤ 4096 records: read once per reducer).

Rejected: per-cell state files (format 1). Creating a file costs 100-600 µs on our disk, so a
million-cell checkpoint took 95-149 s and 4.4 GiB (a 4 KiB block per 10-byte state); packed,
it takes ~7 s and 187 MiB. Rejected: one object per shard whatever its size. A world of
100,000 small cells then writes 4,096 files of ~4 KiB at every full checkpoint (2-4 s here,
with a 4 KiB block for 24 cells); grouped, ~300 files and 0.6 s. Rejected: one pack file per
checkpoint holding every dirty shard. A pack stays live while any of its shards is, so it needs
compaction and keeps dead shards meanwhile; a group is rewritten whole instead, which costs at
most 128 KiB more per dirty shard. Rejected: one index document holding every entry (~120 MB at
a million cells, rewritten on every flush and read whole on open).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from itertools import accumulate, pairwise
from typing import Any, Final

import cbor2

from air import cbor
from air.errors import CborError
from kernel import native
from kernel.cells import (
    HASH_BYTES,
    INDEX_SHARD_BITS,
    INDEX_SHARD_COUNT,
    CellEntry,
    logical_shard_bytes,
    shard_of,
)
from world.cellstore._checkpoint import FORMAT

__all__ = [
    "GROUP_BYTES_TARGET",
    "PackedShard",
    "ShardGroup",
    "ShardRef",
    "encode_index_object",
    "entry_from_cbor",
    "find_key",
    "index_from_object",
    "keys_ascend",
    "pack_group",
    "unpack_group",
]

_OFFSET_FORMATS: Final = {4: "I", 8: "Q"}
_SHARD_FIELDS: Final = ("keys", "entries", "entry_ends", "states", "state_ends")

ShardRef = tuple[bytes, int, bytes]
"""(logical root, count, group object hash); the object hash is empty for a format-1 shard."""
GROUP_BYTES_TARGET: Final = 128 << 10
"""A flush adds shards to a group while it stays under this many bytes (one shard may be more)."""


def entry_from_cbor(data: bytes) -> CellEntry:
    """One entry from its canonical bytes, which come from a verified object (so cbor2's plain
    decode suffices: the strict one re-encodes to compare, for nothing here)."""
    try:
        obj = cbor2.loads(data)
    except (ValueError, cbor2.CBORDecodeError) as exc:
        raise CborError("/", "index.entry", f"not CBOR: {exc}") from exc
    return CellEntry.from_cbor_obj(obj)


def _end(ends: bytes, width: int, i: int) -> int:
    """Offset ``i`` of an ends table; ``-1`` is the start (0)."""
    if i < 0:
        return 0
    value: int = struct.unpack_from(">" + _OFFSET_FORMATS[width], ends, i * width)[0]
    return value


def _pack_ends(lengths: Sequence[int]) -> bytes:
    ends = list(accumulate(lengths))
    width = 4 if not ends or ends[-1] < 1 << 32 else 8
    return struct.pack(f">{len(ends)}{_OFFSET_FORMATS[width]}", *ends)


def find_key(keys: bytes, key_hash: bytes) -> int:
    """The index of ``key_hash`` in ``keys`` (32-byte key hashes, concatenated, ascending), or
    -1. Natively by bisection: a new cell's first ``get`` in a million-cell world asks its
    shard's ~250 keys, which a scan read at ~2.4 µs (8 KB mostly not in the CPU's cache)."""
    found = native.find_key(keys, key_hash)
    if found is not None:
        return found
    at = keys.find(key_hash)
    while at > 0 and at % HASH_BYTES:  # a match straddling two keys is not a key
        at = keys.find(key_hash, at + 1)
    return at // HASH_BYTES if at >= 0 else -1


class PackedShard:
    """A packed shard held as its few byte strings; entries are decoded one at a time."""

    __slots__ = ("count", "entries", "entry_ends", "keys", "state_ends", "states", "width")

    def __init__(
        self, keys: bytes, entries: bytes, entry_ends: bytes, states: bytes, state_ends: bytes
    ) -> None:
        self.keys, self.entries, self.states = keys, entries, states
        self.entry_ends, self.state_ends = entry_ends, state_ends
        self.count = len(keys) // HASH_BYTES
        self.width = len(entry_ends) // self.count if self.count else 4

    @property
    def weight(self) -> int:
        """Bytes held (for the cache's budget)."""
        return len(self.keys) + len(self.entries) + len(self.states) + 2 * len(self.entry_ends)

    def find(self, key_hash: bytes) -> int:
        """The record index of ``key_hash``, or -1."""
        return find_key(self.keys, key_hash)

    def contains(self, key_hash: bytes) -> bool:
        return self.find(key_hash) >= 0

    def entry_cbor(self, i: int) -> bytes:
        start = _end(self.entry_ends, self.width, i - 1)
        return self.entries[start : _end(self.entry_ends, self.width, i)]

    def state_slice(self, i: int) -> bytes:
        start = _end(self.state_ends, self.width, i - 1)
        return self.states[start : _end(self.state_ends, self.width, i)]

    def lookup(self, key_hash: bytes) -> tuple[CellEntry, bytes | None] | None:
        """The entry of ``key_hash`` and its inline state (None: the state is out of line)."""
        i = self.find(key_hash)
        if i < 0:
            return None
        entry = entry_from_cbor(self.entry_cbor(i))
        state = self.state_slice(i)
        if len(state) == entry.size:
            return entry, state
        if state:
            raise CborError(f"/{key_hash.hex()}", "index.shard", "inline state of the wrong size")
        return entry, None

    def key_list(self) -> list[bytes]:
        keys = self.keys
        return [keys[at : at + HASH_BYTES] for at in range(0, len(keys), HASH_BYTES)]

    def _slices(self, data: bytes, ends: bytes) -> list[bytes]:
        bounds = struct.unpack(f">{self.count}{_OFFSET_FORMATS[self.width]}", ends)
        return [data[a:b] for a, b in zip((0, *bounds), bounds, strict=False)]

    def columns(self) -> tuple[list[bytes], list[bytes], list[bytes]]:
        """The key hashes, entry bytes and state slices, in key order (new lists)."""
        return (
            self.key_list(),
            self._slices(self.entries, self.entry_ends),
            self._slices(self.states, self.state_ends),
        )

    def records(self) -> Iterator[tuple[bytes, bytes, bytes]]:
        """Every (key hash, entry bytes, state slice), in key order, nothing decoded."""
        return zip(
            self.key_list(),
            self._slices(self.entries, self.entry_ends),
            self._slices(self.states, self.state_ends),
            strict=True,
        )

    def pairs(self) -> tuple[list[bytes], list[bytes]]:
        """The key hashes and entry bytes, in key order (the logical shard's parts)."""
        return self.key_list(), self._slices(self.entries, self.entry_ends)

    def logical_root(self) -> bytes:
        return cbor.digest(logical_shard_bytes(*self.pairs()))

    @classmethod
    def build(
        cls, keys: Sequence[bytes], entry_cbors: Sequence[bytes], states: Sequence[bytes]
    ) -> PackedShard:
        """A shard from its records, in key order (non-empty)."""
        return cls(
            b"".join(keys),
            b"".join(entry_cbors),
            _pack_ends(list(map(len, entry_cbors))),
            b"".join(states),
            _pack_ends(list(map(len, states))),
        )

    def packed(self) -> tuple[bytes, bytes, bytes, bytes, bytes]:
        """The five fields: keys, entries, entry_ends, states, state_ends."""
        return self.keys, self.entries, self.entry_ends, self.states, self.state_ends

    def fields(self) -> dict[str, bytes]:
        return {name: getattr(self, name) for name in _SHARD_FIELDS}

    @classmethod
    def from_fields(cls, obj: Any, prefix: int) -> PackedShard:
        """The shard from its decoded (and hash-verified) fields; ``CborError`` if malformed."""
        if type(obj) is not dict or obj.keys() != set(_SHARD_FIELDS):
            raise CborError(f"/shards/{prefix}", "index.shard", "not a packed shard")
        parts = [obj[name] for name in ("keys", "entries", "entry_ends", "states", "state_ends")]
        if not all(type(part) is bytes for part in parts):
            raise CborError(
                f"/shards/{prefix}", "index.shard", "packed shard field of the wrong type"
            )
        shard = cls(*parts)
        ok = (
            shard.count > 0
            and len(shard.keys) == shard.count * HASH_BYTES
            and shard.width in _OFFSET_FORMATS
            and len(shard.entry_ends) == len(shard.state_ends) == shard.count * shard.width
            and _end(shard.entry_ends, shard.width, shard.count - 1) == len(shard.entries)
            and _end(shard.state_ends, shard.width, shard.count - 1) == len(shard.states)
            and shard_of(shard.keys[:HASH_BYTES]) == prefix  # keys ascend: all between
            and shard_of(shard.keys[-HASH_BYTES:]) == prefix
            and keys_ascend(shard.keys)
        )
        if not ok:
            raise CborError(f"/shards/{prefix}", "index.shard", "packed shard tables do not agree")
        return shard


def keys_ascend(keys: bytes) -> bool:
    """Whether ``keys`` (32-byte key hashes, concatenated) strictly ascend, as a writer stores
    them and ``find_key``'s bisection needs."""
    ascend = native.keys_ascend(keys)
    if ascend is not None:
        return ascend
    hashes = [keys[i : i + HASH_BYTES] for i in range(0, len(keys), HASH_BYTES)]
    return all(a < b for a, b in pairwise(hashes))


def pack_group(module_raw: bytes, shards: Mapping[int, PackedShard]) -> bytes:
    """The object bytes of a group of non-empty shards of one reducer."""
    body = {prefix: shard.fields() for prefix, shard in shards.items()}
    return cbor.dumps({"format": FORMAT, "module": module_raw, "shards": body})


class ShardGroup:
    """The shards of one group object, each made a ``PackedShard`` on first use: a lookup in a
    small world's group of ~300 tiny shards builds one of them, not all."""

    __slots__ = ("_fields", "_shards", "weight")

    def __init__(
        self, shards: Mapping[int, PackedShard], fields: Mapping[int, Any] | None = None
    ) -> None:
        self._shards = dict(shards)
        self._fields = dict(fields or {})
        self.weight = sum(shard.weight for shard in self._shards.values()) + sum(
            sum(map(len, f.values())) for f in self._fields.values()
        )

    def get(self, prefix: int) -> PackedShard | None:
        """The shard of ``prefix``; ``CborError`` if its fields are malformed."""
        shard = self._shards.get(prefix)
        if shard is None and prefix in self._fields:
            shard = self._shards[prefix] = PackedShard.from_fields(self._fields.pop(prefix), prefix)
        return shard

    def shards(self) -> Iterator[PackedShard]:
        for prefix in sorted(self._shards.keys() | self._fields.keys()):
            shard = self.get(prefix)
            assert shard is not None
            yield shard


def unpack_group(obj: Any, module_raw: bytes) -> ShardGroup:
    """A decoded (and hash-verified) group object; ``CborError`` if malformed (a shard's own
    fields are checked when it is first used)."""
    if (
        type(obj) is not dict
        or obj.keys() != {"format", "module", "shards"}
        or obj["format"] != FORMAT
        or type(obj["shards"]) is not dict
    ):
        raise CborError("/", "index.shard", "not a format-2 shard group")
    if obj["module"] != module_raw:
        raise CborError("/module", "index.shard", "a shard group of another reducer")
    for prefix, fields in obj["shards"].items():
        if type(prefix) is not int or not 0 <= prefix < INDEX_SHARD_COUNT:
            raise CborError(f"/shards/{prefix}", "index.shard", "bad shard prefix")
        if type(fields) is not dict or not all(type(v) is bytes for v in fields.values()):
            raise CborError(f"/shards/{prefix}", "index.shard", "not a packed shard")
    return ShardGroup({}, obj["shards"])


def encode_index_object(module_raw: bytes, shards: Mapping[int, ShardRef]) -> bytes:
    body = {prefix: list(ref) for prefix, ref in shards.items() if ref[1]}
    return cbor.dumps(
        {"format": FORMAT, "module": module_raw, "shard_bits": INDEX_SHARD_BITS, "shards": body}
    )


def index_from_object(obj: Any, module_raw: bytes) -> dict[int, ShardRef]:
    if (
        type(obj) is not dict
        or obj.get("format") != FORMAT
        or obj.get("module") != module_raw
        or obj.get("shard_bits") != INDEX_SHARD_BITS
        or type(obj.get("shards")) is not dict
    ):
        raise CborError("/", "index.format", "not a format-2 index of this reducer")
    out: dict[int, ShardRef] = {}
    for prefix, ref in obj["shards"].items():
        ok = type(prefix) is int and 0 <= prefix < INDEX_SHARD_COUNT and type(ref) is list
        if not ok or len(ref) != 3 or not all(type(ref[i]) is bytes for i in (0, 2)):
            raise CborError(f"/shards/{prefix}", "index.format", "bad shard record")
        if type(ref[1]) is not int or len(ref[0]) != HASH_BYTES or len(ref[2]) != HASH_BYTES:
            raise CborError(f"/shards/{prefix}", "index.format", "bad shard record")
        out[prefix] = (ref[0], ref[1], ref[2])
    return out
