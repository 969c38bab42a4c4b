"""A cell's past and a world's alternative futures: ``world cells show --at``, ``world cells
tail`` and ``world fork``.

Importing this module registers ``show`` (replacing the one in ``cli.cells``: this one is the
same command plus ``--at SEQ`` and ``--raw``) and ``tail`` on the ``cli.cells.app`` group;
``fork`` is a top-level command the main app registers.

JSON shapes (``--json``):
* ``cells show``: ``{"ok", "reducer", "key", "state", "at", "through", "era"}`` with
  ``--at``, else ``{"ok", "reducer", "key", "state", "era", "current_era"}`` (``era``: the
  manifest hash the cell is pinned to, then or now; ``current_era`` the world's);
  ``at``/``through``
  (the asked position and the end of the tick it lies in) only with ``--at``; ``state`` is
  sugar JSON, canonical CBOR hex with ``--raw``, null when the cell does not exist (then).
* ``cells tail``: JSON lines, one per record in journal order: ``{"role": "input"|"step",
  "seq", "subject", "kind", "body", "source"}`` where ``source`` (steps only) is the record
  whose delivery the step consumed, in the same shape as ``world journal tail`` prints.
* ``fork``: ``{"ok", "path", "seq", "through", "records", "extended"}``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli import cells
from cli.common import EXIT_INTERRUPTED, answers, console, emit_json, fail, handle_errors
from cli.core import asking, paging_handle, parse_key_arg
from cli.journal import FOLLOW_POLL_S, SEQ_MAX

if TYPE_CHECKING:  # imported where used: `world --help` need not load the world (issue 9)
    from world import RecordView
    from world.history import HistoryEntry
    from world.journal import FileJournal
    from world.ops import Handle

__all__ = ["fork", "show", "tail"]

DirArg = Annotated[Path, typer.Argument(help="The world directory")]
ReducerArg = Annotated[str, typer.Argument(help="Keyed reducer name")]
KeyArg = Annotated[str, typer.Argument(help="The key, JSON read through the key schema")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output")]
RawOpt = Annotated[bool, typer.Option("--raw", help="Show values as canonical CBOR hex")]


@answers
def show(
    directory: DirArg,
    reducer: Annotated[str, typer.Argument(help="The reducer")],
    key: Annotated[
        str | None,
        typer.Argument(help="The key, JSON read through the key schema; none: an unkeyed one's"),
    ] = None,
    at: Annotated[
        int | None,
        typer.Option("--at", min=0, help="The state right after this journal position"),
    ] = None,
    json_output: JsonOpt = False,
    raw: RawOpt = False,
) -> None:
    """Show one cell's state, now or (--at SEQ) as it was right after journal position SEQ.

    --at re-executes only this cell's steps up to SEQ, from the nearest state the world's
    history index stored, each checked against its journaled state hash (a full replay when
    one cannot be); a SEQ inside a tick that journaled several records means after that
    whole tick. An unkeyed reducer has one cell: give no key."""
    out: dict[str, Any] = {"ok": True, "reducer": reducer}
    with handle_errors(json_output):
        key_value = None if key is None else parse_key_arg(key)
        with asking(directory, readonly=True) as handle:
            found = handle.cell(reducer, key_value, at=None if at is None else min(at, SEQ_MAX))
        state_cbor = None if found.state_cbor is None else bytes.fromhex(found.state_cbor)
        state = found.state
        if at is not None:
            out |= {"at": found.at, "through": found.through, "era": found.era}
        else:
            out |= {"era": found.era, "current_era": found.current_era}
    shown = state_cbor.hex() if raw and state_cbor is not None else state
    out |= {"key": key_value, "state": shown}
    when = "" if at is None else f" at seq {at}"
    if json_output:
        if state_cbor is None:  # exit 1 as without --json (as `state` does)
            missing = {"error": "NoSuchCell", "code": "cell.missing"}
            detail = f"{reducer} has no cell{'' if key is None else f' for key {key}'}{when}"
            emit_json({**out, "ok": False, **missing, "detail": detail})
            raise typer.Exit(1)
        emit_json(out)
        return
    if state_cbor is None:
        fail(f"{reducer} has no cell{'' if key is None else f' for key {key}'}{when}")
    if at is not None and out["through"] != at:
        console.print(f"(seq {at} is inside a tick; shown after its end, seq {out['through']})")
    if raw:
        console.print(shown, markup=False, highlight=False, soft_wrap=True)
    else:
        console.print_json(json.dumps(shown))
    if "current_era" in out and out["era"] not in (None, out["current_era"]):
        console.print(
            f"era {out['era']} (the world runs {out['current_era']}: `world cells upgrade` "
            "moves it)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@answers
def tail(
    directory: DirArg,
    reducer: ReducerArg,
    key: KeyArg,
    follow: Annotated[
        bool, typer.Option("--follow", help="Keep reading as records arrive")
    ] = False,
    json_output: JsonOpt = False,
    raw: RawOpt = False,
) -> None:
    """The cell's inputs and step outcomes in journal order, each step with its source.

    Read-only: works while another process runs the world."""
    rows: list[list[str]] = []

    def emit(shown: dict[str, Any]) -> None:
        if json_output:
            console.print(json.dumps(shown), soft_wrap=True, highlight=False, markup=False)
        elif follow:
            console.print(" ".join(_row(shown)), markup=False)
        else:
            rows.append(_row(shown))

    with handle_errors(json_output):
        client = paging_handle(directory)
        try:
            if client is None:
                _tail_here(directory, reducer, key, follow, raw, emit)
            else:
                with client:
                    _tail_served(client, reducer, parse_key_arg(key), follow, raw, emit)
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None
    if not json_output and not follow:
        from rich.table import Table

        table = Table(title=f"{reducer} {key}: {len(rows)} record(s)")
        for column in ("seq", "kind", "source", "detail"):
            table.add_column(column)
        for row in rows:
            table.add_row(*row)
        console.print(table)


def _tail_here(
    directory: Path,
    reducer: str,
    key: str,
    follow: bool,
    raw: bool,
    emit: Callable[[dict[str, Any]], None],
) -> None:
    """The cell's history read from the journal files (no server holds the world): only the
    journal, which a writer only appends to, so its checkpoints never stop it, and ``--follow``
    goes on from the seq after the last record it read. Through the history index where it
    serves (``CellHistory.indexed``: the cell's records, not the journal's), else every record."""
    from cli.journal import stored_air
    from world import JournalView, World, current_air, load_world_air
    from world.history import CellHistory, cell_key
    from world.journal import FileJournal

    World.check_directory(directory)
    air = current_air(directory)  # a cell by its reducer's name now (an upgrade may rename it)
    history = CellHistory(air, cell_key(air, reducer, parse_key_arg(key)))
    view = JournalView(load_world_air(directory), stored_air(directory))
    reader = FileJournal(directory / "journal", readonly=True)
    seq = 0
    try:
        while True:
            end = reader.seq_next
            entries = history.indexed(directory, reader, seq, end) or history.read(reader, seq)
            for entry in entries:
                seq = entry.record.seq + 1
                emit(_as_json(view, entry, raw))
            if not follow:
                return
            time.sleep(FOLLOW_POLL_S)
            seq = max(seq, _scanned(reader))
    finally:
        reader.close()


def _tail_served(
    client: Handle,
    reducer: str,
    key: Any,
    follow: bool,
    raw: bool,
    emit: Callable[[dict[str, Any]], None],
) -> None:
    """The cell's history from the server holding the world, a page per request, each entry
    as ``_as_json`` makes it (the server renders it the same way)."""
    from world.ops import CellTail

    seq = 0
    while True:
        args = CellTail(reducer=reducer, key=key, from_seq=seq, raw=raw)
        for page in client.pages("cells.tail", args):
            for shown in page.entries:  # type: ignore[attr-defined]
                emit(shown)
            seq = page.next  # type: ignore[attr-defined]
        if not follow:
            return
        time.sleep(FOLLOW_POLL_S)


def _scanned(reader: FileJournal) -> int:
    """Refresh ``reader``; records before the old end were all read (matched or not)."""
    end = reader.seq_next
    reader.refresh()
    return end


def _as_json(view: RecordView, entry: HistoryEntry, raw: bool) -> dict[str, Any]:
    out = {"role": entry.role, **view.render(entry.record, raw=raw)}
    if entry.role == "step":
        out["source"] = None if entry.source is None else view.render(entry.source, raw=raw)
    return out


def _row(shown: dict[str, Any]) -> list[str]:
    """A table row of one history entry, from its JSON form (``_as_json``)."""
    body = shown["body"]
    if shown["role"] == "input":
        return [str(shown["seq"]), "input", "", json.dumps(body.get("value"))]
    source = ""
    src = shown.get("source")
    if src is not None:
        value = src["body"].get("value") if src["kind"] == "event.in" else src["kind"]
        source = f"{src['seq']}: {json.dumps(value)}"
    detail = {k: body[k] for k in ("state_hash", "reason", "events", "effects") if k in body}
    return [str(shown["seq"]), shown["kind"], source, json.dumps(detail)]


def fork(
    directory: DirArg,
    new_dir: Annotated[Path, typer.Argument(help="The new world's directory (absent or empty)")],
    at: Annotated[int, typer.Option("--at", min=0, help="Keep journal records 0..SEQ")],
    json_output: JsonOpt = False,
) -> None:
    """Make NEW_DIR a world whose journal is DIRECTORY's records up to --at SEQ.

    Same AIR, content store and receipt key; the original is only read. A SEQ inside a tick
    that journaled several records is extended to that tick's end. Run the fork with other
    inputs to see what would have happened."""
    from world.history import fork_world

    with handle_errors(json_output):
        forked = fork_world(directory, at, new_dir)
    if json_output:
        emit_json(
            {
                "ok": True,
                "path": str(forked.path),
                "seq": forked.seq,
                "through": forked.seq_through,
                "records": forked.seq_through + 1,
                "extended": forked.extended,
                "effects": "stub",
            }
        )
        return
    console.print(
        f"forked {directory} at seq {forked.seq_through} into {new_dir} "
        f"({forked.seq_through + 1} records)",
        markup=False,
        highlight=False,
    )
    if forked.extended:
        console.print(
            f"seq {at} is inside a tick; the fork keeps that whole tick (to seq "
            f"{forked.seq_through})",
            markup=False,
            highlight=False,
        )
    console.print(
        f"its effects are stubbed (nothing leaves it) until: world run {new_dir} --effects live",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _register() -> None:
    """Put ``show`` and ``tail`` on the cells group."""
    group = cells.app
    group.command("show")(show)
    group.command("tail")(tail)


_register()
