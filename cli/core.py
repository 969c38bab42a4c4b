"""Commands for the core loop: init, send, step, run, state, info, snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from air.errors import UsageError
from cli.common import console, emit_json, fail, handle_errors
from world.world import World

__all__ = ["info", "init", "parse_json_arg", "run", "send", "snapshot", "state", "step"]

DirArg = Annotated[Path, typer.Argument(help="The world directory")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output")]


def parse_json_arg(text: str) -> Any:
    """JSON, or the text itself when it is not JSON (so ``order-1`` works for a text key)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def init(
    directory: DirArg,
    air: Annotated[Path, typer.Option("--air", help="AIR file or folder")],
) -> None:
    """Create a world in DIRECTORY from the AIR at --air."""
    with handle_errors():
        world = World.create(directory, air)
        manifest_hash = world.air.manifest_hash
        world.close()
    console.print(f"created world at {directory} (manifest {manifest_hash})")


def _read_jsonl(path: Path) -> list[Any]:
    values = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{number}: not JSON: {exc.msg}") from exc
    return values


def send(
    directory: DirArg,
    schema: Annotated[str, typer.Argument(help="Event schema, e.g. demo/CounterEvent@1")],
    value: Annotated[str | None, typer.Argument(help="The event value as JSON")] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", help="JSON Lines: one value per line, one durable batch"),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Send events into the world (durable when the command returns)."""
    if (value is None) == (file is None):
        fail("give exactly one of VALUE or --file")
    with handle_errors(json_output):
        values = _read_jsonl(file) if file is not None else [parse_json_arg(value or "")]
        with World.open(directory) as world:
            seqs = world.send_many([(schema, v) for v in values])
    if json_output:
        emit_json({"ok": True, "seqs": seqs})
    else:
        console.print(f"sent {len(seqs)} event(s), journal seq {seqs[0]}..{seqs[-1]}")


def step(
    directory: DirArg,
    ticks: Annotated[int, typer.Option("--ticks", min=1, help="How many ticks to run")] = 1,
    json_output: JsonOpt = False,
) -> None:
    """Run ticks: each runs one step of one ready cell or reducer."""
    with handle_errors(json_output), World.open(directory) as world:
        ran = world.step(ticks)
        pending = world.kernel.scheduler.pending
    if json_output:
        emit_json({"ok": True, "steps": ran, "pending": pending})
    else:
        console.print(f"ran {ran} step(s); {pending} deliveries pending")


def run(
    directory: DirArg,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Run until nothing is ready")
    ] = True,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Stop with an error past this many steps")
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Run the world until it is idle."""
    with handle_errors(json_output), World.open(directory) as world:
        ran = world.run_until_idle(max_steps)
    if json_output:
        emit_json({"ok": True, "steps": ran})
    else:
        console.print(f"ran {ran} step(s); the world is idle")


def state(
    directory: DirArg,
    reducer: Annotated[str, typer.Argument(help="Reducer (module) name")],
    key: Annotated[
        str | None, typer.Option("--key", help="The cell key, JSON read through the key schema")
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Show a reducer's state, or one cell's with --key."""
    with handle_errors(json_output), World.open(directory) as world:
        value = world.state(reducer, None if key is None else parse_json_arg(key))
    if json_output:
        emit_json({"ok": True, "state": value})
    elif value is None:
        fail("no such state (the cell does not exist or was deleted)")
    else:
        console.print_json(json.dumps(value))


def info(directory: DirArg, json_output: JsonOpt = False) -> None:
    """Summarise a world: manifest, journal, reducers and cells, dead letters."""
    with handle_errors(json_output), World.open(directory) as world:
        data = world.info()
    if json_output:
        emit_json(data)
        return
    table = Table(show_header=False, title=f"world {directory}")
    for key in (
        "manifest_hash",
        "journal_seq_next",
        "steps_total",
        "pending_deliveries",
        "dead_letters_total",
    ):
        table.add_row(key, str(data[key]))
    for name, r in data["reducers"].items():
        table.add_row(
            f"reducer {name}", f"{r.get('cells', '-')} cells" if r["keyed"] else "v1 (non-keyed)"
        )
    console.print(table)
    for letter in data["dead_letters"]:
        console.print(
            f"[yellow]dead letter[/yellow] seq {letter['seq']} {letter['reducer']} {letter['schema']}: {letter['code']}"
        )


def snapshot(directory: DirArg, json_output: JsonOpt = False) -> None:
    """Checkpoint cells, index and kernel state now."""
    with handle_errors(json_output), World.open(directory) as world:
        address = world.snapshot()
    if json_output:
        emit_json({"ok": True, "snapshot": address})
    else:
        console.print(f"snapshot {address}")
