"""Expr: the small, pure expression language inside AIR plans.

Authors write Expr as JSON in defplan steps (``emit_effect.params``, ``await_receipt.for``,
``raise_event.event`` and ``key``, ``assign.expr``, ``end.result``, edge ``when`` guards,
``await_event.where``, ``invariants``). This module parses that JSON into a frozen AST, checks
what can be checked without schemas, evaluates the AST over canonical-form values
(docs/CONTRACTS.md), and prints it back as one canonical JSON form for hashing.

This module is the public surface, the parser and the canonical JSON printer. The AST nodes,
``Env``, ``evaluate`` and the op table live in the private ``air._expr_eval`` (re-exported here;
import them from ``air.expr``), whose docstring records the semantics decided for each op and
the evaluator's invariants.

Grammar (JSON)::

    literal    true | false | <int> | "<text>" | null
               {"bool": b} {"int": i64} {"nat": u64} {"text": s} {"bytes": "<base64>"}
               {"hash": "blake3:<64 hex>"} (raw 32 bytes) {"unit": {}} {"null": {}}
               {"lit": <any JSON>} (objects become dicts, arrays lists)
               AgentOS's constants: {"bytes_b64": "<base64>"} (= "bytes"), {"time_ns": u63}
               and {"duration_ns": i64} (ints: times and durations are ns), {"uuid": "<RFC
               4122 text>"} (raw 16 bytes), {"dec128": "<DecimalString>"} (canonical dec128)
    construct  {"record": {field: Expr}}  {"list": [Expr]}  {"variant": {"tag": T, "value"?: Expr}}
               {"some": Expr} (the value itself)  {"none": {}} (null)
               {"record": {"$schema": "ns/Name@1", field: Expr}} names the record's schema
               {"set": [Expr]} (deduplicated, sorted by canonical CBOR)
               {"map": [{"key": Expr, "value": Expr}, ...]} (int, text or bytes keys, unique)
    reference  {"ref": "@plan.input" | "@var:<name>" | "@step:<id>" | "@event"} + ".field"...,
               or {"ref": "@run.id"} (the run's id, a nat)
    operator   {"op": NAME, "args": [Expr, ...]}

Constants are values, as everywhere in AIR: ``{"time_ns": 5}``, ``{"int": 5}`` and ``5`` are one
constant and print (and hash) alike, as ``{"bytes_b64": b}`` and ``{"bytes": b}`` do; what a
constant means (a time, a uuid) is its position's schema's business. A ``set`` or ``map`` over
constants folds to its canonical value like the other constructs: ``{"set": [2, 1, 2]}`` is the
list ``[1, 2]``, the same value ``{"list": [1, 2]}`` builds, and so prints as that.

ExprOrValue (AgentOS's plain-JSON positions: ``emit_effect.params``, ``raise_event.event``,
``assign.expr``, ``end.result``): a JSON value there is an Expr when ``is_expr_form`` says so,
else a literal read through the schema the position expects (``air._plan_types``). The rule for
an object that could be both: *an Expr form name wins*. ``{"op", "args"}`` and a one-key object
whose key is a form name below (``{"text": ...}``, ``{"ref": ...}``, ``{"variant": ...}``...) are
Exprs, even where the schema has a variant case or a record field of that name; ``{"lit": X}``
forces a literal (X is read through the schema); everything else (scalars, arrays, objects of
other or several keys, such as AgentOS's variant sugar ``{"Tag": value}``) is a literal.

``$schema`` in a record construct is metadata, not a field (AIR v1's way for ``raise_event`` to
say which event it builds): the record parses to a ``SchemaRecord``, which evaluates to the same
value as the record without it and is never folded into a constant, so ``record_schema`` can
read the name back. Only a bare JSON string there is the schema; any other Expr form (``{"text":
s}``, say) makes an ordinary field named ``$schema``, which is how ``to_json`` prints one.

A ref's dotted path selects fields of records, text-keyed maps and variants (``.$tag``,
``.$value``). Bare JSON arrays are not Exprs (write ``list`` or ``lit``); no floats anywhere.

Error codes (``ExprError(pointer, code, detail)``; the pointer is the author's JSON pointer):
  parse: ``expr.parse.float`` ``expr.parse.literal`` ``expr.parse.shape`` ``expr.parse.ref``
         ``expr.parse.unknown_op`` ``expr.parse.arity`` ``expr.parse.type`` ``expr.parse.depth``
  eval:  ``expr.ref.missing`` ``expr.type`` ``expr.get.missing`` ``expr.div_zero``
         ``expr.overflow`` ``expr.map.duplicate`` ``expr.utf8`` ``expr.base64``
         ``expr.too_large`` ``expr.json.syntax`` ``expr.json.mismatch`` ``expr.schema.unknown``

Invariants:
  * Nesting is bounded by ``EXPR_DEPTH_MAX`` at parse time, so parse, evaluate and to_json cannot
    exhaust Python's stack. Values from env (unbounded) are only ever walked iteratively.
  * ``parse_expr(to_json(e)) == e``; equivalent authorings share one canonical form (see to_json).

What it does not do: it knows no schemas. Whether a ref names a real step, whether ``@event``
appears only inside ``where``, whether a path exists in a schema or an arg has the right AIR type
is the validator's job, using ``refs``/``iter_refs``. Env values are trusted to be canonical trees;
evaluate does not re-validate them (a non-canonical value met by an op is ``expr.type``). Build
nodes with ``parse_expr``: hand-built nodes skip its checks.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, assert_never

from air import cbor
from air._expr_eval import (
    CODEC_TEXT_MAX,
    INT_MAX,
    INT_MIN,
    MISSING,
    OP_NAMES,
    OPS,
    Const,
    Env,
    Expr,
    MakeList,
    MakeMap,
    MakeRecord,
    MakeSet,
    MakeVariant,
    Op,
    Ref,
    RefScope,
    check_args,
    children,
    evaluate,
    iter_refs,
    refs,
)
from air._scalars import PRIM_NORMALISERS, dec128_decode
from air.errors import CborError, ExprError, ValueMismatch
from air.types import is_def_name

__all__ = [
    "CODEC_TEXT_MAX",
    "EXPR_DEPTH_MAX",
    "INT_MAX",
    "INT_MIN",
    "MISSING",
    "OP_NAMES",
    "Const",
    "Env",
    "Expr",
    "MakeList",
    "MakeMap",
    "MakeRecord",
    "MakeSet",
    "MakeVariant",
    "Op",
    "Ref",
    "SchemaRecord",
    "evaluate",
    "is_expr_form",
    "iter_refs",
    "parse_expr",
    "record_schema",
    "refs",
    "to_json",
]


@dataclass(frozen=True, slots=True)
class SchemaRecord(MakeRecord):
    """A record construct that names its schema (``"$schema"``); ``schema`` is metadata, not a
    field of the value built. A subclass, so the evaluator and ``children`` treat it as the
    record it is; equality includes ``schema`` and tells it apart from a plain ``MakeRecord``."""

    schema: str = ""


def record_schema(expr: Expr) -> str | None:
    """The ``$schema`` a top-level record Expr names (``raise_event``'s event), else None."""
    return expr.schema if isinstance(expr, SchemaRecord) else None


EXPR_DEPTH_MAX: Final = 64
"""Deepest nesting of Expr nodes (and of containers inside ``lit``); the root is depth 1."""
_I64_MAX: Final = 2**63 - 1
_NO_ENV: Final = Env(plan_input=None)


# ---------------------------------------------------------------------------------- parsing


def parse_expr(obj: Any, pointer: str = "") -> Expr:
    """Parse authored JSON (as from ``json.loads``) into an Expr; ``pointer`` locates ``obj``."""
    _scan_json(obj, pointer)
    return _parse(obj, pointer, 1)


def _child(pointer: str, key: str | int) -> str:
    token = key if isinstance(key, int) else key.replace("~", "~0").replace("/", "~1")
    return f"{pointer}/{token}"


# A child's way back to the root, (parent trail, key); pointers are built only for an error, so
# the scan stays linear however deep the input is.
_Trail: TypeAlias = "tuple[_Trail, str | int] | None"


def _trail_pointer(base: str, trail: _Trail) -> str:
    keys: list[str | int] = []
    while trail is not None:
        trail, key = trail
        keys.append(key)
    for key in reversed(keys):
        base = _child(base, key)
    return base


def _scan_json(obj: Any, pointer: str) -> None:
    """Reject, at their pointer, floats, lone surrogates and non-JSON objects anywhere in ``obj``.

    One iterative pass up front keeps these checks out of every form (and off the stack), so a
    float is ``expr.parse.float`` wherever it sits, even where a string was expected.
    """
    pending: list[tuple[Any, _Trail]] = [(obj, None)]
    while pending:
        item, trail = pending.pop()
        problem = _json_problem(item)
        if problem is not None:
            raise ExprError(_trail_pointer(pointer, trail), *problem)
        if type(item) is dict:
            pending.extend((v, (trail, k)) for k, v in reversed(item.items()))
        elif type(item) is list:
            pending.extend((v, (trail, i)) for i, v in reversed(list(enumerate(item))))


def _json_problem(item: Any) -> tuple[str, str] | None:
    """(code, detail) if ``item`` itself (not its children) is not float-free, valid JSON."""
    if type(item) is float:
        return ("expr.parse.float", "floats are not allowed: AIR has no floats")
    if type(item) is str:
        return _text_problem(item)
    if type(item) is dict:
        for key in item:
            if type(key) is not str:
                return ("expr.parse.shape", f"object key {key!r} is not text")
            if (problem := _text_problem(key)) is not None:
                return problem
        return None
    if item is None or type(item) in (bool, int, list):
        return None
    return ("expr.parse.shape", f"{type(item).__name__} is not JSON")


def _text_problem(text: str) -> tuple[str, str] | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return ("expr.parse.literal", "text has a lone surrogate")
    return None


def _check_depth(at: str, depth: int) -> None:
    if depth > EXPR_DEPTH_MAX:
        detail = f"nesting deeper than EXPR_DEPTH_MAX={EXPR_DEPTH_MAX}"
        raise ExprError(at, "expr.parse.depth", detail)


def _const(value: Any, pointer: str) -> Const:
    return Const(cbor.dumps(value), pointer)


def _parse(obj: Any, at: str, depth: int) -> Expr:
    _check_depth(at, depth)
    if type(obj) is dict:
        return _parse_object(obj, at, depth)
    if type(obj) is list:
        detail = 'a bare JSON array is not an Expr: write {"list": [...]} or {"lit": [...]}'
        raise ExprError(at, "expr.parse.shape", detail)
    return _const(_int_in(obj, at, INT_MIN, INT_MAX) if type(obj) is int else obj, at)


def _parse_object(obj: dict[str, Any], at: str, depth: int) -> Expr:
    if "op" in obj:
        return _parse_op(obj, at, depth)
    if len(obj) != 1:
        raise ExprError(at, "expr.parse.shape", f"an Expr object has one key, found {list(obj)}")
    ((key, payload),) = obj.items()
    form = _FORMS.get(key)
    if form is None:
        raise ExprError(at, "expr.parse.shape", f"unknown Expr form {key!r}")
    return form(payload, _child(at, key), at, depth)


def _parse_op(obj: dict[str, Any], at: str, depth: int) -> Op:
    if set(obj) != {"op", "args"}:
        raise ExprError(at, "expr.parse.shape", "an op object has exactly the keys op and args")
    name, raw_args = obj["op"], obj["args"]
    spec = OPS.get(name) if type(name) is str else None
    if spec is None:
        raise ExprError(_child(at, "op"), "expr.parse.unknown_op", f"unknown op {name!r}")
    if type(raw_args) is not list:
        raise ExprError(_child(at, "args"), "expr.parse.shape", "args is a JSON array")
    low, high = spec.arity
    if len(raw_args) < low or (high is not None and len(raw_args) > high):
        detail = f"{name} takes {_arity_text(low, high)} args, got {len(raw_args)}"
        raise ExprError(_child(at, "args"), "expr.parse.arity", detail)
    args_at = _child(at, "args")
    args = tuple(_parse(a, _child(args_at, i), depth + 1) for i, a in enumerate(raw_args))
    node = Op(name, args, at)
    known = [(i, arg.value) for i, arg in enumerate(args) if type(arg) is Const]
    check_args(node, known, "expr.parse.type")
    if spec.schema_arg is not None:
        schema = args[spec.schema_arg]
        if type(schema) is not Const or not is_def_name(schema.value):
            detail = f"{name} arg {spec.schema_arg} is a constant schema name, ns/Name@version"
            raise ExprError(schema.pointer, "expr.parse.type", detail)
    return node


def _arity_text(low: int, high: int | None) -> str:
    if high is None:
        return f"at least {low}"
    return str(low) if high == low else f"{low} to {high}"


def _fold(node: MakeRecord | MakeList | MakeVariant | MakeSet | MakeMap) -> Expr:
    """A constructor over constants is a constant: ``{"list": [1]}`` is ``{"lit": [1]}``."""
    if all(type(child) is Const for child in children(node)):
        return _const(evaluate(node, _NO_ENV), node.pointer)
    return node


# Forms: (payload, payload pointer, node pointer, depth) -> Expr. The payload is already free of
# floats, lone surrogates and non-JSON objects (_scan_json).
_Form: TypeAlias = Callable[[Any, str, str, int], Expr]


def _int_in(value: Any, at: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ExprError(at, "expr.parse.literal", f"expected an integer in [{low}, {high}]")
    return value


def _empty(payload: Any, at: str) -> None:
    if payload != {}:
        raise ExprError(at, "expr.parse.literal", "expected {}")


def _text(payload: Any, at: str) -> str:
    if type(payload) is not str:
        raise ExprError(at, "expr.parse.literal", "expected text")
    return payload


def _bytes(payload: Any, at: str) -> bytes:
    try:
        return base64.b64decode(_text(payload, at).encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ExprError(at, "expr.parse.literal", "expected standard padded base64") from exc


def _hash(payload: Any, at: str) -> bytes:
    try:
        return cbor.hash_to_raw(_text(payload, at))
    except CborError as exc:
        raise ExprError(at, "expr.parse.literal", "expected blake3:<64 lowercase hex>") from exc


def _bool(payload: Any, at: str) -> bool:
    if type(payload) is not bool:
        raise ExprError(at, "expr.parse.literal", "expected true or false")
    return payload


def _scalar(prim: str) -> Callable[[Any, str], Any]:
    """AgentOS's text constants (uuid, dec128) read as the values of that primitive are."""

    def decode(payload: Any, at: str) -> Any:
        try:
            return PRIM_NORMALISERS[prim](_text(payload, at), at)
        except ValueMismatch as exc:
            raise ExprError(at, "expr.parse.literal", exc.detail) from exc

    return decode


_DECIMAL_RE: Final = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
"""AgentOS's DecimalString, in ASCII digits (Python's Decimal would also take other scripts')."""


def _dec128(payload: Any, at: str) -> Any:
    if not _DECIMAL_RE.fullmatch(_text(payload, at)):
        raise ExprError(at, "expr.parse.literal", "expected a decimal like 12.50 or -1e3")
    return _scalar("dec128")(payload, at)


def _json_value(obj: Any, at: str, depth: int) -> Any:
    """``lit`` payload to a value; each container counts one level, as a constructor would."""
    _check_depth(at, depth)
    if type(obj) is list:
        return [_json_value(item, _child(at, i), depth + 1) for i, item in enumerate(obj)]
    if type(obj) is dict:
        return {k: _json_value(v, _child(at, k), depth + 1) for k, v in obj.items()}
    return _int_in(obj, at, INT_MIN, INT_MAX) if type(obj) is int else obj


def _literal(decode: Callable[[Any, str], Any]) -> _Form:
    return lambda payload, at, node, depth: _const(decode(payload, at), node)


def _form_lit(payload: Any, at: str, node: str, depth: int) -> Expr:
    return _const(_json_value(payload, at, depth), node)


def _form_record(payload: Any, at: str, node: str, depth: int) -> Expr:
    if type(payload) is not dict:
        raise ExprError(at, "expr.parse.shape", "record expects an object of field Exprs")
    schema = payload.get(_SCHEMA_KEY)
    if type(schema) is str:
        if not is_def_name(schema):
            detail = "$schema names a schema: namespace/name@version"
            raise ExprError(_child(at, _SCHEMA_KEY), "expr.parse.literal", detail)
        payload = {k: v for k, v in payload.items() if k != _SCHEMA_KEY}
    fields = [(k, _parse(v, _child(at, k), depth + 1)) for k, v in payload.items()]
    ordered = tuple(sorted(fields, key=lambda kv: kv[0]))
    if type(schema) is str:
        return SchemaRecord(ordered, node, schema=schema)
    return _fold(MakeRecord(ordered, node))


def _form_list(payload: Any, at: str, node: str, depth: int) -> Expr:
    if type(payload) is not list:
        raise ExprError(at, "expr.parse.shape", "list expects an array of Exprs")
    items = tuple(_parse(item, _child(at, i), depth + 1) for i, item in enumerate(payload))
    return _fold(MakeList(items, node))


def _is_tag(tag: Any) -> bool:
    return type(tag) is str and tag != ""


def _form_variant(payload: Any, at: str, node: str, depth: int) -> Expr:
    if type(payload) is not dict or "tag" not in payload or not set(payload) <= {"tag", "value"}:
        raise ExprError(at, "expr.parse.shape", 'variant expects {"tag": T, "value"?: Expr}')
    if not _is_tag(payload["tag"]):
        raise ExprError(_child(at, "tag"), "expr.parse.literal", "a variant tag is non-empty text")
    if "value" in payload:
        value = _parse(payload["value"], _child(at, "value"), depth + 1)
    else:
        value = _const(None, at)
    return _fold(MakeVariant(payload["tag"], value, node))


def _form_set(payload: Any, at: str, node: str, depth: int) -> Expr:
    if type(payload) is not list:
        raise ExprError(at, "expr.parse.shape", "set expects an array of Exprs")
    items = tuple(_parse(item, _child(at, i), depth + 1) for i, item in enumerate(payload))
    return _fold(MakeSet(items, node))


def _form_map(payload: Any, at: str, node: str, depth: int) -> Expr:
    shape = 'map expects an array of {"key": Expr, "value": Expr}'
    if type(payload) is not list:
        raise ExprError(at, "expr.parse.shape", shape)
    entries = []
    for i, entry in enumerate(payload):
        entry_at = _child(at, i)
        if type(entry) is not dict or set(entry) != {"key", "value"}:
            raise ExprError(entry_at, "expr.parse.shape", shape)
        key = _parse(entry["key"], _child(entry_at, "key"), depth + 1)
        value = _parse(entry["value"], _child(entry_at, "value"), depth + 1)
        entries.append((key, value))
    return _fold(MakeMap(tuple(entries), node))


def _form_some(payload: Any, at: str, node: str, depth: int) -> Expr:
    return _parse(payload, at, depth + 1)


def _form_ref(payload: Any, at: str, node: str, depth: int) -> Expr:
    bad = ExprError(
        at, "expr.parse.ref", "expected @plan.input, @var:<n>, @step:<id>, @event or @run.id"
    )
    if type(payload) is not str or not payload.startswith("@"):
        raise bad
    head, *path = payload[1:].split(".")
    scope: RefScope
    name = ""
    if head == "plan" and path[:1] == ["input"]:
        scope, path = "plan.input", path[1:]
    elif head == "event":
        scope = "event"
    elif head == "run" and path == ["id"]:
        scope, path = "run.id", []
    elif head.startswith("var:"):
        scope, name = "var", head.removeprefix("var:")
    elif head.startswith("step:"):
        scope, name = "step", head.removeprefix("step:")
    else:
        raise bad
    if (scope in ("var", "step") and not name) or "" in path:
        raise ExprError(at, "expr.parse.ref", f"empty name or path segment in {payload!r}")
    return Ref(scope, name, tuple(path), node)


_SCHEMA_KEY: Final = "$schema"

_FORMS: Final[dict[str, _Form]] = {
    "bool": _literal(_bool),
    "int": _literal(lambda p, at: _int_in(p, at, INT_MIN, _I64_MAX)),
    "nat": _literal(lambda p, at: _int_in(p, at, 0, INT_MAX)),
    "text": _literal(_text),
    "bytes": _literal(_bytes),
    "hash": _literal(_hash),
    "unit": _literal(_empty),
    "null": _literal(_empty),
    "none": _literal(_empty),
    "lit": _form_lit,
    "record": _form_record,
    "list": _form_list,
    "variant": _form_variant,
    "some": _form_some,
    "ref": _form_ref,
    "set": _form_set,
    "map": _form_map,
    "bytes_b64": _literal(_bytes),
    "time_ns": _literal(lambda p, at: _int_in(p, at, 0, _I64_MAX)),
    "duration_ns": _literal(lambda p, at: _int_in(p, at, INT_MIN, _I64_MAX)),
    "uuid": _literal(_scalar("uuid")),
    "dec128": _literal(_dec128),
}


def is_expr_form(obj: Any) -> bool:
    """Whether JSON in an ExprOrValue position is an Expr (see the module docstring): an object
    of exactly ``op`` and ``args``, or a one-key object whose key is an Expr form other than
    ``lit``. Anything else there is a literal, read through the position's schema."""
    if type(obj) is not dict:
        return False
    if "op" in obj:
        return set(obj) == {"op", "args"}
    return len(obj) == 1 and next(iter(obj)) in _FORMS and "lit" not in obj


# ------------------------------------------------------------------------------ canonical JSON


def to_json(expr: Expr) -> Any:
    """The canonical JSON of ``expr``: what plan hashes are computed over.

    Forms that collapse: ``{"text": s}`` to ``s``; ``{"int": n}`` and ``{"nat": n}`` to ``n``;
    ``{"bool": b}`` to ``b``; ``{"unit": {}}``, ``{"null": {}}``, ``{"none": {}}`` to ``null``;
    ``{"hash": h}`` to ``{"bytes": <base64>}``; ``{"some": e}`` to ``e``; ``lit`` and constructors
    whose parts are all constant to constructors over canonical constants (lists as ``list``,
    ``{"$tag", "$value"}`` dicts as ``variant`` without ``value`` when it is null, dicts with an
    int or bytes key as ``map`` entries sorted by the key's canonical CBOR, other dicts as
    ``record``, dec128 as ``{"dec128": <its Decimal text>}``); ``bytes_b64``, ``uuid`` to
    ``{"bytes": <base64>}``; ``time_ns``, ``duration_ns`` to the int. Record fields are emitted in sorted order, a ``SchemaRecord``'s ``$schema``
    first; a *field* named ``$schema`` holding text is printed as ``{"text": s}``, so that it
    reads back as a field and not as the record's schema.
    """
    match expr:
        case Const():
            return _value_json(expr.value)
        case Ref():
            return {"ref": "@" + ".".join((expr.root, *expr.path))}
        case Op():
            return {"op": expr.name, "args": [to_json(arg) for arg in expr.args]}
        case SchemaRecord():
            fields = _record_json({name: to_json(value) for name, value in expr.fields})
            return {"record": {_SCHEMA_KEY: expr.schema, **fields["record"]}}
        case MakeRecord():
            return _record_json({name: to_json(value) for name, value in expr.fields})
        case MakeList():
            return {"list": [to_json(item) for item in expr.items]}
        case MakeVariant():
            return _variant_json(expr.tag, to_json(expr.value))
        case MakeSet():
            return {"set": [to_json(item) for item in expr.items]}
        case MakeMap():
            return {"map": [{"key": to_json(k), "value": to_json(v)} for k, v in expr.entries]}
        case _:
            assert_never(expr)


def _variant_json(tag: str, value: Any) -> Any:
    return {"variant": {"tag": tag} if value is None else {"tag": tag, "value": value}}


def _value_json(value: Any) -> Any:
    if type(value) is bytes:
        return {"bytes": base64.b64encode(value).decode("ascii")}
    if type(value) is list:
        return {"list": [_value_json(item) for item in value]}
    if type(value) is dict:
        if value.keys() == {"$tag", "$value"} and _is_tag(value["$tag"]):
            return _variant_json(value["$tag"], _value_json(value["$value"]))
        if any(type(k) is not str for k in value):  # a map with int or bytes keys
            entries = sorted(value.items(), key=lambda kv: cbor.dumps(kv[0]))
            pairs = [{"key": _value_json(k), "value": _value_json(v)} for k, v in entries]
            return {"map": pairs}
        return _record_json({k: _value_json(value[k]) for k in sorted(value)})
    if type(value) is cbor.Tag:  # dec128, the one tag in the value model
        return {"dec128": str(dec128_decode(value.value))}
    return value


def _record_json(fields: dict[str, Any]) -> dict[str, Any]:
    if type(fields.get(_SCHEMA_KEY)) is str:  # a field, not the record's schema: see to_json
        fields = {**fields, _SCHEMA_KEY: {"text": fields[_SCHEMA_KEY]}}
    return {"record": fields}
