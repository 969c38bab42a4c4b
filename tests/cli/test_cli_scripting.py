"""The ``world`` CLI driven by scripts: ``journal tail`` (``-n``, ``--json``, ``--until``, plain
writes to a pipe, imported cells read through their schemas), ``ok`` in every ``--json``
answer, no wrapping when piped, ``-h``, ``--quiet``, ``state``'s exit code, ``send --file -``
and the completion options. What depends on the terminal runs the installed ``world`` script
in a subprocess (its stdout a pipe, or a pseudo-terminal)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import cbor2
import pytest
from typer.testing import CliRunner

from cli.main import app

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

WORLD_BIN = Path(sys.executable).with_name("world")
ENV = {k: v for k, v in os.environ.items() if k not in ("WORLD_DEBUG", "COLUMNS")}
runner = CliRunner()


def world_cli(*args: object, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def world(
    *args: object, code: int = 0, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed script, its stdout a pipe."""
    done = subprocess.run(
        [str(WORLD_BIN), *(str(a) for a in args)],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
        check=False,
        env={**ENV, **(env or {})},
    )
    assert done.returncode == code, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done


def lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A counter world: 5 events (keys a, b, a, c, a), run: 11 records, seqs 0..10."""
    path = tmp_path_factory.mktemp("scripting") / "w"
    assert world_cli("init", path, "--air", COUNTER_AIR)[0] == 0
    events = "".join(json.dumps(add(k, 1)) + "\n" for k in ("a", "b", "a", "c", "a"))
    code, _out, err = world_cli("send", path, EVENT, "--file", "-", stdin=events)
    assert code == 0, err
    assert world_cli("run", path)[0] == 0
    return path


# --- journal tail ----------------------------------------------------------------------------


def test_tail_piped_is_every_record_one_json_line_each(counter: Path) -> None:
    shown = lines(world("journal", "tail", counter).stdout)
    assert [r["seq"] for r in shown] == list(range(11))
    assert shown[0]["kind"] == "world.created"
    assert shown[0]["body"]["manifest_hash"].startswith("blake3:")  # full: blake3:<64 hex>
    assert len(shown[0]["body"]["manifest_hash"]) == len("blake3:") + 64


def test_tail_n_is_the_last_n_records(counter: Path) -> None:
    assert [r["seq"] for r in lines(world_cli("journal", "tail", counter, "-n", 3)[1])] == [
        8,
        9,
        10,
    ]
    assert world_cli("journal", "tail", counter, "-n", 0)[1] == ""
    assert len(lines(world_cli("journal", "tail", counter, "--last", 100)[1])) == 11


def test_tail_n_with_a_subject_is_the_last_n_it_takes(counter: Path) -> None:
    out = world_cli("journal", "tail", counter, "-n", 2, "--subject", "/world/event/**")[1]
    shown = lines(out)
    assert [r["kind"] for r in shown] == ["event.in", "event.in"]
    assert [r["body"]["value"]["key"] for r in shown] == ["c", "a"]  # the last two sent


def test_tail_n_counts_from_from(counter: Path) -> None:
    out = world_cli("journal", "tail", counter, "--from", 9, "-n", 5)[1]
    assert [r["seq"] for r in lines(out)] == [9, 10]


def test_tail_until_stops_after_that_seq(counter: Path) -> None:
    assert [r["seq"] for r in lines(world_cli("journal", "tail", counter, "--until", 2)[1])] == [
        0,
        1,
        2,
    ]
    out = world_cli("journal", "tail", counter, "--from", 4, "--until", 5)[1]
    assert [r["seq"] for r in lines(out)] == [4, 5]
    out = world_cli("journal", "tail", counter, "--until", 6, "-n", 2)[1]
    assert [r["seq"] for r in lines(out)] == [5, 6]


def test_tail_follow_until_the_last_seq_returns(counter: Path) -> None:
    done = world("journal", "tail", counter, "--follow", "--until", 10)  # not waiting for 11
    assert lines(done.stdout)[-1]["seq"] == 10


def test_tail_json_is_the_same_lines_and_errors_as_json(counter: Path) -> None:
    assert (
        world("journal", "tail", counter, "--json").stdout
        == world_cli("journal", "tail", counter)[1]
    )
    bad = world("journal", "tail", counter, "-n", -1, "--json", code=1)
    error = json.loads(bad.stdout)
    assert (error["ok"], error["error"]) == (False, "InvalidArgument")
    assert bad.stderr == ""
    plain = world("journal", "tail", counter, "-n", -1, code=1)
    assert plain.stdout == ""
    assert "error:" in plain.stderr


def test_tail_on_a_terminal_prints_the_same_lines(counter: Path) -> None:
    """The terminal path (the rich console, line by line) is kept and says the same."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [str(WORLD_BIN), "journal", "tail", str(counter)],
            stdout=follower,
            stderr=subprocess.DEVNULL,
            env=ENV,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=120) == 0
    finally:
        os.close(leader)
    shown = b"".join(chunks).decode().replace("\r\n", "\n")
    assert shown == world("journal", "tail", counter).stdout


def test_tail_renders_imported_cells_through_their_schemas(counter: Path, tmp_path: Path) -> None:
    exported = tmp_path / "a.cbor"
    assert world_cli("cells", "export", counter, COUNTER, "a", "-o", exported)[0] == 0
    other = tmp_path / "other"
    assert world_cli("init", other, "--air", COUNTER_AIR)[0] == 0
    code, _, err = world_cli("cells", "import", other, exported, "--trust")
    assert code == 0, err
    record = lines(world_cli("journal", "tail", other, "-n", 1)[1])[0]
    assert record["kind"] == "cell.imported"
    assert record["body"]["key"] == "a"  # not "6161" (hex)
    assert record["body"]["state"] == {"count": 3, "events": 3}
    assert record["body"]["reducer"] == COUNTER
    raw = lines(world_cli("journal", "tail", other, "-n", 1, "--raw")[1])[0]
    assert raw["body"]["key"] == "6161"  # --raw still shows the CBOR


