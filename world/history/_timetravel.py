"""Time travel over a world's journal: a cell as it was at a past position, and a cell's
history. (A fork of the whole world at a past position is ``world.history._fork``.)

``cell_at`` rebuilds a kernel from nothing (an in-memory cell store, like ``world.history._replay``) and
feeds it the journal up to the asked position, then reads the cell. A tick that journals
several records (its first record, then ``OWED_KINDS`` records) is applied whole: a position
inside such a group means "after that tick", and ``CellAt.seq_through`` says where it ended.

``cell_history`` walks the journal once and yields the cell's own records (its steps and failed
steps, subjects ``/world/cell/<reducer>/<key hash>/...``) and the outside events
(``event.in``) that were routed to it, each step with the record whose delivery it consumed
(its ``src``).

Fast path. A cell's state depends only on its own deliveries, and the journal fixes them: each
of the cell's step records names the record whose delivery it consumed (``src``). So
``cell_at`` first re-executes only that cell's steps up to ``seq``, feeding each the event its
source record carries, and checks every result against the ``state_hash`` its step record
journaled. Any step it cannot prove that way (a source it cannot read the delivery from, a
receipt, an imported cell, a hash that differs) makes it fall back to the full replay from
genesis, which is always right. The fast path reads the journal once (a random read per
source) and runs the reducer only for the cell's own steps.

Beside a live writer. Once the world is open (``World.open`` itself survives a checkpoint the
writer makes meanwhile), time travel reads the journal, which the writer only appends to, and
the history index, which it checks (``world.history.index``: an index behind, ahead of or
torn by the writer is ignored where it does not describe this journal): never the cell store,
whose checkpoint the writer replaces and collects. So a writer's checkpoints cannot stop it,
and ``CellHistory.read`` with the next ``from_seq`` goes on where it was, each record once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import cbor2

from air import LoadedAir, cbor
from air.errors import WorldError
from air.types import Ref
from air.values import to_sugar
from kernel import CELL_IMPORTED, OWED_KINDS, abi
from kernel.cells import key_hash
from kernel.journal import JournalRecord
from kernel.subjects import cell_subject
from world._reading import applied_before, key_cbor
from world._world import World
from world.errors import SeqPastEnd
from world.history.index import CellRecords, cell_id, genesis_digest, read_cell
from world.journal import FileJournal

__all__ = [
    "CellAt",
    "CellHistory",
    "CellKey",
    "HistoryEntry",
    "cell_at",
    "cell_key",
    "cell_names",
    "cell_seqs",
    "state_at",
    "through",
]


@dataclass(frozen=True)
class CellKey:
    """A cell's identity read through its reducer's key schema."""

    reducer: str
    key_cbor: bytes

    @property
    def subject_prefix(self) -> str:
        """Every record of this cell has a subject that starts with this."""
        return self.cell_id + "/"

    @property
    def cell_id(self) -> str:
        """The cell's id in the history index (``world.history.index.cell_id``)."""
        return cell_id(cell_subject(self.reducer, key_hash(self.key_cbor)))


def cell_key(air: LoadedAir, reducer: str, key: Any) -> CellKey:
    """``key`` (sugar JSON) normalised through ``reducer``'s key schema; ``UnknownName`` for an
    unknown reducer, ``KeyMismatch`` for a reducer that is not keyed."""
    return CellKey(reducer, key_cbor(air, reducer, key))


@dataclass(frozen=True)
class CellAt:
    """A cell right after journal position ``seq`` (``seq_through``: the end of the tick that
    ``seq`` belongs to). ``state_cbor`` is None when the cell did not exist then."""

    seq: int
    seq_through: int
    state_cbor: bytes | None
    state: Any
    era: str | None = None
    """The manifest hash the cell was pinned to then (``kernel._eras``); None if no cell."""


def check_seq(seq: int, seq_next: int) -> None:
    if seq < 0 or seq >= seq_next:
        raise SeqPastEnd(seq, seq_next - 1)


def through(records: Iterator[JournalRecord], seq: int) -> Iterator[JournalRecord]:
    """The records up to ``seq``, then those that finish the tick group ``seq`` is in."""
    for record in records:
        if record.seq > seq and record.kind not in OWED_KINDS:
            return
        yield record


