"""Canonical CBOR (RFC 8949 §4.2.1 core deterministic encoding) and content addresses.

Public surface: ``dumps(obj) -> bytes``, ``loads(data) -> obj``, ``content_hash(data) -> str``.

The value model is deliberately small. Allowed Python values are ``None``, ``bool``, ``int``
(within CBOR's major types 0/1: -2**64 .. 2**64-1), ``str``, ``bytes``, ``list`` (tuples are
accepted on encode), ``dict`` with keys of those scalar types, and ``Tag(2000, <16 bytes>)``
for dec128. Floats, other tags, and anything else are rejected: AIR values carry no floats.

Why not ``cbor2.dumps(canonical=True)``: cbor2 sorts map keys length-first (RFC 7049's
"canonical CBOR"), which differs from RFC 8949's bytewise order of the encoded keys when keys
of different major types share a map, e.g. ``{100: 1, -1: 2}``. We order each map ourselves and
let cbor2's C encoder, which keeps insertion order and always writes shortest-form integers
and definite lengths, produce the bytes.

Strictness: ``loads`` decodes with cbor2, checks the value model, re-encodes, and requires the
result to equal the input byte for byte. That one comparison rejects every non-canonical form
(non-shortest heads, indefinite lengths, unsorted or duplicate keys, trailing bytes) without a
hand-written decoder.

``loads`` refuses whatever ``dumps`` refuses, and both raise only ``CborError``:

- Nesting deeper than ``CBOR_DEPTH_MAX`` arrays/maps is ``too_deep`` both ways (cbor2's decoder
  stops at 400 on its own; the walks here recurse, so they stop first). cbor2's shared-value
  tags (28/29) can decode to a list that holds itself: that is ``too_deep`` too.
- cbor2 decodes bignums (tags 2 and 3) to Python ints; one outside major types 0/1 is
  ``tag.unsupported``, and one inside them is ``non_canonical`` (it re-encodes shorter).
- Text that is not UTF-8 is ``text.not_unicode`` on decode; a ``str`` holding a lone
  surrogate, which has no UTF-8 form, is the same on encode.
"""

from __future__ import annotations

import itertools
from typing import Any, Final

import blake3
import cbor2

from air.errors import CborError

__all__ = [
    "CBOR_DEPTH_MAX",
    "DEC128_TAG",
    "Tag",
    "content_hash",
    "digest",
    "dumps",
    "hash_to_raw",
    "head",
    "loads",
    "raw_to_hash",
]

DEC128_TAG: Final = 2000
CBOR_DEPTH_MAX: Final = 256
"""Most arrays/maps nested in one value. ``air.values.VALUE_DEPTH_MAX`` is lower, leaving room
for the records and lists the kernel and journal wrap a value in."""
_UINT_MAX: Final = 2**64 - 1
_NINT_MIN: Final = -(2**64)
HASH_PREFIX: Final = "blake3:"

Tag = cbor2.CBORTag


def _key_sort(key: Any) -> bytes:
    return cbor2.dumps(key)


def _text_key_sort(key: str) -> tuple[int, bytes]:
    # Within one major type the encoded head grows with the length, so bytewise order of the
    # encoded form is (byte length, bytes); this avoids encoding every key.
    raw = key.encode("utf-8")
    return (len(raw), raw)


_JUST_TEXT: Final = frozenset({str})


def _sort_text_keys(keys: list[str]) -> None:
    """Sort text map keys into canonical order, (UTF-8 length, UTF-8 bytes), in place."""
    if "".join(keys).isascii():
        # ASCII's UTF-8 is itself: length is len() and byte order is str order. Two sorts in C
        # (the second stable) give that order without a Python call per key.
        keys.sort()
        keys.sort(key=len)
    else:  # raises UnicodeEncodeError for a lone surrogate
        keys.sort(key=_text_key_sort)


class _Outside(Exception):
    """Raised by the fast walk; ``dumps`` then re-walks slowly to say where and why."""


def _fast(obj: Any, depth: int = 0) -> Any:
    """The hot path: reorder maps, check types, build no pointers. Raises ``_Outside``;
    ``depth`` is how many arrays/maps enclose ``obj``."""
    kind = type(obj)
    if kind is str or kind is bytes or kind is bool or obj is None:
        return obj
    if kind is int:
        if _NINT_MIN <= obj <= _UINT_MAX:
            return obj
        raise _Outside
    if kind is dict:
        if depth >= CBOR_DEPTH_MAX:
            raise _Outside
        depth += 1
        keys = list(obj)
        if set(map(type, keys)) <= _JUST_TEXT:
            _sort_text_keys(keys)
        else:
            if not all(map(_key_in_model, keys)):
                raise _Outside
            keys.sort(key=_key_sort)
        return {key: _fast(obj[key], depth) for key in keys}
    if kind is list or kind is tuple:
        if depth >= CBOR_DEPTH_MAX:
            raise _Outside
        depth += 1
        return [_fast(item, depth) for item in obj]
    if (
        kind is cbor2.CBORTag
        and obj.tag == DEC128_TAG
        and type(obj.value) is bytes
        and len(obj.value) == 16
    ):
        return obj
    raise _Outside


