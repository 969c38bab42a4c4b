"""``world cells ...``: list and show the cells of a keyed reducer.

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

JSON shape of ``cells ls``: ``{"ok", "reducer", "count", "cells": [{"key", "key_hash",
"state", "state_hash", "size", "last_active"}], "next_after"?}``: ``count`` is the number of
cells in all, ``cells`` one page; ``next_after`` is absent on the last page.
"""

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

_SERVED_ALL = 2**62
"""The ``limit`` asked of a served world: every cell (it lists in key-hash order, so the key
order is made here)."""


@app.command("ls")
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
        listing = via_server(directory, "cells_ls", reducer=reducer, limit=_SERVED_ALL)
        if listing is None:
            rows, total = _list_here(directory, reducer, after_value)
        else:
            rows, total = _list_served(directory, reducer, listing, after_value)
    page = rows[:limit]
    out: dict[str, Any] = {
        "ok": True,
        "reducer": reducer,
        "count": total,
        "cells": [c for _k, c in page],
    }
    if len(rows) > limit:
        out["next_after"] = page[-1][1]["key"]
    if json_output:
        emit_json(out)
        return
    shown = f"{len(page)} of {total} cell(s)" + ("" if after is None else f" after {after}")
    table = Table(title=f"{reducer}: {shown}")
    for column in ("key", "state hash", "size", "last active"):
        table.add_column(column)
    for _k, c in page:
        table.add_row(
            json.dumps(c["key"]), c["state_hash"][:19] + "…", str(c["size"]), str(c["last_active"])
        )
    console.print(table)
    if "next_after" in out:
        console.print(
            f"more: world cells ls {directory} {reducer} --after '{json.dumps(out['next_after'])}'",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


Row = tuple[bytes, dict[str, Any]]
"""A listed cell: its key's canonical CBOR (the sort key) and its JSON row."""


def _after(rows: list[Row], after_cbor: bytes | None) -> list[Row]:
    rows.sort(key=lambda r: r[0])
    return rows if after_cbor is None else [r for r in rows if r[0] > after_cbor]


def _list_here(directory: Path, reducer: str, after: Any) -> tuple[list[Row], int]:
    from air.cbor import raw_to_hash

    with opened(directory, readonly=True) as world:
        after_cbor = None if after is None else world.key_cbor(reducer, after)
        rows = [
            (
                view.entry.key_cbor,
                {
                    "key": view.key,
                    "key_hash": view.key_hash,
                    "state": view.state,
                    "state_hash": raw_to_hash(view.entry.state_hash),
                    "size": view.entry.size,
                    "last_active": view.entry.last_active,
                },
            )
            for view in world.cells(reducer)
        ]
    return _after(rows, after_cbor), len(rows)


def _list_served(
    directory: Path, reducer: str, listing: dict[str, Any], after: Any
) -> tuple[list[Row], int]:
    """The served listing (key-hash order, no key bytes or state hash) made into rows: the key
    and state are read back through their schemas to the canonical CBOR the store holds."""
    from air import cbor
    from air.types import Ref
    from air.values import normalise
    from world._worlddir import load_world_air
    from world.timetravel import cell_key

    air = load_world_air(directory)
    after_cbor = None if after is None else cell_key(air, reducer, after).key_cbor
    state_type = Ref(air.modules[reducer].abi.reducer.state)
    key_type = air.key_types.get(reducer)
    rows: list[Row] = []
    for c in listing["cells"]:
        key = None if key_type is None else normalise(key_type, c["key"], air.schemas)
        key_cbor = cbor.dumps(key)  # a non-keyed reducer's one cell has the null key
        state_cbor = cbor.dumps(normalise(state_type, c["state"], air.schemas))
        row = {**c, "state_hash": cbor.content_hash(state_cbor)}
        rows.append((key_cbor, row))
    return _after(rows, after_cbor), int(listing["count"])


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
