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

And the world's own files that the journal does not rebuild: ``check_world`` reads back from
the CAS every object the world needs to open (``world._object_check``: reading objects back is
an idea of its own, beside the journal's). One that is missing, altered, or not a file is an
``ObjectProblem`` and makes the world not ``ok``; an AIR that cannot be read at all is
``air_problem``. Like a bad signature these are no reason to repair: cutting the journal cannot
bring them back (a copy of the world, or ``world init`` again, can).

Checking and repairing stay one module: a repair is a check, restores and a cut, then a check
again, and both are what one command runs.

The verify cache (``check_world(cache=True)``, which ``world journal verify`` asks for): the
sealed segments a verify found good, with their seal's digest and their file's stamp, in
``<world>/cache/verified.json`` (``world.journal._verified`` gives the rule); a later verify
takes those whose digest and stamp are unchanged from their seal without reading them, and
does not check their receipts again (the cache is void under another receipt key). ``full``
reads them all. The cache is written only after a check whose journal and signatures were good.

Putting back (``repair_world``): before it cuts anything, repair puts back each damaged
sealed segment (the one holding the first problem, or one whose seal's digest disagrees), the
genesis segment included, the first of these ways that works, backing up the damaged file,
verifying again, and repeating while that finds another:

1. from the archive (``world._archive.archived_segment``: a copy whose blake3 is the seal's,
   so it is the segment as sealed; the world's own seal vouches for it, so a damaged genesis
   record, which names the world, does not stop it);
2. by the seal (``world.journal.mend_segment``): the one-byte change that makes the damaged
   frame's CRCs hold and gives the file the seal's blake3 (a flipped byte, a bad sector byte),
   or the segment header rebuilt from the file's name;
3. by re-execution (``world._rederive``): the records of the damaged stretch (from the
   damaged frame to the next frame whose CRCs hold, found by the damaged frame's own length or
   a scan for the next frame whose CRCs hold) computed again by a kernel that re-executes
   every record before them, kept only if the segment then has the seal's blake3.

Each of these is proven by the seal's blake3, so what is put back is byte for byte what was
sealed; records keep their seqs, the seal and the segment agree again, and ``journal verify``
passes. What they cannot give back is an input: re-execution writes what the kernel derives
(``step``, ``step.failed``, ``plan.*``, ``effect.queued``, ``policy.decision``), never an
``event.in`` from outside, a ``receipt``, an ``effect.approval``, a ``gov.*`` record,
``world.created`` or an operator's act (a cell move, a cancel, a dead letter retried or
discarded). Damage in the unsealed last segment (nothing vouches for a candidate there) is
not put back either.

Where a record is truly lost, repair stops there: it cuts the journal from that record on. The
records after it are intact, but they may depend on it (a later step consumed the lost event,
so its state would not match re-execution, and replay would diverge), and the journal holds no
gaps, so keeping them would keep a history no replay reproduces. They are cut whole into the
backup, where ``world.journal.salvage`` reads them (their ``event.in`` records can be sent
again); ``WorldRepair.describe`` names the lost seq, its segment and offset. The world keeps
seq ``0 .. lost - 1``, opens, and goes on from the lost seq.

``repair_world`` (exclusive lock: no reader or writer may be inside) cuts the journal after its
last good record, keeping what it cuts in a backup (``world.journal._file.repair``), and then
discards a checkpoint that reaches past the journal or cannot be read. Opening rebuilds the
derived state from the journal (checkpoint, cell store, indexes), so a repaired world always
opens. Repair never guesses: what it puts back the seal proves, the records it cuts are the
ones verify named, and they stay readable in the backup.

The damage mark (``DAMAGE_MARK``). A check with the verify cache (``journal verify``, and the
background check of ``serve --verify-every``) that finds corruption leaves
``<world>/journal-damaged.json`` naming it, on a best effort (not on a read-only file system,
where there is no writer to stop). Every operation that writes asks for it first
(``refuse_if_damaged``, in ``world.ops``' ``Operation.run``: in process, served, over HTTP,
in a partition) and answers ``JournalDamaged`` while it is there: a record acknowledged then
could be cut by the repair. Reads go on. A repair removes it (a server must be stopped for
it: repair takes the world exclusively), and the restarted server takes writes again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from air import cbor
from air.errors import CborError, HashMismatch, WorldError
from kernel import OWED_KINDS, TICK_KINDS
from kernel.errors import JournalCorrupt, JournalProblem, ObjectMissing
from world import _fileio as fileio
from world import journal as file_journal
from world._archive import archived_segment
from world._cas import FileCas
from world._directory import check_directory, discard_store
from world._fsutil import atomic_write, lock_world
from world._object_check import ObjectProblem, check_objects
from world._rederive import rederive
from world.cellstore import FileCellStore
from world.effects import BadReceipt, JournalSignatures, KeyProblem, ReceiptKey
from world.errors import JournalDamaged, NotAWorld, StorageError, StoreDamaged, storage_errors
from world.journal import (
    FileJournal,
    RepairReport,
    RestoredSegment,
    SealInfo,
    VerifyReport,
    damaged_kind,
    damaged_stretch,
    load_verified,
    mend_segment,
    read_seal_info,
    reframe,
    restore_segment,
    save_verified,
    stamp_sealed,
    trusted_segments,
)

__all__ = [
    "DAMAGE_MARK",
    "VERIFIED_CACHE",
    "WorldCheck",
    "WorldRepair",
    "check_world",
    "checkpoint_seq_next",
    "clear_damage",
    "refuse_if_damaged",
    "repair_world",
]


VERIFIED_CACHE: Final = Path("cache") / "verified.json"
"""In the world folder: the sealed segments ``journal verify`` checked (``world.journal._verified``)."""

DAMAGE_MARK: Final = Path("journal-damaged.json")
"""In the world folder while a check has found the journal damaged and no repair has run since:
``{"format": 1, "finding": text}``. A served world takes no write while it is there
(``refuse_if_damaged``)."""


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
    objects_checked: int = 0
    object_problems: tuple[ObjectProblem, ...] = ()
    air_problem: str | None = None

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
        """Opens without repair, every journaled receipt's signature holds, and every object
        the world needs is in its CAS whole."""
        return not self.needs_repair and self.signatures_ok and self.objects_ok

    @property
    def objects_ok(self) -> bool:
        return not self.object_problems and self.air_problem is None

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
            and self.objects_ok
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
        if self.air_problem is not None:
            found.append(f"the world's AIR cannot be read: {self.air_problem}")
        found.extend(problem.describe() for problem in self.object_problems)
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
            "objects_checked": self.objects_checked,
            "object_problems": [problem.as_json() for problem in self.object_problems],
            "air_problem": self.air_problem,
        }


