"""The cell history index (``world.history.index``): time travel reads one cell's records, not the
journal, and a missing, damaged, foreign or behind index never changes an answer."""

from __future__ import annotations

import errno
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import blake3
import pytest

from kernel import OWED_KINDS, Kernel
from kernel.cells import MemoryCellStore
from kernel.journal import JournalRecord, MemoryJournal
from world import World
from world import _fileio as fileio
from world._runner import HostRunner
from world.history import _timetravel as timetravel
from world.history import index as history
from world.journal import FileJournal

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

KEYS = ("a", "b", "c")


def build(path: Path, rounds: int = 3, per_round: int = 150) -> list[tuple[int, dict[str, Any]]]:
    """A counter world of three cells; after each round (sends, run, checkpoint: a flush of the
    index) the seq and the live states. Cell "a" gets most events, so it passes STATE_EVERY."""
    seen: list[tuple[int, dict[str, Any]]] = []
    with World.create(path, COUNTER_AIR) as world:
        for r in range(rounds):
            world.send_many(
                (EVENT, add(KEYS[0] if n % 5 else KEYS[1 + (n // 5) % 2], r + n))
                for n in range(per_round)
            )
            world.run_until_idle()
            world.snapshot()
            seen.append((world.journal.seq_next - 1, {k: world.state(COUNTER, k) for k in KEYS}))
    return seen


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, list[tuple[int, dict[str, Any]]]]:
    path = tmp_path_factory.mktemp("history") / "w"
    return path, build(path)


def _copy(built: tuple[Path, Any], tmp_path: Path) -> Path:
    target = tmp_path / "w"
    shutil.copytree(built[0], target)
    return target


class _Counting:
    """Counts the records the journal hands out and the reducer calls made."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.records = 0
        self.runs = 0
        read, run = FileJournal.read, HostRunner.run
        counting = self

        def counted_read(
            journal: FileJournal, *args: Any, **kwargs: Any
        ) -> Iterator[JournalRecord]:
            for record in read(journal, *args, **kwargs):
                counting.records += 1
                yield record

        def counted_run(runner: HostRunner, *args: Any) -> bytes:
            counting.runs += 1
            return run(runner, *args)

        monkeypatch.setattr(FileJournal, "read", counted_read)
        monkeypatch.setattr(HostRunner, "run", counted_run)


def _replayed_without_index(path: Path, key: str, seq: int) -> Any:
    """The state by the journal-scan path (the index switched off), as the oracle."""
    original = history.read_cell
    try:
        timetravel.read_cell = lambda *args: None  # type: ignore[assignment]
        return timetravel.cell_at(path, COUNTER, key, seq).state
    finally:
        timetravel.read_cell = original


def test_the_index_is_written_at_checkpoints_and_covers_the_journal(built: Any) -> None:
    path, seen = built
    ranges = history._load_ranges(path / "cache" / "history")
    assert ranges is not None
    assert ranges.ranges[-1][1] == seen[-1][0] + 1  # up to the last committed record
    assert sum(ranges.sizes) > 0


def test_cell_at_reads_only_the_cells_records_and_starts_from_a_stored_state(
    built: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, seen = built
    counting = _Counting(monkeypatch)
    at = timetravel.cell_at(path, COUNTER, "a", seen[-1][0])
    assert at.state == seen[-1][1]["a"]
    # The last flush stored "a"'s state after its last step: nothing to re-execute, and a
    # handful of records read (its step, to check the state's hash) out of ~900.
    assert counting.runs == 0
    assert counting.records < 10
    counting.records = 0
    middle = seen[1][0] - 40
    at = timetravel.cell_at(path, COUNTER, "a", middle)
    runs, records = counting.runs, counting.records
    assert at.state == _replayed_without_index(path, "a", middle)
    # From the state stored at the first flush: only the steps of "a" after it, each read
    # with its source, not the ~600 records before the position.
    steps_since = 120 - 16  # "a" takes 4 events in 5; 20 events before the round's end
    assert 0 < runs <= steps_since
    assert records <= 3 * runs + 10


def _replayed_at_every_position(path: Path) -> list[tuple[int, dict[str, bytes | None]]]:
    """The oracle: one replay from genesis; for each position, where its tick group ends and
    every key's state (CBOR) after it."""
    with World.open(path, readonly=True) as world:
        records = list(world.journal.read(0))
        runner = HostRunner(world.air, path / "cache", readonly=True)
        kernel = Kernel(world.air, MemoryJournal(), MemoryCellStore(), runner)
        keys = {key: timetravel.cell_key(world.air, COUNTER, key).key_cbor for key in KEYS}
        after = []
        for record in records:
            kernel.apply(record)
            after.append({key: kernel.state_of(COUNTER, keys[key]) for key in KEYS})
    ends = list(range(len(records)))
    for seq in reversed(ends[:-1]):  # a position inside a tick group means after the group
        if records[seq + 1].kind in OWED_KINDS:
            ends[seq] = ends[seq + 1]
    return [(end, after[end]) for end in ends]


def _stored_state_seq(path: Path, key: str) -> int | None:
    """The last step after which the index stored ``key``'s state."""
    with World.open(path, readonly=True) as world:
        cell = timetravel.cell_key(world.air, COUNTER, key).cell_id
        genesis = history.genesis_digest(next(iter(world.journal.read(0))))
        seq_next = world.journal.seq_next
    found = history.read_cell(path, cell, seq_next, genesis, seq_next)
    assert found is not None
    return found.state_seq


def test_every_position_agrees_with_a_full_replay_with_and_without_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A world small enough to ask at every position (61 records, 3 flushes), with the index
    # storing a state every 12 steps: "a" (8 steps a round) gets one at the second flush,
    # "b" and "c" (one step a round) none, so answers start from a stored state, from the
    # cell's first step, and from the journal alone (the copy without an index).
    monkeypatch.setattr(history, "STATE_EVERY", 12)
    path, bare = tmp_path / "w", tmp_path / "bare"
    build(path, rounds=3, per_round=10)
    shutil.copytree(path, bare)
    shutil.rmtree(bare / "cache" / "history")
    assert _stored_state_seq(path, "a") is not None
    assert _stored_state_seq(path, "b") is None
    replayed = _replayed_at_every_position(path)
    assert len(replayed) == 61
    for seq, (seq_through, states) in enumerate(replayed):
        for key in KEYS:
            for world in (path, bare):
                at = timetravel.cell_at(world, COUNTER, key, seq)
                want = (states[key], seq_through)
                assert (at.state_cbor, at.seq_through) == want, (world.name, seq, key)


def test_records_after_the_last_flush_are_read_from_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "w"
    build(path, rounds=1)
    with World.open(path) as world:  # sends and steps, then no checkpoint: a crash
        world.send_many((EVENT, add("a", 1000 + n)) for n in range(5))
        world.run_until_idle()
        world.commit()
        expected, last = world.state(COUNTER, "a"), world.journal.seq_next - 1
        world._history = None
        world.stale = "a test: close writes no checkpoint, as after a crash"  # a stale world closes without a checkpoint
    assert timetravel.cell_at(path, COUNTER, "a", last).state == expected


@pytest.mark.parametrize(
    "damage",
    ["missing", "flipped", "truncated", "other-journal", "ahead-of-journal", "garbage-ranges"],
)
def test_a_bad_index_is_ignored_and_the_answer_is_the_same(
    built: Any, tmp_path: Path, damage: str
) -> None:
    _path, seen = built
    target = _copy(built, tmp_path)
    folder = target / "cache" / "history"
    shard = max(folder.glob("*.log"), key=lambda p: p.stat().st_size)
    ranges = history._load_ranges(folder)
    assert ranges is not None
    if damage == "missing":
        shard.unlink()
    elif damage == "flipped":
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0x40
        shard.write_bytes(bytes(data))
    elif damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:-7])
    elif damage == "other-journal":
        ranges.genesis = bytes(32)
        (folder / "ranges.cbor").write_bytes(ranges.encode())
    elif damage == "ahead-of-journal":
        ranges.ranges[-1][1] += 1000
        (folder / "ranges.cbor").write_bytes(ranges.encode())
    else:
        (folder / "ranges.cbor").write_bytes(b"\xff not cbor")
    for seq, states in seen:
        for key in KEYS:
            assert timetravel.cell_at(target, COUNTER, key, seq).state == states[key]


def test_bytes_past_the_committed_size_are_ignored_and_cut_by_the_next_flush(
    built: Any, tmp_path: Path
) -> None:
    """A flush that crashed after appending to a shard but before its commit."""
    _path, seen = built
    target = _copy(built, tmp_path)
    folder = target / "cache" / "history"
    shard = max(folder.glob("*.log"), key=lambda p: p.stat().st_size)
    committed = shard.read_bytes()
    with shard.open("ab") as file:
        file.write(b"WHB1 half a batch")
    assert timetravel.cell_at(target, COUNTER, "a", seen[-1][0]).state == seen[-1][1]["a"]
    with World.open(target) as world:
        world.send_many((EVENT, add(k, 1)) for k in KEYS * 30)
        world.run_until_idle()
        world.snapshot()
        expected, last = world.state(COUNTER, "a"), world.journal.seq_next - 1
    assert shard.read_bytes().startswith(committed)
    assert b"half a batch" not in shard.read_bytes()
    assert history.read_cell(target, _cell("a"), last + 1, *_journal_id(target)) is not None
    assert timetravel.cell_at(target, COUNTER, "a", last).state == expected


def test_a_writer_on_a_cut_journal_starts_a_new_index(built: Any, tmp_path: Path) -> None:
    _path, seen = built
    target = _copy(built, tmp_path)
    folder = target / "cache" / "history"
    ranges = history._load_ranges(folder)
    assert ranges is not None
    ranges.ranges[-1][1] += 10  # as if a repair cut the journal behind the index
    (folder / "ranges.cbor").write_bytes(ranges.encode())
    with World.open(target) as world:
        world.send_many((EVENT, add("b", 7)) for _ in range(3))
        world.run_until_idle()
        world.snapshot()
        start = seen[-1][0] + 1
    fresh = history._load_ranges(folder)
    assert fresh is not None
    assert fresh.ranges[0][0] == start  # covers only this session
    for seq, states in seen:
        assert timetravel.cell_at(target, COUNTER, "b", seq).state == states["b"]


@pytest.mark.parametrize("error", [errno.EIO, errno.ENOSPC])
def test_a_failing_index_write_is_a_notice_and_changes_no_answer(
    built: Any, tmp_path: Path, error: int
) -> None:
    target = _copy(built, tmp_path)
    operations: list[tuple[str, str]] = []

    def note(op: str, where: Any) -> None:
        if "history" in str(where):
            operations.append((op, str(where)))

    with fileio.fault_hook(note), World.open(target) as world:
        world.send_many((EVENT, add("a", 1)) for _ in range(3))
        world.run_until_idle()
        world.snapshot()
    assert operations, "a flush writes through world._fileio"
    for index in range(len(operations)):
        copy = tmp_path / f"c{index}"
        shutil.copytree(target, copy)
        count = 0

        def fail(op: str, where: Any, at: int = index) -> None:
            nonlocal count
            if "history" in str(where):
                count += 1
                if count == at + 1:
                    raise OSError(error, "injected")

        with fileio.fault_hook(fail), World.open(copy) as world:
            world.send_many((EVENT, add("a", 2)) for _ in range(3))
            world.run_until_idle()
            world.snapshot()
            notices = list(world.notices)
            expected, last = world.state(COUNTER, "a"), world.journal.seq_next - 1
        assert any("cell history index not written" in n for n in notices), (index, notices)
        assert timetravel.cell_at(copy, COUNTER, "a", last).state == expected
        with World.open(copy) as world:  # a later session writes the index again
            world.send_many((EVENT, add("a", 3)) for _ in range(2))
            world.run_until_idle()
            world.snapshot()
            expected, last = world.state(COUNTER, "a"), world.journal.seq_next - 1
        assert timetravel.cell_at(copy, COUNTER, "a", last).state == expected


def test_flush_of_a_world_with_no_cells_writes_no_shard(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        world.snapshot()
    folder = tmp_path / "w" / "cache" / "history"
    assert not list(folder.glob("*.log"))


def _cell(key: str) -> str:
    from air import cbor
    from kernel.cells import key_hash
    from kernel.subjects import cell_subject

    return history.cell_id(cell_subject(COUNTER, key_hash(cbor.dumps(key))))


def _journal_id(path: Path) -> tuple[bytes, int]:
    with FileJournal(path / "journal", readonly=True) as journal:
        first = next(iter(journal.read(0)))
        return history.genesis_digest(first), journal.seq_next


def test_cells_are_named_by_key_hash_and_reducer_and_an_odd_id_by_a_digest() -> None:
    key_hash = bytes(range(32))
    counter = history.cell_id(f"/world/cell/demo/Counter@1/{key_hash.hex()}/step")
    other = history.cell_id(f"/world/cell/demo/Other@1/{key_hash.hex()}/step")
    named = history._cell_hash(counter)
    assert len(named) == 8
    assert named == history._cell_hash(counter)
    # two reducers' cells of one key: two names, so neither is handed the other's state
    assert history._cell_hash(other) != named
    # within a reducer, the name is the key hash's prefix under one mask
    second = history.cell_id(f"/world/cell/demo/Counter@1/{bytes(32).hex()}/step")
    mask = int.from_bytes(named) ^ int.from_bytes(key_hash[:8])
    assert int.from_bytes(history._cell_hash(second)) == mask
    odd = history._cell_hash("/world/cell/x/zz")
    assert odd == blake3.blake3(b"/world/cell/x/zz").digest(8)


def test_the_writer_counts_steps_for_a_bounded_number_of_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history, "SINCE_STATE_CELLS_MAX", 3)
    monkeypatch.setattr(history, "STATE_EVERY", 2)
    path = tmp_path / "w"
    with World.create(path, COUNTER_AIR) as world:
        for round_ in range(4):  # six new cells a round: without the bound, 6, 12, 18, 24
            world.send_many((EVENT, add(f"c{round_}-{n}", 1)) for n in range(6) for _ in range(2))
            world.run_until_idle()
            world.snapshot()
            writer = world._history
            assert writer is not None
            assert len(writer._since_state) <= 3 + 6  # cleared once past the bound
        expected, last = world.state(COUNTER, "c3-5"), world.journal.seq_next - 1
    assert timetravel.cell_at(path, COUNTER, "c3-5", last).state == expected


def test_two_reducers_cells_of_one_key_each_start_from_their_own_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both counters take every event for key "a"; each one's ``cell_at`` is served from the
    state stored for it, not handed the other's (which ``timetravel`` would reject, and then
    re-execute the cell from its first step)."""
    air = tmp_path / "air"
    air.mkdir()
    shutil.copy(COUNTER_AIR / "schemas.air.json", air)
    wasm = (COUNTER_AIR / "../../reducers/counter/counter.wasm").resolve().read_bytes()
    (air / "counter.wasm").write_bytes(wasm)
    (air / "twin.wasm").write_bytes(wasm + b"\x00\x05\x04twin")  # a custom section: its own module
    counter, routed = json.loads((COUNTER_AIR / "counter.air.json").read_text())
    counter["wasm"] = "counter.wasm"
    twin = {**counter, "name": "demo/Twin@1", "wasm": "twin.wasm"}
    routes = routed["routing"]["events"]
    routes.append({**routes[0], "reducer": "demo/Twin@1"})
    (air / "counter.air.json").write_text(json.dumps([counter, twin, routed]))
    path = tmp_path / "w"
    with World.create(path, air) as world:
        world.send_many((EVENT, add("a", n)) for n in range(2 * history.STATE_EVERY))
        world.run_until_idle()
        world.snapshot()
        last = world.journal.seq_next - 1
        live = {name: world.state(name, "a") for name in (COUNTER, "demo/Twin@1")}
    counting = _Counting(monkeypatch)
    for name, state in live.items():
        assert timetravel.cell_at(path, name, "a", last).state == state
    assert counting.runs == 0


def test_a_group_of_one_seq_is_the_general_layout() -> None:
    """The one-seq shortcut of ``_group`` writes the bytes the general layout does, and reads
    back as such."""
    name = bytes(range(8))
    for state in (b"", b"\xa1\x61n\x01"):
        one = history._group(name, [2**40 + 7], state)
        assert one == (
            history._GROUP.pack(name, 1, len(state)) + (2**40 + 7).to_bytes(8, "little") + state
        )
        assert list(history._groups(one)) == [(name, history._GROUP.size, 1, len(state))]
