"""AIR types and values: both JSON lenses, normalisation, strict checks, display, hashing."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from air import SchemaCheckers, cbor, compile_checker
from air._checkers import dec128_is_canonical
from air.errors import ValueMismatch
from air.types import (
    MAP_KEY_PRIMS,
    PRIMS,
    ListT,
    MapT,
    OptionT,
    Prim,
    Record,
    Ref,
    Schemas,
    SetT,
    TypeNode,
    Variant,
    parse_type,
    resolve,
    schema_hash,
    type_to_obj,
)
from air.values import (
    INT_MAX,
    INT_MIN,
    NAT_MAX,
    check,
    dec128_decode,
    dec128_encode,
    normalise,
    to_sugar,
    value_hash,
)

ORDER = parse_type(
    {
        "record": {
            "id": "uuid",
            "tags": {"set": "text"},
            "lines": {"map": {"key": "nat", "value": "dec128"}},
            "state": {"variant": {"Open": "unit", "Paid": "time"}},
            "note": {"option": "text"},
            "blob": "bytes",
            "ref": "hash",
            "ttl": "duration",
        }
    }
)
SCHEMAS = {"shop/Order@1": ORDER}
HASH = "blake3:" + "ab" * 32
SUGAR = {
    "id": "01234567-89ab-cdef-0123-456789abcdef",
    "tags": ["b", "a", "b"],
    "lines": {"10": "1.50", "2": "3"},
    "state": {"$tag": "Paid", "$value": "2024-02-29T12:00:00.25+01:00"},
    "blob": "AQI=",
    "ref": HASH,
    "ttl": "90s",
}
TAGGED = {
    "record": {
        "id": {"uuid": "01234567-89AB-CDEF-0123-456789ABCDEF"},
        "tags": {"set": [{"text": "a"}, {"text": "b"}]},
        "lines": {"map": [[2, {"dec128": "3.000"}], {"key": 10, "value": "1.5"}]},
        "state": {"variant": {"tag": "Paid", "value": {"time": "2024-02-29T11:00:00.250Z"}}},
        "note": {"option": None},
        "blob": {"bytes": "AQI="},
        "ref": {"hash": HASH},
        "ttl": {"duration": 90_000_000_000},
    }
}


def test_sugar_and_tagged_lenses_normalise_to_the_same_bytes() -> None:
    a = normalise(Ref("shop/Order@1"), SUGAR, SCHEMAS)
    b = normalise(Ref("shop/Order@1"), TAGGED, SCHEMAS)
    assert cbor.dumps(a) == cbor.dumps(b)
    assert a["tags"] == ["a", "b"]
    assert list(a["lines"]) == [2, 10]
    assert a["note"] is None
    assert a["state"] == {"$tag": "Paid", "$value": 1709204400250000000}


def test_normalised_value_passes_the_strict_check_after_a_cbor_round_trip() -> None:
    value = normalise(ORDER, SUGAR, SCHEMAS)
    check(ORDER, cbor.loads(cbor.dumps(value)), SCHEMAS)


def test_to_sugar_round_trips_through_normalise() -> None:
    value = normalise(ORDER, SUGAR, SCHEMAS)
    sugar = to_sugar(ORDER, value, SCHEMAS)
    assert sugar["state"]["$value"] == "2024-02-29T11:00:00.25Z"
    assert sugar["ref"] == HASH
    assert normalise(ORDER, sugar, SCHEMAS) == value


@pytest.mark.parametrize(
    ("type_json", "value", "code", "pointer"),
    [
        pytest.param("nat", -1, "range", "/", id="negative-nat"),
        pytest.param("nat", 2**64, "range", "/", id="nat-overflow"),
        pytest.param("int", 2**63, "range", "/", id="int-overflow"),
        pytest.param("int", True, "type", "/", id="bool-is-not-int"),
        pytest.param("bytes", "!!", "bytes.base64", "/", id="bad-base64"),
        pytest.param("hash", "blake3:00", "hash.format", "/", id="short-hash"),
        pytest.param("time", "2023-02-29T00:00:00Z", "time.format", "/", id="no-such-date"),
        pytest.param("dec128", "1" * 35, "dec128.range", "/", id="too-many-digits"),
        pytest.param({"record": {"a": "nat"}}, {}, "record.missing", "/a", id="missing-field"),
        pytest.param(
            {"record": {"a": "nat"}}, {"a": 1, "b": 2}, "record.extra", "/b", id="extra-field"
        ),
        pytest.param({"variant": {"A": "unit"}}, "B", "variant.tag", "/$tag", id="unknown-case"),
        pytest.param({"list": "nat"}, [1, "x"], "type", "/1", id="bad-list-item"),
        pytest.param(
            {"map": {"key": "nat", "value": "nat"}},
            {"1": 1, "01": 2},
            "map.duplicate",
            "/01",
            id="dup-key",
        ),
    ],
)
def test_bad_values_are_rejected_with_code_and_pointer(
    type_json: Any, value: Any, code: str, pointer: str
) -> None:
    with pytest.raises(ValueMismatch) as info:
        normalise(parse_type(type_json), value, {})
    assert (info.value.code, info.value.pointer) == (code, pointer)


@pytest.mark.parametrize(
    ("node", "obj"),
    [
        pytest.param(SetT(Prim("text")), ["b", "a"], id="unsorted-set"),
        pytest.param(SetT(Prim("nat")), [1, 1], id="duplicate-set"),
        pytest.param(Prim("bytes"), "AQI=", id="sugar-bytes"),
        pytest.param(Prim("hash"), b"short", id="short-hash"),
        pytest.param(Record((("a", OptionT(Prim("nat"))),)), {}, id="omitted-option"),
        pytest.param(Variant((("A", Prim("unit")),)), "A", id="sugar-variant"),
    ],
)
def test_strict_check_accepts_only_the_canonical_form(node: Any, obj: Any) -> None:
    with pytest.raises(ValueMismatch):
        check(node, obj, {})


def test_dec128_is_canonical_regardless_of_trailing_zeros() -> None:
    assert dec128_encode(Decimal("1.50")) == dec128_encode(Decimal("1.5"))
    assert dec128_encode(Decimal("-0")) == dec128_encode(Decimal("0"))
    assert dec128_decode(dec128_encode(Decimal("-12.345")).value) == Decimal("-12.345")


@given(
    st.decimals(
        allow_nan=False, allow_infinity=False, places=6, min_value=-(10**20), max_value=10**20
    )
)
def test_dec128_round_trips(value: Decimal) -> None:
    assert dec128_decode(dec128_encode(value).value) == value


@given(st.integers(min_value=-(2**62), max_value=2**62))
def test_time_round_trips_through_rfc3339(ns: int) -> None:
    assert normalise(Prim("time"), to_sugar(Prim("time"), ns, {}), {}) == ns


@given(st.lists(st.text(max_size=4), max_size=8), st.randoms())
def test_set_order_and_duplicates_do_not_change_the_value(items: list[str], rnd: Any) -> None:
    shuffled = items[:]
    rnd.shuffle(shuffled)
    node = SetT(Prim("text"))
    assert cbor.dumps(normalise(node, items, {})) == cbor.dumps(
        normalise(node, shuffled + items, {})
    )


def test_both_type_forms_give_the_same_schema_hash() -> None:
    short = parse_type({"record": {"b": "nat", "a": {"list": "shop/X@1"}}})
    long = parse_type({"record": {"a": {"list": {"ref": "shop/X@1"}}, "b": {"nat": {}}}})
    assert short == long
    assert schema_hash(short) == schema_hash(long)
    assert type_to_obj(short) == {"record": {"a": {"list": {"ref": "shop/X@1"}}, "b": {"nat": {}}}}


@pytest.mark.parametrize(
    "bad",
    [
        "float",
        {"map": {"key": "bytes", "value": "nat"}},
        {"record": {"$x": "nat"}},
        {"list": "nat", "set": "nat"},
        3,
    ],
)
def test_malformed_types_are_rejected(bad: Any) -> None:
    with pytest.raises(ValueMismatch) as info:
        parse_type(bad)
    assert info.value.code == "type.invalid"


def test_value_hash_binds_the_schema() -> None:
    a = value_hash(schema_hash(Prim("nat")), 1)
    b = value_hash(schema_hash(Prim("int")), 1)
    assert a != b
    assert a.startswith("blake3:")


def test_map_with_uuid_keys_displays_as_pairs_and_reads_back() -> None:
    node = MapT(Prim("uuid"), ListT(Prim("nat")))
    value = normalise(node, {"01234567-89ab-cdef-0123-456789abcdef": [1]}, {})
    assert normalise(node, to_sugar(node, value, {}), {}) == value


# --- compiled checkers: the same decisions and errors as ``check`` ---------------------------

# Schemas the random types may refer to: a ref chain, two recursive schemas (through a list, a
# map, an option and a bare ref in a variant case), an unknown name and a cycle of bare refs.
RECURSIVE: dict[str, TypeNode] = {
    name: parse_type(obj)
    for name, obj in {
        "t/Key@1": "text",
        "t/Alias@1": "t/Key@1",
        "t/Tree@1": {"record": {"value": "nat", "kids": {"list": "t/Tree@1"}}},
        "t/Expr@1": {
            "variant": {
                "Add": {"list": "t/Expr@1"},
                "Env": {"map": {"key": "t/Alias@1", "value": "t/Expr@1"}},
                "Lit": "int",
                "Neg": "t/Expr@1",
                "Opt": {"option": "t/Expr@1"},
            }
        },
        "t/LoopA@1": "t/LoopB@1",
        "t/LoopB@1": "t/LoopA@1",
    }.items()
}
REF_NAMES = [*RECURSIVE, "t/Missing@1"]
MEMBER_NAMES = st.sampled_from(["a", "b", "c", "Lit"])  # none spells a type kind (the tagged lens)

JUNK = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            -1,
            INT_MAX + 1,
            INT_MIN - 1,
            NAT_MAX + 1,
            "",
            "a",
            b"",
            bytes(16),
            bytes(32),
            [],
            {},
            [0, 0],
            (1, 2),
            1.5,
            Decimal(1),
            {"$tag": "Lit", "$value": 1},
            {"$tag": "a", "$value": None},
            {"$tag": [], "$value": None},
            {"a": 0, "b": None},
            cbor.Tag(cbor.DEC128_TAG, bytes(16)),
            cbor.Tag(cbor.DEC128_TAG, bytes(15) + b"\x10"),
            cbor.Tag(cbor.DEC128_TAG, b"\xff" * 16),
            cbor.Tag(cbor.DEC128_TAG, b"\x01"),
            cbor.Tag(cbor.DEC128_TAG, "1"),
            cbor.Tag(1, bytes(16)),
            OrderedDict(a=1),
        ]
    ),
    st.integers(),
    st.text(max_size=3),
    st.binary(max_size=33),
)

PRIM_DATA: dict[str, st.SearchStrategy[Any]] = {
    "bool": st.booleans(),
    "int": st.integers(INT_MIN, INT_MAX),
    "nat": st.integers(0, NAT_MAX),
    "time": st.integers(INT_MIN, INT_MAX),
    "duration": st.integers(INT_MIN, INT_MAX),
    "dec128": st.decimals(allow_nan=False, allow_infinity=False),
    "text": st.text(alphabet="ab$/~", max_size=3),
    "bytes": st.binary(max_size=4),
    "hash": st.binary(min_size=32, max_size=32),
    "uuid": st.binary(min_size=16, max_size=16),
    "unit": st.none(),
}


TYPE_KINDS = ["prim", "ref", "record", "variant", "map", "list", "set", "option"]


@st.composite
def types(draw: Any, ref_names: list[str], depth: int = 3) -> TypeNode:
    """Every kind of type node, up to ``depth`` levels deep, with refs to ``ref_names``."""
    # The kind is drawn explicitly: st.one_of and st.recursive both ended up giving ~90%
    # lists, sets and options, and few records, maps or variants.
    kind = draw(st.sampled_from(TYPE_KINDS if depth else TYPE_KINDS[:2]))
    if kind == "prim":
        return Prim(draw(st.sampled_from(sorted(PRIMS))))
    if kind == "ref":
        return Ref(draw(st.sampled_from(ref_names)))
    inner = types(ref_names, depth - 1)
    if kind in ("record", "variant"):
        members = draw(st.dictionaries(MEMBER_NAMES, inner, min_size=kind == "variant", max_size=3))
        return (Record if kind == "record" else Variant)(tuple(sorted(members.items())))
    if kind == "map":
        key = draw(
            st.one_of(
                st.sampled_from(sorted(MAP_KEY_PRIMS)).map(Prim),
                st.sampled_from(["t/Key@1", "t/Alias@1"]).map(Ref),
            )
        )
        return MapT(key, draw(inner))
    return {"list": ListT, "set": SetT, "option": OptionT}[kind](draw(inner))


def _data_for(draw: Any, node: TypeNode, schemas: Schemas, depth: int) -> Any:
    """Data of ``node`` in the canonical lens, before normalising (sets unsorted, with repeats)."""
    try:
        node = resolve(node, schemas)
    except ValueMismatch:
        return draw(JUNK)
    deep = depth >= 4  # stop recursive schemas: empty collections, empty options, first cases
    if isinstance(node, Prim):
        return draw(PRIM_DATA[node.name])
    if isinstance(node, Record):
        return {name: _data_for(draw, sub, schemas, depth + 1) for name, sub in node.fields}
    if isinstance(node, Variant):
        name, sub = node.cases[0] if deep else draw(st.sampled_from(node.cases))
        return {"$tag": name, "$value": _data_for(draw, sub, schemas, depth + 1)}
    if isinstance(node, OptionT):
        return None if deep or draw(st.booleans()) else _data_for(draw, node.item, schemas, depth)
    size = 0 if deep else draw(st.integers(0, 3))
    if isinstance(node, MapT):
        return {
            _data_for(draw, node.key, schemas, depth + 1): _data_for(
                draw, node.value, schemas, depth + 1
            )
            for _ in range(size)
        }
    assert isinstance(node, ListT | SetT)
    items = [_data_for(draw, node.item, schemas, depth + 1) for _ in range(size)]
    return items + items[:1] if isinstance(node, SetT) and draw(st.booleans()) else items


def _near(draw: Any, obj: Any) -> Any:
    """A scalar close to ``obj`` that a strict check must still tell apart."""
    if isinstance(obj, bool) or obj is None:
        return draw(st.sampled_from([0, 1, {}, not obj]))
    if isinstance(obj, int):
        return draw(st.sampled_from([obj + 1, obj - 1, -obj - 1, bool(obj), NAT_MAX + 1]))
    if isinstance(obj, str):
        return obj.encode()
    if isinstance(obj, bytes):
        return draw(st.sampled_from([obj + b"\0", obj[:-1], bytearray(obj)]))
    if isinstance(obj, cbor.Tag) and isinstance(obj.value, bytes) and len(obj.value) == 16:
        bits = int.from_bytes(obj.value, "big")
        sign, exponent, coeff = bits >> 127, (bits >> 113) & 0x3FFF, bits & (2**113 - 1)
        near = [
            bits ^ draw(st.integers(1, 255)),  # another coefficient
            bits ^ (1 << 127),  # the other sign (a negative zero from a zero)
            (sign << 127) | ((exponent - 1) % 0x4000 << 113) | (coeff * 10 % 2**113),  # a 0 more
        ]
        return cbor.Tag(obj.tag, draw(st.sampled_from(near)).to_bytes(16, "big"))
    return draw(JUNK)


def _mutate(draw: Any, obj: Any) -> Any:
    """``obj`` with one change somewhere inside: a dropped, extra, repeated or moved entry, a
    near-miss scalar, or junk."""
    how = draw(st.sampled_from(["inside", "inside", "drop", "add", "repeat", "swap", "junk"]))
    if how == "junk":
        return draw(JUNK)
    if isinstance(obj, dict) and obj:
        out = dict(obj)
        key = draw(st.sampled_from(list(obj)))
        if how == "drop":
            del out[key]
        elif how == "add":
            out[draw(st.sampled_from(["z", "$x", 1, key]))] = out[key]
        elif how in ("repeat", "swap"):  # the same value under a near-miss key
            near = _near(draw, key)
            out[near if isinstance(near, Hashable) else repr(near)] = out.pop(key)
        else:
            out[key] = _mutate(draw, obj[key])
        return out
    if isinstance(obj, list) and obj:
        out = list(obj)
        at = draw(st.integers(0, len(obj) - 1))
        if how == "drop":
            del out[at]
        elif how == "add":
            out.append(draw(JUNK))
        elif how == "repeat":
            out.insert(at, obj[at])
        elif how == "swap":
            out.reverse()
        else:
            out[at] = _mutate(draw, obj[at])
        return out
    return _near(draw, obj)


@st.composite
def candidates(draw: Any, node: TypeNode, schemas: Schemas) -> Any:
    """A canonical value of ``node`` (via ``normalise``), a mutation of one, or junk."""
    data = _data_for(draw, node, schemas, 0)
    try:
        value = normalise(node, data, schemas)
    except ValueMismatch:
        value = data
    how = draw(st.sampled_from(["valid", "decoded", "mutated", "mutated", "mutated", "junk"]))
    # One mutation only: a second error elsewhere would hide a wrong accept of the first.
    if how == "decoded":
        try:
            return cbor.loads(cbor.dumps(value))
        except Exception:
            return value
    if how == "mutated":
        return _mutate(draw, value)
    return draw(JUNK) if how == "junk" else value


def outcome(run: Callable[[], None]) -> tuple[Any, ...] | None:
    """None if ``run`` accepted; else the exception's type, and its code, pointer and detail."""
    try:
        run()
    except ValueMismatch as exc:
        return (ValueMismatch, exc.code, exc.pointer, exc.detail)
    except Exception as exc:
        return (type(exc),)
    return None


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_compiled_checker_raises_exactly_when_and_as_check_does(data: st.DataObject) -> None:
    schemas = {**RECURSIVE, "t/Named@1": data.draw(types(REF_NAMES))}
    node = data.draw(types([*REF_NAMES, "t/Named@1"]))
    obj = data.draw(candidates(node, schemas))
    compiled = compile_checker(node, schemas)
    assert outcome(lambda: compiled(obj)) == outcome(lambda: check(node, obj, schemas))


