"""The cell store's files one operation at a time (``world.cellstore._disk.StoreDisk``): what a
mutation run of the module found no test for (TESTING.md, "Mutation testing"). The flush
protocol as a whole, and its crashes, are the crash and power-loss matrices' business; here
each step alone: where an object lives (the CAS's own layout), whether one already held is
whole, the plan and the objects written, collection sparing a shared object, recovery
finishing a committed flush and undoing an uncommitted one, and a checkpoint that does not
read named by its path.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from air import cbor
from world._cas import FileCas, pin_path
from world._fsutil import TMP_SUFFIX
from world.cellstore._checkpoint import (
    EMPTY_CHECKPOINT,
    FlushPlan,
    decode_plan,
    encode_checkpoint,
)
from world.cellstore._disk import StoreDisk
from world.cellstore._legacy import LEGACY_INTENT_NAME
from world.errors import StoreDamaged


def _objects(*texts: str) -> list[tuple[bytes, bytes]]:
    return [(cbor.digest(t.encode()), t.encode()) for t in texts]


@pytest.fixture
def disk(tmp_path: Path) -> StoreDisk:
    disk = StoreDisk(tmp_path)
    os.makedirs(disk.root)
    return disk


def _plan(created: list[bytes], garbage: list[bytes], next_checkpoint: bytes) -> FlushPlan:
    return FlushPlan(cbor.digest(b""), cbor.digest(next_checkpoint), created, garbage)


CHECKPOINT = encode_checkpoint(b"meta", {}, {})


def test_an_object_lives_where_the_cas_keeps_its_objects(disk: StoreDisk, tmp_path: Path) -> None:
    """Blob puts and the cell store share the CAS: a different layout would duplicate every
    object and break a put's pin on a cell's object."""
    raw = cbor.digest(b"x")
    address = "blake3:" + raw.hex()
    assert disk.object_path(raw) == os.fspath(FileCas(tmp_path).path_of(address))
    assert Path(disk.object_path(raw)).relative_to(tmp_path).parts == (
        "cas",
        raw.hex()[:2],
        raw.hex()[2:],
    )


def test_an_object_is_held_only_whole(disk: StoreDisk) -> None:
    [(raw, data)] = _objects("the state of a cell")
    assert not disk.holds(raw, data)  # not there
    path = Path(disk.object_path(raw))
    path.parent.mkdir(parents=True)
    path.write_bytes(data[:-1])
    assert not disk.holds(raw, data)  # torn
    path.write_bytes(data[:-1] + b"!")
    assert not disk.holds(raw, data)  # same size, other bytes
    path.write_bytes(data + b"!")
    assert not disk.holds(raw, data)  # longer
    path.write_bytes(data)
    assert disk.holds(raw, data)
    path.unlink()
    path.mkdir()
    assert not disk.holds(raw, data)  # a folder in its place


def test_write_puts_the_plan_and_every_object_in_place(disk: StoreDisk) -> None:
    objects = _objects("a", "b", "c")
    plan = _plan([raw for raw, _ in objects], [], CHECKPOINT)
    disk.write(plan, objects)
    assert decode_plan(Path(disk.plan).read_bytes()) == plan
    for raw, data in objects:
        assert Path(disk.object_path(raw)).read_bytes() == data
    disk.write(plan, objects)  # again, into folders that exist now
    assert all(disk.holds(raw, data) for raw, data in objects)


def test_collect_unlinks_the_garbage_and_the_plan_but_not_a_shared_object(
    disk: StoreDisk,
) -> None:
    objects = _objects("gone", "shared", "kept")
    disk.write(_plan([raw for raw, _ in objects], [], CHECKPOINT), objects)
    (gone, _), (shared, _), (kept, _) = objects
    Path(pin_path(disk.object_path(shared))).touch()
    disk.collect([gone, shared], legacy=False)
    assert not os.path.exists(disk.object_path(gone))
    assert os.path.exists(disk.object_path(shared))
    assert os.path.exists(disk.object_path(kept))
    assert not os.path.exists(disk.plan)


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "not-committed"])
def test_recover_finishes_a_committed_flush_and_undoes_one_that_was_not(
    disk: StoreDisk, committed: bool
) -> None:
    old, new = _objects("old"), _objects("new")
    disk.write(_plan([], [], CHECKPOINT), old)
    disk.write(_plan([new[0][0]], [old[0][0]], CHECKPOINT), new)
    if committed:
        disk.commit(CHECKPOINT)
    Path(disk.root, "checkpoint.cbor" + TMP_SUFFIX).write_bytes(b"half")
    disk.recover()
    assert os.path.exists(disk.object_path(old[0][0])) is not committed
    assert os.path.exists(disk.object_path(new[0][0])) is committed
    assert not os.path.exists(disk.plan)
    assert os.listdir(disk.root) == (["checkpoint.cbor"] if committed else [])


def test_recover_drops_a_torn_plan_and_touches_no_object(disk: StoreDisk) -> None:
    objects = _objects("a")
    disk.write(_plan([objects[0][0]], [], CHECKPOINT), objects)
    whole = Path(disk.plan).read_bytes()
    Path(disk.plan).write_bytes(whole[: len(whole) // 2])
    disk.recover()
    assert not os.path.exists(disk.plan)
    assert os.path.exists(disk.object_path(objects[0][0]))


def test_a_checkpoint_that_does_not_read_is_damage_named_by_its_path(disk: StoreDisk) -> None:
    assert disk.read_checkpoint() == EMPTY_CHECKPOINT
    Path(disk.checkpoint).write_bytes(cbor.dumps({"format": 2}))
    with pytest.raises(StoreDamaged) as caught:
        disk.read_checkpoint()
    assert caught.value.path == disk.checkpoint
    assert "not a cell checkpoint" in str(caught.value)


def test_write_takes_a_fan_out_folder_made_meanwhile(
    disk: StoreDisk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blob put on an adapter thread can make an object's fan-out folder between the
    store's look and its mkdir: the flush goes on."""
    objects = _objects("a")
    fan_out = os.path.dirname(disk.object_path(objects[0][0]))
    os.makedirs(fan_out)
    isdir, looked = os.path.isdir, []

    def not_there_at_the_first_look(path: str) -> bool:
        if path == fan_out and not looked:
            looked.append(path)
            return False
        return isdir(path)

    monkeypatch.setattr(os.path, "isdir", not_there_at_the_first_look)
    disk.write(_plan([objects[0][0]], [], CHECKPOINT), objects)
    assert looked == [fan_out]
    assert Path(disk.object_path(objects[0][0])).read_bytes() == objects[0][1]


def test_recover_finishes_removing_a_converted_tree_down_to_its_last_file(
    disk: StoreDisk,
) -> None:
    """A conversion to format 2 committed and died removing the format-1 tree: its last
    leftover may be the old flush intent alone, with no folder beside it."""
    disk.commit(CHECKPOINT)
    intent = Path(disk.root, LEGACY_INTENT_NAME)
    intent.write_bytes(b"old")
    disk.recover()
    assert not intent.exists()
    assert os.listdir(disk.root) == ["checkpoint.cbor"]
