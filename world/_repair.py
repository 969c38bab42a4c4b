"""Checking and repairing a whole world: the journal, and the checkpoint that must not reach past
it. What ``world journal verify [--repair]`` runs.

``check_world`` (shared lock, writes nothing) verifies every journal frame and then reads the
checkpoint's journal position: a checkpoint that reaches past the journal's last good record
proves that committed records were lost (a torn tail that was really a damaged committed
record, or a cut journal), and a checkpoint that cannot be read is damaged derived state.

A frame's CRCs defend against accidents, not against an edit: whoever changes a record can
fix its CRCs. So ``check_world`` also checks the signature of every journaled ``receipt`` among
the good records with the world's key, over the bytes the record holds
(``world.effects.JournalSignatures``), and reports the first that fails (``bad_receipt``: its
seq, intent hash and reason, ``forged`` or ``altered``). The key is only read, never created; a
key file that is missing while the journal holds receipts, or damaged, is
``receipt_key_problem``, naming the file. Signatures are checked only in a journal without
corruption (repair comes first), and never fixed: a bad one makes the world not ``ok`` but is
no reason to repair (``needs_repair``), as cutting the journal cannot make it good. What a
receipt answers (a queued intent) is replay's check (``world.history``), not this one's.

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
from world.effects import BadReceipt, JournalSignatures, KeyProblem
from world.errors import NotAWorld, StoreDamaged
from world.journal import FileJournal, RepairReport, VerifyReport

__all__ = ["WorldCheck", "WorldRepair", "check_world", "checkpoint_seq_next", "repair_world"]


@dataclass(frozen=True)
class WorldCheck:
    """The journal's report, the checkpoint's position (None: no checkpoint) or the reason it
    cannot be read, and the receipts' signatures. ``as_json`` is the journal's report
    (``world.journal._file.VerifyReport``) with the world's ``ok``/``clean``/``findings``, the
    checkpoint fields and the signature fields added: ``receipts_checked`` signatures were
    checked (up to the first bad one), ``bad_receipt`` is the first that fails and
    ``receipt_key_problem`` a key file that cannot check them."""

    journal: VerifyReport
    checkpoint_seq_next: int | None
    checkpoint_damage: str | None
    receipts_checked: int = 0
    bad_receipt: BadReceipt | None = None
    receipt_key_problem: KeyProblem | None = None

    @property
    def checkpoint_ahead(self) -> bool:
        return self.checkpoint_seq_next is not None and (
            self.checkpoint_seq_next > self.journal.records
        )

    @property
    def needs_repair(self) -> bool:
        """Does not open as it is: corruption, or a checkpoint past the journal."""
        return not self.journal.ok or self.checkpoint_ahead

    @property
    def ok(self) -> bool:
        """Opens without repair, and every journaled receipt's signature holds."""
        return not self.needs_repair and self.signatures_ok

    @property
    def signatures_ok(self) -> bool:
        return self.bad_receipt is None and self.receipt_key_problem is None

    @property
    def clean(self) -> bool:
        return (
            self.journal.clean
            and not self.checkpoint_ahead
            and not self.checkpoint_damage
            and self.signatures_ok
        )

    def findings(self) -> list[str]:
        found = [self.journal.describe()] if not self.journal.clean else []
        if self.checkpoint_ahead:
            found.append(
                f"the checkpoint reaches seq {self.checkpoint_seq_next} but the journal's good "
                f"records end at {self.journal.records}: committed records were lost"
            )
        if self.checkpoint_damage:
            found.append(f"checkpoint unreadable ({self.checkpoint_damage}): it will be rebuilt")
        if self.bad_receipt is not None:
            found.append(f"{self.bad_receipt.describe()}, the journal was changed")
        if self.receipt_key_problem is not None:
            found.append(self.receipt_key_problem.describe())
        return found

    def describe(self) -> str:
        if self.clean:
            checked = self.receipts_checked
            held = f"; {checked} receipt signature(s) hold" if checked else ""
            return f"{self.journal.describe()}{held}"
        return "; ".join(self.findings())

    def as_json(self) -> dict[str, Any]:
        bad, key_problem = self.bad_receipt, self.receipt_key_problem
        return {
            **self.journal.as_json(),
            "ok": self.ok,
            "clean": self.clean,
            "checkpoint_seq_next": self.checkpoint_seq_next,
            "checkpoint_ahead": self.checkpoint_ahead,
            "checkpoint_damage": self.checkpoint_damage,
            "findings": self.findings(),
            "needs_repair": self.needs_repair,
            "receipts_checked": self.receipts_checked,
            "bad_receipt": None if bad is None else bad.as_json(),
            "receipt_key_problem": None if key_problem is None else key_problem.as_json(),
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
    signed = _signatures(path, report)
    try:
        return WorldCheck(report, checkpoint_seq_next(path), None, *signed)
    except StoreDamaged as damage:
        return WorldCheck(report, None, f"{damage.path}: {damage.reason}", *signed)
    except WorldError as exc:  # e.g. a checkpoint.cbor that is not a checkpoint at all
        return WorldCheck(report, None, str(exc), *signed)


def _signatures(
    path: Path, report: VerifyReport
) -> tuple[int, BadReceipt | None, KeyProblem | None]:
    """Check the signature of every receipt among the ``report.records`` good records, up to
    the first that fails: ``(checked, first bad, key problem)``. Nothing in a corrupt journal
    (repair first). The key is read after the frames were verified, so a writer that made it
    for a receipt had made it by then."""
    if not report.ok:
        return 0, None, None
    signatures = JournalSignatures(path)
    with FileJournal(path / "journal", readonly=True) as journal:
        for record in journal.read(0):
            if record.seq >= report.records:  # a live writer's later commits
                break
            if record.kind == "receipt":
                bad = signatures.check(record)
                if bad is not None:
                    return signatures.checked, bad, signatures.key_problem
    return signatures.checked, None, signatures.key_problem


def check_world(path: Path) -> WorldCheck:
    """Verify the journal, the checkpoint's position and the receipts' signatures; writes
    nothing (shared lock; the key file is only read)."""
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
