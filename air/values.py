"""AIR values: normalisation from either JSON lens, strict checking, and display as sugar JSON.

Three entry points walk a value alongside its type:

- ``normalise(node, value, schemas)``: accepts the *sugar* lens (plain JSON read through the
  type: base64 bytes, ``blake3:`` hashes, RFC 3339 times, ``"Tag"`` for unit variant cases),
  the *tagged* lens (``{"nat": 1}``, ``{"variant": {"tag": T, "value": V}}``, ...), and the
  canonical Python form itself (docs/CONTRACTS.md), and returns the canonical form: sets
  deduplicated and sorted, maps keyed by typed keys, numbers range-checked.
- ``check(node, obj, schemas)``: the strict walk for values decoded from canonical CBOR (reducer
  outputs, journal bodies): only the canonical form is accepted, nothing is converted.
  ``compile_checker`` and ``SchemaCheckers`` give the same decisions and errors for the hot
  path, from closures built once per type (``air._checkers``).
- ``to_sugar(node, obj, schemas)``: canonical form back to sugar JSON for display.

A one-key object whose key is the type's own kind (``{"nat": 1}`` for a nat) is read as the
tagged lens. The only ambiguity is a record with a field named ``record`` (read as sugar) and a
``map<text, _>`` holding the single key ``map`` with a list value (read as tagged); both are
documented here rather than guessed around elsewhere.

Every failure is a ``ValueMismatch(pointer, code, detail)`` with the JSON pointer inside the
value. Nothing here reads clocks: times are arithmetic on the proleptic Gregorian calendar.

Bad input from the Python API is a ``ValueMismatch`` too, never a bare Python error:

- Depth. ``normalise``, ``check`` and ``to_sugar`` recurse once per level of the type (record,
  variant, list, set, map, option), so a value nested deeper than ``VALUE_DEPTH_MAX`` levels is
  ``value.too_deep`` (a recursive schema allows any depth; a JSON text cannot go past
  ``air.jsontext.JSON_DEPTH_MAX``). ``compile_checker`` keeps its fast walk only for types that
  cannot reach that depth, so it still decides exactly as ``check`` does.
- Text with a lone surrogate (``"\\ud800"``), as a value or a map key, is ``text.not_unicode``
  in ``normalise``: it has no UTF-8 form, so no canonical CBOR. ``check`` leaves that to
  ``air.cbor``: values it sees were decoded from CBOR, which cannot hold one.
- Integers of any size are range-checked without being printed in full (Python refuses to
  turn an int of more than 4,300 digits into text), and integer text (``"123"``) longer than
  any in-range number is ``range`` before it is converted. Integer text is ASCII digits only.
- Error details show at most a short, flat rendering of the offending value.
"""

from __future__ import annotations

import base64
import itertools
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from air import cbor
from air.errors import CborError, ValueMismatch
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

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "NAT_MAX",
    "VALUE_DEPTH_MAX",
    "SchemaCheckers",
    "check",
    "compile_checker",
    "dec128_decode",
    "dec128_encode",
    "normalise",
    "to_sugar",
    "value_hash",
]

INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**63 - 1
NAT_MAX: Final = 2**64 - 1
VALUE_DEPTH_MAX: Final = 128
"""Most type levels (record, variant, list, set, map, option) a value may nest. Below
``air.cbor.CBOR_DEPTH_MAX`` with room for the records the kernel wraps a value in, and low
enough that a walk of it stays far from Python's recursion limit (each level costs two frames)."""
# NAT_MAX has 20 digits: integer text with more (leading zeros aside) is out of every range.
_INT_TEXT_DIGITS_MAX: Final = 20
_DEC_COEFF_MAX: Final = 10**34 - 1
_DEC_EXP_MIN: Final = -6176
_DEC_EXP_MAX: Final = 6111
_DEC_BIAS: Final = 6176
_NS: Final = 1_000_000_000
_UUID_RE: Final = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
# [0-9], not \d: \d also matches other scripts' digits, which int() would accept.
_TIME_RE: Final = re.compile(
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]{1,9}))?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
_DURATION_RE: Final = re.compile(r"^(-?[0-9]+)(ns|us|ms|s|m|h)$")
_INT_TEXT_RE: Final = re.compile(r"-?[0-9]+")
_SURROGATE_RE: Final = re.compile("[\ud800-\udfff]")
_DURATION_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "ms": 1_000_000,
    "s": _NS,
    "m": 60 * _NS,
    "h": 3600 * _NS,
}


