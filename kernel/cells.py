"""Cell storage, the pure half: identities, the index format, the store protocols, memory backends.

A *cell* is one key's state of one keyed reducer (SPEC §6, seed 001). This module fixes:

* **Key identity.** ``key_cbor`` is the canonical CBOR of the key after normalisation by the
  reducer's ``key_schema``; ``key_hash = air.cbor.digest(key_cbor)`` (raw 32 bytes, hex only at
  the edges). A non-keyed (v1) reducer keeps its whole state in the same store under the fixed
  key ``NULL_KEY_CBOR`` (``b"\\xf6"``, the canonical CBOR of null) and ``NULL_KEY_HASH``.
* **Cell spaces.** The store keeps each reducer's cells in a *space* named by 64 hex
  (``cell_space(reducer)``: the digest of the reducer's name), not by its wasm module's hash, so
  two reducers declared with the same wasm never share cells, and a reducer whose code changes
  keeps them. (Until this, spaces were module hashes; a store written so is rebuilt from the
  journal at its next open: ``world._recovery``.) A space is a directory name in the file
  backend, hence the fixed alphabet (``check_module``).
* **CellEntry**, the index record of one cell. ``last_active`` is the journal seq of the last step
  that touched the cell: a logical clock, never wall time, so replay rebuilds it byte for byte.
  ``manifest_hash`` is the manifest era the cell pinned at creation (SPEC §6).
* **The index format**, shared by every backend so that ``index_root`` is a function of content
  alone (it is what ``world replay --verify`` compares). Entries are grouped into
  ``INDEX_SHARD_COUNT`` shards by the top ``INDEX_SHARD_BITS`` bits of the key hash. A shard is
  the canonical CBOR map ``{key_hash: {key, state_hash, size, last_active, manifest_hash}}``;
  its *logical root* is the digest of those bytes. The index document is
  ``{"format": 1, "shard_bits": 12, "shards": {prefix: [shard_root, count]}}`` over the
  non-empty shards, and ``index_root`` is the digest of the document. The state hash is in
  every entry, so the root is a Merkle root of every cell's state however a backend stores the
  states (the file backend packs small ones into its shard objects: ``world.cellstore._store``).
  ``encode_entry`` writes one entry's canonical bytes by hand (a test keeps it equal to
  ``air.cbor.dumps``): a checkpoint encodes every dirty entry, and this is 2x cbor2's speed.
* **Protocols** ``CellStore`` and ``Cas``, and the in-memory backends ``MemoryCellStore`` and
  ``MemoryCas``. The file backends live in ``world.cellstore._store`` and ``world._cas``.

Invariants every ``CellStore`` keeps: ``put`` checks its own input (key hash, state hash and size
must match the bytes; TigerBeetle-style "check before writing"), reads see unflushed writes, and
``iter_entries`` yields in ascending key-hash order.

This module does no I/O and reads no clock: durability is the file backend's business.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any, Final, Generic, Protocol, TypeVar

from air import cbor
from air.errors import CborError, HashMismatch, InvalidArgument, UsageError
from kernel.errors import ObjectMissing

__all__ = [
    "CELL_INLINE_BYTES_MAX",
    "INDEX_SHARD_BITS",
    "INDEX_SHARD_COUNT",
    "KEY_CACHE_BYTES_MAX",
    "NULL_KEY_CBOR",
    "NULL_KEY_HASH",
    "SHARD_CACHE_BYTES_MAX",
    "STATE_CACHE_BYTES_MAX",
    "Cas",
    "CellEntry",
    "CellStore",
    "Lru",
    "MemoryCas",
    "MemoryCellStore",
    "cell_space",
    "check_module",
    "check_put",
    "decode_index",
    "decode_shard",
    "encode_entry",
    "encode_index",
    "encode_shard",
    "index_from_obj",
    "index_root_of",
    "key_hash",
    "logical_shard_bytes",
    "shard_from_obj",
    "shard_of",
]

HASH_BYTES: Final = 32
INDEX_FORMAT: Final = 1
INDEX_SHARD_BITS: Final = 12
INDEX_SHARD_COUNT: Final = 1 << INDEX_SHARD_BITS
# Limits for backends that load lazily: bytes of clean shards kept in memory (packed, ~195 bytes
# a small cell), and bytes of clean out-of-shard cell state. Dirty (unflushed) cells are not
# bounded here: they are the kernel's checkpoint debt, visible through ``dirty_count``.
SHARD_CACHE_BYTES_MAX: Final = 128 << 20
STATE_CACHE_BYTES_MAX: Final = 64 << 20
KEY_CACHE_BYTES_MAX: Final = 64 << 20
"""Bytes of shards' key lists (32 bytes a cell) kept to answer "not stored" without reading a
shard: a new cell's first ``get`` in a world bigger than the shard cache. 64 MiB covers every
shard of a world of two million cells."""
CELL_INLINE_BYTES_MAX: Final = 1024
"""A state of at most this many bytes is stored inside its index shard; a larger one is an
object of its own. A store setting, not part of the logical format: the index root does not
depend on it, and a reader finds each state where the writer put it, whatever its own limit."""

NULL_KEY_CBOR: Final = b"\xf6"

_ENTRY_FIELDS: Final = frozenset(("key", "last_active", "manifest_hash", "size", "state_hash"))


def key_hash(key_cbor: bytes) -> bytes:
    """The raw 32-byte identity of a cell key, given the key's canonical CBOR."""
    return cbor.digest(key_cbor)


