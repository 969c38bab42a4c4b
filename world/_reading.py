"""What an open world shows: states, cells and ``info``.

Functions over a ``Source`` (what ``world._world.World`` is to them: its AIR, kernel, cell store
and journal, and ``read``). Every read of derived state goes through ``source.read``, which
rebuilds once from the journal when the store is damaged, so a reader never fails on a bad cell
file; the kernel and store are looked up on the source at each read, since a rebuild replaces
them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from air import LoadedAir, cbor
from air.errors import KeyMismatch, UnknownName
from air.types import Ref
from air.values import normalise, to_sugar
from kernel import Kernel
from kernel.cells import CellEntry, CellStore
from world.errors import StoreDamaged
from world.journal import FileJournal

__all__ = ["CellView", "Source", "cell_count", "cells", "info", "key_cbor", "state"]

T = TypeVar("T")


class Source(Protocol):
    """An open world, as these reads see it."""

    path: Path
    air: LoadedAir
    notices: list[str]
    journal: FileJournal
    store: CellStore
    kernel: Kernel

    def read(self, fn: Callable[[], T]) -> T:
        """``fn()``; if it finds derived state damaged, rebuild once and call it again."""
        ...


@dataclass(frozen=True)
class CellView:
    key: Any
    key_hash: str
    state: Any
    entry: CellEntry


def _module(air: LoadedAir, reducer: str) -> Any:
    module = air.modules.get(reducer)
    if module is None:
        raise UnknownName("reducer", reducer, sorted(air.modules))
    return module


def key_cbor(air: LoadedAir, reducer: str, key: Any) -> bytes:
    """The canonical CBOR of ``key`` (either lens) for keyed ``reducer``."""
    _module(air, reducer)
    key_type = air.key_types.get(reducer)
    if key_type is None:
        raise KeyMismatch(reducer, keyed=False)
    return cbor.dumps(normalise(key_type, key, air.schemas))


def state(source: Source, reducer: str, key: Any = None) -> Any:
    """A reducer's state as sugar JSON (a cell's, given ``key``); None if absent."""
    air = source.air
    module = _module(air, reducer)
    keyed = module.key_schema is not None
    if keyed and key is None:
        raise KeyMismatch(reducer, keyed=True)
    cell_key = key_cbor(air, reducer, key) if keyed else None
    raw = source.read(lambda: source.kernel.state_of(reducer, cell_key))
    if raw is None:
        return None
    return to_sugar(Ref(module.abi.reducer.state), cbor.loads(raw), air.schemas)


def cells(source: Source, reducer: str) -> Iterator[CellView]:
    """Every cell of a keyed reducer, in key-hash order."""
    air = source.air
    module = _module(air, reducer)
    module_hash = source.kernel.module_hash(reducer)
    key_type = air.key_types.get(reducer)
    entries: list[tuple[bytes, CellEntry]] = source.read(
        lambda: list(source.store.iter_entries(module_hash))
    )
    for khash, entry in entries:
        found = source.read(partial(_get, source, module_hash, khash))
        if found is None:
            raise StoreDamaged(f"cell {khash.hex()} of {reducer}", "index entry without state")
        state_value = to_sugar(Ref(module.abi.reducer.state), cbor.loads(found[1]), air.schemas)
        key = (
            None
            if key_type is None
            else to_sugar(key_type, cbor.loads(entry.key_cbor), air.schemas)
        )
        yield CellView(key, khash.hex(), state_value, entry)


def _get(source: Source, module_hash: str, khash: bytes) -> tuple[CellEntry, bytes] | None:
    return source.store.get(module_hash, khash)


def cell_count(source: Source, reducer: str) -> int:
    _module(source.air, reducer)
    return int(source.read(lambda: source.store.count(source.kernel.module_hash(reducer))))


def info(source: Source) -> dict[str, Any]:
    """``world info``: the world's reducers, journal, steps, dead letters, runs and effects."""
    kernel = source.kernel
    reducers = {}
    for name, module in sorted(source.air.modules.items()):
        count = cell_count(source, name)
        reducers[name] = {
            "keyed": module.key_schema is not None,
            "cells" if module.key_schema else "has_state": count
            if module.key_schema
            else count > 0,
        }
    kernel = source.kernel  # a count may have rebuilt it
    return {
        "path": str(source.path),
        "manifest_hash": source.air.manifest_hash,
        "journal_seq_next": source.journal.seq_next,
        "steps_total": kernel.steps_total,
        "pending_deliveries": kernel.scheduler.pending,
        "ready_entities": kernel.scheduler.ready_count(),
        "reducers": reducers,
        "dead_letters": [
            {
                "seq": d.seq,
                "reducer": d.reducer,
                "schema": d.schema,
                "code": d.code,
                "detail": d.detail,
            }
            for d in kernel.dead_letters.letters[-20:]
        ],
        "dead_letters_total": kernel.dead_letters.total,
        "runs": [
            {
                "run_id": run.run_id,
                "plan": run.plan,
                "done": list(run.done),
                "waiting": None if run.waiting is None else run.waiting["step"],
            }
            for _id, run in sorted(kernel.plans.runs.items())
        ],
        "runs_started": kernel.plans.started,
        "effects": _effect_counts(kernel.effects.intents.values()),
        "logical_now_ns": kernel.effects.now_ns,
        "notices": list(source.notices),
    }


def _effect_counts(intents: Iterable[Any]) -> dict[str, int]:
    """How many intents are in each status (queued means sent or to be sent)."""
    counts = {"queued": 0, "parked": 0, "done": 0, "denied": 0}
    for intent in intents:
        counts[intent.status] = counts.get(intent.status, 0) + 1
    return counts
