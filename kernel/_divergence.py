"""What replay compares, and how a difference is reported: ``ReplayDivergence`` at the first
record that re-executed differently, naming the first differing field with both values.
"""

from __future__ import annotations

from typing import Any, Final

from air import cbor

__all__ = ["first_difference", "show_value"]


_ABSENT: Final = object()


def first_difference(expected: Any, actual: Any, path: str = "") -> tuple[str, str, str]:
    """The first place two decoded records (or any CBOR values) differ, in key order:
    ``(dotted path, expected shown, actual shown)``. Never returns two equal renderings for
    values that differ (a nested difference is named by its own path)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(expected.keys() | actual.keys(), key=str):
            was, now = expected.get(key, _ABSENT), actual.get(key, _ABSENT)
            if was != now:
                return first_difference(was, now, f"{path}.{key}" if path else str(key))
    elif isinstance(expected, list) and isinstance(actual, list):
        for index, (was, now) in enumerate(zip(expected, actual, strict=False)):
            if was != now:
                return first_difference(was, now, f"{path}[{index}]")
        if len(expected) != len(actual):
            return f"{path}.length", str(len(expected)), str(len(actual))
    return path or "value", show_value(expected), show_value(actual)


def show_value(value: Any) -> str:
    """A short, faithful rendering for messages: hashes as ``blake3:``, bytes as hex."""
    if value is _ABSENT:
        return "(absent)"
    if isinstance(value, bytes):
        if len(value) == 32:
            return cbor.raw_to_hash(value)
        text = value.hex()
        return text if len(text) <= 80 else f"{text[:64]}... ({len(value)} bytes)"
    if isinstance(value, list | dict):
        return f"{type(value).__name__} {cbor.content_hash(cbor.dumps(value))}"
    return repr(value)
