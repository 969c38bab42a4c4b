"""``world effects ...``: what intents are parked, queued (in flight) and done, and the
approver's ``approve`` / ``deny`` for intents a policy parked with ``require_approval``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from cli.common import answers, console, emit_json, handle_errors, signals_deferred
from cli.core import opened, via_server

if TYPE_CHECKING:  # imported where used: `world --help` need not load the kernel (issue 9)
    from kernel import Intent, Settled

__all__ = ["app", "decide", "effects_listing"]

app = typer.Typer(help="Inspect and decide effects.", no_args_is_help=True)

DirArg = Annotated[Path, typer.Argument(help="The world directory")]
IntentArg = Annotated[
    str,
    typer.Argument(help="The intent hash, or a unique prefix of it (from `world effects ls`)"),
]

WHAT_MAX: Final = 60
"""How much of an intent's request ``effects ls`` shows in its table (``--json``: all of it)."""
HASH_SHOWN: Final = 16
"""How many hex digits of a hash the table shows: enough to approve by (a unique prefix)."""


def _what(params_cbor: bytes | None) -> str:
    """What an intent asks for, in a few words: an HTTP request's method and URL, else its
    params' scalar fields (``key=value``), cut at ``WHAT_MAX`` characters."""
    import cbor2

    if params_cbor is None:
        return ""
    params = cbor2.loads(params_cbor)  # the kernel's own canonical encoding of checked params
    if not isinstance(params, dict):
        return repr(params)[:WHAT_MAX]
    if "method" in params and "url" in params:
        text = f"{params['method']} {params['url']}"
    else:
        text = " ".join(
            f"{k}={v}" for k, v in params.items() if isinstance(v, str | int | float | bool)
        )
    return text if len(text) <= WHAT_MAX else text[: WHAT_MAX - 1] + "…"


def _origin(origin: dict[str, Any]) -> str:
    if origin.get("kind") == "plan":
        return f"plan {origin.get('name')} run {origin.get('run_id')} step {origin.get('step')}"
    key = origin.get("key")
    return f"cell {origin.get('name')}" + (f" key {key}" if key is not None else "")


def _row(intent: Intent | Settled, queued_seq: int | None, head: int) -> dict[str, Any]:
    """One intent as ``effects ls`` lists it; a live one with the seq it was queued at and its
    age (records journaled since)."""
    from air import cbor
    from kernel import Settled

    origin = {
        k: (v.hex() if isinstance(v, bytes) else v)
        for k, v in intent.origin.items()
        if k not in ("rule_index", "decision")
    }
    if origin.get("kind") == "reducer" and isinstance(intent.origin.get("key"), bytes):
        origin["key"] = cbor.loads(intent.origin["key"])
    params_cbor = None if isinstance(intent, Settled) else intent.params_cbor
    row: dict[str, Any] = {
        "intent_hash": cbor.raw_to_hash(intent.intent_hash),
        "kind": intent.kind,
        "what": _what(params_cbor),
        "cap": intent.cap,
        "status": intent.status,
        "origin": origin,
        "decision": intent.origin.get("decision"),
        "rule_index": intent.origin.get("rule_index"),
    }
    if isinstance(intent, Settled) and intent.receipt_status is not None:
        row["receipt_status"] = intent.receipt_status
    if queued_seq is not None:
        row["queued_seq"] = queued_seq
        row["age_records"] = head - 1 - queued_seq
    return row


@app.command("ls")
@answers
def ls(
    directory: DirArg,
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List intents: parked (awaiting approval), queued (in flight), done, denied."""
    with handle_errors(json_output):
        rows, dead = effects_listing(directory)
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


def effects_listing(directory: Path) -> tuple[list[dict[str, Any]], int]:
    """The rows ``effects ls`` shows (``_row``) and how many dead letters an effect made."""
    from world.operate import queued_seqs

    with opened(directory, readonly=True) as world:
        listing = world.kernel.effects.listing()
        live = {i.intent_hash for i in listing if i.status in ("queued", "parked")}
        asked = queued_seqs(world.journal, live)
        head = world.journal.seq_next
        rows = [_row(i, asked.get(i.intent_hash), head) for i in listing]
        dead = len([d for d in world.kernel.dead_letters.letters if d.code.startswith("effect")])
    return rows, dead


def decide(directory: Path, intent: str, approved: bool) -> int:
    """Approve or deny a parked intent, through the server of a served world; the seq of the
    journaled ``effect.approval`` (``world effects approve|deny``, the inspector's buttons)."""
    from world.effects import decide_parked

    reply = via_server(directory, "effects_decide", intent=intent, approved=approved)
    if reply is not None:
        return int(reply["seq"])
    with opened(directory) as world:
        return decide_parked(world, intent, approved)


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
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Approve a parked intent: it is sent at the next `world run`."""
    _decide(directory, intent, True, json_output)


@app.command("deny")
def deny(
    directory: DirArg,
    intent: IntentArg,
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Deny a parked intent: the run that asked for it ends with an error."""
    _decide(directory, intent, False, json_output)
