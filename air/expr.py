"""Expr: the small, pure expression language inside AIR plans.

Authors write Expr as JSON in defplan steps (``emit_effect.params``, ``raise_event.value`` and
``key``, ``assign.value``, edge ``when`` guards, ``await_event.where``, ``invariants``,
``output``). This module parses that JSON into a frozen AST, checks what can be checked without
schemas, evaluates the AST over canonical-form values (docs/CONTRACTS.md), and prints it back as
one canonical JSON form for hashing.

Grammar (JSON)::

    literal    true | false | <int> | "<text>" | null
               {"bool": b} {"int": i64} {"nat": u64} {"text": s} {"bytes": "<base64>"}
               {"hash": "blake3:<64 hex>"} (raw 32 bytes) {"unit": {}} {"null": {}}
               {"lit": <any JSON>} (objects become dicts, arrays lists)
    construct  {"record": {field: Expr}}  {"list": [Expr]}  {"variant": {"tag": T, "value"?: Expr}}
               {"some": Expr} (the value itself)  {"none": {}} (null)
    reference  {"ref": "@plan.input" | "@var:<name>" | "@step:<id>" | "@event"} + ".field"...
    operator   {"op": NAME, "args": [Expr, ...]}

A ref's dotted path selects fields of records, text-keyed maps and variants (``.$tag``,
``.$value``). Bare JSON arrays are not Exprs (write ``list`` or ``lit``); no floats anywhere.

Error codes (``ExprError(pointer, code, detail)``; the pointer is the author's JSON pointer):
  parse: ``expr.parse.float`` ``expr.parse.literal`` ``expr.parse.shape`` ``expr.parse.ref``
         ``expr.parse.unknown_op`` ``expr.parse.arity`` ``expr.parse.type`` ``expr.parse.depth``
  eval:  ``expr.ref.missing`` ``expr.type`` ``expr.get.missing`` ``expr.div_zero``
         ``expr.overflow``

Semantics decided here:
  * eq, ne and list ``contains`` compare deeply and type-strictly: ``true`` is not ``1`` (Python
    says ``True == 1``), text is not bytes; map comparison ignores order.
  * div truncates toward zero and mod takes the dividend's sign, like Rust's ``/`` ``%``, C99 and
    WASM ``i64.div_s``/``i64.rem_s``, so a plan and a C or Zig reducer agree on negative operands.
    Python's ``//`` floors and would silently disagree (-7 // 2 == -4, but div(-7, 2) == -3).
  * add sub mul div mod results must lie in i64 or u64, [-2**63, 2**64-1], else ``expr.overflow``.
  * and/or take two or more bools and evaluate left to right, stopping at the first deciding
    value; later args are not evaluated, so their errors never surface. The order is fixed, so the
    outcome (value or error) is deterministic. concat is variadic too (two or more args).
  * get(c, k) on an absent map key or list index fails with ``expr.get.missing``; get(c, k, d)
    returns d instead. Like every op but and/or, all args (d included) are evaluated first.
  * has(map, key) is key presence; membership in a list is contains(list, x).
  * Static check: a constant argument of the wrong kind (``add(1, "a")``) is ``expr.parse.type``,
    even where and/or would skip it at run time.

Invariants:
  * evaluate is pure and total: it never mutates env, and fails only with ``ExprError`` carrying a
    stable code and the pointer of the offending sub-expression. Every op checks its inputs;
    nothing is caught broadly. A result may share structure with env values (refs are not
    copied), so callers must not mutate results; constants are decoded afresh on each use.
  * Nesting is bounded by ``EXPR_DEPTH_MAX`` at parse time, so parse, evaluate and to_json cannot
    exhaust Python's stack. Values from env (unbounded) are only ever walked iteratively.
  * ``parse_expr(to_json(e)) == e``; equivalent authorings share one canonical form (see to_json).
  * Nodes compare by content; ``pointer`` is provenance and takes no part in equality.

What it does not do: it knows no schemas. Whether a ref names a real step, whether ``@event``
appears only inside ``where``, whether a path exists in a schema or an arg has the right AIR type
is the validator's job, using ``refs``/``iter_refs``. Env values are trusted to be canonical trees;
evaluate does not re-validate them (a non-canonical value met by an op is ``expr.type``). Build
nodes with ``parse_expr``: hand-built nodes skip its checks. No dec128 literals yet.
"""

