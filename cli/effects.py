"""``world effects ...``: what intents are parked, queued (in flight) and done, and the
approver's ``approve`` / ``deny`` for intents a policy parked with ``require_approval``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final

import typer

from cli.common import answers, console, emit_json, handle_errors, signals_deferred
from cli.core import asking

__all__ = ["app", "decide"]

app = typer.Typer(help="Inspect and decide effects.", no_args_is_help=True)

DirArg = Annotated[Path, typer.Argument(help="The world directory")]
IntentArg = Annotated[
    str,
    typer.Argument(help="The intent hash, or a unique prefix of it (from `world effects ls`)"),
]

HASH_SHOWN: Final = 16
"""How many hex digits of a hash the table shows: enough to approve by (a unique prefix)."""


def _origin(origin: dict[str, Any]) -> str:
    if origin.get("kind") == "plan":
        return f"plan {origin.get('name')} run {origin.get('run_id')} step {origin.get('step')}"
    key = origin.get("key")
    return f"cell {origin.get('name')}" + (f" key {key}" if key is not None else "")


@app.command("ls")
@answers
def ls(
    directory: DirArg,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """List intents: parked (awaiting approval), queued (in flight), done, denied."""
    with handle_errors(json_output), asking(directory, readonly=True) as handle:
        listing = handle.effects()
    rows, dead = listing.intents, listing.dead_effects
    if json_output:
        emit_json({"ok": True, "intents": rows, "dead_effects": dead})
        return
    from rich.table import Table

    table = Table(title=f"effects: {len(rows)} intent(s), {dead} dead")
    for column in ("intent", "kind", "what", "cap", "origin", "age", "status", "decision"):
        table.add_column(column, overflow="fold")
    for row in rows:
        age = row.get("age_records")
        table.add_row(
            row["intent_hash"].removeprefix("blake3:")[:HASH_SHOWN],
            row["kind"],
            row["what"],
            row["cap"],
            _origin(row["origin"]),
            "" if age is None else f"seq {row['queued_seq']}, {age} record(s) ago",
            row["status"] + (f" ({row['receipt_status']})" if "receipt_status" in row else ""),
            f"{row['decision']} (rule {row['rule_index']})",
        )
    console.print(table)


def decide(directory: Path, intent: str, approved: bool) -> int:
    """Approve or deny a parked intent, through the server of a served world; the seq of the
    journaled ``effect.approval`` (``world effects approve|deny``, the inspector's buttons)."""
    with asking(directory) as handle:
        return handle.decide(intent, approved)


def _decide(directory: Path, intent: str, approved: bool, json_output: bool) -> None:
    with handle_errors(json_output), signals_deferred():
        seq = decide(directory, intent, approved)
    verb = "approved" if approved else "denied"
    if json_output:
        emit_json({"ok": True, "seq": seq, "decision": verb})
    else:
        console.print(f"{verb} {intent} (journal seq {seq}); `world run` carries it on")


@app.command("approve")
def approve(
    directory: DirArg,
    intent: IntentArg,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Approve a parked intent: it is sent at the next `world run`."""
    _decide(directory, intent, True, json_output)


@app.command("deny")
def deny(
    directory: DirArg,
    intent: IntentArg,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Deny a parked intent: the run that asked for it ends with an error."""
    _decide(directory, intent, False, json_output)
