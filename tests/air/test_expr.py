"""Expr: parsing with pointers, static checks, evaluation semantics, totality, canonical JSON."""

from __future__ import annotations

import base64
import json
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from air import cbor
from air.errors import ExprError
from air.expr import (
    EXPR_DEPTH_MAX,
    INT_MAX,
    INT_MIN,
    MISSING,
    OP_NAMES,
    Env,
    Expr,
    Ref,
    SchemaRecord,
    evaluate,
    iter_refs,
    parse_expr,
    record_schema,
    refs,
    to_json,
)
from air.types import parse_type

EVAL_CODES = {
    "expr.ref.missing",
    "expr.type",
    "expr.get.missing",
    "expr.div_zero",
    "expr.overflow",
    # the text and JSON ops (issue 22): bad base64 or UTF-8, JSON that does not parse or does
    # not fit its schema, a map built with one key twice, a value over its size bound
    "expr.base64",
    "expr.utf8",
    "expr.json.syntax",
    "expr.json.mismatch",
    "expr.schema.unknown",
    "expr.map.duplicate",
    "expr.too_large",
}
I64_MAX = 2**63 - 1
HASH_HEX = "ab" * 32
# The documented arities: (least, most); None is variadic.
ARITY: dict[str, tuple[int, int | None]] = {
    **dict.fromkeys(["len", "not"], (1, 1)),
    "get": (2, 3),
    **dict.fromkeys(["and", "or", "concat"], (2, None)),
    **dict.fromkeys(
        ["has", "eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul", "div", "mod"], (2, 2)
    ),
    **dict.fromkeys(["starts_with", "ends_with", "contains"], (2, 2)),
    **dict.fromkeys(
        [
            "utf8_encode",
            "utf8_decode",
            "base64_encode",
            "base64_decode",
            "int_to_text",
            "hash",
            "hash_bytes",
        ],
        (1, 1),
    ),
    **dict.fromkeys(["json_encode", "json_decode"], (2, 2)),
}


def op(name: str, *args: Any) -> dict[str, Any]:
    return {"op": name, "args": list(args)}


def var(name: str) -> dict[str, str]:
    return {"ref": f"@var:{name}"}


def b64(raw: bytes) -> dict[str, str]:
    return {"bytes": base64.b64encode(raw).decode("ascii")}


SCHEMAS = {"t/Nats@1": parse_type({"list": "nat"})}


def ev(expr_json: Any, env: Env | None = None) -> Any:
    return evaluate(parse_expr(expr_json), env or Env(plan_input=None, schemas=SCHEMAS))


def eval_error(expr_json: Any, env: Env | None = None) -> ExprError:
    with pytest.raises(ExprError) as info:
        ev(expr_json, env)
    return info.value


def parse_error(expr_json: Any, pointer: str = "") -> ExprError:
    with pytest.raises(ExprError) as info:
        parse_expr(expr_json, pointer)
    return info.value


def same(actual: Any, expected: Any) -> bool:
    """Equal and type-equal all the way down (Python's == says True == 1)."""
    return cbor.dumps(actual) == cbor.dumps(expected)


# ------------------------------------------------------------------------------- literals


@pytest.mark.parametrize(
    ("expr_json", "expected"),
    [
        pytest.param(True, True, id="bare-bool"),
        pytest.param(-7, -7, id="bare-int"),
        pytest.param(INT_MAX, INT_MAX, id="bare-int-u64-max"),
        pytest.param(INT_MIN, INT_MIN, id="bare-int-i64-min"),
        pytest.param("héllo", "héllo", id="bare-text"),
        pytest.param(None, None, id="bare-null"),
        pytest.param({"bool": False}, False, id="tagged-bool"),
        pytest.param({"int": -(2**63)}, -(2**63), id="tagged-int"),
        pytest.param({"nat": 2**64 - 1}, 2**64 - 1, id="tagged-nat"),
        pytest.param({"text": "x"}, "x", id="tagged-text"),
        pytest.param({"bytes": "AAH/"}, b"\x00\x01\xff", id="tagged-bytes"),
        pytest.param({"hash": f"blake3:{HASH_HEX}"}, bytes.fromhex(HASH_HEX), id="tagged-hash"),
        pytest.param({"unit": {}}, None, id="unit"),
        pytest.param({"null": {}}, None, id="null"),
        pytest.param({"none": {}}, None, id="none"),
        pytest.param({"some": 5}, 5, id="some-is-the-value"),
        pytest.param({"lit": {"a": [1, "x", None, True]}}, {"a": [1, "x", None, True]}, id="lit"),
        pytest.param({"lit": {"op": "add"}}, {"op": "add"}, id="lit-is-never-an-expr"),
    ],
)
def test_literal_evaluates_to_its_canonical_value(expr_json: Any, expected: Any) -> None:
    assert same(ev(expr_json), expected)


def test_constructors_build_records_lists_and_variants() -> None:
    env = Env(plan_input={"id": "o1"}, vars={"n": 3})
    expr_json = {
        "record": {
            "id": {"ref": "@plan.input.id"},
            "items": {"list": [var("n"), 4]},
            "status": {"variant": {"tag": "Fetched", "value": var("n")}},
            "empty": {"variant": {"tag": "Pending"}},
        }
    }
    assert same(
        ev(expr_json, env),
        {
            "id": "o1",
            "items": [3, 4],
            "status": {"$tag": "Fetched", "$value": 3},
            "empty": {"$tag": "Pending", "$value": None},
        },
    )


