"""The CellStore contract, run against MemoryCellStore and FileCellStore, then the file store's
durability: reopen, crash recovery at every I/O step, tamper detection, lazy loading, limits."""

from __future__ import annotations

import collections
import itertools
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import world.cellstore as cellstore_module
from air import cbor
from air.errors import HashMismatch, StoreDamaged, UsageError
from kernel.cells import (
    NULL_KEY_CBOR,
    NULL_KEY_HASH,
    CellEntry,
    CellStore,
    MemoryCellStore,
    key_hash,
    shard_of,
)
from world.cellstore import FileCellStore, StoreFailed

MODULE = "ab" * 32
OTHER = "cd" * 32
MANIFEST = bytes(range(32))


def key(n: int) -> bytes:
    return cbor.dumps(f"key-{n}")


def cell(n: int, value: int = 0, seq: int = 1) -> tuple[bytes, CellEntry, bytes]:
    key_cbor = key(n)
    state_cbor = cbor.dumps({"count": value, "key": n})
    entry = CellEntry.of(key_cbor, state_cbor, last_active=seq, manifest_hash=MANIFEST)
    return key_hash(key_cbor), entry, state_cbor


def put(store: CellStore, n: int, value: int = 0, seq: int = 1, module: str = MODULE) -> bytes:
    kh, entry, state_cbor = cell(n, value, seq)
    store.put(module, kh, entry, state_cbor)
    return kh


def snapshot(store: CellStore, module: str = MODULE) -> dict[bytes, tuple[CellEntry, bytes]]:
    out = {}
    for kh, entry in store.iter_entries(module):
        found = store.get(module, kh)
        assert found is not None
        assert found[0] == entry
        out[kh] = found
    return out


@pytest.fixture(params=["memory", "file"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], CellStore]:
    worlds = itertools.count()

    def make() -> CellStore:
        if request.param == "memory":
            return MemoryCellStore()
        return FileCellStore(tmp_path / f"world-{next(worlds)}")

    return make


@pytest.fixture
def store(make_store: Callable[[], CellStore]) -> CellStore:
    return make_store()


# -- the contract ------------------------------------------------------------------------------


def test_get_of_an_unknown_cell_is_none(store: CellStore) -> None:
    assert store.get(MODULE, key_hash(key(1))) is None
    assert store.count(MODULE) == 0


def test_put_then_get_returns_the_entry_and_the_state(store: CellStore) -> None:
    kh, entry, state_cbor = cell(1, value=7, seq=42)
    store.put(MODULE, kh, entry, state_cbor)
    assert store.get(MODULE, kh) == (entry, state_cbor)
    assert (entry.last_active, entry.size) == (42, len(state_cbor))


def test_put_replaces_the_previous_state(store: CellStore) -> None:
    put(store, 1, value=1)
    kh = put(store, 1, value=2, seq=2)
    found = store.get(MODULE, kh)
    assert found is not None
    assert cbor.loads(found[1])["count"] == 2
    assert store.count(MODULE) == 1


def test_delete_removes_the_cell_and_deleting_again_is_harmless(store: CellStore) -> None:
    kh = put(store, 1)
    store.delete(MODULE, kh)
    store.delete(MODULE, kh)
    store.delete(MODULE, key_hash(key(99)))
    assert store.get(MODULE, kh) is None
    assert store.count(MODULE) == 0


def test_iter_entries_yields_every_cell_in_key_hash_order(store: CellStore) -> None:
    hashes = [put(store, n) for n in range(300)]
    assert [kh for kh, _entry in store.iter_entries(MODULE)] == sorted(hashes)


def test_count_follows_puts_and_deletes(store: CellStore) -> None:
    hashes = [put(store, n) for n in range(50)]
    for kh in hashes[:20]:
        store.delete(MODULE, kh)
    put(store, 0)
    assert store.count(MODULE) == 31


def test_index_root_changes_with_state_with_last_active_and_with_deletion(store: CellStore) -> None:
    roots = [store.index_root(MODULE)]
    put(store, 1, value=1, seq=1)
    roots.append(store.index_root(MODULE))
    put(store, 1, value=2, seq=1)
    roots.append(store.index_root(MODULE))
    kh = put(store, 1, value=2, seq=2)
    roots.append(store.index_root(MODULE))
    store.delete(MODULE, kh)
    assert len(set(roots)) == 4
    assert store.index_root(MODULE) == roots[0]


