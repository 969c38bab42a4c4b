"""Opening a world: load the checkpoint, re-execute the journal after it, and rebuild from
genesis when derived state is damaged.

``Recovery`` is owned by ``world._world.World`` and holds what every recovery of that world
uses (its folder, AIR, journal, CAS, reducer runner, limits, and whether it may write). It
returns what it recovered (``Recovered``: the cell store, the kernel, the checkpoint's journal
position, and the records a cut commit owed the journal); the world takes them, appends the
owed records and commits, and after a rebuild checkpoints. The rules it keeps are in
``world._world``'s docstring: derived state never loses or blocks, the genesis record is
checked at every open, a reader whose checkpoint a live writer replaced reopens.

A reader and a live writer. A reader reads the journal up to where it ended when the reader
looked, then the checkpoint. A writer may commit and checkpoint in between, so a checkpoint
that reaches past the reader's journal makes the reader look at the journal again before it
calls the checkpoint ahead (``CheckpointAhead`` is for a journal that lost records, not for a
reader that looked early). A writer may also replace the checkpoint while a reader replays
after it, and collect the objects the old one used: the reader then meets them missing, which
is ``StoreDamaged`` for any other store but here ``CheckpointMoved``, the signal for the world
to reopen at the new checkpoint (``World.read``). That signal never leaves ``world._world``.
``rebuild_in_memory`` is the way out that no writer can move: the journal alone, from genesis.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from air import LoadedAir, cbor
from air.errors import CborError, HashMismatch
from kernel import Kernel, KernelLimits, Record
from kernel.cells import CellStore, MemoryCellStore
from kernel.errors import JournalCorrupt, ObjectMissing
from kernel.journal import JournalRecord
from world._airstore import air_loader
from world._cas import FileCas
from world._directory import discard_store
from world._runner import HostRunner
from world.cellstore import FileCellStore
from world.errors import (
    CheckpointAhead,
    CheckpointMoved,
    GenesisMismatch,
    StoreDamaged,
    storage_errors,
)
from world.journal import SEGMENT_HEADER_BYTES, FileJournal, segment_name

__all__ = ["Recovered", "Recovery"]


@dataclass
class Recovered:
    """A world's memory brought up to its journal."""

    store: CellStore
    kernel: Kernel
    checkpoint_seq: int
    """The journal position the checkpoint covers (0: none, or rebuilt from genesis)."""
    owed: list[Record]
    """Records of the last tick that a crash cut from the journal (a writer appends them)."""
    damage: StoreDamaged | None
    """What made it rebuild from genesis (None: it did not); a writer checkpoints at once."""


