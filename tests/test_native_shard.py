"""The packed shard merge in C (``kernel.native.shard_splice``, used by
``world._cellstore_flush.splice``): "not mine" (None) for every input it does not expect, never
a different answer from the Python merge, also over damaged bytes; and a whole store
checkpointed either way leaves the same files. That it equals ``merge`` on every mix of cells
is ``tests/test_cellstore_merge.py``. Also run under AddressSanitizer (``test_native_asan``)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cellstore_kit import MANIFEST, MODULE, merged_summary, packed_shard, sized_cell, store_files

from air import cbor
from kernel import native
from kernel.cells import CellEntry, encode_entry, key_hash
from world._cellstore_flush import Cell, merge_shard
from world._cellstore_format import PackedShard
from world.cellstore import FileCellStore

pytestmark = pytest.mark.skipif(not native.available(), reason="the extension is not built")

INLINE_MAX = 8


@pytest.fixture(autouse=True)
def native_on() -> Iterator[None]:
    before = native.enabled()
    native.set_enabled(True)
    yield
    native.set_enabled(before)


def _args(shard: PackedShard, ops: list[Any]) -> list[Any]:
    return [*shard.packed(), ops]


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


def _ops(overlay: dict[bytes, Cell | None]) -> list[Any]:
    return [
        (kh, None, b"") if cell is None else (kh, encode_entry(cell[0]), cell[1])
        for kh, cell in sorted(overlay.items())
    ]


def test_inputs_it_does_not_expect_are_not_its_own() -> None:
    shard, overlay = _shard_and_overlay(random.Random(1))
    ops = _ops(overlay)
    good = _args(shard, ops)
    assert native.built().shard_splice(*good) is not None
    bad_cases = [
        good[:5],  # too few arguments
        [bytearray(good[0]), *good[1:]],  # not bytes
        [good[0][:-1], *good[1:]],  # keys not whole hashes
        [good[0], good[1], good[2][:-4], *good[3:]],  # one end missing
        [good[0], good[1][:-1], *good[2:]],  # entries shorter than their ends say
        [good[0], good[1], good[2], good[3] + b"x", good[4], ops],  # states longer
        [good[0][32:64] + good[0][:32] + good[0][64:], *good[1:]],  # keys out of order
        [*good[:5], list(reversed(ops))],  # ops out of order
        [*good[:5], [*ops, ops[-1]]],  # an op twice
        [*good[:5], tuple(ops)],  # not a list
        [*good[:5], [(ops[0][0], b"e")]],  # an op of two
        [*good[:5], [(ops[0][0][:31], b"e", b"")]],  # a short key hash
        [*good[:5], [(ops[0][0], "e", b"")]],  # an entry that is not bytes
        [*good[:5], [(ops[0][0], b"e", None)]],  # a slot that is not bytes
    ]
    ends = bytearray(good[2])
    ends[0:4], ends[4:8] = ends[4:8], ends[0:4]  # ends that go down
    bad_cases.append([good[0], good[1], bytes(ends), *good[3:]])
    for args in bad_cases:
        assert native.built().shard_splice(*args) is None, args


def _merged(base: PackedShard, overlay: dict[bytes, Cell | None], *, in_c: bool) -> Any:
    native.set_enabled(in_c)
    try:
        return merged_summary(merge_shard(base, overlay, INLINE_MAX))
    finally:
        native.set_enabled(True)


def _outcome(run: Any) -> Any:
    try:
        return run()
    except Exception as exc:  # the Python merge's error on odd bytes: it must be the same
        return type(exc), str(exc)


def test_mutated_shards_give_the_python_answer_or_its_error() -> None:
    """Random byte flips, cuts and extensions of each field of the base: the C merge declines
    (and the Python one runs) or ends as the Python merge over the same odd bytes does, with
    the same shard, root, adds and drops, or the same error. It never disagrees."""
    rng = random.Random(7)
    taken = declined = 0
    for _ in range(3000):
        shard, overlay = _shard_and_overlay(rng)
        fields = list(shard.packed())
        which = rng.randrange(5)
        data = bytearray(fields[which])
        action = rng.randrange(3)
        if action == 0 and data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif action == 1 and data:
            del data[rng.randrange(len(data)) :]
        else:
            data += bytes(rng.randrange(1, 9))
        fields[which] = bytes(data)
        odd = PackedShard(*fields)
        if native.built().shard_splice(*fields, _ops(overlay)) is None:
            declined += 1
            continue
        taken += 1
        spliced = _outcome(lambda odd=odd, overlay=overlay: _merged(odd, overlay, in_c=True))
        expected = _outcome(lambda odd=odd, overlay=overlay: _merged(odd, overlay, in_c=False))
        assert spliced == expected
    assert taken > 100
    assert declined > 100


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
