"""Commands for the core loop: init, send, step, run, state, info, snapshot."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from air.errors import InputFileError, InvalidArgument, JsonError, WorldError
from cli import _progress
from cli.archive import ArchiveOpt, VerifyEveryOpt, background
from cli.common import (
    SignalGate,
    answers,
    console,
    emit_json,
    err_console,
    fail,
    handle_errors,
    signals_deferred,
)

# The world, kernel and AIR modules (wasmtime, pydantic, httpx) are imported inside the commands
# that use them, so that ``world --help`` and the other commands start quickly (issue 9).
if TYPE_CHECKING:
    from world import World
    from world.effects import ChosenMode, EffectsMode
    from world.ops import Handle, Sent

__all__ = [
    "EFFECTS_CHOICES",
    "EffectsChoice",
    "EffectsOpt",
    "asking",
    "chosen_effects",
    "effects_mode",
    "info",
    "init",
    "module_bindings",
    "opened",
    "paging_handle",
    "parse_json_arg",
    "parse_key_arg",
    "print_notices",
    "run",
    "send",
    "snapshot",
    "state",
    "step",
]

DirArg = Annotated[Path, typer.Argument(help="The world directory")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output")]
ModuleOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--module",
        help="NAME=FILE.wasm: the binary of module NAME, which names no wasm in the AIR "
        "(as AgentOS's modules do); repeatable",
    ),
]


class EffectsChoice(enum.Enum):
    """``world.effects.EFFECTS_MODES``, spelled here so that ``world --help`` imports no world
    module (``tests`` hold the two equal)."""

    live = "live"
    replay = "replay"
    stub = "stub"
    deny = "deny"


EFFECTS_CHOICES = tuple(c.value for c in EffectsChoice)

EffectsOpt = Annotated[
    EffectsChoice | None,
    typer.Option(
        "--effects",
        help="Who answers effects that leave the world (HTTP; timers and blobs always run): "
        "live adapters; replay the receipts journaled for the same intents (a fork's parent's "
        "too), else deny; stub receipts; or deny them all. Default: the world's mode (a fork "
        "is stub until --effects live is given once), stub with --sim, else live",
        show_default=False,
    ),
]


_JSON_START = frozenset('{["-0123456789')
SEND_PROGRESS_MIN = 1000
"""``send --file`` shows a progress bar (on a terminal) from this many events on."""


def parse_json_arg(text: str, *, source: str = "VALUE") -> Any:
    """A value given on the command line: JSON (malformed JSON is an error with its position)."""
    from air import jsontext

    return jsontext.loads(text, source=source)


def parse_key_arg(text: str) -> Any:
    """A key given on the command line: JSON read through the key schema, or, when it cannot
    be JSON at all (``order-1``), the text itself. Text that starts like JSON (a brace, a
    bracket, a quote, a digit or a minus sign) must be valid JSON."""
    from air import jsontext

    try:
        return jsontext.loads(text, source="KEY")
    except JsonError:
        if not text or text[0] in _JSON_START:
            raise
        return text


def init(
    directory: DirArg,
    air: Annotated[Path, typer.Option("--air", help="AIR file or folder")],
    module: ModuleOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Create a world in DIRECTORY from the AIR at --air."""
    from world import World

    with handle_errors(json_output), signals_deferred():
        world = World.create(directory, air, modules=module_bindings(module or []))
        manifest_hash = world.air.manifest_hash
        world.close()
    if json_output:
        emit_json({"ok": True, "path": str(directory), "manifest_hash": manifest_hash})
    else:
        console.print(f"created world at {directory} (manifest {manifest_hash})")


def module_bindings(values: list[str]) -> dict[str, Path]:
    """``--module NAME=FILE.wasm`` values as NAME -> FILE; each NAME at most once."""
    bindings: dict[str, Path] = {}
    for value in values:
        name, sep, file = value.partition("=")
        if not sep or not name or not file:
            raise InvalidArgument("--module", value, "NAME=FILE.wasm, e.g. demo/Counter@1=c.wasm")
        if name in bindings:
            reason = f"module {name} is bound twice (to {bindings[name]} and to {file})"
            raise InvalidArgument("--module", value, reason)
        bindings[name] = Path(file)
    return bindings


def _read_jsonl(path: Path) -> list[Any]:
    """One JSON value per non-blank line; each error names the file and its line."""
    import sys

    from air import jsontext

    try:
        data = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as exc:
        raise InputFileError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    values = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            values.append((number, jsontext.loads(line, source=str(path))))
        except JsonError as exc:
            raise JsonError(str(path), number, exc.column, exc.code, exc.detail) from exc
    if not values:
        raise InputFileError(str(path), "holds no events (it is empty or blank)")
    return values


