"""``world cells tail`` (and the ``cells.tail`` operation every front end calls) reads a cell's
history through the history index (``CellHistory.indexed``): its own records where the index
lists them, the inputs its steps consumed, every record of what the index does not cover and
after the last input consumed. The entries are those a read of every record gives, in the same
order, from any position: with inputs still queued, across segments, with the index behind the
journal, missing or damaged, and across an upgrade (which reads every record)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from air import cbor
from cli.main import app
from world import World
from world.gov import apply, propose
from world.history import CellHistory, cell_key
from world.journal import FileJournal

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

V2_AIR = Path(__file__).resolve().parents[2] / "fixtures" / "counter_v2_air"
KEYS = ["k0", "k1", "k2", "quiet"]


@pytest.fixture
def small_segments() -> Iterator[None]:
    defaults = FileJournal.__init__.__kwdefaults__
    assert defaults is not None
    was = defaults["segment_bytes_max"]
    defaults["segment_bytes_max"] = 2_000  # every World.open's journal: many segments
    yield
    defaults["segment_bytes_max"] = was


def _build(path: Path) -> World:
    """A world left open (its index flushed at the snapshot, behind the journal after it):
    cells stepped, a quiet cell stepped once early, then more stepped, then inputs queued."""
    world = World.create(path, COUNTER_AIR)
    world.send(EVENT, add("quiet", 1))
    world.run_until_idle()
    world.send_many([(EVENT, add(f"k{n % 3}", n)) for n in range(40)])
    world.run_until_idle()
    world.snapshot()  # the index covers up to here
    world.send_many([(EVENT, add(f"k{n % 2}", n)) for n in range(10)])
    world.run_until_idle()
    world.send_many([(EVENT, add(f"k{n % 3}", n)) for n in range(5)])  # queued, not stepped
    return world


def _entries(entries: Iterator) -> list[tuple[str, int, int | None]]:
    return [(e.role, e.record.seq, None if e.source is None else e.source.seq) for e in entries]


def _both(world: Path, key: str, from_seq: int) -> tuple[list, list | None]:
    """The cell's entries from ``from_seq``: read from every record, and through the index
    (None: it does not serve)."""
    with World.open(world, readonly=True) as opened:
        air = opened.air
    where = cell_key(air, COUNTER, key)
    reader = FileJournal(world / "journal", readonly=True)
    try:
        whole = _entries(CellHistory(air, where).read(reader, from_seq))
        indexed = CellHistory(air, where).indexed(world, reader, from_seq, reader.seq_next)
        return whole, None if indexed is None else _entries(indexed)
    finally:
        reader.close()


def test_the_indexed_history_is_the_whole_reads_from_every_position(
    tmp_path: Path, small_segments: None
) -> None:
    path = tmp_path / "w"
    writer = _build(path)
    try:
        end = writer.journal.seq_next_committed
        assert len(list((path / "journal").glob("*.log"))) > 5
        for key in KEYS:
            for from_seq in (0, 1, 2, 30, 60, end - 20, end - 5, end - 1, end):
                whole, indexed = _both(path, key, from_seq)
                assert indexed is not None, (key, from_seq)
                assert indexed == whole, (key, from_seq)
        whole, _ = _both(path, "k1", 0)
        assert ("input", end - 1, None) in whole or ("input", end - 2, None) in whole  # queued
    finally:
        writer.close()


@pytest.mark.parametrize("damage", ["missing", "ranges damaged", "shard damaged"])
def test_without_a_usable_index_every_record_is_read_and_the_tail_is_the_same(
    tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "w"
    _build(path).close()
    before = {key: _tail(path, key) for key in KEYS}
    folder = path / "cache" / "history"
    if damage == "missing":
        shutil.rmtree(folder)
    elif damage == "ranges damaged":
        (folder / "ranges.cbor").write_bytes(b"\xa1\x01")
    else:
        shard = max(folder.glob("*.log"), key=lambda p: p.stat().st_size)
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    served = []
    for key in KEYS:
        whole, indexed = _both(path, key, 0)
        assert indexed in (None, whole)  # a shard damaged: the cells of the others are served
        served.append(indexed is not None)
        assert _tail(path, key) == before[key]
    assert not all(served)
    assert damage == "shard damaged" or not any(served)


def test_across_an_upgrade_every_record_is_read_and_the_tail_is_the_same(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add(f"k{n % 2}", n)) for n in range(6)])
        world.run_until_idle()
        made, _diff = propose(world, V2_AIR)
        apply(world, made.id)
        world.send_many([(EVENT, add(f"k{n % 2}", n)) for n in range(6)])
        world.run_until_idle()
    reader = FileJournal(path / "journal", readonly=True)
    with World.open(path, readonly=True) as world:
        history = CellHistory(world.air, cell_key(world.air, "demo/Counter@2", "k0"))
        assert history.indexed(path, reader, 0, reader.seq_next) is None
    reader.close()
    shown = _tail(path, "k0", reducer="demo/Counter@2")
    assert [line["role"] for line in shown].count("step") == 3  # the new era's steps


def _tail(path: Path, key: str, reducer: str = COUNTER) -> list[dict]:
    done = CliRunner().invoke(app, ["cells", "tail", str(path), reducer, json.dumps(key), "--json"])
    assert done.exit_code == 0, done.output
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_stretch_the_index_missed_in_the_middle_is_read_from_the_journal(tmp_path: Path) -> None:
    """A crash before the index's flush: the records since the last flush are re-executed at the
    next open and fall in a gap between the index's ranges, which is read from the journal."""
    live, crashed = tmp_path / "live", tmp_path / "w"
    world = World.create(live, COUNTER_AIR)
    world.send_many([(EVENT, add(f"k{n % 3}", n)) for n in range(12)])
    world.run_until_idle()
    world.snapshot()  # the index covers up to here
    world.send_many([(EVENT, add(f"k{n % 2}", n)) for n in range(8)])
    world.run_until_idle()  # journaled, not in the index
    shutil.copytree(live, crashed)  # what a kill -9 now leaves
    world.close()
    with World.open(crashed) as world:
        world.send_many([(EVENT, add(f"k{n % 3}", n)) for n in range(6)])
        world.run_until_idle()
    ranges = cbor.loads((crashed / "cache" / "history" / "ranges.cbor").read_bytes())["ranges"]
    assert len(ranges) == 2  # a gap between them
    for key in KEYS[:3]:
        for from_seq in (0, ranges[0][1] - 1, ranges[0][1] + 3, ranges[1][0] + 1):
            whole, indexed = _both(crashed, key, from_seq)
            assert indexed is not None
            assert indexed == whole, (key, from_seq)


def test_the_cells_tail_operation_pages_the_same_entries_through_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cells.tail`` (what a served world, HTTP and the cluster answer) reads through the
    index too, in pages of at most ``limit`` entries, and gives the lines a direct tail prints."""
    from world import ops
    from world.ops import CellTail

    path = tmp_path / "w"
    _build(path).close()
    direct_of = {key: _tail(path, key) for key in KEYS}

    def every_record(*_args: object) -> None:
        raise AssertionError("read every record")

    monkeypatch.setattr(CellHistory, "read", every_record)  # the index serves every page
    for key, direct in direct_of.items():
        with ops.open(path, readonly=True) as handle:
            for limit in (None, 3):
                args = CellTail(reducer=COUNTER, key=key, limit=limit)
                paged = [e for page in handle.pages("cells.tail", args) for e in page.entries]
                assert paged == direct, (key, limit)