def assert_same(
    node: TypeNode, obj: Any, schemas: Schemas, expected: tuple[str, str] | None
) -> None:
    """Compiled and reference checks agree, and reject with ``(code, pointer)`` or accept."""
    got = outcome(lambda: compile_checker(node, schemas)(obj))
    assert got == outcome(lambda: check(node, obj, schemas))
    assert (got if got is None else got[1:3]) == expected


A_NAT = Record((("a", Prim("nat")),))
A_UNIT = Variant((("A", Prim("unit")),))


@pytest.mark.parametrize(
    ("node", "obj", "expected"),
    [
        pytest.param(A_NAT, {"a": 1}, None, id="record"),
        pytest.param(A_NAT, {"a": 1, "b": 2}, ("record.extra", "/b"), id="record-extra"),
        pytest.param(A_NAT, {}, ("record.missing", "/a"), id="record-missing"),
        pytest.param(A_NAT, {"b": 1}, ("record.missing", "/a"), id="record-renamed"),
        pytest.param(A_NAT, [1], ("type", "/"), id="record-as-list"),
        pytest.param(A_UNIT, {"$tag": "A", "$value": None}, None, id="variant"),
        pytest.param(
            A_UNIT, {"$tag": "A", "$value": None, "x": 1}, ("type", "/"), id="variant-extra"
        ),
        pytest.param(A_UNIT, {"$tag": "A"}, ("type", "/"), id="variant-no-value"),
        pytest.param(
            A_UNIT, {"$tag": "B", "$value": None}, ("variant.tag", "/$tag"), id="variant-tag"
        ),
        pytest.param(A_UNIT, {"$tag": "A", "$value": 0}, ("type", "/$value"), id="variant-value"),
        pytest.param(MapT(Prim("nat"), Prim("nat")), {1: 2}, None, id="map"),
        pytest.param(MapT(Prim("nat"), Prim("nat")), {"1": 2}, ("type", "/1"), id="map-key"),
        pytest.param(MapT(Prim("nat"), Prim("nat")), {1: -2}, ("type", "/1"), id="map-value"),
        pytest.param(OptionT(A_NAT), {"a": None}, ("type", "/a"), id="option-inner"),
        pytest.param(ListT(A_NAT), ({"a": 1},), ("type", "/"), id="tuple-is-not-list"),
    ],
)
def test_compiled_checker_reports_structure_errors_as_check_does(
    node: TypeNode, obj: Any, expected: tuple[str, str] | None
) -> None:
    assert_same(node, obj, {}, expected)


