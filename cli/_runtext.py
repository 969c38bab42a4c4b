"""The summaries of ``world run``, ``world step`` and ``world runs`` in words: what
``world.operate.run_summary`` returns, said as a person reads it. Due times are shown in UTC
and relative to now (read here, in the CLI: the kernel never reads the clock)."""

from __future__ import annotations

from typing import Any

__all__ = ["due_text", "failed_text", "runs_line", "waiting_text"]


def due_text(due_ns: int | None) -> str:
    """A timer's due time in UTC and relative to now (read here, never by the kernel)."""
    import datetime
    import time

    if due_ns is None:
        return "an unknown time"
    when = datetime.datetime.fromtimestamp(due_ns / 1e9, tz=datetime.UTC)
    left = (due_ns - time.time_ns()) / 1e9
    rel = f"in {left:.0f} s" if left >= 0 else f"{-left:.0f} s ago"
    return f"{when.isoformat(timespec='seconds')} ({rel})"


def failed_text(done: dict[str, Any]) -> str:
    """``, N failed (world dead-letters ls)`` after a step count; empty when none failed."""
    failed = done["steps_failed"]
    return f", {failed} failed (world dead-letters ls)" if failed else ""


def runs_line(done: dict[str, Any]) -> str | None:
    """``summary``'s runs in words (None when no run started or ended), naming failed runs."""
    runs = done["runs"]
    if not (runs["started"] or runs["ended"] or runs["failed"]):
        return None
    line = f"runs: {runs['started']} started, {runs['ended']} ended, {runs['failed']} failed"
    named = [f"{f['plan']} run {f['run_id']}: {f['code']}" for f in runs["failed_runs"]]
    return line + (f" ({'; '.join(named)})" if named else "")


def waiting_text(done: dict[str, Any]) -> str | None:
    """What the world waits for in words (None: nothing but, perhaps, ready deliveries)."""
    wait = done["waiting"]
    parts = []
    if wait["approvals"]:
        hashes = ", ".join(a["intent_hash"] for a in wait["approvals"][:3])
        more = ", ..." if len(wait["approvals"]) > 3 else ""
        parts.append(f"{len(wait['approvals'])} approval(s) of {hashes}{more}")
    if wait["timers"]:
        first = wait["timers"][0]
        parts.append(f"{len(wait['timers'])} timer(s), the next due {due_text(first['due_ns'])}")
    if wait["in_flight"]:
        parts.append(f"{len(wait['in_flight'])} effect(s) in flight")
    if wait["events"]:
        schemas = sorted({e["schema"] for e in wait["events"]})
        parts.append(f"{len(wait['events'])} run(s) awaiting an event ({', '.join(schemas)})")
    return "the world waits for " + "; ".join(parts) if parts else None
