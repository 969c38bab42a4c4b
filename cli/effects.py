"""``world effects ...``: what intents are parked, queued (in flight) and done, and the
approver's ``approve`` / ``deny`` for intents a policy parked with ``require_approval``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import console, emit_json, handle_errors, signals_deferred
from cli.core import opened

if TYPE_CHECKING:  # imported where used: `world --help` need not load the kernel (issue 9)
    from kernel import Intent, Settled

__all__ = ["app"]

app = typer.Typer(help="Inspect and decide effects.", no_args_is_help=True)

DirArg = Annotated[Path, typer.Argument(help="The world directory")]


def _row(intent: Intent | Settled) -> dict[str, Any]:
    from air import cbor
    from kernel import Settled

    origin = {
        k: (v.hex() if isinstance(v, bytes) else v)
        for k, v in intent.origin.items()
        if k not in ("rule_index", "decision")
    }
    row: dict[str, Any] = {
        "intent_hash": cbor.raw_to_hash(intent.intent_hash),
        "kind": intent.kind,
        "cap": intent.cap,
        "status": intent.status,
        "origin": origin,
        "decision": intent.origin.get("decision"),
        "rule_index": intent.origin.get("rule_index"),
    }
    if isinstance(intent, Settled) and intent.receipt_status is not None:
        row["receipt_status"] = intent.receipt_status
    return row


@app.command("ls")
def ls(
    directory: DirArg,
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List intents: parked (awaiting approval), queued (in flight), done, denied."""
    with handle_errors(json_output), opened(directory, readonly=True) as world:
        rows = [_row(i) for i in world.kernel.effects.listing()]
        dead = len([d for d in world.kernel.dead_letters.letters if d.code.startswith("effect")])
    if json_output:
        emit_json({"ok": True, "intents": rows, "dead_effects": dead})
        return
    from rich.table import Table

    table = Table(title=f"effects: {len(rows)} intent(s), {dead} dead")
    for column in ("intent", "kind", "status", "origin", "decision"):
        table.add_column(column)
    for row in rows:
        origin = row["origin"]
        table.add_row(
            row["intent_hash"],
            row["kind"],
            row["status"] + (f" ({row['receipt_status']})" if "receipt_status" in row else ""),
            f"{origin.get('kind')} {origin.get('name')}",
            f"{row['decision']} (rule {row['rule_index']})",
        )
    console.print(table)


def _decide(directory: Path, intent: str, approved: bool, json_output: bool) -> None:
    from world.effects import decide_parked

    with handle_errors(json_output), signals_deferred(), opened(directory) as world:
        seq = decide_parked(world, intent, approved)
    verb = "approved" if approved else "denied"
    if json_output:
        emit_json({"ok": True, "seq": seq, "decision": verb})
    else:
        console.print(f"{verb} {intent} (journal seq {seq}); `world run` carries it on")


@app.command("approve")
def approve(
    directory: DirArg,
    intent: Annotated[str, typer.Argument(help="The intent hash (from `world effects ls`)")],
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Approve a parked intent: it is sent at the next `world run`."""
    _decide(directory, intent, True, json_output)


@app.command("deny")
def deny(
    directory: DirArg,
    intent: Annotated[str, typer.Argument(help="The intent hash (from `world effects ls`)")],
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Deny a parked intent: the run that asked for it ends with an error."""
    _decide(directory, intent, False, json_output)