@contextmanager
def opened(
    directory: Path, *, readonly: bool = False, gate: SignalGate | None = None
) -> Iterator[World]:
    """The world at ``directory`` itself, closed at the end; its notices go to stderr once, for
    the commands that run its loop (``step``, ``run``): an operation is asked through
    ``asking``. A writer's open of a world ``world serve`` holds is ``WorldServed``, saying
    what to do."""
    from world import World, WorldLocked, WorldServed
    from world.serve import served

    try:
        world = World.open(directory, readonly=readonly)
    except WorldLocked as exc:
        if not readonly and served(directory):
            raise WorldServed(str(directory)) from exc
        raise
    if gate is not None:
        gate.target = world
    try:
        yield world
    finally:
        try:
            world.close()
        finally:
            print_notices(world.notices)


def print_notices(notices: list[str]) -> None:
    """A world's notices on stderr, one line each, as every command shows them."""
    for notice in notices:
        err_console.print(f"[yellow]notice:[/yellow] {notice}", soft_wrap=True)


@contextmanager
def asking(
    directory: Path, *, readonly: bool = False, gate: SignalGate | None = None
) -> Iterator[Handle]:
    """The handle a command asks its world through (``world.attach``): the server's when
    ``world serve`` holds the world, else the world itself (read-only for ``readonly``);
    closed at the end, its notices on stderr once."""
    from world import attach

    handle = attach(directory, readonly=readonly)
    if gate is not None:
        gate.target = handle
    try:
        yield handle
    finally:
        try:
            handle.close()
        finally:
            print_notices(handle.notices)


def paging_handle(directory: Path) -> Handle | None:
    """The handle to page through when the files cannot be read directly: the server's when
    ``world serve`` holds ``directory``, a partitioned world's (read-only) for a cluster's
    directory; else None (``journal tail`` and ``cells tail`` then read the journal's files
    themselves: a reader that opens no world follows a live writer's appends)."""
    from world.cluster import CLUSTER_FILE, open_cluster
    from world.serve import connect, served

    if (directory / CLUSTER_FILE).is_file():
        return open_cluster(directory, readonly=True)
    return connect(directory) if served(directory) else None


