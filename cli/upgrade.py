"""``world upgrade propose|ls|show``: propose a new AIR to a world and read its proposals
(``world.gov``). A proposal is validated as a whole and against the world, and journaled with
its diff; nothing the world runs changes yet."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import console, emit_json, handle_errors
from cli.core import opened

if TYPE_CHECKING:
    from air.errors import ManifestError
    from world import World
    from world.gov import Proposal

__all__ = ["upgrade_app"]

upgrade_app = typer.Typer(
    help="Propose a new AIR to a world, and list or show its proposals", no_args_is_help=True
)

DirArg = Annotated[Path, typer.Argument(help="The world directory")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output")]


@upgrade_app.command("propose")
def propose(
    directory: DirArg,
    air: Annotated[Path, typer.Option("--air", help="The new AIR: a folder or one file")],
    note: Annotated[str | None, typer.Option("--note", help="Why: kept with it")] = None,
    json_output: JsonOpt = False,
) -> None:
    """Validate the AIR at --air against the world and journal it as a proposal with its diff
    (defs, routes, triggers, grants, policy; per reducer: wasm, state and key schema)."""
    from world.gov import propose as propose_air

    def on_manifest(exc: ManifestError) -> None:
        from cli.validate import _print_diagnostics

        if json_output:
            emit_json({"ok": False, "diagnostics": [d.as_json() for d in exc.diagnostics]})
        else:
            _print_diagnostics(exc.diagnostics)

    with handle_errors(json_output, on_manifest), opened(directory) as world:
        made, _diff = propose_air(world, air, note)
        counts = _cell_counts(world, made)
    if json_output:
        emit_json({"ok": True, **made.as_json(), "cells": counts})
        return
    console.print(f"proposal {made.id}", markup=False, highlight=False)
    _print_diff(made, counts)


@upgrade_app.command("ls")
def list_proposals(directory: DirArg, json_output: JsonOpt = False) -> None:
    """Every proposal of the world, oldest first."""
    from world.gov import proposals

    with handle_errors(json_output), opened(directory, readonly=True) as world:
        found = proposals(world)
        current = world.air.manifest_hash
    if json_output:
        emit_json({"ok": True, "proposals": [p.as_json() for p in found], "current": current})
        return
    if not found:
        console.print("no proposals", markup=False)
        return
    for made in found:
        stale = "" if made.base == current else "  (stale: the world's AIR changed since)"
        note = "" if made.note is None else f"  {made.note}"
        console.print(
            f"{made.id}  {_short(made.base)} → {_short(made.manifest_hash)}{note}{stale}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@upgrade_app.command("show")
def show(
    directory: DirArg,
    proposal_id: Annotated[int, typer.Argument(help="The proposal's id (its seq)")],
    json_output: JsonOpt = False,
) -> None:
    """One proposal and what it changes."""
    from world.gov import proposal

    with handle_errors(json_output), opened(directory, readonly=True) as world:
        made = proposal(world, proposal_id)
        counts = _cell_counts(world, made)
    if json_output:
        emit_json({"ok": True, **made.as_json(), "cells": counts})
        return
    console.print(f"proposal {made.id}", markup=False, highlight=False)
    _print_diff(made, counts)


def _cell_counts(world: World, made: Proposal) -> dict[str, int]:
    """The cells each kept, succeeded or removed reducer has now (what would follow)."""
    counts = {}
    for line in made.diff["reducers"]:
        old = line["old"]
        if old is not None and old in world.air.modules:
            counts[old] = world.cell_count(old)
    return counts


def _short(address: str) -> str:
    return address[:19] + "…"


def _print_diff(made: Proposal, counts: dict[str, int]) -> None:
    out = [f"  base {made.base}", f"  new  {made.manifest_hash}"]
    if made.note is not None:
        out.append(f"  note {made.note}")
    diff: dict[str, Any] = made.diff
    for sign, part in (("+", "added"), ("-", "removed"), ("~", "changed")):
        for kind, names in sorted(diff[part].items()):
            out += [f"  {sign} {kind} {name}" for name in names]
    for what, lines in sorted(diff["manifest"].items()):
        out += [f"  {what}: {line}" for line in lines]
    for line in diff["reducers"]:
        out.append("  " + _reducer_line(line, counts.get(line["old"] or "")))
    for line in out:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _reducer_line(line: dict[str, Any], cells: int | None) -> str:
    from air import ReducerChange

    return ReducerChange(**line).describe(cells)