class Recovery:
    def __init__(
        self,
        path: Path,
        air: LoadedAir,
        journal: FileJournal,
        cas: FileCas,
        runner: HostRunner,
        limits: KernelLimits,
        *,
        readonly: bool,
    ) -> None:
        self.path = path
        self.air = air
        self.journal = journal
        self.cas = cas
        self.runner = runner
        self.limits = limits
        self.readonly = readonly

    def kernel(self, store: CellStore) -> Kernel:
        """A new kernel over ``store``: nothing applied yet."""
        return Kernel(self.air, self.journal, store, self.runner, self.limits, air_loader(self.cas))

    def recover(self, store: CellStore, damage: StoreDamaged | None) -> Recovered:
        """Load the checkpoint of ``store`` and re-execute the journal after it; rebuild from
        genesis if derived state is damaged (``damage``: found before, when the store was
        opened). The genesis record is checked first, whatever the checkpoint covers: a
        journal that another manifest started is never replayed onto this one."""
        genesis = next(iter(self.journal.read(0)), None)
        if genesis is None:
            raise _no_record(self.journal)
        if genesis.kind != "world.created":
            raise GenesisMismatch("(no genesis record)", self.air.manifest_hash)
        self._check_genesis(genesis)
        try:
            if damage is not None:
                raise damage
            kernel = self.kernel(store)
            seq_from = self._restore_checkpoint(store, kernel)
            self._replay(store, kernel, seq_from)
        except StoreDamaged as found:
            return self.rebuild(found, store)
        return Recovered(store, kernel, seq_from, kernel.owed_records(), None)

    def _restore_checkpoint(self, store: CellStore, kernel: Kernel) -> int:
        checkpoint = store.last_checkpoint()
        if not checkpoint:
            return 0
        address = ""
        try:
            address = cbor.raw_to_hash(cbor.loads(checkpoint)["snapshot"])
            snap = cbor.loads(self.cas.get(address))
            seq_from = snap["seq_next"]
            if seq_from > self.journal.seq_next and self.readonly:
                self.journal.refresh()  # a live writer committed, then checkpointed (above)
            if seq_from > self.journal.seq_next:
                raise CheckpointAhead(seq_from, self.journal.seq_next)
            kernel.restore(snap)
        except (ObjectMissing, HashMismatch, CborError, KeyError, TypeError, ValueError) as exc:
            where = str(self.cas.path_of(address)) if address else str(self.path / "state")
            raise StoreDamaged(where, f"snapshot object unusable: {exc}") from exc
        self._check_spaces(store, kernel)
        return int(seq_from)

    def _check_spaces(self, store: CellStore, kernel: Kernel) -> None:
        """Every space the checkpoint holds cells of is one a reducer of some era had."""
        if isinstance(store, FileCellStore):
            ours = kernel.eras.every_space()
            strangers = [m for m in store.checkpoint_modules() if m not in ours]
            modules = {kernel.module_hash(name) for name in kernel.air.modules}
            if strangers and set(strangers) <= modules:
                raise StoreDamaged(
                    store.checkpoint_path,
                    "keeps cells under their wasm module's hash, as worlds made before cells "
                    "belonged to their reducer did (kernel.cells, 'Cell spaces'): converted",
                )
            if strangers:
                raise StoreDamaged(
                    store.checkpoint_path,
                    f"holds cells of space {strangers[0]}, which no reducer of this world has",
                )

    def _replay(self, store: CellStore, kernel: Kernel, seq_from: int) -> None:
        try:
            for record in self.journal.read(seq_from):
                self._check_genesis(record)
                kernel.apply(record)
        except StoreDamaged:
            if self.readonly and _checkpoint_replaced(store):
                raise CheckpointMoved(_checkpoint_path(store)) from None
            raise

    def rebuild(self, damage: StoreDamaged, store: CellStore) -> Recovered:
        """Throw the derived state in ``store`` away and re-execute the whole journal
        (checked). A writer starts a new, empty file store; a reader rebuilds in memory,
        unless a live writer replaced its checkpoint (``CheckpointMoved``: reopen instead)."""
        if self.readonly and _checkpoint_replaced(store):
            raise CheckpointMoved(_checkpoint_path(store)) from damage
        if self.readonly:
            return self.rebuild_in_memory(damage)
        self.journal.commit()
        with storage_errors("rebuild"):
            discard_store(self.path)
            store = FileCellStore(self.path)
        return self._from_genesis(store, damage)

    def rebuild_in_memory(self, damage: StoreDamaged | None) -> Recovered:
        """Re-execute the whole journal into a memory store: reads no derived file, so nothing
        a writer does can move it (for a reader: ``damage`` None when it was not damage but a
        writer that kept replacing the checkpoint)."""
        return self._from_genesis(MemoryCellStore(), damage)

    def _from_genesis(self, store: CellStore, damage: StoreDamaged | None) -> Recovered:
        kernel = self.kernel(store)
        for record in self.journal.read(0):
            self._check_genesis(record)
            kernel.apply(record)
        return Recovered(store, kernel, 0, kernel.owed_records(), damage)

    def _check_genesis(self, record: JournalRecord) -> None:
        if record.kind != "world.created":
            return
        wanted = cbor.hash_to_raw(self.air.manifest_hash)
        found = record.body.get("manifest_hash")
        if found != wanted:
            actual = cbor.raw_to_hash(found) if isinstance(found, bytes) else repr(found)
            raise GenesisMismatch(actual, self.air.manifest_hash)


def _no_record(journal: FileJournal) -> JournalCorrupt:
    """A journal without even its genesis record: no segment at all (an emptied folder), or
    segments that hold no record. Nothing rebuilds a world's history: it names what is gone."""
    segments = journal.segments
    if not segments:
        detail = "no segment at all: the world's history is gone; put it back, from a backup"
        return JournalCorrupt(segment_name(0), 0, 0, "segment_gap", detail)
    detail = "not even the genesis record is whole: put the journal back, from a backup"
    torn = journal.dropped
    if torn is not None:  # the genesis record itself is torn
        return JournalCorrupt(torn.segment, torn.offset, 0, "torn_tail", detail)
    return JournalCorrupt(segments[0], SEGMENT_HEADER_BYTES, 0, "short_header", detail)


def _checkpoint_replaced(store: CellStore) -> bool:
    """Whether a live writer replaced the checkpoint this reader's ``store`` opened."""
    return (
        isinstance(store, FileCellStore)
        and store.current_checkpoint_digest() != store.checkpoint_digest
    )


def _checkpoint_path(store: CellStore) -> str:
    return store.checkpoint_path if isinstance(store, FileCellStore) else ""
