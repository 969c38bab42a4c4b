"""AgentOS's remaining Expr forms (``map``, ``set``) and constants (``bytes_b64``, ``time_ns``,
``duration_ns``, ``uuid``, ``dec128``), and the ops that build requests (``utf8_*``,
``base64_*``, ``int_to_text``, ``json_*``): parsing with pointer-precise errors, evaluation,
the canonical JSON a plan hash is computed over, and hostile inputs failing with a code."""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any

import pytest

from air import cbor
from air.errors import ExprError
from air.expr import CODEC_TEXT_MAX, Env, MakeMap, MakeSet, evaluate, parse_expr, to_json
from air.types import parse_type
from air.values import dec128_encode

UUID = "01234567-89ab-cdef-0123-456789abcdef"
UUID_RAW = bytes.fromhex(UUID.replace("-", ""))
SCHEMAS = {
    "t/Req@1": parse_type(
        {
            "record": {
                "id": "uuid",
                "n": "nat",
                "tags": {"set": "text"},
                "body": {"option": "bytes"},
                "kind": {"variant": {"get": "unit", "put": "text"}},
            }
        }
    ),
    "t/Nat@1": parse_type("nat"),
}


def ev(obj: Any, plan_input: Any = None, **vars: Any) -> Any:
    return evaluate(parse_expr(obj), Env(plan_input, vars=vars, schemas=SCHEMAS))


def canon(obj: Any) -> Any:
    return to_json(parse_expr(obj))


def error(obj: Any, env: Env | None = None, pointer: str = "/e") -> ExprError:
    def run() -> None:
        evaluate(parse_expr(obj, pointer), env or Env(None, schemas=SCHEMAS))

    with pytest.raises(ExprError) as info:
        run()
    return info.value


def op(name: str, *args: Any) -> dict[str, Any]:
    return {"op": name, "args": list(args)}


def var(name: str) -> dict[str, str]:
    return {"ref": f"@var:{name}"}


# --- constants -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "value", "printed"),
    [
        ({"bytes_b64": "AAEC"}, b"\x00\x01\x02", {"bytes": "AAEC"}),
        (
            {"time_ns": 1_704_067_200_000_000_000},
            1_704_067_200_000_000_000,
            1_704_067_200_000_000_000,
        ),
        ({"duration_ns": -5}, -5, -5),
        ({"uuid": UUID}, UUID_RAW, {"bytes": base64.b64encode(UUID_RAW).decode()}),
        ({"uuid": UUID.upper()}, UUID_RAW, {"bytes": base64.b64encode(UUID_RAW).decode()}),
        ({"dec128": "12.50"}, dec128_encode(Decimal("12.5")), {"dec128": "12.5"}),
        ({"dec128": "-1e3"}, dec128_encode(Decimal("-1000")), {"dec128": "-1E+3"}),
    ],
)
def test_agentos_constants_evaluate_and_print_canonically(
    written: Any, value: Any, printed: Any
) -> None:
    assert ev(written) == value
    assert canon(written) == printed
    assert parse_expr(canon(written)) == parse_expr(written)  # the printed form reads back


def test_a_constant_written_two_ways_is_one_constant() -> None:
    """Constants are values: AgentOS's spellings and ours of one value hash alike."""
    assert parse_expr({"bytes_b64": "AAEC"}) == parse_expr({"bytes": "AAEC"})
    assert parse_expr({"time_ns": 7}) == parse_expr({"int": 7}) == parse_expr(7)
    assert parse_expr({"duration_ns": 7}) == parse_expr({"nat": 7})
    assert parse_expr({"dec128": "1.50"}) == parse_expr({"dec128": "1.5"})
    assert parse_expr({"dec128": "1.5"}) != parse_expr({"text": "1.5"})