def send(
    directory: DirArg,
    schema: Annotated[str, typer.Argument(help="Event schema, e.g. demo/CounterEvent@1")],
    value: Annotated[str | None, typer.Argument(help="The event value as JSON")] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            help="JSON Lines: one value per line, one durable batch (all or nothing); an "
            "object's \"$id\" is that event's idempotency key; - reads standard input",
        ),
    ] = None,
    event_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            help="Idempotency key of VALUE: an event already journaled with this id is not "
            "journaled again (a retry after a crash is exactly once)",
        ),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Send events into the world (durable when the command returns)."""
    if (value is None) == (file is None):
        fail("give exactly one of VALUE or --file")
    if event_id is not None and file is not None:
        fail('--id is for one VALUE; in a --file, give each line an "$id"')
    with handle_errors(json_output), signals_deferred() as gate:
        lines = _read_jsonl(file) if file is not None else [(0, parse_json_arg(value or ""))]
        lines, ids = _split_ids(lines, event_id)
        big = file is not None and len(lines) >= SEND_PROGRESS_MIN
        shown = _progress.bar("sending", json_output=json_output) if big else nullcontext()
        with shown as progress, asking(directory, gate=gate) as handle:
            sent = _sent(handle, schema, lines, ids, file, progress)
    if json_output:
        placed = {} if sent.partitions is None else {"partitions": sent.partitions}
        emit_json(
            {
                "ok": True,
                "seqs": sent.seqs,
                "duplicates": sent.duplicates,
                "journaled": sent.journaled,
                **placed,
            }
        )
        return
    console.print(sent_text(sent))


def sent_text(sent: Sent) -> str:
    """What ``send`` says of a batch: how many events, how many of them this send journaled and
    at which seqs (consecutive), and how many were not, being journaled already under their
    ids, with the seqs they have."""
    total, duplicates = len(sent.seqs), sent.duplicates
    head = f"sent {total} event(s)"
    if sent.partitions is not None:  # a partitioned world: each partition's seqs are its own
        used = ", ".join(f"p{p}" for p in sorted(set(sent.partitions)))
        head += f" to partitions {used}"
        if not duplicates:
            return head
        return f"{head}: {total - duplicates} new; {_already(duplicates)} in their partitions"
    journaled = sent.journaled
    where = "" if not journaled else f"journal seq {_span(journaled[0], journaled[1])}"
    if not duplicates:
        return f"{head}, {where}"
    new = f"{total - duplicates} new, {where}" if journaled else "none new"
    return f"{head}: {new}; {_already(duplicates)} ({_seqs_of_duplicates(sent)})"


def _already(duplicates: int) -> str:
    their = "its id" if duplicates == 1 else "their ids"
    return f"{duplicates} already journaled under {their}"


def _span(low: int, high: int) -> str:
    return f"{low}" if low == high else f"{low}..{high}"


def _seqs_of_duplicates(sent: Sent) -> str:
    """The seqs the duplicates of ``sent`` have: ``seq 12``, ``seq 0..99999`` (every seq of a
    run) or ``12 seqs from 3 to 790``."""
    first_new = sent.journaled[0] if sent.journaled else None
    seen: set[int] = set()
    held: set[int] = set()
    for seq in sent.seqs:
        if first_new is None or seq < first_new or seq in seen:
            held.add(seq)
        seen.add(seq)
    low, high = min(held), max(held)
    if high - low + 1 == len(held):
        return f"seq {_span(low, high)}"
    return f"{len(held)} seqs from {low} to {high}"


ID_FIELD = "$id"
"""The key of a JSON Lines object that holds the event's idempotency key, not a field of the
value (``$``: no AIR field name starts with it, so it never clashes with a schema's own
``id``)."""


def _split_ids(
    lines: list[tuple[int, Any]], event_id: str | None
) -> tuple[list[tuple[int, Any]], list[str | None]]:
    """The values without their ``$id`` keys, and the ids (None where a line has none)."""
    if event_id is not None:
        return lines, [event_id]
    values, ids = [], []
    for number, value in lines:
        found = value.get(ID_FIELD) if isinstance(value, dict) else None
        if isinstance(value, dict) and ID_FIELD in value:
            if not isinstance(found, str):
                raise InvalidArgument(ID_FIELD, found, f"line {number}: an event id is text")
            value = {k: v for k, v in value.items() if k != ID_FIELD}
        values.append((number, value))
        ids.append(found)
    return values, ids


def _sent(
    handle: Handle,
    schema: str,
    lines: list[Any],
    ids: list[str | None],
    file: Path | None,
    progress: _progress.ProgressFn | None,
) -> Sent:
    """Send the values of ``lines`` as one batch; a rejected one named by its file and line."""
    from world import EventRejected

    handle.progress = progress
    try:
        sent = handle.send_many(schema, [v for _n, v in lines], ids=ids)
    except EventRejected as exc:
        if file is None:
            raise exc.cause if isinstance(exc.cause, WorldError) else exc from exc
        raise EventRejected(exc.index, exc.cause, f"{file}:{lines[exc.index][0]}") from exc
    return sent


def step(
    directory: DirArg,
    ticks: Annotated[int, typer.Option("--ticks", min=1, help="How many ticks to run")] = 1,
    json_output: JsonOpt = False,
) -> None:
    """Run ticks: each runs one step of one ready cell or reducer; say what runs started,
    ended and failed, and what the world waits for."""
    from cli._runtext import failed_text, runs_line, waiting_text
    from world.operate import run_mark, run_summary

    with (
        handle_errors(json_output),
        signals_deferred() as gate,
        opened(directory, gate=gate) as world,
        _steps_shown(world, "stepping", ticks, json_output),
    ):
        since = run_mark(world.kernel)
        ran = world.step(ticks)
        pending = world.kernel.scheduler.pending
        done = run_summary(world.kernel, since)
    if json_output:
        emit_json({"ok": True, "steps": ran, "pending": pending, **done})
        return
    console.print(f"ran {ran} step(s){failed_text(done)}; {pending} deliveries pending")
    for line in (runs_line(done), waiting_text(done)):
        if line is not None:
            console.print(line, soft_wrap=True, markup=False)


def run(
    directory: DirArg,
    until_idle: Annotated[
        bool,
        typer.Option(
            "--until-idle",
            help="Return as soon as nothing is ready and no effect is in flight, leaving "
            "real-time timers pending (without it, run keeps going until they have fired)",
        ),
    ] = False,
    sim: Annotated[
        bool, typer.Option("--sim", help="Simulated time: timers fire at once, in order")
    ] = False,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Stop with an error past this many steps")
    ] = None,
    effects: EffectsOpt = None,
    archive_to: ArchiveOpt = None,
    verify_every: VerifyEveryOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Run the world with its effect adapters (live unless --effects or the world's mode says
    otherwise) until it is idle."""
    from rich.markup import escape

    from cli._runtext import due_text, failed_text, runs_line, waiting_text
    from world import Engine
    from world.operate import run_mark, run_summary, run_telling

    def tell(due_ns: int) -> None:  # before blocking on a far timer: one line, on stderr
        err_console.print(f"waiting for a timer due {due_text(due_ns)}", soft_wrap=True)

    with (
        handle_errors(json_output),
        signals_deferred() as gate,
        opened(directory, gate=gate) as world,
        background(directory, archive_to, verify_every),
    ):
        chosen = chosen_effects(directory, effects, sim=sim)
        since = run_mark(world.kernel)
        with (
            Engine(world, sim=sim, effects=chosen.mode) as engine,
            _steps_shown(world, "running", None, json_output),
        ):
            report = run_telling(engine, until_idle=until_idle, max_steps=max_steps, tell=tell)
        done = run_summary(world.kernel, since)
    mode = chosen.mode
    if chosen.by_sim and report.not_live and chosen.notice is not None:
        err_console.print(f"[yellow]notice:[/yellow] {escape(chosen.notice)}", soft_wrap=True)
    for note in report.notes:
        err_console.print(f"[yellow]notice:[/yellow] {escape(note)}", soft_wrap=True)
    if json_output:
        emit_json(
            {
                "ok": True,
                "steps": report.steps,
                "effects_dispatched": report.dispatched,
                "receipts": report.receipts,
                "effects": mode,
                "effects_not_live": report.not_live,
                **done,
            }
        )
    else:
        extra = failed_text(done)
        extra += f", {report.receipts} receipt(s)" if report.receipts else ""
        if report.not_live:
            extra += f" ({report.not_live} effect(s) answered without sending: effects {mode})"
        waiting = waiting_text(done) or "the world is idle"
        console.print(f"ran {report.steps} step(s){extra}; {waiting}", soft_wrap=True, markup=False)
        line = runs_line(done)
        if line is not None:
            console.print(line, soft_wrap=True, markup=False)


