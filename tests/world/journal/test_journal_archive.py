"""The archive and the verify cache (issue 20, item 9): one flipped byte in an old sealed
segment no longer costs every record after it. ``world archive`` keeps a verified second copy
of the sealed segments, ``journal verify --repair`` restores a damaged one from it (and cuts
only where there is no good copy), and ``journal verify`` re-reads only what changed."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.archive import background, verify_work
from cli.main import app
from world import ArchiveRefused, World
from world._archive import archive_world, remembered_archive
from world._repair import check_world, repair_world
from world._watch import Periodic
from world.history import verify_world
from world.journal import FileJournal
from world.journal import _file as file_journal

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

runner = CliRunner()


def cli(*args: object) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def _small_segments(world: World) -> None:
    """Make the world's journal roll every ~600 bytes, so a few events seal several segments."""
    world.journal.close()
    world.journal = file_journal.FileJournal(world.path / "journal", segment_bytes_max=600)
    world.kernel.journal = world.journal
    world.kernel.recorder.journal = world.journal


def _world(path: Path, events: int = 24, first: int = 0) -> Path:
    opened = World.create(path, COUNTER_AIR) if first == 0 else World.open(path)
    with opened as world:
        _small_segments(world)
        for n in range(first, first + events):
            world.send(EVENT, add(f"k{n % 3}", n + 1))
        world.run_until_idle()
    return path


def _segments(world: Path) -> list[Path]:
    return sorted((world / "journal").glob("*.log"))


def _records(world: Path) -> list[dict[str, Any]]:
    with FileJournal(world / "journal", readonly=True) as journal:
        return [record.as_map() for record in journal.read(0)]


def _flip(path: Path, offset: int = -5) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _states(world: Path) -> list[Any]:
    with World.open(world, readonly=True) as opened:
        return [opened.state(COUNTER, f"k{n}") for n in range(3)]


# --- restoring -----------------------------------------------------------------------------


def test_a_flipped_byte_in_an_archived_sealed_segment_is_restored_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    w = _world(tmp_path / "w")
    assert len(_segments(w)) >= 4
    archive_world(w, tmp_path / "a")
    records, states = _records(w), _states(w)
    _flip(_segments(w)[1])
    assert check_world(w).needs_repair

    fixed = repair_world(w, tmp_path / "backup", tmp_path / "a")

    assert [restored.segment for restored in fixed.restored] == [_segments(w)[1].name]
    assert fixed.journal is None, "nothing was cut"
    assert not fixed.checkpoint_discarded
    assert "restored" in fixed.describe()
    assert _records(w) == records
    assert _states(w) == states
    assert check_world(w).clean
    assert verify_world(w).ok
    damaged = Path(fixed.restored[0].backup_files[0])
    assert damaged.read_bytes() != _segments(w)[1].read_bytes()


def _smash(path: Path, offset: int = -5) -> None:
    """Damage two bytes of one frame: more than a mend by the seal undoes."""
    _flip(path, offset)
    _flip(path, offset - 2)


@pytest.mark.parametrize(
    "offset", [-5, -40, 16 + 2, 16 + 6, 3], ids=["payload", "mid", "length", "crc", "header"]
)
def test_without_an_archive_a_flipped_byte_in_a_sealed_segment_is_mended_by_its_seal(
    tmp_path: Path, offset: int
) -> None:
    w = _world(tmp_path / "w")
    records, states = _records(w), _states(w)
    damaged = _segments(w)[1]
    _flip(damaged, offset)
    assert check_world(w).needs_repair

    fixed = repair_world(w, tmp_path / "backup")

    assert fixed.journal is None, "nothing was cut"
    assert [mended.segment for mended in fixed.mended] == [damaged.name]
    assert "its seal" in fixed.describe()
    assert _records(w) == records
    assert _states(w) == states
    assert check_world(w).clean
    assert verify_world(w).ok
    assert Path(fixed.mended[0].backup_files[0]).read_bytes() != damaged.read_bytes()


def test_two_flipped_bytes_in_two_frames_of_one_sealed_segment_are_both_mended(
    tmp_path: Path,
) -> None:
    w = _world(tmp_path / "w")
    records = _records(w)
    damaged = _segments(w)[1]
    _flip(damaged, 16 + 14)  # the first frame's payload
    _flip(damaged, -5)  # the last frame's
    fixed = repair_world(w, tmp_path / "backup")
    assert fixed.journal is None, "nothing was cut"
    assert [mended.segment for mended in fixed.mended] == [damaged.name]  # both at once
    assert _records(w) == records
    assert check_world(w).clean


