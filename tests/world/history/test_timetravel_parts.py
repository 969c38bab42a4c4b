"""Time travel's parts one at a time (``world.history._timetravel``): what a mutation run of the
module found no test for (TESTING.md, "Mutation testing"). The answers themselves are checked
at every position by ``test_timetravel.py`` and ``test_history.py``; a broken fast path only
makes them slower (every doubt falls back to a full replay), so the fast path's parts are
checked here directly: which record says alone what a step consumed, which positions are
positions, and how a cell is named.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from air import cbor
from air.errors import KeyMismatch, UnknownName
from kernel.journal import JournalRecord
from world import World
from world._airfiles import load_air_path
from world.errors import SeqPastEnd
from world.history import _timetravel as timetravel

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT, add

E = "demo/E@1"


def _record(kind: str, body: Any) -> JournalRecord:
    return JournalRecord(3, "/world/x", kind, body)


@pytest.mark.parametrize(
    ("kind", "body", "expected"),
    [
        ("event.in", {"schema": E, "value": b"\x01"}, (E, b"\x01")),
        ("plan.step", {"event": [E, b"\x02"], "run_id": 1}, (E, b"\x02")),
        ("plan.step", {"run_id": 1}, None),
        ("step", {"events": [[E, b"\x03"]]}, (E, b"\x03")),
        ("step", {"events": [[E, b"\x03"], [E, b"\x04"]]}, None),
        ("step", {"events": []}, None),
        ("step", {"events": None}, None),
        ("step", {}, None),
        ("effect.receipt", {"events": [[E, b"\x03"]]}, None),
        ("plan.started", {"event": [E, b"\x02"]}, None),
    ],
    ids=[
        "an-event",
        "a-plans-event",
        "a-plan-step-without-one",
        "a-steps-one-event",
        "a-steps-two-events",
        "a-step-with-none",
        "a-step-with-null",
        "a-step-without-the-field",
        "a-receipt",
        "another-kind",
    ],
)
def test_a_delivery_is_read_only_from_a_record_that_says_it_alone(
    kind: str, body: Any, expected: tuple[str, bytes] | None
) -> None:
    found = timetravel._delivery(_record(kind, body))
    assert found == expected
    if found is not None:
        assert type(found[0]) is str
        assert type(found[1]) is bytes


def test_no_record_is_no_delivery() -> None:
    assert timetravel._delivery(None) is None


@pytest.mark.parametrize("seq", [-1, 0, 4, 5])
def test_a_position_is_one_of_the_journal(seq: int) -> None:
    if 0 <= seq < 5:
        timetravel.check_seq(seq, 5)
        return
    with pytest.raises(SeqPastEnd) as caught:
        timetravel.check_seq(seq, 5)
    assert "4" in str(caught.value)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tt") / "w"
    with World.create(path, COUNTER_AIR) as world:
        world.send(EVENT, add("a", 1))
        world.step()
    return path


@pytest.mark.parametrize("seq", [0, True, -1, 10**6, "1", None, 1.0])
def test_read_one_reads_a_seq_of_the_journal_and_nothing_else(small: Path, seq: Any) -> None:
    with World.open(small, readonly=True) as world:
        found = timetravel._read_one(world.journal, seq)
        if type(seq) is int and 0 <= seq < world.journal.seq_next:
            assert found is not None
            assert found.seq == seq
        else:
            assert found is None
        last = world.journal.seq_next - 1
        assert timetravel._read_one(world.journal, last) is not None
        assert timetravel._read_one(world.journal, last + 1) is None


def test_a_cell_is_named_through_its_reducers_key_schema(small: Path) -> None:
    with World.open(small, readonly=True) as world:
        where = timetravel.cell_key(world.air, COUNTER, "a")
        assert where == timetravel.CellKey(COUNTER, cbor.dumps("a"))
        assert where.subject_prefix == where.cell_id + "/"
        with pytest.raises(UnknownName) as unknown:
            timetravel.cell_key(world.air, "demo/Nope@1", "a")
        assert "demo/Nope@1" in str(unknown.value)
        assert COUNTER in str(unknown.value)  # the reducers there are


def test_a_reducer_without_cells_has_no_cell_to_name() -> None:
    air = load_air_path(ROOT / "manifests" / "counter_v1")
    [reducer] = air.modules
    with pytest.raises(KeyMismatch) as caught:
        timetravel.cell_key(air, reducer, "a")
    assert (caught.value.reducer, caught.value.keyed) == (reducer, False)
    assert str(caught.value) == f"{reducer} is not keyed: give no key"


# --- which outside events are a cell's inputs ------------------------------------------------


def _route(event: str, reducer: str, key_field: str | None) -> SimpleNamespace:
    return SimpleNamespace(event=event, reducer=reducer, key_field=key_field)


def _inputs(*routes: SimpleNamespace) -> Any:
    air = SimpleNamespace(manifest=SimpleNamespace(routing=SimpleNamespace(events=list(routes))))
    return timetravel._Inputs(air, timetravel.CellKey(COUNTER, cbor.dumps("a")))


def _event_in(schema: str, value: Any, kind: str = "event.in") -> JournalRecord:
    return JournalRecord(5, "/world/event", kind, {"schema": schema, "value": cbor.dumps(value)})


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (_event_in(EVENT, {"key": "a", "n": 1}), True),
        (_event_in(EVENT, {"id": "a", "n": 1}), True),  # the second route's field
        (_event_in(EVENT, {"key": "b", "n": 1}), False),
        (_event_in(EVENT, {"n": 1}), False),
        (_event_in(EVENT, ["a"]), False),
        (_event_in(EVENT, "a"), False),
        (_event_in("demo/Other@1", {"key": "a"}), False),  # another reducer's route
        (_event_in("demo/Unrouted@1", {"key": "a"}), False),
        (_event_in("demo/Keyless@1", {"key": "a"}), False),  # a route without a key field
        (_event_in(EVENT, {"key": "a"}, kind="step"), False),
    ],
    ids=[
        "its-key",
        "its-key-by-another-field",
        "another-key",
        "no-key",
        "a-list",
        "a-text",
        "another-reducers-event",
        "an-unrouted-event",
        "a-keyless-route",
        "not-an-outside-event",
    ],
)
def test_an_outside_event_is_a_cells_input_when_routed_to_it_by_its_key(
    record: JournalRecord, expected: bool
) -> None:
    inputs = _inputs(
        _route(EVENT, COUNTER, "key"),
        _route(EVENT, COUNTER, "id"),
        _route("demo/Other@1", "demo/Other@1", "key"),
        _route("demo/Keyless@1", COUNTER, None),
    )
    assert inputs.matches(record) is expected


# --- the fast path and the full replay answer alike, field by field ------------------------


@pytest.fixture(scope="module")
def stepped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tt") / "w"
    with World.create(path, COUNTER_AIR) as world:
        for key, n in (("a", 1), ("b", 2), ("a", 3)):
            world.send(EVENT, add(key, n))
            world.step()
    return path


def test_cell_at_answers_every_field_the_same_by_either_path(
    stepped: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with World.open(stepped, readonly=True) as world:
        seq_next = world.journal.seq_next
        era = world.genesis_air.manifest_hash
        live = world.state(COUNTER, "a")
    fast = {
        (key, seq): timetravel.cell_at(stepped, COUNTER, key, seq)
        for key in ("a", "b", "c")
        for seq in range(seq_next)
    }
    monkeypatch.setattr(timetravel, "_cell_steps_at", lambda *_args: None)
    for (key, seq), answer in fast.items():
        assert timetravel.cell_at(stepped, COUNTER, key, seq) == answer, (key, seq)
        assert answer.seq == seq
        assert seq <= answer.seq_through < seq_next
        if answer.state is None:
            assert (answer.state_cbor, answer.era) == (None, None)
        else:
            assert answer.state_cbor is not None
            assert answer.era == era
    last = seq_next - 1
    assert fast["a", last].state == live != fast["a", 0].state
    assert fast["c", last].state is None


def test_a_cells_seqs_are_the_same_read_from_the_index_or_the_journal(
    stepped: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``world why`` pages a cell's records by ``cell_seqs``: from the history index, or (a
    world not yet checkpointed, or an index that does not describe the journal) the journal."""
    with World.open(stepped, readonly=True) as world:
        seqs = range(world.journal.seq_next)
        wheres = [timetravel.cell_key(world.air, COUNTER, key) for key in ("a", "b")]
        indexed = [[timetravel.cell_seqs(world, w, seq) for seq in seqs] for w in wheres]
        monkeypatch.setattr(timetravel, "_indexed", lambda *_args: None)
        read = [[timetravel.cell_seqs(world, w, seq) for seq in seqs] for w in wheres]
    assert read == indexed
    a_steps = indexed[0][-1]
    assert len(a_steps) == 2
    assert all(seq in indexed[0][seq] for seq in a_steps)  # a record counts at its own seq
    assert all(seq not in indexed[0][seq - 1] for seq in a_steps)  # nor before it
