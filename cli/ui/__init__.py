"""``world ui``: a local web inspector of one world (its journal, cells, runs, effects and the
why-chain of a cell's state), served on 127.0.0.1 only.

Parts: ``_app`` (the Starlette app: routes, the token gate, the approve/deny form), ``_views``
(what each page shows, as JSON-able dicts; ``/api/<page>`` returns the same), ``_dag`` (a
plan's steps and edges laid out for SVG), ``templates/`` (Jinja2, rendered on the server).

Choices: loopback only (there is no ``--host``); a random token in the printed URL, as Jupyter
does, and a request without it is 403; read-only unless started with ``--allow-approvals``,
and even then the only act is approve/deny of a parked intent, journaled as ``world effects
approve|deny`` journals it. Pages open the world read-only per request, so the inspector works
beside ``world run`` and on a served world and never takes the writer's lock.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from cli.common import console, fail, handle_errors

__all__ = ["ui"]


def ui(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (0: any free one)")
    ] = 0,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the page in the default browser")
    ] = False,
    allow_approvals: Annotated[
        bool,
        typer.Option("--allow-approvals", help="Show approve and deny buttons on parked intents"),
    ] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Say where it listens as one JSON line, then serve")
    ] = False,
) -> None:
    """Serve a local web inspector of the world until Ctrl-C: world, journal (live), cells with
    their timelines and time travel, plan runs drawn on their plan, effects, and why a cell
    holds its state. Binds 127.0.0.1 only; the printed URL carries the access token."""
    import secrets
    import socket

    import uvicorn

    from cli.core import opened
    from cli.ui._app import make_app

    with handle_errors(json_output), opened(directory, readonly=True):
        pass  # the errors a wrong directory gets, before anything listens
    token = secrets.token_urlsafe(24)
    app = make_app(directory, token, allow_approvals=allow_approvals)
    # IPPROTO_TCP named so asyncio sets TCP_NODELAY per connection (world.serve's HTTP, too)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror} (--port 0 takes any free one)")
    sock.listen(128)  # before the URL is printed: a browser opening it at once is queued
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/?token={token}"
    if json_output:
        answer = {"ok": True, "url": url, "port": port, "token": token}
        sys.stdout.write(json.dumps(answer, sort_keys=True) + "\n")  # one line: read it, then go
    else:
        line = f"inspecting {directory} at {url}"
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    sys.stdout.flush()
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn stops on Ctrl-C, then raises it
        server.run(sockets=[sock])
    if not json_output:
        console.print("stopped", markup=False, highlight=False)
