"""What an open world shows: states, cells and ``info`` (a mixin of ``world._world.World``).

Reads of derived state go through ``_read``, which rebuilds once from the journal when the
store is damaged (``world._recovery``), so a reader never fails on a bad cell file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from air import cbor
from air.errors import KeyMismatch, StoreDamaged, UnknownName
from air.types import Ref
from air.values import normalise, to_sugar
from kernel._cells import CellEntry

if TYPE_CHECKING:
    from pathlib import Path

    from air import LoadedAir
    from kernel._cells import CellStore
    from kernel._core import Kernel
    from world.journal._file import FileJournal

__all__ = ["CellView", "Reading"]


@dataclass(frozen=True)
class CellView:
    key: Any
    key_hash: str
    state: Any
    entry: CellEntry


class Reading:
    if TYPE_CHECKING:
        path: Path
        air: LoadedAir
        notices: list[str]
        journal: FileJournal
        store: CellStore
        kernel: Kernel

        def _rebuild(self, damage: StoreDamaged) -> None: ...

    def key_cbor(self, reducer: str, key: Any) -> bytes:
        self._module(reducer)
        key_type = self.air.key_types.get(reducer)
        if key_type is None:
            raise KeyMismatch(reducer, keyed=False)
        return cbor.dumps(normalise(key_type, key, self.air.schemas))

    def _module(self, reducer: str) -> Any:
        module = self.air.modules.get(reducer)
        if module is None:
            raise UnknownName("reducer", reducer, sorted(self.air.modules))
        return module

    def state(self, reducer: str, key: Any = None) -> Any:
        """A reducer's state as sugar JSON (a cell's, given ``key``); None if absent."""
        module = self._module(reducer)
        keyed = module.key_schema is not None
        if keyed and key is None:
            raise KeyMismatch(reducer, keyed=True)
        key_cbor = self.key_cbor(reducer, key) if keyed else None
        raw = self._read(lambda: self.kernel.state_of(reducer, key_cbor))
        if raw is None:
            return None
        return to_sugar(Ref(module.abi.reducer.state), cbor.loads(raw), self.air.schemas)

    def _read(self, fn: Callable[[], Any]) -> Any:
        """Run a read of derived state; rebuild once from the journal if it is damaged."""
        try:
            return fn()
        except StoreDamaged as damage:
            self._rebuild(damage)
            return fn()

    def cells(self, reducer: str) -> Iterator[CellView]:
        """Every cell of a keyed reducer, in key-hash order."""
        module = self._module(reducer)
        module_hash = self.kernel.module_hash(reducer)
        key_type = self.air.key_types.get(reducer)
        entries: list[tuple[bytes, CellEntry]] = self._read(
            lambda: list(self.store.iter_entries(module_hash))
        )
        for khash, entry in entries:
            found = self._read(partial(self.store.get, module_hash, khash))
            if found is None:
                raise StoreDamaged(f"cell {khash.hex()} of {reducer}", "index entry without state")
            state = to_sugar(Ref(module.abi.reducer.state), cbor.loads(found[1]), self.air.schemas)
            key = (
                None
                if key_type is None
                else to_sugar(key_type, cbor.loads(entry.key_cbor), self.air.schemas)
            )
            yield CellView(key, khash.hex(), state, entry)

    def cell_count(self, reducer: str) -> int:
        self._module(reducer)
        return int(self._read(lambda: self.store.count(self.kernel.module_hash(reducer))))

    def info(self) -> dict[str, Any]:
        reducers = {}
        for name, module in sorted(self.air.modules.items()):
            count = self.cell_count(name)
            reducers[name] = {
                "keyed": module.key_schema is not None,
                "cells" if module.key_schema else "has_state": count
                if module.key_schema
                else count > 0,
            }
        return {
            "path": str(self.path),
            "manifest_hash": self.air.manifest_hash,
            "journal_seq_next": self.journal.seq_next,
            "steps_total": self.kernel.steps_total,
            "pending_deliveries": self.kernel.scheduler.pending,
            "ready_entities": self.kernel.scheduler.ready_count(),
            "reducers": reducers,
            "dead_letters": [
                {
                    "seq": d.seq,
                    "reducer": d.reducer,
                    "schema": d.schema,
                    "code": d.code,
                    "detail": d.detail,
                }
                for d in self.kernel.dead_letters.letters[-20:]
            ],
            "dead_letters_total": self.kernel.dead_letters.total,
            "runs": [
                {
                    "run_id": run.run_id,
                    "plan": run.plan,
                    "done": list(run.done),
                    "waiting": None if run.waiting is None else run.waiting["step"],
                }
                for _id, run in sorted(self.kernel.plans.runs.items())
            ],
            "runs_started": self.kernel.plans.started,
            "effects": _effect_counts(self.kernel.effects.intents.values()),
            "logical_now_ns": self.kernel.effects.now_ns,
            "notices": list(self.notices),
        }


def _effect_counts(intents: Iterable[Any]) -> dict[str, int]:
    """How many intents are in each status (queued means sent or to be sent)."""
    counts = {"queued": 0, "parked": 0, "done": 0, "denied": 0}
    for intent in intents:
        counts[intent.status] = counts.get(intent.status, 0) + 1
    return counts
