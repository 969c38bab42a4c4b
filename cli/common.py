"""Shared CLI plumbing: consoles, JSON output, signals, and turning ``WorldError`` into one red
line (or, with ``--json``, one object with the error's class, code and structured fields).

Signals: commands that change the world run inside ``signals_deferred``: SIGINT and SIGTERM do
not raise inside a commit; they ask the world to stop at the next tick boundary
(``World.interrupt``), which commits and raises ``Interrupted``; the command then prints one
line and exits 130. A send that was interrupted still finishes its commit, and its exit status
says whether the batch is durable (0) or not (1)."""

from __future__ import annotations

import functools
import json
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, Final, NoReturn, ParamSpec, Protocol, TypeVar, cast

import typer

from air.errors import ManifestError, WorldError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "EXIT_INTERRUPTED",
    "PIPED_WIDTH",
    "SignalGate",
    "answer_in_json",
    "answers",
    "console",
    "emit_json",
    "err_console",
    "error_fields",
    "fail",
    "handle_errors",
    "report_error",
    "set_quiet",
    "signals_deferred",
    "stdout_is_terminal",
]

P = ParamSpec("P")
R = TypeVar("R")

EXIT_INTERRUPTED = 130

PIPED_WIDTH: Final = 1_000_000
"""The width of the consoles when they do not write to a terminal (a pipe, a file): no line a
script reads is wrapped (a hash split over two lines), whatever width a terminal beside it has."""


def _console(**settings: Any) -> Console:
    """A rich console that wraps only on a terminal: written to a pipe or a file, its lines
    are as long as they are (whatever ``COLUMNS`` says), and ``quiet`` (``world --quiet``)
    silences it."""
    from rich.console import Console, ConsoleDimensions

    class _Console(Console):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            if kwargs.get("width") is None:
                self._width = None  # not COLUMNS's, fixed at start: ``size`` reads it if a terminal

        @property
        def size(self) -> ConsoleDimensions:
            found = super().size
            if self._width is None and not self.is_terminal:
                return ConsoleDimensions(PIPED_WIDTH, found.height)
            return found

        @size.setter
        def size(self, new_size: tuple[int, int]) -> None:
            self._width, self._height = new_size

    return _Console(**settings)


class _MadeOnFirstUse:
    """Stands for a console (``_console(**settings)``) that is made the first time anything of it
    is read; what is set on it before then (``set_quiet``, in the root callback of every
    command) is kept and set on it once made. Importing rich's console costs ~30 ms, and
    ``world --help``, ``world`` alone and ``world GROUP`` alone, which print through click,
    never need it; every command that prints does, through this same object. Rejected:
    ``console`` as a module ``__getattr__`` of this module (every command module imports it by
    name at its top, which would make it at once)."""

    def __init__(self, **settings: Any) -> None:
        object.__setattr__(self, "_settings", settings)
        object.__setattr__(self, "_set", {})
        object.__setattr__(self, "_made", None)

    def _get(self) -> Console:
        made: Console | None = object.__getattribute__(self, "_made")
        if made is None:
            made = _console(**object.__getattribute__(self, "_settings"))
            for name, value in object.__getattribute__(self, "_set").items():
                setattr(made, name, value)
            object.__setattr__(self, "_made", made)
        return made

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        made = object.__getattribute__(self, "_made")
        if made is None:
            object.__getattribute__(self, "_set")[name] = value
        else:
            setattr(made, name, value)


console = cast("Console", _MadeOnFirstUse(highlight=False))
"""Informational output on stdout (what ``--quiet`` silences; never JSON, never errors)."""
err_console = cast("Console", _MadeOnFirstUse(stderr=True, highlight=False))
"""Errors and notices on stderr (never silenced)."""


def answers(command: Callable[P, R]) -> Callable[P, R]:
    """A command that reads: what it prints is the answer it was asked for, so ``--quiet``
    does not silence it (``world -q state ...`` still prints the state). Commands that act
    (send, run, init, ...) print information about what they did, which ``--quiet`` silences."""

    @functools.wraps(command)
    def answering(*args: P.args, **kwargs: P.kwargs) -> R:
        quiet, console.quiet = console.quiet, False
        try:
            return command(*args, **kwargs)
        finally:
            console.quiet = quiet

    return answering


def set_quiet(quiet: bool) -> None:
    """``world --quiet``: the shared stdout console prints nothing (errors, on stderr, and
    ``--json`` answers, written past it, still show)."""
    console.quiet = quiet