def tree(value: int, *kids: dict[str, Any]) -> dict[str, Any]:
    return {"kids": list(kids), "value": value}


def test_compiled_checker_handles_a_recursive_schema_at_any_depth() -> None:
    deep = tree(1, tree(2), tree(3, tree(4, tree(5))))
    assert_same(Ref("t/Tree@1"), deep, RECURSIVE, None)
    deep["kids"][1]["kids"][0]["value"] = -1
    assert_same(Ref("t/Tree@1"), deep, RECURSIVE, ("type", "/kids/1/kids/0/value"))


def test_compiled_checker_compiles_mutually_recursive_refs() -> None:
    schemas = {
        "t/A@1": parse_type({"list": "t/B@1"}),
        "t/B@1": parse_type({"option": {"map": {"key": "text", "value": "t/A@1"}}}),
    }
    assert_same(Ref("t/A@1"), [None, {"x": [None, {}]}], schemas, None)
    assert_same(Ref("t/A@1"), [{"x": [{"y": [3]}]}], schemas, ("type", "/0/x/0/y/0"))


def test_compiled_checker_reports_unknown_and_cyclic_refs_only_where_a_value_reaches_them() -> None:
    for name, code in [("t/Missing@1", "type.ref_unknown"), ("t/LoopA@1", "type.ref_cycle")]:
        node = Record((("a", OptionT(Ref(name))),))
        assert_same(node, {"a": None}, RECURSIVE, None)
        assert_same(node, {"a": 1}, RECURSIVE, (code, "/a"))


