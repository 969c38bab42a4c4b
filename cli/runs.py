"""``world runs ...``: plan runs, live and ended (``world.operate``), and cancelling one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from air.errors import InvalidArgument
from cli.common import answers, console, emit_json, handle_errors, signals_deferred
from cli.core import asking

__all__ = ["app", "describe_wait"]

app = typer.Typer(help="List, show and cancel plan runs.", no_args_is_help=True)

DirArg = Annotated[Path, typer.Argument(help="The world directory")]
RunArg = Annotated[str, typer.Argument(help="The run id (from `world runs ls`)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output")]


def describe_wait(wait: dict[str, Any] | None) -> str:
    """What one run waits for, in words."""
    if wait is None:
        return "-"
    what = wait.get("for")
    if what == "approval":
        return f"approval of intent {wait['intent_hash']} ({wait.get('kind')})"
    if what == "timer":
        from cli._runtext import due_text

        return f"timer {wait['intent_hash']} due {due_text(wait.get('due_ns'))}"
    if what == "event":
        return f"an event of {wait.get('schema')}"
    arrived = " (arrived)" if wait.get("arrived") else ""
    return f"receipt for intent {wait['intent_hash']}{arrived}"


def _more(waits: list[Any]) -> str:
    return f" (and {len(waits) - 1} more)" if len(waits) > 1 else ""


@app.command("ls")
@answers
def ls(
    directory: DirArg,
    status: Annotated[
        str | None,
        typer.Option("--status", help="running, waiting, ok, error or cancelled"),
    ] = None,
    plan: Annotated[str | None, typer.Option("--plan", help="Only runs of this plan")] = None,
    json_output: JsonOpt = False,
) -> None:
    """List every plan run: live ones (running, waiting) and ended ones (ok, error,
    cancelled), with its seqs, steps taken and what it waits for."""
    from world.operate import RUN_STATUSES

    with handle_errors(json_output):
        if status is not None and status not in RUN_STATUSES:
            raise InvalidArgument("--status", status, f"one of {', '.join(RUN_STATUSES)}")
        with asking(directory, readonly=True) as handle:
            rows = handle.runs(status=status, plan=plan)
    if json_output:
        emit_json({"ok": True, "runs": rows})
        return
    from rich.table import Table

    table = Table(title=f"runs: {len(rows)}")
    for column in ("run", "plan", "status", "started", "ended", "steps", "waits for"):
        table.add_column(column)
    for row in rows:
        status_text = row["status"]
        if row.get("error_code"):
            status_text += f" ({row['error_code']})"
        table.add_row(
            str(row["run_id"]),
            str(row["plan"]),
            status_text,
            "-" if row["started_seq"] is None else str(row["started_seq"]),
            "-" if row["ended_seq"] is None else str(row["ended_seq"]),
            str(row["steps"]),
            describe_wait(row["waiting"]) + _more(row.get("waits") or []),
        )
    console.print(table)


@app.command("show")
@answers
def show(directory: DirArg, run: RunArg, json_output: JsonOpt = False) -> None:
    """Show one run: its path through the plan, locals (live), what it waits for, its effects
    with their decisions and receipts, and for a failed run the error with its pointer."""
    from world.operate import parse_run_id

    with handle_errors(json_output):
        run_id = parse_run_id(run)
        with asking(directory, readonly=True) as handle:
            row = handle.run(run_id).model_dump()
    if json_output:
        emit_json({"ok": True, **row})
        return
    seqs = f"started seq {row['started_seq']}, ended seq {row['ended_seq']}"
    console.print(f"run {row['run_id']} of {row['plan']}: {row['status']} ({seqs})", soft_wrap=True)
    console.print(f"steps taken: {row['steps']}")
    for step in row["path"]:
        extra = f" intent {step['intent_hash']}" if "intent_hash" in step else ""
        console.print(f"  seq {step['seq']}: {step['step']} ({step['op']}){extra}", soft_wrap=True)
    for wait in row.get("waits") or []:
        console.print(f"waits for: {describe_wait(wait)}", soft_wrap=True)
    if row["locals"] is not None:
        console.print(f"locals: {json.dumps(row['locals'], sort_keys=True)}", soft_wrap=True)
    for effect in row["effects"]:
        decision = effect["decision"] or {}
        parts = [
            f"effect {effect['intent_hash']} {effect['kind']} (step {effect['step']}):",
            effect["status"],
            f"decision {decision.get('decision')} (rule {decision.get('rule_index')})",
        ]
        if effect["approval"] is not None:
            parts.append("approved" if effect["approval"]["approved"] else "denied by approver")
        if effect["receipt"] is not None:
            parts.append(f"receipt {effect['receipt']['status']} at seq {effect['receipt']['seq']}")
        console.print(" ".join(parts), soft_wrap=True)
    error = row.get("error")
    if error is not None:
        where = error.get("pointer")
        at = f" at step {error.get('step')}, {where}" if where is not None else ""
        console.print(
            f"error {error.get('code')}{at}: {error.get('detail')}", soft_wrap=True, markup=False
        )
        if "pointer_note" in error:
            console.print(f"pointer {error['pointer_note']}", soft_wrap=True)


@app.command("cancel")
def cancel(directory: DirArg, run: RunArg, json_output: JsonOpt = False) -> None:
    """Cancel a live run (journaled): it ends `cancelled`, its parked and in-flight intents
    are cancelled (no later receipt revives it) and their budget reservations released."""
    from world.operate import parse_run_id

    with handle_errors(json_output), signals_deferred() as gate:
        run_id = parse_run_id(run)
        with asking(directory, gate=gate) as handle:
            done = handle.cancel_run(run_id)
    if json_output:
        emit_json({"ok": True, **done.model_dump()})
    else:
        console.print(
            f"cancelled run {done.run_id} of {done.plan} (journal seq {done.seq}); "
            f"{len(done.intents)} intent(s) cancelled",
            soft_wrap=True,
        )
