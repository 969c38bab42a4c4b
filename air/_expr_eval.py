"""The Expr tree and its evaluator: the nodes, ``Env``, ``evaluate`` and the op table.

Private to ``air.expr``, which re-exports the public names and adds the parser and canonical
JSON on top; import from ``air.expr``. The op table (``OPS``) is shared with the parser, which
reads each op's arity and checks constant arguments with ``check_args`` at parse time.

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
  * ``set`` constructs dedupe their items and sort them by canonical CBOR (the canonical form of
    a set); ``map`` constructs take int, text or bytes keys (uuid and hash keys are bytes), sort
    entries by the key's canonical CBOR, and fail with ``expr.map.duplicate`` on a repeated key
    rather than pick one: which entry wins would be an authoring accident.

Ops that build requests (issue 22): ``utf8_encode`` (text -> bytes), ``utf8_decode`` (bytes ->
text; bytes that are not UTF-8 are ``expr.utf8``), ``base64_encode`` (bytes -> standard padded
base64 text), ``base64_decode`` (text -> bytes; not base64 is ``expr.base64``, more than
``CODEC_TEXT_MAX`` characters is ``expr.too_large`` before any decoding), ``int_to_text`` (an int
in decimal, ``-`` for negatives, no leading zeros), ``json_encode(v, "ns/S@1")`` (``v`` checked
against schema ``S`` and printed as compact JSON with sorted keys, in the sugar lens of
``air.values.to_sugar``; ``v`` not of ``S`` is ``expr.json.mismatch``) and ``json_decode(t,
"ns/S@1")`` (JSON text read through ``S`` by ``air.values.normalise``: not JSON, too deep or
longer than ``CODEC_TEXT_MAX`` is ``expr.json.syntax`` / ``expr.too_large``, not an ``S`` is
``expr.json.mismatch``). The schema argument of the two JSON ops is a constant def name (checked
at parse time) and is looked up in ``Env.schemas``; a name missing there is
``expr.schema.unknown``.

Invariants:
  * evaluate is pure and total: it never mutates env, and fails only with ``ExprError`` carrying a
    stable code and the pointer of the offending sub-expression. Every op checks its inputs;
    nothing is caught broadly. A result may share structure with env values (refs are not
    copied), so callers must not mutate results; constants are decoded afresh on each use.
  * Nesting is bounded at parse time (``air.expr.EXPR_DEPTH_MAX``), so evaluate recurses only
    over the tree; values from env (unbounded) are only ever walked iteratively.
  * Nodes compare by content; ``pointer`` is provenance and takes no part in equality.

What it does not do: env values are trusted to be canonical trees; evaluate does not re-validate
them (a non-canonical value met by an op is ``expr.type``). Nodes built by hand skip the parser's
checks (``air.expr.parse_expr``).
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias, assert_never

from air import cbor, jsontext
from air.errors import CborError, ExprError, JsonError, ValueMismatch
from air.types import Ref as TypeRef
from air.types import TypeNode
from air.values import check as check_value
from air.values import normalise, to_sugar

__all__ = [
    "CODEC_TEXT_MAX",
    "INT_MAX",
    "INT_MIN",
    "MISSING",
    "OPS",
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
    "RefScope",
    "check_args",
    "children",
    "evaluate",
    "iter_refs",
    "kind_of",
    "refs",
]

INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**64 - 1
CODEC_TEXT_MAX: Final = 8 * 1024 * 1024
"""Most characters ``base64_decode`` and ``json_decode`` read: past it, ``expr.too_large``
before any work is done, so a huge input fails cleanly and at once."""


class _Missing(enum.Enum):
    MISSING = "MISSING"


MISSING: Final = _Missing.MISSING
"""``Env.event`` outside an await_event ``where``: ``@event`` then fails with expr.ref.missing."""


# ---------------------------------------------------------------------------------------- AST

RefScope: TypeAlias = Literal["plan.input", "var", "step", "event", "run.id"]


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
        """``plan.input``, ``var:<name>``, ``step:<id>``, ``event`` or ``run.id``."""
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


@dataclass(frozen=True, slots=True)
class MakeSet:
    """``{"set": [Expr]}``: the items, deduplicated and sorted by canonical CBOR when evaluated."""

    items: tuple[Expr, ...]
    pointer: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class MakeMap:
    """``{"map": [{"key": Expr, "value": Expr}]}``: entries in authored order (sorted when
    evaluated, by the key's canonical CBOR)."""

    entries: tuple[tuple[Expr, Expr], ...]
    pointer: str = field(default="", compare=False)


Expr: TypeAlias = Const | Ref | Op | MakeRecord | MakeList | MakeVariant | MakeSet | MakeMap


@dataclass(frozen=True, slots=True)
class Env:
    """What refs read. ``steps`` maps a finished step's id to its result (e.g. a receipt)."""

    plan_input: Any
    vars: Mapping[str, Any] = field(default_factory=dict)
    steps: Mapping[str, Any] = field(default_factory=dict)
    event: Any | _Missing = MISSING
    schemas: Mapping[str, TypeNode] = field(default_factory=dict)
    run_id: int | _Missing = MISSING
    """The run's id (``@run.id``): a nat, unique in the world, the same on every replay."""
    """The world's schemas, by name: what ``json_encode`` and ``json_decode`` read values by."""


def children(expr: Expr) -> tuple[Expr, ...]:
    match expr:
        case Op():
            return expr.args
        case MakeRecord():
            return tuple(value for _, value in expr.fields)
        case MakeList():
            return expr.items
        case MakeVariant():
            return (expr.value,)
        case MakeSet():
            return expr.items
        case MakeMap():
            return tuple(part for entry in expr.entries for part in entry)
        case _:
            return ()


def iter_refs(expr: Expr) -> Iterator[Ref]:
    """Every ref in ``expr``, in document order; each carries its pointer for diagnostics."""
    if type(expr) is Ref:
        yield expr
    for child in children(expr):
        yield from iter_refs(child)


def refs(expr: Expr) -> set[str]:
    """The ref roots ``expr`` reads: ``plan.input``, ``var:<name>``, ``step:<id>``, ``event``."""
    return {ref.root for ref in iter_refs(expr)}


# ------------------------------------------------------------------------------- evaluation


def evaluate(expr: Expr, env: Env) -> Any:
    """The canonical-form value of ``expr`` in ``env``; any failure is a deterministic ExprError."""
    match expr:
        case Const():
            return expr.value
        case Ref():
            return _eval_ref(expr, env)
        case Op():
            return OPS[expr.name].impl(expr, env)
        case MakeRecord():
            return {name: evaluate(value, env) for name, value in expr.fields}
        case MakeList():
            return [evaluate(item, env) for item in expr.items]
        case MakeVariant():
            return {"$tag": expr.tag, "$value": evaluate(expr.value, env)}
        case MakeSet():
            return sorted_set(expr, [evaluate(item, env) for item in expr.items])
        case MakeMap():
            pairs = [(evaluate(k, env), evaluate(v, env), k.pointer) for k, v in expr.entries]
            return sorted_map(expr, pairs)
        case _:
            assert_never(expr)


def _canonical_bytes(node: Expr, value: Any) -> bytes:
    try:
        return cbor.dumps(value)
    except CborError as exc:  # env values are trusted canonical: defence only
        raise ExprError(
            node.pointer, "expr.type", f"a value outside the canonical model: {exc.detail}"
        ) from exc


def sorted_set(node: MakeSet, items: list[Any]) -> list[Any]:
    """The canonical form of a set: items deduplicated, sorted by canonical CBOR."""
    by_bytes = {_canonical_bytes(node, item): item for item in items}
    return [by_bytes[key] for key in sorted(by_bytes)]


def sorted_map(node: MakeMap, pairs: list[tuple[Any, Any, str]]) -> dict[Any, Any]:
    """The canonical form of a map: keys of a key kind, unique, sorted by canonical CBOR."""
    out: dict[bytes, tuple[Any, Any]] = {}
    for key, value, at in pairs:
        if kind_of(key) not in _KEY:
            detail = f"a map key is int, text or bytes, found {kind_of(key)}"
            raise ExprError(at, "expr.type", detail)
        encoded = _canonical_bytes(node, key)
        if encoded in out:
            raise ExprError(at, "expr.map.duplicate", f"map key {key!r} is given twice")
        out[encoded] = (key, value)
    return {out[k][0]: out[k][1] for k in sorted(out)}


def _ref_root(ref: Ref, env: Env) -> Any:
    if ref.scope == "plan.input":
        return env.plan_input
    if ref.scope == "event":
        found = env.event
    elif ref.scope == "run.id":
        found = env.run_id
    else:
        found = (env.vars if ref.scope == "var" else env.steps).get(ref.name, MISSING)
    if found is MISSING:
        raise ExprError(ref.pointer, "expr.ref.missing", f"@{ref.root} is not available here")
    return found


def _eval_ref(ref: Ref, env: Env) -> Any:
    value = _ref_root(ref, env)
    for segment in ref.path:
        if type(value) is not dict:
            detail = f"cannot select .{segment} from {kind_of(value)} in @{ref.root}"
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


def kind_of(value: Any) -> str:
    """The runtime kind of a canonical value; ``unsupported`` for anything outside the model."""
    return _KINDS.get(type(value), "unsupported")


def check_args(node: Op, indexed: Iterable[tuple[int, Any]], code: str) -> None:
    """Check argument kinds against the op's signature; ``indexed`` may skip unknown args."""
    spec = OPS[node.name]
    first: tuple[int, str] | None = None
    for i, value in indexed:
        kind = kind_of(value)
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
    check_args(node, enumerate(values), "expr.type")
    return values


def _deep_equal(node: Op, a: Any, b: Any) -> bool:
    """Type-strict structural equality, iterative so that deep values cannot overflow the stack."""
    pending = [(a, b)]
    while pending:
        x, y = pending.pop()
        kind = kind_of(x)
        if "unsupported" in (kind, kind_of(y)):
            raise ExprError(node.pointer, "expr.type", "a value outside the canonical model")
        if kind != kind_of(y):
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
            check_args(node, [(i, value)], "expr.type")
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
        detail = (
            f"contains on {kind_of(haystack)} needs {kind_of(haystack)}, found {kind_of(needle)}"
        )
        raise ExprError(node.args[1].pointer, "expr.type", detail)
    return bool(needle in haystack)


def _op_utf8_encode(node: Op, env: Env) -> bytes:
    (text,) = _strict_args(node, env)
    try:
        return bytes(text.encode("utf-8"))
    except UnicodeEncodeError as exc:  # a lone surrogate: not canonical, defence only
        raise ExprError(node.args[0].pointer, "expr.utf8", "text with no UTF-8 form") from exc


def _op_utf8_decode(node: Op, env: Env) -> str:
    (data,) = _strict_args(node, env)
    try:
        return str(data.decode("utf-8"))  # strict: surrogates and overlong forms are errors
    except UnicodeDecodeError as exc:
        detail = f"bytes are not UTF-8: {exc.reason} at byte {exc.start}"
        raise ExprError(node.args[0].pointer, "expr.utf8", detail) from exc


def _too_large(node: Op, text: str) -> None:
    if len(text) > CODEC_TEXT_MAX:
        detail = (
            f"{node.name} reads at most CODEC_TEXT_MAX={CODEC_TEXT_MAX} characters, got {len(text)}"
        )
        raise ExprError(node.args[0].pointer, "expr.too_large", detail)


def _op_base64_encode(node: Op, env: Env) -> str:
    (data,) = _strict_args(node, env)
    return base64.b64encode(data).decode("ascii")


def _op_base64_decode(node: Op, env: Env) -> bytes:
    (text,) = _strict_args(node, env)
    _too_large(node, text)
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        detail = "not standard padded base64 (A-Z a-z 0-9 + /, = padding)"
        raise ExprError(node.args[0].pointer, "expr.base64", detail) from exc


def _op_int_to_text(node: Op, env: Env) -> str:
    (number,) = _strict_args(node, env)
    return str(int(number))


def _op_hash(node: Op, env: Env) -> bytes:
    """AgentOS's ``hash``: a value's digest, here blake3 of its canonical CBOR (this build's
    one hash), so equal values hash equal whatever order their maps were built in."""
    (value,) = _strict_args(node, env)
    try:
        return cbor.digest(cbor.dumps(value))
    except CborError as exc:
        raise ExprError(node.args[0].pointer, "expr.hash", f"not a value: {exc}") from exc


def _op_hash_bytes(node: Op, env: Env) -> bytes:
    """AgentOS's ``hash_bytes``: blake3 of the bytes themselves."""
    (data,) = _strict_args(node, env)
    return cbor.digest(data)


def _schema(node: Op, env: Env, name: str) -> TypeNode:
    if name not in env.schemas:
        raise ExprError(node.args[1].pointer, "expr.schema.unknown", f"no schema {name}")
    return TypeRef(name)


def _op_json_encode(node: Op, env: Env) -> str:
    value, name = _strict_args(node, env)
    schema = _schema(node, env, name)
    try:
        check_value(schema, value, env.schemas)
        sugar = to_sugar(schema, value, env.schemas)
    except ValueMismatch as exc:
        detail = f"value is not a {name}: {exc.detail} at {exc.pointer or '/'}"
        raise ExprError(node.args[0].pointer, "expr.json.mismatch", detail) from exc
    return json.dumps(sugar, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _op_json_decode(node: Op, env: Env) -> Any:
    text, name = _strict_args(node, env)
    schema = _schema(node, env, name)
    _too_large(node, text)
    try:
        parsed = jsontext.loads(text, source=node.name)
    except JsonError as exc:
        detail = f"not JSON ({exc.code}): {exc.detail}"
        raise ExprError(node.args[0].pointer, "expr.json.syntax", detail) from exc
    try:
        return normalise(schema, parsed, env.schemas)
    except ValueMismatch as exc:
        detail = f"JSON is not a {name}: {exc.detail} at {exc.pointer or '/'}"
        raise ExprError(node.args[0].pointer, "expr.json.mismatch", detail) from exc


@dataclass(frozen=True, slots=True)
class _OpSpec:
    impl: _Impl
    arity: tuple[int, int | None]  # (least, most); None: variadic
    kinds: tuple[frozenset[str], ...]  # allowed kinds per arg; the last repeats
    same_kind: bool = False  # every arg must have the same kind
    schema_arg: int | None = None  # the arg that is a constant schema name, if any


_ANY: Final = frozenset({"bool", "int", "text", "bytes", "list", "map", "unit", "dec128"})
_BOOL: Final = frozenset({"bool"})
_INT: Final = frozenset({"int"})
_KEY: Final = frozenset({"int", "text", "bytes"})  # map keys and list indexes; also orderable
_AFFIX: Final = frozenset({"text", "bytes"})
_SEQ: Final = frozenset({"text", "bytes", "list"})
_MAP: Final = frozenset({"map"})
_TEXT: Final = frozenset({"text"})
_BYTES: Final = frozenset({"bytes"})

OPS: Final[dict[str, _OpSpec]] = {
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
    "utf8_encode": _OpSpec(_op_utf8_encode, (1, 1), (_TEXT,)),
    "utf8_decode": _OpSpec(_op_utf8_decode, (1, 1), (_BYTES,)),
    "base64_encode": _OpSpec(_op_base64_encode, (1, 1), (_BYTES,)),
    "base64_decode": _OpSpec(_op_base64_decode, (1, 1), (_TEXT,)),
    "int_to_text": _OpSpec(_op_int_to_text, (1, 1), (_INT,)),
    "hash": _OpSpec(_op_hash, (1, 1), (_ANY,)),
    "hash_bytes": _OpSpec(_op_hash_bytes, (1, 1), (_BYTES,)),
    "json_encode": _OpSpec(_op_json_encode, (2, 2), (_ANY, _TEXT), schema_arg=1),
    "json_decode": _OpSpec(_op_json_decode, (2, 2), (_TEXT, _TEXT), schema_arg=1),
}


OP_NAMES: Final = frozenset(OPS)