@pytest.mark.parametrize(
    ("node", "obj", "expected"),
    [
        pytest.param(SetT(Prim("text")), ["a", "b"], None, id="sorted"),
        pytest.param(SetT(Prim("text")), ["b", "a"], ("set.order", "/"), id="unsorted"),
        pytest.param(SetT(Prim("nat")), [1, 1], ("set.order", "/"), id="duplicate"),
        pytest.param(SetT(Prim("nat")), [1, -1], ("type", "/1"), id="bad-item-before-order"),
        # CBOR order, not Python order: 10 (0x0a) sorts before 24 (0x18 0x18), "b" before "aa".
        pytest.param(SetT(Prim("nat")), [10, 24], None, id="nat-cbor-order"),
        pytest.param(SetT(Prim("text")), ["b", "aa"], None, id="text-shorter-first"),
        pytest.param(SetT(Prim("text")), ["aa", "b"], ("set.order", "/"), id="text-python-order"),
        pytest.param(SetT(Prim("nat")), (1, 2), ("type", "/"), id="tuple"),
        pytest.param(ListT(Prim("nat")), [1, 1], None, id="list-keeps-repeats"),
    ],
)
def test_compiled_checker_holds_sets_to_cbor_order_without_duplicates(
    node: TypeNode, obj: Any, expected: tuple[str, str] | None
) -> None:
    assert_same(node, obj, {}, expected)


