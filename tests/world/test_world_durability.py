"""Durability and replay on real files: replay from genesis reproduces bytes, changed records are
caught at their seq, torn tails are dropped, and kill -9 at every commit loses nothing acknowledged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from air import cbor
from kernel import Kernel
from kernel._core import ReplayDivergence
from kernel.errors import JournalCorrupt
from kernel.journal import JournalRecord
from world import CheckpointAhead, World
from world.history import rebuild_world, verify_world

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

HERE = Path(__file__).resolve().parents[1]


def _busy_world(path: Path) -> None:
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add(f"k{i % 7}", i)) for i in range(40)])
        world.step(15)
        world.send(EVENT, {"key": "k3", "op": "Clear"})
        world.send_many([(EVENT, add("late", 1))] * 5)
        world.run_until_idle()


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_replay_from_genesis_reproduces_journal_cell_files_and_index_bytes(tmp_path: Path) -> None:
    _busy_world(tmp_path / "a")
    rebuild_world(tmp_path / "a", tmp_path / "b")
    a_journal, b_journal = _files(tmp_path / "a" / "journal"), _files(tmp_path / "b" / "journal")
    assert a_journal == b_journal
    a_state, b_state = _files(tmp_path / "a" / "state"), _files(tmp_path / "b" / "state")
    assert a_state == b_state
    assert "reducers/checkpoint.cbor" in a_state
    assert _files(tmp_path / "a" / "cas") == _files(tmp_path / "b" / "cas")  # shards, index


def test_replay_verify_passes_on_an_honest_world(tmp_path: Path) -> None:
    _busy_world(tmp_path / "w")
    report = verify_world(tmp_path / "w")
    assert report.ok
    assert report.steps == 46


def test_reopening_after_snapshot_and_tail_gives_the_same_state_as_one_long_run(
    tmp_path: Path,
) -> None:
    _busy_world(tmp_path / "a")
    with World.create(tmp_path / "b", COUNTER_AIR) as world:
        world.send_many([(EVENT, add(f"k{i % 7}", i)) for i in range(40)])
        world.step(15)
        world.snapshot()
    with World.open(tmp_path / "b") as world:  # checkpoint + tail
        world.send(EVENT, {"key": "k3", "op": "Clear"})
        world.send_many([(EVENT, add("late", 1))] * 5)
        world.run_until_idle()
    with World.open(tmp_path / "a") as a, World.open(tmp_path / "b") as b:
        assert [(v.key, v.state) for v in a.cells(COUNTER)] == [
            (v.key, v.state) for v in b.cells(COUNTER)
        ]


def _segment(world: Path) -> Path:
    (segment,) = sorted((world / "journal").glob("*.log"))
    return segment


def _record_offsets(world: Path) -> list[tuple[int, int]]:
    """(seq, offset of the payload) for each record, found by locating each payload's bytes."""
    data = _segment(world).read_bytes()
    out, pos = [], 0
    with World.open(world) as w:
        records = list(w.journal.read(0))
    for record in records:
        payload = cbor.dumps(record.as_map())
        pos = data.index(payload, pos)
        out.append((record.seq, pos))
        pos += len(payload)
    return out


def test_a_flipped_byte_inside_the_journal_is_caught_at_its_seq(tmp_path: Path) -> None:
    _busy_world(tmp_path / "w")
    seq, offset = _record_offsets(tmp_path / "w")[10]
    segment = _segment(tmp_path / "w")
    data = bytearray(segment.read_bytes())
    data[offset + 5] ^= 0x01
    segment.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt) as info:
        World.open(tmp_path / "w")
    assert info.value.seq == seq
    assert info.value.segment == segment.name


def test_a_rewritten_step_record_with_a_valid_frame_is_caught_by_replay_at_its_seq(
    tmp_path: Path,
) -> None:
    _busy_world(tmp_path / "w")
    with World.open(tmp_path / "w") as world:
        records = list(world.journal.read(0))
    target = next(r for r in records if r.kind == "step" and r.seq > 20)
    forged = dict(target.body, out_hash=bytes(32))
    # Rebuild the world's journal with one record changed, through the journal's own writer.
    from world.journal import FileJournal

    (tmp_path / "w" / "journal").rename(tmp_path / "old-journal")
    journal = FileJournal.open(tmp_path / "w" / "journal")
    for r in records:
        journal.append(r.kind, r.subject, forged if r.seq == target.seq else r.body)
    journal.commit()
    journal.close()
    report = verify_world(tmp_path / "w")
    assert isinstance(report.divergence, ReplayDivergence)
    assert report.divergence.seq == target.seq
    assert report.divergence.expected.endswith("0" * 64)


