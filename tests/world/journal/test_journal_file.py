"""The file journal: segments, torn tails, corruption, seals, verify/repair, readers, syncs.

Failures and crashes at every file operation are in tests/world/journal/test_journal_faults.py.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import blake3
import pytest

import world.journal._file
from air import cbor
from air.errors import UsageError
from kernel.errors import JournalCorrupt
from kernel.journal import PROBLEM_REASONS, encode_record
from world import _fileio as fileio
from world.errors import StorageError
from world.journal import (
    FRAME_HEADER_BYTES,
    SEAL_SUFFIX,
    SEGMENT_HEADER_BYTES,
    SEGMENT_MAGIC,
    FileJournal,
    repair,
    salvage,
    seal_name,
    segment_name,
    verify,
)

EVENT = "/world/event/demo/CounterEvent@1"
CHECKED = {"check_writes": True, "check_reads": True}


def _write(directory: Path, count: int, segment_bytes_max: int = 1 << 20, **body: Any) -> None:
    with FileJournal(directory, segment_bytes_max=segment_bytes_max, **CHECKED) as journal:
        for n in range(count):
            journal.append("event.in", EVENT, {"n": n, **body})
            journal.commit()


def _frame_offsets(segment: Path) -> list[int]:
    """Frame offsets in a segment, by an independent walk of the length fields."""
    data, offsets, offset = segment.read_bytes(), [], SEGMENT_HEADER_BYTES
    while offset + 4 <= len(data):
        offsets.append(offset)
        offset += FRAME_HEADER_BYTES + struct.unpack_from("<I", data, offset)[0]
    return offsets


def _flip(path: Path, offset: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def _bodies(directory: Path) -> list[Any]:
    with FileJournal(directory, **CHECKED) as journal:
        return [record.body["n"] for record in journal.read()]


def _segment_of(name: str) -> str:
    """The segment a file in the journal directory belongs to (itself, or the one it seals)."""
    return name.removesuffix(SEAL_SUFFIX)


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {entry.name: entry.read_bytes() for entry in sorted(directory.iterdir())}


# --- segments ---------------------------------------------------------------------------------


def test_segments_roll_over_at_the_size_limit_and_are_named_by_first_seq(tmp_path: Path) -> None:
    _write(tmp_path, 40, segment_bytes_max=300)
    with FileJournal(tmp_path) as journal:
        names = journal.segments
        assert len(names) > 3
        firsts = [int(name.removesuffix(".log")) for name in names]
        assert firsts[0] == 0
        assert names == tuple(segment_name(first) for first in firsts)
        for name, first, following in zip(names, firsts, [*firsts[1:], 40], strict=True):
            assert (tmp_path / name).stat().st_size <= 300
            assert len(_frame_offsets(tmp_path / name)) == following - first
    assert _bodies(tmp_path) == list(range(40))


def test_a_commit_that_does_not_fit_rolls_over_first_and_stays_in_one_segment(
    tmp_path: Path,
) -> None:
    with FileJournal(tmp_path, segment_bytes_max=300, **CHECKED) as journal:
        journal.append("event.in", EVENT, {"n": 0})
        journal.commit()
        journal.append_many(("event.in", EVENT, {"n": n}) for n in range(1, 20))
        journal.commit()
        assert journal.segments == (segment_name(0), segment_name(1))
        journal.append("event.in", EVENT, {"n": 20})
        journal.commit()  # the batch made its segment larger than the limit: roll again
        assert journal.segments == (segment_name(0), segment_name(1), segment_name(20))
    assert (tmp_path / segment_name(1)).stat().st_size > 300
    assert len(_frame_offsets(tmp_path / segment_name(1))) == 19
    assert _bodies(tmp_path) == list(range(21))


def test_a_record_larger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    with FileJournal(tmp_path, segment_bytes_max=100, **CHECKED) as journal:
        for body in ({"n": 0}, {"n": 1, "big": b"x" * 500}, {"n": 2}):
            journal.append("event.in", EVENT, body)
            journal.commit()
        assert journal.segments == tuple(segment_name(n) for n in range(3))
    assert _bodies(tmp_path) == [0, 1, 2]


def test_reads_from_any_cursor_after_reopen_use_the_sparse_index(tmp_path: Path) -> None:
    with FileJournal(tmp_path, segment_bytes_max=40_000) as journal:
        for start in range(0, 1200, 100):
            journal.append_many(("event.in", EVENT, {"n": n}) for n in range(start, start + 100))
            journal.commit()
    with FileJournal(tmp_path, **CHECKED) as journal:
        assert len(journal.segments) > 1
        for cursor in (0, 1, 255, 256, 257, 511, 600, 1199):
            first = next(journal.read(cursor))
            assert (first.seq, first.body["n"]) == (cursor, cursor)
        assert sum(1 for _ in journal.read(700)) == 500


def test_an_empty_last_segment_is_reused_for_the_next_append(tmp_path: Path) -> None:
    _write(tmp_path, 3)
    header = SEGMENT_MAGIC + bytes([1]) + (3).to_bytes(8, "little")
    (tmp_path / segment_name(3)).write_bytes(header)
    with FileJournal(tmp_path, **CHECKED) as journal:
        assert journal.seq_next == 3
        journal.append("event.in", EVENT, {"n": 3})
        journal.commit()
        assert journal.segments == (segment_name(0), segment_name(3))
    assert _bodies(tmp_path) == [0, 1, 2, 3]


def test_stale_temp_files_of_a_crashed_rollover_are_removed_on_open(tmp_path: Path) -> None:
    _write(tmp_path, 2)
    stale = tmp_path / f".{segment_name(2)}.abc123.tmp"
    stale.write_bytes(SEGMENT_MAGIC)
    with FileJournal(tmp_path) as journal:
        assert journal.seq_next == 2
    assert not stale.exists()


# --- torn tails -------------------------------------------------------------------------------


def _last_frame(directory: Path) -> tuple[Path, int, int]:
    segment = directory / segment_name(0)
    offset = _frame_offsets(segment)[-1]
    return segment, offset, segment.stat().st_size - offset


@pytest.mark.parametrize("kept", [1, 4, 8, 11, 12, 13, 20, -1])
def test_a_truncated_tail_is_dropped_on_open(tmp_path: Path, kept: int) -> None:
    _write(tmp_path, 5)
    segment, offset, frame_bytes = _last_frame(tmp_path)
    kept = kept % frame_bytes
    os.truncate(segment, offset + kept)
    with FileJournal(tmp_path, **CHECKED) as journal:
        assert journal.dropped is not None
        assert (journal.dropped.segment, journal.dropped.offset) == (segment.name, offset)
        assert journal.dropped.bytes_dropped == kept
        expected = "short_header" if kept < FRAME_HEADER_BYTES else "short_payload"
        assert journal.dropped.reason == expected
        assert journal.seq_next == 4
        assert segment.stat().st_size == offset
        journal.append("event.in", EVENT, {"n": 4})
        journal.commit()
    with FileJournal(tmp_path, **CHECKED) as journal:
        assert journal.dropped is None
    assert _bodies(tmp_path) == [0, 1, 2, 3, 4]


def test_a_zero_filled_tail_is_dropped_on_open(tmp_path: Path) -> None:
    _write(tmp_path, 3)
    segment = tmp_path / segment_name(0)
    size = segment.stat().st_size
    with segment.open("ab") as file:
        file.write(bytes(4096))
    with FileJournal(tmp_path) as journal:
        assert journal.dropped is not None
        assert (journal.dropped.offset, journal.dropped.reason) == (size, "zero_fill")
        assert journal.dropped.bytes_dropped == 4096
    assert _bodies(tmp_path) == [0, 1, 2]


def test_a_last_frame_with_a_zeroed_sector_is_dropped_as_a_partial_write(tmp_path: Path) -> None:
    _write(tmp_path, 3, pad=b"\x07" * 2000)
    segment, offset, _ = _last_frame(tmp_path)
    sector = (offset // 512 + 2) * 512
    data = bytearray(segment.read_bytes())
    data[sector : sector + 512] = bytes(512)
    segment.write_bytes(bytes(data))
    with FileJournal(tmp_path) as journal:
        assert journal.dropped is not None
        assert (journal.dropped.offset, journal.dropped.reason) == (offset, "partial_write")
    assert _bodies(tmp_path) == [0, 1]


def test_a_flipped_byte_in_the_last_record_is_corruption_not_a_torn_tail(tmp_path: Path) -> None:
    _write(tmp_path, 4)
    segment, offset, frame_bytes = _last_frame(tmp_path)
    _flip(segment, offset + frame_bytes - 3)
    with pytest.raises(JournalCorrupt) as raised:
        FileJournal(tmp_path)
    error = raised.value
    assert (error.segment, error.offset, error.seq, error.reason) == (
        segment.name,
        offset,
        3,
        "payload_checksum",
    )


# --- corruption -------------------------------------------------------------------------------


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed-by-open", "sealed-by-read"])
def test_a_flipped_byte_in_a_middle_record_is_reported_with_segment_offset_and_seq(
    tmp_path: Path, sealed: bool
) -> None:
    _write(tmp_path, 30, segment_bytes_max=400)
    with FileJournal(tmp_path) as journal:
        name = journal.segments[1]
    first = int(name.removesuffix(".log"))
    offset = _frame_offsets(tmp_path / name)[2]
    _flip(tmp_path / name, offset + FRAME_HEADER_BYTES + 10)
    if not sealed:  # open scans the segment and finds the damage
        (tmp_path / seal_name(name)).unlink()
    # Open scans an unsealed segment; it trusts a seal, and then reading checks the frame.
    with pytest.raises(JournalCorrupt) as raised, FileJournal(tmp_path) as journal:
        list(journal.read())
    error = raised.value
    assert (error.segment, error.offset, error.seq) == (name, offset, first + 2)
    assert error.reason == "payload_checksum"


def test_a_flipped_length_bit_in_a_middle_record_is_corruption_not_a_torn_tail(
    tmp_path: Path,
) -> None:
    _write(tmp_path, 6)
    segment = tmp_path / segment_name(0)
    offset = _frame_offsets(segment)[3]
    _flip(segment, offset + 3, 0x40)  # the length now runs far past the end of the file
    with pytest.raises(JournalCorrupt) as raised:
        FileJournal(tmp_path)
    assert (raised.value.offset, raised.value.seq, raised.value.reason) == (
        offset,
        3,
        "header_checksum",
    )


def test_a_short_frame_at_the_end_of_an_earlier_segment_is_corruption(tmp_path: Path) -> None:
    _write(tmp_path, 20, segment_bytes_max=300)
    first = tmp_path / segment_name(0)
    last_offset = _frame_offsets(first)[-1]
    os.truncate(first, first.stat().st_size - 2)
    with pytest.raises(JournalCorrupt) as raised:
        FileJournal(tmp_path)
    assert (raised.value.segment, raised.value.offset) == (first.name, last_offset)
    assert raised.value.reason == "short_payload"


def test_a_frame_with_a_valid_checksum_but_the_wrong_seq_is_corruption(tmp_path: Path) -> None:
    _write(tmp_path, 2)
    with FileJournal(tmp_path, check_writes=True) as checked:
        checked._pending.append(encode_record(7, EVENT, "event.in", None))
        with pytest.raises(AssertionError):
            checked.commit()
    journal = FileJournal(tmp_path)
    journal._pending.append(encode_record(7, EVENT, "event.in", None))  # a writer bug, simulated
    journal.commit()
    journal.close()
    with pytest.raises(JournalCorrupt) as raised:
        FileJournal(tmp_path)
    assert (raised.value.seq, raised.value.reason) == (2, "seq_mismatch")


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"hello, world\n" * 4,
        b"WJRNL1\n\x02" + bytes(8),
        b"WJRNL1\n\x01" + (5).to_bytes(8, "little"),
    ],
    ids=["empty", "text", "version-2", "wrong-first-seq"],
)
def test_a_foreign_segment_header_is_refused(tmp_path: Path, content: bytes) -> None:
    (tmp_path / segment_name(0)).write_bytes(content)
    with pytest.raises(JournalCorrupt) as raised:
        FileJournal(tmp_path)
    assert (raised.value.segment, raised.value.offset) == (segment_name(0), 0)
    assert raised.value.reason == "segment_header"


def test_a_missing_middle_segment_is_a_gap(tmp_path: Path) -> None:
    _write(tmp_path, 20, segment_bytes_max=300)
    with FileJournal(tmp_path) as journal:
        names = journal.segments
    (tmp_path / names[1]).unlink()
    with pytest.raises(JournalCorrupt) as raised:
        FileJournal(tmp_path)
    assert (raised.value.segment, raised.value.reason) == (names[2], "segment_gap")
    assert raised.value.seq == int(names[1].removesuffix(".log"))


def test_a_record_corrupted_after_open_is_caught_by_read(tmp_path: Path) -> None:
    _write(tmp_path, 5)
    segment = tmp_path / segment_name(0)
    offset = _frame_offsets(segment)[3]
    with FileJournal(tmp_path) as journal:
        _flip(segment, offset + FRAME_HEADER_BYTES + 1)
        with pytest.raises(JournalCorrupt) as raised:
            list(journal.read())
        assert (raised.value.offset, raised.value.seq) == (offset, 3)


# --- verify and repair ------------------------------------------------------------------------


def test_verify_counts_the_records_of_a_healthy_journal(tmp_path: Path) -> None:
    _write(tmp_path, 25, segment_bytes_max=400)
    report = verify(tmp_path)
    assert report.ok
    assert (report.records, report.seq_last_good) == (25, 24)
    assert (report.problem, report.torn_tail) == (None, None)
    assert len(report.segments) > 1


def test_verify_reports_a_torn_tail_without_dropping_it(tmp_path: Path) -> None:
    _write(tmp_path, 3)
    segment, offset, _ = _last_frame(tmp_path)
    os.truncate(segment, offset + 5)
    before = _snapshot(tmp_path)
    report = verify(tmp_path)
    assert report.ok
    assert report.torn_tail is not None
    assert (report.torn_tail.offset, report.torn_tail.bytes_dropped) == (offset, 5)
    assert report.seq_last_good == 1
    assert _snapshot(tmp_path) == before


def test_verify_shows_a_torn_tail_as_a_finding_in_its_text_and_json(tmp_path: Path) -> None:
    _write(tmp_path, 3)
    segment, offset, _ = _last_frame(tmp_path)
    os.truncate(segment, offset + 5)
    report = verify(tmp_path)
    assert report.ok  # not corruption: opening drops it
    assert not report.clean
    (finding,) = report.findings
    assert (finding.segment, finding.offset, finding.seq, finding.reason) == (
        segment.name,
        offset,
        2,
        "torn_tail",
    )
    assert finding.describe() in report.describe()
    assert "journal ok" not in report.describe()
    data = report.as_json()
    assert data["torn_tail"] == {
        "segment": segment.name,
        "offset": offset,
        "seq": 2,
        "bytes_dropped": 5,
        "reason": "short_header",
    }
    assert (data["ok"], data["clean"], data["problem"]) == (True, False, None)
    assert data["findings"] == [finding.as_json()]
    FileJournal(tmp_path).close()  # a writable open cuts it
    assert verify(tmp_path).clean
    assert verify(tmp_path).as_json()["findings"] == []


def test_open_and_verify_describe_the_same_damage_with_the_same_line(tmp_path: Path) -> None:
    _write(tmp_path, 6)
    segment = tmp_path / segment_name(0)
    offset = _frame_offsets(segment)[3]
    _flip(segment, offset + FRAME_HEADER_BYTES + 2)
    with pytest.raises(JournalCorrupt) as raised:
        FileJournal(tmp_path)
    report = verify(tmp_path)
    assert report.problem == raised.value.problem
    assert report.problem.reason in PROBLEM_REASONS
    line = report.problem.describe()
    assert "\n" not in line
    assert str(raised.value) == f"journal corrupt: {line}"
    assert line in report.describe()
    assert report.as_json()["problem"] == {
        "segment": segment.name,
        "offset": offset,
        "seq": 3,
        "reason": "payload_checksum",
        "detail": "",
    }
    assert report.as_json()["findings"] == [report.as_json()["problem"]]


def test_verify_reports_corruption_without_modifying_anything(tmp_path: Path) -> None:
    _write(tmp_path, 30, segment_bytes_max=400)
    name = verify(tmp_path).segments[1]
    offset = _frame_offsets(tmp_path / name)[1]
    _flip(tmp_path / name, offset + FRAME_HEADER_BYTES + 4)
    before = _snapshot(tmp_path)
    report = verify(tmp_path)
    assert not report.ok
    assert report.problem is not None
    first = int(name.removesuffix(".log"))
    assert (report.problem.segment, report.problem.offset, report.problem.seq) == (
        name,
        offset,
        first + 1,
    )
    assert (report.records, report.seq_last_good) == (first + 1, first)
    assert _snapshot(tmp_path) == before


def test_verify_decodes_strictly_where_open_only_checks_frames(tmp_path: Path) -> None:
    _write(tmp_path, 2)
    journal = FileJournal(tmp_path)
    # Non-canonical (a one-byte integer written in two bytes) but correctly framed and numbered.
    payload = encode_record(2, EVENT, "event.in", 5).replace(b"dbody\x05", b"dbody\x18\x05")
    journal._pending.append(payload)
    journal.commit()
    journal.close()
    report = verify(tmp_path)
    assert report.problem is not None
    assert (report.problem.seq, report.problem.reason) == (2, "record_decode")
    with FileJournal(tmp_path) as lenient:
        assert lenient.seq_next == 3
    with pytest.raises(JournalCorrupt):
        FileJournal(tmp_path, check_reads=True)


def test_repair_keeps_a_backup_and_cuts_after_the_last_good_record(tmp_path: Path) -> None:
    journal_dir, backup_dir = tmp_path / "journal", tmp_path / "backup"
    _write(journal_dir, 30, segment_bytes_max=400)
    names = verify(journal_dir).segments
    offset = _frame_offsets(journal_dir / names[1])[2]
    _flip(journal_dir / names[1], offset + FRAME_HEADER_BYTES + 4)
    originals = _snapshot(journal_dir)
    report = repair(journal_dir, backup_dir)
    assert report.changed
    assert (report.cut_segment, report.cut_offset) == (names[1], offset)
    assert report.segments_moved == names[2:]
    backed_up = {name: data for name, data in originals.items() if _segment_of(name) in names[1:]}
    assert _snapshot(backup_dir) == backed_up  # the segments and their seals
    assert (journal_dir / names[1]).read_bytes() == originals[names[1]][:offset]
    assert report.bytes_removed == sum(len(originals[n]) for n in names[1:]) - offset
    first = int(names[1].removesuffix(".log"))
    assert report.seq_next == first + 2
    assert (report.records_cut, report.seq_cut_first, report.seq_cut_last) == (
        28 - first,
        first + 2,
        29,
    )
    assert report.backup_dir == str(backup_dir)
    assert verify(journal_dir).clean
    assert _bodies(journal_dir) == list(range(first + 2))
    # The cut records stay readable in the backup, all but the damaged one.
    salvaged = [record.body["n"] for record in salvage(backup_dir)]
    assert salvaged == [n for n in range(first, 30) if n != first + 2]
    data = report.as_json()
    assert data["before"] == report.before.as_json()
    assert (data["records_cut"], data["seq_cut_first"], data["seq_cut_last"]) == (
        28 - first,
        first + 2,
        29,
    )
    assert data["backup_files"] == list(report.backup_files)


def test_repair_of_a_torn_tail_cuts_it_and_no_record(tmp_path: Path) -> None:
    journal_dir, backup_dir = tmp_path / "journal", tmp_path / "backup"
    _write(journal_dir, 4)
    segment, offset, _ = _last_frame(journal_dir)
    os.truncate(segment, offset + 9)
    report = repair(journal_dir, backup_dir)
    assert (report.changed, report.cut_segment, report.cut_offset) == (True, segment.name, offset)
    assert (report.records_cut, report.seq_cut_first, report.seq_cut_last) == (0, None, None)
    assert (report.bytes_removed, report.seq_next) == (9, 3)
    assert "\n" not in report.describe()
    assert verify(journal_dir).clean
    assert [record.body["n"] for record in salvage(backup_dir)] == [0, 1, 2]


def test_repair_moves_a_segment_with_a_foreign_header_out_whole(tmp_path: Path) -> None:
    journal_dir, backup_dir = tmp_path / "journal", tmp_path / "backup"
    _write(journal_dir, 20, segment_bytes_max=300)
    names = verify(journal_dir).segments
    (journal_dir / names[1]).write_bytes(b"not a journal segment")
    report = repair(journal_dir, backup_dir)
    assert report.segments_moved == names[1:]
    seals = [seal_name(name) for name in names[1:-1]]  # the last segment has no seal
    assert sorted(path.name for path in backup_dir.iterdir()) == sorted([*names[1:], *seals])
    assert verify(journal_dir).segments == names[:1]
    with FileJournal(journal_dir) as journal:
        assert journal.seq_next == report.seq_next == int(names[1].removesuffix(".log"))


def test_repair_of_a_healthy_journal_changes_nothing(tmp_path: Path) -> None:
    _write(tmp_path / "journal", 5)
    before = _snapshot(tmp_path / "journal")
    report = repair(tmp_path / "journal", tmp_path / "backup")
    assert not report.changed
    assert report.seq_next == 5
    assert _snapshot(tmp_path / "journal") == before
    assert not (tmp_path / "backup").exists()


def test_repair_refuses_to_overwrite_an_existing_backup(tmp_path: Path) -> None:
    journal_dir, backup_dir = tmp_path / "journal", tmp_path / "backup"
    _write(journal_dir, 4)
    segment, offset, _ = _last_frame(journal_dir)
    _flip(segment, offset - 2)
    backup_dir.mkdir()
    (backup_dir / segment.name).write_bytes(b"earlier backup")
    before = _snapshot(journal_dir)
    with pytest.raises(UsageError):
        repair(journal_dir, backup_dir)
    assert _snapshot(journal_dir) == before


# --- seals -----------------------------------------------------------------------------------


def _count_scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the name of every segment whose frames are read one by one (by open or verify).
    Opening scans the last segment first, while the seals of the others are being checked."""
    scanned: list[str] = []
    scan_segment = world.journal._file._scan_segment

    def counting(scan: Any, name: str, *args: Any) -> None:
        scanned.append(name)
        scan_segment(scan, name, *args)

    monkeypatch.setattr(world.journal._file, "_scan_segment", counting)
    return scanned


