"""The test zygote (``tests/zygote.py``): a command through it is what the script gives.

Most tests run a stand-in console script (``FAKE``: it exits, raises, echoes, reports its
process, or waits, as its arguments say) both through a zygote's shim and as itself, and compare
the two; the rest run ``world`` itself both ways. A few check what only the shim does: it runs the
script itself (the same pid) when there is no zygote or the environment differs in a variable a
preloaded module read at import, and passes signals on.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from zygote import WORLD_SCRIPT, Zygote, running

from worldkit import COUNTER_AIR

WAIT_S = 60.0
ENV = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
ENV.pop("WORLD_DEBUG", None)
ENV.pop("PYTHONUNBUFFERED", None)  # buffered stdio, as a user's; the zygotes here run in ENV

FAKE = """#!{python}
import json, os, resource, signal, sys, time

what = sys.argv[1]
if what == "exit":
    sys.exit(int(sys.argv[2]))
elif what == "message":
    sys.exit(sys.argv[2])
elif what == "raise":
    raise ValueError("boom")
elif what == "echo":
    data = sys.stdin.read()
    print("out:", data.upper(), end="")
    print("err:", data, file=sys.stderr, end="")
elif what == "report":
    streams = {{
        name: [s.encoding, s.errors, s.line_buffering, s.write_through, s.name, s.mode]
        for name, s in (("stdin", sys.stdin), ("stdout", sys.stdout), ("stderr", sys.stderr))
    }}
    handlers = {{}}
    for number in signal.valid_signals():
        try:
            handlers[int(number)] = repr(signal.getsignal(number))
        except (OSError, ValueError):
            pass
    umask = os.umask(0)
    print(json.dumps({{
        "pid": os.getpid(), "argv": sys.argv, "orig_argv": sys.orig_argv, "path0": sys.path[0],
        "env": dict(os.environ), "cwd": os.getcwd(), "umask": umask, "signals": handlers,
        "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "streams": streams, "main": __name__, "file": __file__,
        "limits": {{n: resource.getrlimit(getattr(resource, n)) for n in dir(resource)
                    if n.startswith("RLIMIT_")}},
    }}))
elif what == "kill":
    os.kill(os.getpid(), int(sys.argv[2]))
elif what == "wait":
    print(os.getpid(), flush=True)
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 60)
elif what == "unflushed":
    sys.stdout.write("no newline, never flushed by hand")
    os.write(1, b"first ")
"""


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("fake") / "world"
    script.write_text(FAKE.format(python=sys.executable))
    script.chmod(0o755)
    return script


@pytest.fixture(scope="module")
def fake_zygote(fake: Path) -> Iterator[Zygote]:
    with running(fake, ENV) as zygote:
        zygote.wait_ready()
        yield zygote


@pytest.fixture(scope="module")
def world_zygote() -> Iterator[Zygote]:
    with running(WORLD_SCRIPT, ENV) as zygote:
        zygote.wait_ready()
        yield zygote


def run(program: Path, *args: object, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("env", ENV)
    return subprocess.run(
        [str(program), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
        **kwargs,
    )


def both(
    zygote: Zygote, script: Path, *args: object, **kwargs: Any
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The command through the zygote's shim, and the script itself."""
    return run(zygote.bin / "world", *args, **kwargs), run(script, *args, **kwargs)


