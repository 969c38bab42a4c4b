"""Moving cells: ``world cells export|import`` (added to ``cli.cells.app``) and
``world migrate cells`` (the ``migrate`` group, ``app``).

Importing this module registers the two ``cells`` commands; ``cli.main`` adds ``app`` as
``migrate``. Errors are one line and exit 1 like every command (``handle_errors``)."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from air.errors import InvalidArgument
from cli._progress import bar
from cli.cells import app as cells_app
from cli.common import answers, console, emit_json, handle_errors, signals_deferred
from cli.core import asking, parse_key_arg, print_notices

# world.moves._cellfiles and world.moves._migrate are imported where used: `world --help` need not load them.

__all__ = ["app", "export", "import_cells", "migrate", "signing_key"]

app = typer.Typer(help="Change the shape of a world's reducers.", no_args_is_help=True)

DirArg = Annotated[Path, typer.Argument(help="The world directory")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output")]


@cells_app.command("export")
def export(
    directory: DirArg,
    reducer: Annotated[str, typer.Argument(help="Reducer name")],
    out: Annotated[Path, typer.Option("-o", "--out", help="FILE, or FOLDER with --all")],
    key: Annotated[
        str | None, typer.Argument(help="The key, JSON read through the key schema")
    ] = None,
    all_cells: Annotated[bool, typer.Option("--all", help="Every cell, as a folder tree")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Write over an existing file or non-empty folder")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Export one cell to a self-describing CBOR file, or every cell (--all) to a folder,
    signed with the world's key (printed; `world cells key` prints it too). An existing file
    (a folder that is not empty, with --all) is written over only with --force."""
    from world.moves import check_export_target, world_signer

    with handle_errors(json_output):
        check_export_target(out, folder=all_cells, force=force)
        _one_of(key, all_cells)
        key_value = None if key is None else parse_key_arg(key)
        with asking(directory, readonly=True) as handle:
            exported = handle.cells_export(
                reducer, out, key=key_value, every=all_cells, force=force
            )
        print_notices(exported.notices)  # the server's reading handle's (a local one's: above)
        count = exported.cells
        signer = world_signer(directory)
    signer_hex = None if signer is None else signer.hex()
    if json_output:
        emit_json(
            {"ok": True, "reducer": reducer, "cells": count, "path": str(out), "signer": signer_hex}
        )
        return
    console.print(f"exported {count} cell(s) of {reducer} to {out}", markup=False)
    if signer_hex is None:
        console.print("unsigned: the world has no key file (keys/receipt.key)", markup=False)
    else:
        console.print(f"signed by {signer_hex}", markup=False)


@cells_app.command("key")
@answers
def signing_key(directory: DirArg, json_output: JsonOpt = False) -> None:
    """Print the public key this world signs its cell exports with: what another world gives
    to `world cells import --trust-key` to take this world's files."""
    from world import World
    from world.moves import world_signer

    with handle_errors(json_output):
        World.check_directory(directory)
        signer = world_signer(directory)
    signer_hex = None if signer is None else signer.hex()
    if json_output:
        emit_json({"ok": True, "signer": signer_hex})
    elif signer_hex is None:
        console.print("none: the world has no key file; its exports are unsigned", markup=False)
    else:
        console.print(signer_hex, markup=False)


def _one_of(key: str | None, all_cells: bool) -> None:
    if all_cells == (key is not None):
        raise InvalidArgument("KEY", key or "", "give exactly one of KEY or --all")


@cells_app.command("import")
def import_cells(
    directory: DirArg,
    path: Annotated[Path, typer.Argument(help="An exported cell file or folder")],
    trust: Annotated[
        bool,
        typer.Option(
            "--trust",
            help="Also take unsigned files and files validly signed by any other world's key",
        ),
    ] = False,
    trust_key: Annotated[
        list[str] | None,
        typer.Option(
            "--trust-key",
            metavar="HEX",
            help="Also take files validly signed by this public key (`world cells key` of the "
            "exporting world); may be repeated",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace cells whose state is newer than the file's, or of another world",
        ),
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Import exported cells (verified first, their signature included; journaled so replay
    reproduces them). Only files signed by this world are taken unless --trust or
    --trust-key says otherwise; a signature that does not verify is never taken. A cell that
    stepped since the export, or that another world's file would replace, is refused (the
    message names both) unless --force."""
    from world.moves import Trust

    keys_hex = list(trust_key or [])
    with handle_errors(json_output), signals_deferred() as gate:
        Trust.of(any_signer=trust, keys_hex=keys_hex)  # the keys' errors before anything
        with asking(directory, gate=gate) as handle:
            count = handle.cells_import(path, trust=trust, trust_keys=keys_hex, force=force)
    if json_output:
        emit_json({"ok": True, "cells": count})
    else:
        console.print(f"imported {count} cell(s) from {path}", markup=False)


@app.command("cells")
def migrate(
    directory: DirArg,
    reducer: Annotated[str, typer.Argument(help="The non-keyed reducer whose state is a map")],
    key_field: Annotated[str, typer.Option("--key-field", help="The events' key field")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report, write nothing")] = False,
    json_output: JsonOpt = False,
) -> None:
    """Turn a v1 reducer with map<key, substate> state into a keyed reducer: one cell per key."""
    from world.moves import migrate_cells

    with (
        handle_errors(json_output),
        signals_deferred(),
        nullcontext() if dry_run else bar("migrating", json_output=json_output) as progress,
    ):
        plan = migrate_cells(directory, reducer, key_field, dry_run=dry_run, progress=progress)
    summary = {**plan.summary(), "dry_run": dry_run}
    if json_output:
        emit_json({"ok": True, **summary})
        return
    verb = "would migrate" if dry_run else "migrated"
    console.print(
        f"{verb} {reducer}: {summary['cells']} cell(s), key_schema "
        f"{json.dumps(summary['key_schema'])}, state {plan.state_from} -> {plan.state_to}, "
        f"key_field {key_field!r} on {', '.join(plan.routes) or 'no routes'}",
        markup=False,
    )
    if not dry_run:
        console.print(f"the old world is kept at {plan.backup}", markup=False)
