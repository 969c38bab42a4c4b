"""The file cell store at scale (issue 11): small states inline in their shard and large ones in
the CAS (the limit crossed both ways), shared large states, collection keeping the footprint
flat, cold lookups that decode one entry, readers beside a collecting writer, and a world
replayed after many checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
from cellstore_kit import (
    MODULE,
    OTHER,
    cas_objects,
    cell,
    disk_bytes,
    key,
    put,
    snapshot,
    store_files,
)

import world._world as world_module
from air import cbor
from kernel.cells import CELL_INLINE_BYTES_MAX, CellEntry, MemoryCellStore, key_hash, shard_of
from world import World
from world._cas import FileCas
from world.cellstore import GROUP_BYTES_TARGET, FileCellStore
from world.cellstore._shards import PackedShard
from world.errors import StoreDamaged
from world.history import verify_world

from worldkit import (
    COUNTER,
    COUNTER_AIR,
    EVENT,
    add,
    const_wasm,
    manifest,
    module,
    output,
    schema,
    write_world_air,
)


def padded(n: int, size: int, value: int = 0) -> tuple[bytes, CellEntry, bytes]:
    """Cell ``n`` with a state of exactly ``size`` bytes (size >= 40)."""
    _kh, _entry, bare = cell(n, value, pad=0)
    pad = size - len(bare) - 8  # the "pad" key (4 bytes) and a 3-byte or 4-byte bytes head
    for tries in (pad, pad + 1, pad - 1, pad + 2):
        kh, entry, state = cell(n, value, pad=tries)
        if len(state) == size:
            return kh, entry, state
    raise AssertionError(f"no padding gives {size} bytes")


def object_names(world: Path) -> set[bytes]:
    return {bytes.fromhex(p.parent.name + p.name) for p in cas_objects(world)}


def out_of_line(world: Path, entry: CellEntry) -> bool:
    return entry.state_hash in object_names(world)


# -- the inline limit --------------------------------------------------------------------------


def test_the_inline_limit_has_a_name_and_a_1_kib_default() -> None:
    assert CELL_INLINE_BYTES_MAX == 1024
    assert FileCellStore.__init__.__kwdefaults__["cell_inline_bytes_max"] == CELL_INLINE_BYTES_MAX


def test_a_state_at_the_limit_is_inline_and_one_byte_more_is_a_cas_object(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    at = padded(1, CELL_INLINE_BYTES_MAX)
    over = padded(2, CELL_INLINE_BYTES_MAX + 1)
    for kh, entry, state in (at, over):
        store.put(MODULE, kh, entry, state)
    store.flush()
    assert not out_of_line(tmp_path, at[1])
    assert out_of_line(tmp_path, over[1])
    assert FileCas(tmp_path).get(cbor.raw_to_hash(over[1].state_hash)) == over[2]
    reopened = FileCellStore(tmp_path)
    assert reopened.get(MODULE, at[0]) == (at[1], at[2])
    assert reopened.stats.state_reads == 0
    assert reopened.get(MODULE, over[0]) == (over[1], over[2])
    assert reopened.stats.state_reads == 1


def test_a_cell_crossing_the_limit_both_ways_moves_its_state_and_leaves_no_object(
    tmp_path: Path,
) -> None:
    sizes = [100, 3000, 100, 5000, 6000, 200, 4000]
    for step, size in enumerate(sizes):
        store = FileCellStore(tmp_path)
        kh, entry, state = padded(1, size, value=step)
        store.put(MODULE, kh, entry, state)
        put(store, 2, value=step)  # a neighbour that stays small
        store.flush()
        reopened = FileCellStore(tmp_path)
        assert reopened.get(MODULE, kh) == (entry, state)
        large = {o for o in object_names(tmp_path) if o == entry.state_hash}
        assert bool(large) == (size > CELL_INLINE_BYTES_MAX)
        assert object_names(tmp_path) == reopened.reachable_objects()


def test_a_store_reads_states_where_its_writer_put_them_whatever_its_own_limit(
    tmp_path: Path,
) -> None:
    memory = MemoryCellStore()
    writer = FileCellStore(tmp_path, cell_inline_bytes_max=0)  # every state out of line
    for store in (writer, memory):
        for n in range(200):
            put(store, n, value=n)
    writer.flush()
    assert len(object_names(tmp_path)) > 200
    reader = FileCellStore(tmp_path)  # the default limit
    assert snapshot(reader) == snapshot(memory)
    assert reader.index_root(MODULE) == memory.index_root(MODULE)
    for store in (reader, memory):
        for n in range(0, 200, 2):
            put(store, n, value=n + 1)
    reader.flush()  # the changed half moves inline; their objects go
    assert snapshot(FileCellStore(tmp_path)) == snapshot(memory)
    assert object_names(tmp_path) == FileCellStore(tmp_path).reachable_objects()
    assert FileCellStore(tmp_path).index_root(MODULE) == memory.index_root(MODULE)


# -- shard groups ------------------------------------------------------------------------------


def group_objects(world: Path, store: FileCellStore) -> dict[bytes, int]:
    """The store's group objects and their sizes in bytes."""
    index = store._cp.roots[MODULE]
    return {
        bytes.fromhex(p.parent.name + p.name): p.stat().st_size
        for p in cas_objects(world)
        if bytes.fromhex(p.parent.name + p.name) != index
    }