def same(
    zygote: Zygote, script: Path, *args: object, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    shim, real = both(zygote, script, *args, **kwargs)
    assert (shim.returncode, shim.stdout, shim.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )
    return shim


def report(
    zygote: Zygote, env: dict[str, str] = ENV, **kwargs: Any
) -> tuple[dict[str, Any], dict[str, Any], int]:
    """What the stand-in reports through the zygote and as itself; the shim's pid."""
    shim = subprocess.Popen(
        [str(zygote.bin / "world"), "report"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,
    )
    out, err = shim.communicate(timeout=WAIT_S)
    assert shim.returncode == 0, err
    real = run(zygote.script, "report", env=env, **kwargs)
    assert real.returncode == 0, real.stderr
    return json.loads(out), json.loads(real.stdout), shim.pid


# --- exit codes and output -------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 2, 3, 255])
def test_an_exit_code_comes_back(fake_zygote: Zygote, fake: Path, code: int) -> None:
    assert same(fake_zygote, fake, "exit", code).returncode == code


def test_system_exit_with_a_message_prints_it_and_exits_1(fake_zygote: Zygote, fake: Path) -> None:
    done = same(fake_zygote, fake, "message", "went wrong")
    assert (done.returncode, done.stderr) == (1, "went wrong\n")


def test_an_exception_prints_the_scripts_traceback_and_exits_1(
    fake_zygote: Zygote, fake: Path
) -> None:
    done = same(fake_zygote, fake, "raise")
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback (most recent call last):\n")
    assert f'File "{fake}"' in done.stderr
    assert done.stderr.endswith("ValueError: boom\n")


def test_stdin_stdout_and_stderr_are_the_callers(fake_zygote: Zygote, fake: Path) -> None:
    done = same(fake_zygote, fake, "echo", input="hello\nworld\n")
    assert (done.stdout, done.stderr) == ("out: HELLO\nWORLD\n", "err: hello\nworld\n")


def test_what_is_left_in_a_buffer_is_flushed_at_the_end(fake_zygote: Zygote, fake: Path) -> None:
    done = same(fake_zygote, fake, "unflushed")
    assert done.stdout == "first no newline, never flushed by hand"


@pytest.mark.parametrize("number", [signal.SIGKILL, signal.SIGTERM, signal.SIGABRT])
def test_a_child_killed_by_a_signal_is_a_shim_killed_by_it(
    fake_zygote: Zygote, fake: Path, number: int
) -> None:
    assert same(fake_zygote, fake, "kill", int(number)).returncode == -number


# --- the process -----------------------------------------------------------------------------


def test_the_child_is_a_fresh_process_as_the_script_is(
    fake_zygote: Zygote, fake: Path, tmp_path: Path
) -> None:
    """argv, environment, cwd, umask, signal handlers and mask, stdio, ``__main__``: as the
    script's own, from another process than the shim."""
    env = {**ENV, "ZYGOTE_TEST_VALUE": "päivää", "HOME": str(tmp_path)}

    def setup() -> None:
        os.umask(0o027)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])

    through, real, shim_pid = report(fake_zygote, env=env, cwd=tmp_path, preexec_fn=setup)
    assert through.pop("pid") != shim_pid
    real.pop("pid")
    assert through == real
    assert through["env"]["ZYGOTE_TEST_VALUE"] == "päivää"
    assert through["cwd"] == str(tmp_path)
    assert through["umask"] == 0o027
    assert through["signals"][str(int(signal.SIGHUP))] == repr(signal.SIG_IGN)
    assert int(signal.SIGUSR2) in through["mask"]
    assert through["main"] == "__main__"


def test_an_ignored_sigint_stays_ignored(fake_zygote: Zygote) -> None:
    def ignore() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    through, real, _pid = report(fake_zygote, preexec_fn=ignore)
    assert through["signals"] == real["signals"]
    assert through["signals"][str(int(signal.SIGINT))] == repr(signal.SIG_IGN)


@pytest.mark.parametrize("socket_file", [False, True], ids=["no-socket", "nobody-listening"])
def test_without_a_zygote_the_shim_runs_the_script_itself(
    fake: Path, tmp_path: Path, socket_file: bool
) -> None:
    unstarted = Zygote(tmp_path, fake)  # its shim, but no server
    if socket_file:
        with socket.socket(socket.AF_UNIX) as stale:
            stale.bind(str(unstarted.socket))  # bound, never listening: refused
    through, real, shim_pid = report(unstarted)
    assert through.pop("pid") == shim_pid  # exec'd: the same process
    real.pop("pid")
    assert through == real


