"""What loading AIR produces, and what it is given: the sources, the located defs, the wasm
callbacks, and the validated ``LoadedAir``. The loader (``air._loader``), the validator
(``air._validate``, ``air._plan_checks``) and the canonical forms (``air._canonical``) all
build on these; nothing here loads or checks anything.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from air._model import DefCap, DefEffect, DefModule, DefPlan, DefPolicy, DefSecret, Manifest
from air.types import TypeNode

__all__ = [
    "AirSource",
    "InspectWasm",
    "LoadedAir",
    "Located",
    "ReadWasm",
    "WasmInfo",
    "is_cap_type_text",
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
    slot_caps: dict[str, dict[str, str]] = field(default_factory=dict)
    """Module -> slot -> defcap name, for each cap slot written as a cap type (``"timer"``,
    as AgentOS writes ``cap_slots``): the defcap of the grant the slot uses (its binding in
    ``module_bindings``, else the one grant of that cap type), else the one defcap of that
    cap type. ``modules`` gives the modules with these in place, which is what the kernel
    reads; ``defs`` keeps them as written (and hashed)."""

    def of_kind(self, model_type: type) -> dict[str, Any]:
        return {n: d.model for n, d in self.defs.items() if isinstance(d.model, model_type)}

    @property
    def modules(self) -> dict[str, DefModule]:
        """Every module, with its cap slots that name a cap type resolved (``slot_caps``)."""
        modules: dict[str, DefModule] = self.of_kind(DefModule)
        for name, resolved in self.slot_caps.items():
            module = modules[name]
            reducer = module.abi.reducer
            slots = {**reducer.cap_slots, **resolved}
            abi = module.abi.model_copy(
                update={"reducer": reducer.model_copy(update={"cap_slots": slots})}
            )
            modules[name] = module.model_copy(update={"abi": abi})
        return modules

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

    @property
    def secrets(self) -> dict[tuple[str, int], DefSecret]:
        """By ``(alias, version)`` (the name ``alias@version`` read), not by def name."""
        out = {}
        for name, model in self.of_kind(DefSecret).items():
            alias, _, version = name.rpartition("@")
            out[(alias, int(version))] = model
        return out


_CAP_TYPE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def is_cap_type_text(text: str) -> bool:
    """Whether a reducer's cap slot value is written as a cap type (``timer``, ``http.out``:
    AgentOS's ``cap_slots``) rather than a defcap name (``sys/timer@1``, which has a ``/``
    and an ``@``)."""
    return len(text) <= 64 and _CAP_TYPE_RE.fullmatch(text) is not None


def resolve_relative(air_file: str, path: str) -> str:
    """A path written in an AIR file, resolved against that file's folder (POSIX syntax)."""
    if posixpath.isabs(path):
        return posixpath.normpath(path)
    return posixpath.normpath(posixpath.join(posixpath.dirname(air_file), path))