NULL_KEY_HASH: Final = key_hash(NULL_KEY_CBOR)


def shard_of(key_hash: bytes) -> int:
    """The index shard holding ``key_hash``: its top ``INDEX_SHARD_BITS`` bits."""
    return int.from_bytes(key_hash[:2], "big") >> (16 - INDEX_SHARD_BITS)


def cell_space(reducer: str) -> str:
    """The store space of ``reducer``'s cells (64 lowercase hex; see the module docstring)."""
    return cbor.digest(cbor.dumps(["cells", reducer])).hex()


def check_module(module: str) -> None:
    """Reducers are named by their module hash as 64 lowercase hex; anything else is refused
    (it becomes a directory name in the file backend)."""
    if len(module) != 2 * HASH_BYTES or module.strip("0123456789abcdef"):
        raise InvalidArgument("module", module, "must be 64 lowercase hex")


@dataclass(frozen=True, slots=True)
class CellEntry:
    """The index record of one cell.

    ``state_hash`` is the raw blake3 of ``state_cbor`` and ``size`` its length. ``last_active``
    is the journal seq of the last step that touched the cell (logical, not wall time).
    ``manifest_hash`` is the raw hash of the manifest current when the cell was created.
    """

    key_cbor: bytes
    state_hash: bytes
    size: int
    last_active: int
    manifest_hash: bytes

    def __post_init__(self) -> None:
        if len(self.state_hash) != HASH_BYTES or len(self.manifest_hash) != HASH_BYTES:
            raise InvalidArgument(
                "state_hash/manifest_hash", len(self.state_hash), "must be raw 32-byte hashes"
            )
        if self.size < 0 or self.last_active < 0:
            raise InvalidArgument("size/last_active", self.size, "must be non-negative")

    @classmethod
    def of(
        cls, key_cbor: bytes, state_cbor: bytes, *, last_active: int, manifest_hash: bytes
    ) -> CellEntry:
        """The entry describing ``state_cbor`` as the state of the cell ``key_cbor``."""
        return cls(key_cbor, cbor.digest(state_cbor), len(state_cbor), last_active, manifest_hash)

    def to_cbor_obj(self) -> dict[str, Any]:
        return {
            "key": self.key_cbor,
            "state_hash": self.state_hash,
            "size": self.size,
            "last_active": self.last_active,
            "manifest_hash": self.manifest_hash,
        }

    @classmethod
    def from_cbor_obj(cls, obj: Any, eras: dict[bytes, bytes] | None = None) -> CellEntry:
        """The entry from its index record; ``eras`` interns ``manifest_hash`` objects.

        Raises ``CborError`` (pointer relative to the record) for a malformed record. Written
        for speed: a shard load decodes ~250 of these.
        """
        if type(obj) is not dict or obj.keys() != _ENTRY_FIELDS:
            raise CborError("/", "index.entry", "index entry has the wrong fields")
        key_cbor, state_hash, size = obj["key"], obj["state_hash"], obj["size"]
        last_active, era = obj["last_active"], obj["manifest_hash"]
        if eras is not None and type(era) is bytes:
            era = eras.setdefault(era, era)
        scalars_ok = type(size) is int and type(last_active) is int
        if not scalars_ok or type(key_cbor) is not bytes or type(state_hash) is not bytes:
            raise CborError("/", "index.entry", "index entry field of the wrong type")
        try:
            return cls(key_cbor, state_hash, size, last_active, era)
        except (UsageError, TypeError) as exc:
            raise CborError("/", "index.entry", str(exc)) from exc


