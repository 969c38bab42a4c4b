"""``world runs ls|show|cancel`` and the run/step summaries, through the installed script.

A failing run (a type error in an Expr) is named by ``run``'s summary and shown by ``runs show``
with its code and pointer; ``runs ls`` filters by status and plan; a run parked on approval is
cancelled (``run.cancelled``), its intent cancelled and its budget released, and ``replay
--verify`` reproduces it; ``run`` says what the world waits for (parked approvals, a far timer)
and, without ``--until-idle``, names the far timer before it waits.
"""

from __future__ import annotations

import json
import selectors
import signal
import subprocess
import time
from pathlib import Path

from plans_kit import (
    await_receipt,
    chain,
    end,
    http_get,
    http_grant,
    op,
    plan,
    plan_world,
    records,
    ref,
)
from test_cli_subprocess import ENV, WAIT_S, WORLD_BIN, world, world_json

from world import World

from worldkit import ROOT

GO = "t/Go@1"
TIMER_AIR = ROOT / "manifests" / "timer"


def _plans_world(folder: Path) -> Path:
    """Plan ``t/fail@1`` adds a text to an int (``expr.type`` in its second step: the text is
    read with ``get``, whose result validation cannot type, so only the run finds it); plan
    ``t/ok@1`` ends at once. ``GO`` starts both."""
    failing = plan(
        "t/fail@1",
        GO,
        [
            {"id": "a", "op": "assign", "expr": 1, "bind": {"as": "one"}},
            {
                "id": "b",
                "op": "assign",
                "expr": op("add", ref("@var:one"), op("get", ref("@plan.input"), "s")),
                "bind": {"as": "x"},
            },
            end(),
        ],
        chain("a", "b", "end"),
    )
    fine = plan("t/ok@1", GO, [end()], [])
    air = plan_world(
        folder / "air",
        schemas={GO: {"record": {"s": "text"}}},
        plans=[failing, fine],
        triggers=[{"event": GO, "plan": "t/fail@1"}, {"event": GO, "plan": "t/ok@1"}],
    )
    w = folder / "w"
    world("init", w, "--air", air)
    return w


def test_a_failed_run_is_named_by_run_and_shown_with_its_code_and_pointer(
    tmp_path: Path,
) -> None:
    w = _plans_world(tmp_path)
    world("send", w, GO, json.dumps({"s": "x"}))
    text = world("run", w, "--until-idle").stdout
    assert "the world is idle" in text
    assert "t/fail@1 run 0: expr.type" in text
    world("send", w, GO, json.dumps({"s": "y"}))
    ran = world_json("run", w, "--until-idle")
    assert ran["runs"]["started"] == 2
    assert ran["runs"]["ended"] == 2
    assert [(f["plan"], f["run_id"], f["code"]) for f in ran["runs"]["failed_runs"]] == [
        ("t/fail@1", 2, "expr.type")
    ]

    shown = world_json("runs", "show", w, "0")
    assert (shown["status"], shown["plan"], shown["steps"]) == ("error", "t/fail@1", 1)
    assert [s["step"] for s in shown["path"]] == ["a"]
    error = shown["error"]
    assert (error["code"], error["step"], error["pointer"]) == (
        "expr.type",
        "b",
        "/steps/1/expr/args/1",
    )
    text = world("runs", "show", w, "0").stdout
    assert "expr.type" in text
    assert "/steps/1/expr/args/1" in text

    rows = world_json("runs", "ls", w)["runs"]
    assert [(r["run_id"], r["plan"], r["status"]) for r in rows] == [
        (0, "t/fail@1", "error"),
        (1, "t/ok@1", "ok"),
        (2, "t/fail@1", "error"),
        (3, "t/ok@1", "ok"),
    ]
    assert all(r["started_seq"] < r["ended_seq"] for r in rows)
    errors = world_json("runs", "ls", w, "--status", "error")["runs"]
    assert [r["run_id"] for r in errors] == [0, 2]
    oks = world_json("runs", "ls", w, "--plan", "t/ok@1", "--status", "ok")["runs"]
    assert [r["run_id"] for r in oks] == [1, 3]
    assert world_json("runs", "ls", w, "--status", "waiting")["runs"] == []
    world("runs", "ls", w, "--status", "bogus", code=1)
    info = world_json("info", w)
    assert info["runs_failed"] == 2
    assert world_json("replay", w, "--verify")["ok"] is True
    # the pointer is derived again by a world that rebuilds from genesis (no snapshot)
    with World.open(w) as opened:
        assert opened.kernel.plans.failures[0]["pointer"] == "/steps/1/expr/args/1"


