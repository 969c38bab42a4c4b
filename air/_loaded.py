"""What loading AIR produces, and what it is given: the sources, the located defs, the wasm
callbacks, and the validated ``LoadedAir``. The loader (``air._loader``), the validator
(``air._validate``, ``air._plan_checks``) and the canonical forms (``air._canonical``) all
build on these; nothing here loads or checks anything.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from air._model import DefCap, DefEffect, DefModule, DefPlan, DefPolicy, Manifest
from air.types import TypeNode

__all__ = [
    "AirSource",
    "InspectWasm",
    "LoadedAir",
    "Located",
    "ReadWasm",
    "WasmInfo",
    "resolve_relative",
]


@dataclass(frozen=True)
class AirSource:
    """One AIR document: its path (for diagnostics and relative wasm paths) and JSON text
    (``bytes`` are read as UTF-8; ``world._airfiles`` passes them only when they are not)."""

    file: str
    text: str | bytes
    builtin: bool = False


class WasmInfo(Protocol):
    """What the validator needs to know about a module binary (``kernel.wasm._info`` has it)."""

    @property
    def imports(self) -> list[str]: ...
    @property
    def exports(self) -> dict[str, str]: ...
    @property
    def error(self) -> str | None: ...


@dataclass(frozen=True)
class Located:
    """A parsed def with where it came from."""

    file: str
    pointer: str
    model: Any
    raw: Any
    builtin: bool = False


ReadWasm = Callable[[str], bytes | None]
InspectWasm = Callable[[bytes], WasmInfo]


@dataclass
class LoadedAir:
    """A validated world definition. ``defs`` maps every def name to its located model."""

    manifest: Manifest
    manifest_file: str
    defs: dict[str, Located]
    schemas: dict[str, TypeNode]
    key_types: dict[str, TypeNode]
    wasm_hashes: dict[str, str]
    wasm_bytes: dict[str, bytes]
    def_hashes: dict[str, str] = field(default_factory=dict)
    def_cbor: dict[str, bytes] = field(default_factory=dict)
    manifest_cbor: bytes = b""
    manifest_hash: str = ""
    warnings: list[Any] = field(default_factory=list)
    unparsed: set[str] = field(default_factory=set)
    """Names of defs whose shape was rejected: their uses are not reported as unknown too."""

    def of_kind(self, model_type: type) -> dict[str, Any]:
        return {n: d.model for n, d in self.defs.items() if isinstance(d.model, model_type)}

    @property
    def modules(self) -> dict[str, DefModule]:
        return self.of_kind(DefModule)

    @property
    def plans(self) -> dict[str, DefPlan]:
        return self.of_kind(DefPlan)

    @property
    def effects(self) -> dict[str, DefEffect]:
        """By effect kind (``timer.set``), not by def name."""
        return {e.effect_kind: e for e in self.of_kind(DefEffect).values()}

    @property
    def caps(self) -> dict[str, DefCap]:
        return self.of_kind(DefCap)

    @property
    def policies(self) -> dict[str, DefPolicy]:
        return self.of_kind(DefPolicy)


def resolve_relative(air_file: str, path: str) -> str:
    """A path written in an AIR file, resolved against that file's folder (POSIX syntax)."""
    if posixpath.isabs(path):
        return posixpath.normpath(path)
    return posixpath.normpath(posixpath.join(posixpath.dirname(air_file), path))
