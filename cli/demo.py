"""``world demo``: a short guided tour on the bundled examples, in a temporary folder (or
``--keep DIR``). Each stage prints a heading and the command it runs, then runs that command's
own code, so what the tour shows is what the command prints:

create the keyed counter world, send events, run, list the cells, show one cell and its
history, export it, migrate the v1 counter world (``counter_v1``, one map in its state) to
cells, verify the migrated world by replay, and where to look next.

World, kernel and AIR modules are imported inside the functions, so ``world --help`` does not
pay for them."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from cli.common import console, fail, handle_errors

__all__ = ["KEY_ORDER", "STAGES", "demo", "example_air"]

EVENT = "demo/CounterEvent@1"
REDUCER = "demo/Counter@1"

STAGES = (
    "create",
    "send",
    "run",
    "list cells",
    "show a cell",
    "a cell's history",
    "export",
    "migrate v1 to cells",
    "replay --verify",
    "where next",
)
"""The tour's stages, in order: each prints ``<n>/<total> <stage>`` as its heading."""


KEY_ORDER = "in key order (by each key's canonical CBOR: a shorter key comes first)"
"""How ``world cells ls`` orders a page, as the tour says it over the list: "sorted by key"
alone read wrong over bob before alice."""


def example_air(name: str) -> Path:
    """A bundled example world's AIR folder: in the installed package, or in the checkout of an
    editable install (``world.sdk.bundle_root``)."""
    from world.sdk import example_path

    return example_path(name)


def _events() -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    for i in range(12):
        key = ["alice", "bob", "carol"][i % 3]
        events.append({"key": key, "op": {"$tag": "Add", "$value": i + 1}})
    events.append({"key": "dave", "op": {"$tag": "Add", "$value": 5}})
    events.append({"key": "dave", "op": "Clear"})
    return events


def _stage(name: str, command: str = "", note: str = "") -> None:
    n = STAGES.index(name) + 1
    console.print()
    console.print(f"[bold cyan]{n}/{len(STAGES)} {name}[/bold cyan]", highlight=False)
    if note:
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    if command:
        _command(command)


def _command(command: str) -> None:
    console.print(f"$ {command}", style="dim", markup=False, highlight=False, soft_wrap=True)


def _folder(keep: Path | None) -> Path:
    if keep is None:
        return Path(tempfile.mkdtemp(prefix="world-demo-"))
    if keep.exists() and (not keep.is_dir() or any(keep.iterdir())):
        fail(f"--keep {keep}: must be absent or an empty folder")
    keep.mkdir(parents=True, exist_ok=True)
    return keep


