"""The kernel's ``Runner`` over the WASM host: modules load lazily by name, compiled once and
cached on disk under ``<world>/cache`` keyed by wasm hash and engine fingerprint."""

from __future__ import annotations

from pathlib import Path

from air.loader import LoadedAir
from kernel.host import HostLimits, Reducer, ReducerHost
from world.modcache import FileModuleCache

__all__ = ["HostRunner"]


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
        self._host = ReducerHost(limits, cache=FileModuleCache(cache_dir, readonly=readonly))
        self._reducers: dict[str, Reducer] = {}

    @property
    def backend(self) -> str:
        return self._host.backend

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