def test_without_an_archive_damage_a_seal_cannot_undo_is_cut_and_named(
    tmp_path: Path,
) -> None:
    w = _world(tmp_path / "w")
    total = len(_records(w))
    _smash(_segments(w)[1])
    fixed = repair_world(w, tmp_path / "backup")
    assert fixed.restored == ()
    assert fixed.mended == ()
    assert "lost: seq" in fixed.describe()
    assert fixed.journal is not None
    assert fixed.journal.records_cut == total - len(_records(w))
    assert fixed.journal.records_cut > 0


def test_an_archive_whose_copy_is_also_damaged_is_not_used_and_the_journal_is_cut(
    tmp_path: Path,
) -> None:
    w = _world(tmp_path / "w")
    archive_world(w, tmp_path / "a")
    name = _segments(w)[1].name
    _flip(tmp_path / "a" / "journal" / name, 20)
    _smash(_segments(w)[1])
    fixed = repair_world(w, tmp_path / "backup", tmp_path / "a")
    assert fixed.restored == ()
    assert fixed.archive_misses
    assert "blake3" in fixed.archive_misses[0]
    assert fixed.journal is not None
    assert fixed.journal.records_cut > 0


def test_the_repair_cli_restores_from_the_archive_the_world_remembers(tmp_path: Path) -> None:
    w = _world(tmp_path / "w")
    code, out, _ = cli("archive", w, "--to", tmp_path / "a")
    assert code == 0, out
    assert remembered_archive(w) == (tmp_path / "a").resolve()
    records = _records(w)
    _flip(_segments(w)[2])
    code, out, _ = cli("journal", "verify", w, "--repair", "--json")
    assert code == 0, out
    repaired = json.loads(out)
    assert [r["segment"] for r in repaired["restored"]] == [_segments(w)[2].name]
    assert repaired["repaired"] is None
    assert _records(w) == records
    _flip(_segments(w)[2])
    code, out, _ = cli("journal", "verify", w, "--repair")
    assert code == 0
    assert f"restored {_segments(w)[2].name}" in out
    assert "nothing was cut" in out
    assert "repaired: cut" not in out


# --- archiving -----------------------------------------------------------------------------


def test_a_second_archive_run_copies_only_what_was_sealed_since(tmp_path: Path) -> None:
    w = _world(tmp_path / "w")
    first = archive_world(w, tmp_path / "a")
    sealed = [f"journal/{p.name}" for p in _segments(w)[:-1]]
    assert set(sealed) <= set(first.copied)
    assert f"journal/{_segments(w)[-1].name}" not in first.copied, "the last is not sealed"
    assert {"air/sources.json", "air/manifest.cbor", "keys/receipt.key"} <= set(first.copied)

    again = archive_world(w, tmp_path / "a")
    assert again.copied == []
    assert again.replaced == []
    assert set(sealed) <= set(again.skipped)

    _world(w, 12, first=24)
    later = archive_world(w, tmp_path / "a")
    new = [f"journal/{p.name}" for p in _segments(w)[:-1] if f"journal/{p.name}" not in sealed]
    assert new
    assert [name for name in later.copied if name.endswith(".log")] == new


def test_a_bad_copy_in_the_archive_is_replaced_by_a_verified_one(tmp_path: Path) -> None:
    w = _world(tmp_path / "w")
    archive_world(w, tmp_path / "a")
    copies = sorted((tmp_path / "a" / "journal").glob("*.log"))
    _flip(copies[0], 20)
    copies[1].write_bytes(copies[1].read_bytes()[:-3])
    report = archive_world(w, tmp_path / "a")
    assert report.replaced == [f"journal/{copies[0].name}", f"journal/{copies[1].name}"]
    for copy in copies[:2]:
        assert copy.read_bytes() == (w / "journal" / copy.name).read_bytes()


def test_a_damaged_world_segment_is_not_archived_and_is_reported(tmp_path: Path) -> None:
    w = _world(tmp_path / "w")
    _flip(_segments(w)[1])
    report = archive_world(w, tmp_path / "a")
    assert report.damaged == [f"journal/{_segments(w)[1].name}"]
    assert not (tmp_path / "a" / "journal" / _segments(w)[1].name).exists()
    code, _out, err = cli("archive", w, "--to", tmp_path / "a")
    assert code == 1
    assert "damaged" in err