def check_put(key_hash: bytes, entry: CellEntry, state_cbor: bytes) -> None:
    """Refuse a put whose entry does not describe its own bytes."""
    actual_key = cbor.digest(entry.key_cbor)
    if actual_key != key_hash:
        raise HashMismatch(cbor.raw_to_hash(key_hash), cbor.raw_to_hash(actual_key))
    actual_state = cbor.digest(state_cbor)
    if actual_state != entry.state_hash:
        raise HashMismatch(cbor.raw_to_hash(entry.state_hash), cbor.raw_to_hash(actual_state))
    if entry.size != len(state_cbor):
        raise InvalidArgument(
            "entry.size", entry.size, f"must equal the state's {len(state_cbor)} bytes"
        )


_SMALL_UINT: Final = tuple(cbor.head(0, n) for n in range(256))
_SMALL_BSTR: Final = tuple(cbor.head(2, n) for n in range(256))


def encode_entry(entry: CellEntry) -> bytes:
    """``air.cbor.dumps(entry.to_cbor_obj())``, written by hand: text keys in canonical order
    (length, then bytes): key, size, state_hash, last_active, manifest_hash. One ``%`` of the
    fixed bytes (0.56 µs here, against 0.81 for a join): a checkpoint encodes every dirty cell."""
    key_cbor, size, last_active = entry.key_cbor, entry.size, entry.last_active
    return _ENTRY_FORMAT % (
        _SMALL_BSTR[len(key_cbor)] if len(key_cbor) < 256 else cbor.head(2, len(key_cbor)),
        key_cbor,
        _SMALL_UINT[size] if size < 256 else cbor.head(0, size),
        entry.state_hash,
        _SMALL_UINT[last_active] if last_active < 256 else cbor.head(0, last_active),
        entry.manifest_hash,
    )


_ENTRY_FORMAT: Final = (
    b"\xa5\x63key%b%b\x64size%b\x6astate_hash\x58\x20%b\x6blast_active%b\x6dmanifest_hash\x58\x20%b"
)
_HASH_HEAD: Final = b"\x58\x20"


def logical_shard_bytes(key_hashes: Sequence[bytes], entry_cbors: Sequence[bytes]) -> bytes:
    """The canonical shard map from ascending 32-byte key hashes and their encoded entries.

    Canonical order of 32-byte byte-string keys is the order of the hashes themselves (same
    head), so the map is a head and a concatenation: no re-encoding of entries a backend kept.
    """
    if len(key_hashes) != len(entry_cbors):
        raise InvalidArgument("entry_cbors", len(entry_cbors), "one per key hash")
    parts = chain.from_iterable(zip(repeat(_HASH_HEAD), key_hashes, entry_cbors))
    return cbor.head(5, len(key_hashes)) + b"".join(parts)


def encode_shard(entries: Mapping[bytes, CellEntry]) -> bytes:
    """Canonical CBOR of one index shard: ``{key_hash: entry}``."""
    order = sorted(entries)
    return logical_shard_bytes(order, [encode_entry(entries[kh]) for kh in order])