def _mismatch(pointer: str, code: str, detail: str) -> ValueMismatch:
    if not pointer.isascii():  # a map key with a lone surrogate: keep the pointer printable
        pointer = pointer.encode("utf-8", "backslashreplace").decode("utf-8")
    return ValueMismatch(pointer or "/", code, detail)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _too_deep(pointer: str) -> ValueMismatch:
    detail = f"value nested deeper than VALUE_DEPTH_MAX={VALUE_DEPTH_MAX}"
    return _mismatch(pointer, "value.too_deep", detail)


def _show(value: Any) -> str:
    """A short rendering of a user's value for an error detail; never fails, never huge."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 128 else f"<{value.bit_length()}-bit integer>"
    if isinstance(value, str):
        return repr(value) if len(value) <= 80 else repr(value[:80]) + "..."
    return f"<{type(value).__name__}>"


def _token(key: Any) -> str:
    """A map key or field name as a pointer token: never fails, never huge."""
    if isinstance(key, str):
        return key
    if isinstance(key, bytes):
        return str(key) if len(key) <= 64 else f"<{len(key)} bytes>"
    return _show(key)


# --- dec128 (IEEE 754 decimal128, binary integer decimal, big-endian) -------------------------


def dec128_encode(value: Decimal, pointer: str = "") -> cbor.Tag:
    """Canonical dec128: trailing zeros stripped from the coefficient, -0 folded to 0."""
    if not value.is_finite():
        raise _mismatch(pointer, "dec128.special", "dec128 has no infinities or NaN here")
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    if len(digits) > 34:  # strip trailing zeros on the tuple: int() of >4,300 digits raises
        kept = len(bytes(digits).rstrip(b"\0")) or 1
        strip = min(len(digits) - kept, max(0, _DEC_EXP_MAX - exponent))
        digits, exponent = digits[: len(digits) - strip], exponent + strip
        if len(digits) > 34:
            raise _mismatch(pointer, "dec128.range", "the number does not fit decimal128 exactly")
    coeff = int("".join(map(str, digits))) if digits else 0
    if coeff == 0:
        return cbor.Tag(cbor.DEC128_TAG, bytes(16))
    while coeff % 10 == 0 and exponent < _DEC_EXP_MAX:
        coeff //= 10
        exponent += 1
    if coeff > _DEC_COEFF_MAX or not _DEC_EXP_MIN <= exponent <= _DEC_EXP_MAX:
        raise _mismatch(pointer, "dec128.range", f"{value} does not fit decimal128 exactly")
    bits = (sign << 127) | ((exponent + _DEC_BIAS) << 113) | coeff
    return cbor.Tag(cbor.DEC128_TAG, bits.to_bytes(16, "big"))


def dec128_decode(raw: bytes, pointer: str = "") -> Decimal:
    """Inverse of ``dec128_encode``; rejects encodings it would not produce."""
    bits = int.from_bytes(raw, "big")
    if (bits >> 125) & 0b11 == 0b11:
        raise _mismatch(pointer, "dec128.noncanonical", "large-coefficient or special dec128 form")
    sign = bits >> 127
    exponent = ((bits >> 113) & 0x3FFF) - _DEC_BIAS
    coeff = bits & ((1 << 113) - 1)
    value = Decimal((sign, tuple(int(d) for d in str(coeff)), exponent))
    if dec128_encode(value, pointer).value != raw:
        raise _mismatch(pointer, "dec128.noncanonical", "dec128 is not in canonical form")
    return value


# --- time (ns since the Unix epoch, UTC) ------------------------------------------------------


def _days_from_civil(year: int, month: int, day: int) -> int:
    # Howard Hinnant's algorithm: exact for the proleptic Gregorian calendar.
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    days += 719468
    era = days // 146097
    doe = days - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (month <= 2), month, day


def _parse_time(text: str, pointer: str) -> int:
    match = _TIME_RE.match(text)
    if match is None:
        raise _mismatch(pointer, "time.format", f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 60):
        raise _mismatch(pointer, "time.format", f"time field out of range: {text!r}")
    if _civil_from_days(_days_from_civil(year, month, day)) != (year, month, day):
        raise _mismatch(pointer, "time.format", f"no such date: {text!r}")
    fraction = int((match.group(7) or "").ljust(9, "0"))
    zone = match.group(8)
    offset = (
        0
        if zone in "Zz"
        else (int(zone[1:3]) * 60 + int(zone[4:6])) * (1 if zone[0] == "+" else -1)
    )
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    return (seconds - offset * 60) * _NS + fraction


def _format_time(ns: int) -> str:
    seconds, fraction = divmod(ns, _NS)
    days, rest = divmod(seconds, 86400)
    year, month, day = _civil_from_days(days)
    stamp = (
        f"{year:04d}-{month:02d}-{day:02d}T{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
    )
    return stamp + (f".{fraction:09d}".rstrip("0") if fraction else "") + "Z"


# --- primitives ------------------------------------------------------------------------------


def _int_in(value: Any, low: int, high: int, name: str, pointer: str) -> int:
    if isinstance(value, str) and _INT_TEXT_RE.fullmatch(value):
        value = _int_text(value, name, pointer)
    if not _is_int(value):
        raise _mismatch(pointer, "type", f"expected {name}, got {type(value).__name__}")
    if not low <= value <= high:
        raise _mismatch(pointer, "range", f"{_show(value)} is out of range for {name}")
    return int(value)


def _int_text(text: str, name: str, pointer: str) -> int:
    """ASCII integer text to int. Text with more digits than any in-range number is ``range``
    before ``int()`` sees it (which would raise ``ValueError`` past 4,300 digits)."""
    if len(text.lstrip("-").lstrip("0")) > _INT_TEXT_DIGITS_MAX:
        raise _mismatch(pointer, "range", f"{_show(text)} is out of range for {name}")
    return int(text)


def _norm_bytes(value: Any, pointer: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError as exc:  # binascii.Error, or non-ASCII text
            raise _mismatch(pointer, "bytes.base64", "bytes must be base64") from exc
    raise _mismatch(pointer, "type", f"expected bytes, got {type(value).__name__}")


def _norm_hash(value: Any, pointer: str) -> bytes:
    if isinstance(value, bytes) and len(value) == 32:
        return value
    if isinstance(value, str):
        try:
            return cbor.hash_to_raw(value)
        except CborError as exc:
            raise _mismatch(pointer, "hash.format", exc.detail) from exc
    raise _mismatch(pointer, "type", "expected a hash (blake3:<64 hex>)")


def _norm_uuid(value: Any, pointer: str) -> bytes:
    if isinstance(value, bytes) and len(value) == 16:
        return value
    if isinstance(value, str) and _UUID_RE.match(value):
        return bytes.fromhex(value.replace("-", ""))
    raise _mismatch(
        pointer, "uuid.format", "expected a uuid like 01234567-89ab-cdef-0123-456789abcdef"
    )


def _norm_dec(value: Any, pointer: str) -> cbor.Tag:
    if isinstance(value, cbor.Tag):
        check(Prim("dec128"), value, {}, pointer)
        return value
    if isinstance(value, str | Decimal) or _is_int(value):
        try:
            return dec128_encode(Decimal(value), pointer)
        except InvalidOperation as exc:
            raise _mismatch(pointer, "dec128.format", f"not a decimal: {_show(value)}") from exc
    raise _mismatch(pointer, "type", "expected a decimal string")


def _norm_time(value: Any, pointer: str) -> int:
    if isinstance(value, str) and not _INT_TEXT_RE.fullmatch(value):
        value = _parse_time(value, pointer)
    return _int_in(value, INT_MIN, INT_MAX, "time", pointer)


def _norm_duration(value: Any, pointer: str) -> int:
    if isinstance(value, str) and (match := _DURATION_RE.match(value)):
        value = _int_text(match.group(1), "duration", pointer) * _DURATION_UNITS[match.group(2)]
    return _int_in(value, INT_MIN, INT_MAX, "duration", pointer)


def _norm_text(value: Any, pointer: str) -> str:
    if not isinstance(value, str):
        raise _mismatch(pointer, "type", f"expected text, got {type(value).__name__}")
    if not value.isascii() and _SURROGATE_RE.search(value):
        raise _mismatch(pointer, "text.not_unicode", "text holds a lone surrogate (no UTF-8 form)")
    return value


def _norm_bool(value: Any, pointer: str) -> bool:
    if not isinstance(value, bool):
        raise _mismatch(pointer, "type", f"expected bool, got {type(value).__name__}")
    return value


def _norm_unit(value: Any, pointer: str) -> None:
    if value not in (None, {}):
        raise _mismatch(pointer, "type", "expected unit (null)")


_PRIM_NORMALISERS: Final[dict[str, Callable[[Any, str], Any]]] = {
    "bool": _norm_bool,
    "int": lambda v, p: _int_in(v, INT_MIN, INT_MAX, "int", p),
    "nat": lambda v, p: _int_in(v, 0, NAT_MAX, "nat", p),
    "dec128": _norm_dec,
    "bytes": _norm_bytes,
    "text": _norm_text,
    "time": _norm_time,
    "duration": _norm_duration,
    "hash": _norm_hash,
    "uuid": _norm_uuid,
    "unit": _norm_unit,
}


# --- normalise -------------------------------------------------------------------------------


def _kind(node: TypeNode) -> str:
    if isinstance(node, Prim):
        return node.name
    return {
        Record: "record",
        Variant: "variant",
        ListT: "list",
        SetT: "set",
        OptionT: "option",
        MapT: "map",
    }[type(node)]


def _untag(node: TypeNode, value: Any) -> Any:
    """Strip the tagged lens's outer ``{"<kind>": ...}`` when the value uses it."""
    if not isinstance(value, dict) or len(value) != 1:
        return value
    kind = _kind(node)
    if kind not in value or "$tag" in value:
        return value
    body = value[kind]
    if isinstance(node, Record) and kind in node.field_map():
        return value
    if isinstance(node, MapT) and not isinstance(body, list):
        return value
    if isinstance(node, Variant):
        if not isinstance(body, dict) or "tag" not in body or not set(body) <= {"tag", "value"}:
            return value
        return {"$tag": body["tag"], "$value": body.get("value")}
    return body


