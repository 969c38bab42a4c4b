"""What ``verify`` reports, how ``repair`` cuts a journal back to its last good record, and
``salvage``, which reads what it can from the segments a repair backed up.

Private to ``world.journal._file``, which re-exports ``VerifyReport``, ``RepairReport`` and ``salvage``
and owns the public ``verify`` and ``repair`` (``verify`` walks the segments with the same scan
that opening uses, so it stays next to it; this module only acts on its report).

Invariants of a repair. It changes nothing unless ``verify`` found a problem or a torn tail, and
then only from the end of the last whole commit before it on: the segment holding it is cut
there (or removed whole, if the problem is its header or its place in the sequence), and every
later segment is removed. Everything changed or removed is first copied to the backup directory
and the copies are synced, with the directory, before any original is touched; a backup never
overwrites an existing file. Seals of the cut and removed segments are backed up and removed
before the segments themselves, so that no seal outlives the bytes it describes. Every durable
operation goes through ``world._fileio``; an ``OSError`` is raised as ``StorageError``. Not here:
deciding whether to repair (``world journal verify --repair`` asks), or checking frames
(``world.journal._frames``).

Putting a damaged sealed segment back, from a copy or by its seal, is ``world.journal._mend``'s.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from air.errors import CborError, UsageError
from kernel.errors import JournalProblem
from kernel.journal import JournalRecord, decode_record_fast
from world import _fileio as fileio
from world._fsutil import mkdir_durable
from world.errors import storage_errors
from world.journal._frames import (
    FRAME_HEADER_BYTES,
    SEGMENT_HEADER_BYTES,
    TornTail,
    seal_name,
)
from world.journal._segments import (
    fsync_dir,
    list_segments,
    read_file,
    truncate,
    unlink,
)

FRAME_HEAD: Final = struct.Struct("<III")


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What ``verify`` found: ``records`` good records (seqs ``0 .. records - 1``) in
    ``segments``, then possibly the first ``problem`` (corruption: opening refuses the journal)
    or a ``torn_tail`` (an unfinished last write: opening drops it). ``ok`` is "no corruption";
    ``clean`` is "nothing at all to report"."""

    segments: tuple[str, ...]
    records: int
    seq_last_good: int | None
    problem: JournalProblem | None
    torn_tail: TornTail | None
    stale_seals: tuple[str, ...] = ()  # segments whose frames check but whose seal disagrees
    trusted: tuple[str, ...] = ()  # sealed segments taken from the verify cache, not read

    @property
    def ok(self) -> bool:
        """No corruption (a torn tail is not corruption: opening drops it)."""
        return self.problem is None

    @property
    def clean(self) -> bool:
        """No corruption, no torn tail and no stale seal."""
        return self.problem is None and self.torn_tail is None and not self.stale_seals

    @property
    def findings(self) -> tuple[JournalProblem, ...]:
        """The problem and the torn tail (as reason ``torn_tail``), each as one finding."""
        torn = () if self.torn_tail is None else (self.torn_tail.problem(),)
        return (*(() if self.problem is None else (self.problem,)), *torn)

    def describe(self) -> str:
        """One line: ``journal ok: ...``, ``journal corrupt: <finding>; ...`` or
        ``journal has a torn tail: <finding>; ...``."""
        where = f"{self.records} good record(s) in {len(self.segments)} segment(s)"
        if self.problem is not None:
            return f"journal corrupt: {self.problem.describe()}; {where} before it"
        if self.torn_tail is not None:
            torn = self.torn_tail.problem().describe()
            return f"journal has a torn tail: {torn}; {where} before it; opening drops it"
        if self.stale_seals:
            return (
                f"journal ok but {len(self.stale_seals)} seal(s) disagree with their segment "
                f"({', '.join(self.stale_seals)}): repair removes them; {where}"
            )
        cached = (
            f" ({len(self.trusted)} sealed segment(s) verified before and unchanged since, not "
            "read again; --full reads them)"
            if self.trusted
            else ""
        )
        return f"journal ok: {self.records} record(s) in {len(self.segments)} segment(s){cached}"

    def as_json(self) -> dict[str, Any]:
        """``{ok, clean, records, seq_last_good, segments: [name], problem: finding | null,
        torn_tail: {segment, offset, seq, bytes_dropped, reason} | null, findings: [finding],
        stale_seals: [segment name]}``; a finding is ``JournalProblem.as_json()``."""
        return {
            "ok": self.ok,
            "clean": self.clean,
            "records": self.records,
            "seq_last_good": self.seq_last_good,
            "segments": list(self.segments),
            "problem": None if self.problem is None else self.problem.as_json(),
            "torn_tail": None if self.torn_tail is None else self.torn_tail.as_json(),
            "findings": [finding.as_json() for finding in self.findings],
            "stale_seals": list(self.stale_seals),
            "segments_cached": list(self.trusted),
        }


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What ``repair`` did. ``records_cut`` records (seqs ``seq_cut_first .. seq_cut_last``;
    every one of them unless segment names skip seqs) were cut, the damaged one included, and
    counted as ``_count_cut`` says (a segment's frames, or the seqs its name and the next
    segment's name give it where a damaged length stops the frames), ``bytes_removed`` bytes in
    all, from ``cut_segment`` at ``cut_offset`` on; ``segments_moved`` were removed whole. Every
    changed or removed file is in ``backup_dir`` (``backup_files``), where ``salvage`` reads the
    cut records back. ``seq_next`` is where the journal now ends."""

    changed: bool
    cut_segment: str | None
    cut_offset: int | None
    bytes_removed: int
    segments_moved: tuple[str, ...]
    backup_files: tuple[str, ...]
    seq_next: int
    before: VerifyReport
    records_cut: int = 0
    seq_cut_first: int | None = None
    seq_cut_last: int | None = None
    backup_dir: str | None = None

    def describe(self) -> str:
        """One line: ``nothing to repair: ...`` or ``repaired: cut N record(s) ...``."""
        if not self.changed:
            return f"nothing to repair: {self.seq_next} record(s)"
        if self.cut_segment is None:
            return (
                f"repaired: removed {len(self.backup_files)} stale seal(s); nothing cut; the "
                f"journal has {self.seq_next} record(s); backup in {self.backup_dir}"
            )
        seqs = ""
        if self.seq_cut_first is not None and self.seq_cut_last is not None:
            span = self.seq_cut_last - self.seq_cut_first + 1
            missing = span - self.records_cut  # segment names that skip seqs
            gaps = f", {missing} of them not in the journal" if missing > 0 else ""
            seqs = f" (seq {self.seq_cut_first}..{self.seq_cut_last}{gaps})"
        return (
            f"repaired: cut {self.records_cut} record(s){seqs}, {self.bytes_removed} bytes, "
            f"from {self.cut_segment} at offset {self.cut_offset}; the journal now has "
            f"{self.seq_next} record(s); backup in {self.backup_dir}"
        )

    def as_json(self) -> dict[str, Any]:
        """``{changed, cut_segment, cut_offset, bytes_removed, records_cut, seq_cut_first,
        seq_cut_last, segments_moved: [name], backup_dir, backup_files: [path], seq_next,
        before: VerifyReport.as_json()}``."""
        return {
            "changed": self.changed,
            "cut_segment": self.cut_segment,
            "cut_offset": self.cut_offset,
            "bytes_removed": self.bytes_removed,
            "records_cut": self.records_cut,
            "seq_cut_first": self.seq_cut_first,
            "seq_cut_last": self.seq_cut_last,
            "segments_moved": list(self.segments_moved),
            "backup_dir": self.backup_dir,
            "backup_files": list(self.backup_files),
            "seq_next": self.seq_next,
            "before": self.before.as_json(),
        }


# --- following frames past damage --------------------------------------------------------------


def _frames(data: bytes, offset: int) -> Iterator[tuple[int, bytes | None]]:
    """``(offset, payload or None if its CRC fails)`` of each frame from ``offset`` on, as long
    as frame headers are intact (their CRC says the length can be trusted)."""
    while len(data) - offset >= FRAME_HEADER_BYTES:
        length, crc, head_crc = FRAME_HEAD.unpack_from(data, offset)
        if zlib.crc32(data[offset : offset + 8]) != head_crc:
            return
        start = offset + FRAME_HEADER_BYTES
        end = start + length
        if end > len(data):
            return
        payload = data[start:end]
        yield offset, payload if zlib.crc32(payload) == crc else None
        offset = end


def salvage(directory: str | os.PathLike[str]) -> Iterator[JournalRecord]:
    """Yield every record that can still be read from the segment files in ``directory`` (for a
    repair's backup, whose segments need not start at seq 0): frames whose CRCs hold and that
    decode, in file order; a frame with a bad payload is stepped over, and a segment is left at
    its first bad frame header. Unlike opening and reading, this guesses around damage: it is
    for a human recovering cut records, never for the world."""
    for _, name in list_segments(Path(directory)):
        data = read_file(Path(directory) / name)
        for _, payload in _frames(data, SEGMENT_HEADER_BYTES):
            if payload is None:
                continue
            try:
                record = decode_record_fast(payload)
            except CborError:  # intact bytes that are not a record: skipped, by design
                continue
            yield record


def _followed(data: bytes, offset: int, *, whole_only: bool) -> tuple[int, bool]:
    """How many frames follow from ``offset`` while their headers hold (``whole_only``: only
    those whose payload checks too), and whether following them reached the end of ``data``."""
    count, end = 0, offset
    for start, payload in _frames(data, offset):
        end = start + FRAME_HEADER_BYTES + FRAME_HEAD.unpack_from(data, start)[0]
        count += payload is not None or not whole_only
    return count, end == len(data)


def _count_cut(
    path: Path,
    segments: tuple[str, ...],
    cuts: list[tuple[str, int, int]],
    *,
    torn: bool,
) -> list[tuple[int, int]]:
    """``(first seq, record count)`` of each stretch of records a repair cuts: ``cuts`` is
    ``(segment, offset, seq)`` of each cut, the cut segment from where the bad frame (or torn
    tail) starts, then every removed segment from its header, named by its first seq.

    A segment holds the seqs from its own first to the next segment's first (names are first
    seqs, and opening checks that they follow on), so where frame headers cannot be followed
    to a segment's end (a damaged length), the next segment's name gives the count; only the
    last segment is counted by its frames alone. A torn tail (``torn``) cuts only the frames of
    it that are whole: a frame cut short by a crash was never a record (a partial batch's
    whole frames were)."""
    firsts = [int(name.removesuffix(".log")) for name in segments]
    stretches = []
    for name, offset, seq in cuts:
        position = segments.index(name)
        following = firsts[position + 1] if position + 1 < len(firsts) else None
        count, to_end = _followed(read_file(path / name), offset, whole_only=torn)
        if not to_end and not torn and following is not None and following > seq:
            count = max(count, following - seq)
        stretches.append((seq, count))
    return [stretch for stretch in stretches if stretch[1]]


# --- cutting ---------------------------------------------------------------------------------


def backup_file(source: Path, backup_dir: Path) -> Path:
    target = backup_dir / source.name
    if target.exists():
        raise UsageError(f"backup {target} already exists")
    data = read_file(source)
    with storage_errors("create", target):
        fd = fileio.create(target, exclusive=True)
    try:
        with storage_errors("write", target):
            fileio.write(fd, data, target)
        with storage_errors("fsync", target):
            fileio.fsync(fd, target)
    finally:
        with storage_errors("close", target):
            os.close(fd)
    return target


def _size(path: Path) -> int:
    with storage_errors("stat", path):
        return path.stat().st_size


def cut_after_last_good(path: Path, backup_path: Path, before: VerifyReport) -> RepairReport:
    """Carry out ``world.journal._file.repair`` on the journal in ``path``, which ``before`` verified.

    The segment holding the cut is copied to ``backup_dir`` and truncated there; later segments
    (and a segment whose header is bad) are copied and then removed. The seals of all these
    segments are copied and removed first, so that no seal outlives the bytes it describes. The
    copies are synced before any original is touched. Afterwards ``verify`` is clean.
    """
    cut = before.problem or before.torn_tail
    if cut is None:
        if not before.stale_seals:
            return RepairReport(False, None, None, 0, (), (), before.records, before)
        return _drop_stale_seals(path, backup_path, before)
    cut_segment, cut_offset = cut.segment, cut.offset
    names = before.segments
    position = names.index(cut_segment)
    whole = cut_offset < SEGMENT_HEADER_BYTES
    moved = names[position:] if whole else names[position + 1 :]
    cut_names = () if whole else (cut_segment,)
    first_cut = cut.seq if cut.seq is not None else before.records
    cuts = [(cut_segment, cut_offset, first_cut)] if not whole else []
    cuts += [(name, SEGMENT_HEADER_BYTES, int(name.removesuffix(".log"))) for name in moved]
    stretches = _count_cut(path, names, cuts, torn=before.problem is None)
    cut_seals = [name for name in before.stale_seals if name not in (*cut_names, *moved)]
    seals = [
        seal_name(name)
        for name in (*cut_seals, *cut_names, *moved)
        if (path / seal_name(name)).exists()
    ]
    with storage_errors("mkdir", backup_path):
        mkdir_durable(backup_path)
    backups = [backup_file(path / name, backup_path) for name in (*cut_names, *moved, *seals)]
    fsync_dir(backup_path)
    for seal in seals:
        unlink(path / seal)
    if seals:
        fsync_dir(path)
    removed = sum(_size(path / name) for name in moved)
    if not whole:
        removed += _size(path / cut_segment) - cut_offset
        truncate(path / cut_segment, cut_offset)
    for name in moved:
        unlink(path / name)
    fsync_dir(path)
    return RepairReport(
        True,
        cut_segment,
        cut_offset,
        removed,
        moved,
        tuple(str(file) for file in backups),
        before.records,
        before,
        records_cut=sum(count for _, count in stretches),
        seq_cut_first=min((first for first, _ in stretches), default=None),
        seq_cut_last=max((first + count - 1 for first, count in stretches), default=None),
        backup_dir=str(backup_path),
    )


def _drop_stale_seals(path: Path, backup_path: Path, before: VerifyReport) -> RepairReport:
    """Back up and remove the seals that disagree with their segments (nothing is cut: the next
    writable open scans those segments and seals them again)."""
    seals = [seal_name(name) for name in before.stale_seals if (path / seal_name(name)).exists()]
    with storage_errors("mkdir", backup_path):
        mkdir_durable(backup_path)
    backups = [backup_file(path / name, backup_path) for name in seals]
    fsync_dir(backup_path)
    for seal in seals:
        unlink(path / seal)
    fsync_dir(path)
    return RepairReport(
        True,
        None,
        None,
        0,
        (),
        tuple(str(file) for file in backups),
        before.records,
        before,
        backup_dir=str(backup_path),
    )
