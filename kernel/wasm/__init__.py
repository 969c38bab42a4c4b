"""The WASM reducer host: load a module by content hash, run one step on a fresh instance.

Invariants:
- No carry-over: every step runs in a new store with a new instance, so a reducer sees nothing
  of its past but the ``state`` in its input.
- Deterministic engine: no wasm threads, NaN canonicalisation on, fuel metered, relaxed SIMD
  off (``_engine``); fuel and memory are limited per step (``HostLimits``), and a step that
  exceeds them fails cleanly with its reason.
- Two backends, byte-identical: ``fast`` (ctypes over wasmtime's C API, or one call into
  ``kernel.native``) and ``public`` (wasmtime-py's public API, the reference).
- A module is compiled once per engine and cached under its wasm hash and the engine's
  fingerprint (``ModuleCache``; ``world`` stores it on disk).

Private parts: ``_host`` (``ReducerHost``, ``Reducer``), ``_engine`` (every engine setting),
``_fastcall`` and ``_publiccall`` (the two step paths), ``_info`` (what a wasm binary imports
and exports, and whether it fits the reducer ABI), ``_modcache`` (the cache interface).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernel.wasm._host import BackendChoice, HostLimits, Reducer, ReducerHost
    from kernel.wasm._info import WasmInfo, WasmProblem, inspect_wasm, inspect_wasm_report
    from kernel.wasm._modcache import CACHE_KEY_RE, InMemoryModuleCache, ModuleCache, cache_key

__all__ = [
    "CACHE_KEY_RE",
    "BackendChoice",
    "HostLimits",
    "InMemoryModuleCache",
    "ModuleCache",
    "Reducer",
    "ReducerHost",
    "WasmInfo",
    "WasmProblem",
    "cache_key",
    "inspect_wasm",
    "inspect_wasm_report",
]


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``air._face``)."""
    if name not in __all__:  # first: the imports below look their submodules up here
        raise AttributeError(f"module 'kernel.wasm' has no attribute {name!r}")
    from air._face import export
    from kernel.wasm import _host, _info, _modcache

    return export("kernel.wasm", name, (_host, _info, _modcache), globals())