def normalise(
    node: TypeNode, value: Any, schemas: Schemas, pointer: str = "", _depth: int = 0
) -> Any:
    """Normalise ``value`` (sugar, tagged or canonical) to the canonical form of ``node``.

    ``_depth`` is the recursion's own: the type levels around ``value``. (A parameter rather
    than a private twin: one call less per value, as for ``check`` and ``to_sugar``.)
    """
    node = resolve(node, schemas, pointer)
    value = _untag(node, value)
    if isinstance(node, Prim):
        return _PRIM_NORMALISERS[node.name](value, pointer)
    if _depth >= VALUE_DEPTH_MAX:  # after the leaves: they are most calls, and cannot nest
        raise _too_deep(pointer)
    depth = _depth + 1
    if isinstance(node, Record):
        return _norm_record(node, value, schemas, pointer, depth)
    if isinstance(node, Variant):
        return _norm_variant(node, value, schemas, pointer, depth)
    if isinstance(node, OptionT):
        return None if value is None else normalise(node.item, value, schemas, pointer, depth)
    if isinstance(node, MapT):
        return _norm_map(node, value, schemas, pointer, depth)
    if not isinstance(value, list | tuple):
        raise _mismatch(pointer, "type", f"expected a {_kind(node)}, got {type(value).__name__}")
    assert isinstance(node, ListT | SetT)
    item = node.item
    items = [normalise(item, v, schemas, f"{pointer}/{i}", depth) for i, v in enumerate(value)]
    return _sorted_set(items) if isinstance(node, SetT) else items