def test_evaluating_a_constant_returns_a_fresh_copy_each_time() -> None:
    expr = parse_expr({"lit": {"a": [1]}})
    first = evaluate(expr, Env(plan_input=None))
    first["a"].append(2)
    assert evaluate(expr, Env(plan_input=None)) == {"a": [1]}


# ------------------------------------------------------------------------------------ refs


ENV = Env(
    plan_input={"order_id": "o1", "url": "https://x", "nested": {"deep": 7}},
    vars={"x": {"field": {"sub": "s"}}, "status": {"$tag": "Fetched", "$value": 200}},
    steps={"fetch": {"status": 200, "body_ref": None}},
    event={"order_id": "o1"},
)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("@plan.input", ENV.plan_input),
        ("@plan.input.order_id", "o1"),
        ("@plan.input.nested.deep", 7),
        ("@var:x", {"field": {"sub": "s"}}),
        ("@var:x.field.sub", "s"),
        ("@var:status.$tag", "Fetched"),
        ("@var:status.$value", 200),
        ("@step:fetch", {"status": 200, "body_ref": None}),
        ("@step:fetch.status", 200),
        ("@step:fetch.body_ref", None),
        ("@event", {"order_id": "o1"}),
        ("@event.order_id", "o1"),
    ],
)
def test_ref_reads_plan_input_vars_steps_and_event(ref: str, expected: Any) -> None:
    assert same(ev({"ref": ref}, ENV), expected)


@pytest.mark.parametrize(
    ("ref", "code"),
    [
        ("@var:nope", "expr.ref.missing"),
        ("@step:later", "expr.ref.missing"),
        ("@plan.input.missing_field", "expr.ref.missing"),
        ("@var:x.field.other", "expr.ref.missing"),
        ("@plan.input.order_id.more", "expr.type"),
        ("@step:fetch.body_ref.hash", "expr.type"),
    ],
)
def test_missing_ref_or_field_fails_with_code_at_the_ref(ref: str, code: str) -> None:
    error = eval_error(op("eq", 1, {"ref": ref}), ENV)
    assert (error.code, error.pointer) == (code, "/args/1")


def test_event_ref_outside_await_event_is_missing() -> None:
    error = eval_error({"ref": "@event"}, Env(plan_input=None))
    assert Env(plan_input=None).event is MISSING
    assert (error.code, error.pointer) == ("expr.ref.missing", "")


def test_event_ref_with_a_null_event_is_null_not_missing() -> None:
    assert ev({"ref": "@event"}, Env(plan_input=None, event=None)) is None


def test_refs_lists_roots_and_iter_refs_gives_pointers() -> None:
    expr = parse_expr(
        op(
            "and",
            op("eq", {"ref": "@event.id"}, {"ref": "@plan.input.id"}),
            op("eq", var("x"), {"ref": "@step:fetch.status"}),
        ),
        "/where",
    )
    assert refs(expr) == {"event", "plan.input", "var:x", "step:fetch"}
    assert [(r.root, r.path, r.pointer) for r in iter_refs(expr)] == [
        ("event", ("id",), "/where/args/0/args/0"),
        ("plan.input", ("id",), "/where/args/0/args/1"),
        ("var:x", (), "/where/args/1/args/0"),
        ("step:fetch", ("status",), "/where/args/1/args/1"),
    ]
    assert isinstance(next(iter_refs(expr)), Ref)


# ------------------------------------------------------------------------------ operators

