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

What it reports, comparing the shadow with the real world at its head:

* ``cells``: how many cells would hold another state, and for the first ``SHADOW_SHOWN_MAX``
  each cell's state on both sides and the fields that differ (each side read through its own
  era's schema);
* ``upgrades_failed``: cells whose upgrade would fail (they would stay in their era);
* ``steps_failed``: failed steps (reducer, key, reason code) the shadow has and the world has
  not (``new``), and the other way round (``gone``);
* ``effects``: intents the shadow emits that the world did not (``new``) and the other way round
  (``gone``), compared by effect (kind, params, cap, origin), with the counts reused, stubbed
  and left parked;
* ``runs``: plan runs whose plan or outcome (running, or the status they ended with) differ.

The report is a canonical CBOR object in the CAS, and one ``gov.shadowed`` record
``{proposal, report, from, head, summary}`` (``report`` its raw address) journals that the
proposal was shadowed. AgentOS's shadow predicts effects for seed events; this one diffs against
what really happened, cell by cell.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from air import cbor
from air.types import Ref
from air.values import to_sugar
from kernel import RUN_CANCELLED, TICK_KINDS, Kernel
from kernel.cells import CellEntry
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
from world.history import through

__all__ = ["SHADOW_INPUTS", "SHADOW_SHOWN_MAX", "Shadowed", "field_diff", "shadow"]

SHADOW_INPUTS: Final = 10_000
"""Outside events a shadow re-feeds by default (the newest ones)."""
SHADOW_SHOWN_MAX: Final = 100
"""Cells, failures and effects listed one by one in a report (all are counted)."""
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
    report = run.report()
    address = world.cas.put(cbor.dumps(report))
    body = {
        "proposal": found.id,
        "report": cbor.hash_to_raw(address),
        "from": start,
        "head": head,
        "summary": _summary(report),
    }
    seq = journal_gov(world, (SHADOWED, SHADOWED_SUBJECT, body))
    return Shadowed(seq, address, report)


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


def _effect_key(intent: Any) -> tuple[Any, ...]:
    """An intent's identity without seqs: kind, params, cap and origin."""
    origin = intent.origin if hasattr(intent, "origin") else intent["origin"]
    where = tuple(sorted((k, v) for k, v in origin.items() if not isinstance(v, (dict, list))))
    if hasattr(intent, "kind"):
        return (intent.kind, intent.params_cbor, intent.cap, where)
    return (intent["kind"], intent["params"], intent["cap"], where)


@dataclass
class _Real:
    """What the real journal holds after the start: for lookups and the comparison."""

    receipts: dict[bytes, dict[str, Any]] = field(default_factory=dict)
    receipts_by_effect: dict[tuple[Any, ...], collections.deque[dict[str, Any]]] = field(
        default_factory=lambda: collections.defaultdict(collections.deque)
    )
    approvals: dict[bytes, bool] = field(default_factory=dict)
    effects: collections.Counter[tuple[Any, ...]] = field(default_factory=collections.Counter)
    effect_of: dict[bytes, tuple[Any, ...]] = field(default_factory=dict)
    failures: collections.Counter[tuple[Any, ...]] = field(default_factory=collections.Counter)
    runs: dict[int, list[Any]] = field(default_factory=dict)