def test_index_root_does_not_depend_on_insertion_order(
    make_store: Callable[[], CellStore],
) -> None:
    forward, backward = make_store(), make_store()
    for n in range(200):
        put(forward, n)
    for n in reversed(range(200)):
        put(backward, n)
    assert forward.index_root(MODULE) == backward.index_root(MODULE)


def test_a_put_whose_entry_does_not_describe_its_bytes_is_refused(store: CellStore) -> None:
    kh, entry, state_cbor = cell(1)
    with pytest.raises(HashMismatch) as caught:
        store.put(MODULE, kh, entry, cbor.dumps("other state"))
    assert caught.value.expected == cbor.raw_to_hash(entry.state_hash)
    with pytest.raises(HashMismatch):
        store.put(MODULE, key_hash(key(2)), entry, state_cbor)
    bad_size = CellEntry(entry.key_cbor, entry.state_hash, entry.size + 1, 1, MANIFEST)
    with pytest.raises(UsageError):
        store.put(MODULE, kh, bad_size, state_cbor)
    assert store.count(MODULE) == 0


def test_a_module_that_is_not_a_hex_hash_is_refused(store: CellStore) -> None:
    with pytest.raises(UsageError):
        store.count("../escape")
    with pytest.raises(UsageError):
        store.count("AB" * 32)


def test_reducers_do_not_see_each_others_cells(store: CellStore) -> None:
    kh = put(store, 1, module=MODULE)
    assert store.get(OTHER, kh) is None
    put(store, 2, module=OTHER)
    assert (store.count(MODULE), store.count(OTHER)) == (1, 1)
    assert store.modules() == [MODULE, OTHER]


def test_non_keyed_state_lives_under_the_null_key(store: CellStore) -> None:
    assert NULL_KEY_HASH == key_hash(b"\xf6") == key_hash(NULL_KEY_CBOR)
    state_cbor = cbor.dumps({"a": 1})
    entry = CellEntry.of(NULL_KEY_CBOR, state_cbor, last_active=3, manifest_hash=MANIFEST)
    store.put(MODULE, NULL_KEY_HASH, entry, state_cbor)
    assert store.get(MODULE, NULL_KEY_HASH) == (entry, state_cbor)


def test_flush_keeps_every_cell_readable_and_records_the_checkpoint(store: CellStore) -> None:
    assert store.last_checkpoint() == b""
    for n in range(100):
        put(store, n)
    before = snapshot(store)
    store.flush(cbor.dumps({"seq": 100}))
    assert snapshot(store) == before
    assert store.dirty_count() == 0
    assert cbor.loads(store.last_checkpoint()) == {"seq": 100}


def test_memory_and_file_stores_agree_on_the_index_root(tmp_path: Path) -> None:
    memory, files = MemoryCellStore(), FileCellStore(tmp_path)
    for store in (memory, files):
        for n in range(500):
            put(store, n, value=n)
    files.flush()
    put(files, 3, value=1)
    put(memory, 3, value=1)
    assert memory.index_root(MODULE) == files.index_root(MODULE)