OP_CASES = [
    pytest.param(op("len", "héllo"), 5, id="len-text"),
    pytest.param(op("len", b64(b"abc")), 3, id="len-bytes"),
    pytest.param(op("len", {"lit": [1, 2]}), 2, id="len-list"),
    pytest.param(op("len", {"lit": {"a": 1, "b": 2}}), 2, id="len-map"),
    pytest.param(op("get", {"lit": {"a": 1}}, "a"), 1, id="get-map"),
    pytest.param(op("get", {"lit": [10, 20]}, 1), 20, id="get-list"),
    pytest.param(op("get", {"lit": {"a": 1}}, "b", 0), 0, id="get-default"),
    pytest.param(op("get", {"lit": [10]}, 5, "d"), "d", id="get-list-default"),
    pytest.param(op("has", {"lit": {"a": 1}}, "a"), True, id="has-present"),
    pytest.param(op("has", {"lit": {"a": 1}}, "b"), False, id="has-absent"),
    pytest.param(op("eq", {"lit": {"a": [1, "x"]}}, {"record": {"a": {"list": [1, "x"]}}}), True),
    pytest.param(op("eq", 1, 2), False, id="eq-false"),
    pytest.param(op("ne", "a", "b"), True, id="ne"),
    pytest.param(op("lt", 1, 2), True, id="lt"),
    pytest.param(op("le", 2, 2), True, id="le"),
    pytest.param(op("gt", "b", "a"), True, id="gt-text"),
    pytest.param(op("gt", "a", "Z"), True, id="gt-text-code-points"),
    pytest.param(op("ge", b64(b"\x01"), b64(b"\x00\xff")), True, id="ge-bytes"),
    pytest.param(op("and", True, True, False), False, id="and"),
    pytest.param(op("and", True, True), True, id="and-true"),
    pytest.param(op("or", False, False, True), True, id="or"),
    pytest.param(op("or", False, False), False, id="or-false"),
    pytest.param(op("not", False), True, id="not"),
    pytest.param(op("concat", "ab", "c", "d"), "abcd", id="concat-text"),
    pytest.param(op("concat", b64(b"\x00"), b64(b"\x01")), b"\x00\x01", id="concat-bytes"),
    pytest.param(op("concat", {"lit": [1]}, {"lit": [2, 3]}), [1, 2, 3], id="concat-list"),
    pytest.param(op("add", 2, 3), 5, id="add"),
    pytest.param(op("sub", 2, 3), -1, id="sub"),
    pytest.param(op("mul", -4, 3), -12, id="mul"),
    pytest.param(op("div", 7, 2), 3, id="div"),
    pytest.param(op("mod", 7, 2), 1, id="mod"),
    pytest.param(op("starts_with", "hello", "he"), True, id="starts_with-text"),
    pytest.param(op("starts_with", b64(b"\x00\x01"), b64(b"\x01")), False, id="starts_with-bytes"),
    pytest.param(op("ends_with", "hello", "lo"), True, id="ends_with"),
    pytest.param(op("contains", "hello", "ell"), True, id="contains-text"),
    pytest.param(op("contains", b64(b"abc"), b64(b"bc")), True, id="contains-bytes"),
    pytest.param(op("contains", {"lit": [1, {"a": "b"}]}, {"lit": {"a": "b"}}), True),
    pytest.param(op("contains", {"lit": [1, 2]}, 3), False, id="contains-list-absent"),
    pytest.param(op("utf8_encode", "h\u00e9"), "h\u00e9".encode(), id="utf8-encode"),
    pytest.param(op("utf8_decode", b64("h\u00e9".encode())), "h\u00e9", id="utf8-decode"),
    pytest.param(op("base64_encode", b64(b"abc")), "YWJj", id="base64-encode"),
    pytest.param(op("base64_decode", "YWJj"), b"abc", id="base64-decode"),
    pytest.param(op("int_to_text", -7), "-7", id="int-to-text"),
    pytest.param(
        op("hash", {"record": {"a": 1}}),
        cbor.digest(cbor.dumps({"a": 1})),
        id="hash-of-a-value-is-blake3-of-its-canonical-cbor",
    ),
    pytest.param(op("hash_bytes", {"bytes": "aGk="}), cbor.digest(b"hi"), id="hash-bytes"),
    pytest.param(op("json_encode", {"lit": [2, 1]}, "t/Nats@1"), "[2,1]", id="json-encode"),
    pytest.param(op("json_decode", "[2, 1]", "t/Nats@1"), [2, 1], id="json-decode"),
]


@pytest.mark.parametrize(("expr_json", "expected"), OP_CASES)
def test_op_happy_path(expr_json: Any, expected: Any) -> None:
    assert same(ev(expr_json), expected)


def test_every_op_has_a_happy_path_case_and_the_documented_arity() -> None:
    covered = {cast(dict[str, Any], case.values[0])["op"] for case in OP_CASES}
    assert covered == OP_NAMES == set(ARITY)


@pytest.mark.parametrize("name", sorted(ARITY))
def test_op_with_too_few_or_too_many_args_is_an_arity_error(name: str) -> None:
    low, high = ARITY[name]
    too_few = parse_error(op(name, *[var("v")] * (low - 1)), "/e")
    assert (too_few.code, too_few.pointer) == ("expr.parse.arity", "/e/args")
    if high is not None:
        too_many = parse_error(op(name, *[var("v")] * (high + 1)))
        assert (too_many.code, too_many.pointer) == ("expr.parse.arity", "/args")


TYPE_ERROR_CASES = [
    pytest.param(op("len", var("int")), "/args/0", id="len-int"),
    pytest.param(op("len", var("none")), "/args/0", id="len-unit"),
    pytest.param(op("get", var("int"), "a"), "/args/0", id="get-from-int"),
    pytest.param(op("get", var("list"), var("text")), "/args/1", id="get-list-by-text"),
    pytest.param(op("get", var("map"), var("list")), "/args/1", id="get-unhashable-key"),
    pytest.param(op("has", var("list"), 1), "/args/0", id="has-on-list"),
    pytest.param(op("eq", var("float"), 1), "/args/0", id="eq-non-canonical"),
    pytest.param(op("eq", var("floats"), var("floats2")), "", id="eq-nested-non-canonical"),
    pytest.param(op("lt", var("int"), var("text")), "/args/1", id="lt-mixed"),
    pytest.param(op("le", var("list"), var("list")), "/args/0", id="le-lists"),
    pytest.param(op("gt", var("bool"), var("bool")), "/args/0", id="gt-bools"),
    pytest.param(op("ge", var("none"), 1), "/args/0", id="ge-unit"),
    pytest.param(op("and", var("int"), True), "/args/0", id="and-int"),
    pytest.param(op("or", False, var("text")), "/args/1", id="or-text"),
    pytest.param(op("not", var("int")), "/args/0", id="not-int"),
    pytest.param(op("concat", var("text"), var("bytes")), "/args/1", id="concat-mixed"),
    pytest.param(op("concat", var("int"), var("int")), "/args/0", id="concat-ints"),
    pytest.param(op("add", var("bool"), 1), "/args/0", id="add-bool"),
    pytest.param(op("sub", 1, var("text")), "/args/1", id="sub-text"),
    pytest.param(op("mul", var("list"), 2), "/args/0", id="mul-list"),
    pytest.param(op("div", var("text"), 2), "/args/0", id="div-text"),
    pytest.param(op("mod", 2, var("none")), "/args/1", id="mod-unit"),
    pytest.param(op("starts_with", var("text"), var("bytes")), "/args/1", id="starts_with-mixed"),
    pytest.param(op("ends_with", var("list"), var("list")), "/args/0", id="ends_with-list"),
    pytest.param(op("contains", var("text"), var("bytes")), "/args/1", id="contains-mixed"),
    pytest.param(op("contains", var("map"), "a"), "/args/0", id="contains-map"),
]
TYPE_ENV = Env(
    plan_input=None,
    vars={
        "int": 1,
        "bool": True,
        "text": "a",
        "bytes": b"a",
        "list": [1],
        "map": {"a": 1},
        "none": None,
        "float": 1.5,
        "floats": [1.5],
        "floats2": [1.5],
    },
)


