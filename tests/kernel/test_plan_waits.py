"""A plan run that waits for several things at once (issue 22's gap: ``kernel/_plans.py``,
semantics 2), and runs journaled before it, which wait for one thing at a time (semantics 1)
and replay as they ran.

The world: the bundled counter with ``t/pair@1``, started by ``t/Pair@1``. It sets two timers
(``emit_a``, ``emit_b``), awaits each (``await_a``, ``await_b``) and adds each receipt's
``delivered_at_ns`` to the counter key ``a`` or ``b``. The step ids sort ``await_a`` before
``emit_b`` (AgentOS's own naming), so a run that executes no step while it waits sets timer
``b`` only after timer ``a`` fired; semantics 2 has both in flight first. Timer ``b`` is due
before ``a``, so the receipts arrive in the other order than the waits began, and each must
bind its own wait.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from plans_kit import of_kind, records

from kernel._plans import Run
from kernel.errors import ReplayDivergence
from world import Engine, World
from world.history import verify_world

from worldkit import COUNTER, ROOT, counter_with_plans, extract_fixture

PAIR = "t/Pair@1"
OLD_WORLD = ROOT / "tests" / "fixtures" / "world_before_semantics.tar.gz"
"""A world of ``pair_air`` after one ``t/Pair@1`` ``{at_a: 5, at_b: 2}`` ran to its end under
simulated time, written before ``plan.started`` had ``semantics`` (so: semantics 1): timer b
was set after a fired at 5, so it fired at 5 too."""


def _timer(step: str, at: str, key: str) -> dict[str, Any]:
    return {
        "id": step,
        "op": "emit_effect",
        "kind": "timer.set",
        "cap": "timer",
        "params": {"record": {"deliver_at_ns": {"ref": f"@plan.input.{at}"}, "key": {"text": key}}},
        "bind": {"effect_id_as": f"t{key}"},
    }


def _add(step: str, var: str, key: str) -> dict[str, Any]:
    amount = {"op": "get", "args": [{"ref": f"@var:{var}"}, {"text": "delivered_at_ns"}]}
    return {
        "id": step,
        "op": "raise_event",
        "reducer": COUNTER,
        "key": {"text": key},
        "event": {
            "record": {"key": {"text": key}, "op": {"variant": {"tag": "Add", "value": amount}}}
        },
    }


PAIR_PLAN = {
    "$kind": "defplan",
    "name": "t/pair@1",
    "input": PAIR,
    "steps": [
        _timer("emit_a", "at_a", "a"),
        {"id": "await_a", "op": "await_receipt", "for": {"ref": "@var:ta"}, "bind": {"as": "ra"}},
        _timer("emit_b", "at_b", "b"),
        {"id": "await_b", "op": "await_receipt", "for": {"ref": "@var:tb"}, "bind": {"as": "rb"}},
        _add("add_a", "ra", "a"),
        _add("add_b", "rb", "b"),
    ],
    "edges": [
        {"from": "emit_a", "to": "await_a"},
        {"from": "emit_b", "to": "await_b"},
        {"from": "await_a", "to": "add_a"},
        {"from": "await_b", "to": "add_b"},
    ],
}


def pair_air(folder: Path, plans: list[dict[str, Any]] = (), triggers: list[Any] = ()) -> Path:  # type: ignore[assignment]
    """The counter world with ``t/pair@1`` (and more ``plans``/``triggers``), timers allowed."""
    pair = {"record": {"at_a": "nat", "at_b": "nat"}}
    policy = {
        "$kind": "defpolicy",
        "name": "t/policy@1",
        "rules": [{"when": {"effect_kind": "timer.set"}, "decision": "allow"}],
    }
    return counter_with_plans(
        folder,
        [{"event": PAIR, "plan": "t/pair@1"}, *triggers],
        [{"$kind": "defschema", "name": PAIR, "type": pair}, PAIR_PLAN, *plans, policy],
        {
            "policy": "t/policy@1",
            "cap_grants": [{"name": "timer", "cap": "sys/timer@1", "params": {}}],
        },
    )


def _kinds(path: Path) -> list[str]:
    """The run's records in order, each as ``kind`` or ``kind:step``."""
    out = []
    for r in records(path):
        if r.kind == "plan.step":
            out.append(f"step:{r.body['step']}")
        elif r.kind in ("effect.queued", "receipt", "plan.started", "plan.ended", "plan.waiting"):
            out.append(r.kind)
    return out