def cell_at(path: Path, reducer: str, key: Any, seq: int) -> CellAt:
    """The cell ``reducer``/``key`` as it was right after journal position ``seq``.

    Replays from genesis (see the module docstring for the faster path); an unkeyed
    reducer's one cell (``key`` None) always so."""
    from world._reading import cell_key_cbor

    path = Path(path)
    with World.open(path, readonly=True) as world:
        raw_key = cell_key_cbor(world.air, reducer, key)
        check_seq(seq, world.journal.seq_next)
        fast = None if raw_key is None else _cell_steps_at(world, CellKey(reducer, raw_key), seq)
        if fast is not None:
            state_cbor, last = fast
            era = None if state_cbor is None else world.genesis_air.manifest_hash  # one era
            return CellAt(seq, last, state_cbor, _sugar(world, reducer, state_cbor), era)
        kernel = world.blank_kernel()
        last = seq
        for record in through(world.journal.read(0), seq):
            kernel.apply(record)
            last = record.seq
        # The reducer holding these cells then (an upgrade may have renamed it since), and
        # the state read through the schema of the cell's era then.
        then = kernel.eras.current.names.get(world.kernel.cell_space(reducer))
        found = None if then is None else kernel.cell_of(then, raw_key)
        if found is None or then is None:
            return CellAt(seq, last, None, None)
        schema, era_air = kernel.state_schema(then, found[0].manifest_hash)
        state = to_sugar(Ref(schema), cbor.loads(found[1]), era_air.schemas)
    return CellAt(seq, last, found[1], state, cbor.raw_to_hash(found[0].manifest_hash))


def _sugar(world: World, reducer: str, state_cbor: bytes | None) -> Any:
    """The state as sugar JSON through the current schema (the fast path runs only in a world
    of one era)."""
    if state_cbor is None:
        return None
    node = Ref(world.air.modules[reducer].abi.reducer.state)
    return to_sugar(node, cbor.loads(state_cbor), world.air.schemas)


def _cell_steps_at(world: World, where: CellKey, seq: int) -> tuple[bytes | None, int] | None:
    """The cell's state after ``seq`` by re-executing only its own steps, each checked against
    its journaled ``state_hash``; None when a step cannot be proven that way."""
    if len(world.kernel.eras.history) > 1:
        return None  # which era's module each step ran is the kernel's to say: replay
    runner = world.runner()
    module = world.air.wasm_hashes[where.reducer]
    state, records = _cell_records(world, where, seq)
    for record in records:
        if record.kind == "step.failed":
            continue
        source = _read_one(world.journal, record.body.get("src"))
        delivery = _delivery(source) if record.kind == "step" else None
        if delivery is None:
            return None
        envelope = abi.encode_input(state, delivery[0], delivery[1], where.key_cbor, True)
        try:
            out = abi.decode_output(runner.run(module, envelope), module=where.reducer)
        except WorldError:
            return None
        digest = None if out.state_cbor is None else cbor.digest(out.state_cbor)
        if digest != record.body.get("state_hash"):
            return None
        state = out.state_cbor
    last = seq
    for record in world.journal.read(seq + 1):
        if record.kind not in OWED_KINDS:
            break
        last = record.seq
    return state, last


def _indexed(world: World, where: CellKey, seq: int) -> CellRecords | None:
    """What the history index holds of the cell up to ``seq``; None where it does not describe
    this journal (``world.history.index.read_cell``)."""
    genesis = _read_one(world.journal, 0)
    if genesis is None:
        return None
    journal = world.journal
    return read_cell(world.path, where.cell_id, seq + 1, genesis_digest(genesis), journal.seq_next)


def _cell_records(
    world: World, where: CellKey, seq: int
) -> tuple[bytes | None, list[JournalRecord]]:
    """A proven state of the cell to start from (None: the cell's beginning) and the cell's own
    records after it, up to ``seq``: from the history index (``world.history.index``) where it
    covers the journal, else by reading the journal."""
    journal = world.journal
    found = _indexed(world, where, seq)
    if found is None:
        return None, list(_cell_range(journal, where, 0, seq + 1))
    state, start = None, -1
    if found.state_seq is not None and found.state is not None:
        step = _read_one(journal, found.state_seq)
        if (
            step is not None
            and step.kind == "step"
            and step.subject.startswith(where.subject_prefix)
            and step.body.get("state_hash") == cbor.digest(found.state)
        ):
            state, start = found.state, found.state_seq
    records = [record for s in found.seqs if s > start if (record := _read_one(journal, s))]
    for gap_from, gap_to in found.gaps:
        records.extend(_cell_range(journal, where, max(gap_from, start + 1), gap_to))
    # The index names cells by 8 bytes of a hash: a record of another cell can share them.
    records = [record for record in records if record.subject.startswith(where.subject_prefix)]
    records.sort(key=lambda record: record.seq)
    return state, records