@pytest.mark.parametrize(("expr_json", "pointer"), TYPE_ERROR_CASES)
def test_op_on_wrong_kinds_is_a_type_error_at_the_offending_arg(
    expr_json: Any, pointer: str
) -> None:
    error = eval_error(expr_json, TYPE_ENV)
    assert (error.code, error.pointer) == ("expr.type", pointer)


@pytest.mark.parametrize(
    ("expr_json", "pointer"),
    [
        (op("add", 1, "a"), "/args/1"),
        (op("add", True, 1), "/args/0"),
        (op("len", 5), "/args/0"),
        (op("not", 1), "/args/0"),
        (op("lt", 1, "a"), "/args/1"),
        (op("concat", "a", b64(b"a")), "/args/1"),
        (op("and", True, 1), "/args/1"),
        (op("or", var("b"), 1), "/args/1"),
        (op("has", {"lit": [1]}, 1), "/args/0"),
        (op("get", {"lit": {}}, True), "/args/1"),
        (op("contains", 5, 5), "/args/0"),
        (op("not", op("not", {"list": [1]})), "/args/0/args/0"),
    ],
)
def test_constant_arg_of_the_wrong_kind_is_rejected_at_parse_time(
    expr_json: Any, pointer: str
) -> None:
    error = parse_error(expr_json, "/p")
    assert (error.code, error.pointer) == ("expr.parse.type", "/p" + pointer)


def test_get_on_an_absent_key_or_index_is_get_missing_at_the_op() -> None:
    env = Env(plan_input=None, vars={"m": {"a": 1}, "l": [1, 2]})
    for expr_json in (op("get", var("m"), "b"), op("get", var("l"), 2), op("get", var("l"), -1)):
        error = eval_error({"list": [expr_json]}, env)
        assert (error.code, error.pointer) == ("expr.get.missing", "/list/0")


def test_get_reads_map_keys_of_any_key_kind() -> None:
    env = Env(plan_input=None, vars={"m": {1: "int", b"\x01": "bytes", "1": "text"}})
    assert [ev(op("get", var("m"), k), env) for k in (1, b64(b"\x01"), "1")] == [
        "int",
        "bytes",
        "text",
    ]


def test_and_or_stop_at_the_first_deciding_arg_and_skip_the_rest() -> None:
    empty = Env(plan_input=None)
    assert ev(op("and", False, var("missing")), empty) is False
    assert ev(op("or", True, var("missing")), empty) is True
    error = eval_error(op("and", True, var("missing")), empty)
    assert (error.code, error.pointer) == ("expr.ref.missing", "/args/1")


def test_and_guards_a_field_access_behind_a_tag_check() -> None:
    guard = op(
        "and",
        op("eq", {"ref": "@event.$tag"}, "Fetched"),
        op("eq", {"ref": "@event.$value.status"}, 200),
    )
    assert ev(guard, Env(plan_input=None, event={"$tag": "Pending", "$value": None})) is False
    fetched = {"$tag": "Fetched", "$value": {"status": 200}}
    assert ev(guard, Env(plan_input=None, event=fetched)) is True


# ------------------------------------------------------------------- bool/int strictness


@pytest.mark.parametrize(
    ("expr_json", "expected"),
    [
        (op("eq", True, 1), False),
        (op("eq", False, 0), False),
        (op("ne", True, 1), True),
        (op("eq", {"lit": [1, 0]}, {"lit": [True, False]}), False),
        (op("eq", {"lit": {"a": 0}}, {"lit": {"a": False}}), False),
        (op("eq", "a", b64(b"a")), False),
        (op("eq", None, False), False),
        (op("eq", {"lit": {"a": 1, "b": 2}}, {"record": {"b": 2, "a": 1}}), True),
        (op("contains", {"lit": [1, 0]}, True), False),
        (op("contains", {"lit": [[1]]}, {"list": [True]}), False),
    ],
)
def test_equality_is_type_strict(expr_json: Any, expected: bool) -> None:
    assert ev(expr_json) is expected


