"""The file cell store's files: where each lives, and every durable operation on them, in the
order the flush protocol of ``world.cellstore._store`` needs (write the plan and the objects, sync
them, commit, collect) and its recovery. Writes go through ``world._fileio`` (fault hooks), and
so do reads (``read_regular``): a FIFO, a device or a folder in place of the checkpoint, the
plan or an object, or one larger than its bound, is ``StoreDamaged`` naming it, never read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Final

from air import cbor
from air.errors import CborError
from world import _fileio as fileio
from world._cas import CAS_DIR, SHARING, pinned
from world._fsutil import (
    TMP_SUFFIX,
    StrPath,
    atomic_write,
    in_threads,
    sync_paths,
    write_many_unsynced,
    write_unsynced,
)
from world.cellstore._checkpoint import (
    EMPTY_CHECKPOINT,
    FORMAT,
    Checkpoint,
    FlushPlan,
    decode_checkpoint,
    decode_plan,
    encode_plan,
)
from world.cellstore._legacy import LEGACY_INTENT_NAME, legacy_dirs, remove_tree
from world.errors import StoreDamaged

__all__ = [
    "CHECKPOINT_BYTES_MAX",
    "CHECKPOINT_NAME",
    "PLAN_BYTES_MAX",
    "PLAN_NAME",
    "REDUCERS_DIR",
    "StoreDisk",
    "read_or_none",
]

REDUCERS_DIR: Final = ("state", "reducers")
CHECKPOINT_NAME: Final = "checkpoint.cbor"
PLAN_NAME: Final = "flush-plan.cbor"
CHECKPOINT_BYTES_MAX: Final = 64 << 20
"""The largest ``checkpoint.cbor`` read: a root per reducer and the kernel's few bytes."""
PLAN_BYTES_MAX: Final = 1 << 30
"""The largest ``flush-plan.cbor`` read: 32 bytes per object a flush created or let go."""


def read_or_none(path: str, bytes_max: int) -> bytes | None:
    """The bytes of the store's file at ``path``, None if there is none; ``StoreDamaged`` if
    something else is there or it is over ``bytes_max``, ``StorageError`` if it cannot be read."""
    return fileio.read_regular(path, bytes_max)


class StoreDisk:
    """Paths and durable operations of one world's cell store."""

    def __init__(self, world_dir: StrPath) -> None:
        self.world = os.fspath(world_dir)
        self.root = os.path.join(self.world, *REDUCERS_DIR)
        self.cas = os.path.join(self.world, CAS_DIR)
        self.checkpoint = os.path.join(self.root, CHECKPOINT_NAME)
        self.plan = os.path.join(self.root, PLAN_NAME)
        self._known_dirs: set[str] = set()

    def object_path(self, raw: bytes) -> str:
        hex_digest = raw.hex()
        return os.path.join(self.cas, hex_digest[:2], hex_digest[2:])

    def _unlink_object(self, raw: bytes) -> None:
        """Unlink one of the store's objects, unless a ``put`` from outside shares it."""
        self._unlink_path(self.object_path(raw))

    @staticmethod
    def _unlink_path(path: str) -> None:
        if not pinned(path):
            fileio.unlink(path, missing_ok=True)

    def read_checkpoint(self) -> Checkpoint:
        data = read_or_none(self.checkpoint, CHECKPOINT_BYTES_MAX)
        if data is None:
            return EMPTY_CHECKPOINT
        try:
            return decode_checkpoint(data)
        except CborError as exc:
            raise StoreDamaged(self.checkpoint, f"not a cell checkpoint: {exc}") from exc

    def holds(self, raw: bytes, data: bytes) -> bool:
        """Whether the CAS already holds ``data`` under ``raw`` (a damaged copy does not)."""
        path = self.object_path(raw)
        try:
            if os.stat(path).st_size != len(data):
                return False
            return fileio.read_regular(path, len(data)) == data
        except (FileNotFoundError, StoreDamaged):  # not there, or not a file: write it anew
            return False

    def write(self, plan: FlushPlan, objects: Iterable[tuple[bytes, bytes]]) -> None:
        """Steps 2 of the flush: the plan, then the objects, then one batch sync of the objects
        (the plan is not synced: see ``world.cellstore._store``)."""
        write_unsynced(self.plan, encode_plan(plan))
        files: list[tuple[str, bytes]] = []
        dirs: set[str] = set()
        for raw, data in objects:
            path = self.object_path(raw)
            parent = os.path.dirname(path)
            if parent not in self._known_dirs:
                if not os.path.isdir(parent):
                    fileio.mkdir(parent, parents=True, exist_ok=True)
                    dirs.update((self.cas, self.world))  # a new folder's entry is its parent's
                self._known_dirs.add(parent)
            files.append((path, data))
            dirs.add(parent)
        sync_paths(write_many_unsynced(files), dirs)

    def commit(self, checkpoint_cbor: bytes) -> None:
        """Step 3: the commit point."""
        atomic_write(self.checkpoint, checkpoint_cbor)

    def collect(self, garbage: Iterable[bytes], *, legacy: bool) -> None:
        """Step 4: unlink what the committed checkpoint no longer reaches, then the plan."""
        with SHARING:  # no blob put pins one of these while they go
            in_threads(self._unlink_path, [self.object_path(raw) for raw in garbage])
        if legacy:
            # Not mutated: a mutant passing None removes every folder of the current directory
            # (``os.scandir(None)`` lists it), which under mutmut is its own tree.
            remove_tree(self.root)  # pragma: no mutate
        fileio.unlink(self.plan, missing_ok=True)

    def recover(self) -> None:
        """Finish or undo a flush that a crash interrupted (see ``world.cellstore._store``)."""
        for name in os.listdir(self.root):
            if name.endswith(TMP_SUFFIX):
                fileio.unlink(os.path.join(self.root, name), missing_ok=True)
        data = read_or_none(self.plan, PLAN_BYTES_MAX)
        if data is not None:
            try:
                plan: FlushPlan | None = decode_plan(data)
            except CborError:  # torn by a power cut: at worst some objects stay unreferenced
                plan = None
            if plan is not None:
                current = read_or_none(self.checkpoint, CHECKPOINT_BYTES_MAX)
                committed = cbor.digest(current or b"") == plan.next
                for raw in plan.garbage if committed else plan.created:
                    self._unlink_object(raw)
            fileio.unlink(self.plan, missing_ok=True)
        if self.read_checkpoint().format == FORMAT and (
            legacy_dirs(self.root) or os.path.exists(os.path.join(self.root, LEGACY_INTENT_NAME))
        ):
            # A conversion committed, and died removing the old tree. (Not mutated: see collect.)
            remove_tree(self.root)  # pragma: no mutate
