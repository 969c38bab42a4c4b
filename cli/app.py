"""The ``world`` typer app: registers each command module's commands, and ``run`` runs it.

Loaded by ``cli.main.main`` (the console entry point) once its start-up guard is in place; tests
drive ``app`` through ``typer.testing.CliRunner`` (``cli.main.app`` is this same object)."""

from __future__ import annotations

import copy
import inspect
import os
import signal
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Annotated, Any, Final

import typer
from typer.core import TyperGroup

# The command modules import the world, kernel and AIR modules (wasmtime, pydantic, httpx)
# inside their commands, so that `world --help` and each command load only what they use
# (issue 9): keep it so, a module-level import of them here or there costs ~0.4 s everywhere.
from cli import (
    archive,
    cells,
    core,
    demo,
    effects,
    examples,
    history,
    journal,
    moves,
    reducer,
    replay,
    serve,
    upgrade,
    validate,
)
from cli.common import (
    EXIT_INTERRUPTED,
    answer_in_json,
    console,
    err_console,
    report_error,
    set_quiet,
)

__all__ = ["INTERRUPTED_LINE", "app", "run"]

INTERRUPTED_LINE = "interrupted; nothing acknowledged was lost"
"""What a Ctrl-C the app did not expect prints: what a world acknowledged is durable, and a
command that changes one defers the signal to a boundary (``cli.common.signals_deferred``)."""


class _Group(TyperGroup):
    """Every group of ``world`` (the root and each sub-group, ``_settle_help``): its commands are
    listed by their whole first sentence, where click cut the summary to what fits beside the
    name with ``...`` (``Validate a world's AIR and print its diagnostics or a...``); the
    formatter wraps it under itself instead."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=sys.maxsize)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class _OneLineErrors(_Group):
    """Click's usage errors (an unknown option, an int it cannot parse) become one line on
    stderr and exit 1, like every other error of this CLI (SPEC §8), instead of a usage box
    and exit 2. Help (``world`` alone, ``--help``) is unchanged. Click's exception classes are
    matched by shape (``format_message`` and ``exit_code``), not imported: typer vendors click
    in some versions and depends on it in others."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        given = list(sys.argv[1:] if args is None else args)
        answer_in_json(
            "--json" in given[: given.index("--")] if "--" in given else "--json" in given
        )
        call = (args, prog_name, complete_var, False, windows_expand_args)
        if not standalone_mode:
            return super().main(*call, **extra)
        try:
            code = super().main(*call, **extra)
        except typer.Abort:
            sys.exit(EXIT_INTERRUPTED)
        except Exception as exc:
            # Click's exceptions, recognised by their interface and name: typer vendors click
            # privately (``typer._click``) and exports no class to test against.
            if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
                raise
            if type(exc).__name__ == "NoArgsIsHelpError":  # the help, as --help writes it
                typer.echo(exc.format_message())
                sys.exit(0)
            report_error(exc.format_message())
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    # Typer turns a KeyboardInterrupt in parsing or in a command into a silent exit 130; these
    # say so first, as ``run`` does for one outside them. A command that handles Ctrl-C itself
    # (``journal tail``, the commands inside ``signals_deferred``) never lets one reach here.
    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        with _interrupt_said():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with _interrupt_said():
            return super().invoke(ctx)


@contextmanager
def _interrupt_said() -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt:
        err_console.print(INTERRUPTED_LINE)
        raise typer.Exit(EXIT_INTERRUPTED) from None


CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}
"""``-h`` is ``--help`` everywhere: click passes ``help_option_names`` down from the root's
context to every sub-command's, and ``_settle_help`` gives them to each sub-typer too,
whatever context settings it was made with."""