def demo(
    keep: Annotated[
        Path | None,
        typer.Option("--keep", help="Make the tour's worlds in this folder (absent or empty)"),
    ] = None,
    ladder: Annotated[
        bool,
        typer.Option(
            "--ladder", help="Run AgentOS's example ladder instead: every rung to its end"
        ),
    ] = False,
) -> None:
    """A guided tour: create, send, run, list and show cells, a cell's history, export,
    migrate a v1 world to cells, replay, and where to look next. With --ladder: each rung of
    AgentOS's example ladder (the agentos-* examples) run to its README's end and replayed."""
    if ladder:
        _ladder(keep)
        return
    from cli import cells, core, history, moves, replay

    with handle_errors():
        folder = _folder(keep)
        world_dir, v1_dir = folder / "counter", folder / "counter_v1"
        events = folder / "events.jsonl"
        events.write_text("".join(json.dumps(e) + "\n" for e in _events()))
        more = folder / "more.jsonl"  # after the migration: an old key and a new one
        more.write_text(
            "".join(
                json.dumps({"key": k, "op": {"$tag": "Add", "$value": 100}}) + "\n"
                for k in ("alice", "erin")
            )
        )
        exported = folder / "alice.cell.cbor"
    console.print(f"[bold]world demo[/bold]: the tour's files are in {folder}", highlight=False)

    _stage(
        "create",
        f"world init {world_dir} --example counter",
        "A world of the keyed reducer demo/Counter@1: one cell (a counter) per key.",
    )
    with handle_errors():
        core.init(world_dir, example_air("counter"))

    _stage(
        "send",
        f"world send {world_dir} {EVENT} --file {events}",
        "Adds for alice, bob and carol; dave gets Add 5 then Clear (which deletes his cell).",
    )
    core.send(world_dir, EVENT, None, file=events)

    _stage("run", f"world run {world_dir} --until-idle")
    with handle_errors(), core.opened(world_dir) as world:
        steps = world.run_until_idle()  # the counter asks for no effects: no adapters needed
    console.print(f"ran {steps} steps until idle", highlight=False)

    _stage("list cells", f"world cells ls {world_dir} {REDUCER}")
    console.print(f"cells of {REDUCER}, {KEY_ORDER}:", highlight=False)
    cells.ls(world_dir, REDUCER)
    console.print("dave's cell was deleted by Clear (state=null).", highlight=False)

    _stage("show a cell", f"world cells show {world_dir} {REDUCER} alice")
    history.show(world_dir, REDUCER, "alice")

    _stage(
        "a cell's history",
        f"world cells tail {world_dir} {REDUCER} alice",
        "Each input and the step it caused, in journal order.",
    )
    history.tail(world_dir, REDUCER, "alice")

    _stage("export", f"world cells export {world_dir} {REDUCER} alice -o {exported}")
    moves.export(world_dir, REDUCER, exported, "alice")

    _stage(
        "migrate v1 to cells",
        note="counter_v1 keeps every counter in one map in its state. The same events go in; "
        "then migration makes one cell per map entry (same reducer binary, same states).",
    )
    _command(f"world init {v1_dir} --example counter_v1")
    with handle_errors():
        core.init(v1_dir, example_air("counter_v1"))
    _command(f"world send {v1_dir} {EVENT} --file {events}  &&  world run {v1_dir} --until-idle")
    core.send(v1_dir, EVENT, None, file=events)
    core.run(v1_dir, until_idle=True)
    _command(f"world state {v1_dir} {REDUCER}")
    core.state(v1_dir, REDUCER)
    _command(f"world migrate cells {v1_dir} {REDUCER} --key-field key")
    moves.migrate(v1_dir, REDUCER, "key")
    _command(f"world send {v1_dir} {EVENT} --file {more}  &&  world run {v1_dir} --until-idle")
    core.send(v1_dir, EVENT, None, file=more)
    core.run(v1_dir, until_idle=True)
    _command(f"world cells ls {v1_dir} {REDUCER}")
    cells.ls(v1_dir, REDUCER)

    _stage(
        "replay --verify",
        f"world replay {v1_dir} --verify",
        "Re-executes every step of the migrated world from genesis and compares.",
    )
    replay.replay(v1_dir, verify=True)

    _stage("where next")
    for line in (
        f"world info {world_dir}   ·   world journal tail {world_dir}",
        f"world cells show {world_dir} {REDUCER} alice --at 5   (the cell in the past)",
        f"world fork {world_dir} --at 5 {folder / 'fork'}   ·   world serve {world_dir}",
        'README.md: "Running a world", "Plans and effects", "JSON output" (the --json shapes)',
    ):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _ladder(keep: Path | None) -> None:
    """Every rung of ``world.ladder`` in its own folder: its title, what its driver says, and
    replay from genesis. Exits 1 naming the first rung that does not reach its end."""
    from world.history import verify_world
    from world.ladder import RUNGS, RungFailed, drive, rung

    with handle_errors():
        folder = _folder(keep)
    console.print(f"[bold]world demo --ladder[/bold]: the worlds are in {folder}", highlight=False)

    def say(line: str) -> None:
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)

    for n, name in enumerate(RUNGS, 1):
        found = rung(name)
        console.print()
        console.print(f"[bold cyan]{n}/{len(RUNGS)} {found.example}[/bold cyan]", highlight=False)
        console.print(found.title, markup=False, highlight=False, soft_wrap=True)
        try:
            with handle_errors():
                path = drive(name, folder / found.example, say)
        except RungFailed as exc:
            fail(f"{found.example}: {exc}")
        report = verify_world(path)
        if not report.ok:
            fail(f"{found.example}: replay of {path} differs: {report.state_mismatches}")
        say(f"replay ok: {report.records} records, {report.steps} steps re-executed")
    console.print()
    console.print(f"{len(RUNGS)} rungs ran to their ends and replayed", highlight=False)
