"""The in-process CLI tests build the ``world`` command tree once, not once per call.

``typer.testing.CliRunner.invoke`` turns the typer app into click commands on every call
(``typer.main.get_command``), which walks every command's signature and evaluates its
annotations: ~85 ms for ``world``'s tree, more than most commands take to run, on each of the
suite's thousands of ``invoke``s. The click command it builds holds no state of an invocation
(each gets a fresh context), so the first one built for a typer app is used again for that app
(kept per app object, weakly: a test that builds its own small app gets its own).

A process running ``world`` builds the tree once anyway; this changes nothing it does.
"""

from __future__ import annotations

import weakref
from typing import Any

import typer.main
import typer.testing

_built: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_build = typer.main.get_command


def _get_command_once(typer_instance: Any) -> Any:
    command = _built.get(typer_instance)
    if command is None:
        command = _built[typer_instance] = _build(typer_instance)
    return command


def install() -> None:
    """Make ``CliRunner.invoke`` (which reads ``typer.testing._get_command``) build once."""
    typer.testing._get_command = _get_command_once  # type: ignore[attr-defined]
