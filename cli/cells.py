"""``world cells ...``: list and show the cells of a keyed reducer, and upgrade them to the
world's current era (``world cells upgrade``, ``world.gov``).

``world cells ls`` order: cells are sorted by their key's canonical CBOR bytes (the bytes the
cell store hashes), compared bytewise. That is a total order that does not depend on how a key
was spelled on the command line, and is the same on every machine and for the served path:

* text keys: shorter first, then bytewise (UTF-8) among keys of the same length (CBOR's header
  carries the length), so ``"k2"`` comes before ``"k10"``;
* integer keys: non-negative ones first, ascending; then negative ones by magnitude
  (``-1, -2, …``);
* records, variants and other composite keys: by their encoding, field by field in canonical
  order.

Paging: ``--limit N`` rows after ``--after KEY`` (exclusive; the key need not exist). When more
rows remain, ``--json`` carries ``next_after``: the last row's key, to pass back (as JSON) to
``--after`` for the next page. The served path (``world serve``) lists every cell through the
socket and pages here, so both paths give the same rows and the same shape.

A page is one read (``World.read``): its rows and ``count`` are the world at one journal
position, even when a live writer checkpoints while it is read (the reader reopens and reads the
page again). Pages are separate opens, so the next page, ``--after`` the last key, shows the
world as it is then: a writer in between changes what the next page shows, never what this one
did, and the cells after the key are neither skipped nor repeated.

JSON shape of ``cells ls``: ``{"ok", "reducer", "count", "cells": [{"key", "key_hash",
"state", "state_hash", "size", "last_active", "era"}], "next_after"?, "current_era"}``:
``count`` is the number of cells in all, ``cells`` one page; ``next_after`` is absent on the
last page; a cell's ``era`` is the manifest hash it is pinned to (``current_era`` the world's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.common import answers, console, emit_json, fail, handle_errors
from cli.core import asking, parse_key_arg

__all__ = ["app"]

app = typer.Typer(help="Inspect the cells of keyed reducers.", no_args_is_help=True)


@app.command("ls")
@answers
def ls(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    reducer: Annotated[str, typer.Argument(help="Keyed reducer name")],
    limit: Annotated[int, typer.Option("--limit", min=1, help="Rows per page (default 100)")] = 100,
    after: Annotated[
        str | None,
        typer.Option(
            "--after",
            help="Start after this key (the last key of the previous page; JSON read through "
            "the key schema)",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """List a keyed reducer's cells sorted by key (canonical CBOR order), a page at a time:
    key, state hash, size, last active journal seq."""
    with handle_errors(json_output):
        after_value = None if after is None else parse_key_arg(after)
        with asking(directory, readonly=True) as handle:
            page = handle.cells(reducer, limit=limit, after=after_value).model_dump()
        if page["next_after"] is None:  # the last page (a key is never null)
            del page["next_after"]
    out: dict[str, Any] = {"ok": True, **page}
    total, cells = page["count"], page["cells"]
    if json_output:
        emit_json(out)
        return
    from rich.table import Table

    shown = f"{len(cells)} of {total} cell(s)" + ("" if after is None else f" after {after}")
    table = Table(title=f"{reducer}: {shown}")
    for column in ("key", "state hash", "size", "last active", "era"):
        table.add_column(column)
    current = page.get("current_era")
    for c in cells:
        era = "current" if c["era"] == current else c["era"][:19] + "…"
        table.add_row(
            json.dumps(c["key"]),
            c["state_hash"][:19] + "…",
            str(c["size"]),
            str(c["last_active"]),
            era,
        )
    console.print(table)
    if "next_after" in out:
        console.print(
            f"more: world cells ls {directory} {reducer} --after '{json.dumps(out['next_after'])}'",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@app.command("upgrade")
def upgrade(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    reducer: Annotated[str, typer.Argument(help="Reducer name")],
    key: Annotated[
        list[str] | None, typer.Option("--key", help="A cell's key (JSON); repeat for more")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Every cell not in the current era")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Move cells to the world's current era (after `world upgrade apply`): a re-pin when the
    state schema is the same, else one step of the new module with sys/StateUpgrade@1. A cell
    whose upgrade fails stays in its era, with the reason. Journaled in batches; --all can be
    run again to go on after an interruption."""
    if every == bool(key):
        fail("give --key KEY (one or more) or --all")
    with handle_errors(json_output):
        keys = None if every else [parse_key_arg(k) for k in key or []]
        with asking(directory) as handle:
            reply = handle.cells_upgrade(reducer, keys).model_dump()
    if json_output:
        emit_json({"ok": not reply["failed"], **reply})
        return
    console.print(
        f"{reply['upgraded']} cell(s) upgraded, {len(reply['failed'])} failed, "
        f"{reply['already_current']} already current",
        markup=False,
    )
    for line in reply["failed"]:
        reason = line["reason"]
        console.print(
            f"  {json.dumps(line['key'])}: {reason.get('code')}: {reason.get('detail', '')}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if reply["failed"]:
        raise typer.Exit(1)
