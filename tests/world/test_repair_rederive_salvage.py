"""Repair without an archive keeps every record it can prove (issue 35): a damaged record the
kernel writes is re-derived by re-executing the journal before it, and kept because the
segment then has its seal's blake3; a damaged input (an outside ``event.in``) cannot be
re-derived, so the repair stops there, names it, and keeps the records after it in the backup.
A world of a few thousand events with small segments stands for the 200,000-event one."""

from __future__ import annotations

import random
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import JournalCorrupt
from kernel.journal import decode_record_fast
from world import World
from world._repair import check_world, repair_world
from world.history import verify_world
from world.journal import FileJournal, salvage

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

EVENTS = 2000


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A world of ``EVENTS`` events, each stepped, in segments of ~64 KiB."""
    path = tmp_path_factory.mktemp("salvage") / "w"
    with World.create(path, COUNTER_AIR) as world:
        world.journal.close()
        world.journal = FileJournal(path / "journal", segment_bytes_max=64 * 1024)
        world.kernel.journal = world.journal
        world.kernel.recorder.journal = world.journal
        for n in range(EVENTS):
            world.send(EVENT, add(f"k{n % 7}", n + 1))
            world.step(1)
    return path


@pytest.fixture
def w(built: Path, tmp_path: Path) -> Path:
    shutil.copytree(built, tmp_path / "w")
    return tmp_path / "w"


def _records(world: Path) -> list[dict[str, Any]]:
    with FileJournal(world / "journal", readonly=True) as journal:
        return [record.as_map() for record in journal.read(0)]


def _states(world: Path) -> list[Any]:
    with World.open(world, readonly=True) as opened:
        return [opened.state(COUNTER, f"k{n}") for n in range(7)]


def _frame_of(world: Path, kind: str) -> tuple[Path, int, int, int]:
    """``(segment, frame offset, payload length, seq)`` of a record of ``kind`` in the middle
    of the second sealed segment."""
    segment = sorted((world / "journal").glob("*.log"))[2]
    data = segment.read_bytes()
    offset, found = 16, []
    while offset + 12 <= len(data):
        length = struct.unpack_from("<I", data, offset)[0]
        record = decode_record_fast(data[offset + 12 : offset + 12 + length])
        if record.kind == kind:
            found.append((segment, offset, length, record.seq))
        offset += 12 + length
    return found[len(found) // 2]


def _smash(segment: Path, start: int, count: int) -> None:
    """Zero ``count`` bytes from ``start``: more than one byte, so no one-byte mend undoes it."""
    data = bytearray(segment.read_bytes())
    data[start : start + count] = bytes(count)
    segment.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["payload", "header"])
def test_a_damaged_step_in_a_sealed_segment_is_re_derived_and_nothing_is_cut(
    w: Path, where: str
) -> None:
    records, states = _records(w), _states(w)
    segment, offset, length, seq = _frame_of(w, "step")
    _smash(segment, offset + (12 + length // 2 if where == "payload" else 0), 8)
    assert check_world(w).journal.problem is not None

    fixed = repair_world(w, w.parent / "backup")

    assert fixed.journal is None, "nothing was cut"
    assert len(fixed.mended) == 1
    assert f"seq {seq}..{seq} re-derived" in fixed.mended[0].source
    assert _records(w) == records
    assert _states(w) == states
    assert check_world(w).clean
    assert verify_world(w).ok


def test_a_damaged_input_is_lost_and_named_and_the_records_after_it_stay_in_the_backup(
    w: Path,
) -> None:
    records = _records(w)
    segment, offset, length, seq = _frame_of(w, "event.in")
    _smash(segment, offset + 12 + length // 2, 8)

    fixed = repair_world(w, w.parent / "backup")

    assert fixed.mended == ()
    assert fixed.journal is not None
    assert fixed.journal.seq_cut_first == seq
    assert fixed.journal.seq_next == seq
    assert f"lost: seq {seq} ({segment.name} at offset {offset}" in fixed.describe()
    assert fixed.lost_kind == "event.in"
    assert "kind event.in: not a record re-execution gives, so an input" in fixed.describe()
    assert fixed.events_cut == sum(r["kind"] == "event.in" for r in records[seq + 1 :])
    assert _records(w) == records[:seq]
    kept = {record.seq: record.as_map() for record in salvage(w.parent / "backup")}
    assert seq not in kept
    assert all(kept[n] == records[n] for n in range(seq + 1, len(records)))
    assert check_world(w).clean
    with World.open(w) as world:
        world.send(EVENT, add("k0", 1))
        world.run_until_idle()
    assert verify_world(w).ok


def test_a_re_derived_step_and_a_flipped_byte_later_in_its_segment_are_put_back_together(
    w: Path,
) -> None:
    records = _records(w)
    segment, offset, length, _seq = _frame_of(w, "step")
    _smash(segment, offset + 12 + length // 2, 8)
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0x01  # the segment's last frame: mended by the seal, in the same file
    segment.write_bytes(bytes(data))

    fixed = repair_world(w, w.parent / "backup")

    assert fixed.journal is None, "nothing was cut"
    assert len(fixed.mended) == 1
    assert _records(w) == records
    assert check_world(w).clean


def test_random_damage_to_sealed_segments_is_put_back_or_cut_never_invented(
    tmp_path: Path,
) -> None:
    """Forty seeded damages (one to three runs of 1 to 8 random bytes in one sealed segment):
    repair always leaves a clean journal whose records are the original ones, all of them or a
    prefix; never a record that was not there (or, for a lost genesis record, refuses)."""
    base = tmp_path / "base"
    with World.create(base, COUNTER_AIR) as world:
        world.journal.close()
        world.journal = FileJournal(base / "journal", segment_bytes_max=600)
        world.kernel.journal = world.kernel.recorder.journal = world.journal
        for n in range(16):
            world.send(EVENT, add(f"k{n % 3}", n + 1))
            world.step(1)
    records = _records(base)
    rng = random.Random(35)
    put_back = 0
    for case in range(40):
        w = tmp_path / f"w{case}"
        shutil.copytree(base, w)
        segment = rng.choice(sorted((w / "journal").glob("*.log"))[:-1])
        data = bytearray(segment.read_bytes())
        for _ in range(rng.choice([1, 1, 2, 3])):
            start = rng.randrange(len(data))
            for position in range(start, min(len(data), start + rng.choice([1, 1, 4, 8]))):
                data[position] = rng.randrange(256)
        segment.write_bytes(bytes(data))
        try:
            fixed = repair_world(w, tmp_path / f"backup{case}")
        except JournalCorrupt:  # the genesis record itself lost: only a copy can help
            assert segment.name == "00000000000000000000.log", case
            continue
        assert check_world(w).journal.clean, case
        after = _records(w)
        assert after == records[: len(after)], case
        put_back += fixed.journal is None
    assert put_back >= 10, "most single flips are put back"
