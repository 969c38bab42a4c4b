"""Opening a world: load the checkpoint, re-execute the journal after it, and rebuild from
genesis when derived state is damaged. The recovery half of ``world._world.World`` (a mixin; the
rules are in that module's docstring: derived state never loses or blocks, the genesis record
is checked at every open, a reader whose checkpoint a live writer replaced retries).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from air import cbor
from air.errors import CborError, HashMismatch, StoreDamaged
from kernel._cells import MemoryCellStore, ObjectMissing
from kernel._core import Kernel
from kernel._journal import JournalRecord
from world import _fileio as fileio
from world._directory import discard_store
from world.cellstore._store import FileCellStore
from world.errors import CheckpointAhead, CheckpointMoved, GenesisMismatch

if TYPE_CHECKING:
    from pathlib import Path

    from air import LoadedAir
    from kernel._cells import CellStore
    from kernel._core import KernelLimits
    from world._cas import FileCas
    from world._runner import HostRunner
    from world.journal._file import FileJournal

__all__ = ["Recovery"]


class Recovery:
    if TYPE_CHECKING:
        path: Path
        air: LoadedAir
        readonly: bool
        limits: KernelLimits
        notices: list[str]
        cas: FileCas
        journal: FileJournal
        store: CellStore
        kernel: Kernel
        _runner: HostRunner
        _damage: StoreDamaged | None
        _checkpoint_seq: int

        def commit(self) -> int: ...

        def _checkpoint_quietly(self) -> None: ...

    def _recover(self) -> None:
        """Load the checkpoint and re-execute the journal after it; rebuild from genesis if
        derived state is damaged. The genesis record is checked first, whatever the checkpoint
        covers: a journal that another manifest started is never replayed onto this one."""
        genesis = next(iter(self.journal.read(0)), None)
        if genesis is None or genesis.kind != "world.created":
            raise GenesisMismatch("(no genesis record)", self.air.manifest_hash)
        self._check_genesis(genesis)
        try:
            if self._damage is not None:
                raise self._damage
            self._replay_from(self._restore_checkpoint())
        except StoreDamaged as damage:
            self._rebuild(damage)

    def _restore_checkpoint(self) -> int:
        checkpoint = self.store.last_checkpoint()
        if not checkpoint:
            return 0
        if isinstance(self.store, FileCellStore):
            ours = set(self.kernel.module_hashes())
            strangers = [m for m in self.store.checkpoint_modules() if m not in ours]
            if strangers:
                raise StoreDamaged(
                    self.store.checkpoint_path,
                    f"holds cells of module {strangers[0]}, which this world does not have",
                )
        address = ""
        try:
            address = cbor.raw_to_hash(cbor.loads(checkpoint)["snapshot"])
            snap = cbor.loads(self.cas.get(address))
            seq_from = snap["seq_next"]
            if seq_from > self.journal.seq_next:
                raise CheckpointAhead(seq_from, self.journal.seq_next)
            self.kernel.restore(snap)
        except (ObjectMissing, HashMismatch, CborError, KeyError, TypeError, ValueError) as exc:
            where = str(self.cas.path_of(address)) if address else str(self.path / "state")
            raise StoreDamaged(where, f"snapshot object unusable: {exc}") from exc
        self._checkpoint_seq = seq_from
        return int(seq_from)

    def _replay_from(self, seq_from: int) -> None:
        try:
            for record in self.journal.read(seq_from):
                self._check_genesis(record)
                self.kernel.apply(record)
            self._complete_tick()
        except StoreDamaged:
            if self.readonly and self._checkpoint_replaced():
                raise CheckpointMoved() from None
            raise

    def _complete_tick(self) -> None:
        """A crash inside a commit can keep the first records of a tick and lose the rest
        (a commit is durable as a prefix). Replay re-derived them: a writer journals them
        again, so the journal is whole; a reader only has them in memory."""
        owed = self.kernel.owed_records()
        if owed and not self.readonly:
            for kind, subject, body in owed:
                self.journal.append(kind, subject, body)
            self.commit()

    def _checkpoint_replaced(self) -> bool:
        store = self.store
        return (
            isinstance(store, FileCellStore)
            and store.current_checkpoint_digest() != store.checkpoint_digest
        )

    def _rebuild(self, damage: StoreDamaged) -> None:
        """Throw the derived state away and re-execute the whole journal (checked)."""
        if self.readonly and self._checkpoint_replaced():
            raise CheckpointMoved() from damage
        where = "in memory" if self.readonly else "and checkpointed"
        self.notices.append(
            f"derived state damaged: {damage.path}: {damage.reason}; rebuilt from the journal "
            f"{where}"
        )
        if self.readonly:
            self.store = MemoryCellStore()
        else:
            self.journal.commit()
            with fileio.storage_errors("rebuild"):
                discard_store(self.path)
                self.store = FileCellStore(self.path)
        self.kernel = Kernel(self.air, self.journal, self.store, self._runner, self.limits)
        self._checkpoint_seq = 0
        for record in self.journal.read(0):
            self._check_genesis(record)
            self.kernel.apply(record)
        self._complete_tick()
        if not self.readonly:
            self._checkpoint_quietly()

    def _check_genesis(self, record: JournalRecord) -> None:
        if record.kind != "world.created":
            return
        wanted = cbor.hash_to_raw(self.air.manifest_hash)
        found = record.body.get("manifest_hash")
        if found != wanted:
            actual = cbor.raw_to_hash(found) if isinstance(found, bytes) else repr(found)
            raise GenesisMismatch(actual, self.air.manifest_hash)
