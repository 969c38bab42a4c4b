"""``world journal tail -n N`` and ``--from N`` read from where they start, not from seq 0: the
eras before the start come from the checkpoint (``world._reading.applied_before``). What they
print is what they printed when they read the whole journal: the same records, in the same
order, each rendered in its era, across an upgrade's ``gov.applied`` and across segments, with
the checkpoint as it is, damaged, missing, or older than the upgrade."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from world import World
from world.gov import apply, propose
from world.journal import FileJournal

from worldkit import COUNTER_AIR, EVENT, add

V2_AIR = Path(__file__).resolve().parents[1] / "fixtures" / "counter_v2_air"
CHECKPOINT = Path("state") / "reducers" / "checkpoint.cbor"


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, Path]:
    """A counter world of small segments: cells stepped, counter_v2 applied, more stepped, a
    checkpoint at the end; (the world, the gov.applied seq, a copy of its state from before the
    upgrade)."""
    root = tmp_path_factory.mktemp("tail")
    defaults = FileJournal.__init__.__kwdefaults__
    assert defaults is not None
    was = defaults["segment_bytes_max"]
    defaults["segment_bytes_max"] = 2_000  # every World.open's journal: many segments
    try:
        path = root / "w"
        with World.create(path, COUNTER_AIR) as world:
            world.send_many([(EVENT, add(f"k{n % 4}", n)) for n in range(30)])
            world.run_until_idle()
            world.snapshot()
        shutil.copytree(path / "state", root / "state-before")
        with World.open(path) as world:
            made, _diff = propose(world, V2_AIR)
            apply(world, made.id)
            applied_seq = world.kernel.eras.current.since
            world.send_many([(EVENT, add(f"k{n % 5}", n)) for n in range(30)])
            world.run_until_idle()
            world.snapshot()
    finally:
        defaults["segment_bytes_max"] = was
    assert len(list((path / "journal").glob("*.log"))) > 5
    return path, applied_seq, root / "state-before"


def _tail(w: Path, *args: str) -> list[dict]:
    done = CliRunner().invoke(app, ["journal", "tail", str(w), *args])
    assert done.exit_code == 0, done.output
    return [json.loads(line) for line in done.stdout.splitlines()]


def _checkpoints(w: Path, before: Path) -> dict[str, object]:
    return {
        "as it is": None,
        "damaged": lambda: (w / CHECKPOINT).write_bytes(b"\xa1\x01\x02"),
        "missing": lambda: (w / CHECKPOINT).unlink(),
        "from before the upgrade": lambda: (
            shutil.rmtree(w / "state"),
            shutil.copytree(before, w / "state"),
        ),
    }


@pytest.mark.parametrize(
    "checkpoint", ["as it is", "damaged", "missing", "from before the upgrade"]
)
def test_tail_from_a_position_prints_what_a_whole_read_prints(
    upgraded: tuple[Path, int, Path], tmp_path: Path, checkpoint: str
) -> None:
    source, applied_seq, before = upgraded
    w = tmp_path / "w"
    shutil.copytree(source, w)
    whole = _tail(w)
    assert [r["seq"] for r in whole] == list(range(len(whole)))
    after = [r for r in whole if r["seq"] > applied_seq and r["kind"] == "event.in"]
    assert after  # read in era 2:
    assert all(isinstance(r["body"]["value"], dict) for r in after)
    change = _checkpoints(w, before)[checkpoint]
    if callable(change):
        change()
    end = len(whole)
    for start in (1, applied_seq - 1, applied_seq, applied_seq + 1, end - 3, end, end + 5):
        assert _tail(w, "--from", str(start)) == whole[start:], start
    for last in (0, 1, 20, end - applied_seq, end - applied_seq + 1, end, end + 7):
        assert _tail(w, "-n", str(last)) == (whole[-last:] if last else []), last
    assert _tail(w, "--from", str(applied_seq - 2), "-n", "5") == whole[-5:]
    assert (
        _tail(w, "--until", str(applied_seq + 1), "-n", "3")
        == whole[applied_seq - 1 : applied_seq + 2]
    )


def test_a_checkpoint_of_another_history_is_not_believed(tmp_path: Path) -> None:
    """A checkpoint whose eras name records that are not this journal's ``gov.applied`` (here:
    another world's, upgraded elsewhere, copied in with its snapshot object) makes the tail
    read the journal for them, and it prints what a whole read prints."""
    worlds = {}
    for name, before in (("a", 4), ("b", 9)):
        path = tmp_path / name
        with World.create(path, COUNTER_AIR) as world:
            world.send_many([(EVENT, add("k", n)) for n in range(before)])
            world.run_until_idle()
            made, _diff = propose(world, V2_AIR)
            apply(world, made.id)
            world.send_many([(EVENT, add("k", n)) for n in range(5)])
            world.run_until_idle()
        worlds[name] = path
    a, b = worlds["a"], worlds["b"]
    whole = _tail(b)
    shutil.rmtree(b / "state")
    shutil.copytree(a / "state", b / "state")
    shutil.copytree(a / "cas", b / "cas", dirs_exist_ok=True)
    applied = next(r["seq"] for r in whole if r["kind"] == "gov.applied")
    for start in (applied - 1, applied + 1, len(whole) - 2):
        assert _tail(b, "--from", str(start)) == whole[start:], start


@pytest.mark.parametrize("back", [7, 16_384], ids=["stretches-of-7", "one-stretch"])
def test_the_last_n_records_of_a_subject_are_found_back_from_the_end(
    upgraded: tuple[Path, int, Path], monkeypatch: pytest.MonkeyPatch, back: int
) -> None:
    from world.ops import _journal

    monkeypatch.setattr(_journal, "BACK_RECORDS", back)
    w, applied_seq, _before = upgraded
    whole = _tail(w)
    for subject in ("/world/cell/**", "/world/gov/**", "/world/nothing/**", "/world/**"):
        matching = _tail(w, "--subject", subject)
        steps = [r for r in matching if r["kind"] == "step"]
        assert all(r["body"]["key"].startswith("k") for r in steps)  # keys read in their era
        for last in (1, 2, 5, 30, len(matching), len(matching) + 3):
            assert _tail(w, "--subject", subject, "-n", str(last)) == matching[-last:]
        for start in (applied_seq - 3, len(whole) - 4):
            after = [r for r in matching if r["seq"] >= start]
            got = _tail(w, "--subject", subject, "--from", str(start), "-n", "4")
            assert got == after[-4:], (subject, start)


def test_a_served_tail_of_the_last_n_of_a_subject_is_the_direct_one(
    upgraded: tuple[Path, int, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through ``world serve``, ``journal.tail``'s ``last`` finds where the last N begin (the
    server reads back from the end), and the lines are those a direct tail prints."""
    import threading

    from world.ops import _journal
    from world.serve import serve

    monkeypatch.setattr(_journal, "BACK_RECORDS", 7)
    source, _applied_seq, _before = upgraded
    w = tmp_path / "w"
    shutil.copytree(source, w)
    direct = {
        (subject, last): _tail(w, "--subject", subject, "-n", str(last))
        for subject in ("/world/cell/**", "/world/gov/**", "/world/nothing/**")
        for last in (1, 4, 200)
    }
    stop, ready, errors = threading.Event(), threading.Event(), []

    def run() -> None:
        try:
            serve(w, stop_event=stop, on_listening=lambda _p: ready.set())
        except BaseException as exc:
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert ready.wait(30.0)
        assert errors == []
        for (subject, last), lines in direct.items():
            assert _tail(w, "--subject", subject, "-n", str(last)) == lines, (subject, last)
    finally:
        stop.set()
        thread.join(30.0)
    assert errors == []
