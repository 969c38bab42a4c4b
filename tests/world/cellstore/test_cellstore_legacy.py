"""Worlds made before issue 11 (format 1: one file per cell) open as they are and are converted
by their next checkpoint; a crash anywhere in the conversion leaves the old or the new store
whole; a checkpoint of a format this code does not know is never read as something else."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cellstore_kit import (
    MODULE,
    OTHER,
    Cells,
    Crash,
    cas_objects,
    cell,
    crash_at,
    put,
    snapshot,
    store_files,
    write_format1,
)

from air import cbor
from kernel.cells import MemoryCellStore, encode_index, index_root_of
from world import World
from world.cellstore import FileCellStore
from world.errors import StoreDamaged
from world.history import verify_world

from worldkit import COUNTER, COUNTER_AIR, EVENT, add


def old_cells() -> dict[str, Cells]:
    """Two reducers; small states and a few above the inline limit."""
    modules: dict[str, Cells] = {MODULE: {}, OTHER: {}}
    for n in range(120):
        kh, entry, state = cell(n, value=n, seq=n + 1, pad=2000 if n % 9 == 0 else 0)
        modules[MODULE if n % 3 else OTHER][kh] = (entry, state)
    return modules


def memory_of(modules: dict[str, Cells]) -> MemoryCellStore:
    memory = MemoryCellStore()
    for module, cells in modules.items():
        for kh, (entry, state) in cells.items():
            memory.put(module, kh, entry, state)
    return memory


def legacy_files(world: Path) -> dict[str, str]:
    return {k: v for k, v in store_files(world).items() if k.startswith("state/")}


def test_a_format_1_store_opens_and_reads_every_cell_without_writing(tmp_path: Path) -> None:
    modules = old_cells()
    write_format1(tmp_path, modules, b"old-meta")
    before = store_files(tmp_path)
    memory = memory_of(modules)
    for readonly in (True, False):
        store = FileCellStore(tmp_path, readonly=readonly)
        assert store.format == 1
        assert store.last_checkpoint() == b"old-meta"
        for module in (MODULE, OTHER):
            assert snapshot(store, module) == snapshot(memory, module)
            assert store.index_root(module) == memory.index_root(module)
            assert store.count(module) == memory.count(module)
        assert store_files(tmp_path) == before


def test_the_first_flush_converts_the_whole_store_and_removes_the_old_tree(
    tmp_path: Path,
) -> None:
    modules = old_cells()
    write_format1(tmp_path, modules, b"old-meta")
    memory = memory_of(modules)
    store = FileCellStore(tmp_path)
    for target in (store, memory):
        put(target, 500, value=5)  # one change: the flush converts everything anyway
    store.flush(b"new-meta")
    assert store.format == 2
    root = tmp_path / "state" / "reducers"
    assert {p.name for p in root.iterdir()} == {"checkpoint.cbor"}
    converted = FileCellStore(tmp_path)
    assert converted.format == 2
    for module in (MODULE, OTHER):
        assert snapshot(converted, module) == snapshot(memory, module)
        assert converted.index_root(module) == memory.index_root(module)
    names = {bytes.fromhex(p.parent.name + p.name) for p in cas_objects(tmp_path)}
    assert names == converted.reachable_objects()


def test_a_flush_with_nothing_dirty_still_converts(tmp_path: Path) -> None:
    write_format1(tmp_path, old_cells(), b"meta")
    FileCellStore(tmp_path).flush(b"meta")
    assert FileCellStore(tmp_path).format == 2


def test_a_format_1_store_whose_last_flush_died_before_its_rename_reads_the_committed_index(
    tmp_path: Path,
) -> None:
    """Format 1 committed, then renamed index.next.cbor over index.cbor: between the two, the
    committed index is index.next.cbor (the root in the checkpoint says which)."""
    modules = old_cells()
    write_format1(tmp_path, modules, b"meta")
    base = tmp_path / "state" / "reducers" / MODULE
    (base / "index.cbor").rename(base / "index.next.cbor")
    (base / "index.cbor").write_bytes(encode_index({}))  # the stale one
    assert index_root_of({}) != cbor.digest((base / "index.next.cbor").read_bytes())
    (tmp_path / "state" / "reducers" / "flush-intent.cbor").write_bytes(b"format 1 intent")
    memory = memory_of(modules)
    store = FileCellStore(tmp_path)
    assert snapshot(store, MODULE) == snapshot(memory, MODULE)
    store.flush(b"meta 2")
    converted = FileCellStore(tmp_path)
    assert snapshot(converted, MODULE) == snapshot(memory, MODULE)
    assert not (tmp_path / "state" / "reducers" / "flush-intent.cbor").exists()


def test_a_crash_at_any_io_step_of_a_conversion_leaves_the_old_or_the_new_store_whole(
    tmp_path: Path,
) -> None:
    modules = {MODULE: dict(list(old_cells()[MODULE].items())[:12])}
    memory = memory_of(modules)
    write_format1(tmp_path / "pristine", modules, b"old")
    old_files = store_files(tmp_path / "pristine")
    shutil.copytree(tmp_path / "pristine", tmp_path / "reference")
    with crash_at(-1) as ops:
        FileCellStore(tmp_path / "reference").flush(b"new")
    new_files = store_files(tmp_path / "reference")
    formats = set()
    for n in range(len(ops)):
        world = tmp_path / f"crash-{n}"
        shutil.copytree(tmp_path / "pristine", world)
        with pytest.raises(Crash), crash_at(n):
            FileCellStore(world).flush(b"new")
        store = FileCellStore(world)
        assert snapshot(store) == snapshot(memory), ops[n]
        formats.add(store.format)
        if store.format == 1:
            assert store.last_checkpoint() == b"old"
            assert store_files(world) == old_files, ops[n]
        else:
            assert store.last_checkpoint() == b"new"
            assert store_files(world) == new_files, ops[n]
    assert formats == {1, 2}


def _as_format_1(world: Path) -> None:
    """Rewrite a closed world's store as the code before issue 11 would have left it."""
    store = FileCellStore(world, readonly=True)
    module = next(iter(store.checkpoint_modules()))
    cells = {kh: store.get(module, kh) for kh, _entry in store.iter_entries(module)}
    meta, objects = store.last_checkpoint(), store.reachable_objects()
    (snapshot_raw,) = {cbor.loads(meta)["snapshot"]}
    for raw in objects - {snapshot_raw}:
        (world / "cas" / raw.hex()[:2] / raw.hex()[2:]).unlink()
    (world / "state" / "reducers" / "checkpoint.cbor").unlink()
    write_format1(world, {module: {kh: c for kh, c in cells.items() if c is not None}}, meta)


