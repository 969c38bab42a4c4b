"""A writer whose ``journal/`` is swapped under it writes no more (issue 20, item 10).

Locks are on directories' inodes: moving ``journal/`` aside and copying it back lets a second
writer lock the copy. Before this check the first writer went on appending and died with an
internal ``mmap`` error; now, before each write, it finds its directory replaced and stops
with ``JournalReplaced`` (the handle goes stale), so only one of the two ever writes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from world import JournalReplaced, World, WorldStale

from worldkit import COUNTER, COUNTER_AIR, EVENT, add


def _world(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    with World.create(path, COUNTER_AIR) as world:
        world.send(EVENT, add("a", 1))
        world.run_until_idle()
    return path


def test_a_writer_whose_journal_was_copied_back_stops_and_the_new_writer_goes_on(
    tmp_path: Path,
) -> None:
    path = _world(tmp_path)
    first = World.open(path)
    first.send(EVENT, add("a", 2))
    (path / "journal").rename(path / "journal.aside")
    shutil.copytree(path / "journal.aside", path / "journal")
    second = World.open(path)  # locks the copy: the lock was on the old inode
    with pytest.raises(JournalReplaced) as caught:
        first.send(EVENT, add("a", 100))
    assert caught.value.path == str(path / "journal")
    assert "open the world again" in str(caught.value)
    with pytest.raises(WorldStale):
        first.run_until_idle()
    first.close()  # stale: writes nothing, releases
    second.send(EVENT, add("a", 3))
    second.run_until_idle()
    second.close()
    with World.open(path, readonly=True) as world:
        assert world.state(COUNTER, "a")["count"] == 6  # 1 + 2 + 3: not the 100


def test_a_writer_whose_journal_is_gone_stops_before_writing(tmp_path: Path) -> None:
    path = _world(tmp_path)
    world = World.open(path)
    (path / "journal").rename(tmp_path / "elsewhere")
    with pytest.raises(JournalReplaced) as caught:
        world.send(EVENT, add("a", 1))
    assert caught.value.how == "it is gone"
    world.close()
    assert not (path / "journal").exists()


def test_a_world_folder_moved_away_stops_its_writer(tmp_path: Path) -> None:
    path = _world(tmp_path)
    world = World.open(path)
    path.rename(tmp_path / "moved")
    shutil.copytree(tmp_path / "moved", path)
    with pytest.raises(JournalReplaced):
        world.run_until_idle()
    world.close()


def test_close_after_a_swap_writes_nothing_into_the_copy(tmp_path: Path) -> None:
    path = _world(tmp_path)
    world = World.open(path)
    world.send(EVENT, add("a", 5))
    (path / "journal").rename(path / "journal.aside")
    shutil.copytree(path / "journal.aside", path / "journal")
    before = sorted((p.name, p.read_bytes()) for p in (path / "journal").iterdir())
    with pytest.raises(JournalReplaced):
        world.close()
    after = sorted((p.name, p.read_bytes()) for p in (path / "journal").iterdir())
    assert after == before
    World.open(path).close()  # the lock went with the failed close