@pytest.mark.parametrize("cut", [1, 3, 7])
def test_a_torn_tail_is_dropped_on_open(tmp_path: Path, cut: int) -> None:
    _busy_world(tmp_path / "w")
    with World.open(tmp_path / "w") as world:
        seq_next = world.journal.seq_next
    crashed = World.open(tmp_path / "w")
    crashed.send(EVENT, add("torn", 1))  # committed, then the process "dies": no checkpoint
    crashed.journal.close()
    crashed._lock.release()
    segment = _segment(tmp_path / "w")
    data = segment.read_bytes()
    segment.write_bytes(data[:-cut])
    with World.open(tmp_path / "w") as world:
        assert world.journal.seq_next == seq_next
        assert world.kernel.scheduler.pending == 0
        world.send(EVENT, add("after", 1))
        world.run_until_idle()
        assert world.state(COUNTER, "after") == {"count": 1, "events": 1}
    assert verify_world(tmp_path / "w").ok


def test_a_checkpoint_ahead_of_the_journal_is_refused(tmp_path: Path) -> None:
    _busy_world(tmp_path / "w")
    segment = _segment(tmp_path / "w")
    segment.write_bytes(segment.read_bytes()[:-1])
    with pytest.raises(CheckpointAhead):
        World.open(tmp_path / "w")


def _run_child(world: Path, die_at: int, mode: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, str(HERE / "world_crash_child.py"), str(world), str(die_at), mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc.stdout.splitlines()


def _sent_values(world: World) -> list[int]:
    return [
        cbor.loads(r.body["value"])["op"]["$value"]
        for r in world.journal.read(0)
        if r.kind == "event.in"
    ]


def test_the_crash_script_runs_to_completion_without_a_kill(tmp_path: Path) -> None:
    World.create(tmp_path / "w", COUNTER_AIR).close()
    lines = _run_child(tmp_path / "w", 0, "none")
    assert lines[-1] == "commits 10"


@pytest.mark.parametrize("mode", ["before", "after"])
@pytest.mark.parametrize(
    "die_at",
    # The first, a middle and the last commit in the main suite; the rest in the long variants.
    [n if n in (1, 5, 10) else pytest.param(n, marks=pytest.mark.long) for n in range(1, 11)],
)
def test_kill_9_at_every_commit_loses_nothing_acknowledged(
    tmp_path: Path, die_at: int, mode: str
) -> None:
    World.create(tmp_path / "w", COUNTER_AIR).close()
    acked = _run_child(tmp_path / "w", die_at, mode)
    acked_sends = [int(line.split()[2]) for line in acked if line.startswith("ack send")]
    with World.open(tmp_path / "w") as world:
        sent = _sent_values(world)
        assert sent[: len(acked_sends)] == acked_sends
        world.run_until_idle()
        totals = sum(v.state["count"] for v in world.cells(COUNTER))
        assert totals == sum(sent)
    assert verify_world(tmp_path / "w").ok


def test_internal_events_are_delivered_exactly_once_across_a_reopen(tmp_path: Path) -> None:
    from test_world_core import _emitter_world

    air = _emitter_world(tmp_path)
    with World.create(tmp_path / "w", air) as world:
        world.send_many([("t/Start@1", {"n": 0}), ("t/Start@1", {"n": 1})])
        world.step(1)  # A emits a Ping; B's delivery is pending when the world closes
    with World.open(tmp_path / "w") as world:
        assert world.kernel.scheduler.pending == 2
        world.run_until_idle()
        steps = [r.body for r in world.journal.read(0) if r.kind == "step"]
    consumed = [(b["src"], b["idx"]) for b in steps]
    assert len(consumed) == len(set(consumed)) == 4
    assert sum(b["reducer"] == "t/B@1" for b in steps) == 2
    assert verify_world(tmp_path / "w").ok


_HOT_CHILD = """
import os, sys
from pathlib import Path
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from world import _world as world_module
from world import World
from worldkit import EVENT, add
world_module.SNAPSHOT_RECORDS_MAX = int(sys.argv[4])
world = World.open(Path(sys.argv[1]))
for _ in range(21):
    world.send_many([(EVENT, add("hot", 1))] * 15)
    world.run_until_idle()
os._exit(0)  # no close, no checkpoint of its own: as if killed
"""


@pytest.mark.parametrize("records_max", [100, 1_000_000])
def test_a_hot_world_checkpoints_as_its_journal_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, records_max: int
) -> None:
    """``SNAPSHOT_RECORDS_MAX``: one cell stepped 315 times never makes ``SNAPSHOT_DIRTY_MAX``
    cells dirty, but the journal's growth checkpoints it, so a process that dies without closing
    leaves a world whose next open re-applies at most the limit plus one run's records (30):
    with the limit crossed, 1 to 130 of the ~630; with it not reached, all of them."""
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    root = Path(__file__).resolve().parents[2]
    args = [str(w), str(root), str(HERE), str(records_max)]
    subprocess.run([sys.executable, "-c", _HOT_CHILD, *args], check=True, timeout=120)
    applied = []
    real_apply = Kernel.apply

    def counted(kernel: Kernel, record: JournalRecord) -> None:
        applied.append(record.seq)
        real_apply(kernel, record)

    monkeypatch.setattr(Kernel, "apply", counted)
    with World.open(w) as world:
        assert world.state(COUNTER, "hot") == {"count": 315, "events": 315}
        total = world.journal.seq_next
    assert total > 630
    if records_max < total:
        assert 0 < len(applied) <= records_max + 30
    else:
        assert len(applied) >= 630