@dataclass(frozen=True)
class WorldRepair:
    """What ``repair_world`` did: the segments it ``restored`` from ``archive`` (and why it
    could not restore others: ``archive_misses``) and those it ``mended`` by their seal, then
    the cut (``journal``: None if nothing was cut), and whether it discarded the checkpoint."""

    before: WorldCheck
    journal: RepairReport | None
    checkpoint_discarded: bool
    restored: tuple[RestoredSegment, ...] = ()
    archive: str | None = None
    archive_misses: tuple[str, ...] = ()
    mended: tuple[RestoredSegment, ...] = ()
    events_cut: int = 0
    """Of the records cut after the lost one, the ``event.in`` ones (readable in the backup:
    ``world.journal.salvage``)."""
    lost_kind: str | None = None
    """The lost record's kind, if its damaged bytes still show it (``damaged_kind``)."""

    def describe(self) -> str:
        parts = [put_back.describe() for put_back in (*self.restored, *self.mended)]
        parts += [f"not restored: {miss}" for miss in self.archive_misses]
        if (self.restored or self.mended) and self.journal is None:
            parts.append("nothing was cut")
        if self.journal is not None:
            parts.append(self.journal.describe())
            lost = self.journal.before.problem
            if lost is not None and lost.seq is not None:
                last = lost.segment == self.journal.before.segments[-1]
                why = _why_lost(self.lost_kind, last=last)
                parts.append(
                    f"lost: seq {lost.seq} ({lost.segment} at offset {lost.offset}, "
                    f"{lost.reason}) could not be read or put back ({why}); the world keeps "
                    f"seq 0..{lost.seq - 1} and goes on from seq {lost.seq}; the records after "
                    f"it are cut as they may depend on it, {self.events_cut} outside event(s) "
                    f"among them, intact in the backup (sent again, they are new inputs)"
                )
        if self.checkpoint_discarded:
            parts.append("checkpoint discarded; the next open rebuilds state from the journal")
        return "; ".join(parts) or "nothing to repair: the world opens as it is"

    def as_json(self) -> dict[str, Any]:
        return {
            "before": self.before.as_json(),
            "repaired": None if self.journal is None else self.journal.as_json(),
            "checkpoint_discarded": self.checkpoint_discarded,
            "archive": self.archive,
            "restored": [restored.as_json() for restored in self.restored],
            "mended": [mended.as_json() for mended in self.mended],
            "archive_misses": list(self.archive_misses),
            "events_cut": self.events_cut,
            "lost_kind": self.lost_kind,
        }