def _forge_seal(seal: Path, **changes: Any) -> None:
    """Rewrite a seal with some fields changed and a matching crc32, as a buggy writer might."""
    fields = cbor.loads(seal.read_bytes())
    del fields["crc32"]
    fields.update(changes)
    seal.write_bytes(cbor.dumps({**fields, "crc32": zlib.crc32(cbor.dumps(fields))}))


def _sealed_journal(directory: Path) -> tuple[str, ...]:
    """40 records in segments of at most 300 bytes; every segment but the last is sealed."""
    _write(directory, 40, segment_bytes_max=300)
    with FileJournal(directory, readonly=True) as journal:
        names = journal.segments
    assert len(names) > 3
    return names


def test_a_full_segment_is_sealed_with_its_count_size_index_and_digest(tmp_path: Path) -> None:
    with FileJournal(tmp_path, segment_bytes_max=40_000, **CHECKED) as journal:
        for start in range(0, 2500, 100):
            journal.append_many(("event.in", EVENT, {"n": n}) for n in range(start, start + 100))
            journal.commit()
        names = journal.segments
    assert len(names) >= 3
    assert sorted(path.name for path in tmp_path.glob("*.seal")) == [
        seal_name(name) for name in names[:-1]
    ]
    for name in names[:-1]:
        fields = cbor.loads((tmp_path / seal_name(name)).read_bytes())
        crc = fields.pop("crc32")
        assert crc == zlib.crc32(cbor.dumps(fields))
        offsets = _frame_offsets(tmp_path / name)
        index_bytes = fields.pop("index_offsets")
        assert list(struct.unpack(f"<{len(index_bytes) // 8}Q", index_bytes)) == offsets[::256]
        assert fields.pop("blake3") == blake3.blake3((tmp_path / name).read_bytes()).digest()
        assert fields == {
            "format": 2,
            "first_seq": int(name.removesuffix(".log")),
            "record_count": len(offsets),
            "size_bytes": (tmp_path / name).stat().st_size,
            "last_frame_offset": offsets[-1],
            "index_stride": 256,
        }


