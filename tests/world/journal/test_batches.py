"""A batch of inputs is durable whole or not at all, and a retry with the same ids is not
journaled twice (issue 20, "all-or-nothing sends, and retries that do not duplicate").

The journal side: ``FileJournal.commit(atomic=True)`` writes a marker first
(``world.journal._batch``), and a scan that finds the journal ending inside the marked batch
drops the batch whole (a torn tail, reason ``partial_batch``). A crash inside the batch's write
is made here by cutting the segment file inside the batch (what a kill -9 or a power cut
leaves: a prefix); ``tests/world/test_power_loss.py`` cuts the power inside such writes too.
The world side: ``send_many`` encodes every record before it journals any; every id journaled
is known across reopen and checkpoints (``world._event_ids``; its own tests are
``tests/world/test_event_ids.py``).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from air import cbor
from air.errors import InvalidArgument, LimitExceeded
from cli.main import app
from world import World
from world.history import verify_world
from world.journal import FileJournal
from world.journal._batch import BATCH_NAME, Marker, write_marker
from world.serve import Client, serve, socket_path

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

runner = CliRunner()
SUBJECT = "/world/event/t@1"


def _records(directory: Path) -> list[int]:
    with FileJournal.open(directory, readonly=True) as journal:
        return [r.body["n"] for r in journal.read(0)]


def _journal_with_batch(directory: Path, count: int) -> int:
    """Two single commits, then an atomic batch of ``count``; the batch's first byte offset."""
    with FileJournal.open(directory) as journal:
        for n in range(2):
            journal.append("event.in", SUBJECT, {"n": n})
            journal.commit()
        start = (directory / journal.segments[-1]).stat().st_size
        for n in range(2, 2 + count):
            journal.append("event.in", SUBJECT, {"n": n})
        journal.commit(atomic=True)
    assert not (directory / BATCH_NAME).exists()  # removed once the batch was durable
    return start


