"""The world directory's own files: building a new world, reading its AIR back, throwing away a
damaged cell store, and swapping a rebuilt world in for an old one.

The swap (``swap_in``; ``world migrate cells`` builds the new world in ``swap_paths(path)[0]``,
``.<name>.migrating`` beside the world, checks and syncs it first)::

    1. rename .<name>.migrating -> .<name>.ready          (fsync parent)
    2. rename <name>            -> <backup>               (fsync parent)
    3. rename .<name>.ready     -> <name>                 (fsync parent)

A kill at any point leaves: before 2, the old world in place (a leftover ``.migrating`` or
``.ready`` folder is garbage); between 2 and 3, no ``<name>`` but a complete ``.ready``:
``recover_swap(path)`` finishes step 3 (``World.open`` calls it when the folder is missing;
a reader, which renames nothing, reads the world in ``.ready`` instead: ``swapped_in``); after
3, the new world. Rejected: one rename of a symlink (atomic, but then every world folder is a
symlink, and tools that copy or lock it must follow links).
"""

from __future__ import annotations

import glob
import json
import shutil
from pathlib import Path
from typing import Final

from air import AirSource, LoadedAir, cbor, jsontext, load_air, resolve_relative
from air.errors import HashMismatch, JsonError, WorldError
from kernel.errors import ObjectMissing
from kernel.subjects import make_subject
from world import _fileio as fileio
from world._airfiles import WORLD_AIR_BYTES_MAX, read_world_sources
from world._cas import FileCas
from world._fsutil import WorldLock, atomic_write, lock_folder, lock_world
from world.effects import ReceiptKey
from world.errors import (
    NotAWorld,
    StorageError,
    StoreDamaged,
    WorldLocked,
    storage_error,
    storage_errors,
)
from world.journal import FileJournal

__all__ = [
    "FORMAT",
    "INIT_INFIX",
    "build_world",
    "check_directory",
    "discard_store",
    "load_world_air",
    "modules_using",
    "read_module_wasm",
    "read_sources",
    "recover_swap",
    "remove_leftovers",
    "remove_tree",
    "swap_in",
    "swap_paths",
    "swapped_in",
]

FORMAT: Final = 1
STAGING_SUFFIX: Final = ".migrating"
READY_SUFFIX: Final = ".ready"


def build_world(
    path: Path,
    air: LoadedAir,
    sources: list[AirSource],
    partition: dict[str, int] | None = None,
) -> WorldLock:
    """Write a new world's files into the (empty, private) folder ``path``; return its lock.
    ``partition`` (``{index, count}``) makes it one partition of a partitioned world: its
    genesis record says so (``kernel._partition``)."""
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
            genesis: dict[str, object] = {"manifest_hash": cbor.hash_to_raw(air.manifest_hash)}
            if partition is not None:
                genesis["partition"] = partition
            journal.append("world.created", make_subject("world", "manifest"), genesis)
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
    """The world's AIR: its sources, each module's wasm from the CAS, checked against
    ``air/manifest.cbor``. A wasm object that is missing is ``ObjectMissing`` naming its file
    and module; one that was altered or is not a file, ``StoreDamaged`` naming both."""
    sources, wasm_map = read_sources(path / "air" / "sources.json")
    cas = FileCas(path, readonly=True)

    def read_wasm(p: str) -> bytes | None:
        return read_module_wasm(cas, sources, p, wasm_map[p]) if p in wasm_map else None

    air = load_air(sources, read_wasm)
    manifest = path / "air" / "manifest.cbor"
    stored = fileio.read_regular(manifest, WORLD_AIR_BYTES_MAX)
    if stored is None:
        raise StoreDamaged(str(manifest), "missing; the world directory was altered")
    if stored != air.manifest_cbor:
        raise StoreDamaged(
            str(manifest), "does not match the AIR sources; the world directory was altered"
        )
    return air


def read_module_wasm(cas: FileCas, sources: list[AirSource], wasm: str, address: str) -> bytes:
    """The wasm the AIR names ``wasm`` (a path in ``sources``), stored in ``cas`` at
    ``address``; every error names the object's file and the module(s) it is."""
    try:
        return cas.get(address)
    except ObjectMissing as exc:
        raise ObjectMissing(exc.address, exc.path, modules_using(sources, wasm)) from exc
    except HashMismatch as exc:
        reason = f"altered: its content hash is {exc.actual}"
        raise StoreDamaged(str(cas.path_of(address)), _of_module(reason, sources, wasm)) from exc
    except StoreDamaged as exc:
        raise StoreDamaged(exc.path, _of_module(exc.reason, sources, wasm)) from exc


def _of_module(reason: str, sources: list[AirSource], wasm: str) -> str:
    return f"{reason} (the wasm of module {modules_using(sources, wasm)})"