def test_open_takes_earlier_segments_from_their_seals_and_scans_only_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = _sealed_journal(tmp_path)
    scanned = _count_scans(monkeypatch)
    for options in ({"readonly": True}, CHECKED):
        scanned.clear()
        with FileJournal(tmp_path, **options) as journal:
            assert sorted(scanned) == [names[-1]]
            assert journal.seq_next == 40
            assert [record.body["n"] for record in journal.read(5)] == list(range(5, 40))


_BAD_SEALS: dict[str, Callable[[Path, Path], None]] = {
    "size-disagrees": lambda seal, _: _forge_seal(seal, size_bytes=300),
    "count-disagrees": lambda seal, _: _forge_seal(seal, record_count=2),
    "other-stride": lambda seal, _: _forge_seal(seal, index_stride=128),
    "another-segments-seal": lambda seal, other: seal.write_bytes(other.read_bytes()),
    "flipped-byte": lambda seal, _: _flip(seal, 40),
    "truncated": lambda seal, _: seal.write_bytes(seal.read_bytes()[:-3]),
    "empty": lambda seal, _: seal.write_bytes(b""),
}


@pytest.mark.parametrize("damage", _BAD_SEALS.values(), ids=_BAD_SEALS.keys())
def test_a_seal_that_disagrees_with_its_segment_is_ignored_and_the_segment_scanned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Callable[[Path, Path], None]
) -> None:
    names = _sealed_journal(tmp_path)
    seal = tmp_path / seal_name(names[1])
    written = seal.read_bytes()
    damage(seal, tmp_path / seal_name(names[2]))
    scanned = _count_scans(monkeypatch)
    with FileJournal(tmp_path, readonly=True) as journal:
        assert sorted(scanned) == [names[1], names[-1]]
        assert [record.body["n"] for record in journal.read()] == list(range(40))
    assert seal.read_bytes() != written  # a read-only open writes nothing
    scanned.clear()
    with FileJournal(tmp_path) as journal:  # a writable open scans it and seals it again
        assert (sorted(scanned), journal.seq_next) == ([names[1], names[-1]], 40)
    assert seal.read_bytes() == written
    scanned.clear()
    FileJournal(tmp_path, readonly=True).close()
    assert sorted(scanned) == [names[-1]]


