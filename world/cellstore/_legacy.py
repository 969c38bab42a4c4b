"""Reading a format-1 cell store (before issue 11), so that its world opens as it was and is
converted by its next checkpoint.

Format 1 kept one file per cell under ``state/reducers/<module hex>/``::

    index.cbor                                    {format: 1, shard_bits: 12, shards: {p: [root, n]}}
    index/<3 hex prefix>.<shard root hex>.cbor    the logical shard (kernel.cells.encode_shard)
    cells/<2 hex>/<key hash hex>.<state hash hex>.cbor

and ``checkpoint.cbor`` (format 1) named each reducer's ``index.cbor`` by its root. A format-1
flush wrote ``index.next.cbor`` and renamed it over ``index.cbor`` after its commit; if it died
in between, the right one is whichever matches the root (both are verified), so the reader
needs no recovery of its own. Every file is verified against its hash, as format 1 did.

What conversion does (``world.cellstore._store``): the first flush of a format-1 store reads every
shard and cell of every reducer, writes them as packed shards, and commits a format-2
checkpoint. Only after that commit is the format-1 tree removed (``remove_tree``); a crash
before it leaves the format-1 store whole, and one after it leaves a tree that the next
writer's open removes. Nothing is ever read as the wrong format: ``checkpoint.cbor`` says which
one it is, and the two formats share no file names.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, Final

import cbor2

from air import cbor
from air.errors import CborError
from kernel.cells import INDEX_SHARD_BITS, CellEntry, encode_entry, index_from_obj, shard_from_obj
from world import _fileio as fileio
from world._cas import OBJECT_BYTES_MAX
from world.cellstore._shards import ShardRef
from world.errors import StoreDamaged

__all__ = ["LEGACY_INTENT_NAME", "LegacyShard", "LegacyStore", "legacy_dirs", "read_verified"]

LEGACY_INTENT_NAME: Final = "flush-intent.cbor"
_PREFIX_HEX: Final = (INDEX_SHARD_BITS + 3) // 4


def read_verified(path: str, expected: bytes) -> bytes:
    """The bytes of ``path``, which must hash to ``expected``; ``StoreDamaged`` otherwise (and
    for something that is not a file of at most ``OBJECT_BYTES_MAX`` bytes, never read)."""
    data = fileio.read_regular(path, OBJECT_BYTES_MAX)
    if data is None:
        raise StoreDamaged(path, "missing")
    actual = cbor.digest(data)
    if actual != expected:
        raise StoreDamaged(
            path,
            f"content hash {cbor.raw_to_hash(actual)}, expected {cbor.raw_to_hash(expected)}",
        )
    return data


def load_verified(path: str, expected: bytes) -> Any:
    """Read and decode bytes whose digest must be ``expected``. The strict ``air.cbor.loads`` is
    skipped on purpose: matching the hash proves these are bytes a store encoded canonically."""
    data = read_verified(path, expected)
    try:
        return cbor2.loads(data)
    except (ValueError, cbor2.CBORDecodeError) as exc:
        raise StoreDamaged(path, f"not CBOR: {exc}") from exc


class LegacyShard:
    """A format-1 shard: its entries, decoded whole (as format 1 always did)."""

    __slots__ = ("entries",)

    def __init__(self, entries: dict[bytes, CellEntry]) -> None:
        self.entries = entries

    @property
    def count(self) -> int:
        return len(self.entries)

    @property
    def weight(self) -> int:
        return 300 * len(self.entries)  # decoded entries: ~300 bytes each in CPython

    def lookup(self, key_hash: bytes) -> tuple[CellEntry, bytes | None] | None:
        entry = self.entries.get(key_hash)
        return None if entry is None else (entry, None)

    def contains(self, key_hash: bytes) -> bool:
        return key_hash in self.entries

    def columns(self) -> tuple[list[bytes], list[bytes], list[bytes]]:
        """As ``PackedShard.columns``, with empty state slices: a format-1 shard's states are
        files, not read for a root (which needs none)."""
        order = sorted(self.entries)
        return order, [encode_entry(self.entries[kh]) for kh in order], [b""] * len(order)


class LegacyStore:
    """The files of a format-1 store under ``root`` (``state/reducers``)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def index(self, module: str, root: bytes) -> dict[int, ShardRef]:
        """The reducer's shards as (root, count, b"") from whichever index file has ``root``."""
        base = os.path.join(self.root, module)
        first: StoreDamaged | None = None
        for name in ("index.cbor", "index.next.cbor"):
            path = os.path.join(base, name)
            try:
                obj = index_from_obj(load_verified(path, root))
            except CborError as exc:
                first = first or StoreDamaged(path, str(exc))
            except StoreDamaged as damage:
                first = first or damage
            else:
                return {prefix: (r, n, b"") for prefix, (r, n) in obj.items()}
        assert first is not None
        raise first  # names index.cbor and what is wrong with it

    def shard(self, module: str, prefix: int, root: bytes) -> LegacyShard:
        name = f"{prefix:0{_PREFIX_HEX}x}.{root.hex()}.cbor"
        path = os.path.join(self.root, module, "index", name)
        try:
            return LegacyShard(shard_from_obj(load_verified(path, root), prefix))
        except CborError as exc:
            raise StoreDamaged(path, str(exc)) from exc

    def state(self, module: str, key_hash: bytes, entry: CellEntry) -> bytes:
        kh = key_hash.hex()
        name = f"{kh}.{entry.state_hash.hex()}.cbor"
        return read_verified(
            os.path.join(self.root, module, "cells", kh[:2], name), entry.state_hash
        )


def legacy_dirs(root: str) -> list[str]:
    """The format-1 reducer folders under ``root`` (format 2 keeps no folders there)."""
    try:
        return sorted(e.path for e in os.scandir(root) if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


def remove_tree(root: str) -> None:
    """Remove a converted format-1 store's files (not its ``checkpoint.cbor``, which the format-2
    one has replaced). Unlinks go through ``world._fileio``; emptied folders are removed as
    they are found (an empty folder left by a crash is removed by the next open)."""
    for folder in legacy_dirs(root):
        for dirpath, _dirs, files in _walk_bottom_up(folder):
            for name in files:
                fileio.unlink(os.path.join(dirpath, name), missing_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(dirpath)
    fileio.unlink(os.path.join(root, LEGACY_INTENT_NAME), missing_ok=True)


def _walk_bottom_up(folder: str) -> Iterator[tuple[str, list[str], list[str]]]:
    return os.walk(folder, topdown=False)
