"""``world why``: why a cell holds its state, the chain of causes back from the record that
wrote it (``world.history.why``): the step, the event it consumed, who sent or raised that, a
run's trigger, an effect's intent, decision and receipt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.common import answers, console, emit_json, fail, handle_errors
from cli.core import asking, parse_key_arg

__all__ = ["why"]


@answers
def why(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    reducer: Annotated[str, typer.Argument(help="Keyed reducer name")],
    key: Annotated[str, typer.Argument(help="The key, JSON read through the key schema")],
    at: Annotated[
        int | None,
        typer.Option("--at", min=0, help="Why it held its state right after this position"),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Why a cell holds its state: the step that wrote it, the event that step consumed, who
    sent or raised that (from outside, a reducer's step, a plan run and its trigger), and for
    an effect's receipt its intent, policy decision and approval; newest first.

    Each link is read from the journal (a step's src, a run's trigger, an intent's hash),
    never guessed. Reads only: works beside a running or served world."""
    with handle_errors(json_output), asking(directory, readonly=True) as handle:
        answer = handle.why(reducer, parse_key_arg(key), at=at)
    missing = f"{reducer} has no cell for key {key} at seq {answer.at}"
    if json_output:
        if not answer.chain:  # exit 1 as without --json (as `cells show` does)
            failed = {"ok": False, "error": "NoSuchCell", "code": "cell.missing"}
            emit_json({**answer.model_dump(), **failed, "detail": missing})
            raise typer.Exit(1)
        emit_json({"ok": True, **answer.model_dump()})
        return
    if not answer.chain:
        fail(missing)
    state = json.dumps(answer.state, ensure_ascii=False, sort_keys=True)
    _line(f"{reducer} {key} at seq {answer.at}: {state}")
    for cause in answer.chain:
        _cause(cause, "  ")
    _line(f"  ({answer.ends})")


def _cause(cause: dict[str, Any], indent: str) -> None:
    _line(f"{indent}seq {cause['seq']:<6} {cause['kind']:<16} {cause['link']}: {cause['says']}")
    for beside in cause["beside"]:
        _cause(beside, indent + "      ")


def _line(text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)