def cell_names(world: World, reducer: str) -> list[str]:
    """The names ``reducer``'s cells had in every era, ``reducer`` first: an upgrade may rename
    a reducer, and its cells keep their space; their records carry the name of their time."""
    kernel = world.kernel
    space = kernel.cell_space(reducer)
    names = [reducer]
    for era in reversed(kernel.eras.history):
        name = era.names.get(space)
        if name is not None and name not in names:
            names.append(name)
    return names


def cell_seqs(world: World, where: CellKey, seq: int) -> list[int]:
    """The seqs of the cell's own records at or before ``seq``, ascending (the inspector's
    timeline pages through them): from the history index where it covers the journal, else by
    reading the journal. The index names a cell by 8 bytes of its hash, so a seq here can be
    another cell's record: a reader of the records checks their subjects."""
    journal = world.journal
    found = _indexed(world, where, seq)
    if found is None:
        return [record.seq for record in _cell_range(journal, where, 0, seq + 1)]
    seqs = set(found.seqs)
    for gap_from, gap_to in found.gaps:
        seqs.update(record.seq for record in _cell_range(journal, where, gap_from, gap_to))
    return sorted(seqs)


def _cell_range(
    journal: FileJournal, where: CellKey, seq_from: int, seq_to: int
) -> Iterator[JournalRecord]:
    """The cell's records with ``seq_from <= seq < seq_to``, read from the journal."""
    if seq_from >= seq_to:
        return
    for record in journal.read(seq_from):
        if record.seq >= seq_to:
            return
        if record.subject.startswith(where.subject_prefix):
            yield record


def _read_one(journal: FileJournal, seq: Any) -> JournalRecord | None:
    """The record at ``seq``, or None if there is none (or ``seq`` is not a seq)."""
    if type(seq) is not int or not 0 <= seq < journal.seq_next:
        return None
    return next(iter(journal.read(seq)), None)


def _delivery(source: JournalRecord | None) -> tuple[str, bytes] | None:
    """The (schema, value) a step consumed from ``source``, when ``source`` says it alone."""
    if source is None:
        return None
    body = source.body
    if source.kind == "event.in":
        return str(body["schema"]), bytes(body["value"])
    if source.kind == "plan.step" and "event" in body:
        schema, value = body["event"]
        return str(schema), bytes(value)
    events = body.get("events") if source.kind == "step" else None
    if isinstance(events, list) and len(events) == 1:
        schema, value = events[0]
        return str(schema), bytes(value)
    return None


def state_at(path: Path, reducer: str, key: Any, seq: int) -> Any | None:
    """The cell's state (sugar JSON) right after journal position ``seq``; None if absent."""
    return cell_at(path, reducer, key, seq).state


@dataclass(frozen=True)
class HistoryEntry:
    """One line of a cell's history: ``record`` is an input routed to the cell (``role``
    ``"input"``) or one of the cell's own records (``"step"``); a step has ``source``, the
    record whose delivery it consumed (None if the journal no longer holds it)."""

    role: str
    record: JournalRecord
    source: JournalRecord | None = None


class _Inputs:
    """Which ``event.in`` records route to one cell (as ``Kernel._route`` routes them)."""

    def __init__(self, air: LoadedAir, where: CellKey) -> None:
        self.where = where
        self.fields: dict[str, list[str]] = {}
        for route in air.manifest.routing.events:
            if route.reducer == where.reducer and route.key_field:
                self.fields.setdefault(route.event, []).append(route.key_field)

    def matches(self, record: JournalRecord) -> bool:
        if record.kind != "event.in":
            return False
        fields = self.fields.get(record.body.get("schema"), [])
        if not fields:
            return False
        value = cbor2.loads(record.body["value"])
        if not isinstance(value, dict):
            return False
        return any(f in value and cbor.dumps(value[f]) == self.where.key_cbor for f in fields)