def test_another_worlds_archive_is_refused_and_left_alone(tmp_path: Path) -> None:
    a, b = _world(tmp_path / "a"), _world(tmp_path / "b")
    archive_world(a, tmp_path / "arch")
    before = sorted(p.name for p in (tmp_path / "arch").rglob("*"))
    with pytest.raises(ArchiveRefused) as refused:
        archive_world(b, tmp_path / "arch")
    assert "receipt key" in refused.value.reason
    assert sorted(p.name for p in (tmp_path / "arch").rglob("*")) == before
    code, _out, err = cli("archive", b, "--to", tmp_path / "arch")
    assert code == 1
    assert "ArchiveRefused" in err or "refused" in err


def test_a_folder_that_is_not_an_archive_or_holds_the_world_is_refused(tmp_path: Path) -> None:
    w = _world(tmp_path / "w", 3)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    for target in (tmp_path / "other", w / "archive", tmp_path):
        with pytest.raises(ArchiveRefused):
            archive_world(w, target)


def test_a_copy_of_the_world_that_diverged_is_refused_segment_by_segment(
    tmp_path: Path,
) -> None:
    """A fork (same genesis, same key) whose history differs is never written over."""
    w = _world(tmp_path / "w", 2)
    shutil.copytree(w, tmp_path / "fork")
    _world(w, 20, first=2)
    _world(tmp_path / "fork", 20, first=100)
    archive_world(w, tmp_path / "a")
    with pytest.raises(ArchiveRefused) as refused:
        archive_world(tmp_path / "fork", tmp_path / "a")
    assert "other records" in refused.value.reason


# --- the verify cache ------------------------------------------------------------------------


def _verify(world: Path, *flags: str) -> dict[str, Any]:
    code, out, _ = cli("journal", "verify", world, "--json", *flags)
    report: dict[str, Any] = json.loads(out)
    report["exit"] = code
    return report


def test_a_second_verify_reads_only_what_is_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = _world(tmp_path / "w")
    sealed = [p.name for p in _segments(w)[:-1]]
    assert _verify(w)["segments_cached"] == []
    scanned: list[str] = []
    real = file_journal._scan_segment

    def counting(scan: Any, name: str, *args: Any, **kwargs: Any) -> None:
        scanned.append(name)
        real(scan, name, *args, **kwargs)

    monkeypatch.setattr(file_journal, "_scan_segment", counting)
    again = _verify(w)
    assert again["exit"] == 0
    assert again["clean"]
    assert again["segments_cached"] == sealed
    assert set(scanned) == {_segments(w)[-1].name}, "only the last, unsealed segment is read"
    scanned.clear()
    full = _verify(w, "--full")
    assert full["segments_cached"] == []
    assert set(scanned) == {p.name for p in _segments(w)}


def test_a_changed_segment_is_verified_again_and_its_damage_found(tmp_path: Path) -> None:
    w = _world(tmp_path / "w")
    _verify(w)
    target = _segments(w)[1]
    status = target.stat()
    _flip(target)
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))  # the mtime put back
    report = _verify(w)
    assert report["exit"] == 1
    assert report["problem"]["segment"] == target.name
    assert target.name not in report["segments_cached"]


def test_a_touched_segment_is_read_again(tmp_path: Path) -> None:
    w = _world(tmp_path / "w")
    _verify(w)
    target = _segments(w)[2]
    os.utime(target)
    report = _verify(w)
    assert report["exit"] == 0
    assert target.name not in report["segments_cached"]
    assert target.name in _verify(w)["segments_cached"]


def test_a_damaged_journal_writes_no_cache_entry_for_it(tmp_path: Path) -> None:
    w = _world(tmp_path / "w")
    _flip(_segments(w)[1])
    assert _verify(w)["exit"] == 1
    assert _verify(w)["problem"] is not None, "still found: nothing vouched for it"


# --- in the background -------------------------------------------------------------------


def test_the_background_verify_reports_damage_once(tmp_path: Path) -> None:
    w = _world(tmp_path / "w")
    _flip(_segments(w)[1])
    said: list[str] = []
    heard = threading.Event()

    def say(text: str) -> None:
        said.append(text)
        heard.set()

    errors: list[BaseException] = []
    with Periodic(0.01, verify_work(w, say), errors.append):
        assert heard.wait(60)
    work = verify_work(w, say)
    work()
    work()
    assert errors == []
    assert any(_segments(w)[1].name in text for text in said)
    assert len([text for text in said if "journal corrupt" in text]) >= 1


