"""Dead letters an operator acts on: ``world dead-letters ls|show|retry|drop`` and the journaled
``deadletter.retried`` / ``deadletter.dropped`` records (``kernel._deadletters``).

The CLI path runs the commands in this process (``tests/cli/test_cli_subprocess.py`` runs them
through the installed ``world`` script), on the account example: a
refused withdrawal is shown with its reason, retried after a deposit makes it acceptable, and
another is dropped; the same commands under ``WORLD_NATIVE=1`` and ``0`` write the same journal
bytes, and each world replays (``replay --verify``) under the other path. In process: ids of
several letters made by one record, what cannot be retried, the kept window, snapshots, and
replay refusing a record that names no letter.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from air import cbor
from air.errors import UnknownName, UsageError
from cli.main import app
from kernel import KernelLimits
from kernel._deadletters import DROPPED, RETRIED
from kernel.errors import ReplayDivergence
from kernel.journal import JournalRecord
from world import World
from world.history import verify_world

from worldkit import ROOT, const_wasm, manifest, module, output, schema, write_world_air

runner = CliRunner()
ACCOUNT_AIR = ROOT / "manifests" / "account"
EVENT = "demo/AccountEvent@1"
ACCOUNT = "demo/Account@1"


def world(*args: object, native: str = "1", code: int = 0) -> subprocess.CompletedProcess[str]:
    """``world ARGS`` in this process (``CliRunner``, ``WORLD_NATIVE`` set for the call: no
    interpreter start per command); ``tests/cli/test_cli_subprocess.py`` runs the same commands
    through the installed script."""
    result = runner.invoke(app, [str(a) for a in args], env={"WORLD_NATIVE": native})
    done = subprocess.CompletedProcess(
        [str(a) for a in args], result.exit_code, result.stdout, result.stderr
    )
    assert done.returncode == code, (done.stdout, done.stderr, result.exception)
    assert "Traceback" not in done.stderr
    return done


def world_json(*args: object, native: str = "1") -> Any:
    return json.loads(world(*args, "--json", native=native).stdout)


def op(key: str, tag: str, n: int) -> str:
    return json.dumps({"key": key, "op": {"$tag": tag, "$value": n}})


def _journal_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((path / "journal").glob("*.log")))


def _operate(w: Path, native: str) -> None:
    """The operator's session on the account world ``w``, every command its own process."""
    world("send", w, EVENT, op("alice", "Deposit", 5), native=native)
    world("send", w, EVENT, op("alice", "Withdraw", 9), native=native)
    world("run", w, "--until-idle", native=native)
    listed = world_json("dead-letters", "ls", w, native=native)
    assert (listed["total"], listed["kept"], listed["steps_failed"]) == (1, 1, 1)
    (row,) = listed["letters"]
    assert (row["code"], row["key"], row["retryable"]) == ("refused", "alice", True)
    shown = world_json("dead-letters", "show", w, row["id"], native=native)["letter"]
    assert shown["detail"] == "overdraft: balance 5, asked 9"
    assert shown["value"] == {"key": "alice", "op": {"$tag": "Withdraw", "$value": 9}}
    text = world("dead-letters", "show", w, row["id"], native=native).stdout
    assert "overdraft: balance 5, asked 9" in text
    info = world_json("info", w, native=native)
    assert (info["steps_failed"], info["dead_letters_total"], info["dead_letters_kept"]) == (
        1,
        1,
        1,
    )

    # The fix: a deposit makes the withdrawal acceptable; the retry runs it again.
    world("send", w, EVENT, op("alice", "Deposit", 5), native=native)
    world("run", w, "--until-idle", native=native)
    retried = world_json("dead-letters", "retry", w, row["id"], native=native)
    assert retried["action"] == "retried"
    assert world_json("dead-letters", "ls", w, native=native)["letters"] == []
    world("run", w, "--until-idle", native=native)
    assert world_json("state", w, ACCOUNT, "--key", "alice", native=native)["state"] == {
        "balance": 1
    }

    # Another refusal, dropped: off the list, still counted.
    world("send", w, EVENT, op("bob", "Withdraw", 3), native=native)
    world("run", w, "--until-idle", native=native)
    (second,) = world_json("dead-letters", "ls", w, native=native)["letters"]
    assert second["detail"] == "overdraft: balance 0, asked 3"
    world("dead-letters", "drop", w, second["id"], native=native)
    after = world_json("dead-letters", "ls", w, native=native)
    assert (after["total"], after["kept"], after["letters"]) == (2, 0, [])
    world("dead-letters", "retry", w, second["id"], native=native, code=1)  # gone
    world("snapshot", w, native=native)
    world("replay", w, "--verify", native=native)


