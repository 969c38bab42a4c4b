"""A retry of any batch is exactly once (``world._event_ids``: the index of every id journaled).

The index is derived from the journal, so whatever happens to it (killed before it was written,
missing, damaged, another world's, ahead of a cut journal, not writable, a full disk) the world
never journals an id twice and never drops a new event: it reads the journal again instead.
Power loss is in ``tests/world/test_power_loss.py`` (scenario ``retried_batch``).
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import world as worlds
from world import World
from world import _event_ids as eventids
from world.history import verify_world
from world.journal import FileJournal

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT, add

INDEX = Path("cache") / eventids.FILE


def _batch(count: int, prefix: str = "e") -> tuple[list[dict[str, Any]], list[str | None]]:
    return [add(f"k{i % 7}", 1) for i in range(count)], [f"{prefix}-{i}" for i in range(count)]


def _count(journaled: list[int]) -> int:
    """How many seqs a ``Sent.journaled`` span holds."""
    return 0 if not journaled else journaled[1] - journaled[0] + 1


def _journaled_ids(w: Path) -> Counter[str]:
    with FileJournal.open(w / "journal", readonly=True) as journal:
        return Counter(
            r.body["id"] for r in journal.read(0) if r.kind == "event.in" and "id" in r.body
        )


def _send(w: Path, values: list[Any], ids: list[str | None] | None) -> Any:
    with worlds.open(w) as handle:
        return handle.send_many(EVENT, values, ids=ids), handle.notices


@pytest.fixture
def small_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    """The index is written every 8 ids, so a batch of 50 crosses many flushes (as 200,000
    crosses the 65,536 of ``FLUSH_IDS``, and crossed the old window of 100,000)."""
    monkeypatch.setattr(eventids, "FLUSH_IDS", 8)


@pytest.mark.long
def test_a_retried_200000_event_batch_journals_nothing_new(tmp_path: Path) -> None:
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    values, ids = _batch(200_000)
    first, _ = _send(w, values, ids)
    assert (first.duplicates, first.journaled) == (0, [1, 200_000])
    for _attempt in range(2):  # a client that lost the acknowledgement, twice
        again, _ = _send(w, values, ids)
        assert (again.seqs, again.duplicates, again.journaled) == (first.seqs, 200_000, [])
    assert _journaled_ids(w) == Counter(ids)


def test_a_retry_across_many_flushes_and_sessions_journals_nothing_new(
    tmp_path: Path, small_flush: None
) -> None:
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    values, ids = _batch(50)
    first, _ = _send(w, values, ids)
    with World.open(w) as world:  # one session: this session's ids and the file's
        more = world.send_many([(EVENT, add("x", 1))] * 3, ids=["new-0", "e-3", "new-0"])
        seq = first.journaled[1] + 1
        assert more == [seq, first.seqs[3], seq]
        assert world.send_many([(EVENT, v) for v in values], ids=ids) == first.seqs
        world.snapshot()
    again, notices = _send(w, values, ids)
    assert (again.seqs, again.duplicates, notices) == (first.seqs, 50, [])
    assert _journaled_ids(w) == Counter([*ids, "new-0"])
    assert verify_world(w).ok


def test_a_retry_after_a_kill_before_the_index_was_written_journals_nothing_new(
    tmp_path: Path,
) -> None:
    """The writer dies right after its send is acknowledged: no index flush, no checkpoint.
    The next session reads the ids the index lacks from the journal."""
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    values, ids = _batch(40)
    _send(w, values[:10], ids[:10])  # the index holds these
    script = (
        "import os, sys; from world import World; sys.path.append('tests'); "
        "from worldkit import EVENT, add; "
        "world = World.open(sys.argv[1]); "
        "world.send_many([(EVENT, add(f'k{i % 7}', 1)) for i in range(40)], "
        "ids=[f'e-{i}' for i in range(40)]); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", script, str(w)], cwd=ROOT, check=True, timeout=120)
    assert _journaled_ids(w) == Counter(ids)
    again, notices = _send(w, values, ids)
    assert (again.duplicates, again.journaled, notices) == (40, [], [])
    assert _journaled_ids(w) == Counter(ids)


def _garbage(index: Path) -> None:
    index.write_bytes(b"not a database, only some bytes " * 200)


def _truncated(index: Path) -> None:
    index.write_bytes(index.read_bytes()[:1500])


def _empty(index: Path) -> None:
    index.write_bytes(b"")


def _folder(index: Path) -> None:
    index.unlink()
    index.mkdir()


def _missing(index: Path) -> None:
    index.unlink()


def _wrong_rows(index: Path) -> None:
    """Rows the journal does not hold: an id at a seq that is another event, one past the end."""
    with sqlite3.connect(index) as db:
        db.execute("UPDATE ids SET seq = seq + 1 WHERE id = 'e-3'")
        db.execute("INSERT INTO ids VALUES ('fresh-0', 5)")


def _not_a_seq(index: Path) -> None:
    with sqlite3.connect(index) as db:
        db.execute("INSERT INTO ids VALUES ('odd', 'not a seq')")


def _ahead(index: Path) -> None:
    with sqlite3.connect(index) as db:
        db.execute("UPDATE meta SET seq_to = 1000000")


def _another_format(index: Path) -> None:
    with sqlite3.connect(index) as db:
        db.execute("UPDATE meta SET format = 99")


DAMAGE = {
    "garbage": _garbage,
    "truncated": _truncated,
    "empty": _empty,
    "a folder": _folder,
    "missing": _missing,
    "rows the journal does not hold": _wrong_rows,
    "ahead of the journal": _ahead,
    "a row that is not a seq": _not_a_seq,
    "another format": _another_format,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_index_neither_duplicates_nor_drops_and_is_rebuilt(
    tmp_path: Path, damage: str
) -> None:
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    values, ids = _batch(20)
    first, _ = _send(w, values, ids)
    DAMAGE[damage](w / INDEX)
    fresh = [add("n", 1), add("n", 2)]
    again, notices = _send(w, [*values, *fresh], [*ids, "fresh-0", "fresh-1"])
    assert again.seqs[:20] == first.seqs
    assert (again.duplicates, _count(again.journaled)) == (20, 2)
    assert _journaled_ids(w) == Counter([*ids, "fresh-0", "fresh-1"])
    if damage not in ("missing", "empty"):  # SQLite takes an empty file for a new index
        assert any("event id index" in n for n in notices), notices
    later, notices = _send(w, values, ids)  # the rebuilt index answers, and says nothing
    assert later.duplicates == 20
    if damage == "a folder":  # not ours to delete: each session holds the ids in memory
        assert any("holds every event id in memory" in n for n in notices), notices
    else:
        assert notices == []


def test_an_index_copied_from_another_world_is_not_believed(tmp_path: Path) -> None:
    """Two worlds of one AIR have the same record 0, so the genesis digest does not tell their
    indexes apart; reading back what the index answers does."""
    a, b = tmp_path / "a", tmp_path / "b"
    for w in (a, b):
        World.create(w, COUNTER_AIR).close()
    values, ids = _batch(10)
    _send(a, values, ids)
    other_values, other_ids = _batch(12, "other")
    _send(b, other_values, other_ids)
    shutil.copy(a / INDEX, b / INDEX)
    again, notices = _send(b, values, ids)
    assert (again.duplicates, _count(again.journaled)) == (0, 10)
    assert _journaled_ids(b) == Counter([*ids, *other_ids])
    assert any("is not the event" in n and "rebuilt" in n for n in notices), notices


def test_a_journal_cut_below_the_index_makes_its_ids_new_again(tmp_path: Path) -> None:
    """After ``repair`` cuts records, their ids are no longer journaled: sent again, they are
    journaled (the index, ahead of the journal, is rebuilt)."""
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    values, ids = _batch(10)
    _send(w, values[:4], ids[:4])
    keep = _copy_journal(w)
    _send(w, values[4:], ids[4:])
    shutil.rmtree(w / "journal")
    shutil.copytree(keep, w / "journal")
    for stale in ("snapshots", "state"):
        shutil.rmtree(w / stale, ignore_errors=True)
    again, _ = _send(w, values, ids)
    assert (again.duplicates, _count(again.journaled)) == (4, 6)
    assert _journaled_ids(w) == Counter(ids)


def _copy_journal(w: Path) -> Path:
    keep = w.parent / "journal-copy"
    shutil.copytree(w / "journal", keep)
    return keep


def test_an_index_that_cannot_be_written_holds_the_ids_in_memory(tmp_path: Path) -> None:
    """``cache/`` a file: SQLite cannot open the index, nor can it be built again there. The
    session reads every id from the journal and holds them; nothing is duplicated."""
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    values, ids = _batch(12)
    _send(w, values[:6], ids[:6])
    shutil.rmtree(w / "cache")
    (w / "cache").write_bytes(b"")
    again, notices = _send(w, values, ids)
    assert (again.duplicates, _count(again.journaled)) == (6, 6)
    assert any("holds every event id in memory" in n for n in notices), notices
    assert _journaled_ids(w) == Counter(ids)


def test_a_full_disk_under_the_index_holds_the_ids_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_flush: None
) -> None:
    """SQLite's own "database or disk is full" (``max_page_count`` makes it so at a few pages)
    at a flush: the ids stay in memory for the session, and a later one rebuilds."""
    connect = eventids.EventIds._connect

    def small(self: eventids.EventIds) -> sqlite3.Connection:
        db = connect(self)
        db.execute("PRAGMA max_page_count = 3")
        return db

    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    values, ids = _batch(400)
    monkeypatch.setattr(eventids.EventIds, "_connect", small)
    with World.open(w) as world:
        world.send_many([(EVENT, v) for v in values], ids=ids)
        assert world.send_many([(EVENT, v) for v in values], ids=ids)[-1] == 400
        assert any("holds every event id in memory" in n for n in world.notices)
    monkeypatch.undo()
    again, _ = _send(w, values, ids)
    assert again.duplicates == 400
    assert _journaled_ids(w) == Counter(ids)


def test_a_snapshot_of_the_kernel_that_kept_ids_still_opens(tmp_path: Path) -> None:
    """Snapshots before the index held the kernel's last ids (``event_ids``): restored, the
    list is not read, and the ids are still known (from the journal)."""
    w = tmp_path / "w"
    with World.create(w, COUNTER_AIR) as world:
        world.send_many([(EVENT, add("a", 1))], ids=["old-1"])
        world.run_until_idle()
        obj = world.kernel.snapshot_obj(world.journal.seq_next)
        assert "event_ids" not in obj
        blank = world.blank_kernel()
        blank.restore({**obj, "event_ids": [["old-1", 1]]})
        assert blank.counts() == world.kernel.counts()
    again, _ = _send(w, [add("a", 1)], ["old-1"])
    assert (again.seqs, again.duplicates) == ([1], 1)
    with World.open(w, readonly=True) as world:
        assert world.state(COUNTER, "a")["count"] == 1


def test_ids_answered_far_apart_are_read_back_in_runs(tmp_path: Path) -> None:
    """Seqs more than ``CHECK_GAP`` apart are read back as separate runs of the journal."""
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    _send(w, [add("a", 1)], ["far-0"])
    _send(w, [add("a", 1)] * (3 * eventids.CHECK_GAP), None)
    last, _ = _send(w, [add("a", 1)], ["far-1"])
    again, notices = _send(w, [add("a", 1)] * 2, ["far-1", "far-0"])
    assert (again.seqs, again.duplicates, notices) == ([last.seqs[0], 1], 2, [])


def test_a_batch_past_staged_events_max_is_refused_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The largest batch a send takes (``STAGED_EVENTS_MAX``, 10,000,000): one more is refused
    before anything is journaled; the index has no bound of its own below it."""
    from air.errors import LimitExceeded
    from world.ops import _events

    monkeypatch.setattr(_events, "STAGED_EVENTS_MAX", 5)
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    values, ids = _batch(6)
    with pytest.raises(LimitExceeded) as refused:
        _send(w, values, ids)
    assert refused.value.limit == "STAGED_EVENTS_MAX"
    sent, _ = _send(w, values[:5], ids[:5])
    assert sent.journaled == [1, 5]
    assert _journaled_ids(w) == Counter(ids[:5])
