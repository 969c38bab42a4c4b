"""A shadow run's report: the shadow kernel compared with the real world at its head.

``world.gov._shadow`` runs a proposal aside and hands over what it saw; this module says how the
two sides differ. What it reports:

* ``cells``: how many cells would hold another state, and for the first ``SHADOW_SHOWN_MAX``
  each cell's state on both sides and the fields that differ (each side read through its own
  era's schema: ``field_diff``);
* ``upgrades_failed``: cells whose upgrade would fail (they would stay in their era);
* ``steps_failed``: failed steps (reducer, key, reason code) the shadow has and the world has
  not (``new``), and the other way round (``gone``);
* ``effects``: intents the shadow emits that the world did not (``new``) and the other way round
  (``gone``), compared by effect (``effect_key``: kind, params, cap, origin, without seqs), with
  the counts reused, stubbed and left parked;
* ``runs``: plan runs whose plan or outcome (running, or the status they ended with) differ.

Both sides are counted the same way (``Tally``): the real journal's records after the start as
the shadow re-feeds them, the shadow's own journal once it is idle. The report is plain data (a
canonical CBOR object once the caller stores it) and ``summary`` its few counts, which the
``gov.shadowed`` record carries. Not here: running the shadow, or keeping the report
(``world.gov._shadow``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from air import cbor
from air.types import Ref
from air.values import to_sugar
from kernel import RUN_CANCELLED, Kernel
from kernel.cells import CellEntry
from kernel.journal import JournalRecord
from world._world import World
from world.gov._proposals import Proposal

__all__ = [
    "SHADOW_SHOWN_MAX",
    "Counts",
    "Tally",
    "effect_key",
    "effect_line",
    "field_diff",
    "key_sugar",
    "report",
    "summary",
]

SHADOW_SHOWN_MAX: Final = 100
"""Cells, failures and effects listed one by one in a report (all are counted)."""


def effect_key(intent: Any) -> tuple[Any, ...]:
    """An intent's identity without seqs: kind, params, cap and origin."""
    origin = intent.origin if hasattr(intent, "origin") else intent["origin"]
    where = tuple(sorted((k, v) for k, v in origin.items() if not isinstance(v, (dict, list))))
    if hasattr(intent, "kind"):
        return (intent.kind, intent.params_cbor, intent.cap, where)
    return (intent["kind"], intent["params"], intent["cap"], where)


def effect_line(intent: Any) -> dict[str, Any]:
    """An intent (a kernel's or a journaled body) as a report lists it."""
    return _effect_line_of_key(effect_key(intent))


def key_sugar(kernel: Kernel, reducer: str, key_cbor: bytes) -> Any:
    """A cell's key as ``kernel``'s AIR reads it (None for a reducer that is not keyed)."""
    air = kernel.air
    key_type = air.key_types.get(reducer)
    if key_type is None:
        return None
    return to_sugar(key_type, cbor.loads(key_cbor), air.schemas)


@dataclass
class Tally:
    """What one side's journal shows after the start: the effects it queued (by
    ``effect_key``), its failed steps, and its runs with their outcome."""

    effects: collections.Counter[tuple[Any, ...]] = field(default_factory=collections.Counter)
    failures: collections.Counter[tuple[Any, ...]] = field(default_factory=collections.Counter)
    runs: dict[int, list[Any]] = field(default_factory=dict)

    def note(self, record: JournalRecord) -> None:
        body = record.body
        if record.kind == "effect.queued":
            self.effects[effect_key(body)] += 1
        elif record.kind == "step.failed":
            self.failures[_failure(body)] += 1
        elif record.kind == "plan.started":
            self.runs[body["run_id"]] = [body["plan"], "running"]
        elif record.kind == "plan.ended" and body["run_id"] in self.runs:
            self.runs[body["run_id"]][1] = body["status"]
        elif record.kind == RUN_CANCELLED and body["run_id"] in self.runs:
            self.runs[body["run_id"]][1] = "cancelled"


