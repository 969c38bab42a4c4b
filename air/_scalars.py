"""AIR primitive values: ranges, dec128, times and durations, and per primitive its normaliser
(either JSON lens to the canonical form), its strict check and its sugar rendering. The type walks
that call these are in ``air.values``, which re-exports the public names; errors are
``ValueMismatch(pointer, code, detail)`` as there. Nothing here reads clocks: times are
arithmetic on the proleptic Gregorian calendar.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from air import cbor
from air.errors import CborError, ValueMismatch

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "NAT_MAX",
    "PRIM_CHECKS",
    "PRIM_NORMALISERS",
    "PRIM_SUGAR",
    "check_prim",
    "dec128_decode",
    "dec128_encode",
    "is_int",
    "mismatch",
    "show",
    "token",
]

INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**63 - 1
NAT_MAX: Final = 2**64 - 1
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


def mismatch(pointer: str, code: str, detail: str) -> ValueMismatch:
    if not pointer.isascii():  # a map key with a lone surrogate: keep the pointer printable
        pointer = pointer.encode("utf-8", "backslashreplace").decode("utf-8")
    return ValueMismatch(pointer or "/", code, detail)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def show(value: Any) -> str:
    """A short rendering of a user's value for an error detail; never fails, never huge."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 128 else f"<{value.bit_length()}-bit integer>"
    if isinstance(value, str):
        return repr(value) if len(value) <= 80 else repr(value[:80]) + "..."
    return f"<{type(value).__name__}>"


def token(key: Any) -> str:
    """A map key or field name as a pointer token: never fails, never huge."""
    if isinstance(key, str):
        return key
    if isinstance(key, bytes):
        return str(key) if len(key) <= 64 else f"<{len(key)} bytes>"
    return show(key)


# --- dec128 (IEEE 754 decimal128, binary integer decimal, big-endian) -------------------------


def dec128_encode(value: Decimal, pointer: str = "") -> cbor.Tag:
    """Canonical dec128: trailing zeros stripped from the coefficient, -0 folded to 0."""
    if not value.is_finite():
        raise mismatch(pointer, "dec128.special", "dec128 has no infinities or NaN here")
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    if len(digits) > 34:  # strip trailing zeros on the tuple: int() of >4,300 digits raises
        kept = len(bytes(digits).rstrip(b"\0")) or 1
        strip = min(len(digits) - kept, max(0, _DEC_EXP_MAX - exponent))
        digits, exponent = digits[: len(digits) - strip], exponent + strip
        if len(digits) > 34:
            raise mismatch(pointer, "dec128.range", "the number does not fit decimal128 exactly")
    coeff = int("".join(map(str, digits))) if digits else 0
    if coeff == 0:
        return cbor.Tag(cbor.DEC128_TAG, bytes(16))
    while coeff % 10 == 0 and exponent < _DEC_EXP_MAX:
        coeff //= 10
        exponent += 1
    if coeff > _DEC_COEFF_MAX or not _DEC_EXP_MIN <= exponent <= _DEC_EXP_MAX:
        raise mismatch(pointer, "dec128.range", f"{value} does not fit decimal128 exactly")
    bits = (sign << 127) | ((exponent + _DEC_BIAS) << 113) | coeff
    return cbor.Tag(cbor.DEC128_TAG, bits.to_bytes(16, "big"))


def dec128_decode(raw: bytes, pointer: str = "") -> Decimal:
    """Inverse of ``dec128_encode``; rejects encodings it would not produce."""
    bits = int.from_bytes(raw, "big")
    if (bits >> 125) & 0b11 == 0b11:
        raise mismatch(pointer, "dec128.noncanonical", "large-coefficient or special dec128 form")
    sign = bits >> 127
    exponent = ((bits >> 113) & 0x3FFF) - _DEC_BIAS
    coeff = bits & ((1 << 113) - 1)
    value = Decimal((sign, tuple(int(d) for d in str(coeff)), exponent))
    if dec128_encode(value, pointer).value != raw:
        raise mismatch(pointer, "dec128.noncanonical", "dec128 is not in canonical form")
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
        raise mismatch(pointer, "time.format", f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 60):
        raise mismatch(pointer, "time.format", f"time field out of range: {text!r}")
    if _civil_from_days(_days_from_civil(year, month, day)) != (year, month, day):
        raise mismatch(pointer, "time.format", f"no such date: {text!r}")
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
    if not is_int(value):
        raise mismatch(pointer, "type", f"expected {name}, got {type(value).__name__}")
    if not low <= value <= high:
        raise mismatch(pointer, "range", f"{show(value)} is out of range for {name}")
    return int(value)


