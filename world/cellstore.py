"""The file ``CellStore``: cell state files and a sharded index under ``<world>/state/reducers``.

The journal is the source of truth; these files are its checkpointed materialisation (SPEC §7).
``put``/``delete`` only touch memory (a dirty map); ``flush`` writes one checkpoint for every
reducer at once, with the kernel's ``checkpoint_cbor`` (e.g. the journal seq it covers) in the
same commit. After a crash the store opens at the last flush and the kernel replays from there.

Layout (``kernel.cells`` defines the index and shard formats)::

    state/reducers/
      checkpoint.cbor        commit record {format, checkpoint, modules: {module hex: index root}}
      flush-intent.cbor      exists only while a flush runs, or after one crashed
      <module hex>/
        index.cbor           {format, shard_bits: 12, shards: {prefix: [shard root, count]}}
        index/<3 hex prefix>.<shard root hex>.cbor                 one of 4096 index shards
        cells/<2 hex>/<key hash hex>.<state hash hex>.cbor         one cell's state_cbor

Opening reads ``checkpoint.cbor``; a reducer's ``index.cbor`` (≤ 4096 short records) is read on
first use, and a shard (~250 entries at a million cells) on first access to a key in it. Clean
shards and clean states sit in LRUs bounded by ``SHARD_CACHE_ENTRIES_MAX`` index entries and
``STATE_CACHE_BYTES_MAX`` bytes, so memory follows the active cells, not all cells. ``put`` and
``delete`` never read: they only mark the cell dirty, so a step costs no I/O until ``flush``.
Every read is verified: ``index.cbor`` against its root in the checkpoint, a shard against its
root in ``index.cbor``, a cell file against its ``state_hash``. A file that is missing, does
not match or does not decode is ``StoreDamaged(path, reason)``: derived state, which the world
rebuilds from the journal. ``readonly=True`` writes nothing (no recovery of a crashed flush, no
directories; ``flush`` refuses) and reads ``index.next.cbor`` when a live writer has committed a
checkpoint but not yet renamed it into place.

Flush protocol (cell and shard files are immutable and named by content, so the files of the
last checkpoint are never overwritten while it is still the one a crash would come back to):

1. ``flush-intent.cbor`` (atomic, durable): the checkpoint's hash before this flush, and per
   reducer the changed cells as (key hash, new state hash, old state hash).
2. Write the new shard and cell files and ``index.next.cbor`` per reducer, without fsync;
   then make them durable together (``world.fsutil.sync_paths``: one ``sync()`` for a batch).
3. Commit: write ``checkpoint.cbor`` atomically (temp, fsync, rename, fsync dir).
4. Rename each ``index.next.cbor`` over ``index.cbor``; unlink superseded cell and shard files;
   unlink the intent.

Opening with an intent present recovers: if ``checkpoint.cbor`` still has the intent's "before"
hash the flush never committed, so its new files are deleted; otherwise step 4 is redone. A
flush that raises leaves the handle unusable for further flushes (``StoreFailed``): reopen it,
which recovers, and replay the journal from ``last_checkpoint``.

Rejected: naming cell files by key hash only (``cells/<key hash>.cbor``) and rewriting them in
place. A crash after a cell file is rewritten but before the index commits leaves the last
checkpoint pointing at bytes that no longer exist; verification would catch it but the state to
replay from would be gone. Rejected too: one ``index.cbor`` holding every entry (~120 MB at a
million cells, rewritten on every flush and read whole on open), and one index per reducer as
the commit point (a crash between two reducers' commits would split the checkpoint).

Not here: the world lock (``world.fsutil.lock_world``, taken by whoever opens the world), and
garbage beyond one crashed flush (files orphaned by an OS that reorders unlinks are harmless).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import cbor2

from air import cbor
from air.errors import CborError, StoreDamaged, WorldError, WrongMode
from kernel.cells import (
    INDEX_SHARD_BITS,
    SHARD_CACHE_ENTRIES_MAX,
    STATE_CACHE_BYTES_MAX,
    CellEntry,
    Lru,
    check_module,
    check_put,
    encode_index,
    encode_shard,
    index_from_obj,
    index_root_of,
    shard_from_obj,
    shard_of,
)
from world import fileio
from world.fsutil import TMP_SUFFIX, StrPath, atomic_write, fsync_dir, sync_paths, write_unsynced

__all__ = ["FileCellStore", "StoreFailed", "StoreStats"]

REDUCERS_DIR: Final = ("state", "reducers")
CHECKPOINT_NAME: Final = "checkpoint.cbor"
INTENT_NAME: Final = "flush-intent.cbor"
INDEX_NAME: Final = "index.cbor"
INDEX_NEXT_NAME: Final = "index.next.cbor"
_FORMAT: Final = 1
_NO_HASH: Final = bytes(32)
_RECORD_BYTES: Final = 96
_PREFIX_HEX: Final = (INDEX_SHARD_BITS + 3) // 4

_Cell = tuple[CellEntry, bytes]
_Dirty = dict[bytes, _Cell | None]
_Shards = dict[int, tuple[bytes, int]]


class StoreFailed(WorldError):
    """A flush of the store at ``path`` failed earlier; reopen the store to recover."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"a flush failed earlier; reopen the cell store at {path}")


