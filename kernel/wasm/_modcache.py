"""Where compiled reducer modules are kept between runs: an injected key/value interface.

Compiling a module costs milliseconds (~17 ms for 50 KB); loading wasmtime's serialized form
costs ~0.1 ms. The kernel never touches files, so the host is given a ``ModuleCache``; the file
implementation lives in ``world._modcache`` and an in-memory one is here.

Keys come from ``cache_key(wasm_hash, engine_fingerprint)``: lowercase hex and one ``-``, so a
file implementation can use them as file names as they are. Values are opaque bytes to the
cache; the host frames them with a checksum and treats anything that does not verify or that
wasmtime refuses to deserialize as a miss (it recompiles and overwrites), so a stale or torn
entry costs a compile, never a wrong module.
"""

from __future__ import annotations

import re
from typing import Final, Protocol

from air.cbor import hash_to_raw

__all__ = ["CACHE_KEY_RE", "InMemoryModuleCache", "ModuleCache", "cache_key"]

CACHE_KEY_RE: Final = re.compile(r"^[0-9a-f]{64}-[0-9a-f]{32}$")


class ModuleCache(Protocol):
    """Bytes by key. ``get`` returns ``None`` for a miss; ``put`` replaces."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...


def cache_key(wasm_hash: str, engine_fingerprint: str) -> str:
    """``<64 hex of the wasm hash>-<first 32 hex of the engine fingerprint>``."""
    return f"{hash_to_raw(wasm_hash).hex()}-{engine_fingerprint[:32]}"


class InMemoryModuleCache:
    """A dict, with counters so tests can see whether a load compiled or deserialized."""

    def __init__(self) -> None:
        self._entries: dict[str, bytes] = {}
        self.gets = 0
        self.hits = 0
        self.puts = 0

    def get(self, key: str) -> bytes | None:
        self.gets += 1
        data = self._entries.get(key)
        if data is not None:
            self.hits += 1
        return data

    def put(self, key: str, data: bytes) -> None:
        self.puts += 1
        self._entries[key] = bytes(data)

    def __len__(self) -> int:
        return len(self._entries)
