"""``world archive DIR --to PATH``: copy what restoring the world needs (its sealed journal
segments and their seals, its AIR, the CAS objects the AIR needs, its receipt key) into an
archive folder, each copy checked against its seal's digest or its address
(``world._archive`` gives the layout and the rules). And the background work ``run`` and
``serve`` do with ``--archive PATH`` (archive the segments sealed since, every
``ARCHIVE_POLL_S`` and once at the end) and ``--verify-every SECONDS`` (``journal verify``
with its cache, reporting damage on stderr once per finding)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated, Final

import typer

from cli.common import console, emit_json, err_console, fail, handle_errors

__all__ = [
    "ARCHIVE_POLL_S",
    "ArchiveOpt",
    "VerifyEveryOpt",
    "archive",
    "archive_work",
    "background",
    "verify_work",
]

ARCHIVE_POLL_S: Final = 1.0
"""With ``--archive``, a running world archives what was sealed since this often."""

ArchiveOpt = Annotated[
    Path | None,
    typer.Option(
        "--archive",
        help="Archive each sealed journal segment into this folder as the world runs (and "
        "remember it for `journal verify --repair`)",
    ),
]
VerifyEveryOpt = Annotated[
    float | None,
    typer.Option(
        "--verify-every",
        help="Verify the journal in the background every SECONDS (new segments only), "
        "reporting damage on stderr",
        min=0.001,
    ),
]


def archive(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    to: Annotated[Path, typer.Option("--to", help="The archive folder (made if missing)")],
    full: Annotated[
        bool, typer.Option("--full", help="Read every copy already archived again")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Copy the world's sealed journal segments, their seals, its AIR and key into an archive,
    verified by digest; a second run copies only what is new and replaces a bad copy.

    Exit 1 if a segment of the world does not match its seal (it is not archived: run
    `world journal verify DIR --repair`), or the archive is another world's."""
    from world import archive_world

    with handle_errors(json_output):
        report = archive_world(directory, to)
    if json_output:
        emit_json(report.as_json())
    else:
        console.print(report.describe(), markup=False, highlight=False, soft_wrap=True)
    if not report.ok:
        if not json_output:
            fail(f"damaged files were not archived; run `world journal verify {directory}`")
        raise typer.Exit(1)


def _say(text: str) -> None:
    from rich.markup import escape

    err_console.print(f"[yellow]notice:[/yellow] {escape(text)}", soft_wrap=True)


def archive_work(directory: Path, target: Path, say: Callable[[str], None]) -> Callable[[], None]:
    """One background archive run: report what was copied and what is damaged."""
    from world import archive_world

    def work() -> None:
        report = archive_world(directory, target)
        if report.copied or report.replaced:
            say(f"archived {len(report.copied) + len(report.replaced)} file(s) to {target}")
        for name in report.damaged:
            say(
                f"archive: {name} is damaged in the world, not archived; run `world journal verify`"
            )

    return work


def verify_work(directory: Path, say: Callable[[str], None]) -> Callable[[], None]:
    """One background verify (with its cache: new segments only); each finding said once.

    Beside the live writer, a torn tail is its commit in flight and a checkpoint past the
    records the verify read is one committed since: neither is damage, so only corruption,
    receipts, the key and the world's objects are reported."""
    from world import check_world

    said: set[str] = set()

    def work() -> None:
        check = check_world(directory, cache=True)
        found = [check.journal.describe()] if check.journal.problem is not None else []
        if check.bad_receipt is not None:
            found.append(f"{check.bad_receipt.describe()}, the journal was changed")
        if check.receipt_key_problem is not None:
            found.append(check.receipt_key_problem.describe())
        if check.air_problem is not None:
            found.append(f"the world's AIR cannot be read: {check.air_problem}")
        found += [problem.describe() for problem in check.object_problems]
        for finding in found:
            if finding not in said:
                said.add(finding)
                say(f"verify: {finding}; see `world journal verify {directory}`")

    return work


@contextmanager
def background(
    directory: Path, archive_to: Path | None, verify_every: float | None
) -> Iterator[None]:
    """Run the archive and the verify of ``--archive``/``--verify-every`` on their threads
    for the duration of the block (the archive once more at its end)."""
    from world import Periodic

    failures: set[str] = set()

    def report(exc: BaseException) -> None:  # once each: a refused archive fails every poll
        if str(exc) not in failures:
            failures.add(str(exc))
            _say(f"background work failed: {exc}")

    with ExitStack() as stack:
        if archive_to is not None:
            work = archive_work(directory, archive_to, _say)
            stack.enter_context(Periodic(ARCHIVE_POLL_S, work, report, final=True))
        if verify_every is not None:
            work = verify_work(directory, _say)
            stack.enter_context(Periodic(verify_every, work, report))
        yield
