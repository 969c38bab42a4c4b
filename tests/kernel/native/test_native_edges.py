"""The C decoder and normaliser at their edges: the inputs on either side of each limit and
check, held to the pure-Python reference (they kill mutants the rest of the suite let live).

A mutation run over ``kernel/native/cbor.c``'s decoder (TESTING.md, "Mutation testing") left a
few changed programs that every native test passed. The ones that change behaviour at all (the
others are listed there as equivalent) are caught here, each by specific byte strings set beside
the pure-Python reference in the style of ``tests/kernel/native/test_native_parity.py``: the C decoder must
accept exactly what ``air.cbor.loads`` accepts, with the same value, and decline the rest.

- Maps nest under the same limit as arrays (``CBOR_DEPTH_MAX``). The existing depth checks
  nested arrays only, so five mutants of the map case went unseen: its depth check deleted or
  made ``depth > NATIVE_CBOR_DEPTH_MAX``, and its depth step made ``depth + 0``, ``+ 2`` or
  ``- 1`` (deleted, ``+ 0`` and ``- 1`` remove the limit for maps, and a deep enough input
  overflows the C stack).
- The check of a domain event's key (``native_is_canonical``) builds no objects. Built with the
  ``build`` flag set, it gives the same answers but leaks every object it makes, which no answer
  shows; the memory it holds does. Started at depth 1 instead of 0 it declines a key nested
  exactly ``CBOR_DEPTH_MAX`` deep, which the reference takes.
- The extension's ``loads`` takes exact ``bytes`` only and raises ``TypeError`` for anything
  else. ``kernel.native.loads`` never hands it anything else, so nothing called it that way; with
  the ``return NULL`` after that error deleted it reads a non-bytes object as bytes.

A sample of ``kernel/native/norm.c`` (the schema normaliser) left more of the same kind: a
``hash`` of a ``uuid``'s length taken, a short program tuple read past its end, and declines of
ordinary values (every ``nat`` below 2**63, every record with a field given or an option field
absent, every list) that the one-sided contract allows but that leave the native path serving
nothing. The table at the end holds ``normalise`` to its reference on both sides of each of
those lines.
"""

from __future__ import annotations

import tracemalloc
from typing import Any, Final

import pytest
from fuzzkit import REFUSED, native_loads, python_loads

from air import cbor
from air.errors import WorldError
from air.types import ListT, OptionT, Prim, Record, TypeNode, Variant
from air.values import normalise
from kernel import abi, native
from kernel.errors import StepRejected

pytestmark = pytest.mark.skipif(
    not native.available(), reason="the native extension is not built: no C decoder to check"
)


def _c_key_ok(item: bytes) -> bool:
    """Whether ``native_is_canonical`` (the walk that builds nothing) takes ``item`` as a domain
    event's key payload."""
    event = {"schema": "t/E@1", "value": b"\x00", "key": item}
    found = native.built().decode_output(cbor.dumps({"state": None, "domain_events": [event]}))
    return found is not None


def _python_key_ok(item: bytes) -> bool:
    event = {"schema": "t/E@1", "value": b"\x00", "key": item}
    was = native.enabled()
    native.set_enabled(False)
    try:
        abi.decode_output(cbor.dumps({"state": None, "domain_events": [event]}), module="m")
    except StepRejected:
        return False
    finally:
        native.set_enabled(was)
    return True


def assert_same(data: bytes) -> Any:
    """The C decoder and the reference agree on ``data`` (value and type, or both refuse);
    returns the reference's answer."""
    ours, theirs = native_loads(data), python_loads(data)
    if theirs is REFUSED:
        assert ours is REFUSED, f"the C decoder accepted {data[:16].hex()}... as {ours!r}"
    else:
        assert ours is not REFUSED, f"the C decoder declined {data[:16].hex()}..."
        assert cbor.dumps(ours) == cbor.dumps(theirs) == data
    assert _c_key_ok(data) is _python_key_ok(data), data[:16].hex()
    return theirs


def nested_maps(depth: int) -> bytes:
    """``{0: {0: ... {0: 0}}}`` with ``depth`` maps."""
    return b"\xa1\x00" * depth + b"\x00"


def nested_mixed(depth: int) -> bytes:
    """Arrays and maps in turn, ``depth`` of them, a map outermost: ``{0: [{0: [... 0]}]}``."""
    return b"".join(b"\xa1\x00" if i % 2 == 0 else b"\x81" for i in range(depth)) + b"\x00"


@pytest.mark.parametrize("depth", [1, 2, 128, 255, 256, 257, 300])
def test_nested_maps_stop_at_the_same_depth_as_the_reference(depth: int) -> None:
    # Kills: decode_item's map case "depth >= NATIVE_CBOR_DEPTH_MAX" -> ">" (257 accepted),
    # "depth + 1" -> "depth + 2" (129 and up declined), "depth + 1" -> "depth - 1" (no limit).
    answer = assert_same(nested_maps(depth))
    assert (answer is REFUSED) is (depth > cbor.CBOR_DEPTH_MAX)


