"""The kernel's ``Runner`` over the WASM host: modules load lazily by name, compiled once and
cached on disk under ``<world>/cache`` keyed by wasm hash and engine fingerprint.

It is also where the world layer reads ``WORLD_NATIVE`` (``kernel/`` reads no environment):
``0`` (or ``off``, ``false``, ``no``) selects the pure-Python step path for the process, anything
else (the default) the native one where it was built. Every world open, replay and time-travel
makes a runner, so the variable is honoured before any kernel of theirs runs a step.
"""

from __future__ import annotations

import os
from pathlib import Path

from air import LoadedAir
from kernel import native
from kernel.wasm import HostLimits, Reducer, ReducerHost
from world._modcache import FileModuleCache

__all__ = ["HostRunner", "native_requested"]

_OFF = frozenset({"0", "off", "false", "no"})


def native_requested() -> bool:
    """Whether ``WORLD_NATIVE`` leaves the native step path on (the default)."""
    return os.environ.get("WORLD_NATIVE", "1").strip().lower() not in _OFF


class HostRunner:
    def __init__(
        self,
        air: LoadedAir,
        cache_dir: Path,
        limits: HostLimits | None = None,
        *,
        readonly: bool = False,
    ) -> None:
        self._air = air
        native.set_enabled(native_requested())
        self._host = ReducerHost(limits, cache=FileModuleCache(cache_dir, readonly=readonly))
        self._reducers: dict[str, Reducer] = {}

    @property
    def backend(self) -> str:
        return self._host.backend

    @property
    def native(self) -> bool:
        """Whether steps run through the native extension."""
        return self._host.native

    def reducer(self, name: str) -> Reducer:
        found = self._reducers.get(name)
        if found is None:
            found = self._host.load(
                self._air.wasm_bytes[name], expected_hash=self._air.wasm_hashes[name]
            )
            self._reducers[name] = found
        return found

    def run(self, reducer: str, input_cbor: bytes) -> bytes:
        return self.reducer(reducer).call(input_cbor)
