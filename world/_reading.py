"""What an open world shows: states, cells and ``info``.

Functions over a ``Source`` (what ``world._world.World`` is to them: its AIR, kernel, cell store
and journal, and ``read``). Every read of derived state goes through ``source.read``, which
rebuilds once from the journal when the store is damaged, and reopens a reader whose checkpoint
a live writer replaced, so a reader never fails on a bad cell file nor on a writer's
checkpoint; the kernel and store are looked up on the source at each read, since a rebuild or
a reopen replaces them.

What each sees (``world._world``, "Readers survive checkpoints"): ``state``, ``cell_count``
and ``info`` are each one ``read``, so one view, one journal position (``info``'s counts and
kernel fields all from the same one). ``cells`` is one ``read`` per cell: a long iteration does
not hold one view (a writer collects what the old one used), so each cell comes with its state
from one view, and after a reopen the iteration goes on from the cell after the last one it
gave, in the new view (``_Cursor``), instead of starting again.

Eras without reading the journal (``applied_before``): a reader that starts at a position
(``journal tail -n``/``--from``, ``cells tail``, ``current_air``) needs the ``gov.applied``
records before it, which a read from seq 0 finds at the cost of the whole journal. The
checkpoint's kernel snapshot lists every era it had begun (``kernel._eras``: the seq of its
``gov.applied`` and the AIR's address), so those records are read where they are, each checked
to be the ``gov.applied`` the snapshot says, and only the records after the checkpoint are
read for more. A checkpoint that is missing, damaged, ahead of the journal, names a snapshot
object a writer has since collected, or disagrees with a record makes it read from seq 0, as
before: the answer is the same records, only the cost differs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

from air import LoadedAir, cbor
from air.errors import KeyMismatch, UnknownName, ValueMismatch, WorldError
from air.types import Ref
from air.values import normalise, to_sugar
from kernel import Kernel
from kernel.cells import CellEntry, CellStore, key_hash
from kernel.journal import JournalRecord
from world.effects import read_mode_file
from world.errors import StoreDamaged
from world.journal import FileJournal

__all__ = [
    "APPLIED_SUBJECT",
    "CellView",
    "Source",
    "applied_before",
    "cell_count",
    "cells",
    "info",
    "key_cbor",
    "state",
]

T = TypeVar("T")


class Source(Protocol):
    """An open world, as these reads see it."""

    path: Path
    notices: list[str]
    journal: FileJournal
    store: CellStore
    kernel: Kernel

    @property
    def air(self) -> LoadedAir: ...

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


APPLIED_SUBJECT: Final = "/world/gov/applied"


def applied_before(world_dir: Path, journal: FileJournal, seq: int) -> list[JournalRecord]:
    """The ``gov.applied`` records of ``journal`` (the world at ``world_dir``'s, open or not)
    below ``seq``, in journal order (see the module docstring for what is read)."""
    known = _checkpoint_eras(world_dir, journal)
    records: list[JournalRecord] = []
    start = 0
    if known is not None:
        seq_next, eras = known
        for since, address in eras:
            if since >= seq:
                break
            record = next(iter(journal.read(since)), None)
            if (
                record is None
                or record.seq != since
                or record.kind != "gov.applied"
                or record.body.get("air") != address
            ):
                records, seq_next = [], 0  # not this journal's: read it all
                break
            records.append(record)
        start = seq_next
    if start < seq:
        for record in journal.read(start):
            if record.seq >= seq:
                break
            if record.subject == APPLIED_SUBJECT and record.kind == "gov.applied":
                records.append(record)
    return records


def _checkpoint_eras(
    world_dir: Path, journal: FileJournal
) -> tuple[int, list[tuple[int, bytes]]] | None:
    """``(seq_next, [(since, AIR address)])`` of the checkpoint's kernel snapshot, or None when
    it cannot be had or does not fit ``journal`` (ahead of it)."""
    from world._cas import FileCas
    from world.cellstore import FileCellStore

    try:
        meta = FileCellStore(world_dir, readonly=True).last_checkpoint()  # reads only that
        address = cbor.loads(meta)["snapshot"] if meta else None
        if type(address) is not bytes:
            return None
        snap = cbor.loads(FileCas(world_dir, readonly=True).get(cbor.raw_to_hash(address)))
        seq_next = snap["seq_next"]
        eras = [(since, air) for since, _manifest, air, _successors in snap.get("eras", [])]
    except (WorldError, OSError, KeyError, TypeError, ValueError):
        return None
    if type(seq_next) is not int or not 0 <= seq_next <= journal.seq_next:
        return None
    if not all(type(since) is int and type(air) is bytes for since, air in eras):
        return None
    return seq_next, sorted(eras)


def key_cbor(air: LoadedAir, reducer: str, key: Any) -> bytes:
    """The canonical CBOR of ``key`` (either lens) for keyed ``reducer``. Every read of one
    cell by its key (``world state --key``, ``cells show``, ``cells tail``, ``why``) reads it
    here. A key that is text given as another JSON scalar (``--key 5`` is the number 5) is
    refused with how to write it as text (``'"5"'``)."""
    _module(air, reducer)
    key_type = air.key_types.get(reducer)
    if key_type is None:
        raise KeyMismatch(reducer, keyed=False)
    try:
        return cbor.dumps(normalise(key_type, key, air.schemas))
    except ValueMismatch as exc:
        if exc.pointer == "/" and exc.detail.startswith("expected text") and _scalar(key):
            spelled = json.dumps(json.dumps(key))  # 5 -> "5": the same, as JSON text
            hint = f"; the key is text: write '{spelled}'"
            raise ValueMismatch(exc.pointer, exc.code, exc.detail + hint) from exc
        raise


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float))


def state(source: Source, reducer: str, key: Any = None) -> Any:
    """A reducer's state as sugar JSON (a cell's, given ``key``); None if absent."""
    air = source.air
    module = _module(air, reducer)
    keyed = module.key_schema is not None
    if keyed and key is None:
        raise KeyMismatch(reducer, keyed=True)
    view = cell(source, reducer, key) if keyed else _unkeyed(source, reducer)
    return None if view is None else view.state


def cell_key_cbor(air: LoadedAir, reducer: str, key: Any) -> bytes | None:
    """``key_cbor``, and None for an unkeyed reducer's one cell (``key`` None)."""
    if key is None and _module(air, reducer).key_schema is None:
        return None
    return key_cbor(air, reducer, key)


