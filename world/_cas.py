"""The world's content-addressed store: ``<world>/cas/<2 hex>/<62 hex>`` (SPEC §7).

An object's name is the blake3 of its bytes, so an object is written once and never changes.

Invariants:
* ``put`` is idempotent and atomic: the object appears whole or not at all (temp file in
  ``cas/.tmp``, fsync, rename, fsync dir), and is durable when ``put`` returns. Temp files left
  by a crash are removed when the store is opened.
* ``get`` verifies: bytes whose blake3 differs from their address raise ``HashMismatch``; an
  absent object raises ``ObjectMissing`` naming its file. Something else in an object's place
  (a FIFO, a device, a folder) or an object over ``OBJECT_BYTES_MAX`` is ``StoreDamaged``
  naming the file, never read (``world._fileio.read_regular``).

Not here: garbage collection. The cell store (``world.cellstore._store``) writes its index objects,
shards and large states here in bulk (unsynced, then one sync) and unlinks the ones it owns once
no committed checkpoint reaches them (``world.cellstore._flush`` says which it may delete). An
object the CAS held before a cell took the same bytes is never collected. The other way round
(a blob ``put`` of bytes that a cell's large state, a shard group or a snapshot already holds)
``put`` finds the object there and **pins** it: an empty ``<62 hex>.pin`` beside it, durable
before ``put`` returns (the object too: the cell store may have written it unsynced), and the
cell store never unlinks a pinned object (``pinned``). So a shared object can leak, never be
lost. ``SHARING`` makes the two decisions one at a time: blob puts run on adapter threads while
the engine thread checkpoints, and a put that found the object just before the collector
unlinked it would otherwise pin a file that is gone.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import Final

from air import cbor
from air.errors import HashMismatch, WrongMode
from kernel.errors import ObjectMissing
from world import _fileio as fileio
from world._fsutil import atomic_write

__all__ = [
    "CAS_DIR",
    "OBJECT_BYTES_MAX",
    "PIN_SUFFIX",
    "SHARING",
    "FileCas",
    "pin_path",
    "pinned",
]

CAS_DIR: Final = "cas"
OBJECT_BYTES_MAX: Final = 1 << 30
"""The largest object ``get`` reads (it reads an object whole): a wasm module, an AIR node, a
snapshot, a shard group (≤ 128 KiB), a cell's state, a blob. A file past it is damage."""
PIN_SUFFIX: Final = ".pin"
_TMP_DIR: Final = ".tmp"
SHARING: Final = threading.Lock()
"""Held by ``put`` and by the cell store's unlinking of its own objects (see the docstring)."""


def pin_path(object_path: str) -> str:
    return object_path + PIN_SUFFIX


def pinned(object_path: str) -> bool:
    """Whether a ``put`` from outside the cell store shares the object at ``object_path``."""
    return os.path.exists(pin_path(object_path))


class FileCas:
    """``kernel.cells.Cas`` over files under ``<world>/cas``.

    Construct a writable one only while holding the world's write lock: opening clears
    ``cas/.tmp``, which would break another process's put in flight. ``readonly=True`` writes
    nothing and refuses ``put``.
    """

    def __init__(self, world_dir: Path, *, readonly: bool = False) -> None:
        self.root = Path(world_dir) / CAS_DIR
        self._tmp = self.root / _TMP_DIR
        self.readonly = readonly
        if readonly:
            return
        fileio.mkdir(self._tmp, parents=True, exist_ok=True)
        for leftover in self._tmp.iterdir():
            fileio.unlink(leftover, missing_ok=True)

    def path_of(self, address: str) -> Path:
        """Where ``address`` lives; raises ``CborError`` if it is not ``blake3:<64 hex>``."""
        hex_digest = cbor.hash_to_raw(address).hex()
        return self.root / hex_digest[:2] / hex_digest[2:]

    def put(self, data: bytes) -> str:
        if self.readonly:
            raise WrongMode("put into the content store", "open read-only")
        address = cbor.content_hash(data)
        path = self.path_of(address)
        with SHARING:
            try:
                found = path.stat()
                if stat.S_ISREG(found.st_mode) and found.st_size == len(data):
                    self._pin(path)
                    return address
            except FileNotFoundError:
                pass
            if not path.parent.is_dir():
                fileio.mkdir(path.parent, exist_ok=True)
                fileio.fsync_dir(self.root)
            atomic_write(path, data, tmp_dir=self._tmp)
        return address

    def _pin(self, path: Path) -> None:
        """Mark an object that a second ``put`` shares (see the module docstring), after making
        its bytes durable."""
        pin = Path(pin_path(str(path)))
        if not pin.exists():
            fileio.fsync_file(path)
            atomic_write(pin, b"", tmp_dir=self._tmp)

    def get(self, address: str) -> bytes:
        path = self.path_of(address)
        data = fileio.read_regular(path, OBJECT_BYTES_MAX, operation="read object")
        if data is None:
            raise ObjectMissing(address, str(path))
        actual = cbor.content_hash(data)
        if actual != address:
            raise HashMismatch(address, actual)
        return data
