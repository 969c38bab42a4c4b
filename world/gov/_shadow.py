"""Shadow runs: a proposal run against what really happened, without touching the world
(``world upgrade shadow DIR ID [--from SEQ] [--events F.jsonl]``).

How. A kernel aside (memory journal and store, ``World.blank_kernel``) re-executes the world's
journal up to ``--from`` (default: the newest ``SHADOW_INPUTS`` outside events are re-fed, so
it starts just before the oldest of them), applies the proposal there (the same
``gov.applied`` record ``apply`` would journal) and upgrades every cell the proposal would
(``kernel._upgrades``: every cell of a reducer whose wasm or state schema changes). Then it
walks the real journal after that point in order, so the shadow sees the world's inputs in the
order and rhythm they came: an ``event.in`` is ingested again (under the new manifest), a tick
of the real world is one tick of the shadow, a receipt is handed over when the shadow has the
same intent queued, an approval when it has it parked, a run's cancel when the shadow has
that run live. Records of other kinds (cell imports, migrations, governance, an operator's
retry or drop of a dead letter: letter ids are seqs, which differ in the shadow) are not re-fed
and are counted under ``skipped``. The ``--events``
file's events follow. Then the shadow runs until idle.

Effects are never live and no adapter is called: an intent the shadow queues gets the real
journal's receipt for the same intent hash if there is one, else for the same effect (kind,
params, cap and origin: a reducer's intent hash names the seq of the delivery it handled, and
the shadow's seqs differ from the world's once the apply and upgrade records are in), else a
stub receipt (status ``stub``, as ``--effects stub`` makes); stubbed and parked intents are
listed.

What it reports, cell by cell, effect by effect and run by run, is ``world.gov._shadow_report``'s
to say (a shadow and a world compared: a second idea, so a module of its own); this module hands
it the shadow kernel, idle, with what the real journal held and what the run did. The report is
a canonical CBOR object in the CAS, and one ``gov.shadowed`` record
``{proposal, report, from, head, summary}`` (``report`` its raw address) journals that the
proposal was shadowed. AgentOS's shadow predicts effects for seed events; this one diffs against
what really happened, cell by cell.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from air import cbor
from kernel import RUN_CANCELLED, TICK_KINDS, Kernel
from kernel.journal import JournalRecord
from world._world import World
from world.effects import STUB_ADAPTER_ID, STUB_STATUS, failed_payload
from world.gov._apply import APPLIED, APPLIED_SUBJECT, applied_body, not_stale
from world.gov._cells import UPGRADE_BATCH_CELLS
from world.gov._proposals import (
    SHADOWED,
    SHADOWED_SUBJECT,
    Proposal,
    journal_gov,
    proposal,
)
from world.gov._shadow_report import (
    Counts,
    Tally,
    effect_key,
    effect_line,
    key_sugar,
    report,
    summary,
)
from world.history import through

__all__ = ["SHADOW_INPUTS", "Shadowed", "shadow"]

SHADOW_INPUTS: Final = 10_000
"""Outside events a shadow re-feeds by default (the newest ones)."""
_STUB_SAYS: Final = "shadow: not sent; a shadow run calls no adapter"


@dataclass
class Shadowed:
    """A shadow run's report (``as_json``) and where it was kept."""

    seq: int
    address: str
    report: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "address": self.address, **self.report}


def shadow(
    world: World,
    proposal_id: int,
    *,
    from_seq: int | None = None,
    events: Iterable[tuple[str, Any]] = (),
) -> Shadowed:
    """Shadow proposal ``proposal_id`` (see the module docstring); the report, kept in the
    CAS and journaled as ``gov.shadowed``. ``UpgradeRefused`` for a stale proposal."""
    world._writable()
    found = proposal(world, proposal_id)
    not_stale(world, found.id, found.base)
    head = world.journal.seq_next
    start = _start(world, head if from_seq is None else min(from_seq, head), from_seq is None)
    run = _Run(world, found, start, head)
    run.replay_prefix()
    run.apply_proposal()
    run.refeed()
    run.feed(events)
    run.drain()
    kept = report(world, run.kernel, found, (start, head), run.real, run.counts)
    address = world.cas.put(cbor.dumps(kept))
    body = {
        "proposal": found.id,
        "report": cbor.hash_to_raw(address),
        "from": start,
        "head": head,
        "summary": summary(kept),
    }
    seq = journal_gov(world, (SHADOWED, SHADOWED_SUBJECT, body))
    return Shadowed(seq, address, kept)


def _start(world: World, wanted: int, by_default: bool) -> int:
    """Where re-feeding starts: ``wanted`` (or, ``by_default``, the oldest of the newest
    ``SHADOW_INPUTS`` outside events), moved to the end of the tick it falls in."""
    if by_default:
        newest: collections.deque[int] = collections.deque(maxlen=SHADOW_INPUTS)
        for record in world.journal.read(0):
            if record.kind == "event.in":
                newest.append(record.seq)
        wanted = newest[0] if len(newest) == SHADOW_INPUTS else 1
    wanted = max(wanted, 1)  # the genesis record is always replayed
    last = wanted - 1
    for record in through(world.journal.read(wanted - 1), wanted - 1):
        last = record.seq
    return last + 1


@dataclass
class _Answers:
    """What the real journal answered after the start, for the shadow to be answered alike:
    receipts by intent hash and by effect, and approvals."""

    receipts: dict[bytes, dict[str, Any]] = field(default_factory=dict)
    receipts_by_effect: dict[tuple[Any, ...], collections.deque[dict[str, Any]]] = field(
        default_factory=lambda: collections.defaultdict(collections.deque)
    )
    approvals: dict[bytes, bool] = field(default_factory=dict)
    effect_of: dict[bytes, tuple[Any, ...]] = field(default_factory=dict)