@pytest.mark.parametrize("seed", range(4))
def test_file_store_with_flushes_and_reopens_matches_the_memory_store(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    memory, files = MemoryCellStore(), FileCellStore(tmp_path, shard_cache_entries_max=8)
    for step in range(1500):
        n, value = rng.randrange(400), rng.randrange(4)
        for store in (memory, files):
            if value == 3:
                store.delete(MODULE, key_hash(key(n)))
            else:
                put(store, n, value=value, seq=step)
        if rng.random() < 0.01:
            files.flush()
        if rng.random() < 0.003:
            files.flush()
            files = FileCellStore(tmp_path, shard_cache_entries_max=8)
    assert snapshot(files) == snapshot(memory)
    assert files.count(MODULE) == memory.count(MODULE)
    assert files.index_root(MODULE) == memory.index_root(MODULE)


# -- the file store on disk --------------------------------------------------------------------


def cell_files(world: Path) -> list[Path]:
    return sorted((world / "state" / "reducers" / MODULE / "cells").rglob("*.cbor"))


def shard_files(world: Path) -> list[Path]:
    return sorted((world / "state" / "reducers" / MODULE / "index").glob("*"))


def test_flush_then_reopen_sees_the_same_entries_and_states(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    for n in range(1000):
        put(store, n, value=n)
    store.flush(b"cp")
    reopened = FileCellStore(tmp_path)
    assert snapshot(reopened) == snapshot(store)
    assert reopened.count(MODULE) == 1000
    assert reopened.index_root(MODULE) == store.index_root(MODULE)
    assert reopened.last_checkpoint() == b"cp"


def test_unflushed_changes_are_not_visible_after_reopen(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    kept = put(store, 1, value=1)
    store.flush(b"one")
    put(store, 1, value=2)
    lost = put(store, 2)
    del store  # a crash: nothing flushed after "one"
    reopened = FileCellStore(tmp_path)
    found = reopened.get(MODULE, kept)
    assert found is not None
    assert cbor.loads(found[1])["count"] == 1
    assert reopened.get(MODULE, lost) is None
    assert reopened.last_checkpoint() == b"one"


def test_flush_removes_superseded_files_and_leaves_no_intent(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    hashes = [put(store, n) for n in range(300)]
    store.flush()
    for n in range(300):
        put(store, n, value=1)
    for kh in hashes[:100]:
        store.delete(MODULE, kh)
    store.flush()
    assert len(cell_files(tmp_path)) == 200
    assert len(shard_files(tmp_path)) == len({shard_of(kh) for kh in hashes[100:]})
    root = tmp_path / "state" / "reducers"
    assert {p.name for p in root.iterdir()} == {"checkpoint.cbor", MODULE}
    assert not (root / MODULE / "index.next.cbor").exists()


def test_cell_files_fan_out_by_key_hash_prefix_and_the_index_sits_at_the_reducer_root(
    tmp_path: Path,
) -> None:
    store = FileCellStore(tmp_path)
    kh, entry, _state = cell(1)
    put(store, 1)
    store.flush()
    reducer = tmp_path / "state" / "reducers" / MODULE
    path = reducer / "cells" / kh.hex()[:2] / f"{kh.hex()}.{entry.state_hash.hex()}.cbor"
    assert path.is_file()
    assert (reducer / "index.cbor").is_file()


def test_a_tampered_cell_file_is_store_damage_naming_the_file(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    kh, entry, _state = cell(1)
    put(store, 1)
    store.flush()
    [path] = cell_files(tmp_path)
    path.write_bytes(cbor.dumps({"count": 666, "key": 1}))
    with pytest.raises(StoreDamaged) as caught:
        FileCellStore(tmp_path).get(MODULE, kh)
    assert caught.value.path == str(path)
    assert cbor.raw_to_hash(entry.state_hash) in caught.value.reason
    path.unlink()
    with pytest.raises(StoreDamaged) as missing:
        FileCellStore(tmp_path).get(MODULE, kh)
    assert (missing.value.path, missing.value.reason) == (str(path), "missing")


def test_a_tampered_shard_or_index_is_store_damage_naming_the_file(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    kh = put(store, 1)
    put(store, 2)
    store.flush()
    [shard] = [p for p in shard_files(tmp_path) if p.name.startswith(f"{shard_of(kh):03x}.")]
    shard.write_bytes(shard.read_bytes()[:-1] + b"\x00")
    with pytest.raises(StoreDamaged) as caught:
        FileCellStore(tmp_path).get(MODULE, kh)
    assert caught.value.path == str(shard)
    index = tmp_path / "state" / "reducers" / MODULE / "index.cbor"
    index.write_bytes(index.read_bytes() + b"\x00")
    with pytest.raises(StoreDamaged) as caught:
        FileCellStore(tmp_path).count(MODULE)
    assert caught.value.path == str(index)


def test_a_garbage_checkpoint_is_store_damage_naming_the_file(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    put(store, 1)
    store.flush(b"meta")
    checkpoint = tmp_path / "state" / "reducers" / "checkpoint.cbor"
    checkpoint.write_bytes(b"\xff garbage")
    with pytest.raises(StoreDamaged) as caught:
        FileCellStore(tmp_path)
    assert caught.value.path == str(checkpoint)


def test_reopen_reads_only_the_index_until_a_key_is_accessed(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    hashes = [put(store, n) for n in range(5000)]
    store.flush()
    reopened = FileCellStore(tmp_path)
    assert reopened.count(MODULE) == 5000
    assert (reopened.stats.index_loads, reopened.stats.shard_loads) == (1, 0)
    assert reopened.get(MODULE, hashes[0]) is not None
    assert (reopened.stats.shard_loads, reopened.stats.cell_reads) == (1, 1)
    assert reopened.get(MODULE, hashes[0]) is not None
    assert (reopened.stats.shard_loads, reopened.stats.cell_reads) == (1, 1)


def test_the_shard_cache_limit_evicts_the_least_recently_used_shard(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    hashes = [put(store, n) for n in range(2000)]
    store.flush()
    per_shard = collections.Counter(shard_of(kh) for kh in hashes)
    first, *others = [kh for kh in hashes if per_shard[shard_of(kh)] == 1][:6]
    reopened = FileCellStore(tmp_path, shard_cache_entries_max=4)
    for kh in [first, *others, first]:
        reopened.get(MODULE, kh)
    assert reopened.stats.shard_loads == 7  # `first` was evicted and had to be read again


def test_the_state_cache_limit_bounds_bytes_of_clean_state(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    hashes = [put(store, n) for n in range(10)]
    store.flush()
    size = cell(0)[1].size
    reopened = FileCellStore(tmp_path, state_cache_bytes_max=3 * size)
    for kh in hashes + hashes[-3:] + hashes[:1]:
        reopened.get(MODULE, kh)
    assert reopened.stats.cell_reads == 11  # the last three were cached; the first was not


def test_iteration_reads_each_shard_once_and_does_not_cache_it(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    hashes = [put(store, n) for n in range(3000)]
    store.flush()
    reopened = FileCellStore(tmp_path)
    assert sum(1 for _ in reopened.iter_entries(MODULE)) == 3000
    assert reopened.stats.shard_loads == len(shard_files(tmp_path))
    reopened.get(MODULE, hashes[0])
    assert reopened.stats.shard_loads == len(shard_files(tmp_path)) + 1


# -- crashes -----------------------------------------------------------------------------------


class Crash(BaseException):
    """Stands for the process dying: nothing after the crash point runs."""


IO_FUNCTIONS = ("atomic_write", "write_unsynced", "sync_paths", "fsync_dir", "_unlink", "_replace")


@pytest.fixture
def crash_at(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], list[int]]:
    """Arm a crash before the n-th I/O call the cell store makes; returns the call counter."""
    counter = [0]
    limit = [-1]

    def wrap(name: str) -> Callable[..., Any]:
        real = getattr(cellstore_module, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if counter[0] == limit[0]:
                raise Crash(name)
            counter[0] += 1
            return real(*args, **kwargs)

        return wrapped

    for name in IO_FUNCTIONS:
        monkeypatch.setattr(cellstore_module, name, wrap(name))

    def arm(n: int) -> list[int]:
        counter[0], limit[0] = 0, n
        return counter

    return arm


def build_world(world: Path) -> FileCellStore:
    store = FileCellStore(world)
    for n in range(40):
        put(store, n, value=1, module=MODULE if n % 2 else OTHER)
    store.flush(b"old")
    return store


def change(store: FileCellStore) -> None:
    for n in range(0, 40, 3):
        store.delete(MODULE if n % 2 else OTHER, key_hash(key(n)))
    for n in range(20, 60):
        put(store, n, value=2, module=MODULE if n % 2 else OTHER)


def describe(store: FileCellStore) -> tuple[Any, ...]:
    return (store.last_checkpoint(), snapshot(store, MODULE), snapshot(store, OTHER))


def files_on_disk(world: Path) -> int:
    return sum(len(files) for _root, _dirs, files in os.walk(world / "state"))


def test_a_crash_at_any_io_step_of_a_flush_recovers_to_the_old_or_the_new_checkpoint(
    tmp_path: Path, crash_at: Callable[[int], list[int]]
) -> None:
    reference = build_world(tmp_path / "reference")
    expected_old = describe(FileCellStore(tmp_path / "reference"))
    clean_files = {b"old": files_on_disk(tmp_path / "reference")}
    change(reference)
    counter = crash_at(-1)
    reference.flush(b"new")
    steps = counter[0]
    expected_new = describe(FileCellStore(tmp_path / "reference"))
    clean_files[b"new"] = files_on_disk(tmp_path / "reference")
    outcomes = set()
    for n in range(steps):
        world = tmp_path / f"crash-{n}"
        store = build_world(world)
        change(store)
        crash_at(n)
        with pytest.raises(Crash):
            store.flush(b"new")
        crash_at(-1)
        recovered = describe(FileCellStore(world))
        assert recovered in (expected_old, expected_new)
        outcomes.add(recovered[0])
        assert files_on_disk(world) == clean_files[recovered[0]]
    assert outcomes == {b"old", b"new"}


def test_a_failed_flush_makes_the_handle_refuse_further_flushes(
    tmp_path: Path, crash_at: Callable[[int], list[int]]
) -> None:
    store = build_world(tmp_path)
    change(store)
    crash_at(2)
    with pytest.raises(Crash):
        store.flush(b"new")
    crash_at(-1)
    with pytest.raises(StoreFailed) as caught:
        store.flush(b"new")
    assert caught.value.path == str(tmp_path / "state" / "reducers")
