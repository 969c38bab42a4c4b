"""``world dead-letters ...``: the deliveries that failed, and what an operator does about them.

``ls`` and ``show`` read the kept letters (``kernel._deadletters``: each with an id, the seq of
the record that made it dead, ``17`` or ``17.1``); ``retry`` journals ``deadletter.retried``
(the event goes again to the same reducer and key at the next ``world run``) and ``drop``
journals ``deadletter.dropped`` (off the kept list). Ids are seqs, not hashes: exact, no
prefixes. A served world (``world serve``) holds the write lock: stop it to retry or drop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from cli.common import answers, console, emit_json, handle_errors, signals_deferred
from cli.core import asking

__all__ = ["app"]

app = typer.Typer(help="List, show, retry and drop dead letters.", no_args_is_help=True)

DirArg = Annotated[Path, typer.Argument(help="The world directory")]
IdArg = Annotated[str, typer.Argument(help="The dead letter's id (from `world dead-letters ls`)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output")]

DETAIL_SHOWN: Final = 60
"""How much of a letter's detail ``ls`` shows in its table (``show`` and ``--json``: all)."""


def _short(text: str) -> str:
    return text if len(text) <= DETAIL_SHOWN else text[: DETAIL_SHOWN - 1] + "…"


@app.command("ls")
@answers
def ls(directory: DirArg, json_output: JsonOpt = False) -> None:
    """List the kept dead letters, oldest first, and how many there were in all."""
    with handle_errors(json_output), asking(directory, readonly=True) as handle:
        data = handle.dead_letters().model_dump()
    if json_output:
        emit_json({"ok": True, **data})
        return
    from rich.table import Table

    title = (
        f"dead letters: {data['kept']} kept, {data['total']} in all; "
        f"{data['steps_failed']} failed step(s)"
    )
    table = Table(title=title)
    for column in ("id", "reducer", "key", "schema", "code", "detail"):
        table.add_column(column, overflow="fold")
    for d in data["letters"]:
        key = "" if d["key"] is None else json.dumps(d["key"])
        table.add_row(d["id"], d["reducer"], key, d["schema"], d["code"], _short(d["detail"]))
    console.print(table)


@app.command("show")
@answers
def show(directory: DirArg, letter_id: IdArg, json_output: JsonOpt = False) -> None:
    """Show one dead letter: its target, event, code and the whole reason."""
    with handle_errors(json_output), asking(directory, readonly=True) as handle:
        data = handle.dead_letter(letter_id)
    if json_output:
        emit_json({"ok": True, "letter": data})
        return
    lines: list[tuple[str, Any]] = [
        ("id", data["id"]),
        ("seq", data["seq"]),
        ("reducer", data["reducer"]),
        ("key", json.dumps(data["key"])),
        ("schema", data["schema"]),
        ("value", json.dumps(data["value"])),
        ("code", data["code"]),
        ("reason", data["detail"]),
        ("retryable", "yes" if data["retryable"] else "no (drop it)"),
    ]
    for name, value in lines:
        console.print(f"{name:<10} {value}", soft_wrap=True, markup=False)


def _act(directory: Path, letter_id: str, retry: bool, json_output: bool) -> None:

    with (
        handle_errors(json_output),
        signals_deferred() as gate,
        asking(directory, gate=gate) as handle,
    ):
        seq = (handle.retry_dead_letter if retry else handle.drop_dead_letter)(letter_id)
    verb = "retried" if retry else "dropped"
    if json_output:
        emit_json({"ok": True, "seq": seq, "id": letter_id, "action": verb})
    elif retry:
        console.print(f"retried {letter_id} (journal seq {seq}); `world run` delivers it")
    else:
        console.print(f"dropped {letter_id} (journal seq {seq})")


@app.command("retry")
def retry(directory: DirArg, letter_id: IdArg, json_output: JsonOpt = False) -> None:
    """Deliver a dead letter's event again to the same reducer and key (at the next run)."""
    _act(directory, letter_id, True, json_output)


@app.command("drop")
def drop(directory: DirArg, letter_id: IdArg, json_output: JsonOpt = False) -> None:
    """Take a dead letter off the kept list (it still counts in the total)."""
    _act(directory, letter_id, False, json_output)