@pytest.mark.parametrize(
    ("written", "pointer"),
    [
        ({"bytes_b64": "AAE"}, "/e/bytes_b64"),
        ({"bytes_b64": 5}, "/e/bytes_b64"),
        ({"time_ns": -1}, "/e/time_ns"),
        ({"time_ns": 2**63}, "/e/time_ns"),
        ({"duration_ns": "5s"}, "/e/duration_ns"),
        ({"uuid": "0123"}, "/e/uuid"),
        ({"dec128": "1.2.3"}, "/e/dec128"),
        ({"dec128": "NaN"}, "/e/dec128"),
        ({"dec128": "\u0661"}, "/e/dec128"),  # an Arabic-Indic digit: Decimal would take it
        ({"dec128": "1" * 40}, "/e/dec128"),  # does not fit decimal128 exactly
        ({"dec128": 5}, "/e/dec128"),
    ],
)
def test_bad_constants_are_parse_errors_at_their_payload(written: Any, pointer: str) -> None:
    err = error(written)
    assert (err.code, err.pointer) == ("expr.parse.literal", pointer)


# --- set and map ---------------------------------------------------------------------------------


def test_a_set_dedupes_and_sorts_by_canonical_cbor() -> None:
    assert ev({"set": [3, 1, 3, {"ref": "@plan.input"}]}, 2) == [1, 2, 3]
    assert ev({"set": ["b", "a", "b"]}) == ["a", "b"]
    assert ev({"set": []}) == []


def test_a_constant_set_is_its_value_and_prints_as_that_list() -> None:
    assert canon({"set": [2, 1, 2]}) == {"list": [1, 2]}
    assert parse_expr({"set": [2, 1, 2]}) == parse_expr({"list": [1, 2]})
    assert parse_expr({"set": [2, 1]}) != parse_expr({"list": [2, 1]})


def test_a_set_over_refs_stays_a_set_construct() -> None:
    node = parse_expr({"set": [{"ref": "@plan.input"}, 1]})
    assert isinstance(node, MakeSet)
    assert canon({"set": [{"ref": "@plan.input"}, 1]}) == {"set": [{"ref": "@plan.input"}, 1]}


def test_a_map_takes_int_text_and_bytes_keys_and_sorts_them() -> None:
    written = {
        "map": [
            {"key": {"uuid": UUID}, "value": 1},
            {"key": {"bytes_b64": "AA=="}, "value": {"ref": "@plan.input"}},
        ]
    }
    assert ev(written, 2) == {b"\x00": 2, UUID_RAW: 1}
    assert list(ev(written, 2)) == [b"\x00", UUID_RAW]
    assert ev({"map": [{"key": 2, "value": "b"}, {"key": -1, "value": "a"}]}) == {-1: "a", 2: "b"}


def test_constant_maps_written_in_any_order_are_one_constant() -> None:
    a = {"map": [{"key": 2, "value": "b"}, {"key": 1, "value": "a"}]}
    b = {"map": [{"key": 1, "value": "a"}, {"key": 2, "value": "b"}]}
    assert parse_expr(a) == parse_expr(b)
    assert canon(a) == {"map": [{"key": 1, "value": "a"}, {"key": 2, "value": "b"}]}
    assert parse_expr(canon(a)) == parse_expr(a)


def test_a_text_keyed_constant_map_is_the_record_value() -> None:
    assert parse_expr({"map": [{"key": "a", "value": 1}]}) == parse_expr({"record": {"a": 1}})


def test_a_map_over_refs_stays_a_map_construct_and_reads_back() -> None:
    written = {"map": [{"key": {"ref": "@plan.input"}, "value": 1}]}
    assert isinstance(parse_expr(written), MakeMap)
    assert canon(written) == written
    assert parse_expr(canon(written)) == parse_expr(written)


def test_a_duplicate_map_key_is_an_error_at_the_second_key() -> None:
    constant = error({"map": [{"key": 1, "value": 1}, {"key": 1, "value": 2}]})
    assert (constant.code, constant.pointer) == ("expr.map.duplicate", "/e/map/1/key")
    dynamic = {"map": [{"key": 1, "value": 1}, {"key": {"ref": "@plan.input"}, "value": 2}]}
    err = error(dynamic, Env(1))
    assert (err.code, err.pointer) == ("expr.map.duplicate", "/e/map/1/key")


