"""AIR kept in a world's CAS: a proposal's, and every era's after the genesis one.

An AIR is stored whole, so that it can be shown, shadowed, applied and replayed from the world
alone (the folder it came from may be gone): its wasm objects, every AIR node (as ``world
init`` stores them) and one *AIR document*, the canonical CBOR map
``{"format": 1, "sources": [[file, text, builtin], ...], "wasm": {path: address}}``, whose
address the governance records carry (``world.gov``). The genesis AIR lives in ``air/``
instead (``world._directory``).

``store_air`` makes every object durable (``FileCas.put``) before returning the address, so a
record naming it is never written before what it names. ``load_stored_air`` loads it back
with its wasm: the kernel's loader of an era (``kernel._eras``), a pure function of the
address, since every object is content-addressed.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Final

from air import AirSource, LoadedAir, cbor, load_air, resolve_relative
from air.errors import CborError
from world._airfiles import inspect_wasm
from world._cas import FileCas
from world.errors import StoreDamaged

__all__ = [
    "AIR_DOCUMENT_FORMAT",
    "air_loader",
    "current_air",
    "load_stored_air",
    "store_air",
    "stored_air_reader",
]

AIR_DOCUMENT_FORMAT: Final = 1


def store_air(cas: FileCas, air: LoadedAir, sources: list[AirSource]) -> str:
    """Put ``air``'s wasm, its nodes and its AIR document into ``cas``; the document's address.

    The document names the author's files relative to the folder that holds them all, and a
    module's absolute ``wasm`` path (what ``--module`` binds) relative to its file: the same
    AIR proposed from two folders (or two checkouts) is the same document, at the same
    address, and no record carries where the proposer kept it."""
    root = _common_folder(sources)
    wasm: dict[str, str] = {}
    for name, data in sorted(air.wasm_bytes.items()):
        model = air.defs[name]
        wasm[_portable(resolve_relative(model.file, model.model.wasm), root)] = cas.put(data)
    for data in [air.manifest_cbor, *air.def_cbor.values()]:
        cas.put(data)
    doc = {
        "format": AIR_DOCUMENT_FORMAT,
        "sources": [
            [s.file, s.text, True] if s.builtin else [*_portable_source(s, root), False]
            for s in sources
        ],
        "wasm": dict(sorted(wasm.items())),
    }
    return cas.put(cbor.dumps(doc))


def _common_folder(sources: list[AirSource]) -> str | None:
    """The folder holding every author's file, when all are absolute (else None: keep them)."""
    files = [s.file for s in sources if not s.builtin]
    if not files or not all(posixpath.isabs(f) for f in files):
        return None
    return posixpath.commonpath([posixpath.dirname(f) for f in files])


def _portable(path: str, root: str | None) -> str:
    if root is None or not posixpath.isabs(path):
        return path
    return posixpath.relpath(path, root)


def _portable_source(source: AirSource, root: str | None) -> tuple[str, str | bytes]:
    """The source's file relative to ``root``, its text with each module's absolute ``wasm``
    made relative to the file (a text that is not JSON is left as it is: it loaded as such)."""
    text = source.text
    if root is None or not isinstance(text, str):
        return _portable(source.file, root), text
    folder = posixpath.dirname(source.file)
    try:
        doc = json.loads(text)
    except ValueError:
        return _portable(source.file, root), text
    changed = False
    for node in doc if isinstance(doc, list) else [doc]:
        wasm = node.get("wasm") if isinstance(node, dict) else None
        if node is not None and isinstance(wasm, str) and posixpath.isabs(wasm):
            node["wasm"] = posixpath.relpath(wasm, folder)
            changed = True
    if changed:
        text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    return _portable(source.file, root), text


def load_stored_air(cas: FileCas, address: str) -> LoadedAir:
    """The AIR whose document is at ``address`` (``StoreDamaged`` naming the object if it is
    not an AIR document; ``ObjectMissing``/``HashMismatch`` from the CAS as for any object)."""
    try:
        doc = cbor.loads(cas.get(address))
        if doc.get("format") != AIR_DOCUMENT_FORMAT:
            raise ValueError(f"format {doc.get('format')!r}")
        sources = [AirSource(file, text, builtin) for file, text, builtin in doc["sources"]]
        wasm = {path: cas.get(wasm_address) for path, wasm_address in doc["wasm"].items()}
    except (CborError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise StoreDamaged(str(cas.path_of(address)), f"not an AIR document: {exc}") from exc
    read: Callable[[str], bytes | None] = wasm.get
    return load_air(sources, read, inspect_wasm)


def stored_air_reader(world_dir: Path) -> Callable[[str], LoadedAir]:
    """Address -> the AIR stored there, in the world at ``world_dir`` (read-only: a reader
    that does not open the world, as ``journal tail`` does)."""
    cas = FileCas(world_dir, readonly=True)
    return lambda address: load_stored_air(cas, address)


def current_air(world_dir: Path) -> LoadedAir:
    """The AIR the world at ``world_dir`` runs now, read without opening it: the genesis AIR,
    or the last applied upgrade's (``world.gov``; found as ``world._reading.applied_before``
    finds them, not by reading the journal)."""
    from world._directory import load_world_air
    from world._reading import applied_before
    from world.journal import FileJournal

    reader = FileJournal(world_dir / "journal", readonly=True)
    try:
        applied = applied_before(world_dir, reader, reader.seq_next)
    finally:
        reader.close()
    if not applied:
        return load_world_air(world_dir)
    return stored_air_reader(world_dir)(cbor.raw_to_hash(applied[-1].body["air"]))


def air_loader(cas: FileCas) -> Callable[[bytes], LoadedAir]:
    """The kernel's loader of an era's AIR (``kernel._eras.LoadAir``) over ``cas``."""
    return lambda raw: load_stored_air(cas, cbor.raw_to_hash(raw))
