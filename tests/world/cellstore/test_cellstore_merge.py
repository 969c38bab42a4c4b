"""The shard merge of a checkpoint: ``world.cellstore._flush.merge`` against a plain model
(every mix of kept, replaced, new and deleted cells, inline and out-of-line states gives the
shard a dict-and-sort merge gives), and ``splice``, the same merge in C, against ``merge``: the
same fields, logical root, adds and drops, also with the inline limit changed since the base
was stored. The C code's own edge cases are in ``tests/kernel/native/test_native_shard.py``; both files run
under AddressSanitizer (``test_native_asan``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cellstore_kit import merged_summary, packed_shard, sized_cell
from fuzzkit import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from air import cbor
from kernel import native
from kernel.cells import encode_entry
from world.cellstore._flush import Cell, OutOfLine, merge, merge_shard, splice

INLINE_MAX = 8  # the inline limit the base is stored with


def _stored(cell: Cell) -> tuple[bytes, bytes]:
    """A record as a flush stores it: entry bytes, and the state if inline (else empty)."""
    entry, state = cell
    return encode_entry(entry), state if len(state) <= INLINE_MAX else b""


def _cells(
    base: dict[int, int], overlay: dict[int, int | None], same: bool
) -> tuple[dict[bytes, Cell], dict[bytes, Cell | None]]:
    """The base cells and the overlay the hypothesis integers stand for; ``same``: a key of the
    base put again keeps its state (a re-put with a new seq, as a step that changed nothing)."""
    base_cells = {cbor.digest(cbor.dumps(n)): sized_cell(n, size) for n, size in base.items()}
    over: dict[bytes, Cell | None] = {}
    for n, size in overlay.items():
        kh = cbor.digest(cbor.dumps(n))
        if same and kh in base_cells and size is not None:
            over[kh] = (sized_cell(n, base[n], seq=2)[0], base_cells[kh][1])
        else:
            over[kh] = None if size is None else sized_cell(n, size, seq=3)
    return base_cells, over


def _model(
    base: dict[bytes, Cell], overlay: dict[bytes, Cell | None]
) -> tuple[list[bytes], list[tuple[bytes, bytes]], list[OutOfLine], list[bytes]]:
    """Keys, stored records, added out-of-line states (key hash, state hash, state) and dropped
    state hashes, the obvious way."""
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
            adds.append((kh, cell[0].state_hash, cell[1]))
    keys = sorted(merged)
    return keys, [_stored(merged[kh]) for kh in keys], adds, drops


sizes = st.sampled_from([0, 1, 5, 20])  # 0: an empty state; 20: out of line
bases = st.dictionaries(st.integers(0, 40), sizes, max_size=25)
overlays = st.dictionaries(st.integers(0, 60), st.none() | sizes, max_size=25)


@settings(max_examples=examples(300), deadline=None)
@given(base=bases, overlay=overlays, same=st.booleans())
def test_merge_equals_the_plain_merge(
    base: dict[int, int], overlay: dict[int, Any], same: bool
) -> None:
    base_cells, over = _cells(base, overlay, same)
    keys, records, adds, drops = _model(base_cells, over)
    shard = packed_shard(base_cells, INLINE_MAX)
    merged = merge(*(shard.columns() if shard else ([], [], [])), over, INLINE_MAX)
    assert merged.keys == keys
    assert list(zip(merged.entry_cbors, merged.states, strict=True)) == records
    assert merged.adds == adds
    assert merged.drops == drops


@pytest.fixture
def native_on() -> Iterator[None]:
    if not native.available():
        pytest.skip("the extension is not built")
    before = native.enabled()
    native.set_enabled(True)
    yield
    native.set_enabled(before)


@settings(max_examples=examples(400), deadline=None)
@given(
    base=bases,
    overlay=overlays,
    same=st.booleans(),
    inline_max=st.sampled_from([INLINE_MAX, 0, 30]),
)
@pytest.mark.usefixtures("native_on")
def test_the_c_merge_equals_merge(
    base: dict[int, int], overlay: dict[int, Any], same: bool, inline_max: int
) -> None:
    """``inline_max`` other than ``INLINE_MAX``: the limit changed between two checkpoints."""
    base_cells, over = _cells(base, overlay, same)
    shard = packed_shard(base_cells, INLINE_MAX)
    native.set_enabled(False)
    expected = merged_summary(merge_shard(shard, over, inline_max))
    native.set_enabled(True)
    spliced = splice(shard, over, inline_max)
    kept_out_of_line = any(
        cell is not None
        and kh in base_cells
        and len(base_cells[kh][1]) > INLINE_MAX
        and cell[0].state_hash == base_cells[kh][0].state_hash
        and len(cell[1]) <= inline_max
        for kh, cell in over.items()
    )
    if kept_out_of_line:  # the one case left to merge
        assert spliced is None
        assert merged_summary(merge_shard(shard, over, inline_max)) == expected
    else:
        assert spliced is not None
        assert merged_summary(spliced) == expected
