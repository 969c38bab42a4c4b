"""The ``world`` typer app: registers each command module's commands."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence
from typing import Annotated, Any, Final

import typer
from typer.core import TyperGroup

# The command modules import the world, kernel and AIR modules (wasmtime, pydantic, httpx)
# inside their commands, so that `world --help` and each command load only what they use
# (issue 9): keep it so, a module-level import of them here or there costs ~0.4 s everywhere.
from cli import (
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
    validate,
)
from cli.common import EXIT_INTERRUPTED, console, err_console

__all__ = ["app", "main"]


class _OneLineErrors(TyperGroup):
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
            if type(exc).__name__ == "NoArgsIsHelpError":
                console.print(exc.format_message(), markup=False, highlight=False)
                sys.exit(0)
            err_console.print(f"error: {exc.format_message()}", markup=False, soft_wrap=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=_OneLineErrors,
    name="world",
    help="Drive a deterministic, event-sourced world of WASM reducers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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
app.add_typer(cells.app, name="cells")
app.add_typer(journal.app, name="journal")
app.add_typer(effects.app, name="effects")
app.add_typer(moves.app, name="migrate")  # importing cli.moves also adds `cells export|import`
app.add_typer(examples.app, name="examples")
app.add_typer(reducer.app, name="reducer")
app.add_typer(reducer.sdk_app, name="sdk")


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
) -> None:
    """Drive a deterministic, event-sourced world of WASM reducers."""


COLLECTOR_THRESHOLDS: Final = (100_000, 20, 100)
"""The collector's thresholds for a ``world`` process. The default first threshold (700
allocations) makes it run every few events of a big send or replay, over a heap that only
grows: measured on the issue-4 workload, native path, same window, a threshold of 50,000 took
send from 46,500 to 67,700 events/s and replay from 13,700 to 22,400 (steps unchanged). At
100,000 a run of 10,000 events over 10,000 cells leaves the young generation below it (a batch's
deliveries and mailboxes die before it fills): 1,000,000 events over 10,000 cells spent 0.03 s
in the collector instead of ~1 s, and over 1,000,000 new cells 1.6 s instead of 3.4 (its
callbacks timed, three runs each). The cost is cyclic garbage (rare here: a failed step's
traceback) waiting up to 100,000 allocations to go; 200,000 saved ~0.4 s more at a million
cells for twice that. The process is ours, so it is set in ``main``, not in the world library (a program embedding it
keeps its own policy); ``tools/bench`` runs the kernel with it, as ``world`` does."""


def main() -> None:
    """The console entry point. Known errors are handled per command (one line, exit 1);
    anything else is a bug, still reported as one line unless ``WORLD_DEBUG=1`` asks for the
    traceback. Ctrl-C outside the commands' own handling exits 130 quietly."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted; nothing acknowledged was lost")
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
