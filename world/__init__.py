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

The front door. This face (``__all__``) is what an application uses, and nothing else:
``open(path)`` (the world in this process), ``connect(path_or_url)`` (a served world, over its
socket or HTTP), ``attach(path)`` (the server's handle if one serves the world, a partitioned
world's handle for its directory, else the world itself); each is a ``Handle`` with one method
per operation. The operations' argument and result models (``Send``, ``Sent``, ``StateOf``,
``RunsList``, ...; defined in ``world.ops``, which holds the operations themselves), ``World``
(a world directory open for writing or reading: what a local handle holds as ``.world``) and
``Engine`` (its one loop, effects included), and the errors an application catches: the
world's (``world.errors``) and the tree's root and usage errors (``air.errors``:
``WorldError``, ``UnknownName``, ``InvalidArgument``, ...). ``docs/API.md`` shows them at work.
Everything else is private by name: a ``_module`` of this package, or a concept package's face
for the tools built on the world.

Concept packages, each with its own face: ``ops`` (every operation, typed, and the handles),
``journal`` (the file journal), ``cellstore`` (the file cell store), ``effects`` (adapters,
receipts, the effect pump), ``serve`` (a served world: its socket, HTTP, and the remote
handles), ``history`` (the history index, time travel, forks, replay), ``moves`` (cells
exported, imported, migrated), ``gov`` (proposals of a new AIR, approved and applied as eras),
``operate`` (plan runs and dead letters as an operator sees and acts on them), ``cluster`` (a
world partitioned by key: its partitions in one process or as Ray actors). ``sdk`` is the
reducer SDK as a library.

