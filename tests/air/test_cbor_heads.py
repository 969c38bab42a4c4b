"""Every CBOR head at every width boundary, through both strict decoders: canonical means
canonical in C too.

RFC 8949 §4.2.1 writes a head's argument in the fewest bytes that hold it: in the first byte
below 24, then in 1, 2, 4 or 8 bytes. Each width boundary (23/24, 255/256, 65,535/65,536,
2**32-1/2**32) is where an off-by-one lets a longer head through, such as 255 written
``19 00 ff``. For major types 0 to 6 the table below holds, at 0, on each side of every boundary
and at 2**64-1, the shortest head and every longer one, each followed by what the head
announces (the bytes, the text, the array's items, the map's entries, the tag's content). The
shortest head is accepted with the expected value and every longer one is refused, by
``air.cbor.loads`` and by the C decoder (``kernel/native/cbor.c``) alike. Two groups are refused
in their canonical form too, for a reason that has nothing to do with the head, and both decoders
give that refusal:

- tags other than 2000 (dec128), the only tag of the value model ("unsupported tag"; cbor2
  gives some tags a meaning of its own, so the reference's error code varies with the tag);
- lengths of 2**32-1 and more, whose payload (4 GiB and up) the table does not build: the input
  stops after the head ("truncated"). ``uint`` and ``nint`` check those heads in full.

A few rows next to the table cover the other heads the value model has: the dec128 tag's
16-byte content with a longer head, and false, true and null written as two-byte simple values.

The C decoder is reached through every entry point of the extension that decodes CBOR
(``kernel/native/_native.pyi``; ``encode_*``, ``dumps``, ``normalise`` and the shard functions
only encode or copy):

- ``loads``: ``native_decode`` over the item alone;
- ``decode_output``, the item as the state payload of a reducer's output envelope (what
  ``kernel.abi.decode_output`` calls): ``native_decode`` over the envelope, then over the state;
- ``decode_output``, the item as a domain event's key: ``native_is_canonical``, the walk that
  checks without building objects;
- ``decode_record``, the item as a journal record's body: ``native_decode`` over the record
  map, the item nested in it.

Each is set beside its pure-Python reference on the same bytes: ``air.cbor.loads``,
``kernel.abi.decode_output`` and ``kernel.journal.decode_record`` with the native path off. The C
code never refuses by raising: it declines ("not mine": ``ValueError`` from ``loads``, ``None``
from the others) and the wrapper in ``kernel.native`` or ``kernel.abi`` runs the reference,
which decides. So every "refused" of the C half below is a decline, and the test checks that the
reference then refuses too; a decline of a canonical row would be allowed by that contract but
would leave the row testing nothing, so the C half must accept those.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import pytest
from fuzzkit import REFUSED, load_oracle, native_loads, python_loads

from air import cbor
from air.errors import CborError
from kernel import abi, journal, native
from kernel.errors import StepRejected

native_only = pytest.mark.skipif(
    not native.available(), reason="the native extension is not built: no C decoder to check"
)

BOUNDARIES: Final = (0, 23, 24, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 2**64 - 1)
_LABELS: Final = {2**32 - 1: "2^32-1", 2**32: "2^32", 2**64 - 1: "2^64-1"}
_AI: Final = {1: 24, 2: 25, 4: 26, 8: 27}
"""The additional information that announces an argument of 1, 2, 4 or 8 bytes."""
_WIDTHS: Final = {0: "imm", 1: "u8", 2: "u16", 4: "u32", 8: "u64"}
_MAJORS: Final = ("uint", "nint", "bytes", "text", "array", "map", "tag")
BUILT_LENGTH_MAX: Final = 65_536
"""Longest bytes, text, array or map the table builds; past it the input stops at the head."""
DEC128: Final = 2000
_DEC128_CONTENT: Final = b"\x50" + bytes(16)

OVERLONG: Final = "over-long head"
UNSUPPORTED_TAG: Final = "unsupported tag"
TRUNCATED: Final = "truncated"
ILL_FORMED: Final = "not well-formed"
_REFERENCE_CODES: Final = {
    OVERLONG: {"non_canonical"},
    TRUNCATED: {"malformed"},
    ILL_FORMED: {"malformed"},
    UNSUPPORTED_TAG: {"malformed", "non_canonical", "tag.unsupported", "type.unsupported"},
}
"""The ``CborError`` codes ``air.cbor.loads`` gives for each reason of refusal."""


@dataclass(frozen=True)
class Row:
    """One item: its bytes, and the value both decoders give or why both refuse it."""

    name: str
    item: bytes
    value: Any = None
    refused: str | None = None


def head(major: int, value: int, width: int) -> bytes:
    """The head of ``value`` in ``major`` with an argument of ``width`` bytes (0: in the first
    byte), shortest or not."""
    if width == 0:
        return bytes((major << 5 | value,))
    return bytes((major << 5 | _AI[width],)) + value.to_bytes(width, "big")


def widths(value: int) -> list[int]:
    """Every argument width that holds ``value``, the shortest (the canonical one) first."""
    return [w for w in _WIDTHS if (value < 24 if w == 0 else value < 1 << (8 * w))]


def _content(major: int, n: int) -> tuple[bytes, Any, str | None]:
    """What the head ``(major, n)`` announces: its bytes, its value, or why both refuse."""
    if major == 0:
        return b"", n, None
    if major == 1:
        return b"", -1 - n, None
    if major == 6:
        if n == DEC128:
            return _DEC128_CONTENT, cbor.Tag(DEC128, bytes(16)), None
        return _DEC128_CONTENT, None, UNSUPPORTED_TAG
    if n > BUILT_LENGTH_MAX:
        return b"", None, TRUNCATED
    if major == 2:
        return bytes(n), bytes(n), None
    if major == 3:
        return b"a" * n, "a" * n, None
    if major == 4:
        return b"\x00" * n, [0] * n, None
    # Keys 0..n-1: ascending ints encode in ascending bytewise order, as canonical maps need.
    return b"".join(cbor.head(0, k) + b"\x00" for k in range(n)), dict.fromkeys(range(n), 0), None


def _boundary_rows() -> Iterator[Row]:
    for major, major_name in enumerate(_MAJORS):
        values = BOUNDARIES + ((DEC128,) if major == 6 else ())
        for value in values:
            content, decoded, refused = _content(major, value)
            for rank, width in enumerate(widths(value)):
                form = "canonical" if rank == 0 else "overlong"
                name = f"{major_name}-{_LABELS.get(value, value)}-{_WIDTHS[width]}-{form}"
                item = head(major, value, width) + content
                if rank == 0:
                    yield Row(name, item, decoded, refused)
                else:
                    yield Row(name, item, refused=refused or OVERLONG)


def _neighbour_rows() -> Iterator[Row]:
    tag = head(6, DEC128, 2)
    yield Row("dec128-content-imm-canonical", tag + _DEC128_CONTENT, cbor.Tag(DEC128, bytes(16)))
    for width in (1, 2, 4, 8):
        name = f"dec128-content-{_WIDTHS[width]}-overlong"
        yield Row(name, tag + head(2, 16, width) + bytes(16), refused=OVERLONG)
    for simple, label, value in ((20, "false", False), (21, "true", True), (22, "null", None)):
        yield Row(f"simple-{label}-imm-canonical", bytes((0xE0 | simple,)), value)
        # A simple value below 32 in the two-byte form is not even well-formed (RFC 8949 §3.3).
        yield Row(f"simple-{label}-u8-overlong", bytes((0xF8, simple)), refused=ILL_FORMED)


ROWS: Final = [*_boundary_rows(), *_neighbour_rows()]


def _ids(row: Row) -> str:
    return row.name


def test_the_table_covers_every_major_type_at_every_boundary() -> None:
    names = {row.name for row in ROWS}
    for major_name in _MAJORS:
        for value in BOUNDARIES:
            label = _LABELS.get(value, value)
            shortest = _WIDTHS[widths(value)[0]]
            longest = "canonical" if value >= 2**32 else "overlong"
            assert f"{major_name}-{label}-{shortest}-canonical" in names
            assert f"{major_name}-{label}-u64-{longest}" in names
    assert sum(row.refused == OVERLONG for row in ROWS) > 100
    assert len(names) == len(ROWS)


def test_the_table_builds_heads_like_the_encoder() -> None:
    for major in range(7):
        for value in BOUNDARIES:
            assert head(major, value, widths(value)[0]) == cbor.head(major, value)


# --- the pure-Python decoder ----------------------------------------------------------------


@pytest.mark.parametrize("row", ROWS, ids=_ids)
def test_python_decoder_accepts_only_the_shortest_head(row: Row) -> None:
    if row.refused is None:
        value = cbor.loads(row.item)
        assert type(value) is type(row.value)
        assert value == row.value
        return
    with pytest.raises(CborError) as caught:
        cbor.loads(row.item)
    assert caught.value.code in _REFERENCE_CODES[row.refused]


# --- the C decoder, through each entry point, beside its reference ---------------------------

_RECORD_HEAD: Final = b"\xa4\x63seq\x00\x64body"
_RECORD_TAIL: Final = (
    cbor.dumps("kind") + cbor.dumps("step") + cbor.dumps("subject") + cbor.dumps("/world/a/b")
)


def as_record_body(item: bytes) -> bytes:
    """A journal record payload (seq 0, kind ``step``) with ``item`` as its body, as it is."""
    return _RECORD_HEAD + item + _RECORD_TAIL


def as_state(item: bytes) -> bytes:
    """A reducer output envelope whose state payload is ``item``."""
    return cbor.dumps({"state": item})


def as_event_key(item: bytes) -> bytes:
    """A reducer output envelope with one domain event whose key payload is ``item``."""
    event = {"schema": "t/E@1", "value": b"\x00", "key": item}
    return cbor.dumps({"state": None, "domain_events": [event]})


@contextmanager
def native_switched(flag: bool) -> Iterator[None]:
    """The native path on (where built) or off, then back to what it was."""
    was = native.enabled()
    native.set_enabled(flag)
    try:
        yield
    finally:
        native.set_enabled(was)


def _state_of(found: abi.StepOutput | None) -> Any:
    return REFUSED if found is None else found.values.state  # type: ignore[union-attr]


def _key_of(found: abi.StepOutput | None) -> Any:
    return REFUSED if found is None else found.domain_events[0].key_cbor


def _python_output(data: bytes) -> abi.StepOutput | None:
    with native_switched(False):
        try:
            return abi.decode_output(data, module="m")
        except StepRejected:
            return None


def _body_of(found: tuple[int, str, str, Any] | None) -> Any:
    return REFUSED if found is None else found[3]


def _python_record(data: bytes) -> tuple[int, str, str, Any] | None:
    with native_switched(False):
        try:
            record = journal.decode_record(data)
        except CborError:
            return None
    return record.seq, record.subject, record.kind, record.body


@dataclass(frozen=True)
class Entry:
    """An entry point of the C decoder: how a row's item is wrapped for it, what it answers (the
    value it found, or ``REFUSED`` when it declines), its reference's answer, and what an
    accepted row must give."""

    name: str
    wrap: Callable[[bytes], bytes]
    c: Callable[[bytes], Any]
    python: Callable[[bytes], Any]
    expected: Callable[[Row], Any]


ENTRIES: Final = [
    Entry("loads", bytes, native_loads, python_loads, lambda row: row.value),
    Entry(
        "decode_output-state",
        as_state,
        lambda data: _state_of(native.built().decode_output(data)),
        lambda data: _state_of(_python_output(data)),
        lambda row: row.value,
    ),
    Entry(
        "decode_output-event-key",
        as_event_key,
        lambda data: _key_of(native.built().decode_output(data)),
        lambda data: _key_of(_python_output(data)),
        lambda row: row.item,
    ),
    Entry(
        "decode_record-body",
        as_record_body,
        lambda data: _body_of(native.built().decode_record(data)),
        lambda data: _body_of(_python_record(data)),
        lambda row: row.value,
    ),
]


def test_an_item_wrapped_for_an_entry_point_sits_in_canonical_bytes() -> None:
    assert as_record_body(cbor.dumps(None)) == journal.encode_record(0, "/world/a/b", "step", None)
    with native_switched(False):
        assert abi.decode_output(as_state(b"\x01")).values.state == 1  # type: ignore[union-attr]
        assert abi.decode_output(as_event_key(b"\x01")).domain_events[0].key_cbor == b"\x01"


@native_only
@pytest.mark.parametrize("row", ROWS, ids=_ids)
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry.name)
def test_c_decoder_accepts_only_the_shortest_head(entry: Entry, row: Row) -> None:
    data = entry.wrap(row.item)
    ours, theirs = entry.c(data), entry.python(data)
    if row.refused is not None:
        assert theirs is REFUSED, "the reference accepted it"
        assert ours is REFUSED, f"the C decoder accepted it as {ours!r}"
        return
    wanted = entry.expected(row)
    assert type(theirs) is type(wanted)
    assert theirs == wanted
    assert type(ours) is type(wanted), "the C decoder declined or changed the type"
    assert ours == wanted


@native_only
def test_the_native_face_refuses_what_the_c_decoder_declines() -> None:
    # The wrapper kernel.native.loads runs the reference after a decline: the same CborError.
    with native_switched(True):
        for row in ROWS:
            if row.refused == OVERLONG:
                with pytest.raises(CborError) as caught:
                    native.loads(row.item)
                assert caught.value.code in _REFERENCE_CODES[OVERLONG], row.name


# --- the fuzzer starts from the table -------------------------------------------------------


def test_every_fuzz_run_starts_from_the_boundary_heads() -> None:
    # tools/fuzz/native_oracle.seed_corpus seeds tests/kernel/native/test_native_fuzz.py's mutation loop, the
    # random loop of tools/fuzz/fuzz_native.py and its atheris corpus; its items are built by
    # its own code, so that a slip in one table shows as a difference here.
    # The seeds build lengths up to 256 (a map of 256 entries is 747 bytes) and stop longer ones
    # at their heads, as the table does from 2**32-1: every row of up to 1 KiB is a seed.
    oracle = load_oracle()
    seeds = set(oracle.seed_corpus(random.Random(0), 1))
    small = [row for row in ROWS if len(row.item) <= 1024]
    assert len(small) > 150
    for row in small:
        assert row.item in seeds, row.name
        assert as_state(row.item) in seeds, row.name
        assert as_record_body(row.item) in seeds, row.name
