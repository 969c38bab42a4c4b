"""Shared CLI plumbing: consoles, JSON output, and turning ``WorldError`` into one red line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import typer
from rich.console import Console

from air.errors import ManifestError, WorldError

__all__ = ["console", "emit_json", "err_console", "fail", "handle_errors"]

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def fail(message: str) -> NoReturn:
    err_console.print(f"[red]error:[/red] {message}", soft_wrap=True)
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
        if json_output:
            emit_json({"ok": False, "error": type(exc).__name__, "detail": str(exc)})
            raise typer.Exit(1) from exc
        fail(f"{type(exc).__name__}: {exc}")
    except OSError as exc:
        fail(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