from __future__ import annotations

import base64
import binascii
import enum
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias, assert_never

from air import cbor
from air.errors import CborError, ExprError

__all__ = [
    "EXPR_DEPTH_MAX",
    "INT_MAX",
    "INT_MIN",
    "MISSING",
    "OP_NAMES",
    "Const",
    "Env",
    "Expr",
    "MakeList",
    "MakeRecord",
    "MakeVariant",
    "Op",
    "Ref",
    "evaluate",
    "iter_refs",
    "parse_expr",
    "refs",
    "to_json",
]

EXPR_DEPTH_MAX: Final = 64
"""Deepest nesting of Expr nodes (and of containers inside ``lit``); the root is depth 1."""
INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**64 - 1
_I64_MAX: Final = 2**63 - 1


class _Missing(enum.Enum):
    MISSING = "MISSING"


MISSING: Final = _Missing.MISSING
"""``Env.event`` outside an await_event ``where``: ``@event`` then fails with expr.ref.missing."""


# ---------------------------------------------------------------------------------------- AST

RefScope: TypeAlias = Literal["plan.input", "var", "step", "event"]


@dataclass(frozen=True, slots=True, repr=False)
class Const:
    """A constant, held as canonical CBOR: immutable, hashable, and equal only if type-equal."""

    value_cbor: bytes
    pointer: str = field(default="", compare=False)

    @property
    def value(self) -> Any:
        """A fresh copy of the value, so callers cannot mutate the AST through a result."""
        return cbor.loads(self.value_cbor)

    def __repr__(self) -> str:
        return f"Const({self.value!r}, pointer={self.pointer!r})"


@dataclass(frozen=True, slots=True)
class Ref:
    scope: RefScope
    name: str  # the var name or step id; "" for plan.input and event
    path: tuple[str, ...]
    pointer: str = field(default="", compare=False)

    @property
    def root(self) -> str:
        """``plan.input``, ``var:<name>``, ``step:<id>`` or ``event``."""
        return f"{self.scope}:{self.name}" if self.name else self.scope


@dataclass(frozen=True, slots=True)
class Op:
    name: str
    args: tuple[Expr, ...]
    pointer: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class MakeRecord:
    fields: tuple[tuple[str, Expr], ...]  # sorted by field name
    pointer: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class MakeList:
    items: tuple[Expr, ...]
    pointer: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class MakeVariant:
    tag: str
    value: Expr
    pointer: str = field(default="", compare=False)


Expr: TypeAlias = Const | Ref | Op | MakeRecord | MakeList | MakeVariant


@dataclass(frozen=True, slots=True)
class Env:
    """What refs read. ``steps`` maps a finished step's id to its result (e.g. a receipt)."""

    plan_input: Any
    vars: Mapping[str, Any] = field(default_factory=dict)
    steps: Mapping[str, Any] = field(default_factory=dict)
    event: Any | _Missing = MISSING


def _children(expr: Expr) -> tuple[Expr, ...]:
    match expr:
        case Op():
            return expr.args
        case MakeRecord():
            return tuple(value for _, value in expr.fields)
        case MakeList():
            return expr.items
        case MakeVariant():
            return (expr.value,)
        case _:
            return ()


def iter_refs(expr: Expr) -> Iterator[Ref]:
    """Every ref in ``expr``, in document order; each carries its pointer for diagnostics."""
    if type(expr) is Ref:
        yield expr
    for child in _children(expr):
        yield from iter_refs(child)


def refs(expr: Expr) -> set[str]:
    """The ref roots ``expr`` reads: ``plan.input``, ``var:<name>``, ``step:<id>``, ``event``."""
    return {ref.root for ref in iter_refs(expr)}


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
    spec = _OPS.get(name) if type(name) is str else None
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
    _check_args(node, known, "expr.parse.type")
    return node


def _arity_text(low: int, high: int | None) -> str:
    if high is None:
        return f"at least {low}"
    return str(low) if high == low else f"{low} to {high}"


def _fold(node: MakeRecord | MakeList | MakeVariant) -> Expr:
    """A constructor over constants is a constant: ``{"list": [1]}`` is ``{"lit": [1]}``."""
    if all(type(child) is Const for child in _children(node)):
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
    fields = [(k, _parse(v, _child(at, k), depth + 1)) for k, v in payload.items()]
    return _fold(MakeRecord(tuple(sorted(fields, key=lambda kv: kv[0])), node))


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


