"""Why a cell holds its state: the chain of causes back from the record that wrote it
(``world why``, the inspector's why page).

Every link is read from the journal, never guessed from timing:

- the state a cell holds after ``at`` was written by its last own ``step`` (or
  ``cell.imported``) at or before ``at``, under any name its reducer had in an era (an upgrade
  may rename it; the cell's records: ``_timetravel.cell_seqs``, through the history index
  where it covers the journal), or by a later ``cell.upgraded`` that gave it a new state (the
  upgrade hook's), whose own cause is then that step;
- a ``step``'s ``src`` is the record whose delivery it consumed: an ``event.in`` (sent from
  outside, or forwarded by another partition of a partitioned world: the chain ends there,
  naming the partition and its record), a ``step`` that emitted the event (its own ``src`` next), a
  ``plan.step`` that raised it (then the run's ``plan.started``, whose ``src`` is the record
  that journaled the run's trigger event), a ``receipt`` (an effect the cell asked for:
  ``sys/TimerFired@1`` & co.), or a ``deadletter.retried`` (then the ``step.failed`` that made
  the letter, whose ``src`` is the first delivery);
- a receipt answers an intent: its ``effect.queued`` (the origin), ``policy.decision`` and any
  ``effect.approval``, all under ``/world/effect/<intent hash>/``. A reducer's intent was made
  by the step its tick journaled just before ``effect.queued`` (a tick's records are
  contiguous); a plan's by the run's ``emit_effect`` step;
- a run that raised an event shows beside it the receipts and the awaited events it bound
  before raising it (what the raised value was computed from): each receipt with its intent's
  records, each awaited event with the record that journaled it (the binding's ``src``).

A link that needs a run's start or an intent's records by name (not by seq) is found in one
forward pass over the journal up to ``at``, made only when the chain needs it; records a seq
names are read directly. A chain is at most ``CHAIN_MAX`` links (a cycle cannot happen: every
link goes to a smaller seq).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kernel.journal import JournalRecord
from world._views import RecordView
from world._world import World
from world.history._timetravel import (
    CellKey,
    _read_one,
    cell_at,
    cell_key,
    cell_names,
    cell_seqs,
    check_seq,
)

__all__ = ["CHAIN_MAX", "Cause", "Why", "why"]

CHAIN_MAX: Final = 1000
"""Links followed at most; a longer chain ends with ``ends`` saying so."""


@dataclass
class Cause:
    """One record of the chain: ``link`` says how it caused the one before it (for the first,
    how it made the state), ``says`` what it is in a line, ``record`` is the record as
    ``journal tail`` renders it, ``beside`` the records that explain it further (an intent's
    decision, a run's receipts)."""

    seq: int
    kind: str
    link: str
    says: str
    record: dict[str, Any]
    beside: list[Cause] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "link": self.link,
            "says": self.says,
            "record": self.record,
            "beside": [cause.to_json() for cause in self.beside],
        }


@dataclass
class Why:
    """The answer: the cell, the position asked about, its state then (sugar JSON; None: the
    cell did not exist), the chain (newest first) and how the chain ends."""

    reducer: str
    key: Any
    at: int
    state: Any
    chain: list[Cause]
    ends: str

    def to_json(self) -> dict[str, Any]:
        return {
            "reducer": self.reducer,
            "key": self.key,
            "at": self.at,
            "state": self.state,
            "chain": [cause.to_json() for cause in self.chain],
            "ends": self.ends,
        }


def why(path: Path, reducer: str, key: Any, at: int | None = None) -> Why:
    """Why cell ``reducer``/``key`` holds its state right after ``at`` (default: the head)."""
    with World.open(Path(path), readonly=True) as world:
        seq_next = world.journal.seq_next
        if at is None:
            at = seq_next - 1
        check_seq(at, seq_next)
        where = cell_key(world.air, reducer, key)
        chain, ends = _Walk(world, where, at).chain()
    state = cell_at(Path(path), reducer, key, at).state if chain else None
    return Why(reducer, key, at, state, chain, ends)


