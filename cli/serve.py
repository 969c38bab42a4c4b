"""``world serve DIR [--stop | --detach]``: keep a world open with its adapters live, answering
the other commands over ``<world>/control.sock`` (``world.serve._server``), or stop the server
that does.

``--detach`` starts the same server as a new process in its own session and returns once it
answers on its socket, so that the next command (in a script, say) finds it there: ``serve &``
returns at once, and a command that follows it before the server listens opens the world itself
or finds it locked. The detached server's output goes to ``<world>/serve.log`` (appended; the
first lines say where it listens, the last why it stopped). If it exits before it listens, its
log is printed and the exit status is 1; after ``DETACH_WAIT_S`` without a socket it is stopped
(SIGTERM) and the same is reported.

``--effects live|replay|stub|deny`` is ``world run``'s option (``world.effects._modes``): a fork
is served with its effects stubbed unless ``--effects live`` was given for it once; a detached
server is started with the same option.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from cli.archive import ArchiveOpt, VerifyEveryOpt, background
from cli.common import console, emit_json, err_console, fail, handle_errors
from cli.core import EffectsChoice, EffectsOpt, effects_mode

if TYPE_CHECKING:
    from world.serve import HttpSettings

__all__ = ["DETACH_WAIT_S", "SERVE_LOG", "serve"]

DETACH_WAIT_S: Final = 60.0
"""How long ``serve --detach`` waits for the new server to listen (it opens the world first:
recovery of a big world after a crash takes a while)."""

SERVE_LOG: Final = "serve.log"
"""In the world folder: a detached server's stdout and stderr."""


def serve(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    stop: Annotated[
        bool,
        typer.Option("--stop", help="Stop the server: drain, checkpoint, and wait for it"),
    ] = False,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach",
            help=f"Serve from a new background process; return once it listens (its output: "
            f"<world>/{SERVE_LOG})",
        ),
    ] = False,
    effects: EffectsOpt = None,
    archive_to: ArchiveOpt = None,
    verify_every: VerifyEveryOpt = None,
    http: Annotated[
        str | None,
        typer.Option(
            "--http",
            metavar="HOST:PORT",
            help="Answer the operations as JSON over HTTP too (docs/API.md); port 0: any free",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="The HTTP bearer token, in a file only you can read (else WORLD_TOKEN, else "
            "one generated into <world>/http.token)",
        ),
    ] = None,
    allow_remote: Annotated[
        bool,
        typer.Option("--http-allow-remote", help="Let --http bind an address not loopback"),
    ] = False,
    http_rate: Annotated[
        float | None,
        typer.Option(
            "--http-rate", min=1.0, help="HTTP requests a second, over all callers (default 5000)"
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Serve a world in the foreground until stopped (Ctrl-C, SIGTERM or --stop)."""
    if stop:
        _stop(directory, json_output)
        return
    http_args: list[str] = []
    if http is not None:
        http_args = ["--http", http]
        http_args += [] if http_rate is None else ["--http-rate", str(http_rate)]
        http_args += ["--http-allow-remote"] if allow_remote else []
        http_args += [] if token_file is None else ["--token-file", str(token_file)]
    elif token_file is not None or allow_remote:
        with handle_errors(json_output):
            fail("--token-file and --http-allow-remote go with --http HOST:PORT")
    if detach:
        _detach(directory, archive_to, verify_every, json_output, effects, http_args)
        return
    from rich.markup import escape

    from world.serve import serve as serve_world  # lazy: keeps the other commands quick
    from world.serve import served, socket_path

    with handle_errors(json_output):
        if served(directory):  # said plainly, not as the lock the running server holds
            fail(f"a server already answers on {socket_path(directory)}")
        settings = (
            None
            if http is None
            else _http_settings(directory, http, token_file, allow_remote, http_rate)
        )

    def on_http(url: str) -> None:
        assert settings is not None
        if json_output:
            said = {"ok": True, "http": url, "token_from": settings.token_source}
            sys.stdout.write(json.dumps(said, sort_keys=True) + "\n")  # one line: read, then go
            sys.stdout.flush()
        else:
            console.print(
                f"http on {url} (bearer token: {settings.token_source})",
                soft_wrap=True,
                markup=False,
            )
            sys.stdout.flush()  # a detached server's log says where it listens at once

    def listening(path: Path) -> None:
        console.print(
            f"serving {directory} on {path}; stop with: world serve {directory} --stop",
            soft_wrap=True,
            markup=False,
        )

    with handle_errors(json_output), ExitStack() as watching:

        def listening_and_watching(path: Path) -> None:
            listening(path)  # the world is open: its background work may start
            watching.enter_context(background(directory, archive_to, verify_every))

        def say(line: str) -> None:
            err_console.print(f"[yellow]notice:[/yellow] {escape(line)}", soft_wrap=True)

        report = serve_world(
            directory,
            on_listening=listening_and_watching,
            effects=effects_mode(effects),
            on_notice=say,
            http=settings,
            on_http=on_http,
        )
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


def _http_settings(
    directory: Path, http: str, token_file: Path | None, allow_remote: bool, rate: float | None
) -> HttpSettings:
    """``--http HOST:PORT`` and its token, checked before the world is opened."""
    from world import World
    from world.serve import HTTP_RATE_PER_S, HttpSettings, check_bind, server_token

    rate = HTTP_RATE_PER_S if rate is None else rate
    host, sep, port_text = http.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        fail(f"--http {http}: give HOST:PORT, such as 127.0.0.1:8321 (port 0: any free one)")
    check_bind(host, allow_remote)
    World.check_directory(directory)
    token, source = server_token(directory, token_file)
    return HttpSettings(host, int(port_text), token, source, rate, max(1, int(rate)))


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


def _detach(
    directory: Path,
    archive_to: Path | None,
    verify_every: float | None,
    json_output: bool,
    effects: EffectsChoice | None = None,
    http_args: list[str] | None = None,
) -> None:
    from world import World
    from world.serve import served, socket_path

    with handle_errors(json_output):
        World.check_directory(directory)
        if served(directory):
            fail(f"a server already answers on {socket_path(directory)}")
        command = [sys.executable, "-m", "cli", "serve", str(directory)]
        if archive_to is not None:
            command += ["--archive", str(archive_to)]
        if verify_every is not None:
            command += ["--verify-every", str(verify_every)]
        if effects is not None:
            command += ["--effects", effects.value]
        command += http_args or []
        log_path = directory / SERVE_LOG
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        start = os.lseek(log_fd, 0, os.SEEK_END)
        try:
            child = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                start_new_session=True,  # not stopped by the terminal's Ctrl-C, nor its hangup
            )
        finally:
            os.close(log_fd)
        deadline = time.monotonic() + DETACH_WAIT_S
        while child.poll() is None and not served(directory):
            if time.monotonic() > deadline:
                child.terminate()
                child.wait()
                break
            time.sleep(0.05)
        if child.poll() is not None:
            with open(log_path, "rb") as log:
                log.seek(start)
                said = log.read().decode("utf-8", "replace").strip().splitlines()
            last = said[-1] if said else "no output"
            fail(f"the server did not start (exit {child.returncode}): {last} (see {log_path})")
    if json_output:
        emit_json({"ok": True, "pid": child.pid, "socket": str(socket_path(directory))})
    else:
        console.print(
            f"serving {directory} from process {child.pid}; its output: {log_path}; "
            f"stop with: world serve {directory} --stop",
            soft_wrap=True,
            markup=False,
        )