def _show(obj: Any) -> str:
    """A map key or integer for a message or pointer: short, and never raises (Python will not
    print an int of more than 4,300 digits)."""
    if isinstance(obj, int) and not isinstance(obj, bool) and obj.bit_length() > 128:
        return f"<{obj.bit_length()}-bit integer>"
    if isinstance(obj, str):
        return obj[:80].encode("utf-8", "backslashreplace").decode("utf-8")
    if obj is None or isinstance(obj, int | bytes):
        return repr(obj)[:80]
    return f"<{type(obj).__name__}>"


_MODEL_BASES: Final = (str, bytes, int, list, tuple, dict)
_MODEL_EXACT: Final = frozenset({str, bytes, int, bool, list, tuple, dict})


def _key_in_model(key: Any) -> bool:
    kind = type(key)
    return kind is str or kind is bytes or (kind is int and _NINT_MIN <= key <= _UINT_MAX)


def _prepare(obj: Any, path: str, depth: int = 0) -> Any:
    """The slow walk, with JSON pointers: only run to explain a value ``_fast`` refused."""
    if isinstance(obj, _MODEL_BASES) and type(obj) not in _MODEL_EXACT:
        detail = f"cannot encode {type(obj).__name__}, a subclass (only exact value types)"
        raise CborError(path or "/", "type.unsupported", detail)
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError as exc:
            detail = "text holds a lone surrogate, which has no UTF-8 form"
            raise CborError(path or "/", "text.not_unicode", detail) from exc
        return obj
    if obj is None or obj is True or obj is False or isinstance(obj, bytes):
        return obj
    if isinstance(obj, int):
        if not _NINT_MIN <= obj <= _UINT_MAX:
            detail = f"integer {_show(obj)} does not fit CBOR major type 0/1"
            raise CborError(path or "/", "int.range", detail)
        return obj
    if isinstance(obj, list | tuple | dict) and depth >= CBOR_DEPTH_MAX:
        detail = f"nested deeper than CBOR_DEPTH_MAX={CBOR_DEPTH_MAX}"
        raise CborError(path or "/", "too_deep", detail)
    if isinstance(obj, list | tuple):
        return [_prepare(item, f"{path}/{i}", depth + 1) for i, item in enumerate(obj)]
    if isinstance(obj, dict):
        return _prepare_map(obj, path, depth + 1)
    if isinstance(obj, cbor2.CBORTag):
        if obj.tag != DEC128_TAG or not isinstance(obj.value, bytes) or len(obj.value) != 16:
            raise CborError(
                path or "/", "tag.unsupported", f"only tag {DEC128_TAG} over 16 bytes is allowed"
            )
        return obj
    if isinstance(obj, float):
        raise CborError(path or "/", "float", "floats are not allowed in canonical values")
    raise CborError(path or "/", "type.unsupported", f"cannot encode {type(obj).__name__}")


def _prepare_map(obj: dict[Any, Any], path: str, depth: int) -> dict[Any, Any]:
    keys = list(obj)
    for key in keys:
        if isinstance(key, bool) or not isinstance(key, int | str | bytes):
            detail = f"map key {_show(key)} is not int, text or bytes"
            raise CborError(path or "/", "key.type", detail)
        _prepare(key, f"{path}/{_show(key)}", depth)  # an int out of range, a lone surrogate
    if set(map(type, keys)) <= _JUST_TEXT:
        _sort_text_keys(keys)
    else:
        keys.sort(key=_key_sort)
    return {key: _prepare(obj[key], f"{path}/{_show(key)}", depth) for key in keys}


def dumps(obj: Any) -> bytes:
    """Encode ``obj`` as canonical CBOR; raise ``CborError`` for values outside the model."""
    try:
        return cbor2.dumps(_fast(obj))
    except (_Outside, UnicodeEncodeError):  # a lone surrogate fails in a sort key or in cbor2
        _prepare(obj, "")  # raises CborError with a pointer
        raise AssertionError("the slow walk accepted what the fast walk refused") from None


