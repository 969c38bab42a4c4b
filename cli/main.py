"""The ``world`` typer app: registers each command module's commands."""

from __future__ import annotations

import typer

from cli import validate

__all__ = ["app", "main"]

app = typer.Typer(
    name="world",
    help="Drive a deterministic, event-sourced world of WASM reducers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("validate")(validate.validate)


@app.callback()
def _root() -> None:
    """Drive a deterministic, event-sourced world of WASM reducers."""


def main() -> None:
    app()