@given(
    st.one_of(
        st.tuples(st.just("int"), st.lists(st.integers(INT_MIN, INT_MAX), max_size=6)),
        st.tuples(st.just("nat"), st.lists(st.integers(0, NAT_MAX), max_size=6)),
        st.tuples(st.just("text"), st.lists(st.text(max_size=30), max_size=6)),
    ),
    st.randoms(),
)
def test_compiled_checker_orders_text_and_integer_sets_as_canonical_cbor(
    case: tuple[str, list[Any]], rnd: Any
) -> None:
    name, items = case
    node = SetT(Prim(name))
    canonical = normalise(node, items, {})
    shuffled = canonical[:]
    rnd.shuffle(shuffled)
    for obj in (canonical, shuffled, items, canonical + canonical[:1]):
        encoded = [cbor.dumps(item) for item in obj]
        in_order = encoded == sorted(set(encoded))
        assert_same(node, obj, {}, None if in_order else ("set.order", "/"))


@pytest.mark.parametrize(
    ("name", "obj", "expected"),
    [
        pytest.param("nat", 0, None, id="nat-zero"),
        pytest.param("nat", NAT_MAX, None, id="nat-max"),
        pytest.param("nat", NAT_MAX + 1, ("type", "/"), id="nat-over"),
        pytest.param("nat", -1, ("type", "/"), id="nat-negative"),
        pytest.param("int", INT_MIN, None, id="int-min"),
        pytest.param("int", INT_MAX, None, id="int-max"),
        pytest.param("int", INT_MAX + 1, ("type", "/"), id="int-over"),
        pytest.param("int", INT_MIN - 1, ("type", "/"), id="int-under"),
        pytest.param("time", INT_MAX + 1, ("type", "/"), id="time-over"),
        pytest.param("duration", -1, None, id="duration-negative"),
        pytest.param("nat", True, ("type", "/"), id="bool-is-not-nat"),
        pytest.param("int", False, ("type", "/"), id="bool-is-not-int"),
        pytest.param("bool", 1, ("type", "/"), id="int-is-not-bool"),
        pytest.param("bool", True, None, id="bool"),
        pytest.param("hash", bytes(31), ("type", "/"), id="short-hash"),
        pytest.param("uuid", bytearray(16), ("type", "/"), id="bytearray-is-not-bytes"),
        pytest.param("unit", {}, ("type", "/"), id="unit-is-null-only"),
    ],
)
def test_compiled_checker_keeps_ranges_and_bool_int_strictness(
    name: str, obj: Any, expected: tuple[str, str] | None
) -> None:
    # ``check`` reports an out-of-range integer as "type": its test is one predicate per primitive.
    assert_same(Prim(name), obj, {}, expected)


