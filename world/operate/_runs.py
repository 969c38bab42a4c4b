"""Plan runs as ``world runs`` and the ``run``/``step`` summaries show them.

Live runs come from the kernel (``Kernel.runs``: status ``running`` or ``waiting``, their
locals and what they wait for); ended ones from the journal, by a *scan* of the records
under ``/world/run/**`` (``plan.started``, ``plan.step``, ``plan.ended``, ``run.cancelled``).
The scan was chosen over an index: it costs one pass over the journal per ``runs ls`` (every
record is read, only the run records' bodies are kept), needs no new derived file to keep
consistent, and the live part, the one that changes, never needs it. ``runs show`` reads the
effect records of the run as well (``effect.queued`` with the run as origin, their
``policy.decision``, ``effect.approval`` and ``receipt``), one pass too.

Where a failed run failed (``{step, pointer}``) is not journaled; the kernel derives it by
re-execution and keeps the last ``kernel._runs.FAILURES_KEPT`` (``Kernel.run_failures``); an
older one shows ``pointer: null``.

What a world waits for (``waits``): approvals (parked intents), timers with their due time
(queued ``timer.set`` intents: ``deliver_at_ns``), other effects in flight (queued intents),
runs waiting for an event of a schema, and deliveries still pending.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

import cbor2

from air import cbor
from air.errors import InvalidArgument, UnknownName
from kernel import Kernel

__all__ = [
    "FAR_TIMER_S",
    "RUN_STATUSES",
    "RunMark",
    "cancel_run",
    "run_detail",
    "run_mark",
    "run_summary",
    "run_telling",
    "runs_list",
    "waits",
]

RUN_STATUSES: Final = ("running", "waiting", "ok", "error", "cancelled")
RUN_KINDS: Final = frozenset(("plan.started", "plan.step", "plan.ended", "run.cancelled"))
EFFECT_KINDS: Final = frozenset(("effect.queued", "policy.decision", "effect.approval", "receipt"))


def _jsonable(value: Any) -> Any:
    """A run's local as JSON: 32 bytes as a ``blake3:`` hash (an effect id), other bytes as
    ``{"$bytes": hex}``, maps and lists inside out."""
    if isinstance(value, bytes):
        return cbor.raw_to_hash(value) if len(value) == 32 else {"$bytes": value.hex()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _hash(raw: Any) -> Any:
    return cbor.raw_to_hash(raw) if isinstance(raw, bytes) else raw


# --- what runs and the world wait for -------------------------------------------------------


def _intent_wait(kernel: Kernel, intent_hash: bytes) -> dict[str, Any]:
    """What waiting for ``intent_hash``'s receipt means now: an approval, a timer, an effect
    in flight, or a receipt already in (about to be bound)."""
    intent = kernel.intent(intent_hash)
    row: dict[str, Any] = {"intent_hash": _hash(intent_hash)}
    if intent is None:
        return {"for": "receipt", **row, "arrived": kernel.held_receipt(intent_hash) is not None}
    row["kind"] = intent.kind
    if intent.status == "parked":
        return {"for": "approval", **row}
    if intent.kind == "timer.set":
        return {"for": "timer", **row, "due_ns": _due_ns(intent.params_cbor)}
    return {"for": "receipt", **row}


def _due_ns(params_cbor: bytes) -> int | None:
    params = cbor2.loads(params_cbor)
    due = params.get("deliver_at_ns") if isinstance(params, dict) else None
    return due if isinstance(due, int) else None


def _run_wait(kernel: Kernel, waiting: dict[str, Any] | None) -> dict[str, Any] | None:
    if waiting is None:
        return None
    step = {"step": waiting.get("step")}
    if "intent" in waiting:
        return {**_intent_wait(kernel, waiting["intent"]), **step}
    return {"for": "event", "schema": waiting.get("event"), **step}


def _origin(origin: dict[str, Any]) -> dict[str, Any]:
    out = {"kind": origin.get("kind"), "name": origin.get("name")}
    if origin.get("kind") == "plan":
        out["run_id"] = origin.get("run_id")
    return out


def waits(kernel: Kernel) -> dict[str, Any]:
    """What the world waits for: ``approvals``, ``timers`` (by due time), ``in_flight``
    effects, runs waiting for ``events``, and ``pending`` deliveries (ready work)."""
    live = kernel.live_intents()
    approvals = [
        {"intent_hash": _hash(i.intent_hash), "kind": i.kind, "origin": _origin(i.origin)}
        for i in live
        if i.status == "parked"
    ]
    timers, in_flight = [], []
    for intent in (i for i in live if i.status == "queued"):
        row = {
            "intent_hash": _hash(intent.intent_hash),
            "kind": intent.kind,
            "origin": _origin(intent.origin),
        }
        if intent.kind == "timer.set":
            timers.append({**row, "due_ns": _due_ns(intent.params_cbor)})
        else:
            in_flight.append(row)
    timers.sort(key=lambda t: (t["due_ns"] is None, t["due_ns"] or 0, t["intent_hash"]))
    events = [
        {"run_id": run.run_id, "plan": run.plan, "schema": wait["event"]}
        for run in kernel.runs().values()
        for wait in run.waits
        if "event" in wait
    ]
    return {
        "approvals": approvals,
        "timers": timers,
        "in_flight": in_flight,
        "events": events,
        "pending": kernel.counts().pending_deliveries,
    }


# --- a command's summary ----------------------------------------------------------------------


@dataclass(frozen=True)
class RunMark:
    """Where a command started: the journal position and the kernel's run counters."""

    seq: int
    started: int
    ended: int
    failed: int
    steps_failed: int


