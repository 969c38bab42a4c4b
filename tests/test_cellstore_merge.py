"""``world._cellstore_flush.merge`` against a plain model: every mix of kept, replaced, new and
deleted cells, inline and out-of-line states, gives the shard a dict-and-sort merge gives."""

from __future__ import annotations

from typing import Any

from cellstore_kit import MANIFEST
from hypothesis import given, settings
from hypothesis import strategies as st

from air import cbor
from kernel.cells import CellEntry, encode_entry
from world._cellstore_flush import Cell, merge
from world._cellstore_format import PackedShard

INLINE_MAX = 8


def _cell(n: int, size: int) -> Cell:
    state = cbor.dumps(bytes(size)) if size else b""
    entry = CellEntry(cbor.dumps(n), cbor.digest(state), len(state), 1, MANIFEST)
    return entry, state


def _stored(cell: Cell) -> tuple[bytes, bytes]:
    """A record as a flush stores it: entry bytes, and the state if inline (else empty)."""
    entry, state = cell
    return encode_entry(entry), state if len(state) <= INLINE_MAX else b""


def _model(
    base: dict[bytes, Cell], overlay: dict[bytes, Cell | None]
) -> tuple[list[bytes], list[tuple[bytes, bytes]], list[bytes], list[bytes]]:
    """Keys, stored records, added and dropped out-of-line state hashes, the obvious way."""
    merged = dict(base)
    adds, drops = [], []
    for kh, cell in overlay.items():
        old = base.get(kh)
        old_out = old is not None and len(old[1]) > INLINE_MAX
        if old_out and (cell is None or cell[0].state_hash != old[0].state_hash):
            drops.append(old[0].state_hash)
        if cell is None:
            merged.pop(kh, None)
            continue
        merged[kh] = cell
        if len(cell[1]) > INLINE_MAX and not (old_out and cell[0].state_hash == old[0].state_hash):
            adds.append(cell[0].state_hash)
    keys = sorted(merged)
    return keys, [_stored(merged[kh]) for kh in keys], adds, drops


sizes = st.sampled_from([0, 1, 5, 20])  # 0: an empty state; 20: out of line


@settings(max_examples=300, deadline=None)
@given(
    base=st.dictionaries(st.integers(0, 40), sizes, max_size=25),
    overlay=st.dictionaries(st.integers(0, 60), st.none() | sizes, max_size=25),
    same=st.booleans(),
)
def test_merge_equals_the_plain_merge(
    base: dict[int, int], overlay: dict[int, Any], same: bool
) -> None:
    base_cells = {cbor.digest(cbor.dumps(n)): _cell(n, size) for n, size in base.items()}
    over: dict[bytes, Cell | None] = {}
    for n, size in overlay.items():
        kh = cbor.digest(cbor.dumps(n))
        if same and kh in base_cells and size is not None:
            over[kh] = base_cells[kh]  # the same state again (out of line: stays, not re-added)
        else:
            over[kh] = None if size is None else _cell(n, size)
    keys, records, adds, drops = _model(base_cells, over)
    order = sorted(base_cells)
    stored = [_stored(base_cells[kh]) for kh in order]
    shard = PackedShard.build(order, [r[0] for r in stored], [r[1] for r in stored])
    columns = shard.columns() if order else ([], [], [])
    merged = merge(*columns, over, INLINE_MAX)
    assert merged.keys == keys
    assert list(zip(merged.entry_cbors, merged.states, strict=True)) == records
    assert [h for h, _state in merged.adds] == adds
    assert merged.drops == drops