def chosen_effects(
    directory: Path, asked: EffectsChoice | None, *, sim: bool = False
) -> ChosenMode:
    """The effects mode of a run of the world at ``directory`` (open for writing here), with a
    notice on stderr when the world's mode file makes it not live (``world.effects._modes``;
    a ``--sim`` default is told by the caller, once something was stubbed)."""
    from rich.markup import escape

    from world.effects import choose_mode

    chosen = choose_mode(directory, effects_mode(asked), sim=sim)
    if chosen.notice is not None and not chosen.by_sim:
        err_console.print(f"[yellow]notice:[/yellow] {escape(chosen.notice)}", soft_wrap=True)
    return chosen


def effects_mode(asked: EffectsChoice | None) -> EffectsMode | None:
    """``--effects`` as the mode it names (None: not given)."""
    return None if asked is None else asked.value


def _steps_shown(
    world: World, label: str, total: int | None, json_output: bool
) -> AbstractContextManager[None]:
    """A progress bar of the steps this command has run (a spinner when their number is not
    known): the bar reads the kernel's step counter, which the tick loop keeps anyway."""
    start = world.kernel.steps_total
    return _progress.counter(
        label,
        lambda: max(0, world.kernel.steps_total - start),
        total=total,
        json_output=json_output,
    )