class _Walk:
    def __init__(self, world: World, where: CellKey, at: int) -> None:
        self.world = world
        self.journal = world.journal
        self.where = where
        self.at = at
        self.view = RecordView.of_world(world)
        self._named: _Names | None = None

    # --- the walk ----------------------------------------------------------------------------

    def chain(self) -> tuple[list[Cause], str]:
        """The chain, newest first, and how it ends."""
        names = cell_names(self.world, self.where.reducer)
        prefixes = tuple(CellKey(name, self.where.key_cbor).subject_prefix for name in names)
        own: set[int] = set()
        for name in names:
            own.update(cell_seqs(self.world, CellKey(name, self.where.key_cbor), self.at))
        writer = None
        for seq in sorted(own, reverse=True):
            record = _read_one(self.journal, seq)
            if record is None or not record.subject.startswith(prefixes):
                continue  # the index names cells by 8 bytes of a hash
            if record.kind in ("step", "cell.imported"):
                writer = record
                break
        chain: list[Cause] = []
        upgraded = self._upgraded_after(-1 if writer is None else writer.seq, names)
        if upgraded is not None:
            to = self.view.render(upgraded)["body"].get("to")
            chain.append(self._cause(upgraded, "upgraded the state", f"cells upgrade to era {to}"))
            if writer is None:
                return chain, "the upgraded state's first writer is not in the journal"
        if writer is None:
            return [], "the cell did not exist then"
        written = "wrote the state it upgraded" if chain else "wrote the state"
        if writer.kind == "cell.imported":
            chain.append(self._cause(writer, written.replace("wrote", "imported"), "imported"))
            return chain, "imported"
        if writer.body.get("state_hash") is None:
            written = "deleted the cell"
        chain.append(self._cause(writer, written, self._step_says(self.view.render(writer))))
        return chain, self._follow(writer, chain)

    def _upgraded_after(self, seq: int, names: list[str]) -> JournalRecord | None:
        """The last ``cell.upgraded`` after ``seq`` (up to ``at``) that made this cell a new
        state (a re-pin, which keeps the state, is not one). Only a world of several eras has
        any; they are found in one pass over the reducer records after ``seq``."""
        if len(self.world.kernel.eras.history) < 2:
            return None
        found = None
        for record in self.journal.read(seq + 1, "/world/reducer/**"):
            if record.seq > self.at:
                break
            body = record.body
            if record.kind != "cell.upgraded" or body.get("reducer") not in names:
                continue
            for key, _era, state_hash in body.get("cells", []):
                if key == self.where.key_cbor and state_hash is not None:
                    found = record
        return found

    def _follow(self, record: JournalRecord, chain: list[Cause]) -> str:
        """Append the causes of ``record`` (a step, or a run's start) until one has none."""
        while len(chain) < CHAIN_MAX:
            if "src" not in record.body:
                return "the run's start does not name its trigger (journaled before runs did)"
            src = _read_one(self.journal, record.body.get("src"))
            if src is None:
                return "the journal no longer holds the record it consumed"
            if src.kind == "event.in" and "origin" in src.body:
                ends = _forwarded(src.body["origin"])
                chain.append(self._cause(src, "delivered it", ends))
                return ends
            if src.kind == "event.in":
                sent = src.body.get("id")
                says = "sent from outside" + (f" with id {sent!r}" if sent is not None else "")
                chain.append(self._cause(src, "delivered it", says))
                return "sent from outside"
            if src.kind == "step":
                chain.append(self._cause(src, "emitted it", self._step_says(self.view.render(src))))
                record = src
            elif src.kind == "plan.step":
                chain.append(self._raised(src))
                start = self._run_start(src)
                if start is None:
                    return "the run's start is not in the journal"
                chain.append(self._cause(start, "ran it", self._start_says(start)))
                record = start
            elif src.kind == "receipt":
                cause, origin = self._receipt(src)
                chain.append(cause)
                if origin is None:
                    return "the intent's origin is not in the journal"
                chain.append(origin)
                if origin.kind == "plan.step":
                    start = self._run_start(_read_one(self.journal, origin.seq))
                    if start is None:
                        return "the run's start is not in the journal"
                    chain.append(self._cause(start, "ran it", self._start_says(start)))
                    record = start
                else:
                    record = _read_one(self.journal, origin.seq)  # type: ignore[assignment]
            elif src.kind == "deadletter.retried":
                chain.append(self._cause(src, "delivered it again", "an operator's retry"))
                failed = _read_one(self.journal, _letter_seq(src.body.get("id")))
                if failed is None or failed.kind not in ("step.failed", "step"):
                    return "the retried letter's first delivery is not in the journal"
                chain.append(self._cause(failed, "failed on it first", self._failed_says(failed)))
                record = failed
            else:
                chain.append(self._cause(src, "delivered it", src.kind))
                return f"a {src.kind} record"
        return f"the chain is longer than {CHAIN_MAX} links"

    # --- runs and intents --------------------------------------------------------------------

    def _raised(self, record: JournalRecord) -> Cause:
        body = self.view.render(record)["body"]
        event = body.get("event") or {}
        schema = event.get("schema") if isinstance(event, dict) else None
        says = f"run {body.get('run_id')} raised {schema} at its step {body.get('step')!r}"
        cause = self._cause(record, "raised it", says)
        names = self._names()
        for seq, intent in names.bound.get(record.body.get("run_id"), []):
            receipt = _read_one(self.journal, names.intents.get(intent, {}).get("receipt"))
            if seq < record.seq and receipt is not None:
                cause.beside.append(self._receipt(receipt, "bound by the run before")[0])
        for seq in names.awaited.get(record.body.get("run_id"), []):
            binding = _read_one(self.journal, seq) if seq < record.seq else None
            if binding is not None:
                cause.beside.append(self._awaited(binding))
        return cause

    def _awaited(self, binding: JournalRecord) -> Cause:
        """An awaited event the run bound, with the record that journaled it beside."""
        event = self.view.render(binding)["body"].get("event") or {}
        schema = event.get("schema") if isinstance(event, dict) else None
        cause = self._cause(binding, "awaited by the run before", f"the run bound {schema}")
        if "src" not in binding.body:
            cause.says += " (journaled before bindings named their event's record)"
            return cause
        source = _read_one(self.journal, binding.body["src"])
        if source is not None:
            says = "sent from outside" if source.kind == "event.in" else source.kind
            if source.kind == "step":
                says = self._step_says(self.view.render(source))
            cause.beside.append(self._cause(source, "delivered it", says))
        return cause

    def _run_start(self, record: JournalRecord | None) -> JournalRecord | None:
        if record is None:
            return None
        seq = self._names().starts.get(record.body.get("run_id"))
        return _read_one(self.journal, seq)

    def _receipt(self, receipt: JournalRecord, link: str = "answered it") -> tuple[Cause, Any]:
        """The receipt's cause with its intent's records beside it, and the intent's origin
        (the step or plan step that made it), or None."""
        body = self.view.render(receipt)["body"]
        says = (
            f"{body.get('adapter_id')} answered intent {body.get('intent_hash')}"
            f" ({body.get('status')})"
        )
        cause = self._cause(receipt, link, says)
        intent = receipt.body.get("intent_hash")
        records = self._names().intents.get(intent, {})
        for kind in ("effect.queued", "policy.decision", "effect.approval"):
            found = _read_one(self.journal, records.get(kind))
            if found is not None:
                cause.beside.append(self._cause(found, _BESIDE[kind], self._intent_says(found)))
        queued = _read_one(self.journal, records.get("effect.queued"))
        origin = None if queued is None else self._maker(queued)
        return cause, origin

    def _maker(self, queued: JournalRecord) -> Cause | None:
        """The record whose tick made the intent ``queued`` names: the tick's first record,
        the nearest before ``queued`` that is not an intent's own."""
        seq = queued.seq - 1
        while seq >= 0:
            record = _read_one(self.journal, seq)
            if record is None:
                return None
            if record.kind not in ("effect.queued", "policy.decision"):
                if record.kind == "plan.step":
                    body = self.view.render(record)["body"]
                    says = f"run {body.get('run_id')} asked for it at its step {body.get('step')!r}"
                    return self._cause(record, "asked for it", says)
                if record.kind == "step":
                    rendered = self.view.render(record)
                    return self._cause(record, "asked for it", self._step_says(rendered))
                return None
            seq -= 1
        return None

    def _names(self) -> _Names:
        if self._named is None:
            self._named = _Names(self.journal.read(0), self.at)
        return self._named

    # --- lines -------------------------------------------------------------------------------

    def _cause(self, record: JournalRecord, link: str, says: str) -> Cause:
        return Cause(record.seq, record.kind, link, says, self.view.render(record))

    @staticmethod
    def _step_says(rendered: dict[str, Any]) -> str:
        body = rendered["body"]
        says = f"{body.get('reducer')} {_shown(body.get('key'))} stepped"
        events = body.get("events") or []
        if events:
            names = ", ".join(str(e.get("schema")) for e in events if isinstance(e, dict))
            says += f", emitting {names}"
        if body.get("effects"):
            says += f", asking for {len(body['effects'])} effect(s)"
        return says

    def _start_says(self, record: JournalRecord) -> str:
        body = record.body
        return f"run {body.get('run_id')} of {body.get('plan')} started by seq {body.get('src')}"

    def _failed_says(self, record: JournalRecord) -> str:
        reason = record.body.get("reason") or {}
        return f"{record.body.get('reducer')} failed: {reason.get('code')} {reason.get('detail')}"

    def _intent_says(self, record: JournalRecord) -> str:
        body = self.view.render(record)["body"]
        if record.kind == "effect.queued":
            origin = body.get("origin") or {}
            return f"{body.get('kind')} under cap {body.get('cap')}, from {origin.get('kind')}"
        if record.kind == "policy.decision":
            return f"policy: {body.get('decision')} (rule {body.get('rule_index')})"
        return "approved" if body.get("approved") else "denied"