def _why_lost(kind: str | None, *, last: bool) -> str:
    """Why a record of ``kind`` (None: unknown) was not put back."""
    shown = "kind unknown" if kind is None else f"kind {kind}"
    if last:
        return f"{shown}, in the unsealed last segment, where nothing vouches for a candidate"
    if kind in TICK_KINDS | OWED_KINDS:
        return f"{shown}: re-execution did not give the bytes its seal holds"
    return f"{shown}: not a record re-execution gives, so an input"


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


def _check(path: Path, *, cache: bool = False, full: bool = False) -> WorldCheck:
    check_directory(path)
    journal_dir, context = path / "journal", _cache_context(path) if cache else None
    entries = {} if context is None or full else load_verified(path / VERIFIED_CACHE, context)
    stamps = stamp_sealed(journal_dir) if context is not None else {}
    report = _with_genesis(
        file_journal.verify(journal_dir, trusted=trusted_segments(journal_dir, entries))
    )
    signed = _signatures(path, report)
    found = check_objects(path)
    objects = (found.checked, found.problems, found.air_problem)
    try:
        check = WorldCheck(report, checkpoint_seq_next(path), None, *signed, *objects)
    except StoreDamaged as damage:
        check = WorldCheck(report, None, f"{damage.path}: {damage.reason}", *signed, *objects)
    except WorldError as exc:  # e.g. a checkpoint.cbor that is not a checkpoint at all
        check = WorldCheck(report, None, str(exc), *signed, *objects)
    if context is not None:
        _mark_damage(path, report)
    if context is not None and report.ok and check.signatures_ok:
        verified = set(report.segments[:-1]) - set(report.stale_seals)
        kept = {name: entry for name, entry in stamps.items() if name in verified}
        with contextlib.suppress(StorageError, OSError):  # a read-only world: it only saves time
            save_verified(path / VERIFIED_CACHE, context, kept)
    return check


def _mark_damage(path: Path, report: VerifyReport) -> None:
    """Leave ``DAMAGE_MARK`` if ``report`` found corruption (a torn tail is not damage: beside
    a live writer it is the commit in flight). Never on a read-only file system: the mark only
    stops writers, and a world there has none."""
    if report.problem is None or (path / DAMAGE_MARK).exists():
        return
    doc = {"format": 1, "finding": report.describe()}
    with contextlib.suppress(StorageError, OSError):
        atomic_write(path / DAMAGE_MARK, json.dumps(doc).encode())


def clear_damage(path: Path) -> None:
    """Remove ``DAMAGE_MARK`` (a repair has run): the world takes writes again."""
    mark = path / DAMAGE_MARK
    if mark.exists():
        with storage_errors("unlink", mark):
            fileio.unlink(mark, missing_ok=True)
        with storage_errors("fsync_dir", path):
            fileio.fsync_dir(path)


def refuse_if_damaged(path: Path) -> None:
    """``JournalDamaged`` if a check left ``DAMAGE_MARK`` in the world at ``path``: what a served
    world asks before each write (one ``stat`` while there is none)."""
    mark = path / DAMAGE_MARK
    if not mark.exists():
        return
    try:
        finding = str(json.loads(mark.read_bytes())["finding"])
    except (OSError, ValueError, KeyError, TypeError):
        finding = f"see {mark}"
    raise JournalDamaged(str(path), finding)


def _cache_context(path: Path) -> str | None:
    """What the verify cache is valid for: the receipt key's id (receipts in cached segments
    are not checked again, so another key voids it); None if the key cannot be read."""
    try:
        key = ReceiptKey.load(path)
    except WorldError:
        return None
    return "no key" if key is None else f"receipt key {key.key_id.hex()}"