class _Run:
    def __init__(self, world: World, found: Proposal, start: int, head: int) -> None:
        self.world = world
        self.found = found
        self.start = start
        self.head = head
        self.kernel: Kernel = world.blank_kernel(first_seq=start)
        self.real = _Real()
        self.inputs = 0
        self.extra = 0
        self.skipped: collections.Counter[str] = collections.Counter()
        self.upgrades_failed: list[dict[str, Any]] = []
        self.reused = 0
        self.stubbed: list[dict[str, Any]] = []
        self.ticks = 0

    # --- running -------------------------------------------------------------------------------

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
                    self.upgrades_failed.append(
                        {"reducer": reducer, "key": self._key(reducer, key_cbor), "reason": reason}
                    )

    def refeed(self) -> None:
        """The real journal after the start, in order (the module docstring)."""
        for record in self._tail():
            self._note(record)
            kind = record.kind
            if kind == "event.in":
                body = record.body
                self.kernel.ingest_many([(body["schema"], body["value"], None, body.get("id"))])
                self.inputs += 1
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
                self.skipped[kind] += 1  # inputs of other kinds: cell imports, migrations

    def feed(self, events: Iterable[tuple[str, Any]]) -> None:
        for schema, value in events:
            value_cbor, normalised = self.kernel.normalise_event(schema, value)
            self.kernel.ingest_many([(schema, value_cbor, normalised, None)])
            self.extra += 1

    def drain(self) -> None:
        """Run until idle, answering queued intents (real receipt, else a stub) and parked
        ones the world decided (its approval); what is left parked is reported."""
        kernel, limit = self.kernel, self.world.limits.steps_per_run_max
        while self.ticks < limit:
            while self.ticks < limit and kernel.tick():
                self.ticks += 1
            decided = [
                (i.intent_hash, self.real.approvals[i.intent_hash])
                for i in kernel.effects.parked()
                if i.intent_hash in self.real.approvals
            ]
            for intent_hash, approved in decided:
                self._approve(intent_hash, approved)
            queued = [i for i in kernel.effects.intents.values() if i.status == "queued"]
            if not queued and not decided:
                return
            for intent in queued:
                self._answer(intent)

    def _answer(self, intent: Any) -> None:
        found = self.real.receipts.get(intent.intent_hash)
        if found is None:
            same = self.real.receipts_by_effect.get(_effect_key(intent))
            if same:
                found = {**same.popleft(), "intent_hash": intent.intent_hash}
        if found is not None:
            self._receipt(found)
            return
        self.stubbed.append(self._effect_line(intent))
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
        self.reused += 1
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
        """Remember what the comparison and the lookups need from a real record."""
        real, body = self.real, record.body
        if record.kind == "receipt":
            real.receipts[body["intent_hash"]] = body
            effect = real.effect_of.get(body["intent_hash"])
            if effect is not None:
                real.receipts_by_effect[effect].append(body)
        elif record.kind == "effect.approval":
            real.approvals[body["intent_hash"]] = bool(body["approved"])
        elif record.kind == "effect.queued":
            effect = _effect_key(body)
            real.effects[effect] += 1
            real.effect_of[body["intent_hash"]] = effect
        elif record.kind == "step.failed":
            real.failures[self._failure(body)] += 1
        elif record.kind == "plan.started":
            real.runs[body["run_id"]] = [body["plan"], "running"]
        elif record.kind == "plan.ended" and body["run_id"] in real.runs:
            real.runs[body["run_id"]][1] = body["status"]
        elif record.kind == RUN_CANCELLED and body["run_id"] in real.runs:
            real.runs[body["run_id"]][1] = "cancelled"

    # --- the report ------------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        shadow_effects: collections.Counter[tuple[Any, ...]] = collections.Counter()
        shown_effect: dict[tuple[Any, ...], dict[str, Any]] = {}
        failures: collections.Counter[tuple[Any, ...]] = collections.Counter()
        runs: dict[int, list[Any]] = {}
        for record in self.kernel.journal.read(self.start):
            body = record.body
            if record.kind == "effect.queued":
                key = _effect_key(body)
                shadow_effects[key] += 1
                shown_effect[key] = self._effect_line(body)
            elif record.kind == "step.failed":
                failures[self._failure(body)] += 1
            elif record.kind == "plan.started":
                runs[body["run_id"]] = [body["plan"], "running"]
            elif record.kind == "plan.ended" and body["run_id"] in runs:
                runs[body["run_id"]][1] = body["status"]
            elif record.kind == RUN_CANCELLED and body["run_id"] in runs:
                runs[body["run_id"]][1] = "cancelled"
        for key in self.real.effects:
            shown_effect.setdefault(key, _effect_line_of_key(key))
        run_ids = sorted(set(runs) | set(self.real.runs))
        runs_differ = [
            {"run_id": i, "real": self.real.runs.get(i), "shadow": runs.get(i)}
            for i in run_ids
            if self.real.runs.get(i) != runs.get(i)
        ]
        parked = [self._effect_line(i) for i in self.kernel.effects.parked()]
        differ, shown = self._cells()
        return {
            "proposal": self.found.id,
            "base": self.found.base,
            "manifest_hash": self.found.manifest_hash,
            "from": self.start,
            "head": self.head,
            "inputs": self.inputs,
            "extra_events": self.extra,
            "skipped": dict(sorted(self.skipped.items())),
            "cells": {"differ": differ, "shown": shown},
            "upgrades_failed": self.upgrades_failed[:SHADOW_SHOWN_MAX],
            "upgrades_failed_count": len(self.upgrades_failed),
            "steps_failed": {
                "new": _lines(failures - self.real.failures, _failure_line),
                "gone": _lines(self.real.failures - failures, _failure_line),
            },
            "effects": {
                "new": [shown_effect[k] for k in (shadow_effects - self.real.effects).elements()][
                    :SHADOW_SHOWN_MAX
                ],
                "gone": [shown_effect[k] for k in (self.real.effects - shadow_effects).elements()][
                    :SHADOW_SHOWN_MAX
                ],
                "reused": self.reused,
                "stubbed": self.stubbed[:SHADOW_SHOWN_MAX],
                "stubbed_count": len(self.stubbed),
                "parked": parked[:SHADOW_SHOWN_MAX],
            },
            "runs": {"differ": runs_differ[:SHADOW_SHOWN_MAX], "differ_count": len(runs_differ)},
        }

    def _cells(self) -> tuple[int, list[dict[str, Any]]]:
        """Cells whose state differs between the world and the shadow: count, and the first
        ``SHADOW_SHOWN_MAX`` with both states and the fields that differ."""
        shadow_kernel, world = self.kernel, self.world
        differ = 0
        shown: list[dict[str, Any]] = []
        for reducer in sorted(shadow_kernel.air.modules):
            space = shadow_kernel.cell_space(reducer)
            real_name = world.kernel.eras.current.names.get(space)
            ours = dict(shadow_kernel.cells.iter_entries(space))
            theirs = world.read(partial(_entries, world, space))
            for khash in sorted(set(ours) | set(theirs)):
                mine, real = ours.get(khash), theirs.get(khash)
                if mine is not None and real is not None and mine.state_hash == real.state_hash:
                    continue
                differ += 1
                if len(shown) >= SHADOW_SHOWN_MAX:
                    continue
                key_cbor = (mine or real).key_cbor  # type: ignore[union-attr]
                real_state = None
                if real is not None and real_name is not None:
                    real_state = self._state(world.kernel, real_name, key_cbor)
                shadow_state = (
                    None if mine is None else self._state(shadow_kernel, reducer, key_cbor)
                )
                shown.append(
                    {
                        "reducer": reducer,
                        "key": self._key(reducer, key_cbor),
                        "real": real_state,
                        "shadow": shadow_state,
                        "fields": field_diff(real_state, shadow_state),
                    }
                )
        return differ, shown

    def _state(self, kernel: Kernel, reducer: str, key_cbor: bytes) -> Any:
        keyed = kernel.air.modules[reducer].key_schema is not None
        found = kernel.cell_of(reducer, key_cbor if keyed else None)
        if found is None:
            return None
        schema, era_air = kernel.state_schema(reducer, found[0].manifest_hash)
        return to_sugar(Ref(schema), cbor.loads(found[1]), era_air.schemas)

    def _key(self, reducer: str, key_cbor: bytes) -> Any:
        air = self.kernel.air
        key_type = air.key_types.get(reducer)
        if key_type is None:
            return None
        return to_sugar(key_type, cbor.loads(key_cbor), air.schemas)

    def _failure(self, body: dict[str, Any]) -> tuple[Any, ...]:
        return (body["reducer"], body["key"], body["reason"].get("code"))

    def _effect_line(self, intent: Any) -> dict[str, Any]:
        return _effect_line_of_key(_effect_key(intent))