def _sorted_set(items: list[Any]) -> list[Any]:
    by_bytes = {cbor.dumps(item): item for item in items}
    return [by_bytes[key] for key in sorted(by_bytes)]


def _norm_record(
    node: Record, value: Any, schemas: Schemas, pointer: str, depth: int
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _mismatch(pointer, "type", f"expected a record, got {type(value).__name__}")
    fields = node.field_map()
    for name in value:
        if name not in fields:
            at = f"{pointer}/{_token(name)}"
            raise _mismatch(at, "record.extra", f"unknown field {_show(name)}")
    out = {}
    for name, sub in node.fields:
        if name in value:
            out[name] = normalise(sub, value[name], schemas, f"{pointer}/{name}", depth)
        elif isinstance(resolve(sub, schemas, pointer), OptionT):
            out[name] = None
        else:
            raise _mismatch(f"{pointer}/{name}", "record.missing", f"missing field {name!r}")
    return out


def _norm_variant(
    node: Variant, value: Any, schemas: Schemas, pointer: str, depth: int
) -> dict[str, Any]:
    cases = node.case_map()
    if isinstance(value, str):
        value = {"$tag": value, "$value": None}
    if not isinstance(value, dict) or "$tag" not in value or not set(value) <= {"$tag", "$value"}:
        raise _mismatch(pointer, "type", 'expected a variant {"$tag": T, "$value": V}')
    tag = value["$tag"]
    if not isinstance(tag, str) or tag not in cases:  # a list tag would not even hash
        raise _mismatch(f"{pointer}/$tag", "variant.tag", f"unknown case {_show(tag)}")
    inner = normalise(cases[tag], value.get("$value"), schemas, f"{pointer}/$value", depth)
    return {"$tag": tag, "$value": inner}


def _norm_map(node: MapT, value: Any, schemas: Schemas, pointer: str, depth: int) -> dict[Any, Any]:
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list | tuple):
        pairs = [_pair(item, f"{pointer}/{i}") for i, item in enumerate(value)]
    else:
        raise _mismatch(pointer, "type", f"expected a map, got {type(value).__name__}")
    out: dict[Any, Any] = {}
    for raw_key, raw_value in pairs:
        at = f"{pointer}/{raw_key if type(raw_key) is str else _token(raw_key)}"
        key = normalise(node.key, raw_key, schemas, at, depth)
        if key in out:
            raise _mismatch(at, "map.duplicate", f"duplicate map key {_show(raw_key)}")
        out[key] = normalise(node.value, raw_value, schemas, at, depth)
    return {key: out[key] for key in sorted(out, key=cbor.dumps)}


