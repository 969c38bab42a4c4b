"""``world journal ...``: verify (and, only when asked, repair) and tail the journal.

``tail`` of a served world (``world serve``) goes through its socket, a page of rendered
records per request (``journal_tail`` in ``world.serve._ops``): the same lines as a direct
read, and what the server ran just before is in them. A direct ``tail`` reads the journal
files alone, which a live writer only appends to: its checkpoints (which replace and collect
the cell store's files) never reach a tail, and ``--follow`` goes on from the seq after the
last record it printed, each record once.

``verify --repair`` prints what the repair did (``WorldRepair.describe``): each sealed segment
it restored from the archive (``--archive``, or the one the world remembers: ``world
archive``), then the records it cut, counted from the files before they are cut
(``world.journal`` ``RepairReport``), so the count and the seqs it prints are those that were
cut. ``verify`` keeps a cache of the sealed segments it verified (``world.journal._verified``),
so a routine verify reads the new segments only; ``--full`` reads them all."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from cli.common import EXIT_INTERRUPTED, console, emit_json, fail, handle_errors
from cli.core import served_client

if TYPE_CHECKING:
    from world.serve import Client

# The kernel and world modules are imported where used: `world --help` need not load them.

__all__ = ["FOLLOW_POLL_S", "SEQ_MAX", "app"]

FOLLOW_POLL_S: Final = 0.2
"""``--follow`` looks for new records this often."""
SEQ_MAX: Final = 2**63 - 1
"""A ``--from`` past any journal's end, as far as the control protocol (msgpack) carries."""

app = typer.Typer(help="Inspect and check the journal.", no_args_is_help=True)


@app.command("verify")
def verify(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Restore a damaged sealed segment from the archive when it holds a good copy; "
            "else cut after the last good record (kept in a backup) and discard a checkpoint "
            "that reaches past it",
        ),
    ] = False,
    archive: Annotated[
        Path | None,
        typer.Option(
            "--archive",
            help="The archive --repair restores from (default: the one `world archive` or "
            "`run --archive` last wrote)",
        ),
    ] = None,
    full: Annotated[
        bool,
        typer.Option("--full", help="Read every segment, also those verified before"),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Check every journal record, every receipt's signature and the checkpoint; with --repair,
    make the world open again.

    A sealed segment verified before and unchanged since (same seal digest, size, mtime, ctime
    and inode: the cache in cache/verified.json) is not read again; --full reads them all.
    Exit 0 when the world opens as it is (a torn tail from a crash is reported and dropped on
    open) and every receipt's signature holds, or after a repair; exit 1 when it needs
    --repair, or a receipt's signature fails (the journal was edited), or the world's key file
    is missing or damaged (signatures cannot be checked). Writes nothing without --repair but
    its cache."""
    from world import check_world, remembered_archive, repair_world

    with handle_errors(json_output):
        if not repair:
            check = check_world(directory, cache=True, full=full)
            if json_output:
                emit_json(check.as_json())
            elif check.ok:
                console.print(check.describe(), markup=False, highlight=False, soft_wrap=True)
            elif check.needs_repair and check.journal.records:
                fail(f"{check.describe()}; run `world journal verify {directory} --repair`")
            else:  # a receipt's signature, the key, no genesis: cutting cannot fix that
                fail(check.describe())
            if not check.ok:
                raise typer.Exit(1)
            return
        backup = directory / "journal-backup" / _stamp(directory)
        fixed = repair_world(directory, backup, archive or remembered_archive(directory))
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
    from kernel.journal import check_read_args
    from kernel.subjects import SubjectPattern
    from world import RecordView, World, load_world_air
    from world.journal import FileJournal

    with handle_errors():
        client = served_client(directory)
        if client is not None:  # the same checks first, so errors read the same
            check_read_args(from_seq, subject or None)
            with client:
                _tail_served(client, subject or None, min(from_seq, SEQ_MAX), follow, raw)
            return
        World.check_directory(directory)
        pattern = SubjectPattern.compile(subject) if subject else None
        view = RecordView(load_world_air(directory), stored_air(directory))
        reader = FileJournal(directory / "journal", readonly=True)
        seq = from_seq
        if from_seq:  # the eras applied before the first record shown
            view.learn(r for r in reader.read(0, "/world/gov/applied") if r.seq < from_seq)
        try:
            while True:
                for record in reader.read(seq):
                    seq = record.seq + 1
                    if pattern is None or pattern.matches(record.subject):
                        _print_line(view.render(record, raw=raw))
                if not follow:
                    return
                time.sleep(FOLLOW_POLL_S)
                reader.refresh()
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None
        finally:
            reader.close()


def stored_air(directory: Path) -> Any:
    """The loader of an era's AIR from the world's CAS (read-only)."""
    from world import stored_air_reader

    return stored_air_reader(directory)


def _tail_served(
    client: Client, subject: str | None, from_seq: int, follow: bool, raw: bool
) -> None:
    """``journal tail`` through a served world: page after page, each record as the server
    rendered it (the same rendering as above); ``--follow`` asks again every poll."""
    seq = from_seq
    try:
        while True:
            for page in client.pages("journal_tail", from_seq=seq, subject=subject, raw=raw):
                for shown in page["records"]:
                    _print_line(shown)
                seq = page["next"]
            if not follow:
                return
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _print_line(shown: dict[str, Any]) -> None:
    console.print(json.dumps(shown), soft_wrap=True, highlight=False, markup=False)
