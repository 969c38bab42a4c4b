"""Ctrl-C at any moment of a ``world`` command's start-up: exit 130 and one short line on stderr,
never a traceback (``cli.main``'s docstring, "Start-up and Ctrl-C").

The moments are pinned, not timed: the child process sends SIGINT to itself from an import hook
at the instant a given module starts to import (the app's typer, a command module, the world
library a command imports), or at the N-th module imported once ``main`` has begun (``cli.app``
is the first), so each test lands where it says on any machine and under any load. What comes
before ``main`` (Python's own start-up, ``site``, the import of ``cli.main``) runs no code of ours
and is not tested here: a signal sent at a wall-clock moment would land there now and then.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COUNTER_AIR = ROOT / "manifests" / "counter"

# Sends SIGINT to this process when TRIGGER starts to import, then runs `world ARGS` through the
# given entry ("main": cli.main.main as the console script does; "module": python -m cli).
CHILD = """
import os, runpy, signal, sys
entry, trigger, *args = sys.argv[1:]

class Hook:
    count = 0
    def find_spec(self, name, path=None, target=None):
        if trigger.isdigit():
            self.count += name == "cli.app" or self.count > 0
            hit = self.count == int(trigger)
        else:
            hit = name == trigger
        if hit:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Hook())
sys.argv = ["world", *args]
if entry == "main":
    from cli.main import main
    main()
else:
    runpy.run_module("cli", run_name="__main__", alter_sys=True)
"""
APP_LINE = "interrupted; nothing acknowledged was lost"


def _child(entry: str, trigger: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", CHILD, entry, trigger, *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("entry", ["main", "module"])
@pytest.mark.parametrize("trigger", ["typer", "air.errors", "cli.validate"])
def test_sigint_while_the_app_is_imported_exits_130_with_one_line(entry: str, trigger: str) -> None:
    done = _child(entry, trigger, "validate", str(COUNTER_AIR))
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "interrupted\n")


@pytest.mark.parametrize("entry", ["main", "module"])
def test_sigint_once_the_command_runs_is_the_apps_one_line(entry: str) -> None:
    done = _child(entry, "air._loader", "validate", str(COUNTER_AIR))
    assert (done.returncode, done.stdout) == (130, "")
    assert done.stderr.splitlines() == [APP_LINE]


def test_sigint_in_argument_parsing_is_the_apps_one_line() -> None:
    # `--version` is an eager option: its callback, which imports kernel.native, runs while
    # click parses the arguments.
    done = _child("main", "kernel.native", "--version")
    assert (done.returncode, done.stdout) == (130, "")
    assert done.stderr.splitlines() == [APP_LINE]


def test_without_the_signal_the_child_runs_the_command() -> None:
    done = _child("main", "no.such.module", "validate", str(COUNTER_AIR), "--json")
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["manifest_hash"].startswith("blake3:")


@pytest.mark.parametrize("nth", [1, 2, 10, 40, 120, 250, 10**6])
def test_sigint_at_the_nth_import_after_main_begins_is_one_line_and_130(nth: int) -> None:
    done = _child("main", str(nth), "validate", str(COUNTER_AIR), "--json")
    assert "Traceback" not in done.stderr
    if done.returncode == 0:  # the command had finished its imports before the N-th
        assert nth == 10**6
        assert json.loads(done.stdout)["manifest_hash"].startswith("blake3:")
    else:
        assert (done.returncode, done.stdout) == (130, "")
        assert done.stderr.splitlines() in (["interrupted"], [APP_LINE])