def test_bool_is_not_an_int_for_arithmetic_or_indexing() -> None:
    env = Env(plan_input=None, vars={"t": True, "l": ["a", "b"]})
    assert eval_error(op("add", var("t"), 1), env).code == "expr.type"
    assert eval_error(op("get", var("l"), var("t")), env).code == "expr.type"


def test_constants_of_equal_python_value_but_different_type_are_different_nodes() -> None:
    assert parse_expr(True) != parse_expr(1)
    assert parse_expr({"lit": [0]}) != parse_expr({"lit": [False]})


# ------------------------------------------------------------------ arithmetic and limits


@pytest.mark.parametrize(
    ("expr_json", "expected"),
    [
        (op("add", INT_MAX - 1, 1), INT_MAX),
        (op("sub", INT_MIN + 1, 1), INT_MIN),
        (op("mul", -(2**32), 2**31), INT_MIN),
        (op("div", INT_MIN, -1), 2**63),
        (op("add", INT_MIN, INT_MAX), 2**63 - 1),
    ],
)
def test_arithmetic_at_the_range_edges_succeeds(expr_json: Any, expected: int) -> None:
    assert ev(expr_json) == expected


@pytest.mark.parametrize(
    "expr_json",
    [
        op("add", INT_MAX, 1),
        op("sub", INT_MIN, 1),
        op("sub", 0, INT_MAX),
        op("mul", 2**32, 2**32),
        op("div", INT_MAX, -1),
    ],
)
def test_arithmetic_leaving_i64_or_u64_overflows_at_the_op(expr_json: Any) -> None:
    error = eval_error({"list": [expr_json]})
    assert (error.code, error.pointer) == ("expr.overflow", "/list/0")


@pytest.mark.parametrize("name", ["div", "mod"])
def test_div_and_mod_by_zero_fail_at_the_op(name: str) -> None:
    error = eval_error(op(name, 1, var("zero")), Env(plan_input=None, vars={"zero": 0}))
    assert (error.code, error.pointer) == ("expr.div_zero", "")


@pytest.mark.parametrize(
    ("a", "b", "quotient", "remainder"),
    [
        (7, 2, 3, 1),
        (-7, 2, -3, -1),
        (7, -2, -3, 1),
        (-7, -2, 3, -1),
        (-1, 2, 0, -1),
        (6, -3, -2, 0),
    ],
)
def test_div_truncates_toward_zero_and_mod_takes_the_dividend_sign(
    a: int, b: int, quotient: int, remainder: int
) -> None:
    assert (ev(op("div", a, b)), ev(op("mod", a, b))) == (quotient, remainder)


@given(st.integers(INT_MIN, I64_MAX), st.integers(INT_MIN, I64_MAX).filter(bool))
def test_div_and_mod_agree_with_truncated_division(a: int, b: int) -> None:
    quotient, remainder = ev(op("div", a, b)), ev(op("mod", a, b))
    assert b * quotient + remainder == a
    assert abs(remainder) < abs(b)
    assert remainder == 0 or (remainder < 0) == (a < 0)


@pytest.mark.parametrize(
    ("text", "length"),
    [
        ("", 0),
        ("é", 1),
        ("e\u0301", 2),
        ("🙂", 1),
        ("日本語", 3),
        ("a🙂b", 3),
    ],
)
def test_len_of_text_counts_code_points(text: str, length: int) -> None:
    assert ev(op("len", text)) == length
    assert ev(op("len", b64(text.encode("utf-8")))) == len(text.encode("utf-8"))


def nested_not(depth: int) -> Any:
    expr: Any = True
    for _ in range(depth - 1):
        expr = op("not", expr)
    return expr


def test_expression_at_the_depth_limit_parses_and_evaluates() -> None:
    assert ev(nested_not(EXPR_DEPTH_MAX)) is (EXPR_DEPTH_MAX % 2 == 1)


def test_expression_deeper_than_the_limit_fails_at_the_deepest_node() -> None:
    error = parse_error(nested_not(EXPR_DEPTH_MAX + 1))
    assert (error.code, error.pointer) == ("expr.parse.depth", "/args/0" * EXPR_DEPTH_MAX)


def test_very_deep_json_is_a_depth_error_not_a_recursion_error() -> None:
    deep_lit: Any = 1
    for _ in range(10_000):
        deep_lit = [deep_lit]
    error = parse_error({"lit": deep_lit})
    assert (error.code, error.pointer) == ("expr.parse.depth", "/lit" + "/0" * EXPR_DEPTH_MAX)
    assert parse_error(nested_not(10_000)).code == "expr.parse.depth"


def test_equality_of_very_deep_env_values_does_not_exhaust_the_stack() -> None:
    a: Any = 1
    b: Any = 1
    for _ in range(100_000):
        a, b = [a], [b]
    assert ev(op("eq", var("a"), var("b")), Env(plan_input=None, vars={"a": a, "b": b})) is True


# --------------------------------------------------------------------------- parse errors


