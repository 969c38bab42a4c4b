"""``world journal ...``: verify (and, only when asked, repair) and tail the journal.

``tail`` writes to a terminal through the rich console, line by line, as it always did; to a
pipe or a file (or with ``--json``, or ``world --quiet``) it writes plain buffered text, ~10x
faster (400,000 records in a few seconds: ``tools/bench/bench_journal_tail.py``), each line
put together by ``world.JournalView`` from the remembered texts of the values a
journal repeats. ``-n N`` is the last N records (of those ``--subject`` and ``--from`` take),
``--until SEQ`` stops after SEQ (also with ``--follow``). ``-n`` and ``--from`` read from
where they start (the journal's segment index seeks there; ``-n`` with ``--subject`` finds its
start back from the end, ``world.ops.last_start``), and the eras before it come from the
checkpoint (``world._reading.applied_before``), so a tail of the last records of a long journal
reads those records, not the journal. A ``gov.applied`` that ``--subject`` does not show is
still taken in, so the records after it read in its era. Imported cells (``cell.imported``)
show their key and state through the reducer's schemas, as other values.

``tail`` of a served world (``world serve``) goes through its socket, a page of rendered
records per request (``journal_tail`` in ``world.serve._ops``): the same lines as a direct
read, and what the server ran just before is in them. A direct ``tail`` reads the journal
files alone, which a live writer only appends to: its checkpoints (which replace and collect
the cell store's files) never reach a tail, and ``--follow`` goes on from the seq after the
last record it printed, each record once.

``verify --repair`` prints what the repair did (``WorldRepair.describe``): each sealed segment
it restored from the archive (``--archive``, or the one the world remembers: ``world
archive``) or put back without one (a byte undone by its seal, records re-derived by
re-executing the journal: ``world._repair``), then the records it cut, counted from the files
before they are cut (``world.journal`` ``RepairReport``), so the count and the seqs it prints
are those that were cut, and the seq that was lost. A ``verify`` that finds the journal
damaged leaves the damage mark (``world._repair.DAMAGE_MARK``), under which a served world
takes no write; ``--repair`` removes it. ``verify`` keeps a cache of the sealed segments it verified (``world.journal._verified``),
so a routine verify reads the new segments only; ``--full`` reads them all."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from air.errors import InvalidArgument
from cli.common import (
    EXIT_INTERRUPTED,
    answers,
    console,
    emit_json,
    fail,
    handle_errors,
    stdout_is_terminal,
)
from cli.core import paging_handle

if TYPE_CHECKING:
    from world.ops import Handle

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
            help="Put back a damaged sealed segment: from the archive when it holds a good "
            "copy, else by its seal (a flipped byte undone, records the kernel wrote "
            "re-derived); cut only at a record none of these gives back (the rest kept in a "
            "backup) and discard a checkpoint that reaches past it",
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
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Check every journal record, every receipt's signature and the checkpoint; with --repair,
    make the world open again.

    A sealed segment verified before and unchanged since (same seal digest, size, mtime, ctime
    and inode: the cache in cache/verified.json) is not read again; --full reads them all.
    Exit 0 when the world opens as it is (a torn tail from a crash is reported and dropped on
    open) and every receipt's signature holds, or after a repair; exit 1 when it needs
    --repair, or a receipt's signature fails (the journal was edited), or the world's key file
    is missing or damaged (signatures cannot be checked). Writes nothing without --repair but
    its cache and, when the journal is damaged, the mark that stops a served world's writes
    until --repair."""
    from world import check_world, remembered_archive, repair_world

    with handle_errors(json_output):
        if not repair:
            check = check_world(directory, cache=True, full=full)
            if json_output:
                emit_json(check.as_json())
            elif check.ok:
                console.print(check.describe(), markup=False, highlight=False, soft_wrap=True)
            elif check.needs_repair and (check.journal.records or len(check.journal.segments) > 1):
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
@answers
def tail(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    subject: Annotated[
        str | None, typer.Option("--subject", help="Subject pattern: * one segment, ** the rest")
    ] = None,
    from_seq: Annotated[int, typer.Option("--from", help="Start at this sequence number")] = 0,
    until_seq: Annotated[
        int | None,
        typer.Option("--until", help="Stop after this sequence number (also with --follow)"),
    ] = None,
    last: Annotated[
        int | None,
        typer.Option(
            "-n", "--last", help="Only the last N records (of those --subject and --from take)"
        ),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", help="Keep reading as records arrive")
    ] = False,
    raw: Annotated[
        bool, typer.Option("--raw", help="Show values and keys as canonical CBOR hex")
    ] = False,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON object per line, written plainly (as to a pipe); errors as a JSON "
            "object",
        ),
    ] = False,
) -> None:
    """Print journal records as JSON lines, values and keys read through their schemas.

    Read-only: works while another process runs the world. ``--from`` is the global sequence
    cursor: a consumer that stopped after seq N resumes exactly with ``--from N+1``. Written
    to a pipe or a file (or with --json), each line is written as it is, buffered."""
    from kernel.journal import check_read_args
    from kernel.subjects import SubjectPattern
    from world import JournalView, World, applied_before, load_world_air
    from world.journal import FileJournal
    from world.ops import last_start

    with (
        handle_errors(json_output),
        _Lines(plain=json_output or console.quiet or not stdout_is_terminal()) as out,
    ):
        if last is not None and last < 0:
            raise InvalidArgument("-n", last, "a count, 0 or more")
        if until_seq is not None and until_seq < 0:
            raise InvalidArgument("--until", until_seq, "a journal position, 0 or more")
        stop = SEQ_MAX if until_seq is None else min(until_seq + 1, SEQ_MAX)
        client = paging_handle(directory)
        if client is not None:  # the same checks first, so errors read the same
            check_read_args(from_seq, subject or None)
            with client:
                _tail_served(
                    client, out, subject or None, min(from_seq, SEQ_MAX), stop, last, follow, raw
                )
            return
        World.check_directory(directory)
        pattern = SubjectPattern.compile(subject) if subject else None
        view = JournalView(load_world_air(directory), stored_air(directory))
        reader = FileJournal(directory / "journal", readonly=True)
        seq = from_seq
        try:
            if last is not None:
                seq = last_start(reader, subject or None, from_seq, stop, last)
            if seq:  # the eras applied before the first record shown, not read from seq 0
                view.learn(applied_before(directory, reader, seq))
            render, line = view.render_line, out.text
            with _gc_paused():
                while True:
                    for record in reader.read(seq):
                        if record.seq >= stop:
                            return
                        seq = record.seq + 1
                        if pattern is None or pattern.matches(record.subject):
                            line(render(record, raw=raw))
                        elif record.kind == "gov.applied":  # not shown, but later ones are
                            view.learn((record,))  # read in its era (as a served tail does)
                    if not follow or seq >= stop:
                        return
                    out.flush()
                    time.sleep(FOLLOW_POLL_S)
                    reader.refresh()
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None
        finally:
            reader.close()


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Rendering allocates many small objects that all live one line: the cyclic collector
    finds nothing in them, and running it every few hundred records costs a fifth of a tail."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Lines:
    """Where ``tail`` writes its lines: to a terminal through the console, as before; to a pipe
    or a file (or with ``--json``) as plain buffered text, flushed at the end and before each
    ``--follow`` wait (so a consumer sees what is there), which is ~10x faster."""

    def __init__(self, *, plain: bool) -> None:
        self.plain = plain
        self._parts: list[str] = []
        self._size = 0

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_exc: object) -> None:
        try:
            self.flush()
        except BrokenPipeError:
            exc_type = BrokenPipeError
        if exc_type is not None and issubclass(exc_type, BrokenPipeError):
            # The reader went away (`| head`): quietly, as before, and without Python's own
            # complaint when it flushes stdout at exit.
            with suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(1)

    def line(self, shown: dict[str, Any]) -> None:
        self.text(_dumps(shown))

    def text(self, text: str) -> None:
        if not self.plain:
            console.print(text, soft_wrap=True, highlight=False, markup=False)
            return
        self._parts.append(text)
        self._size += len(text)
        if self._size >= _FLUSH_CHARS:
            self.flush()

    def flush(self) -> None:
        if self._parts:
            self._parts.append("")
            data, self._parts, self._size = "\n".join(self._parts), [], 0
            sys.stdout.write(data)
        sys.stdout.flush()


