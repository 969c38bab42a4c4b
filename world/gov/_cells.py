"""Moving cells to the current era: ``world cells upgrade DIR REDUCER (--key K | --all)``.

The kernel computes and journals each batch (``kernel._upgrades``: a re-pin when the state
schema is the same, else one step of the new module with ``sys/StateUpgrade@1``); this module
picks the cells, cuts them into batches of ``UPGRADE_BATCH_CELLS`` and commits each batch
whole (``atomic``) before the next, so a crash loses at most the batch in flight and leaves
every cell in one era or the other. ``--all`` is resumable: it takes the cells that are not in
the current era when it starts, so running it again after a crash (or after fixing the
reducer whose upgrade failed for some cells) goes on with what is left. A cell whose upgrade
failed stays in its era with the reason journaled, and is tried again by the next ``--all``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from air import cbor
from air.errors import UnknownName
from world._world import World

__all__ = ["UPGRADE_BATCH_CELLS", "CellsUpgraded", "upgrade_cells"]

UPGRADE_BATCH_CELLS: Final = 4096
"""Cells per ``cell.upgraded`` record and per commit."""


@dataclass
class CellsUpgraded:
    """What ``upgrade_cells`` did: cells moved, cells that stayed (key, reason), records."""

    upgraded: int = 0
    failed: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)
    records: list[int] = field(default_factory=list)
    current: int = 0
    """Cells that were in the current era already (left alone)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "upgraded": self.upgraded,
            "failed": [{"key": key, "reason": reason} for key, reason in self.failed],
            "records": self.records,
            "already_current": self.current,
        }


def upgrade_cells(
    world: World,
    reducer: str,
    keys: Iterable[Any] | None = None,
    *,
    batch: int = UPGRADE_BATCH_CELLS,
    progress: Callable[[int, int], None] | None = None,
) -> CellsUpgraded:
    """Move ``reducer``'s cells ``keys`` (None: every cell not in the current era) to the
    current era, in committed batches; ``progress(done, total)`` after each."""
    world._writable()
    kernel = world.kernel
    current = cbor.hash_to_raw(world.air.manifest_hash)
    done = CellsUpgraded()
    if keys is None:  # the index entries only: no state is read to find the cells
        if reducer not in world.air.modules:
            raise UnknownName("reducer", reducer, sorted(world.air.modules))
        space = kernel.cell_space(reducer)
        todo = []
        for _khash, entry in list(world.store.iter_entries(space)):
            if entry.manifest_hash == current:
                done.current += 1
            else:
                todo.append(entry.key_cbor)
    else:
        todo = [world.key_cbor(reducer, key) for key in keys]
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        made = kernel.ingest_cell_upgrade(reducer, chunk)  # it keeps ``consistent`` itself
        world.commit(atomic=True)
        if made is not None:
            seq, body = made
            done.records.append(seq)
            done.upgraded += len(body["cells"])
            done.failed += [(cbor.loads(k), reason) for k, _from, reason in body["failed"]]
        if progress is not None:
            progress(min(start + batch, len(todo)), len(todo))
        world._after_steps()
    return done
