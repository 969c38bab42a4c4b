"""What each page of the inspector shows, as JSON-able dicts: the page renders one through its
template, ``/api/<page>`` returns it as it is, so the two cannot differ.

Each view opens the world read-only for the one request (a reader beside a running or served
writer sees what was committed when it opened; a read never takes the writer's lock; reads of
the cell store go through ``World.read``, which reopens when a writer's checkpoint moves the
store under it) and reads only what it shows: a page of the journal, a page of a cell's records through the history
index, one run, one chain.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from air.errors import InvalidArgument, UnknownName

__all__ = [
    "PAGE_MAX",
    "cell_view",
    "cells_view",
    "effects_view",
    "journal_view",
    "plan_view",
    "record_view",
    "runs_view",
    "upgrades_view",
    "why_view",
    "world_view",
]

PAGE_MAX: Final = 200
"""Records or steps a page shows at most."""


def opened(directory: Path, *, readonly: bool = True) -> Any:
    """The world read-only for one request, as a ``world.ops`` handle; its ``world`` for the
    views that render what no operation answers (a plan's DAG, a record's body)."""
    from world.ops import open as open_world

    return _Reading(open_world(directory, readonly=readonly))


class _Reading:
    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __enter__(self) -> Any:
        return self.handle.world

    def __exit__(self, *exc: object) -> None:
        self.handle.close()


def _reader(directory: Path) -> Any:
    from world.ops import open as open_world

    return open_world(directory, readonly=True)


def world_view(directory: Path) -> dict[str, Any]:
    """The world: its info (``world info``), and from its AIR the plans with their triggers,
    the grants and the policy's rules."""
    with opened(directory, readonly=True) as world:
        info = world.info()
        air = world.air
        manifest = air.manifest
        triggers: dict[str, list[str]] = {}
        for trigger in manifest.triggers:
            triggers.setdefault(trigger.plan, []).append(trigger.event)
        plans = [{"name": name, "triggers": triggers.get(name, [])} for name in sorted(air.plans)]
        grants = [_plain(grant) for grant in manifest.defaults.cap_grants]
        policy_name = manifest.defaults.policy
        rules = [] if policy_name is None else _plain(air.policies[policy_name].rules)
    info.pop("http", None)
    return {**info, "plans": plans, "grants": grants, "policy": policy_name, "rules": rules}


def journal_view(
    directory: Path,
    *,
    start: int | None = None,
    limit: int = 100,
    subject: str | None = None,
    kind: str | None = None,
    reducer: str | None = None,
    run: int | None = None,
    intent: str | None = None,
    key: Any = None,
) -> dict[str, Any]:
    """A page of records from ``start`` (default: the last page), filtered: a subject pattern
    (``*`` one segment, ``**`` the rest), a kind, a reducer or plan (the record names it), a
    run id, an intent hash (``blake3:...``), a cell key (a record whose key, read through its
    schema, is this one)."""
    from world import RecordView

    limit = max(1, min(limit, PAGE_MAX))
    with opened(directory, readonly=True) as world:
        head = world.journal.seq_next
        first = max(0, head - limit) if start is None else max(0, start)
        view = RecordView.of_world(world)
        records, next_seq = [], first
        for record in world.journal.read(first, subject):
            next_seq = record.seq + 1
            shown = view.render(record)
            if _matches(shown, kind, reducer, run, intent) and (
                key is None or (isinstance(shown["body"], dict) and shown["body"].get("key") == key)
            ):
                records.append(shown)
                if len(records) >= limit:
                    break
    return {"head": head, "from": first, "next": next_seq, "records": records}


def _matches(
    shown: dict[str, Any], kind: str | None, reducer: str | None, run: int | None, intent: Any
) -> bool:
    body = shown["body"] if isinstance(shown["body"], dict) else {}
    if kind is not None and shown["kind"] != kind:
        return False
    if reducer is not None and reducer not in (body.get("reducer"), body.get("plan")):
        return False
    if run is not None and body.get("run_id") != run:
        return False
    return intent is None or body.get("intent_hash") == intent