def _form_some(payload: Any, at: str, node: str, depth: int) -> Expr:
    return _parse(payload, at, depth + 1)


def _form_ref(payload: Any, at: str, node: str, depth: int) -> Expr:
    bad = ExprError(at, "expr.parse.ref", "expected @plan.input, @var:<n>, @step:<id> or @event")
    if type(payload) is not str or not payload.startswith("@"):
        raise bad
    head, *path = payload[1:].split(".")
    scope: RefScope
    name = ""
    if head == "plan" and path[:1] == ["input"]:
        scope, path = "plan.input", path[1:]
    elif head == "event":
        scope = "event"
    elif head.startswith("var:"):
        scope, name = "var", head.removeprefix("var:")
    elif head.startswith("step:"):
        scope, name = "step", head.removeprefix("step:")
    else:
        raise bad
    if (scope in ("var", "step") and not name) or "" in path:
        raise ExprError(at, "expr.parse.ref", f"empty name or path segment in {payload!r}")
    return Ref(scope, name, tuple(path), node)


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
}


# ------------------------------------------------------------------------------- evaluation


def evaluate(expr: Expr, env: Env) -> Any:
    """The canonical-form value of ``expr`` in ``env``; any failure is a deterministic ExprError."""
    match expr:
        case Const():
            return expr.value
        case Ref():
            return _eval_ref(expr, env)
        case Op():
            return _OPS[expr.name].impl(expr, env)
        case MakeRecord():
            return {name: evaluate(value, env) for name, value in expr.fields}
        case MakeList():
            return [evaluate(item, env) for item in expr.items]
        case MakeVariant():
            return {"$tag": expr.tag, "$value": evaluate(expr.value, env)}
        case _:
            assert_never(expr)


_NO_ENV: Final = Env(plan_input=None)


def _ref_root(ref: Ref, env: Env) -> Any:
    if ref.scope == "plan.input":
        return env.plan_input
    if ref.scope == "event":
        found = env.event
    else:
        found = (env.vars if ref.scope == "var" else env.steps).get(ref.name, MISSING)
    if found is MISSING:
        raise ExprError(ref.pointer, "expr.ref.missing", f"@{ref.root} is not available here")
    return found


def _eval_ref(ref: Ref, env: Env) -> Any:
    value = _ref_root(ref, env)
    for segment in ref.path:
        if type(value) is not dict:
            detail = f"cannot select .{segment} from {_kind(value)} in @{ref.root}"
            raise ExprError(ref.pointer, "expr.type", detail)
        if segment not in value:
            detail = f"no field .{segment} in @{ref.root}"
            raise ExprError(ref.pointer, "expr.ref.missing", detail)
        value = value[segment]
    return value


_KINDS: Final[dict[type, str]] = {
    bool: "bool",
    int: "int",
    str: "text",
    bytes: "bytes",
    list: "list",
    dict: "map",  # records, variants and maps alike
    type(None): "unit",
    cbor.Tag: "dec128",
}


def _kind(value: Any) -> str:
    """The runtime kind of a canonical value; ``unsupported`` for anything outside the model."""
    return _KINDS.get(type(value), "unsupported")


def _check_args(node: Op, indexed: Iterable[tuple[int, Any]], code: str) -> None:
    """Check argument kinds against the op's signature; ``indexed`` may skip unknown args."""
    spec = _OPS[node.name]
    first: tuple[int, str] | None = None
    for i, value in indexed:
        kind = _kind(value)
        allowed = spec.kinds[min(i, len(spec.kinds) - 1)]
        if kind not in allowed:
            detail = f"{node.name} arg {i} must be {' or '.join(sorted(allowed))}, found {kind}"
            raise ExprError(node.args[i].pointer, code, detail)
        if spec.same_kind and first is not None and kind != first[1]:
            detail = f"{node.name} arg {i} is {kind} but arg {first[0]} is {first[1]}"
            raise ExprError(node.args[i].pointer, code, detail)
        first = first or (i, kind)


def _strict_args(node: Op, env: Env) -> list[Any]:
    values = [evaluate(arg, env) for arg in node.args]
    _check_args(node, enumerate(values), "expr.type")
    return values


