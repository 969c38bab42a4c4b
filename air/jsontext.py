"""Reading JSON text: the one reader for AIR files, CLI values and JSONL lines.

``loads(text, source=...)`` is ``json.loads`` made strict and safe for untrusted text. Every
failure is a ``JsonError(source, line, column, code, detail)`` with a 1-based line and column
(columns count characters, not bytes); nothing else escapes it (no ``RecursionError``,
``ValueError``, ``UnicodeDecodeError``). Codes:

    json.syntax           not valid JSON (empty and whitespace-only text included)
    json.encoding         bytes that are not UTF-8; the position of the first bad byte
    json.too_deep         arrays/objects nested deeper than ``JSON_DEPTH_MAX``
    json.number_too_long  a number literal with more than ``JSON_NUMBER_DIGITS_MAX`` digits
    json.duplicate_key    an object names one key twice (the detail names it)
    json.surrogate        a string or key holds a lone UTF-16 surrogate, e.g. ``"\\ud800"``
    json.not_finite       ``NaN``, ``Infinity``, ``-Infinity``, or a number too big for a float

What it accepts beyond RFC 8259: nothing. A leading UTF-8 byte order mark is skipped, as the
RFC allows. Floats are read as Python floats; AIR has none, and the layers above reject them
with their own pointer.

How it stays fast. The work is one ``json.JSONDecoder.decode`` (the C scanner) with hooks for
objects, integers, floats and constants; the hooks only notice that something is wrong and
raise a private signal. Where it is wrong is found afterwards, on the failure path only, by an
iterative token scan (``_locate``) that reports the first problem in document order, so the
same text always gives the same error. Two checks run before or after the decode:

- Depth, before: the C scanner recurses per nesting level, so 10,000 nested arrays would be a
  ``RecursionError``. A text with at most ``JSON_DEPTH_MAX`` opening brackets cannot be too
  deep and is not scanned (a JSONL line, a CLI value, most AIR files); others get one regex
  pass over strings and brackets.
- Lone surrogates, after: the decoder turns ``"\\ud800"`` into a lone surrogate without a hook
  to see it. A substring test for ``\\u`` (and, for ``str`` input holding non-ASCII, one regex
  search for a raw surrogate) decides whether to look; re-encoding the value (in C) decides
  whether one is there; only then does the token scan say where.

Rejected alternatives. The pure-Python ``json.scanner`` would give positions to every hook but
is several times slower and recursive. Catching ``ValueError`` from ``int()`` instead of a
``parse_int`` hook would admit 4,300-digit integers, which no AIR number needs.

There is no byte-size limit (``JSON_TEXT_BYTES_MAX``): every pass here is linear in the text,
and the caller already holds the whole text in memory, so a size cap would protect nothing
that the caller's own read did not already spend.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

from air.errors import JsonError

__all__ = ["JSON_DEPTH_MAX", "JSON_NUMBER_DIGITS_MAX", "loads"]

JSON_DEPTH_MAX: Final = 256
"""Most arrays/objects nested inside one another (``[]`` is 1, ``[[1]]`` is 2). Far above any
AIR document or value, far below where Python's stack ends."""

JSON_NUMBER_DIGITS_MAX: Final = 64
"""Most decimal digits in one number literal (integer, fraction and exponent digits together).
An AIR nat has at most 20 digits and a dec128 coefficient 34; Python's own guard against slow
``int()`` conversion starts at 4,300 digits and raises a bare ``ValueError``."""


class _Problem(Exception):
    """Raised inside a decoder hook: something is wrong; ``_locate`` finds what and where."""


def _digits(literal: str) -> int:
    return sum(char.isdigit() for char in literal)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Problem
    return obj


def _int(literal: str) -> int:
    if len(literal) > JSON_NUMBER_DIGITS_MAX and _digits(literal) > JSON_NUMBER_DIGITS_MAX:
        raise _Problem
    return int(literal)


def _float(literal: str) -> float:
    if len(literal) > JSON_NUMBER_DIGITS_MAX and _digits(literal) > JSON_NUMBER_DIGITS_MAX:
        raise _Problem
    value = float(literal)
    if not math.isfinite(value):
        raise _Problem
    return value


def _constant(literal: str) -> Any:
    raise _Problem


_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_object, parse_int=_int, parse_float=_float, parse_constant=_constant
)

_STRING: Final = r'"[^"\\]*(?:\\.[^"\\]*)*"'
# Strings (an unterminated one runs to the end, so its brackets are not counted) and brackets.
_DEPTH_TOKEN: Final = re.compile(_STRING + r"?|[\[\]{}]", re.DOTALL)
_STRING_RE: Final = re.compile(_STRING + "?", re.DOTALL)
# ``str.translate`` table: brackets to "(" and ")", every other ASCII character deleted. (Other
# characters outside strings are not JSON; they stay, and the token loop then looks.)
_BRACKETS_ONLY: Final = {
    **dict.fromkeys(range(128)),
    **{ord(c): "(" for c in "[{"},
    **{ord(c): ")" for c in "]}"},
}
_TOKEN: Final = re.compile(
    rf"""(?P<string>{_STRING})
    |(?P<number>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)
    |(?P<constant>NaN|-?Infinity)
    |(?P<open>[\[{{]) |(?P<close>[\]}}]) |(?P<comma>,)""",
    re.DOTALL | re.VERBOSE,
)
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")