def test_another_address_space_limit_means_the_script_itself(fake_zygote: Zygote) -> None:
    """``world`` picks its engine by ``RLIMIT_AS``, and a child's memory is the warm
    zygote's: a memory limit must hold from the start."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, resource.RLIM_INFINITY))

    through, real, shim_pid = report(fake_zygote, preexec_fn=limit)
    assert through.pop("pid") == shim_pid
    real.pop("pid")
    assert through == real


def test_the_child_takes_the_callers_other_limits(fake_zygote: Zygote) -> None:
    """Open files (Ray raises the soft limit in the test process that runs it), stack, core:
    the child sets what the caller has, as a fresh process would inherit it."""

    def limit() -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    through, real, shim_pid = report(fake_zygote, preexec_fn=limit)
    assert through.pop("pid") != shim_pid  # forked by the zygote
    real.pop("pid")
    assert through["limits"] == real["limits"]
    assert through == real


def test_a_variable_read_at_import_that_differs_means_the_script_itself(
    fake_zygote: Zygote,
) -> None:
    """typer's ``rich_utils`` reads ``TERMINAL_WIDTH`` when the zygote imports it; the
    interpreter reads ``PYTHON*`` at start-up."""
    for name, value in (("TERMINAL_WIDTH", "50"), ("PYTHONWARNINGS", "ignore")):
        through, _real, shim_pid = report(fake_zygote, env={**ENV, name: value})
        assert through["pid"] == shim_pid, name
    through, _real, shim_pid = report(fake_zygote, env={**ENV, "COLUMNS": "51"})
    assert through["pid"] != shim_pid  # read when a console is made: in the child


def started(shim: subprocess.Popen[str]) -> int:
    """The child's pid, from its first line."""
    assert shim.stdout is not None
    return int(shim.stdout.readline())


def gone(pid: int) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def waiting(zygote: Zygote) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(zygote.bin / "world"), "wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


@pytest.mark.parametrize(
    ("number", "code"), [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, -signal.SIGINT)]
)
def test_a_signal_to_the_shim_reaches_the_child(
    fake_zygote: Zygote, fake: Path, number: int, code: int
) -> None:
    """An uncaught ``KeyboardInterrupt`` ends the process by SIGINT, as CPython does."""
    ends: list[tuple[int, str]] = []
    for program in (fake_zygote.bin / "world", fake):
        proc = subprocess.Popen(
            [str(program), "wait"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        child = started(proc)
        assert (child != proc.pid) == (program != fake)
        proc.send_signal(number)
        _out, err = proc.communicate(timeout=WAIT_S)
        ends.append((proc.returncode, err.splitlines()[-1] if err else ""))
        assert gone(child)
    assert ends[0] == ends[1]
    assert ends[0][0] == code


def test_a_killed_shim_takes_its_child_along(fake_zygote: Zygote) -> None:
    proc = waiting(fake_zygote)
    child = started(proc)
    proc.kill()
    proc.communicate(timeout=WAIT_S)
    assert gone(child)


# --- world itself ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    w = tmp_path_factory.mktemp("zygote-world") / "w"
    done = run(WORLD_SCRIPT, "init", w, "--air", COUNTER_AIR)
    assert done.returncode == 0, done.stderr
    return w


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--help"], id="help"),
        pytest.param(["info", "{w}", "--json"], id="info-json"),
        pytest.param(["info", "{w}"], id="info-table"),
        pytest.param(["state", "{w}", "demo/Nope@1"], id="error"),
        pytest.param(["state", "{w}", "demo/Nope@1", "--json"], id="error-json"),
        pytest.param(["send", "--nope"], id="usage-error"),
    ],
)
def test_world_says_the_same_through_the_zygote(
    world_zygote: Zygote, counter: Path, args: list[str]
) -> None:
    argv = [a.replace("{w}", str(counter)) for a in args]
    same(world_zygote, WORLD_SCRIPT, *argv)


def test_world_help_follows_the_callers_columns(world_zygote: Zygote) -> None:
    narrow = same(world_zygote, WORLD_SCRIPT, "--help", env={**ENV, "COLUMNS": "60"})
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 60


def test_a_variable_read_when_used_is_taken_by_the_child(fake_zygote: Zygote) -> None:
    """``PYTHONBREAKPOINT`` (which Ray sets in the process that starts it) is read by each
    ``breakpoint()``, not at start-up: a command with another value still forks."""
    through, real, shim_pid = report(fake_zygote, env={**ENV, "PYTHONBREAKPOINT": "0"})
    assert through.pop("pid") != shim_pid
    real.pop("pid")
    assert through["env"]["PYTHONBREAKPOINT"] == "0"
    assert through == real
