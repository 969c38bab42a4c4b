"""Helpers for the cell store tests: cells, stores, what is on disk, and a format-1 writer.

``write_format1`` writes a store exactly as the file store did before issue 11 (one file per
cell; checked byte for byte against that code when it was written): the input of the
conversion tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from air import cbor
from kernel.cells import (
    CellEntry,
    CellStore,
    encode_entry,
    encode_index,
    encode_shard,
    index_root_of,
    key_hash,
    shard_of,
)
from world import _fileio as fileio
from world.cellstore._flush import Cell, MergedShard
from world.cellstore._shards import PackedShard

MODULE = "ab" * 32
OTHER = "cd" * 32
MANIFEST = bytes(range(32))

Cells = dict[bytes, tuple[CellEntry, bytes]]


def key(n: int) -> bytes:
    return cbor.dumps(f"key-{n}")


def cell(n: int, value: int = 0, seq: int = 1, pad: int = 0) -> tuple[bytes, CellEntry, bytes]:
    """Cell ``n``'s key hash, entry and state; ``pad`` bytes of padding make the state large."""
    key_cbor = key(n)
    fields: dict[str, Any] = {"count": value, "key": n}
    if pad:
        fields["pad"] = bytes(pad)
    state_cbor = cbor.dumps(fields)
    entry = CellEntry.of(key_cbor, state_cbor, last_active=seq, manifest_hash=MANIFEST)
    return key_hash(key_cbor), entry, state_cbor


def sized_cell(n: int, size: int, seq: int = 1) -> Cell:
    """Cell ``n`` (key ``n``) with a state of ``size`` zero bytes in CBOR (0: an empty state)."""
    state = cbor.dumps(bytes(size)) if size else b""
    entry = CellEntry(cbor.dumps(n), cbor.digest(state), len(state), seq, MANIFEST)
    return entry, state


def packed_shard(cells: dict[bytes, Cell], inline_max: int) -> PackedShard | None:
    """The shard a flush with this inline limit stores for ``cells`` (None if there are none)."""
    if not cells:
        return None
    order = sorted(cells)
    states = [cells[kh][1] for kh in order]
    return PackedShard.build(
        order,
        [encode_entry(cells[kh][0]) for kh in order],
        [state if len(state) <= inline_max else b"" for state in states],
    )


def merged_summary(merged: MergedShard) -> tuple[Any, ...]:
    """A merge's result as plain values: the new fields (None once empty), root, adds, drops."""
    fields = None if merged.view is None else merged.view.packed()
    return fields, merged.root, merged.adds, merged.drops


def put(
    store: CellStore, n: int, value: int = 0, seq: int = 1, module: str = MODULE, pad: int = 0
) -> bytes:
    kh, entry, state_cbor = cell(n, value, seq, pad)
    store.put(module, kh, entry, state_cbor)
    return kh


def snapshot(store: CellStore, module: str = MODULE) -> Cells:
    """Every cell of ``module``: entry and state, read through ``get``."""
    out = {}
    for kh, entry in store.iter_entries(module):
        found = store.get(module, kh)
        assert found is not None
        assert found[0] == entry
        out[kh] = found
    return out


def store_files(world: Path) -> dict[str, str]:
    """Every file of the store and the CAS, relative path -> content digest (sha1 is enough)."""
    out = {}
    for top in ("state", "cas"):
        for dirpath, _dirs, files in os.walk(world / top):
            for name in files:
                path = Path(dirpath) / name
                out[str(path.relative_to(world))] = hashlib.sha1(path.read_bytes()).hexdigest()
    return out


def cas_objects(world: Path) -> list[Path]:
    return sorted(
        p for p in (world / "cas").glob("*/*") if p.is_file() and not p.name.endswith(".pin")
    )


def disk_bytes(world: Path) -> int:
    return sum((world / rel).stat().st_size for rel in store_files(world))


def write_format1(world: Path, modules: dict[str, Cells], meta: bytes) -> None:
    """A format-1 store (before issue 11) holding ``modules``, checkpointed with ``meta``."""
    root = world / "state" / "reducers"
    roots = {}
    for module, cells in modules.items():
        base = root / module
        shards: dict[int, dict[bytes, CellEntry]] = {}
        for kh, (entry, state_cbor) in cells.items():
            shards.setdefault(shard_of(kh), {})[kh] = entry
            folder = base / "cells" / kh.hex()[:2]
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{kh.hex()}.{entry.state_hash.hex()}.cbor").write_bytes(state_cbor)
        refs = {}
        (base / "index").mkdir(parents=True, exist_ok=True)
        for prefix, entries in shards.items():
            data = encode_shard(entries)
            shard_root = cbor.digest(data)
            (base / "index" / f"{prefix:03x}.{shard_root.hex()}.cbor").write_bytes(data)
            refs[prefix] = (shard_root, len(entries))
        (base / "index.cbor").write_bytes(encode_index(refs))
        roots[module] = index_root_of(refs)
    body = {"format": 1, "checkpoint": meta, "modules": roots}
    record = {**body, "digest": cbor.digest(cbor.dumps(body))}
    (root / "checkpoint.cbor").write_bytes(cbor.dumps(record))


class Crash(BaseException):
    """Stands for the process dying: nothing after the crash point runs."""


@contextlib.contextmanager
def crash_at(n: int) -> Iterator[list[str]]:
    """Raise ``Crash`` at the n-th durable operation (``-1``: never); yields the ops seen."""
    seen: list[str] = []

    def hook(op: str, path: str) -> None:
        if len(seen) == n:
            raise Crash(op, path)
        seen.append(f"{op} {path}")

    with fileio.fault_hook(hook):
        yield seen