@dataclass
class StoreStats:
    """What the store read from disk (for tests and benchmarks, not for logic)."""

    index_loads: int = 0
    shard_loads: int = 0
    cell_reads: int = 0


@dataclass
class _Module:
    committed: _Shards  # as in index.cbor: prefix -> (shard root, count)
    dirty: dict[int, _Dirty] = field(default_factory=dict)  # None marks a deletion
    roots: dict[int, tuple[bytes, int]] = field(default_factory=dict)  # of dirty shards, cached


@dataclass(frozen=True)
class _Checkpoint:
    data: bytes
    meta: bytes
    roots: dict[str, bytes]


@dataclass
class _Plan:
    module: str
    shards: dict[int, dict[bytes, CellEntry]] = field(default_factory=dict)
    old_shards: dict[int, bytes] = field(default_factory=dict)
    writes: list[tuple[bytes, bytes, bytes]] = field(default_factory=list)
    records: bytearray = field(default_factory=bytearray)
    committed: _Shards = field(default_factory=dict)


class _Layout:
    def __init__(self, root: str) -> None:
        self.root = root
        self.checkpoint = os.path.join(root, CHECKPOINT_NAME)
        self.intent = os.path.join(root, INTENT_NAME)

    def module(self, module: str) -> str:
        return os.path.join(self.root, module)

    def index(self, module: str, name: str = INDEX_NAME) -> str:
        return os.path.join(self.root, module, name)

    def shard_dir(self, module: str) -> str:
        return os.path.join(self.root, module, "index")

    def shard(self, module: str, prefix: int, root: bytes) -> str:
        return os.path.join(self.root, module, "index", _shard_name(prefix, root))

    def cell(self, module: str, key_hash: bytes, state_hash: bytes) -> str:
        kh = key_hash.hex()
        return os.path.join(self.root, module, "cells", kh[:2], f"{kh}.{state_hash.hex()}.cbor")


def _shard_name(prefix: int, root: bytes) -> str:
    return f"{prefix:0{_PREFIX_HEX}x}.{root.hex()}.cbor"