def test_run_with_archive_archives_the_sealed_segments(tmp_path: Path) -> None:
    w = _world(tmp_path / "w")
    code, out, err = cli("run", w, "--until-idle", "--archive", tmp_path / "a")
    assert code == 0, out + err
    archived = sorted(p.name for p in (tmp_path / "a" / "journal").glob("*.log"))
    assert archived == [p.name for p in _segments(w)[:-1]]
    assert remembered_archive(w) == (tmp_path / "a").resolve()


def test_a_periodic_error_is_reported_and_the_thread_goes_on(tmp_path: Path) -> None:
    calls: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def work() -> None:
        calls.append(1)
        if len(calls) >= 3:
            done.set()
        raise OSError("disk full")

    with Periodic(0.01, work, errors.append):
        assert done.wait(60)
    assert len(errors) >= 3


def test_a_damaged_segment_whose_seal_is_gone_is_restored_with_the_archives_seal(
    tmp_path: Path,
) -> None:
    w = _world(tmp_path / "w")
    archive_world(w, tmp_path / "a")
    records = _records(w)
    target = _segments(w)[1]
    _flip(target)
    (target.parent / f"{target.name}.seal").unlink()
    fixed = repair_world(w, tmp_path / "backup", tmp_path / "a")
    assert [(r.segment, r.seal_restored) for r in fixed.restored] == [(target.name, True)]
    assert fixed.journal is None
    assert _records(w) == records
    assert check_world(w).clean


def test_a_remembered_archive_that_is_gone_falls_back_to_the_cut(tmp_path: Path) -> None:
    w = _world(tmp_path / "w")
    archive_world(w, tmp_path / "a")
    shutil.rmtree(tmp_path / "a")
    _smash(_segments(w)[1])
    code, out, _ = cli("journal", "verify", w, "--repair", "--json")
    assert code == 0, out
    repaired = json.loads(out)
    assert repaired["restored"] == []
    assert repaired["archive_misses"] == [f"no archive at {(tmp_path / 'a').resolve()}"]
    assert repaired["repaired"]["records_cut"] > 0


def test_the_background_archive_beside_a_live_writer_archives_what_it_sealed(
    tmp_path: Path,
) -> None:
    """What ``serve --archive`` runs: a writer seals segments while the archive thread polls;
    the last run, at the end, has them all."""
    w = _world(tmp_path / "w", 3)
    with World.open(w) as world, background(w, tmp_path / "a", 0.01):
        _small_segments(world)
        for n in range(30):
            world.send(EVENT, add(f"k{n % 3}", n + 1))
    archived = sorted(p.name for p in (tmp_path / "a" / "journal").glob("*.log"))
    assert archived == [p.name for p in _segments(w)[:-1]]
    assert len(archived) >= 3


@pytest.mark.parametrize("offset", [3, 16 + 12 + 2, -5], ids=["header", "genesis", "last"])
def test_a_flipped_byte_in_the_genesis_segment_is_restored_from_the_archive(
    tmp_path: Path, offset: int
) -> None:
    w = _world(tmp_path / "w")
    archive_world(w, tmp_path / "a")
    records, states = _records(w), _states(w)
    genesis = _segments(w)[0]
    _flip(genesis, offset)
    assert check_world(w).needs_repair

    fixed = repair_world(w, tmp_path / "backup", tmp_path / "a")

    assert [restored.segment for restored in fixed.restored] == [genesis.name]
    assert fixed.journal is None, "nothing was cut"
    assert _records(w) == records
    assert _states(w) == states
    assert check_world(w).clean
    assert verify_world(w).ok


def test_without_an_archive_a_flipped_byte_in_the_genesis_record_is_mended_by_its_seal(
    tmp_path: Path,
) -> None:
    w = _world(tmp_path / "w")
    records = _records(w)
    genesis = _segments(w)[0]
    _flip(genesis, 16 + 12 + 2)
    fixed = repair_world(w, tmp_path / "backup")
    assert fixed.journal is None, "nothing was cut"
    assert [mended.segment for mended in fixed.mended] == [genesis.name]
    assert _records(w) == records
    assert check_world(w).clean
