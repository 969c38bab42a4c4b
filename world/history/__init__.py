"""A world's past: the cell history index, a cell at any past position, a fork of the world at
one, and replay of the whole journal from genesis.

Invariants:
- Everything here is read from the journal and re-executed by the kernel, checked record by
  record; nothing here writes to the world it reads (a fork is a new world).
- The history index is derived data: a missing or damaged index is rebuilt or bypassed (time
  travel then replays from genesis), never trusted over the journal; a state it holds is used
  only if its hash matches the step record's.
- A position inside a tick's group of records means "after that tick".
- Replay never calls an adapter: it reuses the journaled receipts, and reports the first
  record that re-executed differently.

Parts: ``index`` (the cell history index: each cell's records, and now and then its state),
``_timetravel`` (a cell at a past position, a cell's history), ``_fork`` (a fork at a past
position), ``_replay`` (``verify_world``: replay from genesis with every check;
``rebuild_world``), ``_why`` (why a cell holds its state: the chain of causes back from the
record that wrote it). Time travel reads the past through the index; the writer keeps it as it
commits (``World`` holds its ``HistoryWriter``). So ``index`` is the one part ``World`` imports,
and the one public by name: importing it through this face would go round (the face names
``_timetravel``, which reads a ``World``), and a private part may not be imported from outside
its package (``tests/project/test_faces.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from world.history._fork import Forked, fork_world
    from world.history._replay import Mismatch, ReplayReport, rebuild_world, verify_world
    from world.history._timetravel import (
        CellAt,
        CellHistory,
        CellKey,
        HistoryEntry,
        cell_at,
        cell_key,
        cell_names,
        cell_seqs,
        state_at,
        through,
    )
    from world.history._why import CHAIN_MAX, Cause, Why, why

__all__ = [
    "CHAIN_MAX",
    "Cause",
    "CellAt",
    "CellHistory",
    "CellKey",
    "Forked",
    "HistoryEntry",
    "Mismatch",
    "ReplayReport",
    "Why",
    "cell_at",
    "cell_key",
    "cell_names",
    "cell_seqs",
    "fork_world",
    "rebuild_world",
    "state_at",
    "through",
    "verify_world",
    "why",
]

_WHERE: dict[str, str] = {
    name: module
    for module, names in (
        (
            "world.history._timetravel",
            (
                "CellAt",
                "CellHistory",
                "CellKey",
                "HistoryEntry",
                "cell_at",
                "cell_key",
                "cell_names",
                "cell_seqs",
                "state_at",
                "through",
            ),
        ),
        (
            "world.history._fork",
            (
                "Forked",
                "fork_world",
            ),
        ),
        (
            "world.history._replay",
            (
                "Mismatch",
                "ReplayReport",
                "rebuild_world",
                "verify_world",
            ),
        ),
        ("world.history._why", ("CHAIN_MAX", "Cause", "Why", "why")),
    )
    for name in names
}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``world._face``)."""
    from world._face import export

    return export("world.history", _WHERE, name, globals())
