"""``world journal ...``: verify (and, only when asked, repair) and tail the journal."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from air import cbor
from cli.common import console, emit_json, fail, handle_errors
from kernel.journal import JournalRecord, SubjectPattern
from world import journal as file_journal

__all__ = ["app"]

app = typer.Typer(help="Inspect and check the journal.", no_args_is_help=True)


@app.command("verify")
def verify(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    repair: Annotated[
        bool, typer.Option("--repair", help="Cut after the last good record, keeping a backup")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Check every journal record; report the first bad one with segment and offset."""
    with handle_errors(json_output):
        report = file_journal.verify(directory / "journal")
        fixed = None
        if repair and (report.problem or report.torn_tail):
            backup = directory / "journal-backup" / f"seq-{report.records}"
            backup.mkdir(parents=True, exist_ok=False)
            fixed = file_journal.repair(directory / "journal", backup)
    problem = report.problem
    data: dict[str, Any] = {
        "ok": report.ok,
        "records": report.records,
        "seq_last_good": report.seq_last_good,
        "segments": list(report.segments),
        "problem": None
        if problem is None
        else {
            "segment": problem.segment,
            "offset": problem.offset,
            "seq": problem.seq,
            "reason": problem.reason,
        },
        "torn_tail": None
        if report.torn_tail is None
        else {"segment": report.torn_tail.segment, "offset": report.torn_tail.offset},
        "repaired": None
        if fixed is None
        else {"backup_files": list(fixed.backup_files), "seq_next": fixed.seq_next},
    }
    if json_output:
        emit_json(data)
    elif problem is not None and fixed is None:
        console.print(f"{report.records} good record(s) before the problem")
        fail(
            f"journal corrupt in {problem.segment} at offset {problem.offset} (seq {problem.seq}): {problem.reason}; "
            "run `world journal verify --repair` to cut the journal there (a backup is kept)"
        )
    else:
        console.print(
            f"journal ok: {report.records} record(s) in {len(report.segments)} segment(s)"
        )
        if fixed is not None:
            console.print(
                f"repaired: cut to {fixed.seq_next} record(s); backup in {', '.join(fixed.backup_files)}"
            )
    if problem is not None and fixed is None:
        raise typer.Exit(1)


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
        pattern = SubjectPattern.compile(subject) if subject else None
        seq = from_seq
        while True:
            reader = file_journal.FileJournal(directory / "journal", readonly=True)
            for record in reader.read(seq):
                seq = record.seq + 1
                if pattern is None or pattern.matches(record.subject):
                    console.print(
                        json.dumps(_render(record)), soft_wrap=True, highlight=False, markup=False
                    )
            reader.close()
            if not follow:
                return
            time.sleep(0.2)
