"""AIR types and values: both JSON lenses, normalisation, strict checks, display, hashing."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from air import cbor
from air.errors import ValueMismatch
from air.types import (
    ListT,
    MapT,
    OptionT,
    Prim,
    Record,
    Ref,
    SetT,
    Variant,
    parse_type,
    schema_hash,
    type_to_obj,
)
from air.values import check, dec128_decode, dec128_encode, normalise, to_sugar, value_hash

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