@pytest.mark.parametrize(
    ("expr_json", "code", "pointer"),
    [
        pytest.param([1, 2], "expr.parse.shape", "", id="bare-array"),
        pytest.param({}, "expr.parse.shape", "", id="empty-object"),
        pytest.param({"text": "a", "int": 1}, "expr.parse.shape", "", id="two-keys"),
        pytest.param({"frob": 1}, "expr.parse.shape", "", id="unknown-form"),
        pytest.param({"op": "not", "args": [True], "x": 1}, "expr.parse.shape", "", id="op-extra"),
        pytest.param({"op": "not"}, "expr.parse.shape", "", id="op-no-args"),
        pytest.param({"op": "not", "args": True}, "expr.parse.shape", "/args", id="args-not-list"),
        pytest.param({"record": [1]}, "expr.parse.shape", "/record", id="record-not-object"),
        pytest.param({"list": {"a": 1}}, "expr.parse.shape", "/list", id="list-not-array"),
        pytest.param({"variant": {"value": 1}}, "expr.parse.shape", "/variant", id="no-tag"),
        pytest.param({"variant": {"tag": "A", "x": 1}}, "expr.parse.shape", "/variant"),
        pytest.param({"variant": {"tag": ""}}, "expr.parse.literal", "/variant/tag"),
        pytest.param({"record": {"a/b~": [1]}}, "expr.parse.shape", "/record/a~1b~0"),
        pytest.param(b"raw", "expr.parse.shape", "", id="python-bytes"),
        pytest.param({"lit": (1, 2)}, "expr.parse.shape", "/lit", id="python-tuple"),
        pytest.param({"op": "frob", "args": []}, "expr.parse.unknown_op", "/op"),
        pytest.param({"op": 5, "args": []}, "expr.parse.unknown_op", "/op"),
        pytest.param(1.5, "expr.parse.float", "", id="bare-float"),
        pytest.param(op("add", 1, 2.0), "expr.parse.float", "/args/1", id="float-arg"),
        pytest.param({"lit": {"a": [0, 1e3]}}, "expr.parse.float", "/lit/a/1", id="float-in-lit"),
        pytest.param({"text": 1.5}, "expr.parse.float", "/text", id="float-as-text"),
        pytest.param({"int": 1.0}, "expr.parse.float", "/int", id="integral-float"),
        pytest.param(2**64, "expr.parse.literal", "", id="bare-int-too-big"),
        pytest.param(-(2**63) - 1, "expr.parse.literal", "", id="bare-int-too-small"),
        pytest.param({"bool": 1}, "expr.parse.literal", "/bool"),
        pytest.param({"int": True}, "expr.parse.literal", "/int", id="int-given-bool"),
        pytest.param({"int": 2**63}, "expr.parse.literal", "/int", id="int-beyond-i64"),
        pytest.param({"nat": -1}, "expr.parse.literal", "/nat", id="negative-nat"),
        pytest.param({"nat": 2**64}, "expr.parse.literal", "/nat", id="nat-beyond-u64"),
        pytest.param({"text": 5}, "expr.parse.literal", "/text"),
        pytest.param({"bytes": "A"}, "expr.parse.literal", "/bytes", id="bytes-bad-padding"),
        pytest.param({"bytes": "Zm9v!"}, "expr.parse.literal", "/bytes", id="bytes-bad-char"),
        pytest.param({"bytes": "é"}, "expr.parse.literal", "/bytes", id="bytes-non-ascii"),
        pytest.param({"hash": "blake3:xyz"}, "expr.parse.literal", "/hash", id="hash-short"),
        pytest.param({"hash": "blake3:" + "AB" * 32}, "expr.parse.literal", "/hash", id="upper"),
        pytest.param({"hash": "sha256:" + HASH_HEX}, "expr.parse.literal", "/hash", id="sha"),
        pytest.param({"unit": None}, "expr.parse.literal", "/unit"),
        pytest.param({"none": {"a": 1}}, "expr.parse.literal", "/none"),
        pytest.param("\ud800", "expr.parse.literal", "", id="lone-surrogate"),
        pytest.param({"lit": {"k\udfff": 1}}, "expr.parse.literal", "/lit", id="surrogate-key"),
    ],
)
def test_malformed_expression_fails_with_code_and_pointer(
    expr_json: Any, code: str, pointer: str
) -> None:
    error = parse_error(expr_json)
    assert (error.code, error.pointer) == (code, pointer)


@pytest.mark.parametrize(
    "ref",
    [
        "plan.input",
        "@plan",
        "@plan.inputs",
        "@plans.input",
        "@input",
        "@var:",
        "@step:",
        "@var",
        "@var:x..y",
        "@event.",
        "@.event",
        "@foo:x",
        "",
        5,
        None,
    ],
)
def test_malformed_ref_is_a_parse_error_at_the_ref_string(ref: Any) -> None:
    error = parse_error({"ref": ref}, "/steps/0/key")
    assert (error.code, error.pointer) == ("expr.parse.ref", "/steps/0/key/ref")


def test_parse_error_pointers_start_at_the_given_pointer() -> None:
    error = parse_error({"record": {"url": op("frob")}}, "/steps/2/params")
    assert (error.code, error.pointer) == ("expr.parse.unknown_op", "/steps/2/params/record/url/op")


def test_eval_error_pointers_start_at_the_given_pointer() -> None:
    expr = parse_expr({"record": {"n": op("add", var("x"), 1)}}, "/steps/2/params")
    with pytest.raises(ExprError) as info:
        evaluate(expr, Env(plan_input=None, vars={"x": "a"}))
    assert (info.value.code, info.value.pointer) == ("expr.type", "/steps/2/params/record/n/args/0")