def _in_model(obj: Any, depth: int = 0) -> bool:
    """True if ``obj`` (as cbor2 decoded it) is in the value model with every map's keys
    already in canonical order. Walks without copying: ``loads`` is on the hot path."""
    kind = type(obj)
    if kind is str or kind is bytes or kind is bool or obj is None:
        return True
    if kind is int:  # a bignum (tag 2/3) decodes to an int outside major types 0/1
        number: int = obj
        return _NINT_MIN <= number <= _UINT_MAX
    if kind is list:
        if depth >= CBOR_DEPTH_MAX:
            return False
        depth += 1
        for item in obj:  # noqa: SIM110 - all(<genexpr>) costs a frame per level and is slower
            if not _in_model(item, depth):
                return False
        return True
    if kind is dict:
        if depth >= CBOR_DEPTH_MAX:
            return False
        depth += 1
        keys = list(obj)
        if set(map(type, keys)) <= _JUST_TEXT:
            in_order = list(keys)
            _sort_text_keys(in_order)
            if in_order != keys:  # dict keys are distinct, so equal means strictly ascending
                return False
        elif all(map(_key_in_model, keys)):
            encoded = [_key_sort(key) for key in keys]
            if any(a >= b for a, b in itertools.pairwise(encoded)):
                return False
        else:
            return False
        for value in obj.values():  # noqa: SIM110 - as above
            if not _in_model(value, depth):
                return False
        return True
    return (
        kind is cbor2.CBORTag
        and obj.tag == DEC128_TAG
        and type(obj.value) is bytes
        and len(obj.value) == 16
    )


def loads(data: bytes) -> Any:
    """Decode canonical CBOR strictly; raise ``CborError`` on any non-canonical input."""
    try:
        obj = cbor2.loads(data)
    except (cbor2.CBORDecodeError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise _decode_error(exc) from exc
    # Fast check: the model holds and keys are in order, so cbor2 re-encodes in the same order;
    # then byte equality rules out non-shortest heads, indefinite lengths, duplicates, trailing
    # bytes. Only on failure is the slow walk run, to say what is wrong.
    if _in_model(obj) and cbor2.dumps(obj) == data:
        return obj
    try:
        dumps(obj)  # raises CborError with a pointer for a value outside the model
    except CborError as exc:
        if exc.code == "int.range":  # only a bignum tag decodes to such an int
            detail = "bignums (tags 2 and 3) are not allowed; integers fit major types 0/1"
            raise CborError(exc.pointer, "tag.unsupported", detail) from exc
        raise
    raise CborError("/", "non_canonical", "input is not in canonical form")


def _decode_error(exc: Exception) -> CborError:
    # cbor2 says these in its messages only; matching them gives the stable codes, and any other
    # failure is still a CborError ("malformed").
    if isinstance(exc.__cause__ or exc.__context__, UnicodeDecodeError):
        return CborError("/", "text.not_unicode", "a text string is not UTF-8")
    if isinstance(exc, RecursionError) or "nesting depth" in str(exc):
        return CborError("/", "too_deep", f"nested deeper than CBOR_DEPTH_MAX={CBOR_DEPTH_MAX}")
    return CborError("/", "malformed", str(exc))


def head(major: int, value: int) -> bytes:
    """The shortest CBOR head for ``value`` (0 .. 2**64-1) in major type ``major`` (0-7)."""
    top = major << 5
    if value < 24:
        return bytes((top | value,))
    if value < 0x100:
        return bytes((top | 24, value))
    if value < 0x10000:
        return bytes((top | 25,)) + value.to_bytes(2, "big")
    if value < 0x1_0000_0000:
        return bytes((top | 26,)) + value.to_bytes(4, "big")
    return bytes((top | 27,)) + value.to_bytes(8, "big")


def digest(data: bytes) -> bytes:
    """The raw 32-byte blake3 digest of ``data``."""
    return blake3.blake3(data).digest()


def content_hash(data: bytes) -> str:
    """The content address ``blake3:<64 lowercase hex>`` of ``data``."""
    return HASH_PREFIX + blake3.blake3(data).hexdigest()


def hash_to_raw(text: str) -> bytes:
    """``blake3:<hex>`` to its raw 32 bytes; raise ``CborError`` if malformed."""
    if not text.startswith(HASH_PREFIX) or len(text) != len(HASH_PREFIX) + 64:
        raise CborError("/", "hash.format", f"not a blake3:<64 hex> address: {text!r}")
    hex_part = text[len(HASH_PREFIX) :]
    if hex_part != hex_part.lower():
        raise CborError("/", "hash.format", "hash hex must be lowercase")
    try:
        return bytes.fromhex(hex_part)
    except ValueError as exc:
        raise CborError("/", "hash.format", f"not hex: {text!r}") from exc


def raw_to_hash(raw: bytes) -> str:
    return HASH_PREFIX + raw.hex()
