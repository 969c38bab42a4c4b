"""The packed shard merge in C (``kernel.native.shard_splice``, used by
``world.cellstore._flush.splice``): "not mine" (None) for every input it does not expect, never
a different answer from the Python merge, also over damaged bytes; and a whole store
checkpointed either way leaves the same files. That it equals ``merge`` on every mix of cells
is ``tests/world/cellstore/test_cellstore_merge.py``. Also run under AddressSanitizer (``test_native_asan``)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cellstore_kit import MANIFEST, MODULE, merged_summary, packed_shard, sized_cell, store_files
from fuzzkit import examples, load_oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from air import cbor
from air.errors import CborError
from kernel import native
from kernel.cells import CellEntry, key_hash, shard_of
from world.cellstore import FileCellStore
from world.cellstore._flush import Cell, merge_shard
from world.cellstore._shards import PackedShard, find_key, keys_ascend

pytestmark = pytest.mark.skipif(not native.available(), reason="the extension is not built")

INLINE_MAX = 8


@pytest.fixture(autouse=True)
def native_on() -> Iterator[None]:
    before = native.enabled()
    native.set_enabled(True)
    yield
    native.set_enabled(before)


def _args(shard: PackedShard, cells: dict[bytes, Any], inline_max: int = INLINE_MAX) -> list[Any]:
    return [*shard.packed(), cells, inline_max]


def _shard_and_overlay(rng: random.Random) -> tuple[PackedShard, dict[bytes, Cell | None]]:
    cells = {
        cbor.digest(cbor.dumps(n)): sized_cell(n, rng.choice([0, 1, 5, 20])) for n in range(12)
    }
    shard = packed_shard(cells, INLINE_MAX)
    assert shard is not None
    overlay: dict[bytes, Cell | None] = {}
    for n in rng.sample(range(30), 8):
        overlay[cbor.digest(cbor.dumps(n))] = None if n % 3 == 0 else sized_cell(n, 1, seq=2)
    return shard, overlay


@dataclass
class Entry:
    """Anything with a cell entry's attributes (``encode_entry`` asks no more of it)."""

    key_cbor: Any = b"\x61k"
    size: Any = 1
    state_hash: Any = bytes(32)
    last_active: Any = 2
    manifest_hash: Any = MANIFEST


def _with(cells: dict[bytes, Any], **changes: Any) -> dict[bytes, Any]:
    """``cells`` with its first put's entry replaced by an ``Entry`` with ``changes``."""
    kh, (entry, state) = next((kh, c) for kh, c in cells.items() if c is not None)
    fields = {name: getattr(entry, name) for name in Entry.__dataclass_fields__}
    return {**cells, kh: (Entry(**{**fields, **changes}), state)}


def test_inputs_it_does_not_expect_are_not_its_own() -> None:
    shard, overlay = _shard_and_overlay(random.Random(1))
    good = _args(shard, overlay)
    assert native.built().shard_splice(*good) is not None
    assert native.built().shard_splice(*_args(shard, _with(overlay))) is not None  # duck-typed
    some_kh, some_cell = next((kh, c) for kh, c in overlay.items() if c is not None)
    bad_cases = [
        good[:6],  # too few arguments
        [bytearray(good[0]), *good[1:]],  # not bytes
        [good[0][:-1], *good[1:]],  # keys not whole hashes
        [good[0], good[1], good[2][:-4], *good[3:]],  # one end missing
        [good[0], good[1][:-1], *good[2:]],  # entries shorter than their ends say
        [good[0], good[1], good[2], good[3] + b"x", *good[4:]],  # states longer
        [good[0][32:64] + good[0][:32] + good[0][64:], *good[1:]],  # keys out of order
        [*good[:5], list(overlay.items()), INLINE_MAX],  # cells not a dict
        [*good[:5], overlay, -1],  # a negative limit
        [*good[:5], overlay, 2**70],  # a limit past a machine word
        [*good[:5], overlay, float(INLINE_MAX)],  # a limit that is not an int
        [*good[:5], {some_kh[:31]: some_cell}, INLINE_MAX],  # a short key hash
        [*good[:5], {some_kh.hex(): some_cell}, INLINE_MAX],  # a key hash that is not bytes
        [*good[:5], {some_kh: list(some_cell)}, INLINE_MAX],  # a cell that is not a tuple
        [*good[:5], {some_kh: (*some_cell, b"")}, INLINE_MAX],  # a cell of three
        [*good[:5], {some_kh: (some_cell[0], bytearray(some_cell[1]))}, INLINE_MAX],
        [*good[:5], {some_kh: (object(), some_cell[1])}, INLINE_MAX],  # no entry attributes
    ]
    for changes in [
        {"key_cbor": bytearray(b"\x61k")},
        {"state_hash": bytes(31)},
        {"manifest_hash": "m" * 32},
        {"size": True},
        {"size": -1},
        {"last_active": 2**64},
        {"last_active": 1.0},
    ]:
        bad_cases.append(_args(shard, _with(overlay, **changes)))
    ends = bytearray(good[2])
    ends[0:4], ends[4:8] = ends[4:8], ends[0:4]  # ends that go down
    bad_cases.append([good[0], good[1], bytes(ends), *good[3:]])
    for args in bad_cases:
        assert native.built().shard_splice(*args) is None, args