HELP_MARKUP: Final = None
"""How every ``--help`` is rendered: ``None`` is click's plain formatter (typer passes the root's
mode down to every group and command). It re-flows each paragraph of a docstring to the
terminal's width (blank lines part paragraphs; a paragraph opened by a line holding only
``\\b`` is kept as written, for a list or an example), and a flag shows no type: ``--full  Read
every segment``. Rejected: typer's rich help (``"rich"``, its default). It keeps a docstring's
hard line breaks in every paragraph after the first (typer 0.29), so a sentence broke wherever
the source's line did; it prints ``<bool>`` beside every flag; and it imports markdown-it,
pygments and rich's traceback for every ``world --help`` (``typer.rich_utils``, ~55 ms on
this project's 2-core machine). ``"markdown"`` re-flows but imports the same and reads a
docstring's ``*`` and ``_`` as emphasis."""

app = typer.Typer(
    cls=_OneLineErrors,
    name="world",
    help="Drive a deterministic, event-sourced world of WASM reducers.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion, --show-completion
    pretty_exceptions_enable=False,
    context_settings=CONTEXT_SETTINGS,
    rich_markup_mode=HELP_MARKUP,
)
app.command("validate")(validate.validate)
app.command("init")(examples.init)  # core.init, plus --example NAME
app.command("send")(core.send)
app.command("step")(core.step)
app.command("run")(core.run)
app.command("state")(core.state)
app.command("info")(core.info)
app.command("snapshot")(core.snapshot)
app.command("replay")(replay.replay)
app.command("demo")(demo.demo)
app.command("fork")(history.fork)  # importing cli.history also adds `cells show --at`, `cells tail`
app.command("serve")(serve.serve)
app.command("archive")(archive.archive)
app.add_typer(cells.app, name="cells")
app.add_typer(journal.app, name="journal")
app.add_typer(effects.app, name="effects")
app.add_typer(moves.app, name="migrate")  # importing cli.moves also adds `cells export|import`
app.add_typer(examples.app, name="examples")
app.add_typer(reducer.app, name="reducer")
app.add_typer(reducer.sdk_app, name="sdk")
app.add_typer(upgrade.upgrade_app, name="upgrade")
app.add_typer(__import__("cli.deadletters", fromlist=["app"]).app, name="dead-letters")
app.add_typer(__import__("cli.runs", fromlist=["app"]).app, name="runs")  # `world runs`
app.command("why")(__import__("cli.why", fromlist=["why"]).why)
app.command("ui")(__import__("cli.ui", fromlist=["ui"]).ui)
app.add_typer(__import__("cli.cluster", fromlist=["app"]).app, name="cluster")
app.add_typer(__import__("cli.normalize", fromlist=["app"]).app, name="air")


def _settle_help(typer_app: typer.Typer) -> None:
    """``-h`` and the whole-sentence command lists (``_Group``) for ``typer_app``'s groups, and
    theirs, however they were made."""
    for info in typer_app.registered_groups:
        if info.typer_instance is not None:
            info.typer_instance.info.context_settings = {
                **(info.typer_instance.info.context_settings or {}),
                **CONTEXT_SETTINGS,
            }
            info.cls = _Group
            _settle_help(info.typer_instance)


_settle_help(app)


def _print_version(value: bool) -> None:
    if value:
        import importlib.metadata

        from kernel import native
        from world import native_requested

        if not native.available():
            path = "not built: pure Python (reinstall with gcc to build it)"
        else:
            path = "on" if native_requested() else "built, off (WORLD_NATIVE=0)"
        version = importlib.metadata.version("world-kernel")
        console.print(f"world-kernel {version}; native step path: {path}", markup=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit"
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Print only answers: what a reading command prints, --json answers and "
            "errors (on stderr), not the lines an acting command prints about what it did",
        ),
    ] = False,
) -> None:
    """Drive a deterministic, event-sourced world of WASM reducers."""
    set_quiet(quiet)