@pytest.mark.parametrize("depth", [255, 256, 257])
def test_arrays_and_maps_in_turn_stop_at_the_same_depth(depth: int) -> None:
    answer = assert_same(nested_mixed(depth))
    assert (answer is REFUSED) is (depth > cbor.CBOR_DEPTH_MAX)


def test_maps_nested_far_past_the_limit_are_declined_not_recursed() -> None:
    # With no depth limit for maps the C decoder would recurse 200,000 frames deep.
    assert native_loads(nested_maps(200_000)) is REFUSED


def test_the_key_check_builds_nothing_and_keeps_nothing() -> None:
    # Kills: native_is_canonical's "dec_t d = {data, data + len, 0}" -> "1" (same answers, but
    # each checked key is decoded into a Python object that is never released).
    key = cbor.dumps(bytes(4096))
    event = {"schema": "t/E@1", "value": b"\x00", "key": key}
    raw = cbor.dumps({"state": None, "domain_events": [event]})
    decode_output = native.built().decode_output
    assert decode_output(raw) is not None
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(100):
            decode_output(raw)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 100 * 4096 // 4, f"{grown} bytes kept after 100 key checks"


@pytest.mark.parametrize("arg", [bytearray(b"\x00"), memoryview(b"\x00"), "\x00", 0, None])
def test_the_extension_loads_refuses_what_is_not_bytes(arg: Any) -> None:
    # Kills: native_py_loads' "return NULL;" after "loads takes bytes" deleted.
    with pytest.raises(TypeError, match="loads takes bytes"):
        native.built().loads(arg)


_POINT = Record((("x", Prim("nat")), ("label", OptionT(Prim("text")))))
_SHAPE = Variant((("Dot", Prim("unit")), ("Line", ListT(Prim("int")))))
NORMALISE: Final[list[tuple[str, TypeNode, Any]]] = [
    ("nat-neg-1", Prim("nat"), -1),
    ("nat-neg-2^63", Prim("nat"), -(2**63)),
    ("nat-0", Prim("nat"), 0),
    ("nat-1", Prim("nat"), 1),
    ("nat-2^63", Prim("nat"), 2**63),
    ("nat-2^64-1", Prim("nat"), 2**64 - 1),
    ("nat-2^64", Prim("nat"), 2**64),
    ("int-neg-2^63", Prim("int"), -(2**63)),
    ("int-2^63-1", Prim("int"), 2**63 - 1),
    ("hash-31", Prim("hash"), bytes(31)),
    ("hash-32", Prim("hash"), bytes(32)),
    ("hash-33", Prim("hash"), bytes(33)),
    ("hash-16", Prim("hash"), bytes(16)),
    ("uuid-15", Prim("uuid"), bytes(15)),
    ("uuid-16", Prim("uuid"), bytes(16)),
    ("uuid-17", Prim("uuid"), bytes(17)),
    ("uuid-32", Prim("uuid"), bytes(32)),
    ("record-all-given", _POINT, {"x": 1, "label": "a"}),
    ("record-option-absent", _POINT, {"x": 0}),
    ("record-missing", _POINT, {"label": "a"}),
    ("record-extra", _POINT, {"x": 1, "y": 2}),
    ("variant-unit", _SHAPE, {"$tag": "Dot"}),
    ("variant-list", _SHAPE, {"$tag": "Line", "$value": [-1, 0, 1]}),
    ("list-of-records", ListT(_POINT), [{"x": 2}, {"x": 3, "label": None}]),
]


@pytest.mark.parametrize(
    ("node", "value"), [row[1:] for row in NORMALISE], ids=[row[0] for row in NORMALISE]
)
def test_normalise_takes_what_the_reference_takes_and_declines_the_rest(
    node: TypeNode, value: Any
) -> None:
    # Kills (norm.c): norm_prim's "code == PRIM_NAT && !overflow && v >= 0" with "!=" (every
    # nat below 2**63 declined) and the hash/uuid length "code == PRIM_HASH ? 32 : 16" with
    # "!=" (a 16-byte hash taken); norm_record's field program "PyTuple_GET_ITEM(field, 1)" ->
    # "2" (every given field declined) and option flag "PyTuple_GET_ITEM(field, 2)" -> "3" (an
    # absent option declined); norm_list's item program "PyTuple_GET_ITEM(prog, 2)" -> "1".
    try:
        theirs = normalise(node, value, {})
    except WorldError:
        theirs = REFUSED
    try:
        ours = native.built().normalise(native.norm_program(node, {}), value)
    except ValueError:  # "not mine"
        ours = REFUSED
    if theirs is REFUSED:
        assert ours is REFUSED, f"the C normaliser took {value!r} as {ours!r}"
    else:
        assert ours is not REFUSED, f"the C normaliser declined {value!r}"
        assert cbor.dumps(ours) == cbor.dumps(theirs)


@pytest.mark.parametrize("program", [(), (0,), (1,), [0, "nat", 2], "nat"])
def test_normalise_declines_a_program_that_is_not_one(program: Any) -> None:
    # Kills (norm.c): norm's "!PyTuple_CheckExact(prog) || PyTuple_GET_SIZE(prog) < 2" with
    # "&&" (a short tuple is read past its end).
    with pytest.raises(ValueError, match="not mine"):
        native.built().normalise(program, 1)