def test_tail_of_a_served_world_says_the_same(counter: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "served"
    shutil.copytree(counter, copy)
    direct = {
        args: world("journal", "tail", copy, *args).stdout
        for args in (("-n", "3"), ("--until", "4"), ("-n", "1", "--subject", "/world/event/**"))
    }
    world("serve", copy, "--detach")
    try:
        for args, out in direct.items():
            assert world("journal", "tail", copy, *args).stdout == out, args
    finally:
        world("serve", copy, "--stop")


# --- every --json answer says ok; state's exit code ------------------------------------------


def test_json_answers_carry_ok(counter: Path) -> None:
    code, out, _ = world_cli("info", counter, "--json")
    assert code == 0
    assert json.loads(out)["ok"] is True
    code, out, _ = world_cli("state", counter, COUNTER, "--key", "a", "--json")
    answer = json.loads(out)
    assert (code, answer["ok"], answer["state"]) == (0, True, {"count": 3, "events": 3})
    assert cbor2.loads(bytes.fromhex(answer["state_cbor"])) == {"count": 3, "events": 3}


def test_state_of_no_cell_exits_1_with_or_without_json(counter: Path) -> None:
    code, out, err = world_cli("state", counter, COUNTER, "--key", "nobody")
    assert code == 1
    assert "no such state" in err
    code, out, _ = world_cli("state", counter, COUNTER, "--key", "nobody", "--json")
    answer = json.loads(out)
    assert code == 1
    assert (answer["ok"], answer["state"], answer["error"]) == (False, None, "NoSuchState")


# --- send --file - -----------------------------------------------------------------------------


def test_send_file_dash_reads_stdin(tmp_path: Path) -> None:
    path = tmp_path / "w"
    world("init", path, "--air", COUNTER_AIR)
    events = json.dumps(add("x", 2)) + "\n\n" + json.dumps(add("y", 5)) + "\n"
    sent = json.loads(world("send", path, EVENT, "--file", "-", "--json", stdin=events).stdout)
    assert sent == {"ok": True, "seqs": [1, 2], "duplicates": 0, "journaled": [1, 2]}
    bad = world("send", path, EVENT, "--file", "-", stdin='{"key": "z"\n', code=1)
    assert "-:1:" in bad.stderr  # the line named, as for a file


# --- piped output, -h, --quiet, completion -----------------------------------------------------


def test_piped_output_is_not_wrapped(tmp_path: Path) -> None:
    path = tmp_path / ("a-long-folder-name-so-that-the-line-is-far-longer-than-eighty" * 2) / "w"
    done = world("init", path, "--example", "counter", env={"COLUMNS": "80"})
    assert len(done.stdout.splitlines()) == 1
    assert "(manifest blake3:" in done.stdout  # not split over lines
    assert len(done.stdout.rstrip("\n")) > 80


def test_h_is_help_everywhere() -> None:
    for args in ((), ("journal",), ("journal", "tail"), ("cells", "ls"), ("send",)):
        short, long = world(*args, "-h").stdout, world(*args, "--help").stdout
        assert short == long, args
        assert "Usage: world" in short, args


def test_quiet_silences_information_not_answers_or_errors(tmp_path: Path) -> None:
    path = tmp_path / "w"
    assert world("-q", "init", path, "--air", COUNTER_AIR).stdout == ""
    assert world("--quiet", "send", path, EVENT, json.dumps(add("k", 1))).stdout == ""
    answer = world("-q", "send", path, EVENT, json.dumps(add("k", 1)), "--json").stdout
    assert json.loads(answer)["seqs"] == [2]
    failed = world("-q", "state", path, COUNTER, "--key", "nobody", code=1)
    assert "no such state" in failed.stderr
    assert len(lines(world("-q", "journal", "tail", path).stdout)) == 3  # data, not information
    assert "sent 1 event(s)" in world("send", path, EVENT, json.dumps(add("k", 1))).stdout


def test_completion_options_are_there() -> None:
    shown = world("--help").stdout
    assert "--install-completion" in shown
    assert "--show-completion" in shown
    script = world("--show-completion", env={"SHELL": "/bin/bash"}).stdout
    assert "_world_completion" in script


def _shape(command: Any) -> tuple[Any, ...]:
    """What a click command says and takes: its help, params, settings and subcommands."""
    params = [
        (p.name, tuple(p.opts), getattr(p, "help", None), p.required, repr(p.default))
        for p in command.params
    ]
    subcommands = {n: _shape(c) for n, c in getattr(command, "commands", {}).items()}
    return (command.name, command.help, params, command.context_settings, subcommands)


def test_a_command_runs_in_an_app_of_itself_alone_that_says_and_takes_the_same() -> None:
    """``cli.app.app_for``: a command starts without typer building every other command."""
    from typer.main import get_command

    from cli.app import app, app_for

    whole = get_command(app)
    assert len(whole.commands) > 20
    for name, command in whole.commands.items():
        alone = get_command(app_for(["world", name, "--help"]))
        assert list(alone.commands) == [name]
        assert _shape(alone.commands[name]) == _shape(command), name
        assert (alone.name, alone.help, alone.context_settings) == (
            whole.name,
            whole.help,
            whole.context_settings,
        )
        assert [p.name for p in alone.params] == [p.name for p in whole.params]
    for argv in (["world", "--quiet", "info"], ["world", "bogus"], ["world", "-h", "info"]):
        assert app_for(argv) is app, argv  # (the root's own help: tests/cli/test_cli_help.py)
