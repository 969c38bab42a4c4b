"""Every command works on a served world: it asks the server, reads beside it, or says the
world is served and what to do (``WorldServed``); none fails on the server's lock with a bare
``WorldLocked``.

The table names what each command of the typer app does to a world ``world serve`` holds; a
command added to the app without a row fails ``test_every_command_has_a_row``. Each row runs
in this process against one served counter world (the server, ``serve --detach``, is a process
of its own); the rows do not depend on each other (xdist spreads them over workers, each
with a served world of its own).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cli.main import app

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

WORLD_BIN = Path(sys.executable).with_name("world")
runner = CliRunner()
ENV = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
ENV.pop("WORLD_DEBUG", None)

ASKS, READS, REFUSED, FAILS = "asks the server", "reads beside it", "WorldServed", "fails cleanly"
NOT_A_WORLD = "takes no world folder"
SERVES = (
    "serves pages until stopped, reading beside the server (tests/cli/ui/test_ui.py runs it so)"
)

# name -> (what it does on a served world, its arguments). {w}: the served world, {new}: a fresh
# path, {air}: the counter's AIR. A FAILS row is a refusal that is not about the lock (an
# unknown id, a proposal that does not exist): it must say that, not "in use".
ROWS: dict[str, tuple[str, list[str]]] = {
    "send": (ASKS, ["send", "{w}", EVENT, json.dumps(add("s", 2))]),
    "state": (ASKS, ["state", "{w}", COUNTER, "--key", "a"]),
    "info": (ASKS, ["info", "{w}"]),
    "snapshot": (ASKS, ["snapshot", "{w}"]),
    "cells ls": (ASKS, ["cells", "ls", "{w}", COUNTER]),
    "cells show": (ASKS, ["cells", "show", "{w}", COUNTER, "a"]),
    "cells tail": (ASKS, ["cells", "tail", "{w}", COUNTER, "a"]),
    "cells export": (ASKS, ["cells", "export", "{w}", COUNTER, "a", "-o", "{new}"]),
    "cells import": (FAILS, ["cells", "import", "{w}", "{new}"]),
    "cells upgrade": (ASKS, ["cells", "upgrade", "{w}", COUNTER, "--all"]),
    "cells key": (READS, ["cells", "key", "{w}"]),
    "journal tail": (ASKS, ["journal", "tail", "{w}", "-n", "3"]),
    "journal verify": (READS, ["journal", "verify", "{w}"]),
    "replay": (READS, ["replay", "{w}", "--verify"]),
    "fork": (READS, ["fork", "{w}", "{new}", "--at", "1"]),
    "archive": (READS, ["archive", "{w}", "--to", "{new}"]),
    "effects ls": (READS, ["effects", "ls", "{w}"]),
    "effects approve": (FAILS, ["effects", "approve", "{w}", "ffff"]),
    "effects deny": (FAILS, ["effects", "deny", "{w}", "ffff"]),
    "runs ls": (READS, ["runs", "ls", "{w}"]),
    "runs show": (FAILS, ["runs", "show", "{w}", "99"]),
    "runs cancel": (FAILS, ["runs", "cancel", "{w}", "99"]),
    "dead-letters ls": (READS, ["dead-letters", "ls", "{w}"]),
    "dead-letters show": (FAILS, ["dead-letters", "show", "{w}", "99"]),
    "dead-letters retry": (FAILS, ["dead-letters", "retry", "{w}", "99"]),
    "dead-letters drop": (FAILS, ["dead-letters", "drop", "{w}", "99"]),
    "upgrade ls": (ASKS, ["upgrade", "ls", "{w}"]),
    "upgrade show": (FAILS, ["upgrade", "show", "{w}", "999"]),
    "upgrade propose": (FAILS, ["upgrade", "propose", "{w}", "--air", "{new}"]),
    "upgrade approve": (FAILS, ["upgrade", "approve", "{w}", "999"]),
    "upgrade apply": (FAILS, ["upgrade", "apply", "{w}", "999"]),
    "upgrade shadow": (FAILS, ["upgrade", "shadow", "{w}", "999"]),
    "serve": (FAILS, ["serve", "{w}"]),
    "run": (REFUSED, ["run", "{w}", "--until-idle"]),
    "step": (REFUSED, ["step", "{w}"]),
    "migrate cells": (FAILS, ["migrate", "cells", "{w}", COUNTER, "--key-field", "key"]),
    "why": (READS, ["why", "{w}", COUNTER, "a"]),
    "ui": (SERVES, []),
    "init": (NOT_A_WORLD, []),
    "demo": (NOT_A_WORLD, []),
    "examples": (NOT_A_WORLD, []),
    "examples copy": (NOT_A_WORLD, []),
    "validate": (NOT_A_WORLD, []),
    "air normalize": (NOT_A_WORLD, []),
    "reducer build": (NOT_A_WORLD, []),
    "reducer check": (NOT_A_WORLD, []),
    "reducer new": (NOT_A_WORLD, []),
    "sdk include": (NOT_A_WORLD, []),
    **{
        f"cluster {name}": (NOT_A_WORLD, [])  # a partitioned world's folder (world.cluster)
        for name in ("init", "up", "down", "send", "run", "state", "info", "cells ls")
    },
    "cluster replay": (NOT_A_WORLD, []),
    "cluster upgrade": (NOT_A_WORLD, []),
}


def _commands() -> set[str]:
    found: set[str] = set()

    def walk(command: object, name: str) -> None:
        subs = getattr(command, "commands", None)
        if subs is None or getattr(command, "invoke_without_command", False):
            found.add(name)
        for sub_name, sub in (subs or {}).items():
            walk(sub, f"{name} {sub_name}".strip())

    walk(typer.main.get_command(app), "")
    return found


def test_every_command_has_a_row() -> None:
    assert sorted(ROWS) == sorted(_commands())


def _world(*args: str) -> subprocess.CompletedProcess[str]:
    """The command run in this process (``CliRunner``: no interpreter start per row); the
    server it talks to is a process of its own (``serve --detach``)."""
    result = runner.invoke(app, list(args))
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("served")
    w = tmp / "w"
    assert _world("init", str(w), "--air", str(COUNTER_AIR)).returncode == 0
    assert _world("send", str(w), EVENT, json.dumps(add("a", 1))).returncode == 0
    detached = subprocess.run(
        [str(WORLD_BIN), "serve", str(w), "--detach"], capture_output=True, text=True, env=ENV
    )
    assert detached.returncode == 0, detached.stderr
    try:
        yield w
    finally:
        _world("serve", str(w), "--stop")


@pytest.mark.parametrize(
    "name", [n for n, (kind, _) in ROWS.items() if kind not in (NOT_A_WORLD, SERVES)]
)
def test_the_command_works_on_a_served_world_or_says_what_to_do(name: str, served: Path) -> None:
    kind, args = ROWS[name]
    fresh = served.parent / f"new-{len(list(served.parent.iterdir()))}"
    filled = [a.replace("{w}", str(served)).replace("{new}", str(fresh)) for a in args]
    done = _world(*filled)
    said = done.stdout + done.stderr
    assert "Traceback" not in said
    assert "WorldLocked" not in said, (name, said)
    assert "world is in use" not in said, (name, said)
    if kind in (ASKS, READS):
        assert done.returncode == 0, (name, said)
    elif kind == REFUSED:
        assert done.returncode == 1
        assert "is served by `world serve`" in done.stderr
        assert f"world serve {served} --stop" in done.stderr
    else:
        assert done.returncode == 1, (name, said)
    if kind not in (ASKS, READS):  # a refusal left the server answering
        assert _world("info", str(served), "--json").returncode == 0
