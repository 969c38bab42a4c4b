"""The compiled-module cache on disk: one file per key, ``<dir>/<key>``, written atomically.

Implements ``kernel.wasm._modcache.ModuleCache`` so a world reopens without recompiling its reducers
(wasmtime's serialized modules load in ~0.1 ms; compiling takes milliseconds per module).
Writes go through ``world._fsutil.atomic_write`` (temp, fsync, rename, fsync dir), so a reader
sees a whole entry or none. Keys are checked against ``kernel.wasm._modcache.CACHE_KEY_RE`` (hex and
one dash), so a key can never name a path outside the directory.

Not here: deciding whether an entry is still good. The host frames entries with a checksum and
treats a bad or incompatible one as a miss, recompiles and overwrites it; a missing file is a
miss, and so is something that is not a file of at most ``ENTRY_BYTES_MAX`` bytes (a FIFO, a
device, a folder: ``world._fileio.read_regular``, never read), which the next ``put`` replaces
if it can. Other I/O errors propagate: an unreadable world directory is a real problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from air.errors import InvalidArgument
from kernel.wasm import CACHE_KEY_RE
from world import _fileio as fileio
from world._fsutil import StrPath, atomic_write
from world.errors import StorageError, StoreDamaged

__all__ = ["ENTRY_BYTES_MAX", "FileModuleCache"]

ENTRY_BYTES_MAX: Final = 1 << 30
"""The largest cache entry read (a compiled module; a reducer's is tens to hundreds of KB)."""


class FileModuleCache:
    """``ModuleCache`` over a directory (created on the first ``put``)."""

    def __init__(self, directory: StrPath, *, readonly: bool = False) -> None:
        self.directory = Path(directory)
        self.readonly = readonly

    def _path(self, key: str) -> Path:
        if not isinstance(key, str) or not CACHE_KEY_RE.fullmatch(key):
            raise InvalidArgument("key", key, "must be a module cache key")
        return self.directory / key

    def get(self, key: str) -> bytes | None:
        try:
            return fileio.read_regular(self._path(key), ENTRY_BYTES_MAX, operation="read cache")
        except StoreDamaged:
            return None

    def put(self, key: str, data: bytes) -> None:
        """Store an entry; a read-only cache, a full disk or a read-only file system make this
        a no-op (the cache saves compile time and is never needed for correctness)."""
        path = self._path(key)
        if self.readonly:
            return
        try:
            fileio.mkdir(self.directory, parents=True, exist_ok=True)
            atomic_write(path, bytes(data))
        except (OSError, StorageError):
            return