def _approval_world(folder: Path) -> Path:
    """One run whose GET a policy parks, under a grant with a byte budget."""
    fetch = [http_get("fetch", ref("@plan.input.url"), "req"), await_receipt("wait", "req", "r")]
    air = plan_world(
        folder / "air",
        schemas={GO: {"record": {"url": "text"}}},
        plans=[plan("t/go@1", GO, [*fetch, end()], chain("fetch", "wait", "end"))],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=[http_grant(["127.0.0.1"], budget={"bytes": 1_000_000})],
        rules=[{"when": {"effect_kind": "http.request"}, "decision": "require_approval"}],
    )
    w = folder / "w"
    world("init", w, "--air", air)
    world("send", w, GO, json.dumps({"url": "http://127.0.0.1:9/a"}))
    return w


def test_a_run_parked_on_approval_is_summarised_cancelled_and_replayed(tmp_path: Path) -> None:
    w = _approval_world(tmp_path)
    text = world("run", w, "--until-idle").stdout
    assert "1 approval(s)" in text
    assert "the world is idle" not in text
    ran = world_json("run", w, "--until-idle")
    [parked] = ran["waiting"]["approvals"]
    assert parked["origin"] == {"kind": "plan", "name": "t/go@1", "run_id": 0}
    stepped = world_json("step", w)
    assert stepped["waiting"]["approvals"] == [parked]

    [row] = world_json("runs", "ls", w, "--status", "waiting")["runs"]
    assert row["waiting"]["for"] == "approval"
    assert row["waiting"]["intent_hash"] == parked["intent_hash"]
    shown = world_json("runs", "show", w, "0")
    assert shown["locals"] == {"req": parked["intent_hash"]}
    [effect] = shown["effects"]
    assert effect["decision"] == {"decision": "require_approval", "rule_index": 0}
    assert effect["status"] == "parked"
    with World.open(w, readonly=True) as opened:
        assert opened.kernel.effects.spent == {"http": 1_000_000}

    world("runs", "cancel", w, "7", code=1)  # no such run
    cancelled = world_json("runs", "cancel", w, "0")
    assert cancelled["intents"] == [parked["intent_hash"]]
    world("runs", "cancel", w, "0", code=1)  # ended: only a live run is cancelled
    [row] = world_json("runs", "ls", w)["runs"]
    assert (row["status"], row["ended_seq"], row["waiting"]) == (
        "cancelled",
        cancelled["seq"],
        None,
    )
    shown = world_json("runs", "show", w, "0")
    assert shown["effects"][0]["status"] == "cancelled"
    listed = world_json("effects", "ls", w)["intents"]
    assert [i["status"] for i in listed] == ["cancelled"]
    world("effects", "approve", w, parked["intent_hash"], code=1)  # nothing left to approve
    with World.open(w, readonly=True) as opened:
        assert opened.kernel.effects.spent == {"http": 0}  # the reservation is released
        assert opened.kernel.plans.runs == {}
    [record] = [r for r in records(w) if r.kind == "run.cancelled"]
    assert record.subject == "/world/run/t/go@1/0/cancelled"
    assert record.body == {
        "run_id": 0,
        "plan": "t/go@1",
        "intents": [bytes.fromhex(parked["intent_hash"][7:])],
    }
    ran = world_json("run", w, "--until-idle")
    assert ran["waiting"]["approvals"] == []
    assert ran["effects_dispatched"] == 0

    before = b"".join(p.read_bytes() for p in sorted((w / "journal").glob("*")) if p.is_file())
    assert world_json("replay", w, "--verify")["ok"] is True
    after = b"".join(p.read_bytes() for p in sorted((w / "journal").glob("*")) if p.is_file())
    assert before == after


def _far_timer_world(folder: Path) -> tuple[Path, int]:
    due = time.time_ns() + 3600 * 10**9
    w = folder / "w"
    world("init", w, "--air", TIMER_AIR)
    world("send", w, "demo/TimerEvent@1", json.dumps({"key": "t", "deliver_at_ns": due}))
    return w, due


def test_run_names_a_far_timer_in_its_summary_and_before_it_waits(tmp_path: Path) -> None:
    w, due = _far_timer_world(tmp_path)
    ran = world_json("run", w, "--until-idle")
    [timer] = ran["waiting"]["timers"]
    assert timer["due_ns"] == due
    assert timer["kind"] == "timer.set"
    text = world("run", w, "--until-idle").stdout
    assert "1 timer(s), the next due" in text
    assert "the world is idle" not in text

    proc = subprocess.Popen(
        [str(WORLD_BIN), "run", str(w)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert proc.stderr is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stderr, selectors.EVENT_READ)
            assert sel.select(WAIT_S), "run said nothing before waiting on the timer"
            line = proc.stderr.readline()
        assert line.startswith("waiting for a timer due ")
        assert "(in 3" in line  # about an hour away
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=WAIT_S)