def _read_verified(path: str, expected: bytes) -> bytes:
    """The bytes of ``path``, which must hash to ``expected``; ``StoreDamaged`` otherwise."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError as exc:
        raise StoreDamaged(path, "missing") from exc
    actual = cbor.digest(data)
    if actual != expected:
        raise StoreDamaged(
            path,
            f"content hash {cbor.raw_to_hash(actual)}, expected {cbor.raw_to_hash(expected)}",
        )
    return data


def _load_verified(path: str, expected: bytes) -> Any:
    """Read and decode index or shard bytes whose digest must be ``expected``.

    The strict ``air.cbor.loads`` is skipped on purpose: matching the root proves these are the
    canonical bytes this store encoded, and the strict decode (decode, re-encode, compare) costs
    about 12x a plain decode, which dominates opening a shard.
    """
    data = _read_verified(path, expected)
    try:
        return cbor2.loads(data)
    except (ValueError, cbor2.CBORDecodeError) as exc:  # the writer's own bytes: cannot happen
        raise StoreDamaged(path, f"not CBOR: {exc}") from exc


def _index(path: str, root: bytes) -> _Shards:
    try:
        return index_from_obj(_load_verified(path, root))
    except CborError as exc:
        raise StoreDamaged(path, str(exc)) from exc


def _decode_checkpoint(data: bytes) -> _Checkpoint:
    obj = cbor.loads(data)
    if (
        not isinstance(obj, dict)
        or obj.get("format") != _FORMAT
        or not isinstance(obj.get("checkpoint"), bytes)
        or not isinstance(obj.get("modules"), dict)
        or not obj.keys() <= {"format", "checkpoint", "modules", "digest"}
    ):
        raise CborError("/", "checkpoint.format", "not a format-1 cell checkpoint")
    for module, root in obj["modules"].items():
        if not isinstance(module, str) or not isinstance(root, bytes) or len(root) != 32:
            raise CborError(f"/modules/{module}", "checkpoint.format", "bad module root")
    # Checkpoints written before the digest existed have none; every new one does.
    if "digest" in obj and obj["digest"] != _checkpoint_digest(obj["checkpoint"], obj["modules"]):
        raise CborError("/digest", "checkpoint.digest", "checkpoint does not match its digest")
    return _Checkpoint(data, obj["checkpoint"], dict(obj["modules"]))


def _checkpoint_digest(meta: bytes, roots: dict[str, bytes]) -> bytes:
    return cbor.digest(cbor.dumps({"format": _FORMAT, "checkpoint": meta, "modules": roots}))


def _encode_checkpoint(meta: bytes, roots: dict[str, bytes]) -> bytes:
    return cbor.dumps(
        {
            "format": _FORMAT,
            "checkpoint": meta,
            "modules": roots,
            "digest": _checkpoint_digest(meta, roots),
        }
    )


def _unpack_records(data: bytes) -> Iterator[tuple[bytes, bytes, bytes]]:
    for at in range(0, len(data), _RECORD_BYTES):
        yield data[at : at + 32], data[at + 32 : at + 64], data[at + 64 : at + 96]


class FileCellStore:
    """``kernel.cells.CellStore`` over ``<world>/state/reducers`` (see the module docstring).

    Construct it only while holding the world lock: opening may recover a crashed flush.
    """

    def __init__(
        self,
        world_dir: StrPath,
        *,
        shard_cache_entries_max: int = SHARD_CACHE_ENTRIES_MAX,
        state_cache_bytes_max: int = STATE_CACHE_BYTES_MAX,
        readonly: bool = False,
    ) -> None:
        root = os.path.join(os.fspath(world_dir), *REDUCERS_DIR)
        self.readonly = readonly
        if not readonly:
            fileio.mkdir(root, parents=True, exist_ok=True)
        self._layout = _Layout(root)
        self.stats = StoreStats()
        self._shards: Lru[tuple[str, int], dict[bytes, CellEntry]] = Lru(
            shard_cache_entries_max, len
        )
        self._states: Lru[tuple[str, bytes], tuple[bytes, bytes]] = Lru(
            state_cache_bytes_max, lambda pair: len(pair[1])
        )
        self._mods: dict[str, _Module] = {}
        self._known_dirs: set[str] = set()
        self._failed = False
        if not readonly:
            self._recover()
        self._cp = self._read_checkpoint()

    # -- reads ---------------------------------------------------------------------------

    def get(self, module: str, key_hash: bytes) -> tuple[CellEntry, bytes] | None:
        mod = self._module(module)
        dirty = mod.dirty.get(shard_of(key_hash))
        if dirty is not None and key_hash in dirty:
            return dirty[key_hash]
        entry = self._committed_shard(module, mod, shard_of(key_hash)).get(key_hash)
        if entry is None:
            return None
        return entry, self._read_state(module, key_hash, entry)

    def iter_entries(self, module: str) -> Iterator[tuple[bytes, CellEntry]]:
        """Every cell in key-hash order; shards are loaded one at a time and not cached."""
        mod = self._module(module)
        for prefix in sorted(mod.committed.keys() | mod.dirty.keys()):
            merged = self._merged_shard(module, mod, prefix, keep=False)
            for kh in sorted(merged):
                yield kh, merged[kh]

    def count(self, module: str) -> int:
        """Committed counts from ``index.cbor``, corrected by the dirty shards (loads those)."""
        mod = self._module(module)
        total = sum(count for _root, count in mod.committed.values())
        for prefix in mod.dirty:
            total += self._current_root(module, mod, prefix)[1]
            total -= mod.committed.get(prefix, (b"", 0))[1]
        return total

    def modules(self) -> list[str]:
        names = self._cp.roots.keys() | self._mods.keys()
        return sorted(name for name in names if self.count(name))

    def index_root(self, module: str) -> bytes:
        mod = self._module(module)
        roots = dict(mod.committed)
        for prefix in mod.dirty:
            roots[prefix] = self._current_root(module, mod, prefix)
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
        return self._layout.checkpoint

    # -- writes (memory only until flush) ------------------------------------------------

    def put(self, module: str, key_hash: bytes, entry: CellEntry, state_cbor: bytes) -> None:
        """Memory only, no read: the hot path of a step (the kernel has just read the cell)."""
        check_put(key_hash, entry, state_cbor)
        self._mark(module, key_hash, (entry, bytes(state_cbor)))

    def delete(self, module: str, key_hash: bytes) -> None:
        """Memory only; deleting an absent cell is recorded and changes nothing at flush."""
        self._mark(module, key_hash, None)

    def _mark(self, module: str, key_hash: bytes, cell: _Cell | None) -> None:
        mod = self._module(module)
        prefix = shard_of(key_hash)
        mod.dirty.setdefault(prefix, {})[key_hash] = cell
        mod.roots.pop(prefix, None)

    def flush(self, checkpoint_cbor: bytes = b"") -> None:
        """Make every put and delete durable, with ``checkpoint_cbor``, as one commit."""
        if self.readonly:
            raise WrongMode("flush the cell store", "open read-only")
        if self._failed:
            raise StoreFailed(self._layout.root)
        plans = [self._plan(name, mod) for name, mod in self._mods.items() if mod.dirty]
        if not plans and checkpoint_cbor == self._cp.meta:
            return
        try:
            self._flush(plans, bytes(checkpoint_cbor))
        except BaseException:
            self._failed = True
            raise

    # -- internals: loading ----------------------------------------------------------------

    def _read_checkpoint(self) -> _Checkpoint:
        path = self._layout.checkpoint
        try:
            with open(path, "rb") as handle:
                return _decode_checkpoint(handle.read())
        except FileNotFoundError:
            return _Checkpoint(b"", b"", {})
        except CborError as exc:
            raise StoreDamaged(path, f"not a cell checkpoint: {exc}") from exc

    @property
    def checkpoint_digest(self) -> bytes:
        """The digest of the checkpoint this handle reads (to notice a writer's new one)."""
        return cbor.digest(self._cp.data)

    def current_checkpoint_digest(self) -> bytes:
        """The digest of ``checkpoint.cbor`` on disk now (empty bytes hash if absent)."""
        try:
            with open(self._layout.checkpoint, "rb") as handle:
                return cbor.digest(handle.read())
        except FileNotFoundError:
            return cbor.digest(b"")

    def _module(self, module: str) -> _Module:
        mod = self._mods.get(module)
        if mod is None:
            check_module(module)
            mod = _Module(self._load_index(module))
            self._mods[module] = mod
        return mod

    def _load_index(self, module: str) -> _Shards:
        root = self._cp.roots.get(module)
        if root is None:
            return {}
        self.stats.index_loads += 1
        path = self._layout.index(module)
        if self.readonly and os.path.exists(self._layout.intent):
            # A writer between its commit and renaming index.next.cbor over index.cbor.
            nxt = self._layout.index(module, INDEX_NEXT_NAME)
            with contextlib.suppress(StoreDamaged):
                return _index(nxt, root)
        return _index(path, root)

    def _committed_shard(
        self, module: str, mod: _Module, prefix: int, *, keep: bool = True
    ) -> dict[bytes, CellEntry]:
        """The shard as of the last flush. Callers must not mutate it (it may be cached)."""
        pair = mod.committed.get(prefix)
        if pair is None:
            return {}
        shard = self._shards.get((module, prefix))
        if shard is None:
            self.stats.shard_loads += 1
            path = self._layout.shard(module, prefix, pair[0])
            try:
                shard = shard_from_obj(_load_verified(path, pair[0]), prefix)
            except CborError as exc:
                raise StoreDamaged(path, str(exc)) from exc
            if keep:
                self._shards.put((module, prefix), shard)
        return shard

    def _merged_shard(
        self, module: str, mod: _Module, prefix: int, *, keep: bool = True
    ) -> dict[bytes, CellEntry]:
        base = self._committed_shard(module, mod, prefix, keep=keep)
        dirty = mod.dirty.get(prefix)
        if not dirty:
            return base
        merged = dict(base)
        for kh, cell in dirty.items():
            if cell is None:
                merged.pop(kh, None)
            else:
                merged[kh] = cell[0]
        return merged

    def _current_root(self, module: str, mod: _Module, prefix: int) -> tuple[bytes, int]:
        pair = mod.roots.get(prefix)
        if pair is None:
            merged = self._merged_shard(module, mod, prefix)
            pair = (cbor.digest(encode_shard(merged)), len(merged)) if merged else (b"", 0)
            mod.roots[prefix] = pair
        return pair

    def _read_state(self, module: str, key_hash: bytes, entry: CellEntry) -> bytes:
        cached = self._states.get((module, key_hash))
        if cached is not None and cached[0] == entry.state_hash:
            return cached[1]
        self.stats.cell_reads += 1
        path = self._layout.cell(module, key_hash, entry.state_hash)
        state_cbor = _read_verified(path, entry.state_hash)
        self._states.put((module, key_hash), (entry.state_hash, state_cbor))
        return state_cbor

    # -- internals: flush ------------------------------------------------------------------

    def _plan(self, module: str, mod: _Module) -> _Plan:
        """What this flush changes for ``module``: merged dirty shards and changed cell files."""
        plan = _Plan(module)
        for prefix, dirty in mod.dirty.items():
            base = self._committed_shard(module, mod, prefix, keep=False)
            merged = dict(base)
            for kh, cell in dirty.items():
                if cell is None:
                    merged.pop(kh, None)
                else:
                    merged[kh] = cell[0]
                _plan_cell(plan, kh, base.get(kh), cell)
            plan.shards[prefix] = merged
            if prefix in mod.committed:
                plan.old_shards[prefix] = mod.committed[prefix][0]
        return plan

    def _flush(self, plans: list[_Plan], meta: bytes) -> None:
        intent = {
            "format": _FORMAT,
            "prev": cbor.digest(self._cp.data),
            "modules": {plan.module: bytes(plan.records) for plan in plans},
        }
        atomic_write(self._layout.intent, cbor.dumps(intent))
        written: list[str] = []
        dirs: set[str] = set()
        for plan in plans:
            self._write_plan(plan, written, dirs)
        sync_paths(written, dirs)
        self._commit(plans, meta)
        self._finish(plans)

    def _write_plan(self, plan: _Plan, written: list[str], dirs: set[str]) -> None:
        module, layout = plan.module, self._layout
        plan.committed = dict(self._mods[module].committed)
        for prefix, merged in plan.shards.items():
            plan.committed.pop(prefix, None)
            if not merged:
                continue
            data = encode_shard(merged)
            root = cbor.digest(data)
            plan.committed[prefix] = (root, len(merged))
            if root != plan.old_shards.get(prefix):
                self._write_new(layout.shard(module, prefix, root), data, written, dirs)
        for kh, state_hash, state_cbor in plan.writes:
            self._write_new(layout.cell(module, kh, state_hash), state_cbor, written, dirs)
        doc = encode_index(plan.committed)
        self._write_new(layout.index(module, INDEX_NEXT_NAME), doc, written, dirs)

    def _write_new(self, path: str, data: bytes, written: list[str], dirs: set[str]) -> None:
        parent = os.path.dirname(path)
        if parent not in self._known_dirs:
            fileio.mkdir(parent, parents=True, exist_ok=True)
            self._known_dirs.add(parent)
            at = parent
            while at != self._layout.root:  # a new directory's entry lives in its parent
                at = os.path.dirname(at)
                dirs.add(at)
        write_unsynced(path, data)
        written.append(path)
        dirs.add(parent)

    def _commit(self, plans: list[_Plan], meta: bytes) -> None:
        roots = dict(self._cp.roots)
        for plan in plans:
            roots[plan.module] = index_root_of(plan.committed)
        data = _encode_checkpoint(meta, roots)
        atomic_write(self._layout.checkpoint, data)
        self._cp = _Checkpoint(data, meta, roots)
        for plan in plans:
            self._apply(plan)

    def _apply(self, plan: _Plan) -> None:
        mod = self._mods[plan.module]
        mod.committed = plan.committed
        mod.dirty.clear()
        mod.roots.clear()
        for prefix, merged in plan.shards.items():
            if merged:
                self._shards.put((plan.module, prefix), merged)
            else:
                self._shards.pop((plan.module, prefix))
        for kh, state_hash, state_cbor in plan.writes:
            self._states.put((plan.module, kh), (state_hash, state_cbor))

    def _finish(self, plans: list[_Plan]) -> None:
        layout = self._layout
        for plan in plans:
            _replace(layout.index(plan.module, INDEX_NEXT_NAME), layout.index(plan.module))
            fsync_dir(layout.module(plan.module))
        for plan in plans:
            for kh, _new, old in _unpack_records(bytes(plan.records)):
                if old != _NO_HASH:
                    _unlink(layout.cell(plan.module, kh, old))
            for prefix, old_root in plan.old_shards.items():
                if plan.committed.get(prefix, (b"", 0))[0] != old_root:
                    _unlink(layout.shard(plan.module, prefix, old_root))
        _unlink(layout.intent)
        fsync_dir(layout.root)

    # -- internals: recovery ---------------------------------------------------------------

    def _recover(self) -> None:
        """Finish or undo a flush that a crash interrupted (see the module docstring)."""
        for name in os.listdir(self._layout.root):
            if name.endswith(TMP_SUFFIX):
                _unlink(os.path.join(self._layout.root, name))
        try:
            with open(self._layout.intent, "rb") as handle:
                intent = _decode_intent(handle.read())
        except FileNotFoundError:
            return
        except CborError as exc:
            raise StoreDamaged(self._layout.intent, str(exc)) from exc
        checkpoint = self._read_checkpoint()
        committed = cbor.digest(checkpoint.data) != intent["prev"]
        for module, records in intent["modules"].items():
            self._recover_module(module, records, committed, checkpoint)
        sync_paths((), (), force=True)  # the undo/redo must be durable before the intent goes
        _unlink(self._layout.intent)
        fsync_dir(self._layout.root)

    def _recover_module(
        self, module: str, records: bytes, committed: bool, checkpoint: _Checkpoint
    ) -> None:
        layout = self._layout
        for kh, new, old in _unpack_records(records):
            victim = old if committed else new
            if victim != _NO_HASH:
                _unlink(layout.cell(module, kh, victim))
        if committed and os.path.exists(layout.index(module, INDEX_NEXT_NAME)):
            _replace(layout.index(module, INDEX_NEXT_NAME), layout.index(module))
        _unlink(layout.index(module, INDEX_NEXT_NAME))
        live: _Shards = {}
        root = checkpoint.roots.get(module)
        if root is not None:
            live = _index(layout.index(module), root)
        keep = {_shard_name(prefix, shard_root) for prefix, (shard_root, _n) in live.items()}
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(layout.shard_dir(module)):
                if name not in keep:
                    _unlink(os.path.join(layout.shard_dir(module), name))


def _plan_cell(plan: _Plan, key_hash: bytes, old: CellEntry | None, cell: _Cell | None) -> None:
    old_hash = _NO_HASH if old is None else old.state_hash
    new_hash = _NO_HASH if cell is None else cell[0].state_hash
    if old_hash == new_hash:
        return
    plan.records += key_hash + new_hash + old_hash
    if cell is not None:
        plan.writes.append((key_hash, new_hash, cell[1]))


def _decode_intent(data: bytes) -> dict[str, Any]:
    obj = cbor.loads(data)
    if (
        not isinstance(obj, dict)
        or obj.get("format") != _FORMAT
        or not isinstance(obj.get("prev"), bytes)
        or not isinstance(obj.get("modules"), dict)
    ):
        raise CborError("/", "intent.format", "not a format-1 flush intent")
    for module, records in obj["modules"].items():
        check_module(module)
        if not isinstance(records, bytes) or len(records) % _RECORD_BYTES:
            raise CborError(f"/modules/{module}", "intent.format", "bad cell records")
    return obj


def _replace(source: str, target: str) -> None:
    fileio.replace(source, target)


def _unlink(path: str) -> None:
    fileio.unlink(path, missing_ok=True)
