"""The ``world`` typer app: registers each command module's commands."""

from __future__ import annotations

import typer

from cli import cells, core, demo, journal, replay, validate

__all__ = ["app", "main"]

app = typer.Typer(
    name="world",
    help="Drive a deterministic, event-sourced world of WASM reducers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("validate")(validate.validate)
app.command("init")(core.init)
app.command("send")(core.send)
app.command("step")(core.step)
app.command("run")(core.run)
app.command("state")(core.state)
app.command("info")(core.info)
app.command("snapshot")(core.snapshot)
app.command("replay")(replay.replay)
app.command("demo")(demo.demo)
app.add_typer(cells.app, name="cells")
app.add_typer(journal.app, name="journal")


@app.callback()
def _root() -> None:
    """Drive a deterministic, event-sourced world of WASM reducers."""


def main() -> None:
    app()
