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
"""

from __future__ import annotations

import itertools
from typing import Any, Final

import blake3
import cbor2

from air.errors import CborError

__all__ = [
    "DEC128_TAG",
    "Tag",
    "content_hash",
    "digest",
    "dumps",
    "hash_to_raw",
    "loads",
    "raw_to_hash",
]

DEC128_TAG: Final = 2000
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


class _Outside(Exception):
    """Raised by the fast walk; ``dumps`` then re-walks slowly to say where and why."""


def _fast(obj: Any) -> Any:
    """The hot path: reorder maps, check types, build no pointers. Raises ``_Outside``."""
    kind = type(obj)
    if kind is str or kind is bytes or kind is bool or obj is None:
        return obj
    if kind is int:
        if _NINT_MIN <= obj <= _UINT_MAX:
            return obj
        raise _Outside
    if kind is dict:
        keys = list(obj)
        if all(type(key) is str for key in keys):
            keys.sort(key=_text_key_sort)
        else:
            for key in keys:
                if type(key) not in (int, str, bytes):
                    raise _Outside
            keys.sort(key=_key_sort)
        return {key: _fast(obj[key]) for key in keys}
    if kind is list or kind is tuple:
        return [_fast(item) for item in obj]
    if (
        kind is cbor2.CBORTag
        and obj.tag == DEC128_TAG
        and type(obj.value) is bytes
        and len(obj.value) == 16
    ):
        return obj
    raise _Outside


def _prepare(obj: Any, path: str) -> Any:
    """The slow walk, with JSON pointers: only run to explain a value ``_fast`` refused."""
    if obj is None or obj is True or obj is False or isinstance(obj, str | bytes):
        return obj
    if isinstance(obj, int):
        if not _NINT_MIN <= obj <= _UINT_MAX:
            raise CborError(
                path or "/", "int.range", f"integer {obj} does not fit CBOR major type 0/1"
            )
        return obj
    if isinstance(obj, list | tuple):
        return [_prepare(item, f"{path}/{i}") for i, item in enumerate(obj)]
    if isinstance(obj, dict):
        return _prepare_map(obj, path)
    if isinstance(obj, cbor2.CBORTag):
        if obj.tag != DEC128_TAG or not isinstance(obj.value, bytes) or len(obj.value) != 16:
            raise CborError(
                path or "/", "tag.unsupported", f"only tag {DEC128_TAG} over 16 bytes is allowed"
            )
        return obj
    if isinstance(obj, float):
        raise CborError(path or "/", "float", "floats are not allowed in canonical values")
    raise CborError(path or "/", "type.unsupported", f"cannot encode {type(obj).__name__}")


def _prepare_map(obj: dict[Any, Any], path: str) -> dict[Any, Any]:
    keys = list(obj)
    for key in keys:
        if isinstance(key, bool) or not isinstance(key, int | str | bytes):
            raise CborError(path or "/", "key.type", f"map key {key!r} is not int, text or bytes")
    if all(type(key) is str for key in keys):
        keys.sort(key=_text_key_sort)
    else:
        keys.sort(key=_key_sort)
    return {key: _prepare(obj[key], f"{path}/{key}") for key in keys}


def dumps(obj: Any) -> bytes:
    """Encode ``obj`` as canonical CBOR; raise ``CborError`` for values outside the model."""
    try:
        prepared = _fast(obj)
    except _Outside:
        prepared = _prepare(obj, "")  # raises CborError with a pointer
        raise AssertionError("the slow walk accepted what the fast walk refused") from None
    return cbor2.dumps(prepared)


def _in_model(obj: Any) -> bool:
    """True if ``obj`` (as cbor2 decoded it) is in the value model with every map's keys
    already in canonical order. Walks without copying: ``loads`` is on the hot path."""
    kind = type(obj)
    if kind is str or kind is bytes or kind is bool or kind is int or obj is None:
        return True
    if kind is list:
        return all(_in_model(item) for item in obj)
    if kind is dict:
        keys = list(obj)
        if all(type(key) is str for key in keys):
            text_order = [_text_key_sort(key) for key in keys]
            if any(a >= b for a, b in itertools.pairwise(text_order)):
                return False
        elif all(type(key) in (int, str, bytes) for key in keys):
            encoded = [_key_sort(key) for key in keys]
            if any(a >= b for a, b in itertools.pairwise(encoded)):
                return False
        else:
            return False
        return all(_in_model(value) for value in obj.values())
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
        raise CborError("/", "malformed", str(exc)) from exc
    # Fast check: the model holds and keys are in order, so cbor2 re-encodes in the same order;
    # then byte equality rules out non-shortest heads, indefinite lengths, duplicates, trailing
    # bytes. Only on failure is the slow walk run, to say what is wrong.
    if _in_model(obj) and cbor2.dumps(obj) == data:
        return obj
    dumps(obj)  # raises CborError with a pointer for a value outside the model
    raise CborError("/", "non_canonical", "input is not in canonical form")


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