def test_an_entry_that_raises_or_changes_the_cells_as_it_is_read() -> None:
    """A hostile entry: one whose attribute raises is not the C code's (so the Python merge
    raises its error, in its own order), and one that empties the dict while the C code walks
    it changes nothing it reads (it holds the items it was given; under AddressSanitizer too)."""
    shard, overlay = _shard_and_overlay(random.Random(2))

    class Plain:
        key_cbor, size, state_hash, last_active, manifest_hash = b"\x61k", 1, bytes(32), 2, MANIFEST

    class Raising(Plain):
        @property  # type: ignore[override]
        def last_active(self) -> int:
            raise RuntimeError("no last_active")

    kh, cell = next((kh, c) for kh, c in overlay.items() if c is not None)
    raising = {**overlay, kh: (Raising(), cell[1])}
    assert native.built().shard_splice(*_args(shard, raising)) is None
    with pytest.raises(RuntimeError, match="no last_active"):
        merge_shard(shard, raising, INLINE_MAX)

    class Interrupting(Plain):
        @property  # type: ignore[override]
        def manifest_hash(self) -> bytes:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # not swallowed
        native.built().shard_splice(*_args(shard, {**overlay, kh: (Interrupting(), cell[1])}))

    cells: dict[bytes, Any] = dict(overlay)

    class Emptying(Plain):
        @property  # type: ignore[override]
        def size(self) -> int:
            cells.clear()
            return 1

    cells[kh] = (Emptying(), cell[1])
    given = dict(cells)
    out = native.built().shard_splice(*_args(shard, cells))
    assert out is not None
    assert not cells
    native.set_enabled(False)
    try:
        fields, root, _adds, _drops = merged_summary(merge_shard(shard, given, INLINE_MAX))
    finally:
        native.set_enabled(True)
    assert out[:5] == fields
    assert cbor.digest(out[5]) == root


def test_damaged_shards_give_the_python_answer_or_its_error() -> None:
    """3,000 inputs of the fuzzing oracle (``tools/fuzz/native_oracle.check_shard_splice``):
    random bytes written over a field of a small shard, with dirty cells, deletions and states
    put again: the C merge declines (and the Python one runs) or ends as the Python merge over
    the same odd bytes does, with the same shard, root, adds and drops, or the same error."""
    oracle = load_oracle()
    rng = random.Random(7)
    taken = [oracle.check_shard_splice(rng.randbytes(rng.randrange(12))) for _ in range(3000)]
    assert taken.count(True) > 100
    assert taken.count(False) > 100


def _workload(store: FileCellStore, round_: int) -> None:
    rng = random.Random(round_)
    for n in rng.sample(range(3000), 1500):
        size = rng.choice([1, 10, 2000])  # 2000: out of line
        state = cbor.dumps({"n": n, "pad": bytes(size), "round": round_})
        key_cbor = cbor.dumps(f"key-{n}")
        entry = CellEntry.of(key_cbor, state, last_active=round_ + 1, manifest_hash=MANIFEST)
        store.put(MODULE, key_hash(key_cbor), entry, state)
    for n in rng.sample(range(3000), 200):
        store.delete(MODULE, key_hash(cbor.dumps(f"key-{n}")))


