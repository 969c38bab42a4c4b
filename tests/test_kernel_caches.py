"""The kernel's and the journal encoder's bounded caches (entities, record subjects, checked
subject encodings, cell subject templates): at their limits they are cleared, and a world that
crosses every limit many times writes exactly the journal and cells it writes without limits."""

from __future__ import annotations

from pathlib import Path

import pytest

import kernel._stepping
import kernel.core
import kernel.subjects
from world.replay import verify_world
from world.world import World

from worldkit import COUNTER_AIR, EVENT, add

KEYS = 40


def _run(path: Path) -> tuple[bytes, dict[str, int]]:
    with World.create(path, COUNTER_AIR) as world:
        for round_ in range(3):  # every key again: entries and subjects are needed anew
            world.send_many([(EVENT, add(f"k{n}", round_ + 1)) for n in range(KEYS)])
            world.run_until_idle()
        sizes = {
            "entities": max(len(c) for c in world.kernel._entities.values()),
            "subjects": max(len(c) for c in world.kernel._subjects.values()),
            "encoded": len(kernel.subjects.subject_encodings),
        }
        world.snapshot()
        counts = {f"k{n}": world.state("demo/Counter@1", f"k{n}")["count"] for n in range(KEYS)}
    journal = b"".join(p.read_bytes() for p in sorted((path / "journal").glob("*.log")))
    assert counts == {f"k{n}": 6 for n in range(KEYS)}
    return journal, sizes


def test_caches_at_their_limits_change_no_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wide, _sizes = _run(tmp_path / "wide")
    monkeypatch.setattr(kernel.core, "_ENTITIES_CACHED_MAX", 3)
    monkeypatch.setattr(kernel._stepping, "_SUBJECTS_CACHED_MAX", 3)
    monkeypatch.setattr(kernel.subjects, "_ENCODED_CACHE_MAX", 3)
    kernel.subjects.subject_encodings.clear()
    kernel.subjects._cell_templates.clear()
    narrow, sizes = _run(tmp_path / "narrow")
    assert sizes["entities"] <= 3
    assert sizes["subjects"] <= 3
    assert sizes["encoded"] <= 3
    assert narrow == wide
    assert verify_world(tmp_path / "narrow").ok
