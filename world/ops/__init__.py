"""Every operation one can ask of a world, once, typed; and the handles that ask them.

An operation is a function ``op(ctx, args) -> result`` whose arguments and result are pydantic
models with a JSON form, registered by name (``family.verb``: ``events.send``, ``runs.ls``,
...) in ``REGISTRY``. Every front end runs these and nothing else: the CLI and an application
through a ``Handle``, a served world's socket and HTTP through one dispatcher
(``world.serve._dispatch``), the inspector, the cluster. ``docs/API.md`` lists them.

Handles: ``open(path)`` here (the world in this process: the writer, or ``readonly=True`` a
reader beside one); ``world.serve.connect(path_or_url)`` (a served world, over its socket or
HTTP) and ``world.attach(path)`` (what the CLI does: the server's handle when a server
holds the world, else the world itself) above it, with the transports. Every handle has the
same methods, returns the same models and raises the same errors (``world.ops._handle``).

Invariants:
- Reading changes nothing; a write is journaled and durable when it returns.
- Arguments are checked by their model before an operation runs: a bad one is one
  ``InvalidArgument`` naming the field.
- Nothing here keeps state between calls but a send's staged parts (``world.ops._events``).

Parts: ``_base`` (Operation, the registry, Context), ``_handle`` (Handle, LocalHandle,
RemoteHandle), and one module per family:
``_events``, ``_status`` (info, state, snapshot), ``_cells``, ``_moves`` (export, import),
``_journal``, ``_runs``, ``_deadletters``, ``_effects``, ``_upgrades``, ``_history`` (why).
"""

from __future__ import annotations

from pathlib import Path

from world.ops import _families  # noqa: F401  (every operation registered)
from world.ops._base import REGISTRY, Args, Context, Operation, Result, lookup
from world.ops._cells import (
    Cell,
    CellHistoryPage,
    CellOf,
    CellsOf,
    CellsPage,
    CellsUpgrade,
    CellsUpgraded,
    CellTail,
)
from world.ops._deadletters import DeadLetter, DeadLetterActed, DeadLetterOf, DeadLetters
from world.ops._effects import Decided, EffectsList, IntentOf
from world.ops._events import STAGED_BATCHES_MAX, STAGED_EVENTS_MAX, Send, Sent
from world.ops._handle import Handle, LocalHandle, RemoteHandle, error_class, revive
from world.ops._history import Why, WhyOf
from world.ops._journal import (
    PAGE_BYTES_MAX,
    PAGE_ITEMS_MAX,
    SCAN_RECORDS_MAX,
    JournalPage,
    JournalTail,
    last_start,
)
from world.ops._moves import Export, Exported, Import, Imported
from world.ops._runs import RunCancelled, RunDetail, RunOf, RunsList, RunsOf
from world.ops._status import Info, NoArgs, Snapshot, State, StateOf
from world.ops._upgrades import (
    Applied,
    Approved,
    ProposalApproval,
    ProposalOf,
    Proposals,
    ProposalShown,
    Propose,
    Shadow,
    Shadowed,
)

__all__ = [
    "PAGE_BYTES_MAX",
    "PAGE_ITEMS_MAX",
    "REGISTRY",
    "SCAN_RECORDS_MAX",
    "STAGED_BATCHES_MAX",
    "STAGED_EVENTS_MAX",
    "Applied",
    "Approved",
    "Args",
    "Cell",
    "CellHistoryPage",
    "CellOf",
    "CellTail",
    "CellsOf",
    "CellsPage",
    "CellsUpgrade",
    "CellsUpgraded",
    "Context",
    "DeadLetter",
    "DeadLetterActed",
    "DeadLetterOf",
    "DeadLetters",
    "Decided",
    "EffectsList",
    "Export",
    "Exported",
    "Handle",
    "Import",
    "Imported",
    "Info",
    "IntentOf",
    "JournalPage",
    "JournalTail",
    "LocalHandle",
    "NoArgs",
    "Operation",
    "ProposalApproval",
    "ProposalOf",
    "ProposalShown",
    "Proposals",
    "Propose",
    "RemoteHandle",
    "Result",
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
    "error_class",
    "last_start",
    "lookup",
    "open",
    "revive",
]


def open(path: Path | str, *, readonly: bool = False) -> LocalHandle:
    """The world at ``path`` open in this process: its writer (one at a time: ``WorldLocked``
    while another holds it, a ``world run`` or a ``world serve``), or with ``readonly`` a
    reader, which works beside a writer. ``world.attach`` asks a served world's server
    instead."""
    from world._world import World

    return LocalHandle(World.open(Path(path), readonly=readonly))
