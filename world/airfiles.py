"""Reading AIR from disk: one JSON file or a folder of ``*.air.json`` files, plus the built-in
``sys/`` defs shipped in the ``air`` package, with module binaries read relative to their file.

This is the I/O half of ``air.loader.load_air``; the pure half never opens a file.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from air.errors import Diagnostic, ManifestError
from air.loader import AirSource, LoadedAir, WasmInfo, load_air
from kernel.wasminfo import inspect_wasm_report

__all__ = ["air_sources", "builtin_sources", "inspect_wasm", "load_air_path", "read_file"]


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
    return [AirSource(str(f), f.read_text(encoding="utf-8")) for f in files]


def read_file(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        return None


def inspect_wasm(data: bytes) -> WasmInfo:
    return inspect_wasm_report(data)


def load_air_path(path: Path) -> LoadedAir:
    """Load and validate the AIR at ``path`` (file or folder) with the built-in defs."""
    return load_air(builtin_sources() + air_sources(path), read_file, inspect_wasm)