class _Run:
    def __init__(self, world: World, found: Proposal, start: int, head: int) -> None:
        self.world = world
        self.found = found
        self.start = start
        self.head = head
        self.kernel: Kernel = world.blank_kernel(first_seq=start)
        self.answers = _Answers()
        self.real = Tally()
        self.counts = Counts()
        self.ticks = 0

    def replay_prefix(self) -> None:
        for record in self.world.journal.read(0):
            if record.seq >= self.start:
                break
            self.kernel.apply(record)

    def apply_proposal(self) -> None:
        kernel = self.kernel
        kernel.ingest_gov([(APPLIED, APPLIED_SUBJECT, applied_body(self.found))])
        for line in self.found.diff["reducers"]:
            if line["new"] is None or (line["wasm_same"] and line["state_same"]):
                continue
            reducer = line["new"]
            space = kernel.cell_space(reducer)
            keys = [entry.key_cbor for _khash, entry in kernel.cells.iter_entries(space)]
            for at in range(0, len(keys), UPGRADE_BATCH_CELLS):
                made = kernel.ingest_cell_upgrade(reducer, keys[at : at + UPGRADE_BATCH_CELLS])
                if made is None:
                    continue
                for key_cbor, _from, reason in made[1]["failed"]:
                    key = key_sugar(kernel, reducer, key_cbor)
                    self.counts.upgrades_failed.append(
                        {"reducer": reducer, "key": key, "reason": reason}
                    )

    def refeed(self) -> None:
        """The real journal after the start, in order (the module docstring)."""
        for record in self._tail():
            self._note(record)
            kind = record.kind
            if kind == "event.in":
                body = record.body
                self.kernel.ingest_many([(body["schema"], body["value"], None, body.get("id"))])
                self.counts.inputs += 1
            elif kind in TICK_KINDS:
                if self.kernel.tick():
                    self.ticks += 1
            elif kind == "receipt":
                if self.kernel.effects.status_of(record.body["intent_hash"]) == "queued":
                    self._receipt(record.body)
            elif kind == "effect.approval":
                self._approve(record.body["intent_hash"], bool(record.body["approved"]))
            elif kind == RUN_CANCELLED and record.body["run_id"] in self.kernel.plans.runs:
                self.kernel.ingest_run_cancel(record.body["run_id"])
            elif kind not in ("effect.queued", "policy.decision") and not kind.startswith(
                ("world.", "gov.")
            ):
                self.counts.skipped[kind] += 1  # inputs of other kinds: cell imports, migrations

    def feed(self, events: Iterable[tuple[str, Any]]) -> None:
        for schema, value in events:
            value_cbor, normalised = self.kernel.normalise_event(schema, value)
            self.kernel.ingest_many([(schema, value_cbor, normalised, None)])
            self.counts.extra += 1

    def drain(self) -> None:
        """Run until idle, answering queued intents (real receipt, else a stub) and parked
        ones the world decided (its approval); what is left parked is reported."""
        kernel, limit = self.kernel, self.world.limits.steps_per_run_max
        while self.ticks < limit:
            while self.ticks < limit and kernel.tick():
                self.ticks += 1
            decided = [
                (i.intent_hash, self.answers.approvals[i.intent_hash])
                for i in kernel.effects.parked()
                if i.intent_hash in self.answers.approvals
            ]
            for intent_hash, approved in decided:
                self._approve(intent_hash, approved)
            queued = [i for i in kernel.effects.intents.values() if i.status == "queued"]
            if not queued and not decided:
                return
            for intent in queued:
                self._answer(intent)

    def _answer(self, intent: Any) -> None:
        found = self.answers.receipts.get(intent.intent_hash)
        if found is None:
            same = self.answers.receipts_by_effect.get(effect_key(intent))
            if same:
                found = {**same.popleft(), "intent_hash": intent.intent_hash}
        if found is not None:
            self._receipt(found)
            return
        self.counts.stubbed.append(effect_line(intent))
        self.kernel.ingest_receipt(
            {
                "intent_hash": intent.intent_hash,
                "adapter_id": STUB_ADAPTER_ID,
                "status": STUB_STATUS,
                "payload": cbor.dumps(failed_payload(intent.kind, _STUB_SAYS)),
                "sig": b"",
            }
        )

    def _receipt(self, body: dict[str, Any]) -> None:
        self.counts.reused += 1
        self.kernel.ingest_receipt(dict(body))

    def _approve(self, intent_hash: bytes, approved: bool) -> None:
        intent = self.kernel.effects.intents.get(intent_hash)
        if intent is not None and intent.status == "parked":
            self.kernel.ingest_approval(intent_hash, approved)

    def _tail(self) -> Iterator[JournalRecord]:
        for record in self.world.journal.read(self.start):
            if record.seq >= self.head:
                return
            yield record

    def _note(self, record: JournalRecord) -> None:
        """Remember what the comparison (``real``) and the answers need from a real record."""
        self.real.note(record)
        answers, body = self.answers, record.body
        if record.kind == "receipt":
            answers.receipts[body["intent_hash"]] = body
            effect = answers.effect_of.get(body["intent_hash"])
            if effect is not None:
                answers.receipts_by_effect[effect].append(body)
        elif record.kind == "effect.approval":
            answers.approvals[body["intent_hash"]] = bool(body["approved"])
        elif record.kind == "effect.queued":
            answers.effect_of[body["intent_hash"]] = effect_key(body)
