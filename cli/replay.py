"""``world replay DIR --verify``: re-execute every step from genesis and compare."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from cli.common import console, emit_json, fail, handle_errors
from world.replay import verify_world

__all__ = ["replay"]


def replay(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    verify: Annotated[
        bool, typer.Option("--verify", help="Compare every re-executed step with the journal")
    ] = True,
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Replay the journal from genesis; report the first difference, if any."""
    if not verify:
        fail("only --verify is supported: replay never rewrites a world")
    with handle_errors(json_output):
        if json_output or not console.is_terminal:
            report = verify_world(directory)
        else:
            with Progress(console=console, transient=True) as progress:
                task = progress.add_task("replaying", total=None)
                report = verify_world(
                    directory,
                    lambda done, total: progress.update(task, completed=done, total=total),
                )
    divergence = report.divergence
    data = {
        "ok": report.ok,
        "records": report.records,
        "steps": report.steps,
        "divergence": None
        if divergence is None
        else {
            "seq": divergence.seq,
            "entity": divergence.entity,
            "expected": divergence.expected,
            "actual": divergence.actual,
        },
        "state_mismatches": report.state_mismatches,
    }
    if json_output:
        emit_json(data)
    elif divergence is not None:
        fail(
            f"replay diverged at seq {divergence.seq} ({divergence.entity}): expected {divergence.expected}, got {divergence.actual}"
        )
    elif report.state_mismatches:
        fail(f"replayed states differ for {', '.join(report.state_mismatches)}")
    else:
        console.print(
            f"replay ok: {report.records} records, {report.steps} steps re-executed, identical outputs and state"
        )
    if not report.ok:
        raise typer.Exit(1)