def test_a_map_key_of_a_non_key_kind_is_a_type_error() -> None:
    err = error({"map": [{"key": {"ref": "@plan.input"}, "value": 1}]}, Env([1]))
    assert (err.code, err.pointer) == ("expr.type", "/e/map/0/key")


@pytest.mark.parametrize(
    ("written", "code", "pointer"),
    [
        ({"map": {"a": 1}}, "expr.parse.shape", "/e/map"),
        ({"map": [[1, 2]]}, "expr.parse.shape", "/e/map/0"),
        ({"map": [{"key": 1}]}, "expr.parse.shape", "/e/map/0"),
        ({"map": [{"key": 1, "value": 2, "extra": 3}]}, "expr.parse.shape", "/e/map/0"),
        ({"map": [{"key": 1, "value": 1.5}]}, "expr.parse.float", "/e/map/0/value"),
        ({"map": [{"key": {"ref": "x"}, "value": 1}]}, "expr.parse.ref", "/e/map/0/key/ref"),
        ({"set": {"a": 1}}, "expr.parse.shape", "/e/set"),
        ({"set": [1, [2]]}, "expr.parse.shape", "/e/set/1"),
    ],
)
def test_malformed_sets_and_maps_are_parse_errors_at_the_bad_part(
    written: Any, code: str, pointer: str
) -> None:
    err = error(written)
    assert (err.code, err.pointer) == (code, pointer)


# --- request-building ops ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        (op("utf8_encode", "h\u00e9"), "h\u00e9".encode()),
        (op("utf8_decode", {"bytes": base64.b64encode("h\u00e9".encode()).decode()}), "h\u00e9"),
        (op("base64_encode", {"bytes": "AAEC"}), "AAEC"),
        (op("base64_decode", "AAEC"), b"\x00\x01\x02"),
        (op("base64_decode", ""), b""),
        (op("int_to_text", -42), "-42"),
        (op("int_to_text", 2**64 - 1), str(2**64 - 1)),
        (op("json_decode", " 7 ", "t/Nat@1"), 7),
    ],
)
def test_request_ops_happy_paths(written: Any, expected: Any) -> None:
    assert ev(written) == expected


def test_json_encode_prints_the_value_through_its_schema_compactly_and_sorted() -> None:
    value = {
        "id": UUID_RAW,
        "n": 3,
        "tags": ["a", "b"],
        "body": b"\x00\x01\x02",
        "kind": {"$tag": "put", "$value": "x"},
    }
    text = ev(op("json_encode", var("v"), "t/Req@1"), v=value)
    assert text == (
        '{"body":"AAEC","id":"01234567-89ab-cdef-0123-456789abcdef",'
        '"kind":{"$tag":"put","$value":"x"},"n":3,"tags":["a","b"]}'
    )
    assert ev(op("json_decode", text, "t/Req@1")) == value  # and back


def test_json_decode_reads_sugar_through_the_schema() -> None:
    text = '{"id": "' + UUID + '", "n": "3", "tags": ["b", "a"], "kind": "get"}'
    assert ev(op("json_decode", text, "t/Req@1")) == {
        "id": UUID_RAW,
        "n": 3,
        "tags": ["a", "b"],
        "body": None,
        "kind": {"$tag": "get", "$value": None},
    }


