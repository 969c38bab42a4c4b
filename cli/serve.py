"""``world serve DIR [--stop]``: keep a world open with its adapters live, answering the other
commands over ``<world>/control.sock`` (``world.serve._server``), or stop the server that does."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from cli.common import console, emit_json, err_console, handle_errors

__all__ = ["serve"]


def serve(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    stop: Annotated[
        bool,
        typer.Option("--stop", help="Stop the server: drain, checkpoint, and wait for it"),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Serve a world in the foreground until stopped (Ctrl-C, SIGTERM or --stop)."""
    if stop:
        _stop(directory, json_output)
        return
    from world.serve import serve as serve_world  # lazy: keeps the other commands quick

    def listening(path: Path) -> None:
        console.print(
            f"serving {directory} on {path}; stop with: world serve {directory} --stop",
            soft_wrap=True,
            markup=False,
        )

    with handle_errors(json_output):
        report = serve_world(directory, on_listening=listening)
    for notice in report.notices:
        err_console.print(f"[yellow]notice:[/yellow] {escape(notice)}", soft_wrap=True)
    if json_output:
        emit_json(
            {
                "ok": True,
                "requests": report.requests,
                "steps": report.loop.steps,
                "snapshot": report.snapshot,
            }
        )
    else:
        console.print(
            f"stopped after {report.requests} request(s); checkpoint {report.snapshot}",
            soft_wrap=True,
        )


def _stop(directory: Path, json_output: bool) -> None:
    from air.errors import WrongMode
    from world.serve import Client, served, socket_path

    with handle_errors(json_output):
        if not served(directory):
            raise WrongMode("stop the server", f"no server answers on {socket_path(directory)}")
        with Client(socket_path(directory)) as client:
            result = client.call("stop")
    if json_output:
        emit_json({"ok": True, **result})
    else:
        console.print(
            f"stopped {directory}: drained {result['steps']} step(s), "
            f"checkpoint {result['snapshot']}",
            soft_wrap=True,
            markup=False,
        )
