"""Repair ends in an open world (issue 7, item 4): verify and open agree on what they found, and
after ``--repair`` the world opens, with the cut records kept in a backup."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from kernel.errors import JournalCorrupt
from world import World
from world._repair import check_world, repair_world
from world.errors import CheckpointAhead
from world.history import verify_world
from world.journal import _file as file_journal

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

runner = CliRunner()


def cli(*args: object) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def _world(path: Path, events: int = 6, **journal: int) -> Path:
    with World.create(path, COUNTER_AIR) as world:
        for n in range(events):
            world.send(EVENT, add(f"k{n % 2}", n + 1))
            world.step(1)
    return path


def _segments(world: Path) -> list[Path]:
    return sorted((world / "journal").glob("*.log"))


def test_a_cut_tail_under_a_checkpoint_is_found_by_open_and_verify_and_repaired(
    tmp_path: Path,
) -> None:
    w = _world(tmp_path / "w")
    segment = _segments(w)[-1]
    segment.write_bytes(segment.read_bytes()[:-3])
    with pytest.raises(CheckpointAhead):
        World.open(w, readonly=True)
    check = check_world(w)
    assert not check.ok
    assert check.checkpoint_ahead
    assert check.journal.torn_tail is not None
    code, _out, err = cli("journal", "verify", w)
    assert code == 1
    assert "torn tail" in err
    assert "checkpoint" in err
    code, out, _ = cli("journal", "verify", w, "--repair", "--json")
    assert code == 0
    repaired = json.loads(out)
    assert repaired["checkpoint_discarded"] is True
    with World.open(w) as world:
        world.run_until_idle()
        assert world.state(COUNTER, "k0") is not None
    assert verify_world(w).ok
    assert check_world(w).clean


def test_a_flipped_byte_mid_journal_is_cut_with_its_records_in_the_backup(
    tmp_path: Path,
) -> None:
    w = _world(tmp_path / "w")
    segment = _segments(w)[-1]
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt) as opened:
        World.open(w, readonly=True)
    check = check_world(w)
    assert check.journal.problem is not None
    assert check.journal.problem.as_json() == opened.value.problem.as_json()
    records_before = check.journal.records
    fixed = repair_world(w, tmp_path / "backup")
    assert fixed.journal is not None
    assert fixed.journal.records_cut > 0
    assert fixed.journal.seq_cut_first == records_before
    assert fixed.journal.seq_cut_last is not None
    assert fixed.journal.seq_cut_last >= fixed.journal.seq_cut_first
    salvaged = list(file_journal.salvage(tmp_path / "backup"))
    assert salvaged, "the cut records stay readable in the backup"
    with World.open(w) as world:
        world.run_until_idle()
    report = verify_world(w)
    assert report.ok, report


def test_the_repair_cli_prints_how_many_records_it_cut_and_their_seqs(tmp_path: Path) -> None:
    w = _world(tmp_path / "w")
    segment = _segments(w)[-1]
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    code, out, _ = cli("journal", "verify", w, "--repair")
    assert code == 0
    assert "repaired:" in out
    assert "seq" in out
    code, out, _ = cli("info", w, "--json")
    assert code == 0, out


def test_a_flipped_byte_in_a_sealed_older_segment_stops_every_open(tmp_path: Path) -> None:
    w = tmp_path / "w"
    with World.create(w, COUNTER_AIR) as world:
        world.journal.close()
        world.journal = file_journal.FileJournal(w / "journal", segment_bytes_max=600)
        world.kernel.journal = world.journal
        for n in range(12):
            world.send(EVENT, add(f"k{n % 3}", n + 1))
    first = _segments(w)[0]
    assert len(_segments(w)) > 2
    data = bytearray(first.read_bytes())
    data[-5] ^= 0x01
    first.write_bytes(bytes(data))
    for readonly in (True, False):
        with pytest.raises(JournalCorrupt):
            World.open(w, readonly=readonly)
    code, _out, err = cli("send", w, EVENT, json.dumps(add("z", 1)))
    assert code == 1
    assert "journal corrupt" in err


def test_a_journal_started_by_another_manifest_refuses_to_open(tmp_path: Path) -> None:
    """The planted bug 'no genesis manifest check' fails here."""
    from world.errors import GenesisMismatch

    _world(tmp_path / "a", events=1)
    other_air = COUNTER_AIR.parent / f".test-other-{tmp_path.name}"  # wasm paths stay relative
    other_air.mkdir()
    request_cleanup = shutil.rmtree
    for source in COUNTER_AIR.iterdir():
        text = source.read_text().replace("demo/CounterState@1", "demo/CounterState@2")
        (other_air / source.name).write_text(text)
    try:
        World.create(tmp_path / "b", other_air).close()
    finally:
        request_cleanup(other_air)
    for path in (tmp_path / "b" / "journal").iterdir():
        path.unlink()
    for path in (tmp_path / "a" / "journal").glob("*.log"):
        (tmp_path / "b" / "journal" / path.name).write_bytes(path.read_bytes())
    with pytest.raises(GenesisMismatch) as caught:
        World.open(tmp_path / "b", readonly=True)
    assert caught.value.actual != caught.value.expected