# ------------------------------------------------------------------------- canonical JSON


@pytest.mark.parametrize(
    "authorings",
    [
        pytest.param(["abc", {"text": "abc"}, {"lit": "abc"}], id="text"),
        pytest.param([5, {"int": 5}, {"nat": 5}, {"lit": 5}], id="int"),
        pytest.param([True, {"bool": True}], id="bool"),
        pytest.param([None, {"unit": {}}, {"null": {}}, {"none": {}}, {"lit": None}], id="null"),
        pytest.param([{"some": var("x")}, var("x")], id="some"),
        pytest.param([{"some": {"some": 1}}, 1], id="nested-some"),
        pytest.param(
            [{"hash": f"blake3:{HASH_HEX}"}, b64(bytes.fromhex(HASH_HEX))], id="hash-is-bytes"
        ),
        pytest.param([{"lit": [1, "a"]}, {"list": [1, {"text": "a"}]}], id="list"),
        pytest.param(
            [{"lit": {"b": 1, "a": [2]}}, {"record": {"a": {"list": [2]}, "b": {"nat": 1}}}],
            id="record-any-order",
        ),
        pytest.param(
            [
                {"variant": {"tag": "A"}},
                {"variant": {"tag": "A", "value": None}},
                {"variant": {"tag": "A", "value": {"unit": {}}}},
                {"lit": {"$tag": "A", "$value": None}},
                {"record": {"$value": None, "$tag": "A"}},
            ],
            id="variant",
        ),
        pytest.param(
            [
                {"record": {"b": var("x"), "a": 1}},
                {"record": {"a": {"int": 1}, "b": {"some": var("x")}}},
            ],
            id="record-with-refs",
        ),
    ],
)
def test_equivalent_authorings_collapse_to_one_canonical_form(authorings: list[Any]) -> None:
    parsed = [parse_expr(a) for a in authorings]
    assert all(p == parsed[0] for p in parsed)
    canonical = [json.dumps(to_json(p), sort_keys=False) for p in parsed]
    assert len(set(canonical)) == 1


@pytest.mark.parametrize(
    ("expr_json", "canonical"),
    [
        ({"nat": 5}, 5),
        ({"text": "a"}, "a"),
        ({"unit": {}}, None),
        ({"lit": [1, {"k": "v"}]}, {"list": [1, {"record": {"k": "v"}}]}),
        ({"lit": {"$tag": "A", "$value": 1}}, {"variant": {"tag": "A", "value": 1}}),
        ({"lit": {"$tag": "", "$value": 1}}, {"record": {"$tag": "", "$value": 1}}),
        ({"variant": {"tag": "B"}}, {"variant": {"tag": "B"}}),
        ({"list": [{"bytes": "AAE="}]}, {"list": [{"bytes": "AAE="}]}),
        ({"ref": "@step:fetch.status"}, {"ref": "@step:fetch.status"}),
        (op("not", {"bool": False}), {"op": "not", "args": [False]}),
    ],
)
def test_to_json_emits_the_documented_canonical_form(expr_json: Any, canonical: Any) -> None:
    assert to_json(parse_expr(expr_json)) == canonical


def test_node_equality_and_hash_ignore_pointers() -> None:
    expr_json = op("eq", var("x"), {"lit": [1]})
    a, b = parse_expr(expr_json, "/a"), parse_expr(expr_json, "/b")
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1


# ------------------------------------------------------------------------ $schema in records


def test_a_record_schema_is_metadata_not_a_field() -> None:
    parsed = parse_expr({"record": {"$schema": "acme/Paid@1", "order_id": var("o")}})
    assert record_schema(parsed) == "acme/Paid@1"
    assert evaluate(parsed, Env(plan_input=None, vars={"o": "o-1"})) == {"order_id": "o-1"}


def test_a_constant_record_with_a_schema_keeps_it() -> None:
    parsed = parse_expr({"record": {"$schema": "acme/Paid@1", "order_id": "o-1"}})
    assert isinstance(parsed, SchemaRecord)
    assert record_schema(parsed) == "acme/Paid@1"
    assert to_json(parsed) == {"record": {"$schema": "acme/Paid@1", "order_id": "o-1"}}
    assert ev({"record": {"$schema": "acme/Paid@1", "order_id": "o-1"}}) == {"order_id": "o-1"}


def test_a_record_schema_takes_part_in_equality() -> None:
    a = parse_expr({"record": {"$schema": "acme/A@1", "x": var("x")}})
    b = parse_expr({"record": {"$schema": "acme/B@1", "x": var("x")}})
    plain = parse_expr({"record": {"x": var("x")}})
    assert len({a, b, plain}) == 3


@pytest.mark.parametrize(
    "expr_json",
    [
        pytest.param({"list": [{"record": {"$schema": "acme/A@1"}}]}, id="not-top-level"),
        pytest.param({"record": {"x": 1}}, id="plain-record"),
        pytest.param({"record": {"$schema": {"text": "acme/A@1"}}}, id="a-field-named-schema"),
        pytest.param(var("x"), id="ref"),
    ],
)
def test_record_schema_is_none_but_for_a_top_level_schema_record(expr_json: Any) -> None:
    assert record_schema(parse_expr(expr_json)) is None


