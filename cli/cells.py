"""``world cells ...``: list and show the cells of a keyed reducer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cli.common import console, emit_json, fail, handle_errors
from cli.core import opened, parse_key_arg
from world.world import CellView

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
    with handle_errors(json_output), opened(directory, readonly=True) as world:
        total = world.cell_count(reducer)
        views: list[CellView] = []
        for view in world.cells(reducer):
            if len(views) >= limit:
                break
            views.append(view)
    if json_output:
        cells = [
            {
                "key": v.key,
                "key_hash": v.key_hash,
                "state": v.state,
                "size": v.entry.size,
                "last_active": v.entry.last_active,
            }
            for v in views
        ]
        emit_json({"ok": True, "reducer": reducer, "count": total, "cells": cells})
        return
    table = Table(title=f"{reducer}: {total} cell(s)")
    for column in ("key", "state", "size", "last active"):
        table.add_column(column)
    for v in views:
        table.add_row(
            json.dumps(v.key), json.dumps(v.state), str(v.entry.size), str(v.entry.last_active)
        )
    console.print(table)


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