@answers
def state(
    directory: DirArg,
    reducer: Annotated[str, typer.Argument(help="Reducer (module) name")],
    key: Annotated[
        str | None, typer.Option("--key", help="The cell key, JSON read through the key schema")
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Show a reducer's state, or one cell's with --key."""
    from world.ops import State, StateOf

    with handle_errors(json_output):
        key_value = None if key is None else parse_key_arg(key)
        with asking(directory, readonly=True) as handle:
            found = handle.call("world.state", StateOf(reducer=reducer, key=key_value))
    assert isinstance(found, State)
    answer_state(found.state, reducer, key_value, json_output, found.state_cbor)


def answer_state(
    value: Any, reducer: str, key_value: Any, json_output: bool, state_cbor: str | None = None
) -> None:
    """Print a state read for ``world state`` (and ``world cluster state``); none is exit 1
    with or without --json: a script tells "no cell" by the status. ``--json`` gives the
    state's canonical CBOR (hex) beside its sugar, as ``cells show --raw`` shows it: the sugar
    of a bytes state (base64) reads as text would."""
    if value is None:
        detail = "no such state (the cell does not exist or was deleted)"
        if json_output:
            emit_json(
                {
                    "ok": False,
                    "error": "NoSuchState",
                    "code": "state.missing",
                    "detail": detail,
                    "fields": {"reducer": reducer, "key": key_value},
                    "state": None,
                }
            )
            raise typer.Exit(1)
        fail(detail)
    if json_output:
        emit_json({"ok": True, "state": value, "state_cbor": state_cbor})
    else:
        console.print_json(json.dumps(value))


@answers
def info(directory: DirArg, json_output: JsonOpt = False) -> None:
    """Summarise a world: manifest, journal, reducers and cells, dead letters."""
    with handle_errors(json_output):
        with asking(directory, readonly=True) as handle:
            data = handle.info().model_dump()
        data["path"] = str(directory)  # a server's own path may be spelled otherwise
    data["http"] = _http(directory)
    data["llm"] = _llm(directory)
    if json_output:
        emit_json(data)
        return
    from rich.table import Table

    table = Table(show_header=False, title=f"world {directory}")
    for key in (
        "manifest_hash",
        "journal_seq_next",
        "steps_total",
        "pending_deliveries",
        "steps_failed",
        "dead_letters_total",
        "dead_letters_kept",
    ):
        table.add_row(key, str(data.get(key, "-")))
    eras = data["eras"]
    if len(eras) > 1:
        table.add_row(
            "eras",
            f"{len(eras)}; the current since seq {eras[-1]['since']} (world upgrade ls)",
        )
    effects = data["effects"]
    failed = data.get("runs_failed", 0)
    table.add_row(
        "runs",
        f"{len(data['runs'])} active, {data['runs_started']} started in all, {failed} failed",
    )
    table.add_row("effects", ", ".join(f"{n} {k}" for k, n in effects.items()))
    mode = data["effects_mode"]
    table.add_row("effects mode", f"{mode['mode']} ({mode['reason']})")
    http = data["http"]
    table.add_row(
        "http (local.json)",
        http["problem"]
        if "problem" in http
        else ", ".join(f"{k} {v}" for k, v in sorted(http.items())),
    )
    llm = data["llm"]
    if llm:
        table.add_row(
            "llm (local.json)",
            llm["problem"]
            if "problem" in llm
            else ", ".join(f"{k} {v}" for k, v in sorted(llm["providers"].items())),
        )
    for name, r in data["reducers"].items():
        table.add_row(
            f"reducer {name}", f"{r.get('cells', '-')} cells" if r["keyed"] else "v1 (non-keyed)"
        )
    part = data.get("partition")
    if part is not None:
        owed = sum(part["outbox"].values())
        table.add_row(
            "partition",
            f"{part['index']} of {part['count']}; owes {owed} event(s) to others "
            "(world cluster run or up forwards them)",
        )
    console.print(table)
    for letter in data["dead_letters"]:
        console.print(
            f"[yellow]dead letter[/yellow] seq {letter['seq']} {letter['reducer']} {letter['schema']}: {letter['code']}"
        )
    if data["dead_letters"]:
        console.print("(world dead-letters ls: their ids and reasons; retry or drop them)")


def _llm(directory: Path) -> dict[str, Any]:
    """The LLM providers this machine's ``local.json`` names (``{providers: {name: base_url}}``,
    empty when none), or the problem with the file."""
    from world.effects import llm_providers

    try:
        providers = llm_providers(directory)
    except InvalidArgument as exc:
        return {"problem": str(exc)}
    return {"providers": providers} if providers else {}


def _http(directory: Path) -> dict[str, Any]:
    """The HTTP adapter's settings on this machine (``local.json`` over the defaults), or the
    problem with the file (a world runs on no settings it did not understand)."""
    from world.effects import http_settings

    try:
        return dict(http_settings(directory))
    except InvalidArgument as exc:
        return {"problem": str(exc)}


def snapshot(directory: DirArg, json_output: JsonOpt = False) -> None:
    """Checkpoint cells, index and kernel state now."""
    with handle_errors(json_output), signals_deferred() as gate, asking(directory, gate=gate) as h:
        address = h.snapshot()
    if json_output:
        emit_json({"ok": True, "snapshot": address})
    else:
        console.print(f"snapshot {address}")
