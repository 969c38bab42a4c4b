"""What ``verify`` reports, and how ``repair`` cuts a journal back to its last good record.

Private to ``world.journal``, which re-exports ``VerifyReport`` and ``RepairReport`` and owns the
public ``verify`` and ``repair`` (``verify`` walks the segments with the same scan that opening
uses, so it stays next to it; this module only acts on its report).

Invariants of a repair. It changes nothing unless ``verify`` found a problem or a torn tail, and
then only from the first bad place on: the segment holding it is cut before that frame (or
removed whole, if the problem is its header or its place in the sequence), and every later
segment is removed. Everything changed or removed is first copied to the backup directory and
the copies are synced, with the directory, before any original is touched; a backup never
overwrites an existing file. Seals of the cut and removed segments are backed up and removed
before the segments themselves, so that no seal outlives the bytes it describes. Not here:
deciding whether to repair (``world journal verify --repair`` asks), or checking frames
(``world._segments``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from air.errors import UsageError
from world._segments import SEGMENT_HEADER_BYTES, JournalProblem, TornTail, _truncate, seal_name
from world.fsutil import fsync_dir


@dataclass(frozen=True, slots=True)
class VerifyReport:
    segments: tuple[str, ...]
    records: int
    seq_last_good: int | None
    problem: JournalProblem | None
    torn_tail: TornTail | None

    @property
    def ok(self) -> bool:
        """No corruption (a torn tail is not corruption: opening drops it)."""
        return self.problem is None


@dataclass(frozen=True, slots=True)
class RepairReport:
    changed: bool
    cut_segment: str | None
    cut_offset: int | None
    bytes_removed: int
    segments_moved: tuple[str, ...]
    backup_files: tuple[str, ...]
    seq_next: int
    before: VerifyReport


def _backup(source: Path, backup_dir: Path) -> Path:
    target = backup_dir / source.name
    if target.exists():
        raise UsageError(f"backup {target} already exists")
    shutil.copyfile(source, target)
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return target


def _cut_after_last_good(path: Path, backup_path: Path, before: VerifyReport) -> RepairReport:
    """Carry out ``world.journal.repair`` on the journal in ``path``, which ``before`` verified."""
    cut = before.problem or before.torn_tail
    if cut is None:
        return RepairReport(False, None, None, 0, (), (), before.records, before)
    names = before.segments
    position = names.index(cut.segment)
    whole = cut.offset < SEGMENT_HEADER_BYTES
    moved = names[position:] if whole else names[position + 1 :]
    cut_names = () if whole else (cut.segment,)
    seals = [seal_name(name) for name in (*cut_names, *moved) if (path / seal_name(name)).exists()]
    backup_path.mkdir(parents=True, exist_ok=True)
    backups = [_backup(path / name, backup_path) for name in (*cut_names, *moved, *seals)]
    fsync_dir(backup_path)
    for seal in seals:
        os.unlink(path / seal)
    if seals:
        fsync_dir(path)
    removed = sum((path / name).stat().st_size for name in moved)
    if not whole:
        removed += (path / cut.segment).stat().st_size - cut.offset
        _truncate(path / cut.segment, cut.offset)
    for name in moved:
        os.unlink(path / name)
    fsync_dir(path)
    backup_names = tuple(str(file) for file in backups)
    return RepairReport(
        True, cut.segment, cut.offset, removed, moved, backup_names, before.records, before
    )