def loads(text: str | bytes, *, source: str = "<input>") -> Any:
    """Parse one JSON text; raise ``JsonError`` (see the module docstring for its codes)."""
    if isinstance(text, bytes):
        text = _decode(text, source)
    if text.startswith("\ufeff"):
        text = " " + text[1:]  # a space keeps every position where the author sees it
    _check_depth(text, source)
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise JsonError(
            source, exc.lineno, exc.colno, "json.syntax", f"not valid JSON: {exc.msg}"
        ) from exc
    except _Problem:
        raise _locate(text, source) or _unlocated(source) from None
    if _may_hold_surrogate(text) and _holds_surrogate(value):
        raise _locate(text, source) or _unlocated(source)
    return value


def _decode(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = exc.start
        line_start = data.rfind(b"\n", 0, start) + 1
        line = data.count(b"\n", 0, start) + 1
        column = len(data[line_start:start].decode("utf-8")) + 1  # valid: before the first bad byte
        detail = f"byte 0x{data[start]:02x} at offset {start} is not UTF-8"
        raise JsonError(source, line, column, "json.encoding", detail) from exc


def _error(text: str, source: str, pos: int, code: str, detail: str) -> JsonError:
    line = text.count("\n", 0, pos) + 1
    column = pos - text.rfind("\n", 0, pos)
    return JsonError(source, line, column, code, detail)


def _check_depth(text: str, source: str) -> None:
    if text.count("[") + text.count("{") <= JSON_DEPTH_MAX or _shallow(text):
        return
    depth = 0
    for match in _DEPTH_TOKEN.finditer(text):
        char = match.group()[0]
        if char in "[{":
            depth += 1
            if depth > JSON_DEPTH_MAX:
                detail = f"nested deeper than JSON_DEPTH_MAX={JSON_DEPTH_MAX}"
                raise _error(text, source, match.start(), "json.too_deep", detail)
        elif char in "]}":
            depth -= 1


def _shallow(text: str) -> bool:
    """True if the brackets outside strings are balanced and nest at most JSON_DEPTH_MAX deep.

    In C-speed string operations, not a loop per character (10x faster than the token loop on
    an AIR file): keep the brackets outside strings, then remove innermost ``()`` pairs, one
    nesting level per ``replace``. False means too deep *or* unbalanced; the token loop decides.
    """
    if "\\" in text:
        outside = _STRING_RE.sub("", text)
    else:  # no escapes, so every '"' opens or closes a string
        outside = "".join(text.split('"')[::2])
    brackets = outside.translate(_BRACKETS_ONLY)
    for _ in range(JSON_DEPTH_MAX):
        if not brackets:
            return True
        brackets = brackets.replace("()", "")
    return not brackets


def _may_hold_surrogate(text: str) -> bool:
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        return True
    return not text.isascii() and _SURROGATE.search(text) is not None


def _holds_surrogate(value: Any) -> bool:
    """Whether a lone surrogate is anywhere in ``value``, keys included: the C encoder writes
    it through unchanged, and UTF-8 has no form for it. (Most texts that get here hold only
    escaped pairs, such as an emoji written by ``ensure_ascii``; this keeps them off the
    Python-speed token scan.)"""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _unlocated(source: str) -> JsonError:
    # A hook fired but the scan found nothing: unreachable while the two agree; kept so that a
    # disagreement is still a JsonError, not a crash.
    return JsonError(source, 1, 1, "json.syntax", "not valid JSON")


def _locate(text: str, source: str) -> JsonError | None:
    """The first problem the decoder hooks stand for, in document order, or None.

    Only called on text the C decoder read without a syntax error up to where a hook fired (or
    to the end), so the tokens up to the problem are well-formed JSON. Iterative: depth was
    checked already, but nothing here needs the stack anyway.
    """
    frames: list[set[str] | None] = []  # a set of keys seen per object, None per array
    expect_key = False
    for match in _TOKEN.finditer(text):
        kind, token, pos = match.lastgroup, match.group(), match.start()
        if kind == "open":
            frames.append(set() if token == "{" else None)
            expect_key = token == "{"
        elif kind == "close":
            if frames:
                frames.pop()
            expect_key = False
        elif kind == "comma":
            expect_key = bool(frames) and frames[-1] is not None
        elif kind == "string":
            error = _string_problem(text, source, token, pos, frames[-1] if expect_key else None)
            if error is not None:
                return error
            expect_key = False
        elif kind == "number":
            error = _number_problem(text, source, token, pos)
            if error is not None:
                return error
        elif kind == "constant":
            return _error(text, source, pos, "json.not_finite", f"{token} is not a JSON number")
    return None


def _string_problem(
    text: str, source: str, token: str, pos: int, keys: set[str] | None
) -> JsonError | None:
    try:
        decoded = json.loads(token)
    except ValueError:  # past the point the decoder reached: not ours to report
        return None
    found = _SURROGATE.search(decoded)
    if found is not None:
        what = "key" if keys is not None else "string"
        detail = f"{what} holds a lone surrogate U+{ord(found.group()):04X}"
        return _error(text, source, pos, "json.surrogate", detail)
    if keys is not None:
        if decoded in keys:
            return _error(text, source, pos, "json.duplicate_key", f"duplicate key {decoded!r}")
        keys.add(decoded)
    return None


def _number_problem(text: str, source: str, token: str, pos: int) -> JsonError | None:
    digits = _digits(token)
    if digits > JSON_NUMBER_DIGITS_MAX:
        detail = f"number has {digits} digits; JSON_NUMBER_DIGITS_MAX={JSON_NUMBER_DIGITS_MAX}"
        return _error(text, source, pos, "json.number_too_long", detail)
    if token.lstrip("-").isdigit() or math.isfinite(float(token)):
        return None
    return _error(text, source, pos, "json.not_finite", f"{token} is too large for a number")
