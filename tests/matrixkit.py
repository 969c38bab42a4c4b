"""Crash and fault matrices split between the main suite and the long variants.

A matrix cuts a script at every durable operation. Most of those operations repeat a kind the
matrix has already cut at (the tenth ``write`` of one action is cut the way the first was), so
the main suite cuts at the first operation of each kind and the long variants (``-m long``,
which ``.ci/run`` runs after the main suite) cut at all the others: every point is still cut on
every CI run, and a change that breaks one kind of operation fails the main suite.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import pytest


def first_of_each_kind(kinds: Iterable[Hashable]) -> list[tuple[pytest.MarkDecorator, ...]]:
    """For each case's kind, in order, the marks of its ``pytest.param``: none for the first
    case of a kind, ``long`` for the rest."""
    seen: set[Hashable] = set()
    marks: list[tuple[pytest.MarkDecorator, ...]] = []
    for kind in kinds:
        marks.append(() if kind not in seen else (pytest.mark.long,))
        seen.add(kind)
    return marks