def _pair(item: Any, pointer: str) -> tuple[Any, Any]:
    if isinstance(item, dict) and set(item) == {"key", "value"}:
        return item["key"], item["value"]
    if isinstance(item, list | tuple) and len(item) == 2:
        return item[0], item[1]
    raise _mismatch(pointer, "map.entry", "map entries are [key, value] or {key, value}")


# --- check (strict, canonical form only) -----------------------------------------------------


_PRIM_CHECKS: Final[dict[str, Callable[[Any], bool]]] = {
    "bool": lambda obj: isinstance(obj, bool),
    "int": lambda obj: _is_int(obj) and INT_MIN <= obj <= INT_MAX,
    "nat": lambda obj: _is_int(obj) and 0 <= obj <= NAT_MAX,
    "time": lambda obj: _is_int(obj) and INT_MIN <= obj <= INT_MAX,
    "duration": lambda obj: _is_int(obj) and INT_MIN <= obj <= INT_MAX,
    "text": lambda obj: isinstance(obj, str),
    "bytes": lambda obj: isinstance(obj, bytes),
    "hash": lambda obj: isinstance(obj, bytes) and len(obj) == 32,
    "uuid": lambda obj: isinstance(obj, bytes) and len(obj) == 16,
    "unit": lambda obj: obj is None,
    "dec128": lambda obj: isinstance(obj, cbor.Tag) and obj.tag == cbor.DEC128_TAG,
}


def _check_prim(name: str, obj: Any, pointer: str) -> None:
    ok = _PRIM_CHECKS[name](obj)
    if not ok:
        raise _mismatch(pointer, "type", f"expected {name}, got {type(obj).__name__}")
    if name == "dec128":
        dec128_decode(obj.value, pointer)


def check(node: TypeNode, obj: Any, schemas: Schemas, pointer: str = "", _depth: int = 0) -> None:
    """Raise ``ValueMismatch`` unless ``obj`` is exactly the canonical form of a ``node`` value.
    (``_depth`` is the recursion's own, as for ``normalise``.)"""
    node = resolve(node, schemas, pointer)
    if isinstance(node, Prim):
        _check_prim(node.name, obj, pointer)
        return
    if _depth >= VALUE_DEPTH_MAX:
        raise _too_deep(pointer)
    depth = _depth + 1
    if isinstance(node, Record):
        if not isinstance(obj, dict) or len(obj) != len(node.fields):
            _check_record_shape(node, obj, pointer)
        for name, sub in node.fields:
            if name not in obj:
                raise _mismatch(f"{pointer}/{name}", "record.missing", f"missing field {name!r}")
            check(sub, obj[name], schemas, f"{pointer}/{name}", depth)
    elif isinstance(node, Variant):
        if not isinstance(obj, dict) or set(obj) != {"$tag", "$value"}:
            raise _mismatch(pointer, "type", 'expected a variant {"$tag", "$value"}')
        tag = obj["$tag"]
        case_type = node.case_map().get(tag) if isinstance(tag, str) else None
        if case_type is None:
            raise _mismatch(f"{pointer}/$tag", "variant.tag", f"unknown case {_show(tag)}")
        check(case_type, obj["$value"], schemas, f"{pointer}/$value", depth)
    elif isinstance(node, OptionT):
        if obj is not None:
            check(node.item, obj, schemas, pointer, depth)
    else:
        _check_collection(node, obj, schemas, pointer, depth)