def run_mark(kernel: Kernel) -> RunMark:
    counts = kernel.counts()
    return RunMark(
        kernel.journal.seq_next,
        counts.runs_begun,
        counts.runs_ended,
        counts.runs_failed,
        counts.steps_failed,
    )


def run_summary(kernel: Kernel, since: RunMark) -> dict[str, Any]:
    """Steps that failed, and runs started, ended and failed since ``since`` (the failed ones
    named: plan, run id, error code; at most the last ``FAILURES_KEPT``), and what the world
    waits for now."""
    counts = kernel.counts()
    failed = [
        {"run_id": run_id, "plan": f["plan"], "code": f["code"], "seq": f["seq"]}
        for run_id, f in kernel.run_failures().items()
        if f["seq"] >= since.seq
    ]
    return {
        "steps_failed": max(0, counts.steps_failed - since.steps_failed),
        "runs": {
            "started": max(0, counts.runs_begun - since.started),
            "ended": max(0, counts.runs_ended - since.ended),
            "failed": max(0, counts.runs_failed - since.failed),
            "failed_runs": failed,
        },
        "waiting": waits(kernel),
    }


# --- listing and showing ----------------------------------------------------------------------


def _scan(journal: Any) -> dict[int, dict[str, Any]]:
    """Runs by id from the journal's run records: plan, status, seqs, path, error."""
    runs: dict[int, dict[str, Any]] = {}
    for record in journal.read(0, "/world/run/**"):
        if record.kind not in RUN_KINDS or not isinstance(record.body, dict):
            continue
        body = record.body
        run_id = body.get("run_id")
        if not isinstance(run_id, int):
            continue
        row = runs.setdefault(
            run_id,
            {
                "run_id": run_id,
                "plan": body.get("plan"),
                "status": "running",
                "started_seq": None,
                "ended_seq": None,
                "steps": 0,
                "path": [],
            },
        )
        if record.kind == "plan.started":
            row["plan"], row["started_seq"] = body.get("plan"), record.seq
        elif record.kind == "plan.step":
            row["steps"] += 1
            step = {"seq": record.seq, "step": body.get("step"), "op": body.get("op")}
            if "intent_hash" in body:
                step["intent_hash"] = _hash(body["intent_hash"])
            if "waiting" in body:
                step["waiting"] = _hash(body["waiting"])
            row["path"].append(step)
        else:
            row["ended_seq"] = record.seq
            if record.kind == "run.cancelled":
                row["status"] = "cancelled"
                row["plan"] = body.get("plan")
                row["cancelled_intents"] = [_hash(h) for h in body.get("intents", [])]
            else:
                row["status"] = body.get("status")
                if "error" in body:
                    row["error"] = dict(body["error"])
    return runs


