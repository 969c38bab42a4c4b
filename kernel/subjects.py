"""Journal subjects and record kinds: checking, building, matching, and their cached encodings.

A subject is ``/``-separated, starts with ``/``, has no empty segment, no ``*``, ``>`` or
whitespace. AIR names keep their own ``/``: ``demo/Counter@1`` contributes two segments. A
pattern is a subject whose segments may also be ``*`` (exactly one segment) and, as the last
segment only, ``**`` or its alias ``>`` (zero or more further segments; unlike NATS, ``/a/>``
also matches ``/a``). Partial wildcards (``ord*``) are rejected, not taken literally. A kind is
``[a-z][a-z0-9_.-]*``.

Subjects and kinds repeat (one subject per cell, a handful of kinds), so their checked CBOR
encodings are cached for the journal's encoder (``kernel.journal.encode_record``), which reads
``subject_encodings`` and ``kind_encodings`` directly on its hot path; only this module writes
them. Two caches, so that a string checked as a kind is never taken for a checked subject.
Bounded by clearing, which is cheap and cannot change any output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from air import cbor
from air.errors import UsageError

__all__ = [
    "SubjectPattern",
    "cell_subject",
    "check_kind",
    "check_subject",
    "checked_kind_cbor",
    "checked_subject_cbor",
    "effect_subject",
    "event_subject",
    "is_kind",
    "is_subject",
    "kind_cbor",
    "kind_encodings",
    "known_kind",
    "known_subject",
    "make_subject",
    "subject_cbor",
    "subject_encodings",
    "subject_matches",
]

_SUBJECT_RE: Final = re.compile(r"(?:/[^/*>\s]+)+")
_KIND_RE: Final = re.compile(r"[a-z][a-z0-9_.-]*")
_ENCODED_CACHE_MAX: Final = 65_536
"""Subjects (one per cell) and kinds whose checked encodings are kept: as many as the kernel
keeps entities, so a world of 10,000 busy cells does not check every subject again (at 4,096
it did: ~0.9 µs of pattern per record)."""

subject_encodings: dict[str, bytes] = {}
"""Checked subject -> its CBOR text encoding."""
kind_encodings: dict[str, bytes] = {}
"""Checked kind -> its CBOR text encoding."""

# (reducer, leaf) -> the checked text before and after a cell's key hash in its subjects.
_cell_templates: dict[tuple[str, str], tuple[str, str]] = {}
_TEMPLATES_CACHED_MAX: Final = 4_096  # (reducer, leaf) pairs: a few per reducer


def check_subject(subject: str) -> str:
    """Return ``subject`` if it is a valid concrete subject, else raise ``UsageError``."""
    if not isinstance(subject, str) or _SUBJECT_RE.fullmatch(subject) is None:
        raise UsageError(f"invalid journal subject {subject!r}")
    try:
        subject.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(f"journal subject {subject!r} is not valid Unicode") from exc
    return subject


def check_kind(kind: str) -> str:
    """Return ``kind`` if it is a valid record kind (``[a-z][a-z0-9_.-]*``), else raise."""
    if not isinstance(kind, str) or _KIND_RE.fullmatch(kind) is None:
        raise UsageError(f"invalid journal record kind {kind!r}")
    return kind


def is_subject(subject: object) -> bool:
    """The pattern check alone (for decoded records, which are valid UTF-8 already)."""
    return type(subject) is str and _SUBJECT_RE.fullmatch(subject) is not None


def is_kind(kind: object) -> bool:
    return type(kind) is str and _KIND_RE.fullmatch(kind) is not None


def known_subject(subject: str) -> bool:
    """``is_subject`` for a str, answered from the cache when it holds the subject."""
    return subject in subject_encodings or _SUBJECT_RE.fullmatch(subject) is not None


def known_kind(kind: str) -> bool:
    return kind in kind_encodings or _KIND_RE.fullmatch(kind) is not None


def make_subject(*parts: str) -> str:
    """Join ``parts`` (each one or more segments) into a checked subject: ``/world/event/a/b@1``.

    The check is the one ``encode_record`` needs, so its result goes into the same cache: a
    new cell's subject is checked once, not again when its step is journaled."""
    subject = "/" + "/".join(parts)
    subject_cbor(subject)
    return subject


def event_subject(schema: str) -> str:
    """Subject of an event entering the world: ``/world/event/<schema>``."""
    return make_subject("world", "event", schema)


