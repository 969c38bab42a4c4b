"""The world directory and its API: create, open, send, step, run, inspect, snapshot, close.

Layout (SPEC §7)::

    <world>/air/sources.json        the AIR documents as authored (file name + text), and
                                    the wasm path -> hash map; the binaries live in the CAS
    <world>/air/manifest.cbor       the canonical manifest (its hash is in the genesis record)
    <world>/cas/                    content-addressed store (wasm, AIR defs, snapshots, and
                                    the cell store's index and shard-group objects and
                                    states too large to inline: ``world.cellstore._store``)
    <world>/journal/                the journal segments: the source of truth
    <world>/state/reducers/checkpoint.cbor   the cell store's commit record: a checkpoint
    <world>/snapshots/latest        the hash of the newest snapshot object in the CAS
    <world>/cache/                  compiled modules, keyed by wasm hash and engine
                                    fingerprint; ``history/``, the cell history index

Durability: every public call that changes the world commits the journal before returning
(one group commit per call). Cell states and the index are written only at a snapshot, together
with the snapshot object (the kernel's scheduler, mailboxes and dead letters) in one atomic
checkpoint; the store is never ahead of the durable journal, because the journal is committed
first. Opening = load the checkpoint, then re-execute the journal records after it, checking
every step against what the journal says it produced.

Opening never rewrites history: a torn tail record (a crash mid-append) is dropped by the
journal; any other damage refuses to open and points at ``world journal verify``.

Failure rules (issue 7):

* **Derived state never loses or blocks.** The checkpoint, index, shards, cell states and the
  snapshot object are materialised from the journal. If one is missing or damaged
  (``StoreDamaged``, at open or when a step reads it), the world says so once in
  ``notices``, naming the file, and rebuilds from genesis: a writer moves the damaged store
  aside and writes a fresh checkpoint; a reader rebuilds in memory and writes nothing.
* **Memory never runs ahead of the journal into a checkpoint.** The kernel's memory is
  trusted (``stale`` is None) while it equals the journal's records, committed or pending.
  A failed commit (the journal rolls the batch back) or an exception in the middle of a tick
  (``Kernel.consistent`` False) makes it stale: the world then refuses further work, writes
  no checkpoint on close, and the next open rebuilds from the last checkpoint and the journal.
* **A checkpoint is never a reason to fail.** ``close`` checkpoints when the world is trusted;
  if that fails (a full disk), the command's durable work still stands: it is a notice.
* **Interrupts stop at a tick boundary.** ``interrupt()`` (for signal handlers) makes a
  running loop commit and raise ``Interrupted(seq_next)`` before its next tick.
* **Readers write nothing.** ``World.open(path, readonly=True)`` takes the shared lock,
  opens every store read-only, re-executes the journal tail in memory, and never checkpoints:
  it works beside a live writer (seeing what it committed), on a full disk and on a read-only
  file system.
* **Readers survive checkpoints.** A live writer's checkpoint replaces the one a reader loaded
  and collects the objects only the old one used. A reader that then misses one reopens in
  place (``read``): it looks at the journal again, takes the newest checkpoint and re-executes
  the journal after it, as ``open`` does, and reads again; after ``READER_RETRIES_MAX``
  reopens in one read it rebuilds from the journal alone, in memory, which no writer can move.
  So ``CheckpointMoved`` never leaves the handle. What a reader sees: each read (``state``,
  ``cell_count``, ``info``, a ``cells_page`` through ``read``) is one consistent view, the
  world at one journal position, the one the reader opened or last reopened at; a reopen moves
  it forward, to what the writer had committed, never back. An iteration of ``cells`` is
  consistent per cell, not as a whole: each cell with its state at one position, in key-hash
  order, each cell at most once, the positions never going back; after a reopen it goes on
  after the last cell it gave, so a cell created behind it is not seen, nor one deleted ahead
  of it. The journal never moves under a reader (a writer only appends), so tails and time
  travel, which read the journal, go on from their seq whatever the writer checkpoints.
* **The journal is named when it is missing.** ``air/sources.json`` without a ``journal/``
  folder is a ``StorageError`` naming ``journal/`` (``ENOENT``, or ``ENOTDIR`` for a file in
  its place), and a journal without even its genesis record is ``JournalCorrupt``: nothing
  rebuilds a world's history, so neither is called "not a world" nor "another manifest".
* **Creation is atomic.** ``init`` builds the world in a hidden sibling folder and renames it
  into place, so a crash leaves either no world or a whole one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from air import AirSource, LoadedAir, cbor, load_air
from air.errors import InvalidArgument, LimitExceeded, WorldError, WrongMode
from kernel import Kernel, KernelLimits, Outgoing, Partition
from kernel.cells import CellStore, MemoryCellStore
from kernel.journal import MemoryJournal
from world import _fileio as fileio
from world import _reading
from world._airfiles import air_sources, bind_module_wasm, builtin_sources, inspect_wasm
from world._airfiles import read_file as _read_file
from world._airstore import air_loader
from world._cas import FileCas
from world._directory import (
    INIT_INFIX,
    build_world,
    check_directory,
    load_world_air,
    read_sources,
    recover_swap,
    remove_leftovers,
    remove_tree,
    swapped_in,
)
from world._event_ids import EventIds
from world._fsutil import WorldLock, atomic_write, lock_world, mkdir_durable, sync_tree
from world._reading import CellView
from world._recovery import Recovered, Recovery
from world._runner import HostRunner, check_modules
from world.cellstore import FileCellStore
from world.errors import (
    CheckpointMoved,
    EventRejected,
    Interrupted,
    JournalReplaced,
    StorageError,
    StoreDamaged,
    WorldExists,
    WorldStale,
    storage_errors,
)
from world.history.index import HistoryWriter
from world.journal import FileJournal

__all__ = [
    "CLOSE_CHECKPOINT_RECORDS",
    "COMMIT_EVERY_STEPS",
    "READER_RETRIES_MAX",
    "SNAPSHOT_DIRTY_MAX",
    "SNAPSHOT_RECORDS_MAX",
    "World",
]

SNAPSHOT_DIRTY_MAX: Final = 200_000
"""Checkpoint automatically once this many cells are dirty (bounds memory and replay time)."""
SNAPSHOT_RECORDS_MAX: Final = 500_000
"""Checkpoint automatically once the journal has grown this many records past the last
checkpoint, however few cells are dirty, so the replay at the open after a crash is bounded (as
PostgreSQL's ``max_wal_size`` bounds its redo). A hot world never reaches ``SNAPSHOT_DIRTY_MAX``:
1,000,000 events over 10,000 cells were 2,000,000 records to re-apply at the next open, over a
minute here; now at most ~500,000 (~20 s), for a checkpoint of ~0.1 s every 250,000 events."""
COMMIT_EVERY_STEPS: Final = 4096
CLOSE_CHECKPOINT_RECORDS: Final = 1024
"""``close`` checkpoints when cells are dirty or the journal grew this many records past the
last checkpoint. So a ``world send`` of a few events closes without one (a checkpoint is a
dozen fsyncs, ~50 ms here, more than the send), and the next open re-applies at most this many
records that changed no cell (queued deliveries, failed steps, plan records)."""
READER_RETRIES_MAX: Final = 3
"""Reopens of a reader in one read (or open) whose checkpoint a live writer replaced under it;
one more, and it rebuilds from the journal in memory instead, which no writer can move (slow
for a long journal, so only after these)."""

T = TypeVar("T")


class World:
    """An open world. Not thread-safe: one thread drives it (see ``world._engine`` for threads);
    ``interrupt`` alone may be called from a signal handler."""

    def __init__(
        self,
        path: Path,
        air: LoadedAir,
        lock: WorldLock,
        limits: KernelLimits,
        *,
        readonly: bool = False,
    ) -> None:
        self.path = path
        self.genesis_air = air
        """The AIR the world was created with (``air/``); ``air`` is the current era's."""
        self.readonly = readonly
        self.limits = limits
        self.notices: list[str] = []
        self.stale: str | None = None
        self._interrupt = False
        self._lock = lock
        self._closed = False
        self._checkpoint_failed = False
        self.cas = FileCas(path, readonly=readonly)
        self.journal = FileJournal.open(path / "journal", readonly=readonly)
        self.store: CellStore
        self._damage: StoreDamaged | None
        """Found when the store was opened, before recovery (which then rebuilds)."""
        self.store, self._damage = _file_store(path, readonly=readonly)
        self._recovery = Recovery(
            path, air, self.journal, self.cas, self.runner(), limits, readonly=readonly
        )
        self.kernel = self._recovery.kernel(self.store)
        self._checkpoint_seq = 0
        self._history = None if readonly else HistoryWriter(path, self.journal)
        self._event_ids = EventIds(path, self.journal, self.notices.append)

    @property
    def air(self) -> LoadedAir:
        """The AIR the world runs now: the genesis AIR, or the last applied upgrade's
        (``kernel._eras``)."""
        return self.kernel.air

    def runner(self) -> HostRunner:
        """A reducer runner for this world's modules of every era (their wasm is in the CAS)."""
        return HostRunner(
            self.genesis_air, self.path / "cache", readonly=self.readonly, wasm_of=self.cas.get
        )

    def blank_kernel(self, first_seq: int = 0) -> Kernel:
        """A kernel of this world over a memory journal and store, nothing applied: for
        re-executing the journal aside (replay, time travel, shadow). ``first_seq``: where its
        own journal starts, for a kernel that goes on after re-executing that many records."""
        return Kernel(
            self.genesis_air,
            MemoryJournal(first_seq=first_seq),
            MemoryCellStore(),
            self.runner(),
            self.limits,
            air_loader(self.cas),
        )

    # --- lifecycle --------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: Path,
        air_path: Path,
        limits: KernelLimits | None = None,
        *,
        modules: Mapping[str, str | os.PathLike[str]] | None = None,
        partition: tuple[int, int] | None = None,
    ) -> World:
        """Create a world at ``path`` (absent or empty) from the AIR at ``air_path``.

        ``modules`` binds each module that names no wasm (as AgentOS's do) to a wasm file
        (``world._airfiles.bind_module_wasm``: stored as if the AIR had named it).
        ``partition`` ``(index, count)`` makes it one partition of a partitioned world
        (``world.cluster``)."""
        sources = builtin_sources() + air_sources(Path(air_path))
        if modules:
            sources = bind_module_wasm(sources, modules)
        return cls._create(Path(path), sources, _read_file, limits, partition)

    @classmethod
    def _create(
        cls,
        path: Path,
        sources: list[AirSource],
        read_wasm: Callable[[str], bytes | None],
        limits: KernelLimits | None,
        partition: tuple[int, int] | None = None,
        *,
        checked: bool = True,
    ) -> World:
        """``checked``: refuse what the reducer check refuses (``world._runner.check_modules``)."""
        if partition is not None:
            Partition(*partition)  # checked before anything is written
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise WorldExists(str(path))
        air = load_air(sources, read_wasm, inspect_wasm)
        unbound = sorted(
            name
            for name, module in air.modules.items()
            if module.wasm is None and module.wasm_hash is None
        )
        if unbound:
            listed = ", ".join(unbound)
            reason = (
                f"module {listed} names no wasm; bind {'it' if len(unbound) == 1 else 'each'} "
                f"to its binary with --module {unbound[0]}=FILE.wasm"
            )
            raise InvalidArgument("module", listed, reason)
        if checked:
            check_modules(air)
        with storage_errors("init"):
            return cls._place(path, air, sources, limits or KernelLimits(), partition)

    @classmethod
    def _place(
        cls,
        path: Path,
        air: LoadedAir,
        sources: list[AirSource],
        limits: KernelLimits,
        partition: tuple[int, int] | None = None,
    ) -> World:
        """Build the world in a hidden sibling folder, then rename it to ``path``."""
        parent = path.absolute().parent
        mkdir_durable(parent)
        remove_leftovers(parent, path.name, INIT_INFIX)  # of killed inits to this name
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}{INIT_INFIX}", dir=parent))
        placed = False
        lock: WorldLock | None = None
        try:
            genesis = None if partition is None else {"index": partition[0], "count": partition[1]}
            lock = build_world(staging, air, sources, genesis)
            sync_tree(staging)
            if path.exists():
                path.rmdir()  # empty (checked above); rename cannot replace it otherwise
            fileio.replace(staging, path)
            placed = True
            fileio.fsync_dir(parent)
            lock.path = path.resolve()  # the locked inodes are the same, under their new name
            world = cls(path, air, lock, limits)
            if partition is not None:
                world._recover()  # the genesis record tells the kernel its partition
            return world
        except BaseException:
            # All or nothing: a failed init leaves neither a world nor a lock behind.
            if lock is not None:
                lock.release()
            remove_tree(path if placed else staging)
            raise

    @classmethod
    def create_from_world_air(
        cls, path: Path, air_dir: Path, limits: KernelLimits | None = None
    ) -> World:
        """Create a world from another world's ``air/`` folder (same sources, same wasm)."""
        sources, wasm_map = read_sources(air_dir / "sources.json")
        source_cas = FileCas(air_dir.parent, readonly=True)
        # Not the reducer check again: a world made before it must rebuild as it ran.
        wasm_of = {p: source_cas.get(h) for p, h in wasm_map.items()}.get
        return cls._create(Path(path), sources, wasm_of, limits, checked=False)

    @classmethod
    def open(
        cls, path: Path, limits: KernelLimits | None = None, *, readonly: bool = False
    ) -> World:
        """Open an existing world: checkpoint, then re-execute the journal after it.

        ``readonly`` takes the shared lock and writes nothing (see the module docstring)."""
        path = Path(path)
        if not (path / "air" / "sources.json").is_file():
            if readonly:  # a crash between a swap's renames: read the new world there
                path = swapped_in(path) or path
            else:
                recover_swap(path)  # ... or finish the swap
        cls.check_directory(path)
        lock = lock_world(path, "read" if readonly else "write")
        try:
            with storage_errors("open"):
                air = load_world_air(path)
                world = cls(path, air, lock, limits or KernelLimits(), readonly=readonly)
                world._recover()
        except BaseException:
            lock.release()
            raise
        return world

    @staticmethod
    def check_directory(path: Path) -> None:
        """Raise what keeps ``path`` from being read as a world (``_directory.check_directory``)."""
        check_directory(path)

    def close(self) -> None:
        """Checkpoint (a trusted writer only, and only as a courtesy: a failure becomes a
        notice), then release the journal and the lock. Safe to call twice."""
        if self._closed:
            return
        try:
            if not self.readonly and self.stale is None and self.kernel.consistent:
                self.commit()
                grown = self.journal.seq_next - self._checkpoint_seq
                if self.store.dirty_count() or grown >= CLOSE_CHECKPOINT_RECORDS:
                    self._checkpoint_quietly()
                else:
                    self._flush_history()
        finally:
            self._closed = True
            self._event_ids.close()
            self.journal.close()
            self._lock.release()

    def _checkpoint_quietly(self) -> None:
        if self._checkpoint_failed or (
            self.journal.seq_next == self._checkpoint_seq and not self.store.dirty_count()
        ):
            return
        try:
            self.snapshot()
        except (StorageError, OSError, WorldError) as exc:
            self._checkpoint_failed = True
            self.notices.append(f"checkpoint not written ({exc}); the journal has everything")

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def interrupt(self) -> None:
        """Ask a running loop to stop at the next tick boundary (safe from a signal handler)."""
        self._interrupt = True

    def take_interrupt(self) -> bool:
        """Whether an interrupt was asked for since the last call (for loops outside World)."""
        asked, self._interrupt = self._interrupt, False
        return asked

    # --- recovery ---------------------------------------------------------------------------

    def _recover(self) -> None:
        """Bring memory up to the journal (``world._recovery``)."""
        try:
            self._take(self._recovery.recover(self.store, self._damage))
        except CheckpointMoved:  # a live writer checkpointed while this reader opened
            self._reopen(1)
        self._damage = None

    def _reopen(self, moves: int) -> int:
        """A reader whose checkpoint a live writer replaced (the ``moves``-th time in this read):
        look at the journal again, take the newest checkpoint and re-execute the journal after
        it, as ``open`` does. Past ``READER_RETRIES_MAX`` moves, rebuild from the journal
        alone in memory instead (a notice says so). Returns the moves counted, with those the
        reopens themselves met."""
        while moves <= READER_RETRIES_MAX:
            self.journal.refresh()
            store, damage = _file_store(self.path, readonly=True)
            try:
                self._take(self._recovery.recover(store, damage))
            except CheckpointMoved:
                moves += 1
                continue
            return moves
        self.journal.refresh()
        self._take(self._recovery.rebuild_in_memory(None))
        self.notices.append(
            f"a live writer replaced the checkpoint {moves} times while this reader read it; "
            "rebuilt from the journal in memory instead"
        )
        return moves

    def _rebuild(self, damage: StoreDamaged) -> None:
        """Throw the derived state away and re-execute the whole journal (checked)."""
        self._take(self._recovery.rebuild(damage, self.store))

    def _take(self, recovered: Recovered) -> None:
        """Take what recovery brought; a writer completes a tick a crash cut short (its
        records were re-derived) and checkpoints a rebuild."""
        damage = recovered.damage
        if damage is not None:
            where = "in memory" if self.readonly else "and checkpointed"
            self.notices.append(
                f"derived state damaged: {damage.path}: {damage.reason}; rebuilt from the "
                f"journal {where}"
            )
        self.store, self.kernel = recovered.store, recovered.kernel
        self._checkpoint_seq = recovered.checkpoint_seq
        if recovered.owed and not self.readonly:
            for kind, subject, body in recovered.owed:
                self.journal.append(kind, subject, body)
            self.commit()
        if damage is not None and not self.readonly:
            self._checkpoint_quietly()

    # --- reading (``world._reading``) ----------------------------------------------------

    def read(self, fn: Callable[[], T]) -> T:
        """``fn()``, a read of derived state, on one view of the world (the module docstring,
        "Readers survive checkpoints"). If it finds the store damaged, rebuild once from the
        journal and call it again; if a live writer replaced a reader's checkpoint under it,
        reopen (``_reopen``) and call it again. So ``fn`` must only read, and may run more
        than once; it runs again too when a ``read`` inside it reopened, so that what it
        returns never mixes two views."""
        moves, rebuilt = 0, False
        while True:
            store = self.store
            try:
                value = fn()
            except StoreDamaged as damage:
                if self.store is store:
                    if rebuilt:
                        raise
                    try:
                        self._rebuild(damage)
                        rebuilt = True
                        continue
                    except CheckpointMoved:
                        pass  # not damage: a live writer's new checkpoint; reopen below
            else:
                if self.store is store:
                    return value
            moves += 1
            if self.readonly and (self.store is store or moves > READER_RETRIES_MAX):
                moves = self._reopen(moves)

    def key_cbor(self, reducer: str, key: Any) -> bytes:
        return _reading.key_cbor(self.air, reducer, key)

    def state(self, reducer: str, key: Any = None) -> Any:
        """A reducer's state as sugar JSON (a cell's, given ``key``); None if absent."""
        return _reading.state(self, reducer, key)

    def cell(self, reducer: str, key: Any) -> CellView | None:
        """One cell of keyed ``reducer`` (or an unkeyed one's, ``key`` None): its key, state
        (through its era's schema) and entry (``manifest_hash``: its era); None if it has none."""
        return _reading.cell(self, reducer, key)

    def cells(self, reducer: str) -> Iterator[CellView]:
        """Every cell of a keyed reducer, in key-hash order."""
        return _reading.cells(self, reducer)

    def cell_count(self, reducer: str) -> int:
        return _reading.cell_count(self, reducer)

    def info(self) -> dict[str, Any]:
        data = _reading.info(self)
        data["runs_failed"] = self.kernel.plans.failed_total  # derived: ``kernel._runs``
        data.update(self.kernel.dead_letters.counts())  # steps_failed, dead_letters_kept
        part = self.kernel.partition
        if part is not None:  # one partition of a partitioned world (``world.cluster``)
            data["partition"] = {
                "index": part.index,
                "count": part.count,
                "outbox": {str(to): n for to, n in part.backlog().items()},
                "cursors": {str(s): list(c) for s, c in sorted(part.cursors.items())},
            }
        return data

    def retry_dead_letter(self, letter_id: str) -> int:
        """Deliver dead letter ``letter_id``'s event again to its reducer and key (journaled
        ``deadletter.retried``; it runs at the next tick); its seq. Durable on return."""
        return self._dead_letter("deadletter.retried", letter_id)

    def drop_dead_letter(self, letter_id: str) -> int:
        """Take dead letter ``letter_id`` off the kept list (journaled ``deadletter.dropped``);
        its seq. Durable on return."""
        return self._dead_letter("deadletter.dropped", letter_id)

    def _dead_letter(self, kind: str, letter_id: str) -> int:
        self._writable()
        seq = self.kernel.ingest_dead_letter(kind, letter_id)
        self.commit()
        return seq

    # --- writing ----------------------------------------------------------------------------

    def _writable(self) -> None:
        if self.readonly:
            raise WrongMode("change the world", "open read-only")
        if self.stale is not None:
            raise WorldStale(self.stale)
        self._still_ours()

    def _still_ours(self) -> None:
        """Stop (stale) if the directories this writer locked were swapped for others: a
        second writer may hold them now (``WorldLock.check``)."""
        try:
            self._lock.check()
        except JournalReplaced as exc:
            self.stale = str(exc)
            raise

    def commit(self, *, atomic: bool = False) -> int:
        """Make everything journaled so far durable (a failure makes this handle stale);
        ``atomic``: whole or not at all, even under a crash (a batch of inputs)."""
        self._still_ours()
        try:
            seq_next = self.journal.commit(atomic=atomic)
        except BaseException as exc:
            self.stale = f"journal commit failed: {exc}"
            raise
        if self._history is not None and self._history.due():
            self._flush_history()
        return seq_next

    def _flush_history(self) -> None:
        """Bring the cell history index (``world.history.index``) up to the journal; derived data, so
        a failure is a notice and the index stops for this session."""
        if self._history is not None and self.kernel.consistent:
            notice = self._history.flush_quietly(self.kernel, self.store)
            if notice is not None:
                self.notices.append(notice)
                self._history = None

    def send(self, schema: str, value: Any, *, event_id: str | None = None) -> int:
        """Normalise, journal and route one event from outside; durable on return. With
        ``event_id``, an event already journaled under that id is not journaled again."""
        try:
            return self.send_many([(schema, value)], ids=[event_id])[0]
        except EventRejected as exc:
            raise exc.cause from None

    def send_many(
        self, events: Iterable[tuple[str, Any]], *, ids: Sequence[str | None] | None = None
    ) -> list[int]:
        """One durable batch, all or nothing: every event is normalised and every record
        encoded before any is journaled (``EventRejected`` names the first bad one), and the
        commit is atomic (``FileJournal.commit(atomic=True)``: a crash or a power cut inside it
        leaves none of the batch, never a prefix). ``ids[i]``, when not None, is event ``i``'s
        idempotency key: an event whose id the journal already holds (``world._event_ids``: any
        ever journaled), or that an earlier event of the batch has, is not journaled again, and
        its seq is that one's. The seqs of the events journaled are consecutive and after every
        other seq returned."""
        self._writable()
        encoded: list[tuple[str, bytes, Any, str | None]] = []
        for index, (schema, value) in enumerate(events):
            try:
                event_id = None if ids is None else ids[index]
                if event_id is not None and not isinstance(event_id, str):
                    raise InvalidArgument("id", event_id, "an event id is text")
                encoded.append((schema, *self.kernel.normalise_event(schema, value), event_id))
            except WorldError as exc:
                raise EventRejected(index, exc) from exc
        named = [event[3] for event in encoded if event[3] is not None]
        known = self._event_ids.known(named) if named else {}
        seqs: list[int] = []
        fresh: dict[str, int] = {}
        taken = []
        seq = self.journal.seq_next
        for event in encoded:
            event_id = event[3]
            if event_id is not None:
                first = known.get(event_id, fresh.get(event_id))
                if first is not None:
                    seqs.append(first)
                    continue
                fresh[event_id] = seq
            seqs.append(seq)
            taken.append(event)
            seq += 1
        if taken:
            self._inputs(lambda: self.kernel.ingest_many(taken))
        self._event_ids.add(fresh)
        return seqs

    def _inputs(self, ingest: Callable[[], T]) -> T:
        """Journal a batch of inputs by ``ingest()`` and commit it atomically; a failure after
        something was appended makes the handle stale (memory is behind the journal)."""
        before = self.journal.seq_next
        try:
            done = ingest()  # the kernel keeps its ``consistent`` flag itself
        except BaseException as exc:
            if self.journal.seq_next != before:  # appended, not routed: memory is behind
                self.stale = f"a batch failed after it was journaled: {type(exc).__name__}"
            raise
        self.commit(atomic=True)
        return done

    # --- partitions (``world.cluster``; ``kernel._partition``) ------------------------------

    def take_forwarded(self, source: int, entries: Sequence[Outgoing]) -> tuple[int, int] | None:
        """Journal what partition ``source`` owes this one (entries past the cursor only), in
        one atomic commit; the cursor of ``source`` after them. Durable on return."""
        self._writable()
        return self._inputs(lambda: self.kernel.ingest_forwarded(source, entries))

    def outbox_delivered(self, to: int, cursor: tuple[int, int]) -> None:
        """Partition ``to`` holds every entry owed to it up to ``cursor``: journal it (only
        when it drops an entry) and drop them. Durable on return."""
        self._writable()
        part = self.kernel.partition
        pending = [] if part is None else part.pending(to, 1)
        if pending and (pending[0].seq, pending[0].idx) <= cursor:
            self._inputs(lambda: self.kernel.ingest_outbox_delivered(to, *cursor))

    def step(self, ticks: int = 1) -> int:
        """Run up to ``ticks`` ticks; return how many ran. Durable on return."""
        return self._run(ticks, None)

    def run_until_idle(self, max_steps: int | None = None) -> int:
        """Tick until nothing is ready. Past ``steps_per_run_max`` it stops with LimitExceeded,
        after committing: the world stays consistent and can be opened and run again."""
        limit = max_steps if max_steps is not None else self.kernel.limits.steps_per_run_max
        return self._run(None, limit)

    def _run(self, ticks: int | None, limit: int | None) -> int:
        """The tick loop behind ``step`` and ``run_until_idle``: commits every
        ``COMMIT_EVERY_STEPS``, stops at an interrupt, and rebuilds once from the journal when
        a step finds derived state damaged (the delivery stays queued meanwhile)."""
        self._writable()
        ran = 0
        rebuilt = False
        while ticks is None or ran < ticks:
            if self._interrupt:
                self._interrupt = False
                self._after_steps()
                raise Interrupted(self.journal.seq_next)
            try:
                if not self.kernel.tick():
                    break
            except StoreDamaged as damage:
                if rebuilt or not self.kernel.consistent:
                    raise
                rebuilt = True
                self._rebuild(damage)
                continue
            except BaseException as exc:
                if not self.kernel.consistent:
                    self.stale = f"interrupted inside a tick: {type(exc).__name__}"
                raise
            ran += 1
            if ran % COMMIT_EVERY_STEPS == 0:
                self._after_steps()
            if limit is not None and ran >= limit and not self.kernel.idle():
                self._after_steps()
                raise LimitExceeded(
                    "steps_per_run_max",
                    limit,
                    f"{self.kernel.scheduler.pending} deliveries still queued",
                )
        self._after_steps()
        return ran

    def _after_steps(self) -> None:
        self.commit()
        grown = self.journal.seq_next - self._checkpoint_seq
        if self.store.dirty_count() >= SNAPSHOT_DIRTY_MAX or grown >= SNAPSHOT_RECORDS_MAX:
            self._checkpoint_quietly()

    def snapshot(self) -> str:
        """Checkpoint: commit the journal, put the kernel's state (scheduler, mailboxes, dead
        letters) in the CAS, then commit cells and index together with that snapshot's address.
        The journal is committed first, so the checkpoint is never ahead of it."""
        self._writable()
        if not isinstance(self.store, FileCellStore):
            raise WrongMode("checkpoint", "the store was rebuilt in memory")
        seq_next = self.commit()
        with storage_errors("checkpoint"):
            address = self.cas.put(cbor.dumps(self.kernel.snapshot_obj(seq_next)))
            self.store.flush(cbor.dumps({"snapshot": cbor.hash_to_raw(address)}))
            self._checkpoint_seq = seq_next
            fileio.mkdir(self.path / "snapshots", exist_ok=True)
            atomic_write(self.path / "snapshots" / "latest", address.encode())
        self._flush_history()
        self._event_ids.flush()
        return address


def _file_store(path: Path, *, readonly: bool) -> tuple[CellStore, StoreDamaged | None]:
    """The world's file cell store, or (a garbage ``checkpoint.cbor`` or flush intent) an
    empty memory store and the damage, for recovery to rebuild from."""
    try:
        return FileCellStore(path, readonly=readonly), None
    except StoreDamaged as damage:
        return MemoryCellStore(), damage