def _torn_inside_the_batch(directory: Path, start: int, count: int) -> None:
    """What a crash inside the batch's write leaves: its marker, and a prefix of it."""
    segment = directory / sorted(p.name for p in directory.glob("*.log"))[-1]
    data = segment.read_bytes()
    with FileJournal.open(directory, readonly=True) as journal:
        first = next(journal.read(2))
    payload = cbor.dumps(first.as_map())
    write_marker(directory, Marker(2, count, cbor.digest(payload)))
    segment.write_bytes(data[: start + (len(data) - start) // 2])


def test_a_batch_cut_inside_its_write_is_dropped_whole_by_readers_and_the_next_writer(
    tmp_path: Path,
) -> None:
    start = _journal_with_batch(tmp_path, 50)
    _torn_inside_the_batch(tmp_path, start, 50)
    assert _records(tmp_path) == [0, 1]  # a reader stops before the partial batch
    with FileJournal.open(tmp_path) as journal:
        assert journal.dropped is not None
        assert (journal.dropped.reason, journal.dropped.seq) == ("partial_batch", 2)
        assert journal.seq_next == 2
    assert not (tmp_path / BATCH_NAME).exists()
    assert _records(tmp_path) == [0, 1]


@pytest.mark.parametrize("count", [1, 2])
def test_the_smallest_batches_cut_at_every_byte_are_whole_or_gone(
    tmp_path: Path, count: int
) -> None:
    """A batch of 2 has one partial state (its first record whole, the second not: a prefix
    that ends on a frame boundary); a batch of 1 has no marker, its one frame is whole or
    torn. Cut after every byte of the batch's write, the journal opens with both records or
    neither, never one."""
    whole = tmp_path / "whole"
    start = _journal_with_batch(whole, count)
    segment = sorted(whole.glob("*.log"))[-1].name
    data = (whole / segment).read_bytes()
    with FileJournal.open(whole, readonly=True) as journal:
        first = next(journal.read(2))
    digest = cbor.digest(cbor.dumps(first.as_map()))
    for end in range(start, len(data)):
        cut = tmp_path / f"cut-{end}"
        cut.mkdir()
        (cut / segment).write_bytes(data[:end])
        if count > 1:  # the marker is durable before the first byte of its batch
            write_marker(cut, Marker(2, count, digest))
        assert _records(cut) == [0, 1], end
        with FileJournal.open(cut) as journal:
            assert journal.seq_next == 2, end
        assert _records(cut) == [0, 1], end
    assert _records(whole) == list(range(2 + count))


def test_verify_reports_a_partial_batch_as_a_torn_tail_not_as_damage(tmp_path: Path) -> None:
    from world.journal import verify

    start = _journal_with_batch(tmp_path, 20)
    _torn_inside_the_batch(tmp_path, start, 20)
    report = verify(tmp_path)
    assert report.problem is None
    assert report.torn_tail is not None
    assert report.torn_tail.reason == "partial_batch"


def test_a_marker_of_a_whole_batch_changes_nothing_and_goes_at_the_next_writable_open(
    tmp_path: Path,
) -> None:
    _journal_with_batch(tmp_path, 5)
    with FileJournal.open(tmp_path, readonly=True) as journal:
        first = next(journal.read(2))
    write_marker(tmp_path, Marker(2, 5, cbor.digest(cbor.dumps(first.as_map()))))
    assert _records(tmp_path) == list(range(7))
    with FileJournal.open(tmp_path) as journal:
        assert journal.dropped is None
    assert not (tmp_path / BATCH_NAME).exists()


def test_a_marker_that_names_another_record_is_not_obeyed(tmp_path: Path) -> None:
    """A batch rolled back, whose seqs later single commits took: those records stay."""
    _journal_with_batch(tmp_path, 5)
    write_marker(tmp_path, Marker(2, 50, bytes(32)))  # as if a 50-record batch began at 2
    assert _records(tmp_path) == list(range(7))
    with FileJournal.open(tmp_path) as journal:
        assert journal.seq_next == 7


def test_a_torn_marker_is_ignored_and_removed(tmp_path: Path) -> None:
    _journal_with_batch(tmp_path, 3)
    (tmp_path / BATCH_NAME).write_bytes(b"\xa5\x66")  # cut while it was written
    assert _records(tmp_path) == list(range(5))
    FileJournal.open(tmp_path).close()
    assert not (tmp_path / BATCH_NAME).exists()


def test_a_batch_with_one_record_over_the_limit_journals_none_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    defaults = dict(FileJournal.__init__.__kwdefaults__ or {})
    monkeypatch.setattr(
        FileJournal.__init__, "__kwdefaults__", {**defaults, "record_bytes_max": 300}
    )
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        before = world.journal.seq_next
        big = {"key": "k" * 400, "op": {"$tag": "Add", "$value": 1}}
        with pytest.raises(LimitExceeded) as caught:
            world.send_many([(EVENT, add("a", 1)), (EVENT, big), (EVENT, add("b", 2))])
        assert caught.value.limit == "journal.record_bytes_max"
        assert world.journal.seq_next == before
        assert world.stale is None
        seq = world.send(EVENT, add("c", 3))
        assert seq == before
        world.run_until_idle()
        assert world.state(COUNTER, "a") is None
        assert world.state(COUNTER, "c")["count"] == 3


def test_an_id_sent_again_is_acknowledged_with_its_first_seq_and_not_journaled_twice(
    tmp_path: Path,
) -> None:
    w = tmp_path / "w"
    with World.create(w, COUNTER_AIR) as world:
        first = world.send(EVENT, add("a", 1), event_id="order-1")
        assert world.send(EVENT, add("a", 1), event_id="order-1") == first
        seqs = world.send_many(
            [(EVENT, add("a", 2)), (EVENT, add("a", 1)), (EVENT, add("a", 2))],
            ids=["order-2", "order-1", "order-2"],
        )
        assert seqs == [first + 1, first, first + 1]
        world.run_until_idle()
        assert world.state(COUNTER, "a")["count"] == 3
    with World.open(w) as world:  # replayed from the journal: the ids are known again
        assert world.send(EVENT, add("a", 2), event_id="order-2") == first + 1
        world.snapshot()
    with World.open(w) as world:  # restored from the checkpoint
        assert world.send(EVENT, add("a", 1), event_id="order-1") == first
        assert sum(1 for r in world.journal.read(0) if r.kind == "event.in") == 2
    assert verify_world(w).ok  # replay from genesis agrees, ids and all


def test_an_id_that_is_not_text_is_refused_before_anything_is_journaled(tmp_path: Path) -> None:
    from world import EventRejected

    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        before = world.journal.seq_next
        with pytest.raises(EventRejected) as caught:
            world.send_many([(EVENT, add("a", 1))], ids=[7])  # type: ignore[list-item]
        assert isinstance(caught.value.cause, InvalidArgument)
        assert world.journal.seq_next == before


def test_the_cli_takes_an_id_per_value_and_per_line(tmp_path: Path) -> None:
    w = tmp_path / "w"
    assert runner.invoke(app, ["init", str(w), "--air", str(COUNTER_AIR)]).exit_code == 0
    event = json.dumps(add("a", 1))
    one = runner.invoke(app, ["send", str(w), EVENT, event, "--id", "p-1", "--json"])
    two = runner.invoke(app, ["send", str(w), EVENT, event, "--id", "p-1", "--json"])
    assert json.loads(one.stdout)["seqs"] == json.loads(two.stdout)["seqs"]
    lines = tmp_path / "e.jsonl"
    lines.write_text(
        json.dumps({"$id": "p-1", **add("a", 1)})
        + "\n"
        + json.dumps({"$id": "p-2", **add("b", 5)})
        + "\n"
        + json.dumps(add("c", 1))
        + "\n"
    )
    sent = runner.invoke(app, ["send", str(w), EVENT, "--file", str(lines), "--json"])
    assert sent.exit_code == 0, sent.stdout + sent.stderr
    seqs = json.loads(sent.stdout)["seqs"]
    assert seqs[0] == json.loads(one.stdout)["seqs"][0]
    assert len(set(seqs)) == 3
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"$id": 5, **add("a", 1)}) + "\n")
    refused = runner.invoke(app, ["send", str(w), EVENT, "--file", str(bad)])
    assert refused.exit_code == 1
    both = runner.invoke(app, ["send", str(w), EVENT, "--file", str(lines), "--id", "x"])
    assert both.exit_code == 1


def test_a_served_world_takes_ids_too(tmp_path: Path) -> None:
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=serve, args=(w,), kwargs={"stop_event": stop, "on_listening": lambda _p: ready.set()}
    )
    thread.start()
    try:
        assert ready.wait(20)
        with Client(socket_path(w), timeout_s=20) as client:
            first = client.call("events.send", schema=EVENT, values=[add("a", 1)], ids=["s-1"])
            again = client.call(
                "events.send", schema=EVENT, values=[add("a", 1), add("b", 1)], ids=["s-1", None]
            )
        assert again["seqs"][0] == first["seqs"][0]
    finally:
        stop.set()
        thread.join(20)
    with World.open(w, readonly=True) as world:
        assert sum(1 for r in world.journal.read(0) if r.kind == "event.in") == 2
