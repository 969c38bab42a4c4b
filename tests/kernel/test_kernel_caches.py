"""The kernel's and the journal encoder's bounded caches (entities, record subjects, checked
subject and kind encodings, cell subject templates): at their limits they are cleared, and a
world that crosses the limits many times writes exactly the journal and cells it writes without
limits. Also ``Entity``'s hand-written equality and hash, which the mailboxes rely on."""

from __future__ import annotations

from pathlib import Path

import pytest

import kernel._core
import kernel._steps
import kernel.subjects
from air import cbor
from kernel import Entity
from kernel.subjects import cell_subject, checked_kind_cbor, kind_cbor, make_subject
from world import World
from world.history import verify_world

from worldkit import COUNTER_AIR, EVENT, add

KEYS = 40


def _run(path: Path) -> tuple[bytes, dict[str, int]]:
    with World.create(path, COUNTER_AIR) as world:
        for round_ in range(3):  # every key again: entries and subjects are needed anew
            world.send_many([(EVENT, add(f"k{n}", round_ + 1)) for n in range(KEYS)])
            world.run_until_idle()
        sizes = {
            "entities": max(len(c) for c in world.kernel._entities.values()),
            "subjects": max(len(c) for c in world.kernel.steps.subjects.values()),
            "encoded": len(kernel.subjects.subject_encodings),
            "kinds": len(kernel.subjects.kind_encodings),
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
    monkeypatch.setattr(kernel._core, "_ENTITIES_CACHED_MAX", 3)
    monkeypatch.setattr(kernel._steps, "_SUBJECTS_CACHED_MAX", 3)
    monkeypatch.setattr(kernel.subjects, "_ENCODED_CACHE_MAX", 3)
    kernel.subjects.subject_encodings.clear()
    kernel.subjects.kind_encodings.clear()
    kernel.subjects._cell_templates.clear()
    clears = []

    def counting(table: dict[str, bytes], text: str) -> bytes:
        if len(table) >= 3 and table is kernel.subjects.subject_encodings:
            clears.append(text)
        return cache(table, text)

    cache = kernel.subjects._cache
    monkeypatch.setattr(kernel.subjects, "_cache", counting)
    narrow, sizes = _run(tmp_path / "narrow")
    assert sizes["entities"] <= 3
    assert sizes["subjects"] <= 3
    assert sizes["encoded"] <= 3
    assert sizes["kinds"] <= 3
    assert len(clears) > 10
    assert narrow == wide
    assert verify_world(tmp_path / "narrow").ok


def test_templates_and_kinds_at_their_limits_give_the_checked_encodings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The counter world has one (reducer, leaf) and few kinds: these limits are crossed here."""
    monkeypatch.setattr(kernel.subjects, "_TEMPLATES_CACHED_MAX", 2)
    monkeypatch.setattr(kernel.subjects, "_ENCODED_CACHE_MAX", 2)
    kernel.subjects._cell_templates.clear()
    kernel.subjects.kind_encodings.clear()
    for _round in range(3):
        for kind in ("a.b", "c", "d-e", "f_g", "h.i"):
            assert kind_cbor(kind) == cbor.dumps(kind)
            assert checked_kind_cbor(kind) == cbor.dumps(kind)
            assert len(kernel.subjects.kind_encodings) <= 2
    assert checked_kind_cbor("Bad") is None
    key = bytes(range(32))
    for _round in range(3):
        for reducer in ("a" * 64, "b" * 64, "c" * 64):
            for leaf in ("step", "failed"):
                subject = cell_subject(reducer, key, leaf)
                assert subject == make_subject("world", "cell", reducer, key.hex(), leaf)
                assert len(kernel.subjects._cell_templates) <= 2


def test_entities_are_equal_by_reducer_key_and_run() -> None:
    cell = Entity("r", b"\x61")
    assert cell == Entity("r", b"\x61")
    assert hash(cell) == hash(Entity("r", b"\x61"))
    assert cell == Entity("r", b"\x61", store_key_hash=b"\x00" * 32)  # derived, not identity
    assert cell != Entity("r", b"\x62")
    assert cell != Entity("s", b"\x61")
    assert cell != Entity("r", b"\x61", run_id=1)
    assert Entity("r", None, run_id=1) == Entity("r", None, run_id=1)
    assert Entity("r", None, run_id=1) != Entity("r", None, run_id=2)
    assert cell != ("r", b"\x61", None)
    assert {cell: 1}[Entity("r", b"\x61")] == 1