def shard_from_obj(obj: Any, prefix: int) -> dict[bytes, CellEntry]:
    """A decoded shard map as entries; every key hash must belong to shard ``prefix``.

    Takes the decoded object so a caller that has already verified the bytes against their
    root may skip the strict (re-encoding) decode. Entries share one ``manifest_hash`` object
    per distinct era, which saves memory.
    """
    if type(obj) is not dict:
        raise CborError("/", "index.shard", "shard is not a map")
    out: dict[bytes, CellEntry] = {}
    eras: dict[bytes, bytes] = {}
    for kh, raw in obj.items():
        if type(kh) is not bytes or len(kh) != HASH_BYTES or shard_of(kh) != prefix:
            raise CborError(f"/{kh!r}", "index.shard", f"key hash not of shard {prefix}")
        try:
            out[kh] = CellEntry.from_cbor_obj(raw, eras)
        except CborError as exc:
            raise CborError(f"/{kh.hex()}", exc.code, exc.detail) from exc
    return out


def decode_shard(data: bytes, prefix: int) -> dict[bytes, CellEntry]:
    """Decode a shard strictly (canonical form required)."""
    return shard_from_obj(cbor.loads(data), prefix)


def encode_index(shards: Mapping[int, tuple[bytes, int]]) -> bytes:
    """The index document over the non-empty shards: ``prefix -> (shard_root, count)``."""
    body = {prefix: [root, count] for prefix, (root, count) in shards.items() if count}
    return cbor.dumps({"format": INDEX_FORMAT, "shard_bits": INDEX_SHARD_BITS, "shards": body})


def index_from_obj(obj: Any) -> dict[int, tuple[bytes, int]]:
    """A decoded index document as ``prefix -> (shard_root, count)``."""
    if (
        not isinstance(obj, dict)
        or obj.get("format") != INDEX_FORMAT
        or obj.get("shard_bits") != INDEX_SHARD_BITS
        or not isinstance(obj.get("shards"), dict)
    ):
        raise CborError("/", "index.format", "not a format-1 cell index with 12 shard bits")
    out: dict[int, tuple[bytes, int]] = {}
    for prefix, pair in obj["shards"].items():
        ok = isinstance(prefix, int) and 0 <= prefix < INDEX_SHARD_COUNT and isinstance(pair, list)
        if not ok or len(pair) != 2 or not isinstance(pair[0], bytes) or type(pair[1]) is not int:
            raise CborError(f"/shards/{prefix}", "index.format", "bad shard record")
        out[prefix] = (pair[0], pair[1])
    return out


def decode_index(data: bytes) -> dict[int, tuple[bytes, int]]:
    """Decode an index document strictly (canonical form required)."""
    return index_from_obj(cbor.loads(data))


def index_root_of(shards: Mapping[int, tuple[bytes, int]]) -> bytes:
    return cbor.digest(encode_index(shards))


_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class Lru(Generic[_K, _V]):
    """A least-recently-used map bounded by total weight (1 per item unless ``weigh`` says)."""

    def __init__(self, weight_max: int, weigh: Callable[[_V], int] | None = None) -> None:
        self.weight_max = weight_max
        self._weigh = weigh or (lambda _value: 1)
        self._items: OrderedDict[_K, _V] = OrderedDict()
        self.weight = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: _K) -> _V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: _K, value: _V) -> None:
        self.pop(key)
        self._items[key] = value
        self.weight += self._weigh(value)
        while self.weight > self.weight_max and self._items:
            _, old = self._items.popitem(last=False)
            self.weight -= self._weigh(old)

    def pop(self, key: _K) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self.weight -= self._weigh(old)

    def clear(self) -> None:
        self._items.clear()
        self.weight = 0