def _deep_equal(node: Op, a: Any, b: Any) -> bool:
    """Type-strict structural equality, iterative so that deep values cannot overflow the stack."""
    pending = [(a, b)]
    while pending:
        x, y = pending.pop()
        kind = _kind(x)
        if "unsupported" in (kind, _kind(y)):
            raise ExprError(node.pointer, "expr.type", "a value outside the canonical model")
        if kind != _kind(y):
            return False
        if kind == "list":
            if len(x) != len(y):
                return False
            pending.extend(zip(x, y, strict=True))
        elif kind == "map":
            if x.keys() != y.keys():
                return False
            pending.extend((x[k], y[k]) for k in x)
        elif x != y:
            return False
    return True


def _in_range(node: Op, result: int) -> int:
    if not INT_MIN <= result <= INT_MAX:
        detail = f"{node.name} result {result} is outside [{INT_MIN}, {INT_MAX}]"
        raise ExprError(node.pointer, "expr.overflow", detail)
    return result


def _div_trunc(node: Op, a: int, b: int) -> int:
    if b == 0:
        raise ExprError(node.pointer, "expr.div_zero", f"{node.name} by zero")
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


_Impl: TypeAlias = Callable[[Op, Env], Any]


def _binary(fn: Callable[[Any, Any], Any], checked: bool = False) -> _Impl:
    def impl(node: Op, env: Env) -> Any:
        a, b = _strict_args(node, env)
        result = fn(a, b)
        return _in_range(node, result) if checked else result

    return impl


def _logic(stop_on: bool) -> _Impl:
    def impl(node: Op, env: Env) -> bool:
        for i, arg in enumerate(node.args):
            value = evaluate(arg, env)
            _check_args(node, [(i, value)], "expr.type")
            if value == stop_on:  # a bool by now; `is` would make mypy narrow stop_on to Any
                return stop_on
        return not stop_on

    return impl


def _op_div(node: Op, env: Env) -> int:
    a, b = _strict_args(node, env)
    return _in_range(node, _div_trunc(node, a, b))  # only INT_MAX / -1 can leave the range


def _op_mod(node: Op, env: Env) -> int:
    a, b = _strict_args(node, env)
    remainder: int = a - b * _div_trunc(node, a, b)  # |remainder| < |b|: always in range
    return remainder


def _starts_with(a: Any, b: Any) -> bool:
    return bool(a.startswith(b))


def _ends_with(a: Any, b: Any) -> bool:
    return bool(a.endswith(b))


def _op_len(node: Op, env: Env) -> int:
    (value,) = _strict_args(node, env)
    return len(value)  # a str is a sequence of code points, so text length is in code points


def _op_not(node: Op, env: Env) -> bool:
    (value,) = _strict_args(node, env)
    return not value


def _op_get(node: Op, env: Env) -> Any:
    container, key, *default = _strict_args(node, env)
    if type(container) is list:
        if type(key) is not int:
            raise ExprError(node.args[1].pointer, "expr.type", "a list index is an int")
        found = container[key] if 0 <= key < len(container) else MISSING
    else:
        found = container.get(key, MISSING)
    if found is not MISSING:
        return found
    if default:
        return default[0]
    raise ExprError(node.pointer, "expr.get.missing", f"no entry {key!r}")


def _op_has(node: Op, env: Env) -> bool:
    container, key = _strict_args(node, env)
    return key in container


def _op_eq(node: Op, env: Env) -> bool:
    a, b = _strict_args(node, env)
    return _deep_equal(node, a, b)


def _op_ne(node: Op, env: Env) -> bool:
    return not _op_eq(node, env)


def _op_concat(node: Op, env: Env) -> Any:
    values = _strict_args(node, env)
    if type(values[0]) is str:
        return "".join(values)
    if type(values[0]) is bytes:
        return b"".join(values)
    return [item for value in values for item in value]


def _op_contains(node: Op, env: Env) -> bool:
    haystack, needle = _strict_args(node, env)
    if type(haystack) is list:
        return any(_deep_equal(node, item, needle) for item in haystack)
    if type(needle) is not type(haystack):
        detail = f"contains on {_kind(haystack)} needs {_kind(haystack)}, found {_kind(needle)}"
        raise ExprError(node.args[1].pointer, "expr.type", detail)
    return bool(needle in haystack)