def cell(source: Source, reducer: str, key: Any) -> CellView | None:
    """One cell of keyed ``reducer`` (its state read through its era's schema), or None; an
    unkeyed reducer's one cell for ``key`` None."""
    cell_key = cell_key_cbor(source.air, reducer, key)
    if cell_key is None:
        return _unkeyed(source, reducer)
    found = source.read(lambda: source.kernel.cell_of(reducer, cell_key))
    if found is None:
        return None
    entry, raw = found
    return CellView(key, key_hash(cell_key).hex(), cell_state(source, reducer, entry, raw), entry)


def _unkeyed(source: Source, reducer: str) -> CellView | None:
    found = source.read(lambda: source.kernel.cell_of(reducer, None))
    if found is None:
        return None
    entry, raw = found
    return CellView(None, "", cell_state(source, reducer, entry, raw), entry)


def cell_state(source: Source, reducer: str, entry: CellEntry, state_cbor: bytes) -> Any:
    """A cell's state as sugar JSON, through the state schema of the cell's era."""
    schema, era_air = source.kernel.state_schema(reducer, entry.manifest_hash)
    return to_sugar(Ref(schema), cbor.loads(state_cbor), era_air.schemas)


def cells(source: Source, reducer: str) -> Iterator[CellView]:
    """Every cell of a keyed reducer, in key-hash order, each read whole from one view (see the
    module docstring for what an iteration sees across a writer's checkpoint)."""
    air = source.air
    _module(air, reducer)
    key_type = air.key_types.get(reducer)
    cursor = _Cursor(source, reducer)
    while (found := source.read(cursor.next)) is not None:
        khash, entry, state_cbor = found
        state_value = cell_state(source, reducer, entry, state_cbor)
        key = (
            None
            if key_type is None
            else to_sugar(key_type, cbor.loads(entry.key_cbor), air.schemas)
        )
        cursor.taken(khash)
        yield CellView(key, khash.hex(), state_value, entry)


class _Cursor:
    """Where an iteration of one reducer's cells is: the last key hash it gave. ``next`` (a
    ``read``) gives the cell after it with its state, from the source's store as it is now: a
    store that a rebuild or a reopen replaced is iterated afresh from after that key hash."""

    def __init__(self, source: Source, reducer: str) -> None:
        self._source = source
        self._reducer = reducer
        self._space = source.kernel.cell_space(reducer)
        self._after: bytes | None = None
        self._store: CellStore | None = None
        self._entries: Iterator[tuple[bytes, CellEntry]] = iter(())

    def next(self) -> tuple[bytes, CellEntry, bytes] | None:
        store = self._source.store
        if store is not self._store:  # the first call, or a rebuild or reopen since the last
            self._store, self._entries = store, self._from(store)
        found = next(self._entries, None)
        if found is None:
            return None
        khash, entry = found
        stored = store.get(self._space, khash)
        if stored is None:
            where = f"cell {khash.hex()} of {self._reducer}"
            raise StoreDamaged(where, "index entry without state")
        return khash, entry, stored[1]

    def taken(self, khash: bytes) -> None:
        self._after = khash

    def _from(self, store: CellStore) -> Iterator[tuple[bytes, CellEntry]]:
        after = self._after
        for khash, entry in store.iter_entries(self._space):
            if after is None or khash > after:
                yield khash, entry


def cell_count(source: Source, reducer: str) -> int:
    _module(source.air, reducer)
    return source.read(partial(_count, source, reducer))


def _count(source: Source, reducer: str) -> int:
    return int(source.store.count(source.kernel.cell_space(reducer)))


def info(source: Source) -> dict[str, Any]:
    """``world info``: the world's reducers, journal, steps, dead letters, runs and effects,
    all from one view (one ``read``)."""
    return source.read(partial(_info, source))


def _info(source: Source) -> dict[str, Any]:
    kernel = source.kernel
    reducers = {}
    for name, module in sorted(source.air.modules.items()):
        count = _count(source, name)
        reducers[name] = {
            "keyed": module.key_schema is not None,
            "cells" if module.key_schema else "has_state": count
            if module.key_schema
            else count > 0,
        }
    return {
        "path": str(source.path),
        "manifest_hash": source.air.manifest_hash,
        "eras": [
            {"manifest_hash": cbor.raw_to_hash(era.manifest_raw), "since": era.since}
            for era in kernel.eras.history
        ],
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
                "waits": [wait["step"] for wait in run.waits],
            }
            for _id, run in sorted(kernel.plans.runs.items())
        ],
        "runs_started": kernel.plans.started,
        "effects": kernel.effects.counts(),
        "effects_mode": _effects_mode(source.path),
        "logical_now_ns": kernel.effects.now_ns,
        "notices": list(source.notices),
    }


def _effects_mode(path: Path) -> dict[str, Any]:
    """Who answers the world's outward effects when a run does not say (``world.effects``'
    mode file): ``{"mode": "live" | "stub", "reason"}``."""
    found = read_mode_file(path)
    if found is None:
        return {"mode": "live", "reason": "the default"}
    return {"mode": found.mode, "reason": found.reason}
