"""``world serve DIR --detach``: the server runs on in its own process, and the command returns
only once it answers on its socket, so the next command of a script finds it (``serve &``
gives no such moment)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from world import World
from world.serve import served

from worldkit import COUNTER_AIR, EVENT, add

WORLD_BIN = Path(sys.executable).parent / "world"


def world(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WORLD_BIN), *map(str, args)], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def w(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "w"
    World.create(path, COUNTER_AIR).close()
    yield path
    if served(path):
        world("serve", path, "--stop")


def test_detach_returns_once_the_server_listens_and_the_next_command_uses_it(w: Path) -> None:
    started = world("serve", w, "--detach", "--json")
    assert started.returncode == 0, started.stderr
    reply = json.loads(started.stdout)
    assert reply["ok"] is True
    assert reply["socket"] == str(w / "control.sock")
    assert served(w)  # at once: no wait, no retry
    sent = world("send", w, EVENT, json.dumps(add("a", 4)))
    assert sent.returncode == 0, sent.stderr
    stopped = world("serve", w, "--stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not served(w)
    log = (w / "serve.log").read_text()
    assert f"serving {w}" in log
    assert "stopped after" in log
    assert (w / "serve.log").stat().st_mode & 0o777 == 0o600
    with World.open(w, readonly=True) as opened:
        assert opened.state("demo/Counter@1", "a")["count"] == 4


def test_a_detached_server_that_cannot_start_is_reported_with_its_reason(w: Path) -> None:
    with World.open(w):  # a writer holds the world: the server cannot open it
        done = world("serve", w, "--detach")
    assert done.returncode == 1
    assert "the server did not start (exit 1)" in done.stderr
    assert "in use" in done.stderr  # the detached child's own error line, from its log
    assert "serve.log" in done.stderr
    assert not served(w)


def test_detach_beside_a_running_server_starts_no_second_one(w: Path) -> None:
    assert world("serve", w, "--detach").returncode == 0
    second = world("serve", w, "--detach")
    assert second.returncode == 1
    assert "a server already answers" in second.stderr
    assert served(w)  # the first one is untouched


def test_detach_on_a_folder_that_is_not_a_world_starts_nothing(tmp_path: Path) -> None:
    done = world("serve", tmp_path, "--detach")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "serve.log").exists()