def dec(raw: bytes) -> cbor.Tag:
    return cbor.Tag(cbor.DEC128_TAG, raw)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(dec128_encode(Decimal("-12.345")), None, id="canonical"),
        pytest.param(dec(bytes(16)), None, id="zero"),
        pytest.param(dec(b"\x80" + bytes(15)), ("dec128.noncanonical", "/"), id="negative-zero"),
        pytest.param(
            dec(((6176 - 1) << 113 | 10).to_bytes(16, "big")),
            ("dec128.noncanonical", "/"),
            id="trailing-zero",
        ),
        pytest.param(dec(((6111 + 6176) << 113 | 10).to_bytes(16, "big")), None, id="max-exponent"),
        pytest.param(
            dec(((6176 << 113) | 10**34 + 1).to_bytes(16, "big")),
            ("dec128.range", "/"),
            id="coefficient-over",
        ),
        pytest.param(dec(b"\x60" + bytes(15)), ("dec128.noncanonical", "/"), id="large-form"),
        pytest.param(dec(bytes(17)), ("dec128.noncanonical", "/"), id="seventeen-bytes"),
        pytest.param(cbor.Tag(1, bytes(16)), ("type", "/"), id="other-tag"),
        pytest.param("1.5", ("type", "/"), id="sugar"),
    ],
)
def test_compiled_checker_accepts_only_canonical_dec128(
    obj: Any, expected: tuple[str, str] | None
) -> None:
    assert_same(Prim("dec128"), obj, {}, expected)


