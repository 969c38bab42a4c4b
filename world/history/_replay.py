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

Every record a tick writes is compared, not only its first: the effect records
(``effect.queued``, ``policy.decision``) that follow a ``step`` or ``plan.step`` are owed by the
re-executed tick and compared as replay reaches them (``kernel._recorder``), so an edited
intent's params or policy rule index is a ``ReplayDivergence`` at that record's seq.

A ``receipt`` is an input: replay cannot re-derive it, only check it. Before it is applied, its
signature is checked with the world's key over the bytes the journal holds
(``world.effects.JournalSignatures``), and it must answer an intent the replayed kernel has
queued and waiting. The first receipt that fails stops replay (everything after it is computed
from it) and is reported as ``bad_receipt``: its seq, intent hash and reason (``forged``,
``altered``, ``unknown_intent``, ``not_queued``). A key file that is missing (while the journal
holds receipts) or damaged is ``receipt_key_problem``, naming the file; replay goes on without
checking signatures, and the report is not ok.

The world is opened read-only and the key is only read, never created: verification writes
nothing and runs beside a live writer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from kernel import TICK_KINDS, Kernel, first_difference
from kernel.errors import ReplayDivergence
from kernel.journal import JournalRecord
from world._world import World
from world.effects import BadReceipt, JournalSignatures, KeyProblem
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
    """What replay found. ``records`` were replayed (up to the first divergence or bad
    receipt), ``steps`` of them ticks; ``receipts_checked`` receipts had their signature
    checked."""

    records: int = 0
    steps: int = 0
    divergence: ReplayDivergence | None = None
    mismatches: list[Mismatch] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    receipts_checked: int = 0
    bad_receipt: BadReceipt | None = None
    receipt_key_problem: KeyProblem | None = None

    @property
    def ok(self) -> bool:
        return (
            self.divergence is None
            and not self.mismatches
            and not self.damaged
            and self.bad_receipt is None
            and self.receipt_key_problem is None
        )

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
        signatures = JournalSignatures(path)
        kernel = world.blank_kernel()
        try:
            _replay(world, kernel, signatures, report, progress)
        except ReplayDivergence as exc:
            report.divergence = exc
        report.receipts_checked = signatures.checked
        report.receipt_key_problem = signatures.key_problem
        if report.divergence is not None or report.bad_receipt is not None:
            return report
        report.mismatches.extend(_compare(kernel, world))
        report.damaged.extend(_damaged_objects(world))
    return report


def _replay(
    world: World,
    kernel: Kernel,
    signatures: JournalSignatures,
    report: ReplayReport,
    progress: Callable[[int, int], None] | None,
) -> None:
    """Apply every record to ``kernel``, each receipt checked first; stop at a bad receipt
    (``report.bad_receipt``). ``ReplayDivergence`` at the first difference."""
    total = world.journal.seq_next
    for record in world.journal.read(0):
        if record.kind == "receipt":
            report.bad_receipt = _refused(record, signatures, kernel)
            if report.bad_receipt is not None:
                return
        kernel.apply(record)
        report.records += 1
        report.steps += record.kind in TICK_KINDS
        if progress is not None and report.records % PROGRESS_EVERY == 0:
            progress(report.records, total)
    if progress is not None and report.records % PROGRESS_EVERY:
        progress(report.records, total)


def _refused(
    record: JournalRecord, signatures: JournalSignatures, kernel: Kernel
) -> BadReceipt | None:
    """Why the receipt ``record`` does not hold: its signature, or no queued intent waits for
    it (the pump journals a receipt only for one); None if it holds."""
    bad = signatures.check(record)
    if bad is not None:
        return bad
    intent_hash = record.body.get("intent_hash") if isinstance(record.body, dict) else None
    if not isinstance(intent_hash, bytes):
        return BadReceipt(record.seq, repr(intent_hash), "unknown_intent")
    status = kernel.effects.status_of(intent_hash)
    if status is None:
        return BadReceipt(record.seq, intent_hash.hex(), "unknown_intent")
    if status != "queued":
        return BadReceipt(record.seq, intent_hash.hex(), "not_queued")
    return None


def _compare(replayed: Kernel, world: World) -> list[Mismatch]:
    found = []
    for name in sorted(world.air.modules):
        space = replayed.cell_space(name)
        found.extend(
            _differ(
                f"index_root.{name}",
                replayed.cells.index_root(space),
                world.store.index_root(space),
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
        space = world.kernel.cell_space(name)
        try:
            for key_hash, _entry in list(world.store.iter_entries(space)):
                try:
                    world.store.get(space, key_hash)
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
