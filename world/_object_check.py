"""Reading back every CAS object a world needs to open: the wasm of each module, then (if every
wasm is whole, so that the AIR loads) the manifest and every AIR definition node, each verified
against its address. What ``world journal verify`` checks beside the journal
(``world._repair.check_world``), for the world's own files that the journal does not rebuild.

An object that is missing, altered, or not a file is an ``ObjectProblem`` (its address, file,
what it is, and why); an AIR that cannot be read at all (``air/sources.json`` damaged, or the
sources not loading) is the check's ``air_problem``. Writes nothing. Not here: what such a
problem means for the world (it makes the world not ``ok``, and is no reason to repair: cutting
the journal cannot bring an object back; a copy of the world, or ``world init`` again, can).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air import AirSource, cbor, load_air
from air.errors import HashMismatch, WorldError
from kernel.errors import ObjectMissing
from world._cas import FileCas
from world._directory import modules_using, read_sources
from world.errors import StorageError, StoreDamaged

__all__ = ["ObjectCheck", "ObjectProblem", "check_objects"]


@dataclass(frozen=True)
class ObjectProblem:
    """A CAS object the world needs (``what``: the wasm of a module, an AIR node) that is not
    there whole: ``reason`` is ``missing``, ``altered`` (its bytes hash to something else) or
    why it cannot be read (not a file, too large)."""

    address: str
    path: str
    what: str
    reason: str

    def describe(self) -> str:
        return f"{self.what} ({self.address}) at {self.path}: {self.reason}"

    def as_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "path": self.path,
            "what": self.what,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class ObjectCheck:
    """What ``check_objects`` found: how many objects it read, the problems, and why the AIR
    could not be read at all (None: it could)."""

    checked: int = 0
    problems: tuple[ObjectProblem, ...] = ()
    air_problem: str | None = None


def check_objects(path: Path) -> ObjectCheck:
    """Read back every CAS object the world at ``path`` needs to open: each module's wasm,
    then (if every wasm is whole, so that the AIR loads) the manifest and every definition
    node. Writes nothing."""
    try:
        sources, wasm_map = read_sources(path / "air" / "sources.json")
    except StoreDamaged as damage:
        return ObjectCheck(air_problem=f"{damage.path}: {damage.reason}")
    cas = FileCas(path, readonly=True)
    found: dict[str, bytes] = {}
    problems = []
    for wasm, address in sorted(wasm_map.items()):
        what = f"the wasm of module {modules_using(sources, wasm)}"
        data, problem = _read_object(cas, address, what)
        if data is not None:
            found[wasm] = data
        if problem is not None:
            problems.append(problem)
    if problems:
        return ObjectCheck(len(wasm_map), tuple(problems))
    nodes = _air_nodes(sources, found.get)
    if isinstance(nodes, str):
        return ObjectCheck(len(wasm_map), (), nodes)
    for what, data in nodes:
        _data, problem = _read_object(cas, cbor.content_hash(data), what)
        if problem is not None:
            problems.append(problem)
    return ObjectCheck(len(wasm_map) + len(nodes), tuple(problems))


def _air_nodes(
    sources: list[AirSource], read_wasm: Callable[[str], bytes | None]
) -> list[tuple[str, bytes]] | str:
    """Each AIR node the world stored in its CAS (what it is, its bytes), or why the AIR does
    not load."""
    try:
        air = load_air(sources, read_wasm)
    except WorldError as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    nodes = [("the manifest", air.manifest_cbor)]
    nodes.extend((f"the AIR node {name}", data) for name, data in sorted(air.def_cbor.items()))
    return nodes


def _read_object(
    cas: FileCas, address: str, what: str
) -> tuple[bytes | None, ObjectProblem | None]:
    """The object at ``address``, or what is wrong with it."""
    path = str(cas.path_of(address))
    try:
        return cas.get(address), None
    except ObjectMissing:
        reason = "missing"
    except HashMismatch as exc:
        reason = f"altered: its content hash is {exc.actual}"
    except (StoreDamaged, StorageError) as exc:
        reason = exc.reason if isinstance(exc, StoreDamaged) else f"unreadable: {exc.detail}"
    return None, ObjectProblem(address, path, what, reason)