DEC128_FIELDS = st.builds(
    lambda sign, exponent, coeff: ((sign << 127) | (exponent << 113) | coeff).to_bytes(16, "big"),
    st.integers(0, 1),
    st.one_of(st.integers(0, 0x3FFF), st.sampled_from([0, 6176, 6111 + 6176, 6112 + 6176])),
    st.one_of(
        st.integers(0, 2**113 - 1),
        st.integers(0, 10**6).map(lambda n: n * 10),
        st.sampled_from([0, 1, 10, 10**34 - 1, 10**34, 2**113 - 1]),
    ),
)


@given(st.one_of(st.binary(min_size=16, max_size=16), DEC128_FIELDS))
def test_dec128_is_canonical_agrees_with_decoding(raw: bytes) -> None:
    try:
        dec128_decode(raw)
    except ValueMismatch:
        assert not dec128_is_canonical(raw)
    else:
        assert dec128_is_canonical(raw)


def test_compiled_checker_accepts_what_check_accepts_beyond_the_fast_path() -> None:
    # The fast walk wants exact dicts; a subclass goes to ``check``, which accepts it.
    node = Record((("a", Prim("nat")),))
    assert_same(node, OrderedDict(a=1), {}, None)
    assert_same(node, OrderedDict(a=1, b=2), {}, ("record.extra", "/b"))