def record_view(directory: Path, seq: int) -> dict[str, Any]:
    """One record as ``journal tail`` renders it, with the seqs it names."""
    from world import RecordView

    with opened(directory, readonly=True) as world:
        if not 0 <= seq < world.journal.seq_next:
            raise InvalidArgument("seq", seq, f"a journal position 0..{world.journal.seq_next - 1}")
        record = next(iter(world.journal.read(seq)))
        return {"record": RecordView.of_world(world).render(record)}


def cell_view(
    directory: Path, reducer: str, key: Any, *, at: int | None = None, limit: int = 50
) -> dict[str, Any]:
    """A cell: its state now (from the cell store) or right after ``at`` (re-executed,
    ``world cells show --at``), and the page of its records (steps, failures, imports) at or
    before that position, newest first. With ``at`` on one of its steps, also the state before
    that step and after it as a field-level diff (two re-executions: only when asked, so the
    page of a cell with 100,000 steps opens without any)."""
    from world import RecordView
    from world.history import CellKey, cell_at, cell_key, cell_names, cell_seqs

    limit = max(1, min(limit, PAGE_MAX))
    with opened(directory, readonly=True) as world:
        head = world.journal.seq_next
        position = head - 1 if at is None else at
        where = cell_key(world.air, reducer, key)
        names = cell_names(world, reducer)  # the reducer's names in every era
        known = [CellKey(name, where.key_cbor) for name in names]
        prefixes = tuple(cell.subject_prefix for cell in known)
        seqs = sorted({seq for cell in known for seq in cell_seqs(world, cell, position)})
        view = RecordView.of_world(world)
        steps: list[dict[str, Any]] = []
        for seq in reversed(seqs):
            record = next(iter(world.journal.read(seq)), None)
            if record is None or not record.subject.startswith(prefixes):
                continue
            steps.append(view.render(record))
            if len(steps) >= limit:
                break
        eras = _step_eras(world, where, names, seqs, [step["seq"] for step in steps])
        for step in steps:
            step["era"] = eras.get(step["seq"])
        state, era = None, None
        if at is None:  # one read of the store, which a writer's checkpoint may move under it
            found = world.read(lambda: world.cell(reducer, key))
            if found is not None:
                state, era = found.state, world_hash(found.entry.manifest_hash)
    diff = None
    if at is not None:
        now = cell_at(directory, reducer, key, at)
        state, era = now.state, now.era
        chosen = next((s for s in steps if s["seq"] == at and s["kind"] == "step"), None)
        if chosen is not None:
            earlier = [s for s in seqs if s < at]
            before = cell_at(directory, reducer, key, earlier[-1]).state if earlier else None
            diff = {"seq": at, "changes": field_diff(before, state)}
    return {
        "reducer": reducer,
        "key": key,
        "at": position,
        "head": head,
        "state": state,
        "era": era,
        "records": len(seqs),
        "steps": steps,
        "diff": diff,
    }


def _step_eras(
    world: Any, where: Any, names: list[str], seqs: list[int], shown: list[int]
) -> dict[int, str]:
    """The era (manifest hash) each shown record of the cell ran in: the era current when the
    cell's first record was journaled, then each ``cell.upgraded`` that moved this cell (a
    re-pin too). A world of one era needs no reading; one of several reads its reducers'
    upgrade records (``/world/reducer/**``) once."""
    from air import cbor

    history = world.kernel.eras.history
    if not seqs or not shown:
        return {}
    born = next(era for era in reversed(history) if era.since <= seqs[0])
    moves: list[tuple[int, str]] = []
    if len(history) > 1:
        for record in world.journal.read(seqs[0], "/world/reducer/**"):
            body = record.body
            if record.kind != "cell.upgraded" or body.get("reducer") not in names:
                continue
            if any(entry[0] == where.key_cbor for entry in body.get("cells", [])):
                moves.append((record.seq, cbor.raw_to_hash(body["to"])))
    found = {}
    for seq in shown:
        era = cbor.raw_to_hash(born.manifest_raw)
        for moved_at, to in moves:
            if moved_at < seq:
                era = to
        found[seq] = era
    return found