def stdout_is_terminal() -> bool:
    """Whether stdout is a terminal (else line-oriented output is written plainly, buffered)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # closed, or a stand-in without isatty
        return False


def emit_json(obj: Any) -> None:
    """The ``--json`` answer: one object, sorted keys. An object without ``ok`` is a success
    (errors say ``"ok": false`` themselves), so every answer carries it."""
    if isinstance(obj, dict) and "ok" not in obj:
        obj = {"ok": True, **obj}
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


_json_answers = False


def answer_in_json(on: bool) -> None:
    """The command line asked for ``--json`` (``cli.app`` sets this before the command runs):
    ``fail`` answers with an error object on stdout, as ``handle_errors`` does, so a script
    reads every answer of a ``--json`` command, failures too, as one JSON object with ``ok``."""
    global _json_answers
    _json_answers = on


def report_error(message: str, code: str = "usage") -> None:
    """One red line on stderr (the message is text, never markup); under ``--json``
    (``answer_in_json``) the error object ``{ok: false, error, code, detail}`` on stdout."""
    if _json_answers:
        emit_json({"ok": False, "error": "UsageError", "code": code, "detail": message})
    else:
        from rich.markup import escape

        err_console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)


def fail(message: str, code: str = "usage") -> NoReturn:
    """``report_error``, then exit 1."""
    report_error(message, code)
    raise typer.Exit(1)


@contextmanager
def handle_errors(
    json_output: bool = False, on_manifest: Callable[[ManifestError], None] | None = None
) -> Iterator[None]:
    """Known errors become one red line on stderr (or diagnostics) and exit code 1."""
    try:
        yield
    except ManifestError as exc:
        if on_manifest is not None:
            on_manifest(exc)
            raise typer.Exit(1) from exc
        fail(str(exc).splitlines()[0] if str(exc) else "invalid AIR")
    except WorldError as exc:
        _exit_with(exc, json_output)
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        fail(f"{exc.strerror or exc}{where}")
    except RecursionError as exc:  # input nested deeper than the checks below it expected
        fail(f"input nested too deeply to process ({exc})")


def _exit_with(exc: WorldError, json_output: bool) -> NoReturn:
    """Report ``exc`` (one line, or ``--json``'s error object) and exit: 130 for an
    interrupt, else 1. An error a served world replied with keeps its own class and fields."""
    # Imported here, on the error path: `world --help` loads no world module.
    from world.errors import Interrupted, ServedError

    error_class = exc.error_class if isinstance(exc, ServedError) else type(exc).__name__
    code = EXIT_INTERRUPTED if isinstance(exc, Interrupted) else 1
    if json_output or _json_answers:
        emit_json(
            {
                "ok": False,
                "error": error_class,
                "code": getattr(exc, "code", None) or type(exc).__name__,
                "detail": str(exc),
                "fields": exc.fields if isinstance(exc, ServedError) else error_fields(exc),
            }
        )
        raise typer.Exit(code) from exc
    if code == EXIT_INTERRUPTED:
        err_console.print(str(exc), soft_wrap=True, markup=False, highlight=False)
        raise typer.Exit(code) from exc
    fail(f"{error_class}: {exc}")


def error_fields(exc: BaseException) -> dict[str, Any]:
    """An error's structured fields as JSON (bytes as hex; nested errors as their text)."""
    out: dict[str, Any] = {}
    for name, value in vars(exc).items():
        if name.startswith("_"):
            continue
        out[name] = _jsonable_field(value)
    return out


def _jsonable_field(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple):
        return [_jsonable_field(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable_field(v) for k, v in value.items()}
    if hasattr(value, "as_json"):
        return value.as_json()
    return str(value)


class _Interruptible(Protocol):
    def interrupt(self) -> None: ...


class SignalGate:
    """What ``signals_deferred`` yields: the signals received, and the world to pass them to
    (set ``target`` once the world is open; a signal that came earlier is passed on then)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._target: _Interruptible | None = None

    @property
    def target(self) -> _Interruptible | None:
        return self._target

    @target.setter
    def target(self, world: _Interruptible | None) -> None:
        self._target = world
        if world is not None and self.received:
            world.interrupt()

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if self._target is not None:
            self._target.interrupt()


@contextmanager
def signals_deferred() -> Iterator[SignalGate]:
    """SIGINT/SIGTERM inside the block are recorded and passed on as ``target.interrupt()``
    instead of raising wherever the code happens to be. Handlers are restored on exit."""
    gate = SignalGate()
    previous = {sig: signal.signal(sig, gate) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield gate
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
