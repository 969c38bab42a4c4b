"""Replay from genesis: re-execute every step from the journal's inputs and check everything.

``verify_world`` rebuilds the kernel from nothing (an in-memory cell store), feeds it every
journal record in order, and has the kernel compare each step it re-runs with the step the
journal recorded (``Kernel.apply``). The first difference raises ``ReplayDivergence`` naming the
sequence number, the entity, the first differing field and both values. When every record
agrees, the rebuilt kernel is compared with the world as it opens (its checkpoint plus the
journal tail): every reducer's index root, the pending deliveries in order (the scheduler's
queues), the dead letters, and the step and dead-letter totals; each difference names its
field with both values. Every cell state the world's store holds is read and verified, so a
missing or damaged object is reported, never "identical".

The world is opened read-only: verification writes nothing and runs beside a live writer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from kernel import TICK_KINDS, Kernel, first_difference
from kernel.cells import MemoryCellStore
from kernel.errors import ReplayDivergence
from kernel.journal import MemoryJournal
from world._runner import HostRunner
from world._world import World
from world.errors import StoreDamaged

__all__ = ["Mismatch", "ReplayReport", "rebuild_world", "verify_world"]


@dataclass(frozen=True)
class Mismatch:
    """``field`` differs: ``expected`` from replay, ``actual`` in the world as it opens."""

    field: str
    expected: str
    actual: str

    def as_json(self) -> dict[str, str]:
        return {"field": self.field, "expected": self.expected, "actual": self.actual}


@dataclass
class ReplayReport:
    records: int = 0
    steps: int = 0
    divergence: ReplayDivergence | None = None
    mismatches: list[Mismatch] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.divergence is None and not self.mismatches and not self.damaged

    @property
    def state_mismatches(self) -> list[str]:
        """The reducers whose index roots differ."""
        prefix = "index_root."
        return [m.field[len(prefix) :] for m in self.mismatches if m.field.startswith(prefix)]


PROGRESS_EVERY: Final = 1000
"""``verify_world`` reports its progress every this many records (and once at the end)."""


def verify_world(path: Path, progress: Callable[[int, int], None] | None = None) -> ReplayReport:
    """Replay the world at ``path`` from genesis and compare (see the module docstring).
    ``progress(records_done, records_total)`` is called as records are replayed; the counts
    grow, and the last call has ``records_done == records_total`` unless replay diverged."""
    report = ReplayReport()
    with World.open(path, readonly=True) as world:
        report.damaged.extend(world.notices)
        kernel = Kernel(
            world.air,
            MemoryJournal(),
            MemoryCellStore(),
            HostRunner(world.air, path / "cache", readonly=True),
        )
        total = world.journal.seq_next
        try:
            for record in world.journal.read(0):
                kernel.apply(record)
                report.records += 1
                report.steps += record.kind in TICK_KINDS
                if progress is not None and report.records % PROGRESS_EVERY == 0:
                    progress(report.records, total)
        except ReplayDivergence as exc:
            report.divergence = exc
            return report
        if progress is not None and report.records % PROGRESS_EVERY:
            progress(report.records, total)
        report.mismatches.extend(_compare(kernel, world))
        report.damaged.extend(_damaged_objects(world))
    return report


def _compare(replayed: Kernel, world: World) -> list[Mismatch]:
    found = []
    for name in sorted(world.air.modules):
        module = replayed.module_hash(name)
        found.extend(
            _differ(
                f"index_root.{name}",
                replayed.cells.index_root(module),
                world.store.index_root(module),
            )
        )
    mine, theirs = replayed.snapshot_obj(0), world.kernel.snapshot_obj(0)
    for key in ("scheduler", "dead_letters", "steps_total", "dead_letters_total"):
        found.extend(_differ(key, mine[key], theirs[key]))
    return found


def _differ(name: str, expected: object, actual: object) -> list[Mismatch]:
    if expected == actual:
        return []
    where, was, now = first_difference(expected, actual)
    return [Mismatch(name if where == "value" else f"{name}.{where}", was, now)]


def _damaged_objects(world: World) -> list[str]:
    """Read every stored cell state (verified against its hash); name the ones that fail."""
    damaged = []
    for name in sorted(world.air.modules):
        module = world.kernel.module_hash(name)
        try:
            for key_hash, _entry in list(world.store.iter_entries(module)):
                try:
                    world.store.get(module, key_hash)
                except StoreDamaged as exc:
                    damaged.append(f"{exc.path}: {exc.reason}")
        except StoreDamaged as exc:
            damaged.append(f"{exc.path}: {exc.reason}")
    return damaged


def rebuild_world(source: Path, target: Path) -> int:
    """Create a new world at ``target`` from ``source``'s AIR and feed it ``source``'s inputs,
    ticking wherever ``source`` ticked. Deterministic replay means the new journal, cell files
    and index come out byte for byte the same. Returns the number of records fed."""
    fed = 0
    with World.open(source, readonly=True) as old:
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