def _merged(kernel: Kernel, journal: Any) -> dict[int, dict[str, Any]]:
    """The scanned runs, with the live ones' status and wait from the kernel (a live run not
    started yet, its start still queued, is ``running`` with no ``started_seq``)."""
    runs = _scan(journal)
    for run_id, run in kernel.runs().items():
        row = runs.setdefault(
            run_id,
            {
                "run_id": run_id,
                "plan": run.plan,
                "started_seq": None,
                "ended_seq": None,
                "steps": 0,
                "path": [],
            },
        )
        row["status"] = "waiting" if run.waits else "running"
        row["waits"] = [_run_wait(kernel, wait) for wait in run.waits]
        row["waiting"] = row["waits"][0] if row["waits"] else None
    failures = kernel.run_failures()
    for run_id, row in runs.items():
        row.setdefault("waiting", None)
        row.setdefault("waits", [])
        if row["status"] == "error":
            where = failures.get(run_id) or {}
            row["error"] = {
                **row.get("error", {}),
                "step": where.get("step"),
                "pointer": where.get("pointer"),
            }
    return runs


_ROW_KEYS: Final = (
    "run_id",
    "plan",
    "status",
    "started_seq",
    "ended_seq",
    "steps",
    "waiting",
    "waits",
)
"""A row of ``world runs ls``; ``waiting`` is the first of ``waits`` (a run may await several
things at once)."""


def runs_list(
    kernel: Kernel, journal: Any, status: str | None = None, plan: str | None = None
) -> list[dict[str, Any]]:
    """Every run (``world runs ls``), by id, filtered by status and plan."""
    if status is not None and status not in RUN_STATUSES:
        raise InvalidArgument("--status", status, f"one of {', '.join(RUN_STATUSES)}")
    rows = []
    for _id, run in sorted(_merged(kernel, journal).items()):
        if status is not None and run["status"] != status:
            continue
        if plan is not None and run["plan"] != plan:
            continue
        row = {k: run.get(k) for k in _ROW_KEYS}
        if "error" in run:
            row["error_code"] = run["error"].get("code")
        rows.append(row)
    return rows


def parse_run_id(given: str) -> int:
    """A run id as given on the command line: run ids are integers, taken exactly."""
    text = given.strip()
    if not text.isdigit():
        raise InvalidArgument("RUN", given, "a run id is an integer (world runs ls)")
    return int(text)


def run_detail(kernel: Kernel, journal: Any, given: str) -> dict[str, Any]:
    """One run (``world runs show``): its row, path, locals (live), wait, effects, error."""
    run_id = parse_run_id(given)
    runs = _merged(kernel, journal)
    if run_id not in runs:
        raise UnknownName("run", given, [str(r) for r in sorted(runs)][-20:])
    row = runs[run_id]
    live = kernel.runs().get(run_id)
    row["locals"] = None if live is None else _jsonable(live.vars)
    row["done"] = None if live is None else list(live.done)
    row["effects"] = _effects_of(journal, run_id, row.get("cancelled_intents", []))
    if row["status"] == "error" and row["error"].get("pointer") is None:
        row["error"]["pointer_note"] = (
            "not known: the kernel keeps where the last "
            f"{len(kernel.run_failures())} failed runs failed, this one is older"
        )
    return row


def queued_seqs(journal: Any, wanted: Collection[bytes]) -> dict[bytes, int]:
    """The seq of the ``effect.queued`` record of each intent in ``wanted`` (raw hashes) that
    the journal holds: when it was asked for (``world effects ls``'s age). One pass over the
    effect records; none when nothing is wanted."""
    found: dict[bytes, int] = {}
    if not wanted:
        return found
    for record in journal.read(0, "/world/effect/**"):
        body = record.body
        if record.kind == "effect.queued" and isinstance(body, dict):
            raw = body.get("intent_hash")
            if isinstance(raw, bytes) and raw in wanted:
                found[raw] = record.seq
    return found