def test_a_store_checkpointed_with_the_c_merge_holds_the_same_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    merged_in_c = []
    real = native.shard_splice

    def counted(*args: Any) -> Any:
        out = real(*args)
        merged_in_c.append(out is not None)
        return out

    monkeypatch.setattr(native, "shard_splice", counted)
    trees = {}
    for flag in (False, True):
        native.set_enabled(flag)
        world = tmp_path / f"native-{flag}"
        for round_ in range(4):
            store = FileCellStore(world)
            _workload(store, round_)
            store.flush(cbor.dumps({"round": round_}))
        trees[flag] = store_files(world)
    assert trees[True] == trees[False]
    assert len(trees[True]) > 20
    assert merged_in_c.count(True) > 100  # the second run's shards, merged in C


@settings(max_examples=examples(300), deadline=None)
@given(
    stored=st.sets(st.binary(min_size=32, max_size=32), max_size=40),
    others=st.lists(st.binary(min_size=32, max_size=32), max_size=5),
)
def test_the_bisection_finds_what_the_scan_finds(stored: set[bytes], others: list[bytes]) -> None:
    """``find_key`` in C (bisection) against the scan, over ascending keys, for every stored key,
    keys that are not stored, and a key straddling two stored ones."""
    order = sorted(stored)
    keys = b"".join(order)
    straddling = [keys[16:48]] if len(order) > 1 else []
    for wanted in [*order, *others, *straddling]:
        native.set_enabled(False)
        expected = find_key(keys, wanted)
        native.set_enabled(True)
        assert native.built().find_key(keys, wanted) == expected
        assert find_key(keys, wanted) == expected
    assert native.built().keys_ascend(keys) is True
    assert keys_ascend(keys) is True
    if len(order) > 1:
        swapped = order[1] + order[0] + b"".join(order[2:])
        twice = order[0] + b"".join(order)
        for odd in (swapped, twice):
            assert native.built().keys_ascend(odd) is False
            native.set_enabled(False)
            assert keys_ascend(odd) is False
            native.set_enabled(True)


def test_key_inputs_it_does_not_expect_are_not_its_own() -> None:
    keys = bytes(64)
    for args in [(keys[:-1], bytes(32)), (keys, bytes(31)), (bytearray(keys), bytes(32)), (keys,)]:
        assert native.built().find_key(*args) is None, args
    for odd in (keys[:-1], bytearray(keys), "k"):
        assert native.built().keys_ascend(odd) is None


@pytest.mark.parametrize("in_c", [True, False])
def test_a_stored_shard_whose_keys_do_not_ascend_is_refused(in_c: bool) -> None:
    """The bisection's promise is checked where a shard is loaded: a group object whose keys are
    out of order (a writer's bug, or a hand-made object: its hash is right) is malformed, with
    or without the native path, not a shard in which cells go missing."""
    cells = {b"\x12\x30" + bytes([n]) + bytes(29): sized_cell(n, 1) for n in range(8)}  # one prefix
    shard = packed_shard(cells, INLINE_MAX)
    assert shard is not None
    fields = shard.fields()
    prefix = shard_of(shard.keys[:32])
    assert PackedShard.from_fields(fields, prefix).count == 8
    keys = fields["keys"]
    swapped = {**fields, "keys": keys[32:64] + keys[:32] + keys[64:]}
    native.set_enabled(in_c)
    try:
        with pytest.raises(CborError, match="do not agree"):
            PackedShard.from_fields(swapped, prefix)
    finally:
        native.set_enabled(True)


def test_a_damaged_record_and_a_hostile_entry_raise_the_python_error() -> None:
    """Both at once (found in review): the C code reads every entry before merging, Python
    meets the damaged record first; the C code declines, so both paths raise ``CborError``."""

    class Raising:
        key_cbor, size, last_active, manifest_hash = b"\x61k", 1, 1, MANIFEST

        @property
        def state_hash(self) -> bytes:
            raise ValueError("boom")

    first, second = sorted(b"\x12\x30" + bytes([n]) + bytes(29) for n in (1, 2))
    base = PackedShard.build([first], [b"\xff\x00garbage"], [b""])  # empty slot: decoded
    cells: dict[bytes, Any] = {
        first: (CellEntry(b"\x61k", bytes(32), 1, 1, MANIFEST), b"\x61x"),
        second: (Raising(), b"\x61x"),
    }
    outcomes = []
    for in_c in (True, False):
        native.set_enabled(in_c)
        try:
            with pytest.raises(CborError) as raised:
                merge_shard(base, cells, INLINE_MAX)
            outcomes.append(str(raised.value))
        finally:
            native.set_enabled(True)
    assert outcomes[0] == outcomes[1]