@pytest.mark.parametrize(
    ("written", "env_vars", "code", "pointer"),
    [
        (op("utf8_decode", var("b")), {"b": b"\xff\xfe"}, "expr.utf8", "/e/args/0"),
        (
            op("utf8_decode", var("b")),
            {"b": b"\xed\xa0\x80"},
            "expr.utf8",
            "/e/args/0",
        ),  # surrogate
        (op("utf8_decode", var("b")), {"b": b"\xc0\xaf"}, "expr.utf8", "/e/args/0"),  # overlong
        (op("base64_decode", "AAE"), {}, "expr.base64", "/e/args/0"),
        (op("base64_decode", "AA=E"), {}, "expr.base64", "/e/args/0"),
        (op("base64_decode", "A A="), {}, "expr.base64", "/e/args/0"),
        (op("base64_decode", "\u00e9\u00e9=="), {}, "expr.base64", "/e/args/0"),
        (
            op("base64_decode", var("t")),
            {"t": "A" * (CODEC_TEXT_MAX + 4)},
            "expr.too_large",
            "/e/args/0",
        ),
        (
            op("json_decode", var("t"), "t/Nat@1"),
            {"t": " " * (CODEC_TEXT_MAX + 1)},
            "expr.too_large",
            "/e/args/0",
        ),
        (op("json_decode", "{", "t/Nat@1"), {}, "expr.json.syntax", "/e/args/0"),
        (
            op("json_decode", "[" * 10_000 + "]" * 10_000, "t/Nat@1"),
            {},
            "expr.json.syntax",
            "/e/args/0",
        ),
        (op("json_decode", '"x"', "t/Nat@1"), {}, "expr.json.mismatch", "/e/args/0"),
        (op("json_decode", "1.5", "t/Nat@1"), {}, "expr.json.mismatch", "/e/args/0"),
        (op("json_decode", '{"n": 1}', "t/Req@1"), {}, "expr.json.mismatch", "/e/args/0"),
        (op("json_decode", "1", "t/Missing@1"), {}, "expr.schema.unknown", "/e/args/1"),
        (op("json_encode", var("v"), "t/Nat@1"), {"v": -1}, "expr.json.mismatch", "/e/args/0"),
        (
            op("json_encode", var("v"), "t/Req@1"),
            {"v": {"n": 1}},
            "expr.json.mismatch",
            "/e/args/0",
        ),
        (op("int_to_text", var("v")), {"v": True}, "expr.type", "/e/args/0"),
        (op("utf8_encode", var("v")), {"v": b"x"}, "expr.type", "/e/args/0"),
    ],
)
def test_hostile_inputs_fail_cleanly_with_a_code(
    written: Any, env_vars: dict[str, Any], code: str, pointer: str
) -> None:
    err = error(written, Env(None, vars=env_vars, schemas=SCHEMAS))
    assert (err.code, err.pointer) == (code, pointer)


@pytest.mark.parametrize(
    ("written", "pointer"),
    [
        (op("json_encode", 1, var("s")), "/e/args/1"),
        (op("json_decode", "1", "not a name"), "/e/args/1"),
        (op("json_decode", "1", 5), "/e/args/1"),
        (op("utf8_decode", "text"), "/e/args/0"),
        (op("base64_encode", "text"), "/e/args/0"),
        (op("int_to_text", "1"), "/e/args/0"),
    ],
)
def test_constant_args_of_the_wrong_kind_are_parse_type_errors(written: Any, pointer: str) -> None:
    err = error(written)
    assert (err.code, err.pointer) == ("expr.parse.type", pointer)


def test_request_ops_print_and_read_back() -> None:
    written = op("json_encode", {"record": {"n": {"ref": "@plan.input"}}}, "t/Req@1")
    assert parse_expr(canon(written)) == parse_expr(written)
    assert canon(op("utf8_encode", {"text": "x"})) == op("utf8_encode", "x")


def test_constants_print_to_canonical_cbor_unchanged() -> None:
    """Printing a constant and reading it back keeps its exact canonical CBOR."""
    for written in ({"dec128": "0.001"}, {"uuid": UUID}, {"map": [{"key": 5, "value": None}]}):
        node = parse_expr(written)
        again = parse_expr(to_json(node))
        assert cbor.dumps(evaluate(again, Env(None))) == cbor.dumps(evaluate(node, Env(None)))