@dataclass
class Counts:
    """What the shadow run did, as its report says it: outside events re-fed (``inputs``) and
    given (``extra``), records not re-fed by kind, failed upgrades, receipts reused, intents
    stubbed."""

    inputs: int = 0
    extra: int = 0
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)
    upgrades_failed: list[dict[str, Any]] = field(default_factory=list)
    reused: int = 0
    stubbed: list[dict[str, Any]] = field(default_factory=list)


def report(
    world: World,
    kernel: Kernel,
    found: Proposal,
    span: tuple[int, int],
    real: Tally,
    counts: Counts,
) -> dict[str, Any]:
    """The report of shadowing ``found`` over the records ``span`` (from, head): the shadow
    ``kernel`` (idle) against ``world`` and what its journal held (``real``)."""
    start, head = span
    mine = Tally()
    for record in kernel.journal.read(start):
        mine.note(record)
    run_ids = sorted(set(mine.runs) | set(real.runs))
    runs_differ = [
        {"run_id": i, "real": real.runs.get(i), "shadow": mine.runs.get(i)}
        for i in run_ids
        if real.runs.get(i) != mine.runs.get(i)
    ]
    parked = [effect_line(i) for i in kernel.effects.parked()]
    differ, shown = _cells(world, kernel)
    return {
        "proposal": found.id,
        "base": found.base,
        "manifest_hash": found.manifest_hash,
        "from": start,
        "head": head,
        "inputs": counts.inputs,
        "extra_events": counts.extra,
        "skipped": dict(sorted(counts.skipped.items())),
        "cells": {"differ": differ, "shown": shown},
        "upgrades_failed": counts.upgrades_failed[:SHADOW_SHOWN_MAX],
        "upgrades_failed_count": len(counts.upgrades_failed),
        "steps_failed": {
            "new": _lines(mine.failures - real.failures, _failure_line),
            "gone": _lines(real.failures - mine.failures, _failure_line),
        },
        "effects": {
            "new": _lines(mine.effects - real.effects, _effect_line_of_key),
            "gone": _lines(real.effects - mine.effects, _effect_line_of_key),
            "reused": counts.reused,
            "stubbed": counts.stubbed[:SHADOW_SHOWN_MAX],
            "stubbed_count": len(counts.stubbed),
            "parked": parked[:SHADOW_SHOWN_MAX],
        },
        "runs": {"differ": runs_differ[:SHADOW_SHOWN_MAX], "differ_count": len(runs_differ)},
    }


def _cells(world: World, shadow_kernel: Kernel) -> tuple[int, list[dict[str, Any]]]:
    """Cells whose state differs between the world and the shadow: count, and the first
    ``SHADOW_SHOWN_MAX`` with both states and the fields that differ."""
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
                real_state = _state(world.kernel, real_name, key_cbor)
            shadow_state = None if mine is None else _state(shadow_kernel, reducer, key_cbor)
            shown.append(
                {
                    "reducer": reducer,
                    "key": key_sugar(shadow_kernel, reducer, key_cbor),
                    "real": real_state,
                    "shadow": shadow_state,
                    "fields": field_diff(real_state, shadow_state),
                }
            )
    return differ, shown


def _state(kernel: Kernel, reducer: str, key_cbor: bytes) -> Any:
    keyed = kernel.air.modules[reducer].key_schema is not None
    found = kernel.cell_of(reducer, key_cbor if keyed else None)
    if found is None:
        return None
    schema, era_air = kernel.state_schema(reducer, found[0].manifest_hash)
    return to_sugar(Ref(schema), cbor.loads(found[1]), era_air.schemas)


def _entries(world: World, space: str) -> dict[bytes, CellEntry]:
    return dict(world.store.iter_entries(space))


def _failure(body: dict[str, Any]) -> tuple[Any, ...]:
    return (body["reducer"], body["key"], body["reason"].get("code"))


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


def summary(report: dict[str, Any]) -> dict[str, int]:
    """The counts of ``report`` that the ``gov.shadowed`` record carries."""
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
