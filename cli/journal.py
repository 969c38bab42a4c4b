"""``world journal ...``: verify (and, only when asked, repair) and tail the journal."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from cli.common import EXIT_INTERRUPTED, console, emit_json, fail, handle_errors

# The kernel and world modules are imported where used: `world --help` need not load them.

__all__ = ["app"]

app = typer.Typer(help="Inspect and check the journal.", no_args_is_help=True)


@app.command("verify")
def verify(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Cut after the last good record (kept in a backup) and discard a checkpoint "
            "that reaches past it",
        ),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Check every journal record and the checkpoint; with --repair, make the world open again.

    Exit 0 when the world opens as it is (a torn tail from a crash is reported and dropped on
    open), or after a repair; exit 1 when it needs --repair."""
    from world.repair import check_world, repair_world

    with handle_errors(json_output):
        if not repair:
            check = check_world(directory)
            if json_output:
                emit_json(check.as_json())
            elif check.ok:
                console.print(check.describe(), markup=False, highlight=False, soft_wrap=True)
            else:
                fail(f"{check.describe()}; run `world journal verify {directory} --repair`")
            if not check.ok:
                raise typer.Exit(1)
            return
        backup = directory / "journal-backup" / _stamp(directory)
        fixed = repair_world(directory, backup)
    if json_output:
        emit_json({"ok": True, **fixed.as_json()})
        return
    if not fixed.before.clean:
        console.print(f"found: {fixed.before.describe()}", markup=False, soft_wrap=True)
    console.print(fixed.describe(), markup=False, highlight=False, soft_wrap=True)


def _stamp(directory: Path) -> str:
    """A backup folder name that is new: ``repair-<n>``, n one past the highest there."""
    root = directory / "journal-backup"
    taken = [p.name for p in root.iterdir()] if root.is_dir() else []
    numbers = [int(n.split("-")[1]) for n in taken if n.startswith("repair-") and n[7:].isdigit()]
    return f"repair-{max(numbers, default=0) + 1}"


@app.command("tail")
def tail(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    subject: Annotated[
        str | None, typer.Option("--subject", help="Subject pattern: * one segment, ** the rest")
    ] = None,
    from_seq: Annotated[int, typer.Option("--from", help="Start at this sequence number")] = 0,
    follow: Annotated[
        bool, typer.Option("--follow", help="Keep reading as records arrive")
    ] = False,
    raw: Annotated[
        bool, typer.Option("--raw", help="Show values and keys as canonical CBOR hex")
    ] = False,
) -> None:
    """Print journal records as JSON lines, values and keys read through their schemas.

    Read-only: works while another process runs the world. ``--from`` is the global sequence
    cursor: a consumer that stopped after seq N resumes exactly with ``--from N+1``."""
    from kernel.journal import SubjectPattern
    from world import journal as file_journal
    from world._worlddir import load_world_air
    from world.errors import NotAWorld
    from world.views import RecordView

    with handle_errors():
        if not (directory / "journal").is_dir():
            raise NotAWorld(str(directory))
        pattern = SubjectPattern.compile(subject) if subject else None
        view = RecordView(load_world_air(directory))
        reader = file_journal.FileJournal(directory / "journal", readonly=True)
        seq = from_seq
        try:
            while True:
                for record in reader.read(seq):
                    seq = record.seq + 1
                    if pattern is None or pattern.matches(record.subject):
                        console.print(
                            json.dumps(view.render(record, raw=raw)),
                            soft_wrap=True,
                            highlight=False,
                            markup=False,
                        )
                if not follow:
                    return
                time.sleep(0.2)
                reader.refresh()
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None
        finally:
            reader.close()