def test_a_seal_that_disagrees_does_not_hide_damage_in_its_segment(tmp_path: Path) -> None:
    names = _sealed_journal(tmp_path)
    segment = tmp_path / names[1]
    offset = _frame_offsets(segment)[1]
    _flip(segment, offset + FRAME_HEADER_BYTES + 2)
    with segment.open("ab") as file:  # the size no longer matches the seal
        file.write(b"\x00")
    with pytest.raises(JournalCorrupt) as raised:
        FileJournal(tmp_path)
    error = raised.value
    assert (error.segment, error.offset, error.reason) == (names[1], offset, "payload_checksum")
    assert error.seq == int(names[1].removesuffix(".log")) + 1


def test_verify_checks_every_frame_of_sealed_segments_strictly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, 2, segment_bytes_max=300)
    with FileJournal(tmp_path, segment_bytes_max=300) as journal:
        # Non-canonical (a one-byte integer written in two bytes) but framed and numbered right.
        payload = encode_record(2, EVENT, "event.in", 5).replace(b"dbody\x05", b"dbody\x18\x05")
        journal._pending.append(payload)
        journal.commit()
        for n in range(3, 30):
            journal.append("event.in", EVENT, {"n": n})
            journal.commit()
        names = journal.segments
    assert (tmp_path / seal_name(names[0])).exists()
    scanned = _count_scans(monkeypatch)
    report = verify(tmp_path)
    assert sorted(scanned) == [names[0]]  # it stops at the first problem
    assert report.problem is not None
    assert (report.problem.segment, report.problem.seq) == (names[0], 2)
    assert report.problem.reason == "record_decode"
    with FileJournal(tmp_path) as lenient:
        assert lenient.seq_next == 30


