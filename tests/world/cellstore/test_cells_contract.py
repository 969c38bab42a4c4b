"""The CellStore contract, run against MemoryCellStore and FileCellStore, then the file store's
durability: reopen, crash recovery at every I/O step, tamper detection, lazy loading, limits."""

from __future__ import annotations

import collections
import itertools
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cellstore_kit import (
    MANIFEST,
    MODULE,
    OTHER,
    Crash,
    cas_objects,
    cell,
    crash_at,
    key,
    put,
    snapshot,
    store_files,
)
from hypothesis import given
from hypothesis import strategies as st

from air import cbor
from air.errors import HashMismatch, UsageError
from kernel.cells import (
    NULL_KEY_CBOR,
    NULL_KEY_HASH,
    CellEntry,
    CellStore,
    MemoryCellStore,
    encode_entry,
    encode_shard,
    key_hash,
    shard_of,
)
from world import _fsutil as fsutil
from world._cas import FileCas
from world.cellstore import FileCellStore
from world.errors import StoreDamaged, StoreFailed


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
    memory, files = MemoryCellStore(), FileCellStore(tmp_path, shard_cache_bytes_max=2000)
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
            files = FileCellStore(tmp_path, shard_cache_bytes_max=2000)
    assert snapshot(files) == snapshot(memory)
    assert files.count(MODULE) == memory.count(MODULE)
    assert files.index_root(MODULE) == memory.index_root(MODULE)


# -- the logical format ------------------------------------------------------------------------


@given(
    key_cbor=st.binary(max_size=300),
    size=st.integers(0, 2**64 - 1),
    last_active=st.integers(0, 2**64 - 1),
)
def test_encode_entry_is_the_canonical_cbor_of_the_entry(
    key_cbor: bytes, size: int, last_active: int
) -> None:
    entry = CellEntry(key_cbor, bytes(range(32)), size, last_active, MANIFEST)
    assert encode_entry(entry) == cbor.dumps(entry.to_cbor_obj())


def test_encode_shard_is_the_canonical_cbor_of_the_shard_map() -> None:
    entries = {kh: entry for kh, entry, _state in (cell(n, seq=n * 977) for n in range(300))}
    expected = cbor.dumps({kh: entry.to_cbor_obj() for kh, entry in entries.items()})
    assert encode_shard(entries) == expected


# -- the file store on disk --------------------------------------------------------------------


def shard_objects(store: FileCellStore, module: str = MODULE) -> set[str]:
    """The CAS objects (hex) of the store's committed shards, from its index."""
    store.count(module)
    return {ref[2].hex() for ref in store._mods[module].committed.values()}


def object_names(world: Path) -> set[str]:
    return {p.parent.name + p.name for p in cas_objects(world)}