def app_for(argv: Sequence[str]) -> typer.Typer:
    """The app that runs ``argv``: the root with only the command or group ``argv[1]`` names,
    when it names one. Typer turns every registered command into click's form on each run
    (reading each function's signature and annotations): ~50-85 ms of a command's start-up for
    all of ``world``'s, 1-10 ms for one. What the command does, prints and refuses is the same:
    its group is whole, and the root keeps its name, settings and callback. The root's own help
    (``world``, ``world --help``) gets every command and group, each group without its
    commands (``_outline``): that page shows a group's name and summary, never what is in it.
    Anything else (an option first, a name that is no command, shell completion) gets the
    whole app, so ``world --quiet ...`` and an unknown command's suggestions are as before."""
    if "_WORLD_COMPLETE" in os.environ:
        return app
    if all(arg in CONTEXT_SETTINGS["help_option_names"] for arg in argv[1:]):
        return _outline(app)
    if argv[1].startswith("-"):
        return app
    name = argv[1]
    commands = [c for c in app.registered_commands if _command_name(c) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    one = copy.copy(app)
    one.registered_commands = commands
    one.registered_groups = groups
    return one


def _outline(typer_app: typer.Typer) -> typer.Typer:
    """``typer_app`` with each of its groups emptied of commands: the same name, help, settings
    and callback, so the root's help lists it as the whole app's does (~2/3 of the commands are
    in groups, and typer need not build them to list the groups)."""
    outline = copy.copy(typer_app)
    outline.registered_groups = []
    for info in typer_app.registered_groups:
        group = copy.copy(info)
        if info.typer_instance is not None:
            group.typer_instance = copy.copy(info.typer_instance)
            group.typer_instance.registered_commands = []
            group.typer_instance.registered_groups = []
        outline.registered_groups.append(group)
    return outline


def _command_name(info: Any) -> str:
    return info.name or typer.main.get_command_name(info.callback.__name__)


def _annotations_evaluated(typer_app: typer.Typer) -> None:
    """The annotations of ``typer_app``'s command and group functions, evaluated once and kept
    as values. The command modules write them as strings (``from __future__ import
    annotations``), and typer evaluates every string four times as it builds a command (in a
    signature with ``eval_str`` and in ``get_type_hints``, each twice per command): building
    every command of ``world`` took ~50 ms so, ~15 ms from values (+6-9 ms here). What typer
    reads is the same: ``get_type_hints`` with ``include_extras`` is what the strings evaluate
    to, ``Annotated[..., typer.Option(...)]`` kept whole. A wrapped
    command (``cli.common.answers``) gets them on its wrapper and on the function itself, as
    ``inspect.signature`` reads the one and ``get_type_hints`` the other."""
    for callback in _callbacks(typer_app):
        evaluated = typing.get_type_hints(callback, include_extras=True)
        callback.__annotations__ = inspect.unwrap(callback).__annotations__ = evaluated


def _callbacks(typer_app: typer.Typer) -> Iterator[Callable[..., Any]]:
    for command in typer_app.registered_commands:
        if command.callback is not None:
            yield command.callback
    for info in (typer_app.registered_callback, typer_app.info):
        if info is not None and callable(info.callback):
            yield info.callback
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            yield from _callbacks(group.typer_instance)


SigintHandler = Callable[[int, FrameType | None], Any] | int | None


def run(sigint_handler: SigintHandler = None) -> None:
    """Run the app. Known errors are handled per command (one line, exit 1); anything else is a
    bug, still reported as one line unless ``WORLD_DEBUG=1`` asks for the traceback. Ctrl-C
    outside the commands' own handling exits 130 quietly. ``sigint_handler``, when given, is
    put back first, inside the ``try``: from then on Ctrl-C is ``KeyboardInterrupt`` and lands
    here, whenever it comes (``cli.main``'s start-up guard ends at that instant)."""
    try:
        if sigint_handler is not None:
            signal.signal(signal.SIGINT, sigint_handler)
        _settle_help(app)  # sub-typers added since this module was loaded too
        chosen = app_for(sys.argv)
        _annotations_evaluated(chosen)
        chosen()
    except KeyboardInterrupt:
        err_console.print(INTERRUPTED_LINE)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        if os.environ.get("WORLD_DEBUG") == "1":
            raise
        err_console.print(
            f"internal error: {type(exc).__name__}: {exc} "
            "(a bug in world; WORLD_DEBUG=1 shows the traceback)",
            soft_wrap=True,
            markup=False,
        )
        sys.exit(1)
