"""Every command that prints takes ``--json``, and its answer agrees with its exit code.

The table below names, for every command of the typer app, an invocation that fails and, where
one is cheap and repeatable, one that succeeds. Each runs twice, without and with ``--json``:
the exit codes are the same, and with ``--json`` stdout is exactly one JSON object whose ``ok``
is true exactly when the exit code is 0 (an error object names its class and code). A command
added to the app without a row here fails ``test_every_command_has_a_row``, so none can skip
this. Commands without ``--json`` are in ``NO_JSON``, each with why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from plans_kit import await_receipt, chain, end, http_get, http_grant, plan, plan_world
from typer.testing import CliRunner

from cli.main import app
from world import World

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT, add

runner = CliRunner()

GO = "t/Go@1"
ACCOUNT_EVENT = "demo/AccountEvent@1"
VALUE = json.dumps(add("a", 1))

STREAMS = frozenset(("journal tail", "cells tail"))
"""Commands whose ``--json`` answer is JSON Lines, one object per record (an error is still one
error object)."""

NO_JSON: dict[str, str] = {
    "demo": "a guided tour printed for a person; the worlds it leaves are read with --json",
}

# name -> (a failing invocation, a succeeding one or None). Placeholders: {w} a counter world,
# {a} a world with two plan runs parked on approval, {b} an account world with a refused
# withdrawal, {letter} that letter's id, {air} the counter's AIR, {none} a path that does not
# exist, {new} a fresh path (a new one for each invocation), {c} a partitioned counter world of
# two partitions (not up) with the cell a.
ROWS: dict[str, tuple[list[str], list[str] | None]] = {
    "air normalize": (
        ["air", "normalize", "{none}", "-o", "{new}"],
        ["air", "normalize", "{air}", "-o", "{new}"],
    ),
    "archive": (["archive", "{none}", "--to", "{new}"], ["archive", "{w}", "--to", "{new}"]),
    "cells export": (
        ["cells", "export", "{w}", COUNTER, "nobody", "-o", "{new}"],
        ["cells", "export", "{w}", COUNTER, "a", "-o", "{new}"],
    ),
    "cells import": (["cells", "import", "{w}", "{none}"], None),
    "cells key": (["cells", "key", "{none}"], ["cells", "key", "{w}"]),
    "cells ls": (["cells", "ls", "{none}", COUNTER], ["cells", "ls", "{w}", COUNTER]),
    "cells show": (
        ["cells", "show", "{w}", COUNTER, "nobody"],
        ["cells", "show", "{w}", COUNTER, "a"],
    ),
    "cells tail": (
        ["cells", "tail", "{none}", COUNTER, "a"],
        ["cells", "tail", "{w}", COUNTER, "a"],
    ),
    "cells upgrade": (
        ["cells", "upgrade", "{w}", COUNTER],
        ["cells", "upgrade", "{w}", COUNTER, "--all"],
    ),
    "dead-letters drop": (["dead-letters", "drop", "{b}", "999"], None),
    "dead-letters ls": (["dead-letters", "ls", "{none}"], ["dead-letters", "ls", "{b}"]),
    "dead-letters retry": (["dead-letters", "retry", "{b}", "999"], None),
    "dead-letters show": (
        ["dead-letters", "show", "{b}", "999"],
        ["dead-letters", "show", "{b}", "{letter}"],
    ),
    "demo": (["demo", "--keep", "{w}"], None),
    "effects approve": (["effects", "approve", "{a}", "ffff"], None),
    "effects deny": (["effects", "deny", "{a}", "ffff"], None),
    "effects ls": (["effects", "ls", "{none}"], ["effects", "ls", "{a}"]),
    "examples": (["examples", "--bogus"], ["examples"]),
    "examples copy": (
        ["examples", "copy", "no_such_example", "{new}"],
        ["examples", "copy", "counter", "{new}"],
    ),
    "fork": (["fork", "{none}", "{new}", "--at", "1"], ["fork", "{w}", "{new}", "--at", "1"]),
    "info": (["info", "{none}"], ["info", "{w}"]),
    "init": (["init", "{new}", "--air", "{none}"], ["init", "{new}", "--air", "{air}"]),
    "journal tail": (["journal", "tail", "{none}"], ["journal", "tail", "{w}", "-n", "2"]),
    "journal verify": (["journal", "verify", "{none}"], ["journal", "verify", "{w}"]),
    "migrate cells": (["migrate", "cells", "{w}", COUNTER, "--key-field", "key"], None),
    "reducer build": (["reducer", "build", "{none}"], None),
    "reducer check": (
        ["reducer", "check", "{none}"],
        ["reducer", "check", str(ROOT / "reducers" / "counter" / "counter.wasm")],
    ),
    "reducer new": (
        ["reducer", "new", "Not-A-Name", "{new}"],
        ["reducer", "new", "tally", "{new}"],
    ),
    "replay": (["replay", "{none}"], ["replay", "{w}", "--verify"]),
    "run": (["run", "{none}"], ["run", "{w}", "--until-idle"]),
    "runs cancel": (["runs", "cancel", "{a}", "99"], None),
    "runs ls": (["runs", "ls", "{a}", "--status", "bogus"], ["runs", "ls", "{a}"]),
    "runs show": (["runs", "show", "{a}", "99"], ["runs", "show", "{a}", "0"]),
    "sdk include": (["sdk", "include", "--bogus"], ["sdk", "include"]),
    "send": (["send", "{w}", EVENT, '{"no": 1}'], ["send", "{w}", EVENT, VALUE]),
    "serve": (["serve", "{none}"], None),
    "snapshot": (["snapshot", "{none}"], ["snapshot", "{w}"]),
    "state": (
        ["state", "{w}", COUNTER, "--key", "nobody"],
        ["state", "{w}", COUNTER, "--key", "a"],
    ),
    "step": (["step", "{none}"], ["step", "{w}"]),
    "upgrade apply": (["upgrade", "apply", "{w}", "999"], None),
    "upgrade approve": (["upgrade", "approve", "{w}", "999"], None),
    "upgrade ls": (["upgrade", "ls", "{none}"], ["upgrade", "ls", "{w}"]),
    "upgrade propose": (["upgrade", "propose", "{w}", "--air", "{none}"], None),
    "upgrade shadow": (["upgrade", "shadow", "{w}", "999"], None),
    "upgrade show": (["upgrade", "show", "{w}", "999"], None),
    "validate": (["validate", "{none}"], ["validate", "{air}"]),
    "ui": (
        ["ui", "{none}"],
        None,
    ),  # it serves until stopped: tests/cli/ui/test_ui.py reads its line
    "why": (["why", "{w}", COUNTER, "nobody"], ["why", "{w}", COUNTER, "a"]),
    "cluster init": (
        ["cluster", "init", "{new}", "--air", "{none}", "--partitions", "2"],
        ["cluster", "init", "{new}", "--air", "{air}", "--partitions", "2"],
    ),
    "cluster up": (
        ["cluster", "up", "{none}"],
        None,
    ),  # Ray: tests/world/cluster/test_cluster_cli.py
    "cluster down": (["cluster", "down", "{c}"], None),  # not up
    "cluster send": (["cluster", "send", "{c}", EVENT, '{"no": 1}'], None),
    "cluster run": (["cluster", "run", "{none}"], ["cluster", "run", "{c}"]),
    "cluster state": (
        ["cluster", "state", "{c}", COUNTER, "--key", "nobody"],
        ["cluster", "state", "{c}", COUNTER, "--key", "a"],
    ),
    "cluster info": (["cluster", "info", "{none}"], ["cluster", "info", "{c}"]),
    "cluster cells ls": (
        ["cluster", "cells", "ls", "{none}", COUNTER],
        ["cluster", "cells", "ls", "{c}", COUNTER],
    ),
    "cluster replay": (["cluster", "replay", "{none}"], ["cluster", "replay", "{c}"]),
    "cluster upgrade": (["cluster", "upgrade", "{c}", "--air", "{none}"], None),
}


def _commands() -> dict[str, Any]:
    """Every command of the app by its full name (``cells ls``; a group that runs alone, as
    ``examples``, is one too), with its click command."""
    found: dict[str, Any] = {}

    def walk(command: Any, name: str) -> None:
        subs = getattr(command, "commands", None)
        if subs is None or getattr(command, "invoke_without_command", False):
            found[name] = command
        for sub_name, sub in (subs or {}).items():
            walk(sub, f"{name} {sub_name}".strip())

    walk(typer.main.get_command(app), "")
    return found


def test_every_command_has_a_row_and_takes_json_or_says_why_not() -> None:
    commands = _commands()
    assert sorted(ROWS) == sorted(commands)
    for name, command in commands.items():
        opts = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert ("--json" in opts) == (name not in NO_JSON), name


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("answers")
    w = tmp / "w"
    with World.create(w, COUNTER_AIR) as world:
        world.send_many([(EVENT, add("a", 2)), (EVENT, add("b", 3))])
        world.run_until_idle()
    fetch = [
        http_get("fetch", {"ref": "@plan.input.url"}, "req"),
        await_receipt("wait", "req", "r"),
    ]
    air = plan_world(
        tmp / "plan_air",
        schemas={GO: {"record": {"url": "text"}}},
        plans=[plan("t/go@1", GO, [*fetch, end()], chain("fetch", "wait", "end"))],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=[http_grant(["127.0.0.1"])],
        rules=[{"when": {"effect_kind": "http.request"}, "decision": "require_approval"}],
    )
    a = tmp / "a"
    with World.create(a, air) as world:
        world.send_many(
            [(GO, {"url": "http://127.0.0.1:9/x"}), (GO, {"url": "http://127.0.0.1:9/y"})]
        )
        world.run_until_idle()
    b = tmp / "b"
    with World.create(b, ROOT / "manifests" / "account") as world:
        world.send(ACCOUNT_EVENT, {"key": "z", "op": {"$tag": "Withdraw", "$value": 1}})
        world.run_until_idle()
        (letter,) = world.kernel.dead_letters.letters
    from world.cluster import LocalCluster, init_cluster

    c = tmp / "c"
    init_cluster(c, COUNTER_AIR, 2)
    with LocalCluster(c) as cluster:
        cluster.send_many([(EVENT, add("a", 2))])
        cluster.run_until_idle()
    return {
        "w": str(w),
        "c": str(c),
        "a": str(a),
        "b": str(b),
        "letter": letter.id,
        "air": str(COUNTER_AIR),
        "none": str(tmp / "no_such_thing"),
        "tmp": str(tmp),
    }


def _run(args: list[str], places: dict[str, str], json_output: bool) -> tuple[int, str]:
    fresh = Path(places["tmp"]) / f"new-{len(list(Path(places['tmp']).iterdir()))}"
    known = {**places, "new": str(fresh)}
    filled = [re.sub(r"\{(\w+)\}", lambda m: known.get(m[1], m[0]), a) for a in args]
    result = runner.invoke(app, [*filled, "--json"] if json_output else filled)
    return result.exit_code, result.stdout


def _one_object(stdout: str) -> dict[str, Any]:
    obj = json.loads(stdout)  # exactly one JSON value, and nothing else, on stdout
    assert isinstance(obj, dict)
    return obj


@pytest.mark.parametrize("name", sorted(n for n in ROWS if n not in NO_JSON))
def test_json_and_exit_codes_agree(name: str, worlds: dict[str, str]) -> None:
    failing, succeeding = ROWS[name]
    code, _ = _run(failing, worlds, json_output=False)
    json_code, out = _run(failing, worlds, json_output=True)
    assert code == json_code == 1, (name, out)
    answer = _one_object(out)
    assert answer["ok"] is False
    assert isinstance(answer["error"], str)
    assert isinstance(answer["code"], str)
    if succeeding is None:
        return
    code, _ = _run(succeeding, worlds, json_output=False)
    json_code, out = _run(succeeding, worlds, json_output=True)
    assert code == json_code == 0, (name, out)
    if name in STREAMS:
        lines = out.splitlines()
        assert lines
        assert all(isinstance(json.loads(line), dict) for line in lines)
    else:
        assert _one_object(out)["ok"] is True


def test_a_usage_error_under_json_is_an_error_object() -> None:
    result = runner.invoke(app, ["info", "--no-such-option", "--json"])
    assert result.exit_code == 1
    answer = _one_object(result.stdout)
    assert (answer["ok"], answer["error"], answer["code"]) == (False, "UsageError", "usage")
    assert "--no-such-option" in answer["detail"]


READS: frozenset[str] = frozenset(
    (
        "state",
        "info",
        "why",
        "cells ls",
        "cells show",
        "cells tail",
        "cells key",
        "journal tail",
        "runs ls",
        "runs show",
        "effects ls",
        "dead-letters ls",
        "dead-letters show",
        "upgrade ls",
        "upgrade show",
        "cluster state",
        "cluster info",
        "cluster cells ls",
    )
)
"""Commands that read: what they print is their answer, which ``--quiet`` does not silence
(``cli.common.answers``); the other commands' lines are information about what they did."""


@pytest.mark.parametrize("name", sorted(n for n in READS if ROWS[n][1] is not None))
def test_quiet_does_not_silence_a_reading_commands_answer(
    name: str, worlds: dict[str, str]
) -> None:
    """(``upgrade show`` has no success row: the worlds here have no proposal.)"""
    succeeding = ROWS[name][1]
    assert succeeding is not None
    code, loud = _run(succeeding, worlds, json_output=False)
    quiet_code, quiet = _run(["-q", *succeeding], worlds, json_output=False)
    assert code == quiet_code == 0, (name, quiet)
    assert loud.strip(), name
    assert quiet == loud, name
