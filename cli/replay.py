"""``world replay DIR --verify``: re-execute every step from genesis and compare; check every
journaled receipt's signature and that it answers a queued intent. Writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli._progress import bar
from cli.common import console, emit_json, fail, handle_errors

__all__ = ["replay"]


def replay(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    verify: Annotated[
        bool, typer.Option("--verify", help="Compare every re-executed step with the journal")
    ] = True,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Replay the journal from genesis; report the first difference or bad receipt, if any.

    Exit 1 when a re-executed record differs from the journal's, a receipt fails its signature
    or answers no queued intent, the world's key file is missing or damaged, or the replayed
    state differs from the stored one."""
    if not verify:
        fail("only --verify is supported: replay never rewrites a world")
    from world.history import verify_world  # here, not above: `world --help` stays quick

    with handle_errors(json_output), bar("replaying", json_output=json_output) as progress:
        report = verify_world(directory, progress)
    divergence, bad, key_problem = report.divergence, report.bad_receipt, report.receipt_key_problem
    data = {
        "ok": report.ok,
        "records": report.records,
        "steps": report.steps,
        "divergence": None
        if divergence is None
        else {
            "seq": divergence.seq,
            "entity": divergence.entity,
            "field": divergence.field,
            "expected": divergence.expected,
            "actual": divergence.actual,
        },
        "state_mismatches": report.state_mismatches,
        "mismatches": [m.as_json() for m in report.mismatches],
        "damaged": report.damaged,
        "receipts_checked": report.receipts_checked,
        "bad_receipt": None if bad is None else bad.as_json(),
        "receipt_key_problem": None if key_problem is None else key_problem.as_json(),
    }
    if json_output:
        emit_json(data)
    elif divergence is not None:
        fail(str(divergence))
    elif bad is not None:
        fail(f"{bad.describe()}; replay stopped there")
    elif key_problem is not None:
        fail(key_problem.describe())
    elif report.damaged:
        fail(f"damaged or missing objects: {'; '.join(report.damaged)}")
    elif report.mismatches:
        first = report.mismatches[0]
        more = f" (and {len(report.mismatches) - 1} more)" if len(report.mismatches) > 1 else ""
        fail(
            f"replayed world differs from the stored one: {first.field} expected "
            f"{first.expected}, found {first.actual}{more}"
        )
    else:
        signed = report.receipts_checked
        held = f", {signed} receipt signatures hold" if signed else ""
        console.print(
            f"replay ok: {report.records} records, {report.steps} steps re-executed{held}, "
            "identical outputs and state"
        )
    if not report.ok:
        raise typer.Exit(1)