def test_a_run_sets_both_timers_before_either_fires_and_binds_each_receipt_to_its_wait(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w"
    with World.create(path, pair_air(tmp_path / "air")) as world:
        world.send(PAIR, {"at_a": 5, "at_b": 2})
        with Engine(world, sim=True) as engine:
            engine.run()
        assert world.state(COUNTER, "a") == {"count": 5, "events": 1}
        assert world.state(COUNTER, "b") == {"count": 2, "events": 1}
    kinds = _kinds(path)
    assert kinds[:8] == [
        "plan.started",
        "step:emit_a",
        "effect.queued",
        "step:await_a",  # starts waiting ...
        "step:emit_b",  # ... and the run goes on: timer b is set before a fires
        "effect.queued",
        "step:await_b",
        "receipt",  # b's (due first)
    ]
    # b's receipt binds await_b, though await_a began waiting first; then a's binds await_a.
    binds = [r.body["step"] for r in of_kind(records(path), "plan.step") if "intent_hash" in r.body]
    assert binds == ["emit_a", "emit_b", "await_b", "await_a"]
    [started] = of_kind(records(path), "plan.started")
    assert started.body["semantics"] == 2
    assert kinds[-1] == "plan.ended"
    assert verify_world(path).ok


def test_a_run_of_semantics_1_journaled_before_replays_one_wait_at_a_time(tmp_path: Path) -> None:
    """The fixture's run set timer b only after a fired; replay does it again, and a new run
    in the same world fans out (its ``plan.started`` says semantics 2)."""
    extract_fixture(OLD_WORLD, tmp_path)
    path = tmp_path / "w"
    kinds = _kinds(path)
    assert kinds.index("receipt") < kinds.index("step:emit_b")  # one wait at a time
    [old] = of_kind(records(path), "plan.started")
    assert "semantics" not in old.body
    assert verify_world(path).ok
    with World.open(path) as world:
        world.send(PAIR, {"at_a": 7, "at_b": 3})
        with Engine(world, sim=True) as engine:
            engine.run()
        assert world.state(COUNTER, "a") == {"count": 12, "events": 2}  # 5 + 7
        assert world.state(COUNTER, "b")["events"] == 2
    starts = of_kind(records(path), "plan.started")
    assert ["semantics" in r.body for r in starts] == [False, True]
    new = [r for r in records(path) if r.seq > starts[1].seq]
    queued = [i for i, r in enumerate(new) if r.kind == "effect.queued"]
    first_receipt = next(i for i, r in enumerate(new) if r.kind == "receipt")
    assert len(queued) == 2
    assert queued[1] < first_receipt
    assert verify_world(path).ok


def test_an_old_run_waiting_in_a_snapshot_keeps_its_semantics(tmp_path: Path) -> None:
    """A semantics-1 run's snapshot form is the ten fields it always was; semantics 2 adds
    its waits; both read back as they were."""
    old = Run(0, "p", {}, None, None, b"h", semantics=1)
    old.waits.append({"step": "w", "op": "await_event", "as": "x", "event": "s", "since": 3})
    assert len(old.to_obj()) == 10
    assert old.to_obj()[9] == old.waits[0]
    back = Run.from_obj(old.to_obj())
    assert (back.semantics, back.waits) == (1, old.waits)
    new = Run(1, "p", {}, None, None, b"h")
    new.waits += [{"step": "a", "intent": b"1"}, {"step": "b", "intent": b"2", "matched": [9, 0]}]
    new.awake = True
    again = Run.from_obj(new.to_obj())
    assert (again.semantics, again.waits, again.awake) == (2, new.waits, True)
    assert Run.from_obj([*old.to_obj()[:9], None]).waits == []


def test_a_snapshot_taken_while_a_run_waits_twice_resumes_it(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with World.create(path, pair_air(tmp_path / "air")) as world:
        world.send(PAIR, {"at_a": 5, "at_b": 2})
        world.run_until_idle()  # no adapter yet: both timers queued, both awaited
        [run] = world.kernel.plans.runs.values()
        assert [w["step"] for w in run.waits] == ["await_a", "await_b"]
        world.snapshot()
    with World.open(path) as world:
        [run] = world.kernel.plans.runs.values()
        assert [w["step"] for w in run.waits] == ["await_a", "await_b"]
        with Engine(world, sim=True) as engine:
            engine.run()
        assert world.state(COUNTER, "a") == {"count": 5, "events": 1}
        assert not world.kernel.plans.runs
    assert verify_world(path).ok


REPLY = "t/Reply@1"
OTHER = "t/Other@1"


def _two_awaits_air(folder: Path, guard: bool) -> Path:
    """``t/two@1`` (started by ``t/Ask@1``) awaits a ``t/Reply@1`` twice (``a_one``,
    ``a_two``) and a ``t/Other@1`` (``b_other``), assigns ``c_set`` at once, and, when
    ``guard``, assigns ``d_big`` after ``c_set`` only if the first reply's amount is over 5
    (``r1`` is a local so that the guard may read it before ``a_one`` binds it: until then,
    reading it fails)."""
    steps: list[dict[str, Any]] = [
        {"id": "a_one", "op": "await_event", "event": REPLY, "bind": {"as": "r1"}},
        {"id": "a_two", "op": "await_event", "event": REPLY, "bind": {"as": "r2"}},
        {"id": "b_other", "op": "await_event", "event": OTHER, "bind": {"as": "o"}},
        {"id": "c_set", "op": "assign", "expr": {"nat": 1}, "bind": {"as": "c"}},
    ]
    edges: list[dict[str, Any]] = []
    if guard:
        steps.append({"id": "d_big", "op": "assign", "expr": {"nat": 2}, "bind": {"as": "d"}})
        amount = {"op": "get", "args": [{"ref": "@var:r1"}, {"text": "amount"}]}
        edges.append({"from": "c_set", "to": "d_big", "when": {"op": "gt", "args": [amount, 5]}})
    docs = [
        {"$kind": "defschema", "name": "t/Ask@1", "type": {"record": {"key": "text"}}},
        {"$kind": "defschema", "name": REPLY, "type": {"record": {"amount": "nat"}}},
        {"$kind": "defschema", "name": OTHER, "type": {"record": {"amount": "nat"}}},
        {
            "$kind": "defplan",
            "name": "t/two@1",
            "input": "t/Ask@1",
            "locals": {"c": "nat", "d": "nat", "r1": REPLY},
            "steps": steps,
            "edges": edges,
        },
        {"$kind": "defplan", "name": "t/ack@1", "input": REPLY, "steps": [], "edges": []},
        {"$kind": "defplan", "name": "t/ack2@1", "input": OTHER, "steps": [], "edges": []},
    ]
    triggers = [
        {"event": "t/Ask@1", "plan": "t/two@1"},
        {"event": REPLY, "plan": "t/ack@1"},
        {"event": OTHER, "plan": "t/ack2@1"},
    ]
    return counter_with_plans(folder, triggers, docs)


def _run_of(world: World, plan: str) -> Run:
    [run] = [r for r in world.kernel.plans.runs.values() if r.plan == plan]
    return run


def test_one_event_that_two_awaits_of_a_run_wait_for_binds_both(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with World.create(path, _two_awaits_air(tmp_path / "air", guard=False)) as world:
        world.send("t/Ask@1", {"key": "k"})
        world.run_until_idle()
        assert [w["step"] for w in _run_of(world, "t/two@1").waits] == [
            "a_one",
            "a_two",
            "b_other",
        ]
        world.send(REPLY, {"amount": 4})
        world.run_until_idle()
        run = _run_of(world, "t/two@1")
        assert [w["step"] for w in run.waits] == ["b_other"]
        assert run.vars["r1"] == run.vars["r2"] == {"amount": 4}
        world.send(OTHER, {"amount": 1})
        world.run_until_idle()
        assert not [r for r in world.kernel.plans.runs.values() if r.plan == "t/two@1"]
    binds = [r.body for r in of_kind(records(path), "plan.step") if "event" in r.body]
    assert [b["step"] for b in binds] == ["a_one", "a_two", "b_other"]
    assert binds[0]["src"] == binds[1]["src"]
    assert binds[0]["idx"] != binds[1]["idx"]
    assert verify_world(path).ok


def test_a_run_woken_with_nothing_ready_journals_what_it_waits_in(tmp_path: Path) -> None:
    """``plan.waiting``: the wake after ``c_set`` was decided while ``d_big``'s guard could
    not be read (``r1`` unbound); the reply bound before the wake ticked makes the guard
    false, so the woken run has nothing to do but wait for ``t/Other@1``."""
    path = tmp_path / "w"
    with World.create(path, _two_awaits_air(tmp_path / "air", guard=True)) as world:
        world.send("t/Ask@1", {"key": "k"})
        for _ in range(20):  # until all three awaits wait, c_set not executed yet
            world.step(1)
            runs = [r for r in world.kernel.plans.runs.values() if r.plan == "t/two@1"]
            if runs and len(runs[0].waits) == 3:
                break
        run = _run_of(world, "t/two@1")
        assert "c_set" not in run.done
        assert run.awake
        world.send(REPLY, {"amount": 4})  # queued behind the wake that runs c_set
        world.run_until_idle()
        run = _run_of(world, "t/two@1")
        assert [w["step"] for w in run.waits] == ["b_other"]
        assert "d_big" not in run.done
        assert not run.awake
        world.send(OTHER, {"amount": 1})
        world.run_until_idle()
    recs = records(path)
    [waiting] = of_kind(recs, "plan.waiting")
    assert waiting.body == {"run_id": 0, "steps": ["b_other"]}
    assert waiting.subject == "/world/run/t/two@1/0/waiting"
    [end] = [r for r in of_kind(recs, "plan.ended") if r.body["run_id"] == 0]
    assert end.body["status"] == "ok"
    assert verify_world(path).ok


def test_an_edited_plan_waiting_diverges_on_replay(tmp_path: Path) -> None:
    """The new record is checked like every other: replay recomputes it."""
    path = tmp_path / "w"
    with World.create(path, _two_awaits_air(tmp_path / "air", guard=True)) as world:
        world.send("t/Ask@1", {"key": "k"})
        while len(_run_of(world, "t/two@1").waits) < 3:
            world.step(1)
        world.send(REPLY, {"amount": 4})
        world.run_until_idle()
        journaled = list(world.journal.read(0))
        blank = world.blank_kernel()
    waiting = next(r for r in journaled if r.kind == "plan.waiting")
    edited = [
        r if r is not waiting else dataclasses.replace(r, body={**r.body, "steps": ["a_one"]})
        for r in journaled
    ]
    with pytest.raises(ReplayDivergence) as caught:
        _apply_all(blank, edited)
    assert caught.value.seq == waiting.seq


def test_runs_show_lists_every_wait_and_cancel_settles_both_intents(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    cli = CliRunner()
    path = tmp_path / "w"
    with World.create(path, pair_air(tmp_path / "air")) as world:
        world.send(PAIR, {"at_a": 5, "at_b": 2})
        world.run_until_idle()  # both timers queued, no adapter has run
    shown = cli.invoke(app, ["runs", "show", str(path), "0"])
    assert shown.exit_code == 0, shown.output
    waits = [line for line in shown.output.splitlines() if line.startswith("waits for:")]
    assert len(waits) == 2
    assert all("timer" in line for line in waits)
    listed = cli.invoke(app, ["runs", "ls", str(path), "--json"])
    [row] = json.loads(listed.output)["runs"]
    assert row["status"] == "waiting"
    assert [w["step"] for w in row["waits"]] == ["await_a", "await_b"]
    assert row["waiting"] == row["waits"][0]
    cancelled = cli.invoke(app, ["runs", "cancel", str(path), "0", "--json"])
    assert cancelled.exit_code == 0, cancelled.output
    [cancel] = of_kind(records(path), "run.cancelled")
    assert len(cancel.body["intents"]) == 2
    with World.open(path) as world:
        assert not world.kernel.plans.runs
        statuses = [world.kernel.effects.status_of(h) for h in cancel.body["intents"]]
        assert statuses == ["cancelled", "cancelled"]
    assert verify_world(path).ok


def _apply_all(kernel: Any, journaled: list[Any]) -> None:
    for record in journaled:
        kernel.apply(record)


def test_world_send_takes_an_event_only_a_waiting_run_takes_and_refuses_it_otherwise(
    tmp_path: Path,
) -> None:
    """``t/Reply@1`` has no route and no trigger: only ``t/ask@1``'s await takes it."""
    from air.errors import UnknownName

    air = tmp_path / "air"
    docs = json.loads((ROOT / "tests" / "fixtures" / "await_air" / "ask.air.json").read_text())
    counter_with_plans(air, [{"event": "t/Ask@1", "plan": "t/ask@1"}], docs[:3])
    path = tmp_path / "w"
    with World.create(path, air) as world:
        with pytest.raises(UnknownName, match="route for"):
            world.send(REPLY, {"amount": 4})  # no run waits yet
        height = world.journal.seq_next
        world.send("t/Ask@1", {"key": "apples"})
        world.run_until_idle()
        world.send(REPLY, {"amount": 4})
        world.run_until_idle()
        assert world.state(COUNTER, "apples") == {"count": 4, "events": 1}
        with pytest.raises(UnknownName):
            world.send(REPLY, {"amount": 1})  # the run ended: nothing takes it now
    assert [r.kind for r in records(path)][height : height + 2] == ["event.in", "plan.started"]
    assert verify_world(path).ok
