"""The file ``CellStore``: cell states packed into index shards, content-addressed in the CAS.

The journal is the source of truth; the store is its checkpointed materialisation (SPEC §7).
``put``/``delete`` only touch memory (a dirty map); ``flush`` writes one checkpoint for every
reducer at once, with the kernel's ``checkpoint_cbor`` (the world's snapshot address) in the
same commit. After a crash the store opens at the last flush and the kernel replays from there.

Layout (formats in ``world.cellstore._shards`` and ``world.cellstore._checkpoint``)::

    state/reducers/checkpoint.cbor    the commit record: every reducer's index object, the
                                      shared-state counts, the kernel's bytes
    state/reducers/flush-plan.cbor    exists only while a flush runs, or after one died
    cas/<2 hex>/<62 hex>              index objects (one per reducer), shard groups (the packed
                                      index shards of one reducer, ≤ 128 KiB a group), states
                                      above ``cell_inline_bytes_max`` (default 1 KiB), snapshots

A shard (one 12-bit key-hash prefix) holds ~250 cells at a million cells, each as its entry's
canonical bytes and, if small, its state. A checkpoint rewrites the dirty shards and the others
of their groups, packed into new groups of up to 128 KiB: one object per dirty group, not one
per dirty cell (format 1) nor per dirty shard (4,096 files for any world of 100,000 cells, at
100-600 µs a file here); at a million cells a group is two ~45 KB shards. A small cell costs
~195 bytes on disk (BENCHMARKS.md, "Cell store"). Opening reads ``checkpoint.cbor``; a
reducer's index object (≤ 4,096 records) is read on first use, a group on first access to a key
in it, and a lookup then decodes one entry (``PackedShard.lookup``). Clean groups and
out-of-line states sit in LRUs bounded by ``shard_cache_bytes_max`` and
``state_cache_bytes_max``, so memory follows the cells touched, not the world; a third
(``key_cache_bytes_max``) keeps the key lists of shards read or written (32 bytes a cell), so a
new cell's first ``get`` needs no group the group LRU let go (a million new cells made ~16,000
such reads, a tenth of the run: BENCHMARKS.md, "New cells cheaper"). Every read is
verified: each object against its name, and the checkpoint against its digest. A file that is
missing, does not match or does not decode is ``StoreDamaged(path, reason)``: derived state,
which the world rebuilds from the journal. ``readonly=True`` writes nothing (no recovery, no
directories; ``flush`` refuses).

Flush protocol (objects are immutable and named by content; the last checkpoint's objects are
never touched while it is the one a crash would come back to):

1. Plan in memory (``world.cellstore._flush``): merge each shard to rewrite, group them, work out
   the objects to write, which of them are new ("created"), and which objects the new
   checkpoint no longer reaches ("garbage"); encode the new ``checkpoint.cbor``.
2. Write ``flush-plan.cbor`` (prev and next checkpoint digests, created, garbage) and every new
   object, without fsync; make the objects durable together (``world._fsutil.sync_paths``: one
   ``sync()`` for a big batch, else an fsync each).
3. Commit: write ``checkpoint.cbor`` atomically (temp, fsync, rename, fsync dir).
4. Collect: unlink the garbage (and a converted format-1 tree); unlink the plan.

That is two fsyncs and one batch sync per checkpoint. The plan is not synced on its own: it
only prevents leaks, and after a power cut a lost or torn plan (its digest says so) leaves
unreferenced objects, never a damaged checkpoint. A writer's open recovers a plan it finds: if
``checkpoint.cbor`` is the plan's "next" the flush committed, and the garbage is unlinked again;
otherwise it never did, and its created objects are unlinked. Either way the world opens at a
whole checkpoint and replays the journal after it. A flush that raises leaves the handle unusable
for further flushes (``StoreFailed``): reopen it, which recovers, and replay from
``last_checkpoint``.

Format 1 (one file per cell, before issue 11) opens as it is, read by
``world.cellstore._legacy``, and its first flush converts the whole store and then removes the
old tree. A checkpoint in any other format is ``StoreDamaged``: never read as something else.

Rejected alternatives, with numbers: ``world.cellstore._shards`` and
``world.cellstore._checkpoint``.

Not here: the world lock (``world._fsutil.lock_world``, taken by whoever opens the world), and
what is never collected (``world.cellstore._flush``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from air import cbor
from air.errors import CborError, InvalidArgument, WrongMode
from kernel.cells import (
    CELL_INLINE_BYTES_MAX,
    KEY_CACHE_BYTES_MAX,
    SHARD_CACHE_BYTES_MAX,
    STATE_CACHE_BYTES_MAX,
    CellEntry,
    Lru,
    check_module,
    check_put,
    index_root_of,
    shard_of,
)
from world._fsutil import StrPath, mkdir_durable
from world.cellstore._checkpoint import FORMAT, LEGACY_FORMAT, Checkpoint, snapshot_of
from world.cellstore._disk import CHECKPOINT_BYTES_MAX, StoreDisk, read_or_none
from world.cellstore._flush import Cell, ModulePlan, Planner, merge_shard, merged_count
from world.cellstore._legacy import LegacyShard, LegacyStore, load_verified, read_verified
from world.cellstore._shards import (
    PackedShard,
    ShardGroup,
    ShardRef,
    entry_from_cbor,
    find_key,
    index_from_object,
    unpack_group,
)
from world.errors import StoreDamaged, StoreFailed

__all__ = ["FileCellStore", "StoreStats"]

_Dirty = dict[bytes, Cell | None]
_Shard = PackedShard | LegacyShard
_Group = ShardGroup | LegacyShard  # what one object read gives (format 1: a lone shard)
_SCRATCH_GROUPS_MAX = 16


@dataclass
class StoreStats:
    """What the store read and decoded (for tests and benchmarks, not for logic)."""

    index_loads: int = 0
    shard_loads: int = 0  # shard group objects read
    state_reads: int = 0
    entries_decoded: int = 0


@dataclass
class _Module:
    raw: bytes  # the module hash, as shard and index objects name it
    committed: dict[int, ShardRef]  # prefix -> (logical root, count, group object)
    dirty: dict[int, _Dirty] = field(default_factory=dict)  # None marks a deletion
    roots: dict[int, tuple[bytes, int]] = field(default_factory=dict)  # of dirty shards
    counts: dict[int, int] = field(default_factory=dict)  # of dirty shards


class FileCellStore:
    """``kernel.cells.CellStore`` over ``state/reducers`` and the CAS (see the module docstring).

    Construct it only while holding the world lock: opening may recover a crashed flush.
    """

    def __init__(
        self,
        world_dir: StrPath,
        *,
        shard_cache_bytes_max: int = SHARD_CACHE_BYTES_MAX,
        state_cache_bytes_max: int = STATE_CACHE_BYTES_MAX,
        key_cache_bytes_max: int = KEY_CACHE_BYTES_MAX,
        cell_inline_bytes_max: int = CELL_INLINE_BYTES_MAX,
        readonly: bool = False,
    ) -> None:
        if cell_inline_bytes_max < 0:
            raise InvalidArgument("cell_inline_bytes_max", cell_inline_bytes_max, "must be >= 0")
        self._disk = StoreDisk(world_dir)
        self.readonly = readonly
        self.cell_inline_bytes_max = cell_inline_bytes_max
        self.stats = StoreStats()
        self._groups: Lru[tuple[str, bytes], _Group] = Lru(
            shard_cache_bytes_max, lambda group: group.weight
        )
        self._scratch: dict[tuple[str, bytes], _Group] = {}  # loaded for one pass, not kept
        # (module, prefix) -> (group object, the shard's key hashes): "not stored" at no read
        self._keys: Lru[tuple[str, int], tuple[bytes, bytes]] = Lru(
            key_cache_bytes_max, lambda pair: len(pair[1])
        )
        self._states: Lru[tuple[str, bytes], tuple[bytes, bytes]] = Lru(
            state_cache_bytes_max, lambda pair: len(pair[1])
        )
        self._mods: dict[str, _Module] = {}
        self._failed = False
        if not readonly:
            mkdir_durable(self._disk.root)
            self._disk.recover()
        self._cp = self._disk.read_checkpoint()
        self._legacy = LegacyStore(self._disk.root) if self._cp.format == LEGACY_FORMAT else None

    # -- reads ---------------------------------------------------------------------------

    def get(self, module: str, key_hash: bytes) -> tuple[CellEntry, bytes] | None:
        mod = self._module(module)
        prefix = shard_of(key_hash)
        dirty = mod.dirty.get(prefix)
        if dirty is not None and key_hash in dirty:
            return dirty[key_hash]
        ref = mod.committed.get(prefix)
        if ref is None:
            return None
        keys = self._keys.get((module, prefix))
        if keys is None or keys[0] != ref[2]:
            keys = None
        elif find_key(keys[1], key_hash) < 0:
            return None  # a cell the shard does not hold: its group is not read
        shard = self._committed_shard(module, mod, prefix)
        if shard is None:
            return None
        if keys is None and isinstance(shard, PackedShard) and ref[2]:
            self._keys.put((module, prefix), (ref[2], shard.keys))
        try:
            found = shard.lookup(key_hash)
        except CborError as exc:
            raise StoreDamaged(self._shard_path(module, mod, prefix), str(exc)) from exc
        if found is None:
            return None
        self.stats.entries_decoded += 1
        entry, state = found
        return entry, self._read_state(module, key_hash, entry) if state is None else state

    def iter_entries(self, module: str) -> Iterator[tuple[bytes, CellEntry]]:
        """Every cell in key-hash order; each group is read once and not kept in the cache."""
        mod = self._module(module)
        for prefix in sorted(mod.committed.keys() | mod.dirty.keys()):
            entries = self._decoded(module, mod, prefix)
            for kh, cell in (mod.dirty.get(prefix) or {}).items():
                if cell is None:
                    entries.pop(kh, None)
                else:
                    entries[kh] = cell[0]
            for kh in sorted(entries):
                yield kh, entries[kh]

    def count(self, module: str) -> int:
        """Committed counts from the index, corrected by the dirty shards (loads those)."""
        mod = self._module(module)
        total = sum(ref[1] for ref in mod.committed.values())
        for prefix in mod.dirty:
            total += self._dirty_count(module, mod, prefix)
            total -= mod.committed[prefix][1] if prefix in mod.committed else 0
        return total

    def modules(self) -> list[str]:
        names = self._cp.roots.keys() | self._mods.keys()
        return sorted(name for name in names if self.count(name))

    def index_root(self, module: str) -> bytes:
        mod = self._module(module)
        roots = {prefix: (ref[0], ref[1]) for prefix, ref in mod.committed.items()}
        for prefix in mod.dirty:
            roots[prefix] = self._dirty_root(module, mod, prefix)
        return index_root_of(roots)

    def dirty_count(self) -> int:
        return sum(len(dirty) for mod in self._mods.values() for dirty in mod.dirty.values())

    def last_checkpoint(self) -> bytes:
        return self._cp.meta

    def checkpoint_modules(self) -> list[str]:
        """The modules (hex) the committed checkpoint holds cells for."""
        return sorted(self._cp.roots)

    @property
    def checkpoint_path(self) -> str:
        return self._disk.checkpoint

    def reachable_objects(self) -> set[bytes]:
        """Every CAS object (raw hash) the committed checkpoint reaches: index objects, shards,
        out-of-line states, the snapshot. Reads every shard: for checks and tools, not hot
        paths (a copy of a world could skip these and let the copy's store write its own)."""
        found: set[bytes] = set()
        snapshot = snapshot_of(self._cp.meta)
        if snapshot is not None:
            found.add(snapshot)
        if self._legacy is not None:
            return found
        for module in self._cp.roots:
            found.add(self._cp.roots[module])
            mod = _Module(bytes.fromhex(module), self._load_index(module))
            for prefix, ref in mod.committed.items():
                if ref[2] in found:
                    continue
                found.add(ref[2])
                group = self._load_group(module, mod, prefix, ref)
                assert isinstance(group, ShardGroup)
                for shard in group.shards():
                    for _kh, data, state in shard.records():
                        entry = None if state else entry_from_cbor(data)
                        if entry is not None and entry.size:
                            found.add(entry.state_hash)
        return found

    @property
    def format(self) -> int:
        """The format of the committed checkpoint: 2, or 1 until a flush converts it."""
        return self._cp.format

    @property
    def checkpoint_digest(self) -> bytes:
        """The digest of the checkpoint this handle reads (to notice a writer's new one)."""
        return cbor.digest(self._cp.data)

    def current_checkpoint_digest(self) -> bytes:
        """The digest of ``checkpoint.cbor`` on disk now (empty bytes hash if absent; empty
        bytes, no digest at all, if something that is not a checkpoint file is there)."""
        try:
            return cbor.digest(read_or_none(self._disk.checkpoint, CHECKPOINT_BYTES_MAX) or b"")
        except StoreDamaged:
            return b""

    # -- writes (memory only until flush) ------------------------------------------------

    def put(self, module: str, key_hash: bytes, entry: CellEntry, state_cbor: bytes) -> None:
        """Memory only, no read: the hot path of a step (the kernel has just read the cell)."""
        check_put(key_hash, entry, state_cbor)
        self._mark(module, key_hash, (entry, bytes(state_cbor)))

    def delete(self, module: str, key_hash: bytes) -> None:
        """Memory only; deleting an absent cell is recorded and changes nothing at flush."""
        self._mark(module, key_hash, None)

    def _mark(self, module: str, key_hash: bytes, cell: Cell | None) -> None:
        mod = self._module(module)
        prefix = shard_of(key_hash)
        mod.dirty.setdefault(prefix, {})[key_hash] = cell
        mod.roots.pop(prefix, None)
        mod.counts.pop(prefix, None)

    def flush(self, checkpoint_cbor: bytes = b"") -> None:
        """Make every put and delete durable, with ``checkpoint_cbor``, as one commit. The first
        flush of a format-1 store converts all of it."""
        if self.readonly:
            raise WrongMode("flush the cell store", "open read-only")
        if self._failed:
            raise StoreFailed(self._disk.root)
        meta = bytes(checkpoint_cbor)
        dirty = any(mod.dirty for mod in self._mods.values())
        if not dirty and meta == self._cp.meta and self._legacy is None:
            return
        try:
            self._flush(meta)
        except BaseException:
            self._failed = True
            raise

    # -- internals: loading ----------------------------------------------------------------

    def _module(self, module: str) -> _Module:
        mod = self._mods.get(module)
        if mod is None:
            check_module(module)
            mod = _Module(bytes.fromhex(module), self._load_index(module))
            self._mods[module] = mod
        return mod

    def _load_index(self, module: str) -> dict[int, ShardRef]:
        root = self._cp.roots.get(module)
        if root is None:
            return {}
        self.stats.index_loads += 1
        if self._legacy is not None:
            return self._legacy.index(module, root)
        path = self._disk.object_path(root)
        try:
            return index_from_object(load_verified(path, root), bytes.fromhex(module))
        except CborError as exc:
            raise StoreDamaged(path, str(exc)) from exc

    def _shard_path(self, module: str, mod: _Module, prefix: int) -> str:
        ref = mod.committed[prefix]
        return self._disk.object_path(ref[2]) if ref[2] else os.path.join(self._disk.root, module)

    def _committed_shard(
        self, module: str, mod: _Module, prefix: int, *, keep: bool = True
    ) -> _Shard | None:
        """The shard as of the last flush; None if it has no cells. Its group is cached in the
        LRU if ``keep``, else only for the pass at hand (iteration, a flush)."""
        ref = mod.committed.get(prefix)
        if ref is None:
            return None
        key = (module, ref[2] or prefix.to_bytes(2, "big"))  # format 1: a group per shard
        group = self._groups.get(key) or self._scratch.get(key)
        if group is None:
            group = self._load_group(module, mod, prefix, ref)
            if keep:
                self._groups.put(key, group)
            else:
                if len(self._scratch) >= _SCRATCH_GROUPS_MAX:
                    del self._scratch[next(iter(self._scratch))]
                self._scratch[key] = group
        try:
            shard = group if isinstance(group, LegacyShard) else group.get(prefix)
        except CborError as exc:
            raise StoreDamaged(self._shard_path(module, mod, prefix), str(exc)) from exc
        if shard is None or shard.count != ref[1]:
            found = 0 if shard is None else shard.count
            path = self._shard_path(module, mod, prefix)
            raise StoreDamaged(path, f"{found} cells of shard {prefix}, the index says {ref[1]}")
        return shard

    def _load_group(self, module: str, mod: _Module, prefix: int, ref: ShardRef) -> _Group:
        self.stats.shard_loads += 1
        root, _count, raw = ref
        if self._legacy is not None:
            return self._legacy.shard(module, prefix, root)
        path = self._disk.object_path(raw)
        try:
            return unpack_group(load_verified(path, raw), mod.raw)
        except CborError as exc:
            raise StoreDamaged(path, str(exc)) from exc

    def _decoded(self, module: str, mod: _Module, prefix: int) -> dict[bytes, CellEntry]:
        """Every committed entry of one shard, decoded (for iteration)."""
        shard = self._committed_shard(module, mod, prefix, keep=False)
        if shard is None:
            return {}
        if isinstance(shard, LegacyShard):
            return dict(shard.entries)
        try:
            out = {kh: entry_from_cbor(data) for kh, data, _state in shard.records()}
        except CborError as exc:
            raise StoreDamaged(self._shard_path(module, mod, prefix), str(exc)) from exc
        self.stats.entries_decoded += len(out)
        return out

    def _dirty_root(self, module: str, mod: _Module, prefix: int) -> tuple[bytes, int]:
        pair = mod.roots.get(prefix)
        if pair is None:
            shard = self._committed_shard(module, mod, prefix)
            if isinstance(shard, LegacyShard):
                shard = PackedShard.build(*shard.columns())
            merged = merge_shard(shard, mod.dirty[prefix], self.cell_inline_bytes_max)
            pair = mod.roots[prefix] = (merged.root, merged.view.count if merged.view else 0)
        return pair

    def _dirty_count(self, module: str, mod: _Module, prefix: int) -> int:
        count = mod.counts.get(prefix)
        if count is None:
            shard = self._committed_shard(module, mod, prefix)
            base = 0 if shard is None else shard.count
            contains = frozenset().__contains__ if shard is None else shard.contains
            count = mod.counts[prefix] = merged_count(base, contains, mod.dirty[prefix])
        return count

    def _read_state(self, module: str, key_hash: bytes, entry: CellEntry) -> bytes:
        """An out-of-line state: a CAS object (or a format-1 cell file), verified."""
        cached = self._states.get((module, key_hash))
        if cached is not None and cached[0] == entry.state_hash:
            return cached[1]
        self.stats.state_reads += 1
        if self._legacy is not None:
            state_cbor = self._legacy.state(module, key_hash, entry)
        else:
            state_cbor = read_verified(self._disk.object_path(entry.state_hash), entry.state_hash)
        self._states.put((module, key_hash), (entry.state_hash, state_cbor))
        return state_cbor

    # -- internals: flush ------------------------------------------------------------------

    def _flush(self, meta: bytes) -> None:
        planner = Planner(self._cp, self.cell_inline_bytes_max, self._disk.holds)
        legacy = self._legacy is not None
        names = {name for name, mod in self._mods.items() if mod.dirty}
        roots = {} if legacy else dict(self._cp.roots)
        plans: dict[str, ModulePlan] = {}
        for name in sorted(names | (self._cp.roots.keys() if legacy else set())):
            mod = self._module(name)
            plans[name] = plan = self._plan_module(planner, name, mod)
            old_index = None if legacy else self._cp.roots.get(name)
            roots[name], plan.committed = planner.index(
                mod.raw, mod.committed, plan.changed, old_index
            )
        data, flush_plan = planner.finish(meta, roots)
        self._disk.write(flush_plan, planner.writes)
        self._disk.commit(data)
        self._cp = Checkpoint(data, meta, roots, planner.shared, FORMAT)
        self._legacy = None
        self._apply(plans, legacy=legacy)
        self._disk.collect(flush_plan.garbage, legacy=legacy)

    def _plan_module(self, planner: Planner, name: str, mod: _Module) -> ModulePlan:
        legacy = self._legacy

        def load(prefix: int) -> tuple[PackedShard | None, dict[bytes, Cell | None]]:
            base = self._committed_shard(name, mod, prefix, keep=False)
            if not isinstance(base, LegacyShard):
                return base, {}
            assert legacy is not None  # conversion: every cell is placed anew
            return None, {kh: (e, legacy.state(name, kh, e)) for kh, e in base.entries.items()}

        return planner.module(mod.raw, mod.committed, mod.dirty, load, convert=legacy is not None)

    def _apply(self, plans: dict[str, ModulePlan], *, legacy: bool) -> None:
        self._scratch.clear()
        if legacy:
            self._groups.clear()
        for name, plan in plans.items():
            mod = self._mods[name]
            mod.committed = plan.committed
            for raw in plan.replaced:
                self._groups.pop((name, raw))
            for raw, group in plan.groups.items():
                self._groups.put((name, raw), ShardGroup(group))
                for prefix, shard in group.items():
                    self._keys.put((name, prefix), (raw, shard.keys))
            for kh, state_hash, state_cbor in plan.out_of_line:
                self._states.put((name, kh), (state_hash, state_cbor))
            mod.dirty.clear()
            mod.roots.clear()
            mod.counts.clear()