Private parts: ``_world`` (``World``), ``_recovery`` (opening: checkpoint and journal tail,
rebuilds), ``_event_ids`` (the index of every event id journaled: a retried send is exactly
once), ``_reading`` (states, cells, ``info``), ``_engine`` (the loop), ``_directory`` (the
directory's own files, creation, swaps), ``_airfiles`` (AIR from disk), ``_airstore`` (the AIR
of each era, stored), ``_cas``, ``_modcache`` (compiled modules on disk), ``_runner`` (the
kernel's ``Runner`` over the WASM host), ``_fileio`` (the injectable file layer), ``_fsutil``
(atomic writes, batched syncs, the lock), ``_views`` (records as people read them), ``_repair``
(check and repair a whole world), ``_archive`` (a second copy of the sealed journal, and what
restoring it needs), ``_watch`` (work a command repeats in the background: archiving,
verifying), ``_prefixes`` (names given by a unique prefix), ``_object_check`` (reading back the CAS
objects a world needs), ``_attach`` (``attach``: which handle a folder gets), ``_face`` (how
these faces hand out their names).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from air.errors import (
        AmbiguousName,
        InvalidArgument,
        KeyMismatch,
        LimitExceeded,
        UnknownName,
        UsageError,
        ValueMismatch,
        WorldError,
        WrongMode,
    )
    from world._attach import attach
    from world._engine import Engine
    from world._world import World
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
        JournalDamaged,
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
    from world.ops import (
        Applied,
        Approved,
        Cell,
        CellHistoryPage,
        CellOf,
        CellsOf,
        CellsPage,
        CellsUpgrade,
        CellsUpgraded,
        CellTail,
        DeadLetter,
        DeadLetterActed,
        DeadLetterOf,
        DeadLetters,
        Decided,
        EffectsList,
        Export,
        Exported,
        Handle,
        Import,
        Imported,
        Info,
        IntentOf,
        JournalPage,
        JournalTail,
        NoArgs,
        ProposalApproval,
        ProposalOf,
        Proposals,
        ProposalShown,
        Propose,
        RunCancelled,
        RunDetail,
        RunOf,
        RunsList,
        RunsOf,
        Send,
        Sent,
        Shadow,
        Shadowed,
        Snapshot,
        State,
        StateOf,
        Why,
        WhyOf,
        open,
    )
    from world.serve import connect

__all__ = [
    "AmbiguousName",
    "Applied",
    "Approved",
    "ArchiveRefused",
    "BuildError",
    "Cell",
    "CellFileRefused",
    "CellHistoryPage",
    "CellOf",
    "CellTail",
    "CellsOf",
    "CellsPage",
    "CellsUpgrade",
    "CellsUpgraded",
    "CheckpointAhead",
    "CheckpointMoved",
    "DeadLetter",
    "DeadLetterActed",
    "DeadLetterOf",
    "DeadLetters",
    "Decided",
    "DerivedStateError",
    "EffectsList",
    "Engine",
    "EventRejected",
    "Export",
    "Exported",
    "GenesisMismatch",
    "Handle",
    "Import",
    "Imported",
    "Info",
    "IntentOf",
    "Interrupted",
    "InvalidArgument",
    "JournalDamaged",
    "JournalPage",
    "JournalReplaced",
    "JournalTail",
    "JournalWriteFailed",
    "KeyMismatch",
    "LimitExceeded",
    "MigrationRefused",
    "NoArgs",
    "NotACluster",
    "NotAWorld",
    "OutputExists",
    "ProposalApproval",
    "ProposalOf",
    "ProposalShown",
    "Proposals",
    "Propose",
    "ProtocolError",
    "ReceiptKeyDamaged",
    "ReceiptRefused",
    "Refused",
    "RunCancelled",
    "RunDetail",
    "RunOf",
    "RunsList",
    "RunsOf",
    "Send",
    "Sent",
    "SeqPastEnd",
    "ServeError",
    "ServedError",
    "ServerBusy",
    "Shadow",
    "Shadowed",
    "Snapshot",
    "SocketNotTrusted",
    "State",
    "StateOf",
    "StorageError",
    "StoreDamaged",
    "StoreFailed",
    "UnknownName",
    "UpgradeRefused",
    "UsageError",
    "ValueMismatch",
    "Why",
    "WhyOf",
    "World",
    "WorldError",
    "WorldExists",
    "WorldLocked",
    "WorldServed",
    "WorldStale",
    "WorldUnavailable",
    "WrongMode",
    "attach",
    "connect",
    "open",
]

_WHERE: dict[str, str] = {
    name: module
    for module, names in (
        ("world._world", ("World",)),
        ("world._engine", ("Engine",)),
        (
            "world.ops",
            (
                "Handle",
                "open",
                "Applied",
                "Approved",
                "Cell",
                "CellHistoryPage",
                "CellOf",
                "CellTail",
                "CellsOf",
                "CellsPage",
                "CellsUpgrade",
                "CellsUpgraded",
                "DeadLetter",
                "DeadLetterActed",
                "DeadLetterOf",
                "DeadLetters",
                "Decided",
                "EffectsList",
                "Export",
                "Exported",
                "Import",
                "Imported",
                "Info",
                "IntentOf",
                "JournalPage",
                "JournalTail",
                "NoArgs",
                "ProposalApproval",
                "ProposalOf",
                "ProposalShown",
                "Proposals",
                "Propose",
                "RunCancelled",
                "RunDetail",
                "RunOf",
                "RunsList",
                "RunsOf",
                "Send",
                "Sent",
                "Shadow",
                "Shadowed",
                "Snapshot",
                "State",
                "StateOf",
                "Why",
                "WhyOf",
            ),
        ),
        ("world.serve", ("connect",)),
        ("world._attach", ("attach",)),
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
                "JournalDamaged",
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
        (
            "air.errors",
            (
                "AmbiguousName",
                "InvalidArgument",
                "KeyMismatch",
                "LimitExceeded",
                "UnknownName",
                "UsageError",
                "ValueMismatch",
                "WorldError",
                "WrongMode",
            ),
        ),
    )
    for name in names
}

_FOR_THE_CLI: dict[str, str] = {
    "JournalView": "world._views",
    "Periodic": "world._watch",
    "RecordView": "world._views",
    "air_sources": "world._airfiles",
    "applied_before": "world._reading",
    "archive_world": "world._archive",
    "check_world": "world._repair",
    "current_air": "world._airstore",
    "load_air_path": "world._airfiles",
    "load_world_air": "world._directory",
    "native_requested": "world._runner",
    "remembered_archive": "world._archive",
    "repair_world": "world._repair",
    "stored_air_reader": "world._airstore",
}
"""Not the front door: names ``cli/`` still takes from here, each from its private module (the
CLI may use only faces, ``tests/project/test_faces.py``). Nothing else imports them from ``world``
(the same tests); they leave when the CLI asks for them through ``world.ops`` or a concept
package's face (issue 34)."""

_RESOLVED: dict[str, str] = {**_WHERE, **_FOR_THE_CLI}


def __getattr__(name: str) -> Any:
    """The names of ``__all__`` (and ``_FOR_THE_CLI``), imported on first use
    (``world._face``)."""
    from world._face import export

    return export("world", _RESOLVED, name, globals())
