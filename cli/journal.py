"""``world journal ...``: verify (and, only when asked, repair) and tail the journal."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from air import cbor
from cli.common import EXIT_INTERRUPTED, console, emit_json, fail, handle_errors
from kernel.journal import JournalRecord, SubjectPattern
from world import journal as file_journal
from world.errors import NotAWorld
from world.repair import check_world, repair_world

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


def _render(record: JournalRecord) -> dict[str, Any]:
    return {
        "seq": record.seq,
        "subject": record.subject,
        "kind": record.kind,
        "body": _jsonable(record.body),
    }


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return cbor.raw_to_hash(obj) if len(obj) == 32 else obj.hex()
    if isinstance(obj, list):
        return [_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, cbor.Tag):
        return obj.value.hex()
    return obj


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
) -> None:
    """Print journal records as JSON lines (read-only: works while another process runs the world)."""
    with handle_errors():
        if not (directory / "journal").is_dir():
            raise NotAWorld(str(directory))
        pattern = SubjectPattern.compile(subject) if subject else None
        reader = file_journal.FileJournal(directory / "journal", readonly=True)
        seq = from_seq
        try:
            while True:
                for record in reader.read(seq):
                    seq = record.seq + 1
                    if pattern is None or pattern.matches(record.subject):
                        console.print(
                            json.dumps(_render(record)),
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
