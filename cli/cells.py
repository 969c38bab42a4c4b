"""``world cells ...``: list and show the cells of a keyed reducer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from cli.common import console, emit_json, fail, handle_errors
from cli.core import opened, parse_key_arg, via_server

__all__ = ["app"]

app = typer.Typer(help="Inspect the cells of keyed reducers.", no_args_is_help=True)


@app.command("ls")
def ls(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    reducer: Annotated[str, typer.Argument(help="Keyed reducer name")],
    limit: Annotated[int, typer.Option("--limit", help="Show at most this many")] = 1000,
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List a keyed reducer's cells: key, state, size, last active journal seq."""
    with handle_errors(json_output):
        listing = via_server(directory, "cells_ls", reducer=reducer, limit=limit)
        if listing is None:
            listing = _list_here(directory, reducer, limit)
    total, cells = listing["count"], listing["cells"]
    if json_output:
        emit_json({"ok": True, "reducer": reducer, "count": total, "cells": cells})
        return
    table = Table(title=f"{reducer}: {total} cell(s)")
    for column in ("key", "state", "size", "last active"):
        table.add_column(column)
    for c in cells:
        table.add_row(
            json.dumps(c["key"]), json.dumps(c["state"]), str(c["size"]), str(c["last_active"])
        )
    console.print(table)


def _list_here(directory: Path, reducer: str, limit: int) -> dict[str, Any]:
    from world.serve import cells_listing  # lazy: the server's imports are not needed here

    with opened(directory, readonly=True) as world:
        return cells_listing(world, reducer, limit)


@app.command("show")
def show(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    reducer: Annotated[str, typer.Argument(help="Keyed reducer name")],
    key: Annotated[str, typer.Argument(help="The key, JSON read through the key schema")],
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show one cell's state."""
    with handle_errors(json_output), opened(directory, readonly=True) as world:
        value = world.state(reducer, parse_key_arg(key))
    if json_output:
        emit_json({"ok": True, "state": value})
    elif value is None:
        fail(f"{reducer} has no cell for key {key}")
    else:
        console.print_json(json.dumps(value))