def _with_genesis(report: VerifyReport) -> VerifyReport:
    """``report``, with a journal that has not even its genesis record as its problem (an
    emptied folder, or a first segment with no whole record): opening refuses it the same way
    (``world._recovery``), and nothing can repair it but a copy (``--repair`` with an archive
    restores sealed segments only)."""
    if report.records or report.problem is not None:
        return report
    where = report.segments[0] if report.segments else file_journal.segment_name(0)
    detail = (
        "not even the genesis record is whole"
        if report.segments
        else "no segment at all: the world's history is gone"
    )
    problem = JournalProblem(
        where, 0, 0, "segment_gap", f"{detail}; put it back from a backup or an archive"
    )
    return dataclasses.replace(report, problem=problem)


def _unchecked_ranges(report: VerifyReport) -> list[tuple[int, int]]:
    """``(first seq, end seq)`` of the stretches of good records outside the segments the
    verify cache vouched for (``report.trusted``: their receipts were checked before)."""
    firsts = [int(name.removesuffix(".log")) for name in report.segments]
    ends = [*firsts[1:], report.records][: len(firsts)]
    ranges: list[tuple[int, int]] = []
    for name, first, end in zip(report.segments, firsts, ends, strict=True):
        if name in report.trusted or first >= end:
            continue
        if ranges and ranges[-1][1] == first:
            ranges[-1] = (ranges[-1][0], min(end, report.records))
        else:
            ranges.append((first, min(end, report.records)))
    return ranges


def _signatures(
    path: Path, report: VerifyReport
) -> tuple[int, BadReceipt | None, KeyProblem | None]:
    """Check the signature of every receipt among the ``report.records`` good records, up to
    the first that fails: ``(checked, first bad, key problem)``; not in the segments the verify
    cache vouched for. Nothing in a corrupt journal (repair first). The key is read after the
    frames were verified, so a writer that made it for a receipt had made it by then."""
    if not report.ok:
        return 0, None, None
    signatures = JournalSignatures(path)
    with FileJournal(path / "journal", readonly=True) as journal:
        for first, end in _unchecked_ranges(report):
            for record in journal.read(first):
                if record.seq >= end:  # the next range, or a live writer's later commits
                    break
                if record.kind == "receipt":
                    bad = signatures.check(record)
                    if bad is not None:
                        return signatures.checked, bad, signatures.key_problem
    return signatures.checked, None, signatures.key_problem


def check_world(path: Path, *, cache: bool = False, full: bool = False) -> WorldCheck:
    """Verify the journal, the checkpoint's position and the receipts' signatures (shared
    lock; the key file is only read). Writes nothing unless ``cache``: then the sealed segments
    the verify cache (``VERIFIED_CACHE``) vouches for are not read again (``full``: all are),
    and the cache is written afterwards if the check found the journal and signatures good
    (not at all on a read-only file system)."""
    if not path.is_dir():
        raise NotAWorld(str(path))
    with lock_world(path, "read"):
        return _check(path, cache=cache, full=full)


def repair_world(path: Path, backup_dir: Path, archive: Path | None = None) -> WorldRepair:
    """Put back each damaged sealed segment, from ``archive``'s good copy (its blake3 the
    seal's), else by its seal (one changed byte that gives the seal's blake3), else by
    re-executing the journal before the damage (records the seal's blake3 then proves): see
    the module docstring; the damaged files are backed up in ``backup_dir/restored``. Then cut the journal after its
    last good record if it still needs it (backup in ``backup_dir``) and discard a checkpoint
    that reaches past it or cannot be read. Takes the exclusive lock. A journal left without
    its genesis record (nothing to cut back to) is ``JournalCorrupt``: only a copy of it can
    help."""
    check_directory(path)
    with lock_world(path, "exclusive"):
        before = _check(path)
        put_back = _PutBack(path, archive, backup_dir / "restored")
        check = put_back.run(before)
        cut, lost = None, check.journal.problem
        lost_kind = (
            None if lost is None else damaged_kind(path / "journal", lost.segment, lost.offset)
        )
        if not check.journal.clean:
            cut = file_journal.repair(path / "journal", backup_dir)
        after = _check(path)
        if after.journal.records == 0 and after.journal.problem is not None:
            gone = after.journal.problem
            raise JournalCorrupt(gone.segment, gone.offset, gone.seq, gone.reason, gone.detail)
        discard = after.checkpoint_ahead or after.checkpoint_damage is not None
        if discard:
            discard_store(path)
        clear_damage(path)
        shown = None if archive is None else str(archive)
        return WorldRepair(
            before,
            cut,
            discard,
            tuple(put_back.restored),
            shown,
            tuple(put_back.misses),
            tuple(put_back.mended),
            _events_cut(cut),
            lost_kind,
        )


