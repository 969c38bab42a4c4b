"""Time travel: ``world cells show --at``, ``world cells tail`` and ``world fork``."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from air import cbor
from cli import history
from cli.main import app
from kernel.journal import JournalRecord
from world import World
from world.history import _timetravel as timetravel
from world.history._timetravel import through

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

runner = CliRunner()
WORLD_BIN = Path(sys.executable).with_name("world")
FORK_REGISTERED = "fork" in {c.name for c in app.registered_commands}

# Until cli/main.py registers ``fork``, it is driven through a local app holding just it.
_fork_app = typer.Typer()
_fork_app.command("fork")(history.fork)


@_fork_app.callback()
def _fork_root() -> None:
    """A group, so that ``fork`` is a subcommand as in the real app."""


def world_cli(*args: Any) -> tuple[int, str, str]:
    target = _fork_app if args[0] == "fork" and not FORK_REGISTERED else app
    result = runner.invoke(target, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


Snapshot = tuple[int, dict[str, Any]]
KEYS = ("a", "b")


def _states(world: World) -> dict[str, Any]:
    return {k: world.state(COUNTER, k) for k in KEYS}


def build_counter(path: Path) -> list[Snapshot]:
    """A small counter world built one record at a time; after each record, the live states
    of every key (the oracle that ``cells show --at`` must agree with)."""
    seen: list[Snapshot] = []
    with World.create(path, COUNTER_AIR) as world:
        seen.append((world.journal.seq_next - 1, _states(world)))
        for batch in ([add("a", 2), add("b", 5)], [add("a", 3)], [add("b", 1), add("a", 10)]):
            for value in batch:
                world.send(EVENT, value)
                world.commit()
                seen.append((world.journal.seq_next - 1, _states(world)))
            while world.step(1):
                seen.append((world.journal.seq_next - 1, _states(world)))
    return seen


@pytest.fixture
def counter(tmp_path: Path) -> tuple[Path, list[Snapshot]]:
    path = tmp_path / "w"
    return path, build_counter(path)


def _journal(path: Path) -> list[dict[str, Any]]:
    with World.open(path, readonly=True) as world:
        return [r.as_map() for r in world.journal.read(0)]


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode() + f.read_bytes())
    return h.hexdigest()


def test_cells_show_at_agrees_with_the_live_state_at_every_position(
    counter: tuple[Path, list[Snapshot]],
) -> None:
    path, seen = counter
    positions = [seq for seq, _ in seen]
    assert positions == list(range(len(seen)))  # every position has its oracle
    for seq, states in seen:
        for key in KEYS:
            code, out, err = world_cli("cells", "show", path, COUNTER, key, "--at", seq, "--json")
            shown = json.loads(out)
            assert code == (0 if states[key] is not None else 1), err  # no cell yet: exit 1
            assert shown["ok"] is (states[key] is not None)
            assert (shown["at"], shown["through"], shown["state"]) == (seq, seq, states[key])


def test_cells_show_at_the_last_position_equals_the_current_state_raw_too(
    counter: tuple[Path, list[Snapshot]],
) -> None:
    path, seen = counter
    last = seen[-1][0]
    now = json.loads(world_cli("cells", "show", path, COUNTER, "a", "--raw", "--json")[1])
    then = json.loads(
        world_cli("cells", "show", path, COUNTER, "a", "--at", last, "--raw", "--json")[1]
    )
    assert now["state"] == then["state"]
    assert isinstance(now["state"], str)
    bytes.fromhex(now["state"])


def test_cells_show_at_agrees_with_a_fork_opened_at_that_position(
    counter: tuple[Path, list[Snapshot]], tmp_path: Path
) -> None:
    path, seen = counter
    for seq in (2, 5, seen[-1][0]):
        fork = tmp_path / f"f{seq}"
        assert world_cli("fork", path, "--at", seq, fork)[0] == 0
        with World.open(fork) as world:  # its first open rebuilds from the journal
            replayed = world.state(COUNTER, "a")
        shown = json.loads(world_cli("cells", "show", path, COUNTER, "a", "--at", seq, "--json")[1])
        assert shown["state"] == replayed


def test_cells_tail_lists_exactly_the_cells_steps_with_their_source_events(
    counter: tuple[Path, list[Snapshot]],
) -> None:
    path, _ = counter
    journal = _journal(path)
    code, out, err = world_cli("cells", "tail", path, COUNTER, "a", "--json")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    steps = [line for line in lines if line["role"] == "step"]
    inputs = [line for line in lines if line["role"] == "input"]
    expected_inputs = [
        r["seq"]
        for r in journal
        if r["kind"] == "event.in" and cbor.loads(r["body"]["value"])["key"] == "a"
    ]
    assert [i["seq"] for i in inputs] == expected_inputs
    assert [i["body"]["value"]["op"]["$value"] for i in inputs] == [2, 3, 10]
    cell_steps = [
        r["seq"] for r in journal if r["kind"] == "step" and r["body"]["key"] == cbor.dumps("a")
    ]
    assert [s["seq"] for s in steps] == cell_steps
    for step in steps:
        assert step["body"]["key"] == "a"
        assert step["source"]["seq"] == step["body"]["src"]
        assert step["source"]["kind"] == "event.in"
        assert step["source"]["body"]["value"]["key"] == "a"
    assert [line["seq"] for line in lines] == sorted(line["seq"] for line in lines)


def test_cells_tail_renders_a_table(counter: tuple[Path, list[Snapshot]]) -> None:
    path, _ = counter
    code, out, _ = world_cli("cells", "tail", path, COUNTER, "b")
    assert code == 0
    assert "input" in out
    assert "step" in out


def test_fork_keeps_the_prefix_runs_other_inputs_and_leaves_the_original_alone(
    counter: tuple[Path, list[Snapshot]], tmp_path: Path
) -> None:
    path, seen = counter
    original = _journal(path)
    before = _digest(path)
    fork = tmp_path / "fork"
    code, out, err = world_cli("fork", path, "--at", 4, fork, "--json")
    assert code == 0, err
    assert json.loads(out) == {
        "ok": True,
        "path": str(fork),
        "seq": 4,
        "through": 4,
        "records": 5,
        "extended": False,
        "effects": "stub",
    }
    assert _journal(fork) == original[:5]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fork", "w"]  # no staging left
    with World.open(fork) as world:
        assert world.state(COUNTER, "a") == seen[4][1]["a"]
        world.send(EVENT, add("a", 100))
        world.run_until_idle()
        assert world.state(COUNTER, "a") == {"count": 102, "events": 2}
    assert world_cli("replay", fork, "--verify")[0] == 0
    assert _digest(path) == before
    assert _journal(path) == original
    with World.open(path, readonly=True) as world:
        assert world.state(COUNTER, "a") == seen[-1][1]["a"]


def test_fork_into_an_empty_folder_is_allowed(
    counter: tuple[Path, list[Snapshot]], tmp_path: Path
) -> None:
    path, _ = counter
    (tmp_path / "empty").mkdir()
    assert world_cli("fork", path, "--at", 0, tmp_path / "empty")[0] == 0
    assert len(_journal(tmp_path / "empty")) == 1


def _rec(seq: int, kind: str) -> JournalRecord:
    return JournalRecord(seq, "/world/x", kind, {})


def test_a_position_inside_a_tick_group_extends_to_the_end_of_the_tick() -> None:
    kinds = ["world.created", "event.in", "step", "effect.queued", "effect.queued", "event.in"]
    records = [_rec(i, k) for i, k in enumerate(kinds)]
    assert [r.seq for r in through(iter(records), 2)] == [0, 1, 2, 3, 4]
    assert [r.seq for r in through(iter(records), 3)] == [0, 1, 2, 3, 4]
    assert [r.seq for r in through(iter(records), 1)] == [0, 1]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("cells", "show", "{w}", "demo/Nope@1", "a", "--at", "1"), "UnknownName"),
        (("cells", "show", "{w}", COUNTER, "a", "--at", "999"), "SeqPastEnd"),
        (("cells", "tail", "{w}", "demo/Nope@1", "a"), "UnknownName"),
        (("fork", "{w}", "--at", "999", "{t}/new"), "SeqPastEnd"),
        (("fork", "{w}", "--at", "1", "{w}"), "WorldExists"),
        (("cells", "show", "{t}/nothing", COUNTER, "a", "--at", "1"), "NotAWorld"),
    ],
)
def test_errors_are_one_line_and_exit_1(
    counter: tuple[Path, list[Snapshot]], tmp_path: Path, args: tuple[str, ...], error: str
) -> None:
    path, _ = counter
    before = _digest(path)
    filled = [a.format(w=path, t=tmp_path) for a in args]
    code, out, err = world_cli(*filled)
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert error in err
    assert "Traceback" not in out + err
    assert _digest(path) == before
    assert not (tmp_path / "new").exists()


def test_past_the_end_names_both_numbers(counter: tuple[Path, list[Snapshot]]) -> None:
    path, seen = counter
    code, out, _ = world_cli("cells", "show", path, COUNTER, "a", "--at", 999, "--json")
    assert code == 1
    fields = json.loads(out)["fields"]
    assert fields == {"seq": 999, "seq_last": seen[-1][0]}


@pytest.mark.skipif(
    not FORK_REGISTERED, reason="cli/main.py does not register `fork` / import cli.history yet"
)
def test_the_installed_world_binary_travels_and_forks(
    counter: tuple[Path, list[Snapshot]], tmp_path: Path
) -> None:
    path, seen = counter

    def run(*args: Any) -> subprocess.CompletedProcess[str]:
        argv = [str(WORLD_BIN), *(str(a) for a in args)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    shown = run("cells", "show", path, COUNTER, "b", "--at", 3, "--json")
    assert shown.returncode == (0 if seen[3][1]["b"] is not None else 1), shown.stderr
    assert json.loads(shown.stdout)["state"] == seen[3][1]["b"]
    tail = run("cells", "tail", path, COUNTER, "b", "--json")
    assert tail.returncode == 0, tail.stderr
    assert [json.loads(x)["role"] for x in tail.stdout.splitlines()].count("step") == 2
    forked = run("fork", path, "--at", 3, tmp_path / "f")
    assert forked.returncode == 0, forked.stderr
    assert run("replay", tmp_path / "f", "--verify").returncode == 0
    past = run("fork", path, "--at", 999, tmp_path / "g")
    assert (past.returncode, len(past.stderr.strip().splitlines())) == (1, 1)


def test_the_fast_path_answers_without_replaying_the_world(
    counter: tuple[Path, list[Snapshot]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each position's answer comes from re-executing only the cell's own steps, checked
    against their journaled state hashes: the full replay is never built."""
    path, seen = counter

    def no_full_replay(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("cell_at fell back to a full replay")

    monkeypatch.setattr(World, "blank_kernel", no_full_replay)
    for seq, states in seen:
        for key in KEYS:
            assert timetravel.state_at(path, COUNTER, key, seq) == states[key]


def test_a_step_the_fast_path_cannot_prove_falls_back_to_the_full_replay(
    counter: tuple[Path, list[Snapshot]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, seen = counter
    monkeypatch.setattr(timetravel, "_delivery", lambda _source: None)
    seq, states = seen[-1]
    assert timetravel.state_at(path, COUNTER, KEYS[0], seq) == states[KEYS[0]]