_BESIDE: Final = {
    "effect.queued": "the intent",
    "policy.decision": "the policy's decision",
    "effect.approval": "an operator's decision",
}


class _Names:
    """What the chain looks up by name, from one pass up to ``at``: each run's start seq, each
    intent's records by kind, and each run's ``await_receipt`` bindings."""

    def __init__(self, records: Iterator[JournalRecord], at: int) -> None:
        self.starts: dict[int, int] = {}
        self.intents: dict[bytes, dict[str, int]] = {}
        self.bound: dict[int, list[tuple[int, bytes]]] = {}
        self.awaited: dict[int, list[int]] = {}
        for record in records:
            if record.seq > at:
                break
            kind, body = record.kind, record.body
            if kind == "plan.started":
                self.starts[body["run_id"]] = record.seq
            elif kind in ("effect.queued", "policy.decision", "effect.approval", "receipt"):
                self.intents.setdefault(body["intent_hash"], {})[kind] = record.seq
            elif kind == "plan.step" and body.get("op") == "await_receipt":
                intent = body.get("intent_hash")
                if intent is not None:
                    self.bound.setdefault(body["run_id"], []).append((record.seq, intent))
            elif kind == "plan.step" and body.get("op") == "await_event" and "event" in body:
                self.awaited.setdefault(body["run_id"], []).append(record.seq)


def _forwarded(origin: list[int]) -> str:
    """How a chain ends at an event another partition forwarded (``kernel._partition``): its
    cause is in that partition's journal, where ``world why`` goes on."""
    source, seq, idx = origin
    return (
        f"forwarded from partition {source} (its record {seq}, delivery {idx}): the chain goes "
        f"on in that partition, p{source}"
    )


def _letter_seq(letter_id: Any) -> int | None:
    """The seq of the record that made dead letter ``letter_id`` (``"17"`` or ``"17.2"``)."""
    try:
        return int(str(letter_id).split(".", 1)[0])
    except ValueError:
        return None


def _shown(value: Any) -> str:
    """A rendered key or value in a line: JSON text."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