def _entries(world: World, space: str) -> dict[bytes, CellEntry]:
    return dict(world.store.iter_entries(space))


def _effect_line_of_key(key: tuple[Any, ...]) -> dict[str, Any]:
    kind, params_cbor, cap, where = key
    return {
        "kind": kind,
        "cap": cap,
        "origin": dict(where),
        "params": _plain(cbor.loads(params_cbor)),
    }


def _failure_line(key: tuple[Any, ...]) -> dict[str, Any]:
    reducer, key_cbor, code = key
    return {
        "reducer": reducer,
        "key": None if key_cbor is None else _plain(cbor.loads(key_cbor)),
        "code": code,
    }


def _lines(counts: collections.Counter[tuple[Any, ...]], line: Any) -> list[dict[str, Any]]:
    return [line(k) for k in counts.elements()][:SHADOW_SHOWN_MAX]


def _plain(value: Any) -> Any:
    """A decoded CBOR value as JSON can carry it (bytes as hex)."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def field_diff(real: Any, shadow: Any, path: str = "") -> list[dict[str, Any]]:
    """Where two sugar values differ: ``[{path, real, shadow}]`` down to the first level that
    is not a record on both sides (a JSON pointer per difference)."""
    if real == shadow:
        return []
    if isinstance(real, dict) and isinstance(shadow, dict):
        out: list[dict[str, Any]] = []
        for name in sorted(set(real) | set(shadow), key=str):
            out += field_diff(real.get(name), shadow.get(name), f"{path}/{name}")
        return out
    return [{"path": path or "/", "real": real, "shadow": shadow}]


def _summary(report: dict[str, Any]) -> dict[str, int]:
    return {
        "inputs": report["inputs"],
        "cells_differ": report["cells"]["differ"],
        "upgrades_failed": report["upgrades_failed_count"],
        "steps_failed_new": len(report["steps_failed"]["new"]),
        "effects_new": len(report["effects"]["new"]),
        "effects_gone": len(report["effects"]["gone"]),
        "effects_stubbed": report["effects"]["stubbed_count"],
        "runs_differ": report["runs"]["differ_count"],
    }
