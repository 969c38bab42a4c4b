"""The journal contract: record encoding, subjects, and one suite run against every backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from air import cbor
from air.errors import CborError, LimitExceeded, UsageError
from kernel.journal import (
    Journal,
    JournalRecord,
    MemoryJournal,
    decode_record,
    decode_record_fast,
    encode_record,
    record_prefix,
)
from kernel.subjects import (
    SubjectPattern,
    cell_subject,
    effect_subject,
    event_subject,
    make_subject,
    subject_matches,
)
from world.journal import FileJournal

EVENT = "/world/event/demo/CounterEvent@1"

# --- record encoding --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "expected_hex"),
    [
        pytest.param(
            JournalRecord(0, "/a", "x", None),
            "a4637365710064626f6479f6646b696e646178677375626a656374622f61",
            id="smallest",
        ),
        pytest.param(
            JournalRecord(1000, "/w/e", "step", {"b": 1, "a": [True]}),
            "a4"
            "63736571"
            "1903e8"
            "64626f6479"
            "a2"
            "6161"
            "81f5"
            "6162"
            "01"
            "646b696e64"
            "6473746570"
            "677375626a656374"
            "642f772f65",
            id="sorted-body-map",
        ),
    ],
)
def test_record_encoding_matches_the_golden_vector(
    record: JournalRecord, expected_hex: str
) -> None:
    payload = encode_record(record.seq, record.subject, record.kind, record.body)
    assert payload.hex() == expected_hex
    assert payload == cbor.dumps(record.as_map())
    assert decode_record(payload) == record


_scalars = st.none() | st.booleans() | st.integers(-(2**64), 2**64 - 1) | st.text() | st.binary()
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=6) | st.integers(-300, 300), inner, max_size=4)
    ),
    max_leaves=12,
)
_segments = st.text(alphabet="abcXYZ019@._-", min_size=1, max_size=6)
_subjects = st.lists(_segments, min_size=1, max_size=5).map(lambda parts: "/" + "/".join(parts))


@given(seq=st.integers(0, 2**64 - 1), subject=_subjects, body=_values)
def test_fast_encoder_equals_the_canonical_encoding_of_the_record_map(
    seq: int, subject: str, body: Any
) -> None:
    payload = encode_record(seq, subject, "event.in", body)
    assert payload == cbor.dumps({"seq": seq, "subject": subject, "kind": "event.in", "body": body})
    assert payload.startswith(record_prefix(seq))


_flat_scalars = (
    st.none() | st.booleans() | st.integers(-(2**64), 2**64 - 1) | st.text(max_size=8) | st.binary()
)


@given(body=st.dictionaries(st.text(max_size=6), _flat_scalars, max_size=8))
def test_the_flat_body_shortcut_equals_the_generic_canonical_encoder(body: dict[str, Any]) -> None:
    # Flat maps of text keys to scalars skip the generic encoder; non-ASCII keys sort by UTF-8.
    payload = encode_record(0, "/a", "x", body)
    assert payload == cbor.dumps({"seq": 0, "subject": "/a", "kind": "x", "body": body})


@pytest.mark.parametrize("value", [2**64, -(2**64) - 1, 0.5, {1}, object()])
def test_a_flat_body_with_a_value_outside_the_model_is_rejected(value: Any) -> None:
    with pytest.raises(CborError):
        encode_record(0, "/a", "x", {"k": value})


@given(seq=st.integers(0, 2**64 - 1), subject=_subjects, body=_values)
def test_record_decoding_inverts_encoding_strictly_and_fast(
    seq: int, subject: str, body: Any
) -> None:
    payload = encode_record(seq, subject, "step", body)
    record = decode_record(payload)
    assert record == decode_record_fast(payload)
    assert (record.seq, record.subject, record.kind) == (seq, subject, "step")
    assert cbor.dumps(record.body) == cbor.dumps(body)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(cbor.dumps({"seq": 0, "subject": "/a", "kind": "x"}), id="missing-body"),
        pytest.param(
            cbor.dumps({"seq": -1, "subject": "/a", "kind": "x", "body": 0}), id="neg-seq"
        ),
        pytest.param(cbor.dumps({"seq": 0, "subject": "a", "kind": "x", "body": 0}), id="subject"),
        pytest.param(cbor.dumps({"seq": 0, "subject": "/a", "kind": "", "body": 0}), id="kind"),
        pytest.param(cbor.dumps([0, "/a", "x", None]), id="not-a-map"),
        pytest.param(b"\xa4", id="truncated"),
    ],
)
def test_payloads_that_are_not_records_are_rejected_by_both_decoders(payload: bytes) -> None:
    with pytest.raises(CborError):
        decode_record(payload)
    with pytest.raises(CborError):
        decode_record_fast(payload)


# --- subjects ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("/world/event/demo/E@1", "/world/event/demo/E@1", True),
        ("/world/event/demo/E@1", "/world/event/demo/E@2", False),
        ("/world/*/demo/E@1", "/world/event/demo/E@1", True),
        ("/world/*", "/world/event/demo", False),
        ("/world/*", "/world", False),
        ("/world/**", "/world", True),
        ("/world/**", "/world/event/demo/E@1", True),
        ("/world/>", "/world/event", True),
        ("/world/**", "/worldwide/x", False),
        ("/**", "/anything/at/all", True),
        ("/world/cell/*/*/*/step", "/world/cell/demo/Counter@1/ab12/step", True),
        ("/world/cell/*/*/*/step", "/world/cell/demo/Counter@1/ab12/failed", False),
        ("/a.b/*", "/aXb/c", False),
    ],
)
def test_subject_pattern_matches_segment_wise(pattern: str, subject: str, expected: bool) -> None:
    assert subject_matches(pattern, subject) is expected
    assert SubjectPattern.compile(pattern).matches(subject) is expected


@pytest.mark.parametrize("pattern", ["", "world/**", "/", "/a/**/b", "/a/>/b", "/a/ord*", "/a//b"])
def test_malformed_subject_patterns_are_rejected(pattern: str) -> None:
    with pytest.raises(UsageError):
        subject_matches(pattern, "/a")


@pytest.mark.parametrize(
    "subject", ["", "a/b", "/", "/a/", "/a//b", "/a/*", "/a/>", "/a b", "/a/\ud800", b"/a"]
)
def test_malformed_subjects_are_rejected(subject: str) -> None:
    journal = MemoryJournal()
    with pytest.raises(UsageError):
        journal.append("event.in", subject, None)
    assert journal.seq_next == 0


def test_subject_helpers_build_the_documented_paths() -> None:
    key_hash, intent_hash = bytes(range(32)), bytes(32)
    assert event_subject("demo/CounterEvent@1") == EVENT
    assert cell_subject("demo/Counter@1", key_hash) == (
        f"/world/cell/demo/Counter@1/{key_hash.hex()}/step"
    )
    assert effect_subject(intent_hash, "receipt") == f"/world/effect/{'00' * 32}/receipt"
    assert make_subject("world", "snapshot") == "/world/snapshot"
    assert subject_matches("/world/cell/demo/*/*/step", cell_subject("demo/Counter@1", key_hash))


def test_cell_subjects_are_checked_by_their_parts_every_time() -> None:
    key_hash = bytes(range(32))
    for _ in range(2):  # a refused part is never cached as checked
        with pytest.raises(UsageError):
            cell_subject("bad name", key_hash)
        with pytest.raises(UsageError):
            cell_subject("demo/Counter@1", key_hash, "two words")
    with pytest.raises(UsageError):
        cell_subject("demo/Counter@1", b"")  # an empty segment, even after a good one
    journal = MemoryJournal()
    for n in range(3):  # new hashes under a checked template journal as any subject does
        subject = cell_subject("demo/Counter@1", bytes([n]) * 32)
        assert subject == f"/world/cell/demo/Counter@1/{(bytes([n]) * 32).hex()}/step"
        journal.append("step", subject, {"n": n})
    assert [r.subject for r in journal.read()] == [
        cell_subject("demo/Counter@1", bytes([n]) * 32) for n in range(3)
    ]


@given(parts=st.lists(_segments, min_size=1, max_size=5), cut=st.integers(0, 5))
def test_a_trailing_double_star_matches_every_extension_of_its_prefix(
    parts: list[str], cut: int
) -> None:
    subject = "/" + "/".join(parts)
    prefix = parts[: min(cut, len(parts))]
    assert subject_matches("/" + "/".join([*prefix, "**"]), subject)
    assert subject_matches("/" + "/".join(["*"] * len(parts)), subject)


# --- the contract, against every backend ------------------------------------------------------


@dataclass
class Backend:
    name: str
    open: Callable[..., Journal]
    reopen: Callable[[Journal], Journal]


def _memory_backend() -> Backend:
    def reopen(journal: Journal) -> Journal:
        committed = list(journal.read(committed_only=True))
        journal.close()
        return MemoryJournal(committed, check_writes=True)

    return Backend("memory", lambda **kw: MemoryJournal(check_writes=True, **kw), reopen)


def _file_backend(directory: Path) -> Backend:
    options = {"check_writes": True, "check_reads": True, "segment_bytes_max": 1024}

    def reopen(journal: Journal) -> Journal:
        journal.close()
        return FileJournal(directory, **options)

    return Backend("file", lambda **kw: FileJournal(directory, **(options | kw)), reopen)


@pytest.fixture(params=["memory", "file"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "memory":
        return _memory_backend()
    return _file_backend(tmp_path / "journal")


@pytest.fixture
def journal(backend: Backend) -> Iterator[Journal]:
    opened = backend.open()
    yield opened
    opened.close()


def _fill(journal: Journal, count: int, subject: str = EVENT) -> list[int]:
    return [journal.append("event.in", subject, {"n": n}) for n in range(count)]


def test_backend_implements_the_journal_protocol(journal: Journal) -> None:
    assert isinstance(journal, Journal)


def test_append_assigns_consecutive_seqs_from_zero(journal: Journal) -> None:
    assert journal.seq_next == 0
    assert _fill(journal, 5) == [0, 1, 2, 3, 4]
    assert journal.seq_next == 5


def test_appended_records_are_not_committed_until_commit(journal: Journal) -> None:
    _fill(journal, 3)
    assert journal.seq_next_committed == 0
    assert journal.commit() == 3
    assert journal.seq_next_committed == 3
    assert journal.commit() == 3


def test_read_returns_every_record_in_seq_order_with_its_fields(journal: Journal) -> None:
    journal.append("event.in", EVENT, {"n": 0})
    journal.append("step", "/world/cell/demo/Counter@1/ab/step", {"state": b"\x01"})
    journal.commit()
    assert list(journal.read()) == [
        JournalRecord(0, EVENT, "event.in", {"n": 0}),
        JournalRecord(1, "/world/cell/demo/Counter@1/ab/step", "step", {"state": b"\x01"}),
    ]


def test_read_includes_uncommitted_records_for_the_writer(journal: Journal) -> None:
    _fill(journal, 2)
    journal.commit()
    _fill(journal, 2)
    assert [record.seq for record in journal.read()] == [0, 1, 2, 3]
    assert [record.seq for record in journal.read(committed_only=True)] == [0, 1]


def test_read_from_a_cursor_starts_at_that_seq(journal: Journal) -> None:
    _fill(journal, 30)
    journal.commit()
    _fill(journal, 5)
    for cursor in (0, 1, 17, 29, 30, 34):
        assert [record.seq for record in journal.read(cursor)] == list(range(cursor, 35))
    assert list(journal.read(35)) == []
    assert list(journal.read(1000)) == []


def test_read_filters_by_subject_pattern(journal: Journal) -> None:
    journal.append("event.in", EVENT, 0)
    journal.append("step", "/world/cell/demo/Counter@1/aa/step", 1)
    journal.append("effect.intent", "/world/effect/ff/intent", 2)
    journal.append("step", "/world/cell/demo/Counter@1/bb/step", 3)
    journal.commit()
    assert [r.body for r in journal.read(subject_pattern="/world/cell/**")] == [1, 3]
    assert [r.body for r in journal.read(2, "/world/cell/*/*/*/step")] == [3]
    assert [r.body for r in journal.read(subject_pattern="/world/*/ff/intent")] == [2]


def test_read_does_not_yield_records_appended_after_the_call(journal: Journal) -> None:
    _fill(journal, 2)
    reader = journal.read()
    _fill(journal, 2)
    journal.commit()
    assert [record.seq for record in reader] == [0, 1]


def test_reopen_keeps_committed_records_and_drops_uncommitted_ones(backend: Backend) -> None:
    journal = backend.open()
    _fill(journal, 4)
    journal.commit()
    _fill(journal, 3)
    reopened = backend.reopen(journal)
    assert reopened.seq_next == reopened.seq_next_committed == 4
    assert [record.body for record in reopened.read()] == [{"n": n} for n in range(4)]
    assert reopened.append("event.in", EVENT, "next") == 4
    reopened.close()


def test_append_many_appends_a_range_of_seqs(journal: Journal) -> None:
    journal.append("event.in", EVENT, 0)
    assert journal.append_many([("step", EVENT, 1), ("step", EVENT, 2)]) == range(1, 3)
    assert [record.body for record in journal.read()] == [0, 1, 2]


def test_append_many_appends_nothing_when_one_entry_is_bad(journal: Journal) -> None:
    with pytest.raises(CborError):
        journal.append_many([("step", EVENT, 1), ("step", EVENT, 1.5), ("step", EVENT, 3)])
    assert journal.seq_next == 0


def test_a_body_outside_the_value_model_is_rejected_without_using_a_seq(journal: Journal) -> None:
    with pytest.raises(CborError):
        journal.append("event.in", EVENT, {"x": 0.5})
    with pytest.raises(UsageError):
        journal.append("Not A Kind", EVENT, None)
    assert journal.append("event.in", EVENT, None) == 0


def test_a_record_over_the_size_limit_raises_limit_exceeded(backend: Backend) -> None:
    journal = backend.open(record_bytes_max=200)
    journal.append("event.in", EVENT, b"x" * 100)
    with pytest.raises(LimitExceeded) as raised:
        journal.append("event.in", EVENT, b"x" * 200)
    assert raised.value.limit == "journal.record_bytes_max"
    assert journal.seq_next == 1
    journal.close()


def test_bodies_read_back_as_canonical_values_unaffected_by_later_mutation(
    journal: Journal,
) -> None:
    body: dict[str, Any] = {"z": (1, 2), "a": {"k": [b"v"]}}
    journal.append("event.in", EVENT, body)
    body["a"]["k"].append(b"w")
    journal.commit()
    (record,) = journal.read()
    assert record.body == {"a": {"k": [b"v"]}, "z": [1, 2]}
    assert list(record.body) == ["a", "z"]


def test_a_closed_journal_refuses_to_be_used(journal: Journal) -> None:
    journal.close()
    with pytest.raises(UsageError):
        journal.append("event.in", EVENT, None)
    with pytest.raises(UsageError):
        journal.commit()
    with pytest.raises(UsageError):
        journal.read()


@pytest.mark.parametrize(("from_seq", "pattern"), [(-1, None), (0, "no-slash"), (0, "/a/**/b")])
def test_read_rejects_a_bad_cursor_or_pattern(
    journal: Journal, from_seq: int, pattern: str | None
) -> None:
    with pytest.raises(UsageError):
        journal.read(from_seq, pattern)