def test_flush_then_reopen_sees_the_same_entries_and_states(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    for n in range(1000):
        put(store, n, value=n, pad=2000 if n % 10 == 0 else 0)
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


def test_every_object_is_named_by_the_blake3_of_its_bytes(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    for n in range(200):
        put(store, n, pad=3000 if n % 50 == 0 else 0)
    store.flush()
    objects = cas_objects(tmp_path)
    assert len(objects) == 1 + 1 + 4  # the index, one group of shards, four large states
    for path in objects:
        assert cbor.digest(path.read_bytes()).hex() == path.parent.name + path.name


def test_flush_collects_superseded_objects_and_leaves_no_plan(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    hashes = [put(store, n) for n in range(300)]
    store.flush()
    for n in range(300):
        put(store, n, value=1)
    for kh in hashes[:100]:
        store.delete(MODULE, kh)
    store.flush()
    shards = {shard_of(kh) for kh in hashes[100:]}
    assert set(store._mods[MODULE].committed) == shards
    reachable = shard_objects(store) | {store._cp.roots[MODULE].hex()}
    assert object_names(tmp_path) == reachable
    assert {p.name for p in (tmp_path / "state" / "reducers").iterdir()} == {"checkpoint.cbor"}


def test_a_reducer_whose_cells_are_all_deleted_keeps_no_shard(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    hashes = [put(store, n) for n in range(20)]
    store.flush()
    for kh in hashes:
        store.delete(MODULE, kh)
    store.flush()
    assert object_names(tmp_path) == {store._cp.roots[MODULE].hex()}  # the empty index
    assert FileCellStore(tmp_path).count(MODULE) == 0
    assert FileCellStore(tmp_path).modules() == []


def _first_shard_object(world: Path, store: FileCellStore, kh: bytes) -> Path:
    raw = store._mods[MODULE].committed[shard_of(kh)][2].hex()
    return world / "cas" / raw[:2] / raw[2:]


def test_a_tampered_or_missing_shard_object_is_store_damage_naming_it(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    kh = put(store, 1)
    put(store, 2)
    store.flush()
    path = _first_shard_object(tmp_path, store, kh)
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(StoreDamaged) as caught:
        FileCellStore(tmp_path).get(MODULE, kh)
    assert caught.value.path == str(path)
    path.unlink()
    with pytest.raises(StoreDamaged) as missing:
        FileCellStore(tmp_path).get(MODULE, kh)
    assert (missing.value.path, missing.value.reason) == (str(path), "missing")


def test_a_tampered_out_of_line_state_is_store_damage_naming_it(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    kh, entry, _state = cell(1, pad=5000)
    put(store, 1, pad=5000)
    store.flush()
    raw = entry.state_hash.hex()
    path = tmp_path / "cas" / raw[:2] / raw[2:]
    path.write_bytes(cbor.dumps({"count": 666}))
    with pytest.raises(StoreDamaged) as caught:
        FileCellStore(tmp_path).get(MODULE, kh)
    assert caught.value.path == str(path)
    assert cbor.raw_to_hash(entry.state_hash) in caught.value.reason


def test_a_tampered_index_object_is_store_damage_naming_it(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    put(store, 1)
    store.flush()
    raw = store._cp.roots[MODULE].hex()
    index = tmp_path / "cas" / raw[:2] / raw[2:]
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
    stats = reopened.stats
    assert (stats.shard_loads, stats.entries_decoded, stats.state_reads) == (1, 1, 0)
    assert reopened.get(MODULE, hashes[0]) is not None
    assert (stats.shard_loads, stats.entries_decoded, stats.state_reads) == (1, 2, 0)


def _absent_in_shard_of(kh: bytes, start: int) -> int:
    """A cell number from ``start`` on whose key falls in the shard of ``kh``."""
    return next(n for n in itertools.count(start) if shard_of(cell(n)[0]) == shard_of(kh))


def test_a_cell_the_store_never_held_costs_no_shard_read_once_its_keys_are_known(
    tmp_path: Path,
) -> None:
    store = FileCellStore(tmp_path)
    hashes = [put(store, n) for n in range(5000)]
    store.flush()
    reopened = FileCellStore(tmp_path, shard_cache_bytes_max=0)  # no group is kept
    assert reopened.get(MODULE, hashes[0]) is not None
    assert reopened.stats.shard_loads == 1
    absent = _absent_in_shard_of(hashes[0], 5000)
    assert reopened.get(MODULE, cell(absent)[0]) is None
    assert reopened.get(MODULE, hashes[0]) is not None  # a held one is still read
    assert reopened.stats.shard_loads == 2  # the absent key read nothing
    other = next(kh for kh in hashes if shard_of(kh) != shard_of(hashes[0]))
    elsewhere = _absent_in_shard_of(other, 5000)
    assert reopened.get(MODULE, cell(elsewhere)[0]) is None  # that shard's keys are not known
    assert reopened.stats.shard_loads == 3
    # Without a key cache every lookup of the absent cell reads the group again.
    bare = FileCellStore(tmp_path, shard_cache_bytes_max=0, key_cache_bytes_max=0)
    for _ in range(3):
        assert bare.get(MODULE, cell(absent)[0]) is None
    assert bare.stats.shard_loads == 3


def test_the_key_cache_limit_keeps_the_most_recent_shards_key_lists(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    hashes = [put(store, n) for n in range(5000)]
    store.flush()
    first = hashes[0]
    other = next(kh for kh in hashes if shard_of(kh) != shard_of(first))
    sizes = collections.Counter(shard_of(kh) for kh in hashes)
    room = 32 * max(sizes[shard_of(first)], sizes[shard_of(other)])  # one shard's keys fit
    reopened = FileCellStore(tmp_path, shard_cache_bytes_max=0, key_cache_bytes_max=room)
    absent_first = cell(_absent_in_shard_of(first, 5000))[0]
    absent_other = cell(_absent_in_shard_of(other, 5000))[0]
    assert reopened.get(MODULE, first) is not None  # reads first's group, keeps its keys
    assert reopened.get(MODULE, absent_first) is None
    assert reopened.stats.shard_loads == 1
    assert reopened.get(MODULE, absent_other) is None  # reads other's group; first's keys go
    assert reopened.get(MODULE, absent_other) is None
    assert reopened.stats.shard_loads == 2
    assert reopened.get(MODULE, absent_first) is None  # evicted: read again
    assert reopened.stats.shard_loads == 3
    assert reopened._keys.weight <= room


def test_a_cell_added_after_its_shards_keys_were_cached_is_found(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    first = put(store, 0)
    store.flush()
    absent = _absent_in_shard_of(first, 1)
    writer = FileCellStore(tmp_path, shard_cache_bytes_max=0)
    assert writer.get(MODULE, first) is not None  # caches the shard's key list
    assert writer.get(MODULE, cell(absent)[0]) is None
    put(writer, absent, value=7)
    writer.flush()
    found = writer.get(MODULE, cell(absent)[0])
    assert found is not None
    assert found[1] == cell(absent, value=7)[2]
    assert FileCellStore(tmp_path).get(MODULE, cell(absent)[0]) == found
    writer.delete(MODULE, first)
    writer.flush()
    assert writer.get(MODULE, first) is None
    assert writer.get(MODULE, cell(absent)[0]) == found


def _singletons(count: int) -> list[int]:
    """Cell numbers (1000..1999: keys and states of one size) alone in their shards."""
    per_shard = collections.Counter(shard_of(cell(n)[0]) for n in range(1000, 2000))
    return [n for n in range(1000, 2000) if per_shard[shard_of(cell(n)[0])] == 1][:count]


def test_the_shard_cache_limit_evicts_the_least_recently_used_group(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    singles = _singletons(6)
    for n in singles:  # one flush each: six groups of one single-cell shard
        put(store, n)
        store.flush()
    first, *others = [cell(n)[0] for n in singles]
    assert len(shard_objects(store)) == 6
    probe = FileCellStore(tmp_path)
    probe.get(MODULE, first)
    weight = probe._groups.weight  # one group of one single-cell shard
    reopened = FileCellStore(tmp_path, shard_cache_bytes_max=4 * weight)
    for kh in [first, *others, first]:
        reopened.get(MODULE, kh)
    assert reopened.stats.shard_loads == 7  # `first` was evicted and had to be read again


def test_the_state_cache_limit_bounds_bytes_of_out_of_line_state(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path, cell_inline_bytes_max=0)
    hashes = [put(store, n) for n in range(10)]
    store.flush()
    size = cell(0)[1].size
    reopened = FileCellStore(tmp_path, state_cache_bytes_max=3 * size)
    for kh in hashes + hashes[-3:] + hashes[:1]:
        reopened.get(MODULE, kh)
    assert reopened.stats.state_reads == 11  # the last three were cached; the first was not


def test_iteration_reads_each_group_once_and_does_not_keep_it(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    for n in range(3000):
        put(store, n)
    store.flush()
    groups = len(shard_objects(store))
    assert groups > 2
    reopened = FileCellStore(tmp_path)
    assert sum(1 for _ in reopened.iter_entries(MODULE)) == 3000
    assert reopened.stats.shard_loads == groups
    assert reopened._groups.weight == 0  # nothing in the cache for later lookups


def test_a_negative_inline_limit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        FileCellStore(tmp_path, cell_inline_bytes_max=-1)


# -- crashes -----------------------------------------------------------------------------------


def snapshot_meta(world: Path, name: str) -> bytes:
    """Checkpoint bytes naming a snapshot object, as ``World.snapshot`` writes them."""
    address = FileCas(world).put(cbor.dumps({"snapshot": name}))
    return cbor.dumps({"snapshot": cbor.hash_to_raw(address)})


def build_world(world: Path) -> FileCellStore:
    """Small and large states, one large state shared by two cells, in two reducers."""
    store = FileCellStore(world)
    for n in range(40):
        module = MODULE if n % 2 else OTHER
        put(store, n, value=1, module=module, pad=1500 if n % 5 == 0 else 0)
    store.flush(snapshot_meta(world, "old"))
    return store


def change(store: FileCellStore, world: Path) -> bytes:
    """Deletions, small to large and back, a new shared large state; returns the new meta."""
    for n in range(0, 40, 3):
        store.delete(MODULE if n % 2 else OTHER, key_hash(key(n)))
    for n in range(20, 60):
        put(store, n, value=2, module=MODULE if n % 2 else OTHER, pad=1500 if n % 4 == 0 else 0)
    kh, entry, state = cell(7, value=2, pad=1500)
    store.put(MODULE, key_hash(key(11)), CellEntry(key(11), *_rest(entry)), state)
    store.put(MODULE, kh, entry, state)
    return snapshot_meta(world, "new")


def _rest(entry: CellEntry) -> tuple[bytes, int, int, bytes]:
    return entry.state_hash, entry.size, entry.last_active, entry.manifest_hash


def describe(store: FileCellStore) -> tuple[Any, ...]:
    return (store.last_checkpoint(), snapshot(store, MODULE), snapshot(store, OTHER))


@pytest.mark.parametrize("threads", [False, True], ids=["in-order", "writer-threads"])
def test_a_crash_at_any_io_step_of_a_flush_recovers_to_the_old_or_the_new_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: bool
) -> None:
    """And the files on disk are exactly those of a clean run ending there: nothing leaks.
    ``writer-threads`` writes and collects the objects from threads as a big flush does (the
    crash then stops one thread while the other may finish its file)."""
    if threads:
        monkeypatch.setattr(fsutil, "SYNC_EACH_MAX", 0)
    reference = build_world(tmp_path / "reference")
    old = describe(FileCellStore(tmp_path / "reference"))
    clean = {old[0]: store_files(tmp_path / "reference")}
    meta = change(reference, tmp_path / "reference")
    with crash_at(-1) as ops:
        reference.flush(meta)
    new = describe(FileCellStore(tmp_path / "reference"))
    clean[new[0]] = store_files(tmp_path / "reference")
    assert len(ops) > 40
    planned = next(i for i, op in enumerate(ops) if op.startswith("write ")) + 1
    outcomes = set()
    for n in range(len(ops)):
        world = tmp_path / f"crash-{n}"
        store = build_world(world)
        meta = change(store, world)
        with pytest.raises(Crash), crash_at(n):
            store.flush(meta)
        recovered = describe(FileCellStore(world))
        assert recovered in (old, new), ops[n]
        outcomes.add(recovered[0])
        files = store_files(world)
        if n < planned:  # the snapshot was put before the flush wrote its plan: it stays
            files.pop(_snapshot_object(world, meta))
        assert files == clean[recovered[0]], ops[n]
    assert outcomes == {old[0], new[0]}


def _snapshot_object(world: Path, meta: bytes) -> str:
    raw = cbor.loads(meta)["snapshot"].hex()
    return f"cas/{raw[:2]}/{raw[2:]}"


def test_a_failed_flush_makes_the_handle_refuse_further_flushes(tmp_path: Path) -> None:
    store = build_world(tmp_path)
    meta = change(store, tmp_path)
    with pytest.raises(Crash), crash_at(2):
        store.flush(meta)
    with pytest.raises(StoreFailed) as caught:
        store.flush(meta)
    assert caught.value.path == str(tmp_path / "state" / "reducers")