def _check_record_shape(node: Record, obj: Any, pointer: str) -> None:
    if not isinstance(obj, dict):
        raise _mismatch(pointer, "type", f"expected a record, got {type(obj).__name__}")
    fields = node.field_map()
    for name in obj:
        if name not in fields:
            at = f"{pointer}/{_token(name)}"
            raise _mismatch(at, "record.extra", f"unknown field {_show(name)}")


def _check_collection(node: TypeNode, obj: Any, schemas: Schemas, pointer: str, depth: int) -> None:
    if isinstance(node, MapT):
        if not isinstance(obj, dict):
            raise _mismatch(pointer, "type", "expected a map")
        for key, sub in obj.items():
            at = f"{pointer}/{key if type(key) is str else _token(key)}"
            check(node.key, key, schemas, at, depth)
            check(node.value, sub, schemas, at, depth)
        return
    assert isinstance(node, ListT | SetT)
    if not isinstance(obj, list):
        raise _mismatch(pointer, "type", f"expected a {_kind(node)}")
    for i, item in enumerate(obj):
        check(node.item, item, schemas, f"{pointer}/{i}", depth)
    if isinstance(node, SetT):
        encoded = [cbor.dumps(item) for item in obj]
        if any(a >= b for a, b in itertools.pairwise(encoded)):
            raise _mismatch(pointer, "set.order", "set elements must be unique and sorted")


def compile_checker(node: TypeNode, schemas: Schemas) -> Callable[[Any], None]:
    """Compile ``node`` once; the result raises exactly as ``check(node, obj, schemas)`` does.

    Same decision for every input and, on rejection, the same ``ValueMismatch`` (code, pointer,
    detail), because a rejection is handed to ``check`` itself. ``schemas`` is read now: later
    changes to the mapping are not seen.
    """
    # Imported here: air._checkers builds on this module (``check``, the integer bounds).
    from air._checkers import compile_checker as compile_

    return compile_(node, schemas)


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


# --- display ---------------------------------------------------------------------------------


def to_sugar(node: TypeNode, obj: Any, schemas: Schemas, _depth: int = 0) -> Any:
    """Canonical form to sugar JSON (the inverse of ``normalise`` on the sugar lens).

    Deeper than ``VALUE_DEPTH_MAX`` is ``value.too_deep`` at the root pointer: this is for
    canonical values, which ``check`` bounds already, so it does not track where it is.
    (``_depth`` is the recursion's own: the levels around ``obj``.)
    """
    node = resolve(node, schemas)
    if isinstance(node, Prim):
        sugar = _PRIM_SUGAR.get(node.name)
        return obj if sugar is None else sugar(obj)
    if _depth >= VALUE_DEPTH_MAX:
        raise _too_deep("")
    depth = _depth + 1
    if isinstance(node, Record):
        return {name: to_sugar(sub, obj[name], schemas, depth) for name, sub in node.fields}
    if isinstance(node, Variant):
        sub = node.case_map()[obj["$tag"]]
        if isinstance(resolve(sub, schemas), Prim) and obj["$value"] is None:
            return obj["$tag"]
        return {"$tag": obj["$tag"], "$value": to_sugar(sub, obj["$value"], schemas, depth)}
    if isinstance(node, OptionT):
        return None if obj is None else to_sugar(node.item, obj, schemas, depth)
    if isinstance(node, MapT):
        key_node = resolve(node.key, schemas)
        if isinstance(key_node, Prim) and key_node.name == "text":
            return {k: to_sugar(node.value, v, schemas, depth) for k, v in obj.items()}
        return [
            [to_sugar(node.key, k, schemas, depth), to_sugar(node.value, v, schemas, depth)]
            for k, v in obj.items()
        ]
    assert isinstance(node, ListT | SetT)
    return [to_sugar(node.item, item, schemas, depth) for item in obj]


def _uuid_sugar(obj: bytes) -> str:
    h = obj.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# Primitives shown other than as they are (a dict lookup: to_sugar calls this for every leaf).
_PRIM_SUGAR: Final[dict[str, Callable[[Any], Any]]] = {
    "bytes": lambda obj: base64.b64encode(obj).decode("ascii"),
    "hash": cbor.raw_to_hash,
    "uuid": _uuid_sugar,
    "time": _format_time,
    "dec128": lambda obj: str(dec128_decode(obj.value)),
}


def value_hash(schema_hash_text: str, obj: Any) -> str:
    """Hash of a value bound to its schema: blake3 of canonical ``[schema hash (raw), value]``."""
    return cbor.content_hash(cbor.dumps([cbor.hash_to_raw(schema_hash_text), obj]))