@pytest.mark.parametrize(
    "expr_json",
    [
        {"lit": {"$schema": "acme/A@1", "b": 1}},
        {"record": {"$schema": {"text": "acme/A@1"}, "b": var("x")}},
        {"record": {"$schema": "acme/A@1", "b": {"record": {"$schema": "acme/B@1"}}}},
    ],
)
def test_a_field_named_schema_round_trips_as_a_field(expr_json: Any) -> None:
    parsed = parse_expr(expr_json)
    assert parse_expr(to_json(parsed)) == parsed


def test_a_record_schema_that_is_not_a_def_name_is_a_parse_error() -> None:
    error = parse_error({"record": {"$schema": "Paid", "x": 1}}, "/steps/0/event")
    assert (error.code, error.pointer) == ("expr.parse.literal", "/steps/0/event/record/$schema")


# ------------------------------------------------------------------------------ properties

REF_POOL = [
    "@plan.input",
    "@plan.input.a",
    "@plan.input.a.b",
    "@var:x",
    "@var:n",
    "@var:missing",
    "@step:s",
    "@step:s.status",
    "@event",
    "@event.$tag",
    "@event.$value",
]
small_ints = st.one_of(
    st.integers(-3, 3), st.sampled_from([INT_MIN, INT_MAX, I64_MAX, INT_MIN + 1, INT_MAX - 1])
)
json_scalars = st.one_of(st.none(), st.booleans(), small_ints, st.text(max_size=4))
json_values = st.recursive(
    json_scalars,
    lambda c: st.one_of(
        st.lists(c, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=3), st.just("$schema")), c, max_size=3),
    ),
    max_leaves=6,
)
leaf_exprs = st.one_of(
    json_scalars,
    st.sampled_from(REF_POOL).map(lambda r: {"ref": r}),
    st.binary(max_size=4).map(b64),
    st.integers(0, INT_MAX).map(lambda n: {"nat": n}),
    json_values.map(lambda v: {"lit": v}),
    st.sampled_from([{"unit": {}}, {"none": {}}]),
)


def _branches(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    def op_node(name: str) -> st.SearchStrategy[Any]:
        low, high = ARITY[name]
        args = st.lists(children, min_size=low, max_size=low + 2 if high is None else high)
        return args.map(lambda a: op(name, *a))

    return st.one_of(
        st.sampled_from(sorted(ARITY)).flatmap(op_node),
        st.dictionaries(st.sampled_from("abc"), children, max_size=3).map(lambda d: {"record": d}),
        st.tuples(
            st.one_of(st.sampled_from(["a/B@1", "x/Y@2", "nope"]), children),
            st.dictionaries(st.sampled_from("abc"), children, max_size=2),
        ).map(lambda sd: {"record": {"$schema": sd[0], **sd[1]}}),
        st.lists(children, max_size=3).map(lambda items: {"list": items}),
        st.tuples(st.sampled_from(["A", "B"]), children).map(
            lambda tv: {"variant": {"tag": tv[0], "value": tv[1]}}
        ),
        children.map(lambda c: {"some": c}),
    )


expr_jsons = st.recursive(leaf_exprs, _branches, max_leaves=10)

canonical_values = st.recursive(
    st.one_of(st.none(), st.booleans(), small_ints, st.text(max_size=4), st.binary(max_size=4)),
    lambda c: st.one_of(
        st.lists(c, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "status", "$tag"]), c, max_size=3),
        st.tuples(st.sampled_from(["A", "B"]), c).map(lambda tv: {"$tag": tv[0], "$value": tv[1]}),
    ),
    max_leaves=8,
)
envs = st.builds(
    Env,
    plan_input=st.one_of(canonical_values, st.fixed_dictionaries({"a": canonical_values})),
    vars=st.fixed_dictionaries({"x": canonical_values, "n": small_ints}),
    steps=st.fixed_dictionaries({"s": canonical_values}),
    event=st.one_of(st.just(MISSING), canonical_values),
)


def parse_or_code(expr_json: Any) -> Expr | str:
    try:
        return parse_expr(expr_json)
    except ExprError as error:
        return error.code


def outcome(expr: Expr, env: Env) -> tuple[str, Any]:
    """("value", canonical CBOR of the result) or ("error", code); any other exception escapes."""
    try:
        return ("value", cbor.dumps(evaluate(expr, env)))
    except ExprError as error:
        return ("error", error.code)


PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY_SETTINGS
@given(expr_jsons, envs)
def test_evaluate_only_ever_raises_expr_error_and_returns_canonical_values(
    expr_json: Any, env: Env
) -> None:
    parsed = parse_or_code(expr_json)
    if isinstance(parsed, str):
        assert parsed.startswith("expr.parse.")
        return
    kind, detail = outcome(parsed, env)
    assert kind == "value" or detail in EVAL_CODES


@PROPERTY_SETTINGS
@given(expr_jsons, envs)
def test_canonical_json_round_trips_and_keeps_meaning(expr_json: Any, env: Env) -> None:
    expr = parse_or_code(expr_json)
    if isinstance(expr, str):
        return
    canonical = to_json(expr)
    again = parse_expr(json.loads(json.dumps(canonical)))
    assert again == expr
    assert to_json(again) == canonical
    assert outcome(again, env) == outcome(expr, env)
