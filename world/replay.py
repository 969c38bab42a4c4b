"""Replay from genesis: re-execute every step from the journal's inputs and check each output.

``verify_world`` rebuilds the kernel from nothing (an in-memory cell store), feeds it every
journal record in order, and has the kernel compare each step it re-runs with the step the
journal recorded (``Kernel.apply``). The first difference raises ``ReplayDivergence`` naming the
sequence number, the entity, and the expected and actual hashes. When every record agrees, the
rebuilt cell index is compared with the world's own, reducer by reducer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kernel.cells import MemoryCellStore
from kernel.core import Kernel, ReplayDivergence
from kernel.journal import MemoryJournal
from world.runner import HostRunner
from world.world import World

__all__ = ["ReplayReport", "rebuild_world", "verify_world"]


@dataclass
class ReplayReport:
    records: int = 0
    steps: int = 0
    divergence: ReplayDivergence | None = None
    state_mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.divergence is None and not self.state_mismatches


def verify_world(path: Path, progress: Callable[[int, int], None] | None = None) -> ReplayReport:
    report = ReplayReport()
    with World.open(path) as world:
        kernel = Kernel(
            world.air, MemoryJournal(), MemoryCellStore(), HostRunner(world.air, path / "cache")
        )
        total = world.journal.seq_next
        try:
            for record in world.journal.read(0):
                kernel.apply(record)
                report.records += 1
                report.steps += record.kind in ("step", "step.failed")
                if progress is not None and report.records % 1000 == 0:
                    progress(report.records, total)
        except ReplayDivergence as exc:
            report.divergence = exc
            return report
        for name in sorted(world.air.modules):
            module = kernel.module_hash(name)
            if kernel.cells.index_root(module) != world.store.index_root(module):
                report.state_mismatches.append(name)
        if progress is not None:
            progress(report.records, total)
    return report


def rebuild_world(source: Path, target: Path) -> int:
    """Create a new world at ``target`` from ``source``'s AIR and feed it ``source``'s inputs,
    ticking wherever ``source`` ticked. Deterministic replay means the new journal, cell files
    and index come out byte for byte the same. Returns the number of records fed."""
    fed = 0
    with World.open(source) as old:
        records = list(old.journal.read(0))
        air_doc = source / "air"
        with World.create_from_world_air(target, air_doc) as new:
            for record in records:
                fed += 1
                if record.kind == "event.in":
                    new.kernel.ingest(record.body["schema"], record.body["value"])
                elif record.kind in ("step", "step.failed"):
                    new.kernel.tick()
            new.journal.commit()
    return fed