def test_refuse_show_retry_drop_through_the_cli_and_both_paths_write_the_same_bytes(
    tmp_path: Path,
) -> None:
    world("init", tmp_path / "base", "--air", ACCOUNT_AIR)
    for flag in ("1", "0"):
        shutil.copytree(tmp_path / "base", tmp_path / flag)
        _operate(tmp_path / flag, flag)
    assert _journal_bytes(tmp_path / "1") == _journal_bytes(tmp_path / "0")
    world("replay", tmp_path / "1", "--verify", native="0")
    world("replay", tmp_path / "0", "--verify", native="1")
    with World.open(tmp_path / "1", readonly=True) as opened:
        kinds = [r.kind for r in opened.journal.read(0)]
        bodies = [r.body for r in opened.journal.read(0) if r.kind in (RETRIED, DROPPED)]
    assert kinds.count(RETRIED) == kinds.count(DROPPED) == 1
    assert bodies[0] == {
        "id": "4",
        "reducer": ACCOUNT,
        "key": cbor.dumps("alice"),
        "schema": EVENT,
    }
    assert list(bodies[1]) == ["id"]


def test_a_refusal_retried_after_an_upgrade_runs_in_the_new_era(tmp_path: Path) -> None:
    """The fix is a new module (``account_v2``: a credit line), proposed, applied and carried
    to the cell with its upgrade hook; the retry then runs on the new module. A letter the new
    module refuses too comes back as a new letter, which is dropped."""
    w = tmp_path / "w"
    world("init", w, "--air", ACCOUNT_AIR)
    for event in (
        op("alice", "Deposit", 5),
        op("alice", "Withdraw", 9),
        op("bob", "Withdraw", 500),
    ):
        world("send", w, EVENT, event)
    ran = world("run", w, "--until-idle").stdout  # the summary counts the refusals
    assert ran.startswith("ran 3 step(s), 2 failed (world dead-letters ls); the world is idle")
    letters = {row["key"]: row for row in world_json("dead-letters", "ls", w)["letters"]}
    assert letters["alice"]["detail"] == "overdraft: balance 5, asked 9"
    world("dead-letters", "retry", w, letters["alice"]["id"])  # before the fix: refused again
    assert world_json("run", w, "--until-idle")["steps_failed"] == 1
    again = {row["key"]: row for row in world_json("dead-letters", "ls", w)["letters"]}
    assert again["alice"]["detail"] == "overdraft: balance 5, asked 9"
    assert again["alice"]["id"] != letters["alice"]["id"]

    made = world_json("upgrade", "propose", w, "--air", ROOT / "tests/fixtures/account_v2_air")
    world("upgrade", "apply", w, made["id"])
    upgraded = world_json("cells", "upgrade", w, "demo/Account@2", "--all")
    assert (upgraded["ok"], upgraded["failed"]) == (True, [])
    assert world_json("state", w, "demo/Account@2", "--key", "alice")["state"] == {"balance": 5}

    world("dead-letters", "retry", w, again["alice"]["id"])
    world("dead-letters", "retry", w, again["bob"]["id"])
    world("run", w, "--until-idle")
    assert world_json("state", w, "demo/Account@2", "--key", "alice")["state"] == {"balance": -4}
    (left,) = world_json("dead-letters", "ls", w)["letters"]
    assert (left["key"], left["reducer"]) == ("bob", "demo/Account@2")
    assert left["detail"] == "over the credit line: balance 0, asked 500, credit 100"
    world("dead-letters", "drop", w, left["id"])
    assert world_json("dead-letters", "ls", w)["letters"] == []
    world("replay", w, "--verify")