def test_schema_checkers_check_by_name_as_check_does() -> None:
    checkers = SchemaCheckers(RECURSIVE)
    checkers.check("t/Tree@1", tree(1, tree(2)))
    checkers.check("t/Tree@1", tree(3))  # compiled once, reused
    for name, obj, code, pointer in [
        ("t/Tree@1", tree(1, {"value": 2}), "record.missing", "/kids/0/kids"),
        (
            "t/Expr@1",
            {"$tag": "Neg", "$value": {"$tag": "Nope", "$value": 1}},
            "variant.tag",
            "/$value/$tag",
        ),
        ("t/Missing@1", 1, "type.ref_unknown", ""),
    ]:
        with pytest.raises(ValueMismatch) as info:
            checkers.check(name, obj)
        assert (info.value.code, info.value.pointer) == (code, pointer)


@pytest.mark.parametrize("tag", [["A"], {"A": 1}, 1, None])
def test_a_variant_whose_tag_is_not_text_is_a_clean_mismatch(tag: Any) -> None:
    node = Variant((("A", Prim("unit")),))
    with pytest.raises(ValueMismatch) as info:
        check(node, {"$tag": tag, "$value": None}, {})
    assert info.value.code == "variant.tag"


def test_non_ascii_text_for_bytes_is_a_value_mismatch() -> None:
    with pytest.raises(ValueMismatch) as refused:
        normalise(Prim("bytes"), "héllo", {})
    assert refused.value.code == "bytes.base64"


def test_a_tagged_null_is_none_for_an_option_unless_its_item_could_be_written_so() -> None:
    """AgentOS writes an absent option as ``{"null": {}}`` in a grant's tagged params (its rung
    09's ``path_prefixes``); an option whose item is a map, or a record with a field ``null``,
    reads it as that item instead."""
    from air.types import parse_type
    from air.values import normalise

    lists = parse_type({"option": {"list": "text"}})
    assert normalise(lists, {"null": {}}, {}) is None
    assert normalise(lists, None, {}) is None
    maps = parse_type({"option": {"map": {"key": "text", "value": {"record": {}}}}})
    assert normalise(maps, {"null": {}}, {}) == {"null": {}}
    records = parse_type({"option": {"record": {"null": {"record": {}}}}})
    assert normalise(records, {"null": {}}, {}) == {"null": {}}
    tagged = parse_type({"record": {"p": {"option": {"list": "text"}}}})
    assert normalise(tagged, {"record": {"p": {"null": {}}}}, {}) == {"p": None}