def world_hash(raw: bytes) -> str:
    from air import cbor

    return cbor.raw_to_hash(raw)


def field_diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """The fields that differ between two JSON values, by JSON pointer: ``{path, before,
    after}`` (a missing side is absent from the entry)."""
    if isinstance(before, dict) and isinstance(after, dict):
        changes = []
        for name in sorted(set(before) | set(after)):
            child = f"{path}/{_escape(str(name))}"
            if name not in before:
                changes.append({"path": child, "after": after[name]})
            elif name not in after:
                changes.append({"path": child, "before": before[name]})
            else:
                changes.extend(field_diff(before[name], after[name], child))
        return changes
    if before == after:
        return []
    change: dict[str, Any] = {"path": path or "/"}
    if before is not None:
        change["before"] = before
    if after is not None:
        change["after"] = after
    return [change]


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def cells_view(directory: Path, reducer: str, after: Any = None) -> dict[str, Any]:
    """A page of a keyed reducer's cells, by key (``world cells ls``)."""
    with _reader(directory) as handle:
        return dict(handle.cells(reducer, limit=PAGE_MAX, after=after).model_dump())


def why_view(directory: Path, reducer: str, key: Any, at: int | None = None) -> dict[str, Any]:
    with _reader(directory) as handle:
        return dict(handle.why(reducer, key, at=at).model_dump())


def runs_view(directory: Path) -> dict[str, Any]:
    with _reader(directory) as handle:
        return {"runs": handle.runs()}


def plan_view(directory: Path, name: str, run: str | None = None) -> dict[str, Any]:
    """A plan's DAG from its AIR (``cli.ui._dag``), and for ``run`` its detail (``world runs
    show``) with the steps and edges it took marked and, for each step of its path, the
    ``plan.step`` record it journaled (the event it raised, the intent it made, the receipt or
    event it bound)."""
    from cli.ui._dag import layout
    from world import RecordView
    from world.operate import run_detail, runs_list

    with opened(directory, readonly=True) as world:
        plan = world.air.plans.get(name)
        if plan is None:
            raise UnknownName("plan", name, sorted(world.air.plans))
        raw = json.loads(plan.model_dump_json(by_alias=True, exclude_none=True))
        runs = [r for r in runs_list(world.kernel, world.journal) if r.get("plan") == name]
        detail = None if run is None else run_detail(world.kernel, world.journal, run)
        if detail is not None:  # what each step journaled: its event, its intent, what it bound
            view = RecordView.of_world(world)
            for step in detail.get("path", []):
                record = next(iter(world.journal.read(step["seq"])), None)
                step["record"] = None if record is None else view.render(record)["body"]
    if detail is not None and detail.get("plan") != name:
        raise InvalidArgument("run", run, f"a run of {name}")
    taken = [] if detail is None else [step["step"] for step in detail.get("path", [])]
    return {"plan": name, "dag": layout(raw, taken), "runs": runs, "run": detail}


def upgrades_view(directory: Path, chosen: int | None = None) -> dict[str, Any]:
    """The world's upgrade proposals (``world upgrade ls``) and, for ``chosen``, what it
    changes (``world upgrade show``) and its shadow runs' summaries with their reports'
    addresses."""
    from world.gov import listing, proposal, proposal_cells, shadows

    with opened(directory, readonly=True) as world:
        data: dict[str, Any] = {**listing(world), "chosen": None}
        if chosen is not None:
            made = proposal(world, chosen)
            data["chosen"] = {
                **made.as_json(),
                "cells": proposal_cells(world, made.diff),
                "shadow_runs": shadows(world).get(made.id, []),
            }
    plain: dict[str, Any] = json.loads(json.dumps(data, default=str))
    return plain


def effects_view(directory: Path) -> dict[str, Any]:
    with _reader(directory) as handle:
        return dict(handle.effects().model_dump())


def _plain(value: Any) -> Any:
    """A pydantic model (or a list of them) as plain JSON."""
    if isinstance(value, list):
        return [_plain(item) for item in value]
    dump = getattr(value, "model_dump_json", None)
    if dump is None:
        return value
    return json.loads(dump(by_alias=True, exclude_none=True))