def test_an_unknown_id_is_one_line_on_stderr_and_exit_1(tmp_path: Path) -> None:
    world("init", tmp_path / "w", "--air", ACCOUNT_AIR)
    for command in ("show", "retry", "drop"):
        done = world("dead-letters", command, tmp_path / "w", "99", code=1)
        assert done.stdout == ""
        assert done.stderr.startswith("error:")
        assert len(done.stderr.strip().splitlines()) == 1


# --- in process --------------------------------------------------------------------------------

PING = "t/Ping@1"


def _emitting_world(tmp_path: Path) -> Path:
    """A reducer that emits two events nothing takes: two ``no_route`` letters of one step."""
    s = {"record": {"n": "nat"}}
    emits = output({"n": 1}, [("t/Nope@1", {"n": 1}), ("t/Nope@1", {"n": 2})])
    return write_world_air(
        tmp_path / "air",
        {"t/R@1": const_wasm(emits)},
        [
            schema("t/S@1", s),
            schema(PING, s),
            schema("t/Nope@1", s),
            module("t/R@1", "t/S@1", PING),
            manifest([{"event": PING, "reducer": "t/R@1"}]),
        ],
    )


def test_letters_of_one_record_get_ids_that_survive_a_snapshot(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", _emitting_world(tmp_path)) as w:
        w.send(PING, {"n": 1})
        w.run_until_idle()
        assert [d.id for d in w.kernel.dead_letters.letters] == ["2", "2.1"]
        assert w.info()["steps_failed"] == 0, "a step that ran failed nothing"
        with pytest.raises(UsageError, match="drop it"):
            w.retry_dead_letter("2.1")  # no step failed on it: nothing to run again
        w.drop_dead_letter("2")
        w.snapshot()
    with World.open(tmp_path / "w") as w:
        assert [d.id for d in w.kernel.dead_letters.letters] == ["2.1"]
        w.drop_dead_letter("2.1")
        assert w.kernel.dead_letters.letters == []
        assert w.kernel.dead_letters.total == 2
    assert verify_world(tmp_path / "w").ok


def test_a_letter_past_the_kept_window_cannot_be_retried(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", ACCOUNT_AIR, KernelLimits(dead_letters_kept=1)) as w:
        w.send_many(
            [
                (EVENT, json.loads(op("a", "Withdraw", 1))),
                (EVENT, json.loads(op("b", "Withdraw", 1))),
            ]
        )
        w.run_until_idle()
        assert [d.id for d in w.kernel.dead_letters.letters] == ["4"]
        with pytest.raises(UnknownName):
            w.retry_dead_letter("3")
        seq = w.journal.seq_next
        with pytest.raises(UnknownName):
            w.drop_dead_letter("3")
        assert w.journal.seq_next == seq, "nothing journaled for a refused operation"
        assert w.info()["dead_letters_total"] == 2


def test_a_retry_that_fails_again_is_a_new_letter_and_replays(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", ACCOUNT_AIR) as w:
        w.send(EVENT, json.loads(op("a", "Withdraw", 2)))
        w.run_until_idle()
        retry_seq = w.retry_dead_letter("2")
        w.run_until_idle()
        (letter,) = w.kernel.dead_letters.letters
        assert letter.id == str(retry_seq + 1)
        assert w.info()["steps_failed"] == 2
        failed = [r for r in w.journal.read(0) if r.kind == "step.failed"][-1]
        assert (failed.body["src"], failed.body["idx"]) == (retry_seq, 0)
    assert verify_world(tmp_path / "w").ok


def test_replay_refuses_an_operator_record_that_names_no_letter(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", ACCOUNT_AIR) as w:
        w.send(EVENT, json.loads(op("a", "Withdraw", 2)))
        w.run_until_idle()
        letters = w.kernel.dead_letters
        subject = "/world/deadletter/9/dropped"
        with pytest.raises(ReplayDivergence):
            letters.apply(JournalRecord(50, subject, DROPPED, {"id": "9"}))
        wrong = {"id": "2", "reducer": ACCOUNT, "key": cbor.dumps("b"), "schema": EVENT}
        with pytest.raises(ReplayDivergence):
            letters.apply(JournalRecord(51, "/world/deadletter/2/retried", RETRIED, wrong))
        assert [d.id for d in letters.letters] == ["2"], "a refused record changes nothing"
