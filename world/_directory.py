"""The world directory's own files: building a new world, reading its AIR back, and throwing
away a damaged cell store. Private to ``world._world`` and ``world._repair``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Final

from air import cbor
from air._loader import AirSource, LoadedAir, load_air, resolve_relative
from air.errors import StoreDamaged
from kernel._subjects import make_subject
from world import _fileio as fileio
from world._airfiles import read_world_sources
from world._cas import FileCas
from world._fsutil import WorldLock, atomic_write, lock_world
from world.effects._receipts import ReceiptKey
from world.journal._file import FileJournal

__all__ = [
    "FORMAT",
    "build_world",
    "discard_store",
    "load_world_air",
    "read_sources",
    "remove_tree",
]

FORMAT: Final = 1


def build_world(path: Path, air: LoadedAir, sources: list[AirSource]) -> WorldLock:
    """Write a new world's files into the (empty, private) folder ``path``; return its lock."""
    fileio.mkdir(path / "journal", exist_ok=True)
    lock = lock_world(path)
    try:
        ReceiptKey.load_or_create(path)  # born with the world: copies of it sign alike
        cas = FileCas(path)
        wasm_map = {}
        for name, data in air.wasm_bytes.items():
            source = resolve_relative(air.defs[name].file, air.defs[name].model.wasm)
            wasm_map[source] = cas.put(data)
        for data in [air.manifest_cbor, *air.def_cbor.values()]:
            cas.put(data)  # every AIR node, content-addressed (SPEC §7)
        fileio.mkdir(path / "air", exist_ok=True)
        doc = {
            "format": FORMAT,
            "sources": [{"file": s.file, "text": s.text, "builtin": s.builtin} for s in sources],
            "wasm": wasm_map,
        }
        atomic_write(path / "air" / "sources.json", json.dumps(doc, indent=1).encode())
        atomic_write(path / "air" / "manifest.cbor", air.manifest_cbor)
        with FileJournal.open(path / "journal") as journal:
            journal.append(
                "world.created",
                make_subject("world", "manifest"),
                {"manifest_hash": cbor.hash_to_raw(air.manifest_hash)},
            )
            journal.commit()
    except BaseException:
        lock.release()
        raise
    return lock


def remove_tree(path: Path) -> None:
    """Best-effort removal of a folder this process made or moved aside (not durable state)."""
    shutil.rmtree(path, ignore_errors=True)


def discard_store(path: Path) -> None:
    """Move the damaged cell store aside (one rename: from then on there is no checkpoint),
    then delete it."""
    store = path / "state" / "reducers"
    if not store.exists():
        return
    aside = path / "state" / "reducers.damaged"
    remove_tree(aside)
    fileio.replace(store, aside)
    fileio.fsync_dir(path / "state")
    remove_tree(aside)


def read_sources(path: Path) -> tuple[list[AirSource], dict[str, str]]:
    """The AIR sources and the wasm path -> hash map stored in a world's ``sources.json``
    (``StoreDamaged`` naming the file if it is missing, unreadable or of the wrong shape)."""
    return read_world_sources(path)


def load_world_air(path: Path) -> LoadedAir:
    sources, wasm_map = read_sources(path / "air" / "sources.json")
    cas = FileCas(path, readonly=True)

    def read_wasm(p: str) -> bytes | None:
        return cas.get(wasm_map[p]) if p in wasm_map else None

    air = load_air(sources, read_wasm)
    stored = (path / "air" / "manifest.cbor").read_bytes()
    if stored != air.manifest_cbor:
        raise StoreDamaged(
            str(path / "air" / "manifest.cbor"),
            "does not match the AIR sources; the world directory was altered",
        )
    return air
