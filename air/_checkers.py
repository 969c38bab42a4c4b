"""Compiled strict checkers: what ``air.values.check`` decides, without its walk of the type tree.

``compile_checker(node, schemas)`` turns a type into a tree of closures once. Calling the result
on a value gives what ``check(node, value, schemas)`` gives for every input: the same accept or
reject decision and, on rejection, the same exception with the same code and pointer.

How. The closures are a fast walk that answers only "certainly canonical" (``True``) or "not
sure" (``False``, or any exception it trips on). Refs are resolved, records reduced to a fixed
tuple of ``(field, closure)`` pairs and primitives to one-line tests when compiling, and no
pointer is built. When the fast walk is not sure, the checker runs ``check`` itself, which
raises the precise error, or accepts the rare input the fast walk is stricter about (a ``dict``
subclass, say: the fast walk tests ``type(x) is dict``). So the one invariant that matters is
one-sided: the fast walk never accepts what ``check`` rejects. tests/air/test_values.py holds the
two to it on random types (refs and recursive schemas included) and random values.

Depth. ``check`` refuses a value nested deeper than ``VALUE_DEPTH_MAX`` type levels, and the
fast walk counts nothing, so ``compile_checker`` measures the type first: one that could hold
such a value (a recursive schema, or a chain of refs taller than the limit) is checked by
``check`` alone. AIR v1 has no recursive schemas (the loader refuses a cycle), so the kernel's
checkers all keep the fast walk. The compiler below still handles cycles (its trampolines), so
it stays total if that rule is ever relaxed together with a depth count in the fast walk.

Recursive schemas. A compiler compiles each schema name once and memoises it; while a name is
being compiled its memo entry is a trampoline to the closure being built, so a cycle through a
list, option, map or variant compiles in finite time. A name that is unknown, or whose refs
form a cycle with no structure between them, compiles to "not sure": ``check`` then reports it
where, and only if, a value reaches it, as it always has.

``schemas`` is read when compiling: a checker does not see later changes to the mapping (a
loaded manifest's schemas are fixed).

Rejected alternatives. Raising a private exception that collects pointer segments on the way
out would rebuild ``check``'s codes and details in a second place, where they would drift; the
fallback keeps one source of truth for errors and costs nothing on the accept path. Generating
Python source per type and ``exec``-ing it would save a call per field, but for the counter
state that measured 140 ns against the closures' 170 ns, not worth code that is harder to read
and to trust.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Final, TypeAlias

from air import cbor
from air.errors import ValueMismatch
from air.types import (
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
    resolve,
)
from air.values import INT_MAX, INT_MIN, NAT_MAX, VALUE_DEPTH_MAX, check

__all__ = ["SchemaCheckers", "compile_checker", "dec128_is_canonical"]

_Fast: TypeAlias = Callable[[Any], bool]
_TAG: Final = cbor.Tag

# dec128 (BID, big-endian) fields; see air.values.dec128_encode, whose output this recognises.
_DEC_COEFF_MASK: Final = (1 << 113) - 1
_DEC_COEFF_MAX: Final = 10**34 - 1
_DEC_EXP_FIELD_MAX: Final = 6111 + 6176  # the largest exponent, biased


def compile_checker(node: TypeNode, schemas: Schemas) -> Callable[[Any], None]:
    """A function that raises exactly as ``check(node, obj, schemas)`` does, only faster."""
    if _levels(node, schemas, {}, 0) > VALUE_DEPTH_MAX:
        # ``check`` refuses values deeper than VALUE_DEPTH_MAX and the fast walk counts no
        # depth, so a type that allows such values (recursive, or very tall) gets no fast walk.
        return lambda obj: check(node, obj, schemas)
    fast = _Compiler(schemas).compile(node)

    def checker(obj: Any) -> None:
        try:
            sure = fast(obj)
        except Exception:  # whatever the fast walk trips on is for the reference walk to judge
            sure = False
        if not sure:
            check(node, obj, schemas)

    return checker


def _levels(node: TypeNode, schemas: Schemas, memo: dict[str, int], depth: int) -> int:
    """How many levels ``check`` can recurse below ``node``: an over-estimate, and
    ``VALUE_DEPTH_MAX + 1`` for anything deeper (a cycle through structure included)."""
    too_deep = VALUE_DEPTH_MAX + 1
    if depth > VALUE_DEPTH_MAX:
        return too_deep
    if isinstance(node, Ref):
        if node.name not in memo:
            memo[node.name] = too_deep  # while in progress: reaching it again is a cycle
            try:
                target = resolve(node, schemas)
            except ValueMismatch:  # unknown or a bare ref cycle: ``check`` stops there
                memo[node.name] = 0
            else:
                memo[node.name] = _levels(target, schemas, memo, depth)
        return memo[node.name]
    if isinstance(node, Record | Variant):
        children = [sub for _, sub in (node.fields if isinstance(node, Record) else node.cases)]
    elif isinstance(node, MapT):
        children = [node.key, node.value]
    elif isinstance(node, ListT | SetT | OptionT):
        children = [node.item]
    else:
        return 0
    most = 0
    for child in children:
        most = max(most, _levels(child, schemas, memo, depth + 1))
        if most >= too_deep:
            break
    return min(most + 1, too_deep)


def dec128_is_canonical(raw: bytes) -> bool:
    """True iff ``air.values.dec128_decode`` accepts these 16 bytes.

    The same rule as decoding and re-encoding, in integer arithmetic (decoding builds a
    ``Decimal``: 2.9 µs against 0.26 µs): a zero is all zero bits; otherwise the coefficient fits
    34 digits and has no trailing zero unless the exponent is already the largest. The top two
    exponent bits are never both set, which also keeps the exponent in range.
    """
    bits = int.from_bytes(raw, "big")
    if bits == 0:
        return True
    coeff = bits & _DEC_COEFF_MASK
    exponent_field = (bits >> 113) & 0x3FFF
    return (
        (bits >> 125) & 0b11 != 0b11
        and 0 < coeff <= _DEC_COEFF_MAX
        and (coeff % 10 != 0 or exponent_field == _DEC_EXP_FIELD_MAX)
    )


class _Compiler:
    """Compiles type nodes against one ``schemas`` mapping, each schema name at most once."""

    def __init__(self, schemas: Schemas) -> None:
        self._schemas = schemas
        self._by_name: dict[str, _Fast] = {}

    def compile(self, node: TypeNode) -> _Fast:
        if isinstance(node, Ref):
            return self._ref(node.name)
        if isinstance(node, Prim):
            return _PRIMS.get(node.name, _unsure)
        if isinstance(node, Record):
            return _record(tuple((name, self.compile(sub)) for name, sub in node.fields))
        if isinstance(node, Variant):
            return _variant({name: self.compile(sub) for name, sub in node.cases})
        if isinstance(node, OptionT):
            return _option(self.compile(node.item))
        if isinstance(node, ListT):
            return _list(self.compile(node.item))
        if isinstance(node, SetT):
            return _set(self.compile(node.item))
        if isinstance(node, MapT):
            return _map(self.compile(node.key), self.compile(node.value))
        return _unsure  # not a type node: ``check`` decides what that means

    def _ref(self, name: str) -> _Fast:
        fast = self._by_name.get(name)
        if fast is not None:
            return fast
        try:
            node = resolve(Ref(name), self._schemas)
        except ValueMismatch:  # unknown, or bare refs in a cycle: ``check`` says which, if reached
            self._by_name[name] = _unsure
            return _unsure
        built: list[_Fast] = []

        def trampoline(obj: Any) -> bool:  # only closures compiled inside the cycle keep this
            return built[0](obj)

        self._by_name[name] = trampoline
        fast = self.compile(node)
        built.append(fast)
        self._by_name[name] = fast
        return fast


# --- the closures: True means "certainly canonical"; False or an exception means "ask check" ---


def _unsure(obj: Any) -> bool:
    return False


def _bool(obj: Any) -> bool:
    return obj is True or obj is False


def _int64(obj: Any) -> bool:  # int, time and duration
    return type(obj) is int and INT_MIN <= obj <= INT_MAX


def _nat(obj: Any) -> bool:
    return type(obj) is int and 0 <= obj <= NAT_MAX


def _text(obj: Any) -> bool:
    return type(obj) is str


def _bytes(obj: Any) -> bool:
    return type(obj) is bytes


def _hash(obj: Any) -> bool:
    return type(obj) is bytes and len(obj) == 32


def _uuid(obj: Any) -> bool:
    return type(obj) is bytes and len(obj) == 16


def _unit(obj: Any) -> bool:
    return obj is None


def _dec128(obj: Any) -> bool:
    if type(obj) is not _TAG or obj.tag != cbor.DEC128_TAG:
        return False
    raw = obj.value
    return type(raw) is bytes and len(raw) == 16 and dec128_is_canonical(raw)


_PRIMS: Final[dict[str, _Fast]] = {
    "bool": _bool,
    "int": _int64,
    "nat": _nat,
    "time": _int64,
    "duration": _int64,
    "text": _text,
    "bytes": _bytes,
    "hash": _hash,
    "uuid": _uuid,
    "unit": _unit,
    "dec128": _dec128,
}


def _record(fields: tuple[tuple[str, _Fast], ...]) -> _Fast:
    size = len(fields)

    def record(obj: Any) -> bool:
        # Same size and every field present means no extra field either. A missing field
        # raises KeyError, which sends the value to ``check``.
        if type(obj) is not dict or len(obj) != size:
            return False
        for name, fast in fields:  # noqa: SIM110 - all() over a generator is ~2x slower here
            if not fast(obj[name]):
                return False
        return True

    return record


def _variant(cases: dict[str, _Fast]) -> _Fast:
    def variant(obj: Any) -> bool:
        # Two entries, and both looked up: the keys are exactly "$tag" and "$value".
        if type(obj) is not dict or len(obj) != 2:
            return False
        fast = cases.get(obj["$tag"])
        return fast is not None and fast(obj["$value"])

    return variant


def _option(item: _Fast) -> _Fast:
    def option(obj: Any) -> bool:
        return obj is None or item(obj)

    return option


def _list(item: _Fast) -> _Fast:
    def list_(obj: Any) -> bool:
        return type(obj) is list and all(map(item, obj))

    return list_


def _set(item: _Fast) -> _Fast:
    order = _ORDER_KEYS.get(item, cbor.dumps)

    def set_(obj: Any) -> bool:
        if type(obj) is not list or not all(map(item, obj)):
            return False
        if len(obj) < 2:
            return True
        keys = list(map(order, obj))
        return all(map(operator.lt, keys, keys[1:]))  # sorted, and no duplicates

    return set_


def _text_order(item: str) -> tuple[int, bytes]:
    # A text's CBOR head grows with its byte length, so bytewise order of the encoding is
    # (byte length, bytes), as air.cbor sorts map keys; cheaper than encoding each item.
    raw = item.encode("utf-8")
    return (len(raw), raw)


def _int_order(item: int) -> tuple[int, int]:
    # CBOR puts every unsigned (major type 0, n) before every negative (major type 1, -1 - n),
    # and within each the head grows with n.
    return (0, item) if item >= 0 else (1, -1 - item)


# Set items whose canonical CBOR order has a cheaper key than their encoding; the key is only
# applied to items the item closure has already accepted.
_ORDER_KEYS: Final[dict[_Fast, Callable[[Any], Any]]] = {
    _text: _text_order,
    _nat: _int_order,
    _int64: _int_order,
}


def _map(key: _Fast, value: _Fast) -> _Fast:
    def map_(obj: Any) -> bool:
        return type(obj) is dict and all(map(key, obj)) and all(map(value, obj.values()))

    return map_


class SchemaCheckers:
    """``check(Ref(name), obj, schemas)`` for fixed ``schemas``: compiled per name on first use."""

    def __init__(self, schemas: Schemas) -> None:
        self._schemas = schemas
        self._by_name: dict[str, Callable[[Any], None]] = {}

    def check(self, name: str, obj: Any) -> None:
        """Raise ``ValueMismatch`` unless ``obj`` is the canonical form of a value of ``name``."""
        checker = self._by_name.get(name)
        if checker is None:
            checker = self._by_name[name] = compile_checker(Ref(name), self._schemas)
        checker(obj)