def cell_subject(reducer: str, key_hash: bytes, leaf: str = "step") -> str:
    """Subject of a cell-scoped record: ``/world/cell/<reducer>/<key hash hex>/<leaf>``.

    The text around the hash is checked once per (reducer, leaf): a segment of hex digits
    cannot make a valid subject invalid, so a new cell's subject skips the pattern (a million
    new cells spent ~1 s in it) and goes straight into the encoder's cache."""
    template = _cell_templates.get((reducer, leaf))
    if template is None or not key_hash:
        make_subject("world", "cell", reducer, key_hash.hex(), leaf)  # raises if bad
        if len(_cell_templates) >= _TEMPLATES_CACHED_MAX:
            _cell_templates.clear()
        template = _cell_templates[(reducer, leaf)] = (f"/world/cell/{reducer}/", f"/{leaf}")
    subject = template[0] + key_hash.hex() + template[1]
    if subject not in subject_encodings:
        _cache_subject(subject)
    return subject


def effect_subject(intent_hash: bytes, leaf: str) -> str:
    """Subject of an effect record: ``/world/effect/<intent hash hex>/<leaf>`` (intent, receipt)."""
    return make_subject("world", "effect", intent_hash.hex(), leaf)


@dataclass(frozen=True, slots=True)
class SubjectPattern:
    """A compiled subject pattern; ``matches`` is one regex match per subject."""

    pattern: str
    _regex: re.Pattern[str]

    @classmethod
    def compile(cls, pattern: str) -> SubjectPattern:
        return _compile_pattern(pattern)

    def matches(self, subject: str) -> bool:
        return self._regex.fullmatch(subject) is not None


@lru_cache(maxsize=256)
def _compile_pattern(pattern: str) -> SubjectPattern:
    if not isinstance(pattern, str) or not pattern.startswith("/") or pattern == "/":
        raise UsageError(f"invalid subject pattern {pattern!r}")
    segments = pattern[1:].split("/")
    parts: list[str] = []
    for index, segment in enumerate(segments):
        if segment in ("**", ">"):
            if index != len(segments) - 1:
                raise UsageError(f"'{segment}' must be the last segment of {pattern!r}")
            parts.append("(?:/[^/]+)*")
        elif segment == "*":
            parts.append("/[^/]+")
        elif _SUBJECT_RE.fullmatch("/" + segment) is None:
            raise UsageError(f"invalid segment {segment!r} in subject pattern {pattern!r}")
        else:
            parts.append("/" + re.escape(segment))
    return SubjectPattern(pattern, re.compile("".join(parts)))


def subject_matches(pattern: str, subject: str) -> bool:
    """True if ``subject`` matches ``pattern``: ``*`` is one segment, a trailing ``**`` the rest."""
    return _compile_pattern(pattern).matches(subject)


# --- encodings --------------------------------------------------------------------------------


def _text_cbor(text: str) -> bytes:
    raw = text.encode("utf-8")
    return cbor.head(3, len(raw)) + raw


def subject_cbor(subject: str) -> bytes:
    """The CBOR encoding of a subject, checked (``UsageError``) and cached."""
    encoded = subject_encodings.get(subject)
    if encoded is None:
        encoded = _cache_subject(check_subject(subject))
    return encoded


def _cache(table: dict[str, bytes], text: str) -> bytes:
    """Cache the encoding of a subject or kind known to be valid in ``table``; return it."""
    encoded = _text_cbor(text)
    if len(table) >= _ENCODED_CACHE_MAX:
        table.clear()
    table[text] = encoded
    return encoded


def _cache_subject(subject: str) -> bytes:
    return _cache(subject_encodings, subject)


def kind_cbor(kind: str) -> bytes:
    """The CBOR encoding of a kind, checked (``UsageError``) and cached."""
    encoded = kind_encodings.get(kind)
    if encoded is None:
        encoded = _cache(kind_encodings, check_kind(kind))
    return encoded


def checked_subject_cbor(subject: str) -> bytes | None:
    """``subject_cbor``, or None for an invalid subject (for a caller that reports it later)."""
    try:
        return subject_cbor(subject)
    except UsageError:
        return None


def checked_kind_cbor(kind: str) -> bytes | None:
    """``kind_cbor``, or None for an invalid kind (checked once, not again by ``kind_cbor``)."""
    encoded = kind_encodings.get(kind)
    if encoded is None and is_kind(kind):
        encoded = _cache(kind_encodings, kind)
    return encoded
