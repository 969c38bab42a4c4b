"""Canonical CBOR: golden vectors, strict decoding, and hypothesis properties."""

from __future__ import annotations

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from air import cbor
from air.errors import CborError


@pytest.mark.parametrize(
    ("value", "expected_hex"),
    [
        pytest.param(0, "00", id="zero"),
        pytest.param(23, "17", id="largest-immediate"),
        pytest.param(24, "1818", id="one-byte-int"),
        pytest.param(-1, "20", id="minus-one"),
        pytest.param(2**64 - 1, "1bffffffffffffffff", id="u64-max"),
        pytest.param(-(2**64), "3bffffffffffffffff", id="n64-min"),
        pytest.param("a", "6161", id="text"),
        pytest.param(b"\x01", "4101", id="bytes"),
        pytest.param(None, "f6", id="null"),
        pytest.param([1, [2]], "82018102", id="nested-list"),
        pytest.param({100: 1, -1: 2}, "a21864012002", id="bytewise-not-length-first"),
        pytest.param({"b": 1, "aa": 2}, "a261620162616102", id="shorter-text-key-first"),
        pytest.param({"a": 1, 1: 2}, "a201026161 01".replace(" ", ""), id="int-before-text"),
        pytest.param(cbor.Tag(2000, bytes(16)), "d907d050" + "00" * 16, id="dec128-tag"),
    ],
)
def test_dumps_matches_golden_vector(value: object, expected_hex: str) -> None:
    assert cbor.dumps(value).hex() == expected_hex
    assert cbor.dumps(cbor.loads(bytes.fromhex(expected_hex))).hex() == expected_hex


def test_cbor2_canonical_differs_where_rfc8949_order_is_bytewise() -> None:
    # The reason air.cbor exists: cbor2 sorts length-first.
    assert cbor2.dumps({100: 1, -1: 2}, canonical=True) != cbor.dumps({100: 1, -1: 2})


@pytest.mark.parametrize(
    ("data_hex", "code"),
    [
        pytest.param("1801", "non_canonical", id="non-shortest-int"),
        pytest.param("5f4101ff", "non_canonical", id="indefinite-bytes"),
        pytest.param("9f01ff", "non_canonical", id="indefinite-array"),
        pytest.param("a2616201616101", "non_canonical", id="unsorted-keys"),
        pytest.param("a2616101616102", "non_canonical", id="duplicate-keys"),
        pytest.param("0100", "non_canonical", id="trailing-bytes"),
        pytest.param("fb3ff0000000000000", "float", id="float"),
        pytest.param("f93c00", "float", id="half-float"),
        pytest.param("c11a00000001", "type.unsupported", id="epoch-tag"),
        pytest.param("d9d9f700", "non_canonical", id="self-describe-tag"),
        pytest.param("d907d04100", "tag.unsupported", id="dec128-tag-over-short-bytes"),
        pytest.param("1a", "malformed", id="truncated"),
        pytest.param("", "malformed", id="empty"),
    ],
)
def test_loads_rejects_non_canonical_input(data_hex: str, code: str) -> None:
    with pytest.raises(CborError) as info:
        cbor.loads(bytes.fromhex(data_hex))
    assert info.value.code == code


@pytest.mark.parametrize("value", [1.5, {1.0: 2}, {True: 1}, object(), 2**64, cbor.Tag(1, 0)])
def test_dumps_rejects_values_outside_the_model(value: object) -> None:
    with pytest.raises(CborError):
        cbor.dumps(value)


def test_content_hash_is_blake3_of_the_bytes() -> None:
    assert (
        cbor.content_hash(b"")
        == "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    )
    raw = cbor.hash_to_raw(cbor.content_hash(b"x"))
    assert cbor.raw_to_hash(raw) == cbor.content_hash(b"x")


@pytest.mark.parametrize("text", ["blake3:xyz", "sha256:" + "0" * 64, "blake3:" + "A" * 64])
def test_malformed_hash_text_is_rejected(text: str) -> None:
    with pytest.raises(CborError):
        cbor.hash_to_raw(text)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64 - 1),
    st.text(max_size=8),
    st.binary(max_size=8),
)
keys = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64 - 1), st.text(max_size=6), st.binary(max_size=6)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=20,
)


@given(values)
def test_encode_then_decode_is_identity(value: object) -> None:
    assert cbor.loads(cbor.dumps(value)) == value


@given(st.dictionaries(keys, scalars, max_size=8), st.randoms())
def test_map_insertion_order_does_not_change_the_bytes(mapping: dict[object, object], rnd) -> None:  # type: ignore[no-untyped-def]
    items = list(mapping.items())
    rnd.shuffle(items)
    assert cbor.dumps(dict(items)) == cbor.dumps(mapping)


@given(st.dictionaries(keys, scalars, min_size=2, max_size=8))
def test_map_keys_are_in_bytewise_order_of_their_encoding(mapping: dict[object, object]) -> None:
    decoded = cbor2.loads(cbor.dumps(mapping))
    encoded_keys = [cbor2.dumps(k) for k in decoded]
    assert encoded_keys == sorted(encoded_keys)


@given(
    st.dictionaries(
        st.one_of(st.integers(-1000, 1000), st.text(max_size=3)), st.none(), min_size=2, max_size=6
    )
)
def test_loads_rejects_a_map_whose_keys_are_out_of_order(mapping: dict[object, None]) -> None:
    items = list(cbor2.loads(cbor.dumps(mapping)).items())
    with pytest.raises(CborError) as info:
        cbor.loads(cbor2.dumps(dict(reversed(items))))
    assert info.value.code == "non_canonical"


def test_a_subclass_of_a_value_type_is_refused_with_a_pointer() -> None:
    class Text(str):
        pass

    for value, pointer in [
        (Text("x"), "/"),
        ({"a": [1, Text("y")]}, "/a/1"),
        ({Text("k"): 1}, "/k"),
    ]:
        with pytest.raises(CborError) as refused:
            cbor.dumps(value)
        assert (refused.value.pointer, refused.value.code) == (pointer, "type.unsupported")
