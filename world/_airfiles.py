"""Reading AIR from disk: one JSON file or a folder of ``*.air.json`` files, plus the built-in
``sys/`` defs shipped in the ``air`` package, with module binaries read relative to their file;
and reading back the AIR sources a world stored (``<world>/air/sources.json``); and binding a
module that names no wasm (AgentOS's ``defmodule``s, whose build fills in the hash) to a wasm
file (``bind_module_wasm``, ``world init --module NAME=FILE.wasm``).

A binding is written into the module's def in the sources: the document holding it is stored
re-serialised with ``"wasm": "<absolute path>"`` added, exactly as if the author had written
that line. So the world stores, reopens, replays, exports and copies its AIR as it does any
other (the wasm path -> hash map of ``sources.json`` covers the bound file like any other), and
the manifest hash is what the AIR plus that wasm give: a module's ``wasm`` path is not hashed,
its wasm's hash is. Rejected: a separate ``modules`` map in ``sources.json``, which every reader
of a world's sources (open, repair, migrate, upgrades, archives) would have to learn.

This is the I/O half of ``air._loader.load_air``; the pure half never opens a file. Nothing read
here raises a bare Python error: an author's file that cannot be read is a ``ManifestError``
diagnostic (bytes that are not UTF-8 go to the loader, which says where), and a world's own
``sources.json`` that is not what the world wrote is ``StoreDamaged`` naming the file. Every
file is read with ``world._fileio.read_regular``: a FIFO, a device or a folder where a file
should be is reported, never read (an author's file too, up to ``AUTHOR_FILE_BYTES_MAX``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Final

from air import AirSource, LoadedAir, WasmInfo, jsontext, load_air
from air.errors import Diagnostic, InvalidArgument, JsonError, ManifestError
from kernel.wasm import inspect_wasm_report
from world import _fileio as fileio
from world.errors import StorageError, StoreDamaged

__all__ = [
    "AUTHOR_FILE_BYTES_MAX",
    "WORLD_AIR_BYTES_MAX",
    "air_sources",
    "bind_module_wasm",
    "builtin_sources",
    "inspect_wasm",
    "load_air_path",
    "read_file",
    "read_world_sources",
]


AUTHOR_FILE_BYTES_MAX: Final = 256 << 20
"""The largest AIR document or wasm binary an author's folder may hand ``world init``."""
WORLD_AIR_BYTES_MAX: Final = 256 << 20
"""The largest ``air/sources.json`` or ``air/manifest.cbor`` a world reads."""


def builtin_sources() -> list[AirSource]:
    text = resources.files("air.sys").joinpath("sys.air.json").read_text(encoding="utf-8")
    return [AirSource("<builtin>/sys.air.json", text, builtin=True)]


def air_sources(path: Path) -> list[AirSource]:
    """The AIR documents at ``path``; raise ``ManifestError`` if there are none to read."""
    if path.is_dir():
        files = sorted(path.glob("*.air.json"))
        if not files:
            raise ManifestError(
                [Diagnostic(str(path), "", "air.json", "folder holds no *.air.json files")]
            )
    elif path.is_file():
        files = [path]
    else:
        raise ManifestError([Diagnostic(str(path), "", "air.json", "no such file or folder")])
    sources, unreadable = [], []
    for file in files:
        try:
            data = fileio.read_regular(file, AUTHOR_FILE_BYTES_MAX, damaged=StoreDamaged)
        except (StoreDamaged, StorageError) as exc:
            detail = exc.reason if isinstance(exc, StoreDamaged) else exc.detail
            unreadable.append(Diagnostic(str(file), "", "air.json", f"cannot read: {detail}"))
            continue
        if data is None:
            unreadable.append(Diagnostic(str(file), "", "air.json", "cannot read: no such file"))
            continue
        sources.append(AirSource(str(file), _text(data)))
    if unreadable:
        raise ManifestError(unreadable)
    return sources


