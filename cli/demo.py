"""``world demo``: a keyed counter world in a temporary folder, sent events, run, and shown."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cli.common import console, handle_errors
from world.replay import verify_world
from world.sdk import example_path
from world.world import World

__all__ = ["demo", "example_air"]

EVENT = "demo/CounterEvent@1"
REDUCER = "demo/Counter@1"


def example_air(name: str) -> Path:
    """A bundled example world's AIR folder: in the installed package, or in the checkout of an
    editable install (``world.sdk.bundle_root``)."""
    return example_path(name)


def _events() -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    for i in range(12):
        key = ["alice", "bob", "carol"][i % 3]
        events.append({"key": key, "op": {"$tag": "Add", "$value": i + 1}})
    events.append({"key": "dave", "op": {"$tag": "Add", "$value": 5}})
    events.append({"key": "dave", "op": "Clear"})
    return events


def demo(
    keep: Annotated[
        Path | None, typer.Option("--keep", help="Create the world here and keep it")
    ] = None,
) -> None:
    """Create a keyed counter world, send events to a few keys, run it, show the cells."""
    with handle_errors():
        folder = keep or Path(tempfile.mkdtemp(prefix="world-demo-"))
        air = example_air("counter")
        with World.create(folder / "world" if keep is None else folder, air) as world:
            console.print(
                f"[bold]world[/bold] {world.path}  manifest {world.air.manifest_hash[:23]}…"
            )
            seqs = world.send_many((EVENT, e) for e in _events())
            console.print(
                f"sent {len(seqs)} events to keys alice, bob, carol, dave (dave's last event is Clear)"
            )
            steps = world.run_until_idle()
            console.print(f"ran {steps} steps until idle")
            table = Table(title=f"cells of {REDUCER}")
            for column in ("key", "count", "events", "last active seq"):
                table.add_column(column)
            for view in sorted(world.cells(REDUCER), key=lambda v: str(v.key)):
                table.add_row(
                    json.dumps(view.key),
                    str(view.state["count"]),
                    str(view.state["events"]),
                    str(view.entry.last_active),
                )
            console.print(table)
            console.print("dave's cell was deleted by Clear (state=null).")
            path = world.path
        report = verify_world(path)
        verdict = "identical outputs and state" if report.ok else "DIVERGED"
        console.print(f"replay from genesis: {report.steps} steps re-executed, {verdict}")
        console.print(f"try: world cells ls {path} {REDUCER}   ·   world journal tail {path}")