class CellHistory:
    """A cell's inputs and steps in journal order, read in one pass; ``read`` again with the
    next ``from_seq`` to follow a growing journal (inputs shown and not yet stepped are kept,
    so a step later on still finds its source without a second read)."""

    def __init__(self, air: LoadedAir, where: CellKey) -> None:
        self._inputs = _Inputs(air, where)
        self._waiting: dict[int, JournalRecord] = {}
        self._prefix = where.subject_prefix
        self._cell = where.cell_id

    def read(self, journal: FileJournal, from_seq: int = 0) -> Iterator[HistoryEntry]:
        """The entries from ``from_seq`` to the journal's end, every record read."""
        return self._entries(journal, journal.read(from_seq))

    def indexed(
        self,
        world: Path,
        journal: FileJournal,
        from_seq: int,
        stop: int,
        reads_max: int | None = None,
        upgraded: bool | None = None,
    ) -> Iterator[HistoryEntry] | None:
        """The entries of ``[from_seq, stop)``, the same as ``read`` gives, read through the
        history index (``world.history.index``) where it covers them; None where it cannot
        serve (no index, or one of another journal; a world of several eras, whose routes may
        have differed, a partition, a cell moved in), or would read more than ``reads_max``
        records: then ``read`` it is. ``upgraded``: whether the world has begun an era after its
        first (None: found out, ``world._reading.applied_before``; an open world's kernel knows).

        What is read: the cell's own records the index lists; every record of the stretches
        it does not cover; the inputs the cell's steps consumed (each step names its source,
        ``src``); and every record after the last source consumed, where inputs still queued
        are. A cell's mailbox is FIFO in journal order (``kernel._scheduler``), so every input
        routed to it before its last consumed one was consumed by a step: nothing before that
        needs reading. Those records, in journal order, go through the same tests as ``read``'s
        (routed input, own record), so the entries are the same."""
        found = self._candidates(world, journal, from_seq, stop, reads_max, upgraded)
        return None if found is None else self._entries(journal, iter(found))

    def _candidates(
        self,
        world: Path,
        journal: FileJournal,
        from_seq: int,
        stop: int,
        reads_max: int | None,
        upgraded: bool | None,
    ) -> list[JournalRecord] | None:
        genesis = next(iter(journal.read(0)), None)
        if genesis is None or not isinstance(genesis.body, dict) or "partition" in genesis.body:
            return None
        if upgraded if upgraded is not None else applied_before(world, journal, stop):
            return None
        cell = read_cell(
            world, self._cell, stop, genesis_digest(genesis), journal.seq_next_committed
        )
        if cell is None:
            return None
        spans = [(max(a, from_seq), b) for a, b in cell.gaps if b > from_seq]
        own = [seq for seq in cell.seqs if seq >= from_seq]
        budget = len(own) + sum(b - a for a, b in spans)
        if reads_max is not None and budget > reads_max:
            return None
        records: dict[int, JournalRecord] = {}
        for a, b in spans:
            records.update((r.seq, r) for r in _span(journal, a, b) if self._shown(r))
        records.update((r.seq, r) for r in _at_seqs(journal, own))
        sources, last = set(), from_seq - 1
        for record in list(records.values()):
            if record.kind == CELL_IMPORTED:
                return None  # not stepped here since its start: its inputs are not its sources
            src = record.body.get("src") if record.subject.startswith(self._prefix) else None
            if isinstance(src, int):
                last = max(last, src)
                if src >= from_seq and src not in records:
                    sources.add(src)
        if reads_max is not None and budget + len(sources) + stop - last > reads_max:
            return None
        records.update((r.seq, r) for r in _at_seqs(journal, sorted(sources)))
        records.update((r.seq, r) for r in _span(journal, last + 1, stop) if self._shown(r))
        return [records[seq] for seq in sorted(records) if seq < stop]

    def _shown(self, record: JournalRecord) -> bool:
        return self._inputs.matches(record) or record.subject.startswith(self._prefix)

    def _entries(
        self, journal: FileJournal, records: Iterator[JournalRecord]
    ) -> Iterator[HistoryEntry]:
        for record in records:
            if self._inputs.matches(record):
                self._waiting[record.seq] = record
                yield HistoryEntry("input", record)
            elif record.subject.startswith(self._prefix):
                yield HistoryEntry("step", record, self._source(journal, record))

    def _source(self, journal: FileJournal, record: JournalRecord) -> JournalRecord | None:
        src = record.body.get("src")
        if not isinstance(src, int):
            return None
        found = self._waiting.pop(src, None)
        if found is None:  # an event another step emitted, a receipt, a plan's event
            found = next(iter(journal.read(src)), None)
        return found


_NEAR: Final = 16
"""Records apart that ``_at_seqs`` reads on through rather than seek again."""


def _span(journal: FileJournal, seq_from: int, seq_to: int) -> Iterator[JournalRecord]:
    """The records of ``[seq_from, seq_to)``."""
    if seq_from >= seq_to:
        return
    for record in journal.read(seq_from):
        if record.seq >= seq_to:
            return
        yield record


def _at_seqs(journal: FileJournal, seqs: list[int]) -> Iterator[JournalRecord]:
    """The records at ``seqs`` (ascending): a seek for each (the segment index), or reading
    on where the next is near."""
    reading: Iterator[JournalRecord] | None = None
    at = -1
    for seq in seqs:
        if reading is None or not at < seq <= at + _NEAR:
            reading = iter(journal.read(seq))
        for record in reading:
            at = record.seq
            if at >= seq:
                break
        else:
            return
        if at == seq:
            yield record
