"""Bad input to the ``air/`` layer is a structured error, never a traceback: JSON text
(``air.jsontext``), values through the Python API (``air.values``), CBOR (``air.cbor``), AIR
files (``air._loader`` / ``world._airfiles``) and a world's stored sources. Each named limit is hit
here, once just inside it and once just past it."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import cbor2
import pytest
from typer.testing import CliRunner

from air import AirSource, cbor, compile_checker, load_air
from air.errors import CborError, JsonError, ManifestError, ValueMismatch
from air.jsontext import JSON_DEPTH_MAX, JSON_NUMBER_DIGITS_MAX, loads
from air.types import (
    TYPE_DEPTH_MAX,
    ListT,
    MapT,
    OptionT,
    Prim,
    Record,
    Ref,
    TypeNode,
    Variant,
    parse_type,
)
from air.values import VALUE_DEPTH_MAX, check, normalise, to_sugar
from cli.main import app
from world._airfiles import air_sources, builtin_sources, load_air_path, read_world_sources
from world.errors import StoreDamaged

ROOT = Path(__file__).resolve().parents[2]


def _json_error(text: str | bytes, source: str = "<input>") -> tuple[str, int, int, str]:
    with pytest.raises(JsonError) as info:
        loads(text, source=source)
    return (info.value.code, info.value.line, info.value.column, info.value.source)


# --- air.jsontext ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", ("json.syntax", 1, 1), id="empty"),
        pytest.param("  \n\t ", ("json.syntax", 2, 3), id="whitespace-only"),
        pytest.param('{"a": 1,\n "b": }', ("json.syntax", 2, 7), id="malformed"),
        pytest.param("[1] 2", ("json.syntax", 1, 5), id="trailing-data"),
        pytest.param("9" * 5000, ("json.number_too_long", 1, 1), id="5000-digit-integer"),
        pytest.param('{"a": -1.' + "5" * 70 + "}", ("json.number_too_long", 1, 7), id="long-float"),
        pytest.param('{"\\ud800": 1}', ("json.surrogate", 1, 2), id="surrogate-in-key"),
        pytest.param('["ok", "\\udc00x"]', ("json.surrogate", 1, 8), id="surrogate-in-string"),
        pytest.param('["\\ud800\\ud800"]', ("json.surrogate", 1, 2), id="two-highs"),
        pytest.param(
            '["\\\\ud800\\udc00"]', ("json.surrogate", 1, 2), id="low-after-escaped-backslash"
        ),
        pytest.param('{"a": 1, "a": 2}', ("json.duplicate_key", 1, 10), id="duplicate-key"),
        pytest.param(
            '{"a": {"b": 1,\n"b": 2}}', ("json.duplicate_key", 2, 1), id="nested-duplicate-key"
        ),
        pytest.param("[NaN]", ("json.not_finite", 1, 2), id="nan"),
        pytest.param('{"x": Infinity}', ("json.not_finite", 1, 7), id="infinity"),
        pytest.param("[1, -Infinity]", ("json.not_finite", 1, 5), id="minus-infinity"),
        pytest.param("[1e999]", ("json.not_finite", 1, 2), id="float-overflow"),
        pytest.param("[" * 10_000 + "]" * 10_000, ("json.too_deep", 1, 257), id="10000-deep"),
        pytest.param(
            '{"a": ' * 10_000 + "1" + "}" * 10_000, ("json.too_deep", 1, 1537), id="deep-objects"
        ),
    ],
)
def test_bad_json_text_is_a_json_error_with_its_position(
    text: str, expected: tuple[str, int, int]
) -> None:
    assert _json_error(text, "f.json") == (*expected, "f.json")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"\x00\xff\xfe\x80 binary", (1, 2), id="binary"),
        pytest.param('{"a":\n "é", "b": "'.encode() + b"\xc3(" + b'"}', (2, 13), id="bad-utf8"),
        pytest.param(b'["\xed\xa0\x80"]', (1, 3), id="encoded-surrogate"),
    ],
)
def test_bytes_that_are_not_utf8_are_an_encoding_error_at_the_first_bad_byte(
    data: bytes, expected: tuple[int, int]
) -> None:
    assert _json_error(data) == ("json.encoding", *expected, "<input>")


def test_the_depth_limit_is_inclusive() -> None:
    assert loads("[" * JSON_DEPTH_MAX + "]" * JSON_DEPTH_MAX) is not None
    deeper = "[" * (JSON_DEPTH_MAX + 1) + "]" * (JSON_DEPTH_MAX + 1)
    assert _json_error(deeper)[:3] == ("json.too_deep", 1, JSON_DEPTH_MAX + 1)


def test_brackets_inside_strings_do_not_count_toward_depth() -> None:
    text = json.dumps(["[" * 1000, "{" * 1000, '\\"[[[', [[["x"]]]])
    assert loads(text)[3] == [[["x"]]]


def test_the_number_limit_counts_digits() -> None:
    assert loads("9" * JSON_NUMBER_DIGITS_MAX) == int("9" * JSON_NUMBER_DIGITS_MAX)
    assert loads("-" + "9" * JSON_NUMBER_DIGITS_MAX) < 0
    assert _json_error("9" * (JSON_NUMBER_DIGITS_MAX + 1))[0] == "json.number_too_long"


def test_a_lone_surrogate_in_a_python_str_is_refused_too() -> None:
    assert _json_error('["ok", "\ud800"]')[:3] == ("json.surrogate", 1, 8)


def test_what_is_valid_json_still_reads() -> None:
    assert loads('["\\ud83d\\ude00", "\\\\ud800"]') == ["\U0001f600", "\\ud800"]
    assert loads(b'\xef\xbb\xbf{"a": [1, -2, 1.5, true, null]}') == {"a": [1, -2, 1.5, True, None]}
    assert loads('{"a": {"a": 1}, "b": {"a": 2}}') == {"a": {"a": 1}, "b": {"a": 2}}


def test_the_first_problem_in_the_text_is_reported() -> None:
    # The number fires its hook first, but the duplicate key comes first in the text.
    text = '{"a": 1, "a": 2, "b": ' + "1" * 100 + "}"
    assert _json_error(text)[:3] == ("json.duplicate_key", 1, 10)


# --- air.values ----------------------------------------------------------------------------


def _mismatch(node: TypeNode, value: Any, schemas: Any = None) -> tuple[str, str]:
    with pytest.raises(ValueMismatch) as info:
        normalise(node, value, schemas or {})
    return (info.value.code, info.value.pointer)


def _nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


LISTS = {"t/L@1": ListT(Ref("t/L@1"))}  # list<L>: any depth of nested lists


def test_a_python_value_nested_10000_deep_is_too_deep_not_a_recursion_error() -> None:
    node, value = Ref("t/L@1"), _nested(10_000, [])
    assert _mismatch(node, value, LISTS) == ("value.too_deep", "/0" * VALUE_DEPTH_MAX)
    walks = [
        lambda: check(node, value, LISTS),
        lambda: compile_checker(node, LISTS)(value),
        lambda: to_sugar(node, value, LISTS),
    ]
    for walk in walks:
        with pytest.raises(ValueMismatch) as info:
            walk()
        assert info.value.code == "value.too_deep"


def test_the_value_depth_limit_is_inclusive() -> None:
    inside = _nested(VALUE_DEPTH_MAX - 1, [])  # VALUE_DEPTH_MAX lists
    assert normalise(Ref("t/L@1"), inside, LISTS) == inside
    check(Ref("t/L@1"), inside, LISTS)
    compile_checker(Ref("t/L@1"), LISTS)(inside)
    assert to_sugar(Ref("t/L@1"), inside, LISTS) == inside
    assert cbor.loads(cbor.dumps(inside)) == inside
    assert _mismatch(Ref("t/L@1"), [inside], LISTS)[0] == "value.too_deep"


def test_a_schema_that_is_its_own_option_is_too_deep_not_endless() -> None:
    schemas = {"t/O@1": OptionT(Ref("t/O@1"))}
    assert _mismatch(Ref("t/O@1"), 5, schemas) == ("value.too_deep", "/")


@pytest.mark.parametrize(
    ("node", "value", "expected"),
    [
        pytest.param(Prim("nat"), 10**5000, ("range", "/"), id="huge-int"),
        pytest.param(Prim("int"), -(10**5000), ("range", "/"), id="huge-negative-int"),
        pytest.param(Prim("nat"), "9" * 5000, ("range", "/"), id="5000-digit-text"),
        pytest.param(Prim("nat"), "0" * 30 + "7", None, id="leading-zeros"),
        pytest.param(Prim("nat"), "\u0663", ("type", "/"), id="non-ascii-digit"),
        pytest.param(Prim("duration"), "9" * 5000 + "s", ("range", "/"), id="huge-duration"),
        pytest.param(Prim("dec128"), "1" * 5000, ("dec128.range", "/"), id="5000-digit-decimal"),
        pytest.param(Prim("dec128"), 10**5000 + 1, ("dec128.range", "/"), id="huge-int-decimal"),
        pytest.param(Prim("dec128"), "1" + "0" * 5000, None, id="zeros-fold-into-exponent"),
        pytest.param(Prim("text"), "a\ud800", ("text.not_unicode", "/"), id="surrogate-text"),
        pytest.param(
            Record((("a", ListT(Prim("text"))),)),
            {"a": ["ok", "\udfff"]},
            ("text.not_unicode", "/a/1"),
            id="surrogate-in-list",
        ),
        pytest.param(
            MapT(Prim("text"), Prim("nat")),
            {"\ud800": 1},
            ("text.not_unicode", "/\\ud800"),
            id="surrogate-map-key",
        ),
        pytest.param(
            MapT(Prim("int"), Prim("nat")),
            [[10**5000, 1]],
            ("range", "/<16610-bit integer>"),
            id="huge-int-key",
        ),
        pytest.param(
            Variant((("A", Prim("unit")),)),
            {"$tag": ["A"], "$value": None},
            ("variant.tag", "/$tag"),
            id="unhashable-tag",
        ),
        pytest.param(
            Record((("a", Prim("nat")),)),
            {10**5000: 1},
            ("record.extra", "/<16610-bit integer>"),
            id="huge-int-field-name",
        ),
    ],
)
def test_bad_python_values_are_value_mismatches(
    node: TypeNode, value: Any, expected: tuple[str, str] | None
) -> None:
    if expected is None:
        normalise(node, value, {})
    else:
        assert _mismatch(node, value) == expected


def test_a_type_nested_10000_deep_is_invalid_not_a_recursion_error() -> None:
    deep: Any = "nat"
    for _ in range(10_000):
        deep = {"list": deep}
    with pytest.raises(ValueMismatch) as info:
        parse_type(deep)
    assert info.value.code == "type.invalid"
    inside: Any = "nat"
    for _ in range(TYPE_DEPTH_MAX):
        inside = {"option": inside}
    parse_type(inside)
    with pytest.raises(ValueMismatch):
        parse_type({"list": inside})


def test_a_record_member_name_with_a_lone_surrogate_is_invalid() -> None:
    with pytest.raises(ValueMismatch) as info:
        parse_type({"record": {"a\ud800": "nat"}})
    assert (info.value.code, info.value.pointer) == ("type.invalid", "/record")


# --- air.cbor ------------------------------------------------------------------------------


def _cbor_error(data: bytes) -> tuple[str, str]:
    with pytest.raises(CborError) as info:
        cbor.loads(data)
    return (info.value.code, info.value.pointer)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(cbor2.dumps(2**64), ("tag.unsupported", "/"), id="tag-2"),
        pytest.param(cbor2.dumps(-(2**64) - 1), ("tag.unsupported", "/"), id="tag-3"),
        pytest.param(cbor2.dumps([1, 2**70]), ("tag.unsupported", "/1"), id="tag-2-in-list"),
        pytest.param(
            cbor2.dumps({2**70: 1}), ("tag.unsupported", "/1180591620717411303424"), id="tag-2-key"
        ),
        pytest.param(bytes([0xC2, 0x41, 0x01]), ("non_canonical", "/"), id="small-bignum"),
        pytest.param(b"\x81" * 10_000 + b"\x00", ("too_deep", "/"), id="10000-deep"),
        pytest.param(b"\x62\xff\xfe", ("text.not_unicode", "/"), id="invalid-utf8"),
        pytest.param(b"\x63\xed\xa0\x80", ("text.not_unicode", "/"), id="encoded-surrogate"),
        pytest.param(b"\xd8\x1c\x81\xd8\x1d\x00", ("too_deep", "/0" * 256), id="self-containing"),
    ],
)
def test_bad_cbor_is_a_cbor_error(data: bytes, expected: tuple[str, str]) -> None:
    assert _cbor_error(data) == expected


def test_the_cbor_depth_limit_is_inclusive_and_the_same_both_ways() -> None:
    inside = _nested(cbor.CBOR_DEPTH_MAX - 1, [])
    assert cbor.loads(cbor.dumps(inside)) == inside
    deeper = [inside]
    with pytest.raises(CborError) as info:
        cbor.dumps(deeper)
    assert info.value.code == "too_deep"
    assert _cbor_error(cbor2.dumps(deeper))[0] == "too_deep"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("\ud800", ("text.not_unicode", "/"), id="surrogate"),
        pytest.param({"a": ["x", "\udc00"]}, ("text.not_unicode", "/a/1"), id="nested-surrogate"),
        pytest.param({"\ud800": 1}, ("text.not_unicode", "/\\ud800"), id="surrogate-key"),
        pytest.param({2**70: 1, "a": 2}, ("int.range", "/1180591620717411303424"), id="key-range"),
        pytest.param([10**5000], ("int.range", "/0"), id="huge-int"),
        pytest.param(_nested(10_000), ("too_deep", "/0" * 256), id="10000-deep"),
    ],
)
def test_what_cbor_cannot_encode_is_a_cbor_error(value: Any, expected: tuple[str, str]) -> None:
    with pytest.raises(CborError) as info:
        cbor.dumps(value)
    assert (info.value.code, info.value.pointer) == expected


# --- AIR files -----------------------------------------------------------------------------


def _diagnostics(text: str | bytes) -> list[tuple[str, str, str]]:
    with pytest.raises(ManifestError) as info:
        load_air([*builtin_sources(), AirSource("bad.air.json", text)])
    return [(d.file, d.pointer, d.code) for d in info.value.diagnostics]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        pytest.param(b"\x7fELF\x02\x01\x01\x00\x00\xff", "air.json.encoding", id="binary"),
        pytest.param('[{"$kind": "manifest",', "air.json.syntax", id="malformed"),
        pytest.param("", "air.json.syntax", id="empty"),
        pytest.param("[" * 10_000 + "]" * 10_000, "air.json.too_deep", id="10000-deep"),
        pytest.param(
            '[{"$kind": "manifest", "air_version": "1", "air_version": "1"}]',
            "air.json.duplicate_key",
            id="duplicate-key",
        ),
        pytest.param('[{"$kind": "\\ud800"}]', "air.json.surrogate", id="surrogate"),
    ],
)
def test_an_unreadable_air_file_is_one_diagnostic_naming_the_file(
    text: str | bytes, code: str
) -> None:
    # The file's own problem, and (as nothing else was read) no manifest.
    assert _diagnostics(text) == [("bad.air.json", "", code), ("<air>", "", "air.manifest.missing")]


def test_a_binary_air_file_on_disk_is_a_diagnostic_not_a_decode_error(tmp_path: Path) -> None:
    (tmp_path / "bad.air.json").write_bytes(b"\x00\x01\xfe\xff")
    (tmp_path / "good.air.json").write_text('{"$kind": "manifest", "air_version": "1"}')
    sources = air_sources(tmp_path)
    assert [type(s.text) for s in sources] == [bytes, str]
    with pytest.raises(ManifestError) as info:
        load_air_path(tmp_path)
    found = [(Path(d.file).name, d.code) for d in info.value.diagnostics]
    assert found == [("bad.air.json", "air.json.encoding")]
    result = CliRunner().invoke(app, ["validate", str(tmp_path), "--json"])
    assert result.exit_code == 1
    assert [d["code"] for d in json.loads(result.stdout)["diagnostics"]] == ["air.json.encoding"]


SCHEMA_CYCLES = {
    "self-record": {"t/A@1": {"record": {"next": {"option": "t/A@1"}}}},
    "self-list": {"t/A@1": {"list": "t/A@1"}},
    "self-set": {"t/A@1": {"set": "t/A@1"}},
    "self-option": {"t/A@1": {"option": "t/A@1"}},
    "self-map": {"t/A@1": {"map": {"key": "text", "value": "t/A@1"}}},
    "self-variant": {"t/A@1": {"variant": {"Leaf": "unit", "Node": "t/A@1"}}},
    "bare-ref": {"t/A@1": "t/A@1"},
    "a-b-a": {"t/A@1": {"record": {"b": "t/B@1"}}, "t/B@1": {"list": "t/A@1"}},
    "a-b-a-bare": {"t/A@1": "t/B@1", "t/B@1": "t/A@1"},
}


@pytest.mark.parametrize("types", SCHEMA_CYCLES.values(), ids=SCHEMA_CYCLES.keys())
def test_circular_schemas_are_one_schema_cycle_error(types: dict[str, Any]) -> None:
    docs: list[Any] = [{"$kind": "defschema", "name": n, "type": t} for n, t in types.items()]
    docs.append({"$kind": "manifest", "air_version": "1"})
    assert _diagnostics(json.dumps(docs)) == [("bad.air.json", "/0/type", "air.schema.cycle")]


def test_a_schema_that_uses_a_cycle_is_not_reported_twice() -> None:
    docs: list[Any] = [
        {"$kind": "defschema", "name": "t/B@1", "type": {"list": "t/A@1"}},
        {"$kind": "defschema", "name": "t/A@1", "type": {"list": "t/A@1"}},
        {"$kind": "manifest", "air_version": "1"},
    ]
    assert _diagnostics(json.dumps(docs)) == [("bad.air.json", "/1/type", "air.schema.cycle")]


def test_a_module_whose_wasm_file_is_missing_is_an_error(tmp_path: Path) -> None:
    docs = json.loads((ROOT / "manifests" / "counter" / "counter.air.json").read_text())
    docs[0]["wasm"] = "nowhere.wasm"
    (tmp_path / "counter.air.json").write_text(json.dumps(docs))
    (tmp_path / "schemas.air.json").write_text(
        (ROOT / "manifests" / "counter" / "schemas.air.json").read_text()
    )
    with pytest.raises(ManifestError) as info:
        load_air_path(tmp_path)
    found = [(d.pointer, d.code, d.severity) for d in info.value.diagnostics]
    assert found == [("/0/wasm", "air.module.wasm_missing", "error")]


# --- a world's stored sources ----------------------------------------------------------------


def _write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "sources.json"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def test_stored_sources_read_back(tmp_path: Path) -> None:
    doc = {
        "format": 1,
        "sources": [{"file": "w.air.json", "text": "[]", "builtin": False}],
        "wasm": {"m.wasm": "blake3:" + "0" * 64},
    }
    sources, wasm = read_world_sources(_write(tmp_path, json.dumps(doc)))
    assert sources == [AirSource("w.air.json", "[]", False)]
    assert wasm == {"m.wasm": "blake3:" + "0" * 64}


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"\x00garbage\xff", id="binary"),
        pytest.param("{not json", id="not-json"),
        pytest.param("", id="empty"),
        pytest.param("[]", id="not-an-object"),
        pytest.param('{"sources": {}, "wasm": {}}', id="sources-not-a-list"),
        pytest.param('{"sources": [{"file": "a"}], "wasm": {}}', id="entry-missing-text"),
        pytest.param(
            '{"sources": [{"file": "a", "text": 1, "builtin": false}], "wasm": {}}',
            id="text-not-text",
        ),
        pytest.param(
            '{"sources": [{"file": "a", "text": "", "builtin": "no"}], "wasm": {}}',
            id="builtin-not-bool",
        ),
        pytest.param('{"sources": []}', id="no-wasm"),
        pytest.param('{"sources": [], "wasm": {"a": 1}}', id="wasm-hash-not-text"),
        pytest.param('{"sources": [], "wasm": {}, "wasm": {}}', id="duplicate-key"),
    ],
)
def test_garbage_stored_sources_are_store_damaged_naming_the_file(
    tmp_path: Path, content: str | bytes
) -> None:
    path = _write(tmp_path, content)
    with pytest.raises(StoreDamaged) as info:
        read_world_sources(path)
    assert info.value.path == str(path)


def test_missing_stored_sources_are_store_damaged(tmp_path: Path) -> None:
    with pytest.raises(StoreDamaged) as info:
        read_world_sources(tmp_path / "sources.json")
    assert info.value.path == str(tmp_path / "sources.json")


def test_decimals_in_range_still_round_trip() -> None:
    # The guard against a 4,300-digit int() must not change what in-range decimals become.
    node = Prim("dec128")
    for text in ["0", "1.50", "-0.000", "123456789012345678901234567890.1234", "1e6111", "1e-6176"]:
        assert Decimal(to_sugar(node, normalise(node, text, {}), {})) == Decimal(text)
