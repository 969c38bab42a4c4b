"""Checking and repairing a whole world: the journal, and the checkpoint that must not reach past
it. What ``world journal verify [--repair]`` runs.

``check_world`` (shared lock, writes nothing) verifies every journal frame and then reads the
checkpoint's journal position: a checkpoint that reaches past the journal's last good record
proves that committed records were lost (a torn tail that was really a damaged committed
record, or a cut journal), and a checkpoint that cannot be read is damaged derived state.

``repair_world`` (exclusive lock: no reader or writer may be inside) cuts the journal after its
last good record, keeping what it cuts in a backup (``world.journal._file.repair``), and then
discards a checkpoint that reaches past the journal or cannot be read. Opening rebuilds the
derived state from the journal, so a repaired world always opens. Repair never guesses: the
records it cuts are the ones verify named, and they stay readable in the backup
(``world.journal._file.salvage``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air import cbor
from air.errors import CborError, HashMismatch, WorldError
from kernel.errors import ObjectMissing
from world import journal as file_journal
from world._cas import FileCas
from world._directory import discard_store
from world._fsutil import lock_world
from world.cellstore import FileCellStore
from world.errors import NotAWorld, StoreDamaged
from world.journal import RepairReport, VerifyReport

__all__ = ["WorldCheck", "WorldRepair", "check_world", "checkpoint_seq_next", "repair_world"]


@dataclass(frozen=True)
class WorldCheck:
    """The journal's report, and the checkpoint's position (None: no checkpoint) or the reason
    it cannot be read. ``as_json`` is the journal's report (``world.journal._file.VerifyReport``)
    with the world's ``ok``/``clean``/``findings`` and the checkpoint fields added."""

    journal: VerifyReport
    checkpoint_seq_next: int | None
    checkpoint_damage: str | None

    @property
    def checkpoint_ahead(self) -> bool:
        return self.checkpoint_seq_next is not None and (
            self.checkpoint_seq_next > self.journal.records
        )

    @property
    def ok(self) -> bool:
        """Opens without repair: no corruption, and no checkpoint past the journal."""
        return self.journal.ok and not self.checkpoint_ahead

    @property
    def clean(self) -> bool:
        return self.journal.clean and not self.checkpoint_ahead and not self.checkpoint_damage

    def findings(self) -> list[str]:
        found = [self.journal.describe()] if not self.journal.clean else []
        if self.checkpoint_ahead:
            found.append(
                f"the checkpoint reaches seq {self.checkpoint_seq_next} but the journal's good "
                f"records end at {self.journal.records}: committed records were lost"
            )
        if self.checkpoint_damage:
            found.append(f"checkpoint unreadable ({self.checkpoint_damage}): it will be rebuilt")
        return found

    def describe(self) -> str:
        if self.clean:
            return self.journal.describe()
        return "; ".join(self.findings())

    def as_json(self) -> dict[str, Any]:
        return {
            **self.journal.as_json(),
            "ok": self.ok,
            "clean": self.clean,
            "checkpoint_seq_next": self.checkpoint_seq_next,
            "checkpoint_ahead": self.checkpoint_ahead,
            "checkpoint_damage": self.checkpoint_damage,
            "findings": self.findings(),
        }


@dataclass(frozen=True)
class WorldRepair:
    before: WorldCheck
    journal: RepairReport | None
    checkpoint_discarded: bool

    def describe(self) -> str:
        parts = []
        if self.journal is not None:
            parts.append(self.journal.describe())
        if self.checkpoint_discarded:
            parts.append("checkpoint discarded; the next open rebuilds state from the journal")
        return "; ".join(parts) or "nothing to repair: the world opens as it is"

    def as_json(self) -> dict[str, Any]:
        return {
            "before": self.before.as_json(),
            "repaired": None if self.journal is None else self.journal.as_json(),
            "checkpoint_discarded": self.checkpoint_discarded,
        }


def checkpoint_seq_next(path: Path) -> int | None:
    """The journal position the world's checkpoint covers; None without a checkpoint.
    Raises ``StoreDamaged`` if it cannot be read."""
    store = FileCellStore(path, readonly=True)
    meta = store.last_checkpoint()
    if not meta:
        return None
    try:
        address = cbor.raw_to_hash(cbor.loads(meta)["snapshot"])
        seq = cbor.loads(FileCas(path, readonly=True).get(address))["seq_next"]
    except (ObjectMissing, HashMismatch, CborError, KeyError, TypeError) as exc:
        raise StoreDamaged(store.checkpoint_path, f"snapshot unusable: {exc}") from exc
    if type(seq) is not int:
        raise StoreDamaged(store.checkpoint_path, "snapshot seq_next is not an int")
    return seq


def _check(path: Path) -> WorldCheck:
    if not (path / "journal").is_dir():
        raise NotAWorld(str(path))
    report = file_journal.verify(path / "journal")
    try:
        return WorldCheck(report, checkpoint_seq_next(path), None)
    except StoreDamaged as damage:
        return WorldCheck(report, None, f"{damage.path}: {damage.reason}")
    except WorldError as exc:  # e.g. a checkpoint.cbor that is not a checkpoint at all
        return WorldCheck(report, None, str(exc))


def check_world(path: Path) -> WorldCheck:
    """Verify the journal and the checkpoint's position; writes nothing (shared lock)."""
    if not path.is_dir():
        raise NotAWorld(str(path))
    with lock_world(path, "read"):
        return _check(path)


def repair_world(path: Path, backup_dir: Path) -> WorldRepair:
    """Cut the journal after its last good record (backup in ``backup_dir``) and discard a
    checkpoint that reaches past it or cannot be read. Takes the exclusive lock."""
    if not (path / "journal").is_dir():
        raise NotAWorld(str(path))
    with lock_world(path, "exclusive"):
        before = _check(path)
        cut = None
        if not before.journal.clean:
            cut = file_journal.repair(path / "journal", backup_dir)
        after = _check(path)
        discard = after.checkpoint_ahead or after.checkpoint_damage is not None
        if discard:
            discard_store(path)
        return WorldRepair(before, cut, discard)