class CellStore(Protocol):
    """Per-cell state of every reducer of one world, keyed by (module hash hex, key hash).

    ``put``/``delete`` are visible to reads at once; ``flush`` makes them durable as one
    checkpoint and records the kernel's ``checkpoint_cbor`` (e.g. the journal seq it covers)
    atomically with them, so after a crash the kernel knows where to resume its replay.
    """

    def get(self, module: str, key_hash: bytes) -> tuple[CellEntry, bytes] | None: ...
    def put(self, module: str, key_hash: bytes, entry: CellEntry, state_cbor: bytes) -> None: ...
    def delete(self, module: str, key_hash: bytes) -> None: ...
    def iter_entries(self, module: str) -> Iterator[tuple[bytes, CellEntry]]: ...
    def count(self, module: str) -> int: ...
    def modules(self) -> list[str]: ...
    def index_root(self, module: str) -> bytes: ...
    def dirty_count(self) -> int: ...
    def flush(self, checkpoint_cbor: bytes = b"") -> None: ...
    def last_checkpoint(self) -> bytes: ...


class Cas(Protocol):
    """Content-addressed bytes. Addresses are ``blake3:<64 hex>`` of the content."""

    def put(self, data: bytes) -> str: ...
    def get(self, address: str) -> bytes: ...


class MemoryCas:
    """``Cas`` in a dict: for tests and for worlds that live in one process."""

    def __init__(self) -> None:
        self._objects: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        address = cbor.content_hash(data)
        self._objects.setdefault(address, bytes(data))
        return address

    def get(self, address: str) -> bytes:
        cbor.hash_to_raw(address)
        data = self._objects.get(address)
        if data is None:
            raise ObjectMissing(address)
        return data


_Cell = tuple[CellEntry, bytes]


class MemoryCellStore:
    """``CellStore`` in dicts. ``flush`` only records the checkpoint: nothing here is durable.

    Cells are kept grouped by index shard so ``index_root`` re-encodes only shards changed since
    it was last asked, and agrees byte for byte with the file backend.
    """

    def __init__(self) -> None:
        self._shards: dict[str, dict[int, dict[bytes, _Cell]]] = {}
        self._roots: dict[str, dict[int, tuple[bytes, int]]] = {}
        self._checkpoint = b""

    def _module(self, module: str) -> dict[int, dict[bytes, _Cell]]:
        check_module(module)
        return self._shards.setdefault(module, {})

    def get(self, module: str, key_hash: bytes) -> tuple[CellEntry, bytes] | None:
        return self._module(module).get(shard_of(key_hash), {}).get(key_hash)

    def put(self, module: str, key_hash: bytes, entry: CellEntry, state_cbor: bytes) -> None:
        check_put(key_hash, entry, state_cbor)
        prefix = shard_of(key_hash)
        self._module(module).setdefault(prefix, {})[key_hash] = (entry, bytes(state_cbor))
        self._roots.setdefault(module, {}).pop(prefix, None)

    def delete(self, module: str, key_hash: bytes) -> None:
        prefix = shard_of(key_hash)
        shard = self._module(module).get(prefix)
        if shard is None or shard.pop(key_hash, None) is None:
            return
        if not shard:
            del self._shards[module][prefix]
        self._roots.setdefault(module, {}).pop(prefix, None)

    def iter_entries(self, module: str) -> Iterator[tuple[bytes, CellEntry]]:
        shards = self._module(module)
        for prefix in sorted(shards):
            for kh, (entry, _state) in sorted(shards[prefix].items()):
                yield kh, entry

    def count(self, module: str) -> int:
        return sum(len(shard) for shard in self._module(module).values())

    def modules(self) -> list[str]:
        return sorted(module for module, shards in self._shards.items() if shards)

    def index_root(self, module: str) -> bytes:
        roots = self._roots.setdefault(module, {})
        for prefix, shard in self._module(module).items():
            if prefix not in roots:
                entries = {kh: entry for kh, (entry, _state) in shard.items()}
                roots[prefix] = (cbor.digest(encode_shard(entries)), len(entries))
        return index_root_of(roots)

    def dirty_count(self) -> int:
        return 0

    def flush(self, checkpoint_cbor: bytes = b"") -> None:
        self._checkpoint = bytes(checkpoint_cbor)

    def last_checkpoint(self) -> bytes:
        return self._checkpoint