def _events_cut(cut: RepairReport | None) -> int:
    """The ``event.in`` records a cut kept in its backup after the first record it cut."""
    if cut is None or cut.backup_dir is None or cut.seq_cut_first is None:
        return 0
    first = cut.seq_cut_first
    records = file_journal.salvage(cut.backup_dir)
    return sum(record.kind == "event.in" and record.seq > first for record in records)


def _restorable(report: VerifyReport) -> list[str]:
    """The sealed segments a copy could mend: the one holding the first problem (unless it is
    the last segment, which is never sealed) and those whose seal's digest disagrees."""
    sealed = report.segments[:-1]
    found = [] if report.problem is None else [report.problem.segment]
    return [name for name in dict.fromkeys([*found, *report.stale_seals]) if name in sealed]


@dataclass
class _PutBack:
    """Putting back the damaged sealed segments of the world at ``path`` before any cut: from
    ``archive`` when it holds a good copy (``restored``; why not: ``misses``), else by the
    seal (``mended``); the damaged files go to ``backup_dir``."""

    path: Path
    archive: Path | None
    backup_dir: Path
    restored: list[RestoredSegment] = dataclasses.field(default_factory=list)
    mended: list[RestoredSegment] = dataclasses.field(default_factory=list)
    misses: list[str] = dataclasses.field(default_factory=list)

    def run(self, check: WorldCheck) -> WorldCheck:
        """Put back each segment ``_restorable`` names, verify again, and go on while that
        finds more; return the last check. Each segment is tried once for each place its
        damage is found at, so a second damaged frame of a segment mended once is tried too."""
        tried: set[tuple[str, int | None]] = set()
        while True:
            problem = check.journal.problem
            places = [
                (name, problem if problem is not None and problem.segment == name else None)
                for name in _restorable(check.journal)
            ]
            untried = [
                (name, here)
                for name, here in places
                if (name, None if here is None else here.offset) not in tried
            ]
            if not untried:
                return check
            for name, here in untried:
                tried.add((name, None if here is None else here.offset))
                self._put_back(name, here)
            check = _check(self.path)

    def _put_back(self, name: str, problem: JournalProblem | None) -> None:
        if self.archive is not None:
            found = archived_segment(self.path, self.archive, name)
            if not isinstance(found, str):
                info, data, seal = found
                source = str(self.archive / "journal" / name)
                self.restored.append(self._replace(info, data, seal, source))
                return
            if found not in self.misses:
                self.misses.append(found)
        sealed = read_seal_info(self.path / "journal", name)
        if sealed is None or problem is None:
            return
        mended = mend_segment(self.path / "journal", sealed)
        if mended is not None:
            source = "its seal (a flipped byte of each damaged frame undone)"
            self.mended.append(self._replace(sealed, mended, None, source))
        elif problem.seq is not None:
            self._rederive(sealed, problem.offset, problem.seq)

    def _rederive(self, info: SealInfo, offset: int, seq: int) -> None:
        """Put back the records of the damaged stretch at ``offset`` by re-executing the
        journal before them (``world._rederive``), if the seal's blake3 proves them."""
        stretch = damaged_stretch(self.path / "journal", info, offset, seq)
        if stretch is None:
            return
        payloads = rederive(self.path, stretch.seq_first, stretch.seq_end - stretch.seq_first)
        if payloads is None:
            return
        data = reframe(self.path / "journal", info, stretch, payloads)
        if data is not None:
            last = stretch.seq_end - 1
            source = f"re-execution of seq 0..{seq - 1} (seq {seq}..{last} re-derived)"
            self.mended.append(self._replace(info, data, None, source))

    def _replace(
        self, info: SealInfo, data: bytes, seal: bytes | None, source: str
    ) -> RestoredSegment:
        return restore_segment(
            self.path / "journal", info, data, seal, source=source, backup_dir=self.backup_dir
        )
