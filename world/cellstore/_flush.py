"""Planning one flush of the file cell store: merged shards packed into groups, out-of-line
states, index objects, the new checkpoint record, and what becomes garbage once it is committed. No I/O except through
the ``holds`` callback (does the CAS already hold this object with these bytes?).

Merging a dirty shard keeps every clean record's bytes as they are (entry and inline state are
slices of the old object) and encodes only the dirty entries, and the logical root is one
digest of a concatenation. With the native path the merge is ``splice`` (C sorts and encodes
the dirty cells and copies the clean records' bytes: ~1 µs per dirty cell plus the copy);
``merge`` is its reference and the fallback (``tests/world/cellstore/test_cellstore_merge.py`` holds one to the
other, ``tests/kernel/native/test_native_shard.py`` feeds the C code what it must decline).

Who may delete what (the collector's invariant). Objects are shared by content with the rest
of the world's CAS (AIR, wasm, blobs, receipts), so the store deletes only what it can prove
is its own and unused:

* A shard group or index object names its reducer, and a group is rewritten whole when any of
  its shards is (``Planner.groups``), so each is used by one checkpoint whole or not at all:
  superseded, it is garbage.
* The snapshot object a checkpoint names (``world.cellstore._checkpoint.snapshot_of``) is garbage when a
  newer checkpoint names another.
* An out-of-line state is garbage when its last reference goes. A state the flush writes anew
  has one reference (the cell's) and is not in ``shared``. One that a second cell takes, or that
  the CAS already held when a cell took it, goes into ``shared`` with a count: 2 (the new
  reference, plus one for whoever holds it already) or +1 if already there; each reference
  dropped takes one off, and at 0 the object is garbage. If the object was there for another
  reason (a blob with the same bytes, an orphan of a discarded store) the count is one too high
  and it is never collected: a leak, never a loss. Additions are counted before removals, so a
  state handed from one cell to another in one flush stays.

Rejected: a full mark-and-sweep of the CAS. The store cannot see the other roots (the journal
names blobs and receipts), and marking would read every shard of a million-cell world per
checkpoint. Rejected too: reference counts for every out-of-line state (a second sharded index
the size of the first, rewritten at every checkpoint) when nearly all have one reference.

Never collected, by design or for now: the objects of a store discarded as damaged
(``world._directory.discard_store`` moves only ``state/reducers`` aside), the store objects a
fork or migration copies along with the whole CAS, and the snapshot object of a checkpoint that
died before its plan was written (``World.snapshot`` puts it before calling ``flush``).
``FileCellStore.reachable_objects`` names what a checkpoint uses, for tools that want to tell
them apart.

Not here: the order of the writes and the recovery (``world.cellstore._store``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from air import cbor
from kernel import native
from kernel.cells import CellEntry, encode_entry, logical_shard_bytes
from world.cellstore._checkpoint import Checkpoint, FlushPlan, encode_checkpoint, snapshot_of
from world.cellstore._shards import (
    GROUP_BYTES_TARGET,
    PackedShard,
    ShardRef,
    encode_index_object,
    entry_from_cbor,
    pack_group,
)

__all__ = [
    "Cell",
    "Merged",
    "MergedShard",
    "ModulePlan",
    "OutOfLine",
    "Planner",
    "merge",
    "merge_shard",
    "merged_count",
    "splice",
]

Cell = tuple[CellEntry, bytes]
OutOfLine = tuple[bytes, bytes, bytes]
"""A state a flush stores as its own object: (key hash, state hash, state bytes)."""


@dataclass
class Merged:
    """A dirty shard merged with its base, in key order, and the out-of-line states it adds
    (key hash, state hash, bytes) and drops (state hash)."""

    keys: list[bytes]
    entry_cbors: list[bytes]
    states: list[bytes]
    adds: list[OutOfLine] = field(default_factory=list)
    drops: list[bytes] = field(default_factory=list)

    def logical_root(self) -> bytes:
        return cbor.digest(logical_shard_bytes(self.keys, self.entry_cbors))


def _out_of_line(entry_cbor: bytes) -> bytes | None:
    """The state hash of a stored record with an empty state slice if its state is a CAS
    object, else None (a 0-byte state is inline)."""
    entry = entry_from_cbor(entry_cbor)
    return entry.state_hash if entry.size else None


def merge(
    keys: list[bytes],
    entry_cbors: list[bytes],
    states: list[bytes],
    overlay: Mapping[bytes, Cell | None],
    inline_bytes_max: int,
) -> Merged:
    """The base records (key hashes ascending, entry bytes, state slices: three lists, which it
    takes over and changes) with ``overlay`` applied (None deletes); states above
    ``inline_bytes_max`` bytes go out of line. Runs for every dirty shard of a checkpoint, where
    a shard of a million-cell world holds ~250 cells and a batch of new cells adds ~50: each
    overlay cell is placed by bisection and inserted, so a clean record costs only its slices
    (before, a dict, a sort and a tuple per record: 1.9 -> ~1 s of a 200,000-new-cell
    checkpoint of an 800,000-cell world)."""
    adds: list[OutOfLine] = []
    drops: list[bytes] = []
    for kh, cell in overlay.items():
        i = bisect_left(keys, kh)
        found = i < len(keys) and keys[i] == kh
        if found and not states[i]:  # an empty state slice: maybe out of line
            old_out = _out_of_line(entry_cbors[i])
            if old_out is not None and cell is not None and cell[0].state_hash == old_out:
                entry_cbors[i] = encode_entry(cell[0])  # the same state, still out of line
                continue
            if old_out is not None:
                drops.append(old_out)
        if cell is None:
            if found:
                del keys[i], entry_cbors[i], states[i]
            continue
        entry, state = encode_entry(cell[0]), cell[1]
        if len(state) > inline_bytes_max:
            adds.append((kh, cell[0].state_hash, state))
            state = b""
        if found:
            entry_cbors[i], states[i] = entry, state
        else:
            keys.insert(i, kh)
            entry_cbors.insert(i, entry)
            states.insert(i, state)
    return Merged(keys, entry_cbors, states, adds, drops)


@dataclass
class MergedShard:
    """One dirty shard merged with its base: the new view (None once empty), its logical root,
    and the out-of-line states it adds and drops (state hash)."""

    view: PackedShard | None
    root: bytes
    adds: list[OutOfLine]
    drops: list[bytes]


def merge_shard(
    base: PackedShard | None, overlay: Mapping[bytes, Cell | None], inline_bytes_max: int
) -> MergedShard:
    """``base`` with ``overlay`` applied: by ``splice`` where the native path takes it, else by
    ``merge``; the same result either way."""
    spliced = splice(base, overlay, inline_bytes_max)
    if spliced is not None:
        return spliced
    merged = merge(
        *(base.columns() if base is not None else ([], [], [])), overlay, inline_bytes_max
    )
    if not merged.keys:
        return MergedShard(None, b"", merged.adds, merged.drops)
    view = PackedShard.build(merged.keys, merged.entry_cbors, merged.states)
    return MergedShard(view, merged.logical_root(), merged.adds, merged.drops)


_EMPTY_FIELDS: Final = (b"", b"", b"", b"", b"")


def splice(
    base: PackedShard | None, overlay: Mapping[bytes, Cell | None], inline_bytes_max: int
) -> MergedShard | None:
    """``merge`` in C (``kernel.native.shard_splice``), straight from the packed fields and the
    dirty cells to the new fields and the logical shard bytes: a clean record costs a copy of its
    bytes instead of ~0.7 µs of Python (slices, inserts, joins, offsets), a dirty cell ~1 µs,
    most of it reading its objects (not in the CPU's cache by then), instead of ~2.5 (its sort,
    its entry's encoding, its op, the look for its old record): the 200,000 dirty cells of a
    checkpoint took 0.52-0.55 s, now 0.21-0.22 (BENCHMARKS.md). None when the
    native path is off or declines, and the caller merges in Python. The C code reports the
    replaced records whose state slot was empty (``olds``); when there are any (cells with
    states out of line put again), the adds and drops are decided here, in ``merge``'s order.
    None in the one case that is not decided: a cell put again with the same state, stored out
    of line, that would now be inline (``inline_bytes_max`` raised since): ``merge`` keeps it out
    of line."""
    cells = overlay if type(overlay) is dict else dict(overlay)
    fields = _EMPTY_FIELDS if base is None else base.packed()
    out = native.shard_splice(fields, cells, inline_bytes_max)
    if out is None:
        return None
    keys, entries, entry_ends, states, state_ends, logical, olds, adds = out
    drops: list[bytes] = []
    if olds:
        old_entries = dict(olds)
        adds = []
        for kh, cell in overlay.items():  # in the order merge takes them
            old = old_entries.get(kh)
            old_out = None if old is None else _out_of_line(old)
            if old_out is not None and cell is not None and cell[0].state_hash == old_out:
                if len(cell[1]) <= inline_bytes_max:
                    return None
                continue
            if old_out is not None:
                drops.append(old_out)
            if cell is not None and len(cell[1]) > inline_bytes_max:
                adds.append((kh, cell[0].state_hash, cell[1]))
    if not keys:
        return MergedShard(None, b"", adds, drops)
    view = PackedShard(keys, entries, entry_ends, states, state_ends)
    return MergedShard(view, cbor.digest(logical), adds, drops)


def merged_count(
    base_count: int, contains: Callable[[bytes], bool], overlay: Mapping[bytes, Cell | None]
) -> int:
    """How many cells a base of ``base_count`` (``contains`` its keys) holds with ``overlay``
    applied: no encoding, no decoding."""
    for kh, cell in overlay.items():
        base_count += (cell is not None) - contains(kh)
    return base_count


@dataclass
class ModulePlan:
    """One reducer's part of a flush."""

    changed: dict[int, ShardRef | None]  # rewritten prefixes: new ref, None if now empty
    groups: dict[bytes, dict[int, PackedShard]]  # the new group objects
    replaced: set[bytes]  # the group objects they replace
    out_of_line: list[OutOfLine]  # the states the flush stores as their own objects
    committed: dict[int, ShardRef] = field(default_factory=dict)  # the reducer's new index


Loader = Callable[[int], tuple[PackedShard | None, dict[bytes, Cell | None]]]
"""A prefix's committed shard, and the cells to place anew (a format-1 shard's, converted)."""


class Planner:
    """Collects one flush: objects to write, objects it creates (deleted if the flush never
    commits), garbage (deleted once it has), and the new ``shared`` counts."""

    def __init__(
        self,
        previous: Checkpoint,
        inline_bytes_max: int,
        holds: Callable[[bytes, bytes], bool],
    ) -> None:
        self.previous = previous
        self.inline_bytes_max = inline_bytes_max
        self.shared = dict(previous.shared)
        self.writes: list[tuple[bytes, bytes]] = []
        self._holds = holds
        self._created: dict[bytes, None] = {}
        self._garbage: dict[bytes, None] = {}
        self._fresh: set[bytes] = set()
        self._drops: list[bytes] = []

    def _write(self, raw: bytes, data: bytes) -> None:
        self.writes.append((raw, data))
        self._created[raw] = None

    def _add_state(self, state_hash: bytes, state_cbor: bytes) -> None:
        if state_hash in self.shared:
            self.shared[state_hash] += 1
        elif state_hash in self._fresh or self._holds(state_hash, state_cbor):
            self.shared[state_hash] = 2
        else:
            self._write(state_hash, state_cbor)
            self._fresh.add(state_hash)

    def shard(
        self,
        base: PackedShard | None,
        overlay: Mapping[bytes, Cell | None],
        out_of_line: list[OutOfLine],
    ) -> tuple[PackedShard, bytes] | None:
        """Merge one shard to rewrite; its new view and logical root (None once it is empty).
        The states it stores out of line are added to ``out_of_line``."""
        merged = merge_shard(base, overlay, self.inline_bytes_max)
        for _kh, state_hash, state_cbor in merged.adds:
            self._add_state(state_hash, state_cbor)
        out_of_line.extend(merged.adds)
        self._drops.extend(merged.drops)
        return None if merged.view is None else (merged.view, merged.root)

    def module(
        self,
        module_raw: bytes,
        committed: Mapping[int, ShardRef],
        dirty: Mapping[int, Mapping[bytes, Cell | None]],
        load: Loader,
        *,
        convert: bool,
    ) -> ModulePlan:
        """Rewrite the dirty shards and every shard that shares a group object with one (all
        of them when converting format 1), regrouped."""
        if convert:
            replaced: set[bytes] = set()
            rewrite = dirty.keys() | committed.keys()
        else:
            replaced = {committed[p][2] for p in dirty if p in committed}
            rewrite = dirty.keys() | {p for p, ref in committed.items() if ref[2] in replaced}
        shards = []
        out_of_line: list[OutOfLine] = []
        for prefix in sorted(rewrite):
            base, placed = load(prefix)
            cells = dirty.get(prefix, {})
            merged = self.shard(base, {**placed, **cells} if placed else cells, out_of_line)
            if merged is not None:
                shards.append((prefix, *merged))
        refs, groups = self.groups(module_raw, shards, replaced)
        changed: dict[int, ShardRef | None] = dict.fromkeys(rewrite)
        changed.update(refs)
        return ModulePlan(changed, groups, replaced, out_of_line)

    def groups(
        self,
        module_raw: bytes,
        shards: Sequence[tuple[int, PackedShard, bytes]],
        replaced: set[bytes],
    ) -> tuple[dict[int, ShardRef], dict[bytes, dict[int, PackedShard]]]:
        """Pack the rewritten (prefix, view, root) shards, in prefix order, into groups of up
        to ``GROUP_BYTES_TARGET``; the ``replaced`` group objects become garbage unless a group
        comes out the same. Returns the new refs and the new groups by object hash."""
        refs: dict[int, ShardRef] = {}
        roots: dict[int, bytes] = {}
        out: dict[bytes, dict[int, PackedShard]] = {}
        group: dict[int, PackedShard] = {}
        size = 0
        for prefix, view, root in [*shards, (-1, None, b"")]:
            weight = 0 if view is None else view.weight
            if group and (view is None or size + weight > GROUP_BYTES_TARGET):
                data = pack_group(module_raw, group)
                raw = cbor.digest(data)
                if raw not in replaced:
                    self._write(raw, data)
                out[raw] = group
                for member, shard in group.items():
                    refs[member] = (roots[member], shard.count, raw)
                group, size = {}, 0
            if view is not None:
                group[prefix] = view
                size += weight
                roots[prefix] = root
        for raw in replaced - out.keys():
            self._garbage[raw] = None
        return refs, out

    def index(
        self,
        module_raw: bytes,
        committed: Mapping[int, ShardRef],
        changed: Mapping[int, ShardRef | None],
        old_index: bytes | None,
    ) -> tuple[bytes, dict[int, ShardRef]]:
        """The reducer's new index object (written if it differs) and its shard refs."""
        refs = dict(committed)
        for prefix, ref in changed.items():
            if ref is None:
                refs.pop(prefix, None)
            else:
                refs[prefix] = ref
        data = encode_index_object(module_raw, refs)
        raw = cbor.digest(data)
        if raw != old_index:
            self._write(raw, data)
            if old_index is not None:
                self._garbage[old_index] = None
        return raw, refs

    def finish(self, meta: bytes, roots: Mapping[str, bytes]) -> tuple[bytes, FlushPlan]:
        """The new checkpoint record and the plan; call after every shard and index."""
        for state_hash in self._drops:
            left = self.shared.get(state_hash, 1) - 1
            if left:
                self.shared[state_hash] = left
            else:
                self.shared.pop(state_hash, None)
                self._garbage[state_hash] = None
        old_snapshot, new_snapshot = snapshot_of(self.previous.meta), snapshot_of(meta)
        if old_snapshot != new_snapshot:
            if new_snapshot is not None:  # World.snapshot put it for this checkpoint only
                self._created[new_snapshot] = None
            if old_snapshot is not None:
                self._garbage[old_snapshot] = None
        data = encode_checkpoint(meta, roots, self.shared)
        plan = FlushPlan(
            cbor.digest(self.previous.data),
            cbor.digest(data),
            list(self._created),
            list(self._garbage),
        )
        return data, plan
