"""The deterministic core: routing, cells, mailboxes and ticks, plan runs, effects as intents,
and the journal records they produce.

Invariants:
- Pure: nothing here reads files, clocks, randomness or the environment
  (``tests/project/test_purity.py``); time and entropy enter as journaled facts (receipts), storage
  through narrow interfaces (a ``Journal``, a ``CellStore``, a ``Runner``, a ``ModuleCache``).
- Everything that happens enters through an input (an event, a receipt, an approval, a move)
  or a tick, and is written as journal records; ``Kernel.apply`` re-executes a journal and
  reports the first record that came out differently (``ReplayDivergence``).
- A tick changes memory only after its records are appended, and a delivery leaves its mailbox
  in the same step; ``Kernel.consistent`` is False only in between.
- Fair: one tick runs one step of one ready entity (a cell, a non-keyed reducer, a plan run),
  round-robin in order of readiness; what a step emits runs no earlier than the next tick.

This face exports the supported API (the kernel, its limits and inputs). The storage contracts
are public modules: ``kernel.journal`` (records, their encoding, the ``Journal`` protocol, an
in-memory journal), ``kernel.cells`` (cell identities, the index format, the ``CellStore`` and
``Cas`` protocols, in-memory backends), ``kernel.subjects`` (record subjects and kinds),
``kernel.abi`` (the reducer envelope: input encoding, output decoding and validation); and
``kernel.errors``, ``kernel.wasm`` (the WASM host), ``kernel.native`` (the C step path).

Private parts: ``_core`` (``Kernel``: routing and ticks), ``_steps`` (one cell's step),
``_runs`` (live plan runs) and ``_plans`` (the pure run engine), ``_effects`` (intents,
capabilities, policy, budgets), ``_grants`` (what a grant and a policy rule admit),
``_recorder`` (a tick's records: appended, or compared on replay), ``_scheduler`` (mailboxes,
the fair ready queue), ``_deadletters``, ``_eras`` (the manifests a world has run, and the era
each cell and run is pinned to), ``_upgrades`` (cell upgrades to the current era), ``_moves``
(records that move cells in), ``_partition`` (one partition of a partitioned world: key
ownership, the outbox, cursors per source), ``_divergence`` (what replay compares), ``_urls``
(the one URL normaliser: the capability check reads a URL with it and the HTTP adapter sends
what it returns).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernel._core import OWED_KINDS, TICK_KINDS, Kernel, KernelLimits, reducer_fault
    from kernel._deadletters import DeadLetter
    from kernel._divergence import first_difference
    from kernel._effects import HTTP_BODY_BYTES_HEADER, Intent, Settled
    from kernel._moves import CELL_IMPORTED, check_cell, imported_record, migrated_record
    from kernel._partition import OUTBOX_DELIVERED, PARTITIONS_MAX, Outgoing, Partition, owner_of
    from kernel._recorder import Record
    from kernel._runs import RUN_CANCELLED
    from kernel._scheduler import Delivery, Entity
    from kernel._steps import Runner
    from kernel._urls import Url, UrlRefused, read_url

__all__ = [
    "CELL_IMPORTED",
    "HTTP_BODY_BYTES_HEADER",
    "OUTBOX_DELIVERED",
    "OWED_KINDS",
    "PARTITIONS_MAX",
    "RUN_CANCELLED",
    "TICK_KINDS",
    "DeadLetter",
    "Delivery",
    "Entity",
    "Intent",
    "Kernel",
    "KernelLimits",
    "Outgoing",
    "Partition",
    "Record",
    "Runner",
    "Settled",
    "Url",
    "UrlRefused",
    "check_cell",
    "first_difference",
    "imported_record",
    "migrated_record",
    "owner_of",
    "read_url",
    "reducer_fault",
]


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``air._face``): ``kernel.native``,
    which ``world --version`` asks, must not bring the kernel with it."""
    if name not in __all__:  # first: the imports below look their submodules up here
        raise AttributeError(f"module 'kernel' has no attribute {name!r}")
    from air._face import export
    from kernel import (
        _core,
        _deadletters,
        _divergence,
        _effects,
        _moves,
        _partition,
        _recorder,
        _runs,
        _scheduler,
        _steps,
        _urls,
    )

    modules = (
        _core,
        _deadletters,
        _divergence,
        _effects,
        _moves,
        _partition,
        _recorder,
        _runs,
        _scheduler,
        _steps,
        _urls,
    )
    return export("kernel", name, modules, globals())