def _text(data: bytes) -> str | bytes:
    """UTF-8 text as ``str``; other bytes as they are, for the loader to say where they fail
    (only valid text is ever stored in a world, which keeps the sources as JSON strings)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def bind_module_wasm(
    sources: list[AirSource], bindings: Mapping[str, str | os.PathLike[str]]
) -> list[AirSource]:
    """``sources`` with each module of ``bindings`` (name -> wasm file) given that ``wasm``
    (see the module docstring). ``InvalidArgument`` (argument ``module``) naming the module if
    it is not a module of the AIR, already names its wasm or ``wasm_hash``, or its file is not
    a file. A source that is not JSON is left as it is: the loader reports it."""
    paths: dict[str, str] = {}
    for name, file in bindings.items():
        path = os.path.abspath(os.fspath(file))
        if not os.path.isfile(path):
            raise InvalidArgument("module", f"{name}={file}", f"no wasm file {path}")
        paths[name] = Path(path).as_posix()
    found: set[str] = set()
    out = []
    for source in sources:
        doc = None if source.builtin or not paths else _json_or_none(source)
        changed = False
        for node in doc if isinstance(doc, list) else [doc]:
            if not (isinstance(node, dict) and node.get("$kind") == "defmodule"):
                continue
            module = node.get("name")
            if not isinstance(module, str) or module not in paths:
                continue
            if "wasm" in node or "wasm_hash" in node:
                named = "wasm" if "wasm" in node else "wasm_hash"
                reason = (
                    f"module {module} already names its {named} ({node[named]!r}) in "
                    f"{source.file}; --module binds only a module that names neither"
                )
                raise InvalidArgument("module", f"{module}={paths[module]}", reason)
            node["wasm"] = paths[module]
            found.add(module)
            changed = True
        if changed:
            text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
            out.append(AirSource(source.file, text, source.builtin))
        else:
            out.append(source)
    for name in paths:
        if name not in found:
            modules = _module_names(sources)
            known = ", ".join(modules) if modules else "none"
            reason = f"the AIR has no module {name} (its modules: {known})"
            raise InvalidArgument("module", f"{name}={paths[name]}", reason)
    return out


def _json_or_none(source: AirSource) -> Any:
    try:
        return jsontext.loads(source.text, source=source.file)
    except JsonError:
        return None


def _module_names(sources: list[AirSource]) -> list[str]:
    names = set()
    for source in sources:
        doc = None if source.builtin else _json_or_none(source)
        for node in doc if isinstance(doc, list) else [doc]:
            if isinstance(node, dict) and node.get("$kind") == "defmodule":
                names.add(str(node.get("name")))
    return sorted(names)


BUILTIN_PREFIX: Final = "<builtin>/"


def read_file(path: str) -> bytes | None:
    """The file's bytes, or None if it is missing or cannot be read (the loader reports it).
    A ``<builtin>/NAME.wasm`` path (a built-in reducer's, ``air.sys.workspace``) is the
    bundled ``reducers/NAME/NAME.wasm``."""
    if path.startswith(BUILTIN_PREFIX):
        from world.sdk import bundle_root

        name = path.removeprefix(BUILTIN_PREFIX)
        if "/" in name or not name.endswith(".wasm"):
            return None
        path = str(bundle_root() / "reducers" / name.removesuffix(".wasm") / name)
    try:
        return fileio.read_regular(path, AUTHOR_FILE_BYTES_MAX)
    except (StoreDamaged, StorageError):
        return None


def inspect_wasm(data: bytes) -> WasmInfo:
    return inspect_wasm_report(data)


def load_air_path(path: Path) -> LoadedAir:
    """Load and validate the AIR at ``path`` (file or folder) with the built-in defs."""
    return load_air(builtin_sources() + air_sources(path), read_file, inspect_wasm)


def read_world_sources(path: Path) -> tuple[list[AirSource], dict[str, str]]:
    """The AIR sources and the wasm path -> hash map a world stored in ``path``
    (``<world>/air/sources.json``, as ``{"sources": [{file, text, builtin}], "wasm": {...}}``).

    Raise ``StoreDamaged(str(path), reason)`` if the file is missing, unreadable, not JSON, or
    not of that shape. Other keys (the world's ``format``) are the caller's to check.
    """
    try:
        data = fileio.read_regular(path, WORLD_AIR_BYTES_MAX)
    except StorageError as exc:
        reason = f"cannot read the world's AIR sources: {exc.detail}"
        raise StoreDamaged(str(path), reason) from exc
    if data is None:
        raise StoreDamaged(str(path), "cannot read the world's AIR sources: no such file")
    try:
        doc = jsontext.loads(data, source=str(path))
    except JsonError as exc:
        reason = f"not a world's AIR sources: line {exc.line}, column {exc.column}: {exc.detail}"
        raise StoreDamaged(str(path), reason) from exc
    problem = _sources_problem(doc)
    if problem is not None:
        raise StoreDamaged(str(path), f"not a world's AIR sources: {problem}")
    sources = [AirSource(s["file"], s["text"], s["builtin"]) for s in doc["sources"]]
    return sources, dict(doc["wasm"])


def _sources_problem(doc: Any) -> str | None:
    """What is wrong with the shape of a parsed ``sources.json``, or None."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    entries, wasm = doc.get("sources"), doc.get("wasm")
    if not isinstance(entries, list):
        return "'sources' is not a list"
    for i, entry in enumerate(entries):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("file"), str)
            and isinstance(entry.get("text"), str)
            and isinstance(entry.get("builtin"), bool)
        ):
            return f"sources[{i}] is not {{file: text, text: text, builtin: bool}}"
    if not isinstance(wasm, dict):
        return "'wasm' is not an object"
    if not all(isinstance(value, str) for value in wasm.values()):
        return "'wasm' maps a path to something other than a hash"
    return None