def test_a_flipped_byte_in_a_sealed_segment_is_reported_by_verify_and_by_the_first_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening trusts a seal that agrees with its file's size, header and last frame without
    reading the frames between (so opening does not cost the journal's size); the damage is
    reported by ``verify`` and by any read that reaches it, never returned as a record."""
    names = _sealed_journal(tmp_path)
    first = int(names[2].removesuffix(".log"))
    offset = _frame_offsets(tmp_path / names[2])[1]
    seal_before = (tmp_path / seal_name(names[2])).read_bytes()
    _flip(tmp_path / names[2], offset + FRAME_HEADER_BYTES + 3)
    expected = (names[2], offset, first + 1, "payload_checksum")
    report = verify(tmp_path)
    assert report.problem is not None
    problem = report.problem
    assert (problem.segment, problem.offset, problem.seq, problem.reason) == expected
    scanned = _count_scans(monkeypatch)
    for options in ({"readonly": True}, {}):
        scanned.clear()
        with FileJournal(tmp_path, **options) as journal:
            assert sorted(scanned) == [names[-1]]  # only the last segment is scanned
            later = int(names[3].removesuffix(".log"))
            assert next(journal.read(later)).seq == later
            with pytest.raises(JournalCorrupt) as raised:
                list(journal.read(first))
        error = raised.value
        assert (error.segment, error.offset, error.seq, error.reason) == expected
    assert (tmp_path / seal_name(names[2])).read_bytes() == seal_before


def test_a_seal_whose_digest_disagrees_is_stale_for_verify_and_removed_by_repair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = _sealed_journal(tmp_path)
    seal = tmp_path / seal_name(names[1])
    written = seal.read_bytes()
    _forge_seal(seal, blake3=bytes(32))  # well formed, CRC right, digest of other bytes
    report = verify(tmp_path)
    assert report.ok
    assert not report.clean
    assert report.stale_seals == (names[1],)
    assert report.as_json()["stale_seals"] == [names[1]]
    assert "1 seal(s) disagree" in report.describe()
    repaired = repair(tmp_path, tmp_path.parent / "backup")
    assert repaired.changed
    assert repaired.cut_segment is None
    assert repaired.seq_next == 40
    assert "removed 1 stale seal(s); nothing cut" in repaired.describe()
    assert not seal.exists()
    assert (tmp_path.parent / "backup" / seal_name(names[1])).exists()
    scanned = _count_scans(monkeypatch)
    with FileJournal(tmp_path) as journal:  # scanned and sealed again
        assert sorted(scanned) == [names[1], names[-1]]
        assert journal.seq_next == 40
    assert seal.read_bytes() == written
    assert verify(tmp_path).clean


def test_a_byte_flipped_after_open_in_a_sealed_segment_is_caught_by_reading_it(
    tmp_path: Path,
) -> None:
    names = _sealed_journal(tmp_path)
    first = int(names[2].removesuffix(".log"))
    offset = _frame_offsets(tmp_path / names[2])[1]
    with FileJournal(tmp_path) as journal:
        _flip(tmp_path / names[2], offset + FRAME_HEADER_BYTES + 3)
        later = int(names[3].removesuffix(".log"))
        assert next(journal.read(later)).seq == later  # records past the damage still read
        with pytest.raises(JournalCorrupt) as raised:
            list(journal.read(first))
    error = raised.value
    assert (error.segment, error.offset, error.seq, error.reason) == (
        names[2],
        offset,
        first + 1,
        "payload_checksum",
    )


def _old_seal(seal: Path) -> None:
    """Rewrite a seal as the writer before digests wrote it: format 1, no blake3."""
    fields = cbor.loads(seal.read_bytes())
    del fields["crc32"], fields["blake3"]
    fields["format"] = 1
    seal.write_bytes(cbor.dumps({**fields, "crc32": zlib.crc32(cbor.dumps(fields))}))


def test_a_seal_without_a_digest_is_scanned_and_a_writable_open_seals_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = _sealed_journal(tmp_path)
    seals = {name: (tmp_path / seal_name(name)).read_bytes() for name in names[:-1]}
    for name in names[:-1]:
        _old_seal(tmp_path / seal_name(name))
    old = {name: (tmp_path / seal_name(name)).read_bytes() for name in names[:-1]}
    scanned = _count_scans(monkeypatch)
    with FileJournal(tmp_path, readonly=True) as journal:
        assert (sorted(scanned), journal.seq_next) == (list(names), 40)
    assert {name: (tmp_path / seal_name(name)).read_bytes() for name in names[:-1]} == old
    scanned.clear()
    with FileJournal(tmp_path) as journal:
        assert (sorted(scanned), journal.seq_next) == (list(names), 40)
    assert {name: (tmp_path / seal_name(name)).read_bytes() for name in names[:-1]} == seals
    scanned.clear()
    FileJournal(tmp_path, readonly=True).close()
    assert sorted(scanned) == [names[-1]]


def test_damage_under_a_seal_without_a_digest_is_found_by_the_scan(tmp_path: Path) -> None:
    names = _sealed_journal(tmp_path)
    _old_seal(tmp_path / seal_name(names[1]))
    offset = _frame_offsets(tmp_path / names[1])[2]
    _flip(tmp_path / names[1], offset + FRAME_HEADER_BYTES + 1)
    with pytest.raises(JournalCorrupt) as raised:
        FileJournal(tmp_path)
    assert (raised.value.segment, raised.value.offset) == (names[1], offset)


def test_a_journal_without_seals_opens_by_scanning_and_a_writable_open_seals_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = _sealed_journal(tmp_path)
    seals = {path.name: path.read_bytes() for path in tmp_path.glob("*.seal")}
    for name in seals:
        (tmp_path / name).unlink()
    scanned = _count_scans(monkeypatch)
    FileJournal(tmp_path, readonly=True).close()
    assert sorted(scanned) == list(names)
    assert not list(tmp_path.glob("*.seal"))
    scanned.clear()
    with FileJournal(tmp_path) as journal:
        assert (sorted(scanned), journal.seq_next) == (list(names), 40)
    assert {path.name: path.read_bytes() for path in tmp_path.glob("*.seal")} == seals
    scanned.clear()
    FileJournal(tmp_path).close()
    assert sorted(scanned) == [names[-1]]


def test_repair_backs_up_and_removes_the_seals_of_the_segments_it_cuts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal_dir, backup_dir = tmp_path / "journal", tmp_path / "backup"
    names = _sealed_journal(journal_dir)
    offset = _frame_offsets(journal_dir / names[1])[1]
    _flip(journal_dir / names[1], offset + FRAME_HEADER_BYTES + 2)
    seals = {name: (journal_dir / name).read_bytes() for name in map(seal_name, names[:-1])}
    report = repair(journal_dir, backup_dir)
    assert report.cut_segment == names[1]
    for name in map(seal_name, names[1:-1]):
        assert (backup_dir / name).read_bytes() == seals[name]
        assert str(backup_dir / name) in report.backup_files
    assert sorted(path.name for path in journal_dir.glob("*.seal")) == [seal_name(names[0])]
    scanned = _count_scans(monkeypatch)
    with FileJournal(journal_dir, segment_bytes_max=300, **CHECKED) as journal:
        assert sorted(scanned) == [names[1]]  # the cut segment is now the last
        assert journal.seq_next == report.seq_next
        for n in range(journal.seq_next, 40):
            journal.append("event.in", EVENT, {"n": n})
            journal.commit()
    scanned.clear()
    assert _bodies(journal_dir) == list(range(40))
    assert len(scanned) == 1  # the cut segment was sealed again when it rolled over
    assert (journal_dir / seal_name(names[1])).exists()


def test_creating_a_segment_removes_a_stale_seal_of_the_same_name(tmp_path: Path) -> None:
    names = _sealed_journal(tmp_path)
    for name in names[1:]:  # removed by hand, leaving the seal of names[1] behind
        (tmp_path / name).unlink()
        (tmp_path / seal_name(name)).unlink(missing_ok=True)
    stale = tmp_path / seal_name(names[1])
    stale.write_bytes(b"a seal of a segment that is gone")
    with FileJournal(tmp_path, segment_bytes_max=300, **CHECKED) as journal:
        assert journal.seq_next == int(names[1].removesuffix(".log"))
        journal.append("event.in", EVENT, {"n": journal.seq_next, "pad": b"x" * 40})
        journal.commit()
        assert journal.segments == names[:2]
    assert not stale.exists()


# --- handles ----------------------------------------------------------------------------------


def test_a_readonly_open_neither_truncates_a_torn_tail_nor_appends(tmp_path: Path) -> None:
    _write(tmp_path, 3)
    segment, offset, _ = _last_frame(tmp_path)
    os.truncate(segment, offset + 7)
    with FileJournal(tmp_path, readonly=True) as journal:
        assert journal.dropped is not None
        assert [record.seq for record in journal.read()] == [0, 1]
        with pytest.raises(UsageError):
            journal.append("event.in", EVENT, None)
    assert segment.stat().st_size == offset + 7


def test_refresh_is_for_readers(tmp_path: Path) -> None:
    with FileJournal(tmp_path) as journal, pytest.raises(UsageError):
        journal.refresh()


# --- readers ------------------------------------------------------------------------------------


def _refuse_every_operation(op: str, path: str) -> None:
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)


def test_a_readonly_open_does_no_file_operation_so_it_works_on_a_read_only_disk(
    tmp_path: Path,
) -> None:
    names = _sealed_journal(tmp_path)
    (tmp_path / seal_name(names[1])).unlink()  # a segment that a writable open would seal
    segment = tmp_path / names[-1]
    size = segment.stat().st_size
    with segment.open("ab") as file:  # a writer's frame in flight: a torn tail
        file.write(b"\x05\x00\x00")
    before = _snapshot(tmp_path)
    with fileio.fault_hook(_refuse_every_operation):
        with FileJournal(tmp_path, readonly=True, **CHECKED) as journal:
            assert journal.dropped is not None
            assert (journal.dropped.segment, journal.dropped.offset) == (names[-1], size)
            assert [record.body["n"] for record in journal.read()] == list(range(40))
            assert journal.refresh() == 40
        assert verify(tmp_path).torn_tail is not None
        with FileJournal(tmp_path / "missing", readonly=True) as empty:
            assert empty.seq_next == 0
        with pytest.raises(StorageError) as raised:
            FileJournal(tmp_path)  # a writable open has to cut the tail, and cannot
    assert (raised.value.operation, raised.value.errno_name) == ("truncate", "EROFS")
    assert raised.value.path == str(segment)
    assert _snapshot(tmp_path) == before


def test_a_reader_refreshes_to_see_what_a_live_writer_committed_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = FileJournal(tmp_path, segment_bytes_max=300, **CHECKED)
    writer.append_many(("event.in", EVENT, {"n": n}) for n in range(3))
    writer.commit()
    reader = FileJournal(tmp_path, readonly=True, **CHECKED)
    assert reader.seq_next == 3
    for n in range(3, 40):
        writer.append("event.in", EVENT, {"n": n})
        writer.commit()
    names = writer.segments
    assert len(names) > 3
    scanned = _count_scans(monkeypatch)
    assert reader.refresh() == 40
    # The segment it knew, from where it stopped, and the new last one; the rest by their seals.
    assert sorted(scanned) == [names[0], names[-1]]
    assert [record.body["n"] for record in reader.read()] == list(range(40))
    assert reader.refresh() == 40
    writer.close()
    reader.close()


def test_a_reader_takes_a_frame_in_flight_as_the_end_and_reads_it_once_written(
    tmp_path: Path,
) -> None:
    _write(tmp_path, 3)
    segment = tmp_path / segment_name(0)
    payload = encode_record(3, EVENT, "event.in", {"n": 3})
    head = struct.pack("<II", len(payload), zlib.crc32(payload))
    frame = head + zlib.crc32(head).to_bytes(4, "little") + payload
    with segment.open("ab") as file:
        file.write(frame[:10])
    with FileJournal(tmp_path, readonly=True, **CHECKED) as reader:
        assert reader.seq_next == 3
        assert reader.dropped is not None
        assert reader.dropped.reason == "short_header"
        with segment.open("ab") as file:
            file.write(frame[10:])
        assert reader.refresh() == 4
        assert reader.dropped is None
        assert [record.body for record in reader.read(3)] == [{"n": 3}]


def test_a_reader_that_saw_a_batch_the_writer_rolled_back_rescans_on_refresh(
    tmp_path: Path,
) -> None:
    _write(tmp_path, 3)
    with FileJournal(tmp_path) as writer, FileJournal(tmp_path, readonly=True) as reader:
        seen: list[int] = []

        def refresh_then_fail(op: str, path: str) -> None:
            if op == "fdatasync":
                seen.append(reader.refresh())  # the batch is written, not yet synced
                raise OSError(errno.EIO, os.strerror(errno.EIO), path)

        writer.append_many(("event.in", EVENT, {"n": n}) for n in range(3, 6))
        with fileio.fault_hook(refresh_then_fail), pytest.raises(StorageError):
            writer.commit()
        assert seen == [6]
        assert reader.refresh() == 3
        assert [record.body["n"] for record in reader.read()] == [0, 1, 2]


def test_a_segment_that_vanishes_under_a_reader_is_a_storage_error(tmp_path: Path) -> None:
    names = _sealed_journal(tmp_path)
    with FileJournal(tmp_path, readonly=True) as journal:
        (tmp_path / names[1]).unlink()
        with pytest.raises(StorageError) as raised:
            list(journal.read())
    error = raised.value
    assert (error.path, error.operation, error.errno_name) == (
        str(tmp_path / names[1]),
        "read",
        "ENOENT",
    )


def test_a_journal_path_that_is_a_file_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "journal").write_bytes(b"")
    with pytest.raises(StorageError) as raised:
        FileJournal(tmp_path / "journal")
    assert (raised.value.operation, raised.value.errno_name) == ("mkdir", "EEXIST")


# --- syncs and modes ----------------------------------------------------------------------------


def _recording() -> tuple[list[tuple[str, str]], Callable[[str, str], None]]:
    ops: list[tuple[str, str]] = []
    return ops, lambda op, path: ops.append((op, path))


@pytest.mark.parametrize("count", [1, 50, 1000])
def test_a_commit_into_one_segment_syncs_exactly_once(tmp_path: Path, count: int) -> None:
    with FileJournal(tmp_path) as journal:
        journal.append("event.in", EVENT, {"n": 0})
        journal.commit()  # creates the segment
        journal.append_many(("event.in", EVENT, {"n": n}) for n in range(1, count + 1))
        ops, hook = _recording()
        with fileio.fault_hook(hook):
            journal.commit()
            journal.commit()  # nothing pending: nothing to do
    assert [op for op, _ in ops].count("fdatasync") == 1
    assert [op for op, _ in ops if op.startswith(("fsync", "sync"))] == []


def test_a_commit_syncs_the_segment_after_writing_it(tmp_path: Path) -> None:
    """Fails if commit skips the sync: the records would not be durable when it returns."""
    with FileJournal(tmp_path) as journal:
        ops, hook = _recording()
        with fileio.fault_hook(hook):
            journal.append_many(("event.in", EVENT, {"n": n}) for n in range(5))
            journal.commit()
            segment = str(tmp_path / journal.segments[-1])
            written = ops.index(("write", segment))
            assert ("fdatasync", segment) in ops[written + 1 :]
            del ops[:]
            journal.append("event.in", EVENT, {"n": 5})
            journal.commit()
    assert ops == [("write", segment), ("fdatasync", segment)]


@pytest.fixture
def no_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("no_umask")
def test_journal_files_are_0600_and_directories_0700_whatever_the_umask(tmp_path: Path) -> None:
    journal_dir, backup_dir = tmp_path / "journal", tmp_path / "backup"
    _write(journal_dir, 20, segment_bytes_max=300)
    names = verify(journal_dir).segments
    _flip(journal_dir / names[1], _frame_offsets(journal_dir / names[1])[1] + FRAME_HEADER_BYTES)
    repair(journal_dir, backup_dir)
    for directory in (journal_dir, backup_dir):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        for path in directory.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