def modules_using(sources: list[AirSource], wasm: str) -> str:
    """The modules whose ``wasm`` is the path ``wasm`` in ``sources``, comma-separated (the
    path itself when no source can be read to say): for error messages only."""
    names = []
    for source in sources:
        try:
            doc = jsontext.loads(source.text, source=source.file)
        except JsonError:
            continue
        for node in doc if isinstance(doc, list) else [doc]:
            named = isinstance(node, dict) and node.get("$kind") == "defmodule"
            target = node.get("wasm") if named else None
            if isinstance(target, str) and resolve_relative(source.file, target) == wasm:
                names.append(str(node.get("name")))
    return ", ".join(names) or wasm


# --- swapping a rebuilt world in --------------------------------------------------------------


def swap_paths(path: Path) -> tuple[Path, Path]:
    """The folders a swap uses beside ``path``: (``.<name>.migrating``, ``.<name>.ready``)."""
    parent = path.absolute().parent
    return parent / f".{path.name}{STAGING_SUFFIX}", parent / f".{path.name}{READY_SUFFIX}"


def _rename(source: Path, target: Path) -> None:
    fileio.replace(source, target)
    fileio.fsync_dir(target.parent)


def swap_in(path: Path, backup: Path) -> None:
    """Swap the complete, synced world in ``swap_paths(path)[0]`` in for ``path``, which moves
    to ``backup`` (the three renames of the module docstring)."""
    staging, ready = swap_paths(path)
    _rename(staging, ready)
    _rename(path, backup)
    _rename(ready, path)


def swapped_in(path: Path) -> Path | None:
    """The complete new world of a swap that a crash stopped between its renames (``path``
    missing, ``.<name>.ready`` beside it), for a reader, which renames nothing: it reads the
    world there until a writer's open moves it into place."""
    path = Path(path)
    _staging, ready = swap_paths(path)
    if not path.exists() and (ready / "air" / "sources.json").is_file():
        return ready
    return None


def recover_swap(path: Path) -> bool:
    """Finish or undo a swap a crash interrupted; True if it changed anything.

    A missing world folder beside a ``.ready`` one is a crash between the swap's renames:
    the new world is complete, so it is moved into place. A ``.migrating`` or ``.ready``
    folder beside a present world is left over from a crash before the swap: removed."""
    path = Path(path)
    staging, ready = swap_paths(path)
    changed = False
    with storage_errors("recover migration"):
        if not path.exists() and ready.is_dir():
            try:
                _rename(ready, path)
            except WorldError:
                if not path.exists():  # another process did it meanwhile
                    raise
            changed = True
        for leftover in (staging, ready):
            if leftover.exists() and path.exists():
                remove_tree(leftover)
                changed = True
    return changed


def check_directory(path: Path) -> None:
    """Raise what keeps ``path`` from being read as a world: ``NotAWorld`` without
    ``air/sources.json``; ``StoreDamaged`` naming it when something else than a regular file is
    there (a FIFO, a device such as a symlink to ``/dev/zero``, a folder: found by a ``stat``,
    never opened); with it, a ``StorageError`` naming ``journal/`` when that is not a
    folder (``ENOTDIR``: a file in its place) or is missing (``ENOENT``)."""
    path = Path(path)
    sources = path / "air" / "sources.json"
    try:
        fileio.check_regular(sources)
    except (FileNotFoundError, NotADirectoryError):
        raise NotAWorld(str(path)) from None
    except StoreDamaged as exc:
        raise StoreDamaged(
            exc.path, f"{exc.reason}; it holds the world's AIR sources: put it back, from a backup"
        ) from None
    except OSError as exc:
        raise storage_error(exc, "open", sources) from exc
    journal = path / "journal"
    if journal.is_dir():
        return
    there = journal.exists() or journal.is_symlink()
    detail = (
        f"{'not a folder' if there else 'missing'}: the journal (the world's history, which "
        "nothing rebuilds) is a folder of segments; put it back, from a backup"
    )
    raise StorageError(str(journal), "open", "ENOTDIR" if there else "ENOENT", detail)


INIT_INFIX: Final = ".init-"
"""``world init`` builds ``<name>`` in a hidden sibling ``.<name>.init-*`` and renames it."""


def remove_leftovers(parent: Path, name: str, infix: str) -> list[Path]:
    """Remove the hidden folders ``.<name><infix>*`` in ``parent`` that killed builds left (an
    ``init``: ``INIT_INFIX``; a ``fork``: ``world.history``'s); return them. A folder a live
    build holds (its ``flock``: ``lock_folder`` cannot take it), or a symlink, stays."""
    removed = []
    for leftover in sorted(parent.glob(f".{glob.escape(name)}{infix}*")):
        if leftover.is_symlink() or not leftover.is_dir():
            continue
        try:
            hold = lock_folder(leftover)
        except (WorldLocked, FileNotFoundError):  # a live build's, or gone meanwhile
            continue
        try:
            remove_tree(leftover)
        finally:
            hold.release()
        removed.append(leftover)
    return removed