def test_an_old_world_opens_replays_and_is_converted_by_its_next_checkpoint(
    tmp_path: Path,
) -> None:
    w = tmp_path / "w"
    with World.create(w, COUNTER_AIR) as world:
        world.send_many([(EVENT, add(f"k{i}", i)) for i in range(50)])
        world.run_until_idle()
        world.snapshot()
        world.send_many([(EVENT, add("k1", 100))])  # journaled after the checkpoint: replayed
        world.stale = "a test: close without a checkpoint, as after a crash"  # a stale world closes without a checkpoint
    _as_format_1(w)
    with World.open(w, readonly=True) as reader:
        assert reader.store.format == 1  # type: ignore[attr-defined]
        assert reader.state(COUNTER, "k3") == {"count": 3, "events": 1}
    with World.open(w) as world:
        assert world.notices == []
        world.run_until_idle()
        assert world.state(COUNTER, "k1") == {"count": 101, "events": 2}
        world.snapshot()
        assert world.store.format == 2  # type: ignore[attr-defined]
    assert {p.name for p in (w / "state" / "reducers").iterdir()} == {"checkpoint.cbor"}
    assert verify_world(w).ok


def test_a_checkpoint_of_an_unknown_format_is_refused_naming_the_file(tmp_path: Path) -> None:
    """Never misread: the world says so and rebuilds from the journal (derived state)."""
    w = tmp_path / "w"
    with World.create(w, COUNTER_AIR) as world:
        world.send(EVENT, add("a", 2))
        world.run_until_idle()
    checkpoint = w / "state" / "reducers" / "checkpoint.cbor"
    doc = cbor.loads(checkpoint.read_bytes())
    doc["format"] = 3
    checkpoint.write_bytes(cbor.dumps(doc))
    with pytest.raises(StoreDamaged) as caught:
        FileCellStore(w)
    assert caught.value.path == str(checkpoint)
    with World.open(w) as world:
        assert world.state(COUNTER, "a") == {"count": 2, "events": 1}
        assert len(world.notices) == 1
        assert str(checkpoint) in world.notices[0]