def test_a_checkpoint_packs_small_shards_into_groups_of_about_64_kib(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    for n in range(20_000):  # ~5 cells a shard, ~1.8 MB in all
        put(store, n)
    store.flush()
    groups = group_objects(tmp_path, store)
    assert len(groups) < 100  # ~3.7 MB in groups of up to 64 KiB, not ~4,000 shard objects
    assert max(groups.values()) <= GROUP_BYTES_TARGET * 1.1  # plus the CBOR framing
    assert len({ref[2] for ref in store._mods[MODULE].committed.values()}) == len(groups)


def test_changing_one_cell_rewrites_its_group_only(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    for n in range(20_000):
        put(store, n)
    store.flush()
    before = group_objects(tmp_path, store)
    put(store, 7, value=1)
    store.flush()
    after = group_objects(tmp_path, store)
    assert len(after) == len(before)
    assert len(set(before) - set(after)) == 1
    reopened = FileCellStore(tmp_path)
    found = reopened.get(MODULE, cell(7)[0])
    assert found is not None
    assert cbor.loads(found[1])["count"] == 1
    assert reopened.count(MODULE) == 20_000


# -- shared large states -----------------------------------------------------------------------


def share(store: FileCellStore, n: int, state: bytes, seq: int = 1) -> bytes:
    """Give cell ``n`` the state ``state``."""
    entry = CellEntry.of(key(n), state, last_active=seq, manifest_hash=bytes(32))
    store.put(MODULE, key_hash(key(n)), entry, state)
    return entry.state_hash


def test_a_large_state_two_cells_share_stays_until_neither_uses_it(tmp_path: Path) -> None:
    state = cbor.dumps({"pad": bytes(4000)})
    store = FileCellStore(tmp_path)
    shared = share(store, 1, state)
    share(store, 2, state)
    store.flush()
    assert shared in object_names(tmp_path)
    share(store, 3, state)  # a third cell takes it in a later flush
    store.delete(MODULE, key_hash(key(1)))
    store.flush()
    assert shared in object_names(tmp_path)
    store.delete(MODULE, key_hash(key(2)))
    put(store, 3, value=1)
    store.flush()
    assert shared not in object_names(tmp_path)
    assert object_names(tmp_path) == FileCellStore(tmp_path).reachable_objects()


def test_a_large_state_handed_from_one_cell_to_another_in_one_flush_stays(tmp_path: Path) -> None:
    state = cbor.dumps({"pad": bytes(4000)})
    store = FileCellStore(tmp_path)
    moved = share(store, 1, state)
    store.flush()
    store.delete(MODULE, key_hash(key(1)))
    share(store, 2, state)
    store.flush()
    assert FileCellStore(tmp_path).get(MODULE, key_hash(key(2))) is not None
    put(store, 2)
    store.flush()
    assert moved not in object_names(tmp_path)


def test_a_blob_put_later_with_a_cells_large_state_pins_it_against_collection(
    tmp_path: Path,
) -> None:
    """The other order: the cell's state is there first, then a blob ``put`` of the same bytes
    (an effect's ``blob.put``) shares the object: it must outlive the cell's use of it."""
    from world._cas import FileCas

    state = cbor.dumps({"pad": bytes(4000)})
    store = FileCellStore(tmp_path)
    held = share(store, 1, state)
    store.flush()
    assert FileCas(tmp_path).put(state) == cbor.raw_to_hash(held)
    put(store, 1, value=1)  # the cell lets go of the state; the store would collect it
    store.flush()
    assert held in object_names(tmp_path)
    assert FileCas(tmp_path, readonly=True).get(cbor.raw_to_hash(held)) == state


def test_an_object_the_cas_held_before_a_cell_took_it_is_never_collected(tmp_path: Path) -> None:
    """A blob with the same bytes as a cell's state is the same object: the store keeps it."""
    state = cbor.dumps({"pad": bytes(4000)})
    blob = FileCas(tmp_path).put(state)
    store = FileCellStore(tmp_path)
    share(store, 1, state)
    store.flush()
    store.delete(MODULE, key_hash(key(1)))
    store.flush()
    assert FileCas(tmp_path).get(blob) == state


# -- collection: a flat footprint --------------------------------------------------------------


def change_everything(store: FileCellStore, round_: int) -> None:
    """Every cell gets a new state of the same size (small ones and large ones)."""
    for n in range(300):
        kh, entry, state = cell(n, value=100 + round_, pad=3000 if n % 10 == 0 else 0)
        store.put(MODULE if n % 3 else OTHER, kh, entry, state)


def test_repeated_checkpoints_of_the_same_cells_keep_the_disk_flat(tmp_path: Path) -> None:
    store = FileCellStore(tmp_path)
    footprints = []
    for round_ in range(6):
        change_everything(store, round_)
        store.flush(cbor.dumps({"round": round_}))
        files = store_files(tmp_path)
        footprints.append((len(files), disk_bytes(tmp_path)))
        assert object_names(tmp_path) == store.reachable_objects()
    assert len(set(footprints)) == 1, footprints


def test_a_world_checkpointed_again_and_again_keeps_its_store_flat(tmp_path: Path) -> None:
    """World.snapshot: shards, index and the snapshot object of the last checkpoint only."""
    w = tmp_path / "w"
    counts = []
    with World.create(w, COUNTER_AIR) as world:
        air_objects = object_names(w)
        for _round in range(6):
            world.send_many([(EVENT, add(f"k{i}", 1)) for i in range(300)])
            world.run_until_idle()
            world.snapshot()
            store = FileCellStore(w, readonly=True)
            assert object_names(w) == air_objects | store.reachable_objects()
            counts.append(len(object_names(w)))
    assert len(set(counts)) == 1, counts


# -- cold reads --------------------------------------------------------------------------------


@pytest.fixture
def decoded_entries(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Counts every ``CellEntry`` decoded from stored bytes, whoever decodes it."""
    seen: list[bytes] = []
    real = CellEntry.from_cbor_obj.__func__  # type: ignore[attr-defined]

    def counting(cls: type[CellEntry], obj: object, eras: object = None) -> CellEntry:
        entry: CellEntry = real(cls, obj, eras)
        seen.append(entry.key_cbor)
        return entry

    monkeypatch.setattr(CellEntry, "from_cbor_obj", classmethod(counting))
    return seen


def test_a_cold_lookup_reads_one_object_and_decodes_only_its_entry(
    tmp_path: Path, decoded_entries: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileCellStore(tmp_path)
    for n in range(40_000):  # ~10 cells a shard, ~20 shards a group
        put(store, n, value=n)
    store.flush()
    built: list[int] = []
    real = PackedShard.from_fields.__func__  # type: ignore[attr-defined]

    def counting(cls: type[PackedShard], obj: object, prefix: int) -> PackedShard:
        built.append(prefix)
        shard: PackedShard = real(cls, obj, prefix)
        return shard

    monkeypatch.setattr(PackedShard, "from_fields", classmethod(counting))
    cold = FileCellStore(tmp_path)
    kh, entry, state = cell(12_345, value=12_345)
    decoded_entries.clear()
    assert cold.get(MODULE, kh) == (entry, state)
    assert decoded_entries == [key(12_345)]
    assert built == [shard_of(kh)]  # one shard of its group made, not the ~20
    assert (cold.stats.index_loads, cold.stats.shard_loads, cold.stats.entries_decoded) == (1, 1, 1)
    assert cold.get(MODULE, key_hash(key(99_999_999))) is None  # absent: nothing decoded
    assert decoded_entries == [key(12_345)]


# -- readers and a collecting writer -----------------------------------------------------------


def test_a_reader_of_a_collected_checkpoint_sees_damage_and_a_newer_checkpoint(
    tmp_path: Path,
) -> None:
    """What lets ``World`` retry a reader's open (``CheckpointMoved``) instead of misreading."""
    writer = FileCellStore(tmp_path)
    kh = put(writer, 1, value=1)
    writer.flush(b"one")
    reader = FileCellStore(tmp_path, readonly=True)
    put(writer, 1, value=2)
    writer.flush(b"two")
    with pytest.raises(StoreDamaged):
        reader.get(MODULE, kh)
    assert reader.current_checkpoint_digest() != reader.checkpoint_digest
    found = FileCellStore(tmp_path, readonly=True).get(MODULE, kh)
    assert found is not None
    assert cbor.loads(found[1])["count"] == 2


# -- a large world after many checkpoints ------------------------------------------------------


def test_a_world_replays_from_genesis_after_many_automatic_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(world_module, "SNAPSHOT_DIRTY_MAX", 700)  # checkpoint every ~700 cells
    w = tmp_path / "w"
    keys = 2_500
    with World.create(w, COUNTER_AIR) as world:
        for round_ in range(4):
            world.send_many([(EVENT, add(f"k{i}", round_ + i % 3)) for i in range(keys)])
            world.run_until_idle()
        world.send(EVENT, {"key": "k7", "op": "Clear"})  # deletes the cell
        world.run_until_idle()
    with World.open(w) as world:
        assert world.cell_count(COUNTER) == keys - 1
        assert world.state(COUNTER, "k8") == {"count": 6 + 4 * (8 % 3), "events": 4}
        assert world.state(COUNTER, "k7") is None
    report = verify_world(w)
    assert report.ok, report
    assert report.steps == 4 * keys + 1


# -- a reducer's view ---------------------------------------------------------------------------


def test_a_reducer_with_states_above_the_limit_reads_them_back_through_the_world(
    tmp_path: Path,
) -> None:
    """States of either size are the reducer's business only: same values, same replay."""
    big, small = bytes(range(256)) * 8, b"tiny"  # 2 KiB (out of line) and 4 bytes (inline)
    air = write_world_air(
        tmp_path / "air",
        {
            "t/Big@1": const_wasm(output({"pad": big})),
            "t/Small@1": const_wasm(output({"pad": small})),
        },
        [
            schema("t/State@1", {"record": {"pad": "bytes"}}),
            schema("t/Touch@1", {"record": {"key": "text"}}),
            module("t/Big@1", "t/State@1", "t/Touch@1", key_schema="text"),
            module("t/Small@1", "t/State@1", "t/Touch@1", key_schema="text"),
            manifest(
                [
                    {"event": "t/Touch@1", "reducer": "t/Big@1", "key_field": "key"},
                    {"event": "t/Touch@1", "reducer": "t/Small@1", "key_field": "key"},
                ]
            ),
        ],
    )
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send_many([("t/Touch@1", {"key": f"k{i}"}) for i in range(5)])
        world.run_until_idle()
        world.snapshot()
    big_state = cbor.dumps({"pad": big})
    assert len(big_state) > CELL_INLINE_BYTES_MAX
    assert cbor.digest(big_state) in object_names(w)
    with World.open(w) as world:
        for i in range(5):
            assert world.kernel.state_of("t/Big@1", cbor.dumps(f"k{i}")) == big_state
            assert world.kernel.state_of("t/Small@1", cbor.dumps(f"k{i}")) == cbor.dumps(
                {"pad": small}
            )
    assert verify_world(w).ok
