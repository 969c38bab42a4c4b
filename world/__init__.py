"""The I/O shell of the world: the world directory, and everything that touches files, clocks or
the network, around the pure ``air`` and ``kernel``.

Invariants:
- The journal is the source of truth. Everything else on disk (the cell store's checkpoint,
  the history index, snapshots) is derived: missing or damaged, it is rebuilt from the journal,
  never a reason to lose or refuse what was acknowledged.
- Durable on return: a call that changes the world commits the journal (one group commit)
  before it returns; a checkpoint is never ahead of the journal.
- One writer, many readers: OS locks on the directory; a reader writes nothing and works beside
  a live writer, on a full disk and on a read-only file system.
- Every durable write goes through ``_fileio`` (the crash, EIO and ENOSPC tests hook it), and
  every ``OSError`` leaves as ``world.errors.StorageError`` naming the operation and the path.
- Nothing reaches the outside but through an effect adapter, for an intent the kernel journaled
  and allowed; its receipt comes back signed and is verified before it is journaled.

An application starts here: ``open(path)`` (the world in this process), ``connect(path_or_url)``
(a served world, over its socket or HTTP), ``attach(path)`` (the server's handle if one serves
the world, else the world itself); each is a ``Handle`` with one method per operation, whose
argument and result models are in ``world.ops`` (``docs/API.md``).

This face also exports: ``World`` (a world directory open for writing or reading),
``Engine`` (its one loop), the checks and repairs of a whole world, record views, and the
world's errors (``world.errors``). Concept packages, each with its own face: ``journal`` (the
file journal), ``cellstore`` (the file cell store), ``effects`` (adapters, receipts, the effect
pump), ``serve`` (a served world and its client), ``history`` (the history index, time travel,
forks, replay), ``moves`` (cells exported, imported, migrated), ``gov`` (proposals of a new AIR,
approved and applied as eras), ``operate`` (plan runs and dead letters as an operator sees and
acts on them), ``cluster`` (a world partitioned by key: its partitions in one process or as Ray
actors). ``sdk`` is the reducer SDK as a library.

Private parts: ``_world`` (``World``), ``_recovery`` (opening: checkpoint and journal tail,
rebuilds), ``_reading`` (states, cells, ``info``), ``_engine`` (the loop), ``_directory`` (the
directory's own files, creation, swaps), ``_airfiles`` (AIR from disk), ``_cas``, ``_modcache``
(compiled modules on disk), ``_runner`` (the kernel's ``Runner`` over the WASM host),
``_fileio`` (the injectable file layer), ``_fsutil`` (atomic writes, batched syncs, the lock),
``_views`` (records as people read them), ``_repair`` (check and repair a whole world),
``_archive`` (a second copy of the sealed journal, and what restoring it needs), ``_watch``
(work a command repeats in the background: archiving, verifying),
``_history_index`` (each cell's records, kept by the writer for time travel),
``_face`` (how these faces hand out their names).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from world._airfiles import load_air_path
    from world._airstore import current_air, stored_air_reader
    from world._archive import ArchiveReport, archive_world, remembered_archive
    from world._directory import load_world_air
    from world._engine import TICKS_PER_CYCLE_MAX, Engine, LoopReport, Rejected
    from world._prefixes import PREFIX_MIN, by_prefix
    from world._reading import CellView
    from world._repair import WorldCheck, WorldRepair, check_world, repair_world
    from world._runner import native_requested
    from world._views import JournalView, RecordView, cells_page
    from world._watch import Periodic
    from world._world import SNAPSHOT_DIRTY_MAX, SNAPSHOT_RECORDS_MAX, World
    from world.errors import (
        ArchiveRefused,
        BuildError,
        CellFileRefused,
        CheckpointAhead,
        CheckpointMoved,
        DerivedStateError,
        EventRejected,
        GenesisMismatch,
        Interrupted,
        JournalReplaced,
        JournalWriteFailed,
        MigrationRefused,
        NotACluster,
        NotAWorld,
        OutputExists,
        ProtocolError,
        ReceiptKeyDamaged,
        ReceiptRefused,
        Refused,
        SeqPastEnd,
        ServedError,
        ServeError,
        ServerBusy,
        SocketNotTrusted,
        StorageError,
        StoreDamaged,
        StoreFailed,
        UpgradeRefused,
        WorldExists,
        WorldLocked,
        WorldServed,
        WorldStale,
        WorldUnavailable,
    )
    from world.ops import Handle, open
    from world.serve import attach, connect

__all__ = [
    "PREFIX_MIN",
    "SNAPSHOT_DIRTY_MAX",
    "SNAPSHOT_RECORDS_MAX",
    "TICKS_PER_CYCLE_MAX",
    "ArchiveRefused",
    "ArchiveReport",
    "BuildError",
    "CellFileRefused",
    "CellView",
    "CheckpointAhead",
    "CheckpointMoved",
    "DerivedStateError",
    "Engine",
    "EventRejected",
    "GenesisMismatch",
    "Handle",
    "Interrupted",
    "JournalReplaced",
    "JournalView",
    "JournalWriteFailed",
    "LoopReport",
    "MigrationRefused",
    "NotACluster",
    "NotAWorld",
    "OutputExists",
    "Periodic",
    "ProtocolError",
    "ReceiptKeyDamaged",
    "ReceiptRefused",
    "RecordView",
    "Refused",
    "Rejected",
    "SeqPastEnd",
    "ServeError",
    "ServedError",
    "ServerBusy",
    "SocketNotTrusted",
    "StorageError",
    "StoreDamaged",
    "StoreFailed",
    "UpgradeRefused",
    "World",
    "WorldCheck",
    "WorldExists",
    "WorldLocked",
    "WorldRepair",
    "WorldServed",
    "WorldStale",
    "WorldUnavailable",
    "archive_world",
    "attach",
    "by_prefix",
    "cells_page",
    "check_world",
    "connect",
    "current_air",
    "load_air_path",
    "load_world_air",
    "native_requested",
    "open",
    "remembered_archive",
    "repair_world",
    "stored_air_reader",
]

_WHERE: dict[str, str] = {
    name: module
    for module, names in (
        (
            "world._world",
            (
                "World",
                "SNAPSHOT_DIRTY_MAX",
                "SNAPSHOT_RECORDS_MAX",
            ),
        ),
        ("world._reading", ("CellView",)),
        (
            "world._engine",
            (
                "Engine",
                "LoopReport",
                "Rejected",
                "TICKS_PER_CYCLE_MAX",
            ),
        ),
        ("world._archive", ("ArchiveReport", "archive_world", "remembered_archive")),
        ("world._watch", ("Periodic",)),
        (
            "world._repair",
            (
                "WorldCheck",
                "WorldRepair",
                "check_world",
                "repair_world",
            ),
        ),
        (
            "world._views",
            (
                "JournalView",
                "RecordView",
                "cells_page",
            ),
        ),
        ("world.ops", ("Handle", "open")),
        ("world.serve", ("attach", "connect")),
        ("world._airfiles", ("load_air_path",)),
        ("world._directory", ("load_world_air",)),
        ("world._airstore", ("current_air", "stored_air_reader")),
        ("world._runner", ("native_requested",)),
        ("world._prefixes", ("PREFIX_MIN", "by_prefix")),
        (
            "world.errors",
            (
                "ArchiveRefused",
                "BuildError",
                "CellFileRefused",
                "CheckpointAhead",
                "CheckpointMoved",
                "DerivedStateError",
                "EventRejected",
                "GenesisMismatch",
                "Interrupted",
                "JournalReplaced",
                "JournalWriteFailed",
                "MigrationRefused",
                "NotACluster",
                "NotAWorld",
                "OutputExists",
                "ProtocolError",
                "ReceiptKeyDamaged",
                "ReceiptRefused",
                "Refused",
                "SeqPastEnd",
                "ServeError",
                "ServedError",
                "ServerBusy",
                "SocketNotTrusted",
                "StorageError",
                "StoreDamaged",
                "StoreFailed",
                "UpgradeRefused",
                "WorldExists",
                "WorldLocked",
                "WorldServed",
                "WorldStale",
                "WorldUnavailable",
            ),
        ),
    )
    for name in names
}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``world._face``)."""
    from world._face import export

    return export("world", _WHERE, name, globals())