_FLUSH_CHARS: Final = 1 << 18
"""Plain lines are written in chunks of about this many characters."""
_dumps = json.JSONEncoder().encode  # json.dumps(shown), without its per-call checks


def stored_air(directory: Path) -> Any:
    """The loader of an era's AIR from the world's CAS (read-only)."""
    from world import stored_air_reader

    return stored_air_reader(directory)


def _tail_served(
    client: Handle,
    out: _Lines,
    subject: str | None,
    from_seq: int,
    stop: int,
    last: int | None,
    follow: bool,
    raw: bool,
) -> None:
    """``journal tail`` through a served world: page after page, each record as the server
    rendered it (the same rendering as above); ``--follow`` asks again every poll. ``-n``
    without a pattern asks where the journal ends first; with one, the server finds where the
    last N begin (``journal.tail``'s ``last``) and the pass starts there; with ``--until`` too,
    it keeps the last N of a pass below it; ``--until`` ends a pass early."""
    seq = from_seq
    try:
        if last is not None and subject is None:
            seq = max(seq, min(_served_end(client, raw), stop) - last)
        elif last is not None and stop == SEQ_MAX:  # the server seeks them
            first = _ServedPass(client, seq, stop, subject, raw, last)
            for shown in first:
                out.line(shown)
            seq = first.next
            if not follow:
                return
            out.flush()
            time.sleep(FOLLOW_POLL_S)
        elif last is not None:  # the last N of one pass, then on from its end
            first = _ServedPass(client, seq, stop, subject, raw)
            for shown in deque(first, maxlen=last):
                out.line(shown)
            seq = first.next
            if not follow or seq >= stop:
                return
            out.flush()
            time.sleep(FOLLOW_POLL_S)
        while True:
            pass_ = _ServedPass(client, seq, stop, subject, raw)
            for shown in pass_:
                out.line(shown)
            seq = pass_.next
            if not follow or seq >= stop:
                return
            out.flush()
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _served_end(client: Handle, raw: bool) -> int:
    """Where the served journal ends now (after the server ran what was ready)."""
    page = client.call("journal.tail", {"from_seq": SEQ_MAX, "raw": raw})
    return int(page.end)  # type: ignore[attr-defined]


class _ServedPass:
    """One pass over a served journal from ``from_seq``, records below ``stop`` (``--until``);
    ``next`` is where the next pass goes on."""

    def __init__(
        self,
        client: Handle,
        from_seq: int,
        stop: int,
        subject: str | None,
        raw: bool,
        last: int | None = None,
    ) -> None:
        self.client, self.stop, self.subject, self.raw = client, stop, subject, raw
        self.next, self.last = from_seq, last

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from world.ops import JournalTail

        args = JournalTail(from_seq=self.next, subject=self.subject, raw=self.raw, last=self.last)
        for page in self.client.pages("journal.tail", args):
            for shown in page.records:  # type: ignore[attr-defined]
                if shown["seq"] >= self.stop:
                    self.next = self.stop
                    return
                yield shown
            self.next = page.next  # type: ignore[attr-defined]
            if self.next >= self.stop:
                self.next = self.stop
                return