@dataclass(frozen=True, slots=True)
class _OpSpec:
    impl: _Impl
    arity: tuple[int, int | None]  # (least, most); None: variadic
    kinds: tuple[frozenset[str], ...]  # allowed kinds per arg; the last repeats
    same_kind: bool = False  # every arg must have the same kind


_ANY: Final = frozenset({"bool", "int", "text", "bytes", "list", "map", "unit", "dec128"})
_BOOL: Final = frozenset({"bool"})
_INT: Final = frozenset({"int"})
_KEY: Final = frozenset({"int", "text", "bytes"})  # map keys and list indexes; also orderable
_AFFIX: Final = frozenset({"text", "bytes"})
_SEQ: Final = frozenset({"text", "bytes", "list"})
_MAP: Final = frozenset({"map"})

_OPS: Final[dict[str, _OpSpec]] = {
    "len": _OpSpec(_op_len, (1, 1), (_SEQ | _MAP,)),
    "get": _OpSpec(_op_get, (2, 3), (_MAP | {"list"}, _KEY, _ANY)),
    "has": _OpSpec(_op_has, (2, 2), (_MAP, _KEY)),
    "eq": _OpSpec(_op_eq, (2, 2), (_ANY,)),
    "ne": _OpSpec(_op_ne, (2, 2), (_ANY,)),
    "lt": _OpSpec(_binary(operator.lt), (2, 2), (_KEY,), same_kind=True),
    "le": _OpSpec(_binary(operator.le), (2, 2), (_KEY,), same_kind=True),
    "gt": _OpSpec(_binary(operator.gt), (2, 2), (_KEY,), same_kind=True),
    "ge": _OpSpec(_binary(operator.ge), (2, 2), (_KEY,), same_kind=True),
    "and": _OpSpec(_logic(stop_on=False), (2, None), (_BOOL,)),
    "or": _OpSpec(_logic(stop_on=True), (2, None), (_BOOL,)),
    "not": _OpSpec(_op_not, (1, 1), (_BOOL,)),
    "concat": _OpSpec(_op_concat, (2, None), (_SEQ,), same_kind=True),
    "add": _OpSpec(_binary(operator.add, checked=True), (2, 2), (_INT,)),
    "sub": _OpSpec(_binary(operator.sub, checked=True), (2, 2), (_INT,)),
    "mul": _OpSpec(_binary(operator.mul, checked=True), (2, 2), (_INT,)),
    "div": _OpSpec(_op_div, (2, 2), (_INT,)),
    "mod": _OpSpec(_op_mod, (2, 2), (_INT,)),
    "starts_with": _OpSpec(_binary(_starts_with), (2, 2), (_AFFIX,), same_kind=True),
    "ends_with": _OpSpec(_binary(_ends_with), (2, 2), (_AFFIX,), same_kind=True),
    "contains": _OpSpec(_op_contains, (2, 2), (_SEQ, _ANY)),
}


OP_NAMES: Final = frozenset(_OPS)


# ------------------------------------------------------------------------------ canonical JSON


def to_json(expr: Expr) -> Any:
    """The canonical JSON of ``expr``: what plan hashes are computed over.

    Forms that collapse: ``{"text": s}`` to ``s``; ``{"int": n}`` and ``{"nat": n}`` to ``n``;
    ``{"bool": b}`` to ``b``; ``{"unit": {}}``, ``{"null": {}}``, ``{"none": {}}`` to ``null``;
    ``{"hash": h}`` to ``{"bytes": <base64>}``; ``{"some": e}`` to ``e``; ``lit`` and constructors
    whose parts are all constant to constructors over canonical constants (lists as ``list``,
    ``{"$tag", "$value"}`` dicts as ``variant`` without ``value`` when it is null, other dicts as
    ``record``). Record fields are emitted in sorted order.
    """
    match expr:
        case Const():
            return _value_json(expr.value)
        case Ref():
            return {"ref": "@" + ".".join((expr.root, *expr.path))}
        case Op():
            return {"op": expr.name, "args": [to_json(arg) for arg in expr.args]}
        case MakeRecord():
            return {"record": {name: to_json(value) for name, value in expr.fields}}
        case MakeList():
            return {"list": [to_json(item) for item in expr.items]}
        case MakeVariant():
            return _variant_json(expr.tag, to_json(expr.value))
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
        return {"record": {k: _value_json(value[k]) for k in sorted(value)}}
    return value
