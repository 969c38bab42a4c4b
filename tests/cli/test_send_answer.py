"""What ``world send`` says of a batch is true in every case: how many events, how many this send
journaled and at which seqs, how many were journaled already under their ids and at which seqs
(``cli.core.sent_text``); ``--json`` carries each event's seq, the count of duplicates and the
span journaled. A served world (socket and HTTP) answers a send as the world open in process
does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import world as worlds
from cli.main import app
from world import World
from world.serve import serve

from worldkit import COUNTER_AIR, EVENT, add

runner = CliRunner()


def _lines(path: Path, ids: range, prefix: str = "e") -> Path:
    path.write_text(
        "".join(json.dumps({"$id": f"{prefix}-{i}", **add("k", 1)}) + "\n" for i in ids)
    )
    return path


def _send(w: Path, file: Path, *json_flag: str) -> str:
    done = runner.invoke(app, ["send", str(w), EVENT, "--file", str(file), *json_flag])
    assert done.exit_code == 0, done.output
    return done.stdout


@pytest.fixture
def w(tmp_path: Path) -> Path:
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    return w


def test_a_batch_of_new_events_names_its_seqs(w: Path, tmp_path: Path) -> None:
    shown = _send(w, _lines(tmp_path / "a.jsonl", range(800)))
    assert shown == "sent 800 event(s), journal seq 1..800\n"


def test_a_retry_of_800_lines_one_already_journaled_says_so(w: Path, tmp_path: Path) -> None:
    _send(w, _lines(tmp_path / "one.jsonl", range(5, 6)))  # e-5, at seq 1
    shown = _send(w, _lines(tmp_path / "a.jsonl", range(800)))
    assert shown == (
        "sent 800 event(s): 799 new, journal seq 2..800; 1 already journaled under its id (seq 1)\n"
    )
    answer = json.loads(_send(w, _lines(tmp_path / "b.jsonl", range(800)), "--json"))
    assert (answer["duplicates"], answer["journaled"]) == (800, [])
    assert answer["seqs"][:6] == [2, 3, 4, 5, 6, 1]


def test_a_retry_with_nothing_new_names_no_range_of_its_own(w: Path, tmp_path: Path) -> None:
    _send(w, _lines(tmp_path / "a.jsonl", range(300)))
    shown = _send(w, _lines(tmp_path / "a.jsonl", range(300)))
    assert shown == (
        "sent 300 event(s): none new; 300 already journaled under their ids (seq 1..300)\n"
    )


def test_duplicates_whose_seqs_are_not_one_run_are_counted(w: Path, tmp_path: Path) -> None:
    _send(w, _lines(tmp_path / "a.jsonl", range(0, 10, 2)))  # e-0, e-2, ... at seqs 1..5
    _send(w, _lines(tmp_path / "b.jsonl", range(1, 3), "other"))  # seqs 6, 7
    mixed = tmp_path / "c.jsonl"
    mixed.write_text(
        "".join(
            json.dumps({"$id": i, **add("k", 1)}) + "\n"
            for i in ("e-0", "other-2", "e-8", "e-8", "new-1", "new-1", "e-4")
        )
    )
    shown = _send(w, mixed)
    assert shown == (
        "sent 7 event(s): 1 new, journal seq 8; 6 already journaled under their ids "
        "(5 seqs from 1 to 8)\n"
    )


# --- the served paths answer as the one in process ------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Path]:
    w = tmp_path / "served"
    World.create(w, COUNTER_AIR).close()
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=serve,
        args=(w,),
        kwargs={"stop_event": stop, "on_listening": lambda _p: ready.set()},
    )
    thread.start()
    try:
        assert ready.wait(20)
        yield w
    finally:
        stop.set()
        thread.join(20)


def _answers(handle: Any) -> tuple[Any, ...]:
    """A first send and a retry with duplicates (of the first, and inside the batch), each seq
    told as the first send's or as its place after the retry's first new one (a served world
    steps between the two, so its seqs are further on)."""
    values = [add("k", 1)] * 6
    first = handle.send_many(EVENT, values[:3], ids=["a", "b", "c"])
    again = handle.send_many(EVENT, values, ids=["c", "d", "d", "a", None, "e"])
    low, high = again.journaled
    told = [("first", first.seqs.index(s)) if s < low else ("new", s - low) for s in again.seqs]
    return first.duplicates, again.duplicates, high - low, told


def test_a_served_world_answers_a_retry_as_the_world_in_process(w: Path, served: Path) -> None:
    with worlds.open(w) as local:
        expected = _answers(local)
    told = [("first", 2), ("new", 0), ("new", 0), ("first", 0), ("new", 1), ("new", 2)]
    assert expected == (0, 3, 2, told)
    with worlds.connect(served) as remote:
        assert _answers(remote) == expected