def _effects_of(journal: Any, run_id: int, cancelled: list[str]) -> list[dict[str, Any]]:
    """The run's intents in the order queued, each with its decision, approval and receipt."""
    effects: dict[bytes, dict[str, Any]] = {}
    for record in journal.read(0, "/world/effect/**"):
        body = record.body
        if record.kind not in EFFECT_KINDS or not isinstance(body, dict):
            continue
        raw = body.get("intent_hash")
        if not isinstance(raw, bytes):
            continue
        if record.kind == "effect.queued":
            origin = body.get("origin") or {}
            if origin.get("kind") == "plan" and origin.get("run_id") == run_id:
                effects[raw] = {
                    "intent_hash": _hash(raw),
                    "kind": body.get("kind"),
                    "cap": body.get("cap"),
                    "step": origin.get("step"),
                    "queued_seq": record.seq,
                    "decision": None,
                    "approval": None,
                    "receipt": None,
                    "status": "queued",
                }
            continue
        row = effects.get(raw)
        if row is None:
            continue
        if record.kind == "policy.decision":
            row["decision"] = {
                "decision": body.get("decision"),
                "rule_index": body.get("rule_index"),
            }
            row["status"] = {"require_approval": "parked", "deny": "denied"}.get(
                str(body.get("decision")), "queued"
            )
        elif record.kind == "effect.approval":
            approved = bool(body.get("approved"))
            row["approval"] = {"approved": approved, "seq": record.seq}
            row["status"] = "queued" if approved else "denied"
        else:
            row["receipt"] = {
                "status": body.get("status"),
                "adapter_id": body.get("adapter_id"),
                "seq": record.seq,
            }
            row["status"] = "done"
    for row in effects.values():
        if row["intent_hash"] in cancelled:
            row["status"] = "cancelled"
    return list(effects.values())


def cancel_run(kernel: Kernel, given: str) -> tuple[int, dict[str, Any]]:
    """Cancel live run ``given`` (``world runs cancel``): journal ``run.cancelled`` (not
    committed: the caller commits); its seq and body."""
    run_id = parse_run_id(given)
    runs = kernel.runs()
    if run_id not in runs:
        if run_id < kernel.counts().runs_started:
            raise InvalidArgument("RUN", given, "the run has ended; only a live run is cancelled")
        raise UnknownName("live run", given, [str(r) for r in runs])
    body = kernel.run_cancel_body(run_id)
    seq = kernel.ingest_run_cancel(run_id)
    return seq, body


# --- running, and saying so before waiting on a far timer -----------------------------------

FAR_TIMER_S: Final = 1.0
"""A timer due further away than this is announced before ``world run`` waits for it."""
WAIT_SLICE_S: Final = 0.05
"""How long one wait for a timer's receipt lasts before the loop looks at its flags again."""


def next_due(kernel: Kernel) -> int | None:
    """The earliest due time (ns since the epoch) of the timers in flight."""
    dues = [t["due_ns"] for t in waits(kernel)["timers"] if t["due_ns"] is not None]
    return min(dues) if dues else None


def run_telling(engine: Any, *, until_idle: bool, max_steps: int | None, tell: Any) -> Any:
    """``engine.run(until_idle=..., max_steps=...)`` (``world._engine.Engine``), except that
    before it blocks on real-time timers it calls ``tell(due_ns)`` with the next one's due
    time, once per due time, when that is further than ``FAR_TIMER_S`` away."""
    import time

    told = None
    while True:
        report = engine.run(until_idle=True, max_steps=max_steps)
        pump = engine.pump
        if until_idle or pump.sim or pump.in_flight == 0:
            return report
        due = next_due(engine.world.kernel)
        if due is not None and due != told and due - time.time_ns() > FAR_TIMER_S * 1e9:
            tell(due)
            told = due
        flying, receipts = pump.in_flight, report.receipts
        while pump.in_flight >= flying and report.receipts == receipts and not engine.busy():
            if pump.in_flight == 0:
                break
            engine.process_one_cycle(max_wait=WAIT_SLICE_S)