def _int_text(text: str, name: str, pointer: str) -> int:
    """ASCII integer text to int. Text with more digits than any in-range number is ``range``
    before ``int()`` sees it (which would raise ``ValueError`` past 4,300 digits)."""
    if len(text.lstrip("-").lstrip("0")) > _INT_TEXT_DIGITS_MAX:
        raise mismatch(pointer, "range", f"{show(text)} is out of range for {name}")
    return int(text)


def _norm_bytes(value: Any, pointer: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError as exc:  # binascii.Error, or non-ASCII text
            raise mismatch(pointer, "bytes.base64", "bytes must be base64") from exc
    raise mismatch(pointer, "type", f"expected bytes, got {type(value).__name__}")


def _norm_hash(value: Any, pointer: str) -> bytes:
    if isinstance(value, bytes) and len(value) == 32:
        return value
    if isinstance(value, str):
        try:
            return cbor.hash_to_raw(value)
        except CborError as exc:
            raise mismatch(pointer, "hash.format", exc.detail) from exc
    raise mismatch(pointer, "type", "expected a hash (blake3:<64 hex>)")


def _norm_uuid(value: Any, pointer: str) -> bytes:
    if isinstance(value, bytes) and len(value) == 16:
        return value
    if isinstance(value, str) and _UUID_RE.match(value):
        return bytes.fromhex(value.replace("-", ""))
    raise mismatch(
        pointer, "uuid.format", "expected a uuid like 01234567-89ab-cdef-0123-456789abcdef"
    )


def _norm_dec(value: Any, pointer: str) -> cbor.Tag:
    if isinstance(value, cbor.Tag):
        check_prim("dec128", value, pointer)
        return value
    if isinstance(value, str | Decimal) or is_int(value):
        try:
            return dec128_encode(Decimal(value), pointer)
        except InvalidOperation as exc:
            raise mismatch(pointer, "dec128.format", f"not a decimal: {show(value)}") from exc
    raise mismatch(pointer, "type", "expected a decimal string")


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
        raise mismatch(pointer, "type", f"expected text, got {type(value).__name__}")
    if not value.isascii() and _SURROGATE_RE.search(value):
        raise mismatch(pointer, "text.not_unicode", "text holds a lone surrogate (no UTF-8 form)")
    return value


def _norm_bool(value: Any, pointer: str) -> bool:
    if not isinstance(value, bool):
        raise mismatch(pointer, "type", f"expected bool, got {type(value).__name__}")
    return value


def _norm_unit(value: Any, pointer: str) -> None:
    if value not in (None, {}):
        raise mismatch(pointer, "type", "expected unit (null)")


PRIM_NORMALISERS: Final[dict[str, Callable[[Any, str], Any]]] = {
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


PRIM_CHECKS: Final[dict[str, Callable[[Any], bool]]] = {
    "bool": lambda obj: isinstance(obj, bool),
    "int": lambda obj: is_int(obj) and INT_MIN <= obj <= INT_MAX,
    "nat": lambda obj: is_int(obj) and 0 <= obj <= NAT_MAX,
    "time": lambda obj: is_int(obj) and INT_MIN <= obj <= INT_MAX,
    "duration": lambda obj: is_int(obj) and INT_MIN <= obj <= INT_MAX,
    "text": lambda obj: isinstance(obj, str),
    "bytes": lambda obj: isinstance(obj, bytes),
    "hash": lambda obj: isinstance(obj, bytes) and len(obj) == 32,
    "uuid": lambda obj: isinstance(obj, bytes) and len(obj) == 16,
    "unit": lambda obj: obj is None,
    "dec128": lambda obj: isinstance(obj, cbor.Tag) and obj.tag == cbor.DEC128_TAG,
}


def check_prim(name: str, obj: Any, pointer: str) -> None:
    ok = PRIM_CHECKS[name](obj)
    if not ok:
        raise mismatch(pointer, "type", f"expected {name}, got {type(obj).__name__}")
    if name == "dec128":
        dec128_decode(obj.value, pointer)


def _uuid_sugar(obj: bytes) -> str:
    h = obj.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# Primitives shown other than as they are (a dict lookup: to_sugar calls this for every leaf).
PRIM_SUGAR: Final[dict[str, Callable[[Any], Any]]] = {
    "bytes": lambda obj: base64.b64encode(obj).decode("ascii"),
    "hash": cbor.raw_to_hash,
    "uuid": _uuid_sugar,
    "time": _format_time,
    "dec128": lambda obj: str(dec128_decode(obj.value)),
}
