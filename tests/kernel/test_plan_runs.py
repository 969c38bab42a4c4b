"""Plan runs (``kernel/_plans.py``, ``kernel/_runs.py``) at the branches the plan world tests do
not reach: what picks the event a wait binds (``where`` alone, ``correlate_by`` alone, one
binding per wait, an unrouted event a reducer emits), what cancelling a run leaves (its record's
subject, its mailbox's dead letters, the run counted as ended) and how replay refuses an edited
cancel, where a failed run failed (the derived ``failures`` table, trimmed to
``FAILURES_KEPT``), a receipt in before its await, refused effects, and runs in a snapshot.

A mutation run found these unchecked (TESTING.md, "Mutation testing").
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from plans_kit import (
    ALLOW_ALL,
    SINK,
    SINK_STATE,
    blob_grant,
    blob_put,
    chain,
    end,
    ended,
    http_get,
    http_grant,
    of_kind,
    op,
    plan,
    plan_world,
    records,
    ref,
)
from test_plan_waits import PAIR, _apply_all, pair_air

import kernel._runs
from air.errors import ExprError
from air.expr import Env, evaluate, parse_expr
from kernel.errors import ReplayDivergence
from world import Engine, World
from world.effects import BlobAdapter, decide_parked
from world.history import verify_world
from world.operate import cancel_run
from world.operate._runs import run_mark, run_summary

from worldkit import COUNTER, const_wasm, counter_with_plans, output, write_world_air

START = "t/Start@1"
REPLY = "t/Reply@1"
POKE = "t/Poke@1"
SCHEMAS = {REPLY: {"record": {"key": "text", "n": "int"}}, START: {"record": {"key": "text"}}}


def _wait(where: Any = None) -> dict[str, Any]:
    step: dict[str, Any] = {
        "id": "wait",
        "op": "await_event",
        "event": REPLY,
        "bind": {"as": "got"},
    }
    if where is not None:
        step["where"] = where
    return step


def _wait_world(folder: Path, *, where: Any = None, correlate_by: str | None = None) -> Path:
    """``t/wait@1``, started by ``t/Start@1``, awaits one ``t/Reply@1`` and ends with it."""
    trigger: dict[str, Any] = {"event": START, "plan": "t/wait@1"}
    if correlate_by is not None:
        trigger["correlate_by"] = correlate_by
    steps = [_wait(where), end(result=ref("@var:got"))]
    return plan_world(
        folder,
        schemas=SCHEMAS,
        plans=[plan("t/wait@1", START, steps, chain("wait", "end"))],
        triggers=[trigger],
        sink_events=[REPLY],
    )


def _start_then_reply(path: Path, air: Path, replies: list[dict[str, Any]]) -> None:
    """A world of ``air`` at ``path``: ``t/Start@1 {key: a}`` run to idle, then ``replies``
    (``t/Reply@1`` values) sent one by one and run to idle."""
    with World.create(path, air) as world:
        world.send(START, {"key": "a"})
        world.run_until_idle()
        for reply in replies:
            world.send(REPLY, reply)
        world.run_until_idle()


def _results(path: Path) -> dict[int, tuple[str, Any]]:
    return {i: (b["status"], b.get("result")) for i, b in ended(records(path)).items()}


# --- what a wait binds ------------------------------------------------------------------------


def test_a_where_alone_picks_the_event_each_run_waits_for(tmp_path: Path) -> None:
    """No ``correlate_by``: only the step's ``where`` tells the two runs' replies apart."""
    where = op("eq", ref("@event.key"), ref("@plan.input.key"))
    path = tmp_path / "w"
    with World.create(path, _wait_world(tmp_path / "air", where=where)) as world:
        mark = run_mark(world.kernel)
        world.send_many([(START, {"key": "a"}), (START, {"key": "b"})])
        world.run_until_idle()
        world.send(REPLY, {"key": "b", "n": 2})
        world.run_until_idle()
        assert sorted(world.kernel.plans.runs) == [0]  # a's run still waits
        world.send(REPLY, {"key": "a", "n": 1})
        world.run_until_idle()
        assert not world.kernel.plans.runs
        counted = run_summary(world.kernel, mark)["runs"]
        assert (counted["started"], counted["ended"], counted["failed"]) == (2, 2, 0)
    assert _results(path) == {1: ("ok", {"key": "b", "n": 2}), 0: ("ok", {"key": "a", "n": 1})}
    assert verify_world(path).ok


def test_a_where_that_fails_on_an_event_does_not_match_it(tmp_path: Path) -> None:
    """``12 / n == 4``: ``n = 0`` is a division by zero, so no match (not an error, not a
    match); ``n = 3`` matches."""
    where = op("eq", op("div", 12, ref("@event.n")), 4)
    path = tmp_path / "w"
    with World.create(path, _wait_world(tmp_path / "air", where=where)) as world:
        world.send(START, {"key": "a"})
        world.run_until_idle()
        world.send(REPLY, {"key": "a", "n": 0})
        world.run_until_idle()
        assert [w["step"] for w in world.kernel.plans.runs[0].waits] == ["wait"]
        world.send(REPLY, {"key": "a", "n": 3})
        world.run_until_idle()
    assert _results(path) == {0: ("ok", {"key": "a", "n": 3})}
    assert verify_world(path).ok


def test_correlate_by_alone_hands_each_run_only_its_own_reply(tmp_path: Path) -> None:
    """A ``where`` that admits every reply (a correlated trigger requires one): the
    trigger's ``correlate_by`` alone keeps the runs apart."""
    path = tmp_path / "w"
    air = _wait_world(tmp_path / "air", where=True, correlate_by="key")
    with World.create(path, air) as world:
        world.send_many([(START, {"key": "a"}), (START, {"key": "b"})])
        world.run_until_idle()
        world.send(REPLY, {"key": "b", "n": 2})
        world.run_until_idle()
        assert sorted(world.kernel.plans.runs) == [0]
        world.send(REPLY, {"key": "a", "n": 1})
        world.run_until_idle()
    assert _results(path) == {1: ("ok", {"key": "b", "n": 2}), 0: ("ok", {"key": "a", "n": 1})}
    assert verify_world(path).ok


def test_a_wait_binds_the_first_of_two_replies_sent_before_it_ticks(tmp_path: Path) -> None:
    """Both replies are journaled before the run's tick binds the first: the second must not
    be handed to the wait the first already matched."""
    path = tmp_path / "w"
    with World.create(path, _wait_world(tmp_path / "air")) as world:
        world.send(START, {"key": "a"})
        world.run_until_idle()
        world.send_many([(REPLY, {"key": "a", "n": 1}), (REPLY, {"key": "a", "n": 2})])
        world.run_until_idle()
        assert not world.kernel.plans.runs
        assert world.kernel.dead_letters.total == 0
    assert _results(path) == {0: ("ok", {"key": "a", "n": 1})}
    [bind] = [r for r in of_kind(records(path), "plan.step") if "event" in r.body]
    assert bind.body["step"] == "wait"
    assert verify_world(path).ok


def test_an_event_a_reducer_emits_that_no_route_takes_reaches_the_run_awaiting_it(
    tmp_path: Path,
) -> None:
    """The sink reducer takes ``t/Poke@1`` and emits a ``t/Reply@1`` that no route and no
    trigger takes: a run waiting for it takes it (not a ``no_route`` dead letter)."""
    docs: list[dict[str, Any]] = [
        {"$kind": "defschema", "name": n, "type": t} for n, t in SCHEMAS.items()
    ]
    docs += [
        {"$kind": "defschema", "name": POKE, "type": {"record": {}}},
        {"$kind": "defschema", "name": SINK_STATE, "type": {"record": {}}},
        {
            "$kind": "defmodule",
            "name": SINK,
            "module_kind": "reducer",
            "wasm": "t_Sink@1.wasm",
            "abi": {"reducer": {"state": SINK_STATE, "event": POKE}},
        },
        plan("t/wait@1", START, [_wait(), end(result=ref("@var:got"))], chain("wait", "end")),
        {
            "$kind": "manifest",
            "air_version": "1",
            "routing": {"events": [{"event": POKE, "reducer": SINK}]},
            "triggers": [{"event": START, "plan": "t/wait@1"}],
        },
    ]
    wasm = const_wasm(output({}, [(REPLY, {"key": "k", "n": 3})]))
    air = write_world_air(tmp_path / "air", {SINK: wasm}, docs)
    path = tmp_path / "w"
    with World.create(path, air) as world:
        world.send(START, {"key": "k"})
        world.run_until_idle()
        world.send(POKE, {})
        world.run_until_idle()
        assert not world.kernel.plans.runs
        assert world.kernel.dead_letters.total == 0
    assert _results(path) == {0: ("ok", {"key": "k", "n": 3})}
    assert verify_world(path).ok


# --- cancelling -------------------------------------------------------------------------------


def test_cancel_dead_letters_the_runs_mailbox_and_counts_it_ended(tmp_path: Path) -> None:
    """Run 1 ends; then run 0's reply is in its mailbox (matched, not yet bound) when it is
    cancelled: the reply becomes a ``run_cancelled`` dead letter of the cancel's record, the
    run is counted ended (one more), and the world goes on."""
    where = op("eq", ref("@event.key"), ref("@plan.input.key"))
    path = tmp_path / "w"
    with World.create(path, _wait_world(tmp_path / "air", where=where)) as world:
        world.send_many([(START, {"key": "a"}), (START, {"key": "b"})])
        world.run_until_idle()
        world.send(REPLY, {"key": "b", "n": 2})
        world.run_until_idle()
        assert world.kernel.plans.ended == 1
        mark = run_mark(world.kernel)
        world.send(REPLY, {"key": "a", "n": 1})  # delivered to run 0, not ticked
        seq, body = cancel_run(world.kernel, "0")
        world.commit()
        assert body == {"run_id": 0, "plan": "t/wait@1", "intents": []}
        assert run_summary(world.kernel, mark)["runs"]["ended"] == 1
        [letter] = world.kernel.dead_letters.letters
        assert (letter.seq, letter.reducer, letter.schema) == (seq, "t/wait@1", REPLY)
        assert (letter.code, letter.detail) == ("run_cancelled", "run 0 was cancelled")
        world.run_until_idle()  # nothing of the run is left to tick
        assert not world.kernel.plans.runs
    [cancel] = of_kind(records(path), "run.cancelled")
    assert cancel.seq == seq
    assert cancel.subject == "/world/run/t/wait@1/0/cancelled"
    assert verify_world(path).ok


def _cancelled_pair(tmp_path: Path) -> tuple[list[Any], Any]:
    """A pair run cancelled while both timers wait: the journal, and a blank kernel."""
    path = tmp_path / "w"
    with World.create(path, pair_air(tmp_path / "air")) as world:
        world.send(PAIR, {"at_a": 5, "at_b": 2})
        world.run_until_idle()
        cancel_run(world.kernel, "0")
        world.commit()
        journaled = list(world.journal.read(0))
        blank = world.blank_kernel()
    return journaled, blank


@pytest.mark.parametrize(
    ("edit", "expected", "actual"),
    [
        ({"run_id": 9}, "a live run", "no run 9"),
        ({"run_id": "0"}, "a live run", "no run 0"),
        ({"intents": []}, "the cancel the journal holds", None),
    ],
    ids=["not-a-live-run", "a-run-id-that-is-not-an-int", "other-intents"],
)
def test_replay_refuses_an_edited_cancel_at_its_record(
    tmp_path: Path, edit: dict[str, Any], expected: str, actual: str | None
) -> None:
    journaled, blank = _cancelled_pair(tmp_path)
    cancel = next(r for r in journaled if r.kind == "run.cancelled")
    assert cancel.subject == "/world/run/t/pair@1/0/cancelled"
    assert len(cancel.body["intents"]) == 2
    changed = dataclasses.replace(cancel, body={**cancel.body, **edit})
    with pytest.raises(ReplayDivergence) as caught:
        _apply_all(blank, [changed if r is cancel else r for r in journaled])
    got = caught.value
    assert (got.seq, got.entity, got.expected) == (cancel.seq, cancel.subject, expected)
    if actual is not None:
        assert got.actual == actual
    else:
        derived = {"run_id": 0, "plan": "t/pair@1", "intents": cancel.body["intents"]}
        assert got.actual == repr(derived)  # what replay derives: the journaled body


def test_replay_refuses_a_cancel_whose_body_is_not_a_record(tmp_path: Path) -> None:
    journaled, blank = _cancelled_pair(tmp_path)
    cancel = next(r for r in journaled if r.kind == "run.cancelled")
    changed = dataclasses.replace(cancel, body=[0])
    with pytest.raises(ReplayDivergence) as caught:
        _apply_all(blank, [changed if r is cancel else r for r in journaled])
    assert (caught.value.seq, caught.value.actual) == (cancel.seq, "no run None")


# --- where a failed run failed ------------------------------------------------------------------


def _invariant_world(folder: Path) -> Path:
    """``t/inv@1`` assigns ``x = 1`` (``first``), then ``y = 7`` (``second``), under the
    invariants ``5 > y`` (not checked until ``y`` is bound) and ``x != 1``: ``first`` breaks
    the second one."""
    steps = [
        {"id": "first", "op": "assign", "expr": {"nat": 1}, "bind": {"as": "x"}},
        {"id": "second", "op": "assign", "expr": {"nat": 7}, "bind": {"as": "y"}},
    ]
    doc = plan(
        "t/inv@1",
        START,
        steps,
        chain("first", "second"),
        locals={"x": "nat", "y": "nat"},
        invariants=[op("gt", 5, ref("@var:y")), op("ne", ref("@var:x"), 1)],
    )
    return plan_world(
        folder, schemas=SCHEMAS, plans=[doc], triggers=[{"event": START, "plan": "t/inv@1"}]
    )


def test_a_broken_invariant_is_kept_among_the_failures_with_its_step_and_pointer(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w"
    with World.create(path, _invariant_world(tmp_path / "air")) as world:
        world.send(START, {"key": "a"})
        world.run_until_idle()
        plans = world.kernel.plans
        [end_record] = of_kind(list(world.journal.read(0)), "plan.ended")
        assert plans.failed_total == 1
        assert plans.failures == {
            0: {
                "plan": "t/inv@1",
                "seq": end_record.seq,
                "code": "plan.invariant",
                "step": "first",
                "pointer": "/invariants/1",
            }
        }
    assert end_record.body["error"] == {
        "code": "plan.invariant",
        "detail": "invariant 1 does not hold",
    }
    # the failed step's own record is dropped: no step was journaled
    assert of_kind(records(path), "plan.step") == []
    with World.open(path) as opened:  # derived again by replay
        assert opened.kernel.plans.failures[0]["step"] == "first"
    assert verify_world(path).ok


def test_the_failures_kept_are_the_last_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kernel._runs, "FAILURES_KEPT", 2)
    path = tmp_path / "w"
    with World.create(path, _invariant_world(tmp_path / "air")) as world:
        world.send_many([(START, {"key": k}) for k in "abc"])
        world.run_until_idle()
        plans = world.kernel.plans
        assert plans.failed_total == 3
        assert list(plans.failures) == [1, 2]


def test_a_denied_run_fails_at_the_step_it_waits_in(tmp_path: Path) -> None:
    """An approver's denial ends the run where it waits: ``wait`` (``/steps/1``)."""
    put = blob_put("a_put", {"bytes": "AAAA"}, "p")
    wait = {"id": "wait", "op": "await_receipt", "for": ref("@var:p"), "bind": {"as": "r"}}
    air = plan_world(
        tmp_path / "air",
        schemas=SCHEMAS,
        plans=[plan("t/put@1", START, [put, wait, end()], chain("a_put", "wait", "end"))],
        triggers=[{"event": START, "plan": "t/put@1"}],
        grants=[blob_grant()],
        rules=[{"when": {}, "decision": "require_approval"}],
    )
    path = tmp_path / "w"
    with World.create(path, air) as world:
        world.send(START, {"key": "a"})
        world.run_until_idle()
        (parked,) = world.kernel.effects.parked()
        decide_parked(world, parked.intent_hash.hex(), approved=False)
        world.run_until_idle()
        failure = world.kernel.plans.failures[0]
        assert (failure["code"], failure["step"], failure["pointer"]) == (
            "effect.denied",
            "wait",
            "/steps/1",
        )
    assert verify_world(path).ok


# --- what a failure journals and where it points --------------------------------------------------

IN = "t/In@1"
LONG_KEY = "k" * 600
MISSING = op("get", ref("@plan.input.m"), {"text": LONG_KEY})
"""An Expr that fails on ``{m: {}}`` with a message longer than a journaled detail's 500."""


def _failing_world(folder: Path) -> Path:
    """The counter world with ``t/get@1`` (assigns ``1 + m[LONG_KEY]``) and ``t/key@1``
    (raises a counter event whose key is ``m[LONG_KEY]``), both started by ``t/In@1``."""
    get_plan = plan(
        "t/get@1",
        IN,
        [{"id": "a", "op": "assign", "expr": op("add", 1, MISSING), "bind": {"as": "x"}}],
        [],
        locals={"x": "int"},
    )
    event = {"record": {"key": {"text": "k"}, "op": {"variant": {"tag": "Add", "value": 1}}}}
    key_plan = plan(
        "t/key@1",
        IN,
        [{"id": "r", "op": "raise_event", "reducer": COUNTER, "key": MISSING, "event": event}],
        [],
    )
    docs = [
        {
            "$kind": "defschema",
            "name": IN,
            "type": {"record": {"m": {"map": {"key": "text", "value": "text"}}}},
        },
        get_plan,
        key_plan,
    ]
    triggers = [{"event": IN, "plan": "t/get@1"}, {"event": IN, "plan": "t/key@1"}]
    return counter_with_plans(folder, triggers, docs)


def _expr_error(expr: Any) -> ExprError:
    """What evaluating ``expr`` on the input ``{m: {}}`` raises."""
    with pytest.raises(ExprError) as caught:
        evaluate(parse_expr(expr), Env({"m": {}}, {}, {}, schemas={}))
    return caught.value


def test_an_expr_failure_journals_its_code_and_message_and_points_inside_the_expr(
    tmp_path: Path,
) -> None:
    """The detail is the Expr error's own message, cut at 500 characters; the pointer is the
    step's field (``/expr``, or ``/key`` of a ``raise_event``) and then the error's place
    inside it."""
    added, bare = _expr_error(op("add", 1, MISSING)), _expr_error(MISSING)
    assert (added.pointer, bare.pointer) == ("/args/1", "")
    assert len(str(added)) > 500
    path = tmp_path / "w"
    with World.create(path, _failing_world(tmp_path / "air")) as world:
        world.send(IN, {"m": {}})
        world.run_until_idle()
        failures = world.kernel.plans.failures
        assert {
            i: (f["plan"], f["code"], f["step"], f["pointer"]) for i, f in failures.items()
        } == {
            0: ("t/get@1", "expr.get.missing", "a", "/steps/0/expr/args/1"),
            1: ("t/key@1", "expr.get.missing", "r", "/steps/0/key"),
        }
        assert world.state(COUNTER, "k") is None  # the failed raise raised nothing
    starts = of_kind(records(path), "plan.started")
    assert [(r.body["src"], r.body["idx"]) for r in starts] == [
        (starts[0].body["src"], 0),
        (starts[0].body["src"], 1),
    ]
    ends = ended(records(path))
    for run_id, exc in ((0, added), (1, bare)):
        assert ends[run_id]["status"] == "error"
        assert ends[run_id]["error"] == {"code": "expr.get.missing", "detail": str(exc)[:500]}
    assert verify_world(path).ok


# --- a receipt already in when its await begins ----------------------------------------------------

GO = "t/Go@1"


def _early_receipt_world(folder: Path, with_end: bool = False) -> Path:
    """``t/fan@1``: ``a_put`` stores a blob; ``b_go`` awaits ``t/Go@1``; after it, ``c_wait``
    awaits the put's receipt (in long since) while ``d_one`` and ``e_two`` are ready too.
    ``with_end``: then ``z_end`` ends it with whether ``@step:a_put`` and ``@step:c_wait``
    are the values bound to ``p`` and ``r``."""
    put = blob_put("a_put", {"bytes": "AAAA"}, "p")
    steps = [
        put,
        {"id": "b_go", "op": "await_event", "event": GO, "bind": {"as": "g"}},
        {"id": "c_wait", "op": "await_receipt", "for": ref("@var:p"), "bind": {"as": "r"}},
        {"id": "d_one", "op": "assign", "expr": {"nat": 1}, "bind": {"as": "n1"}},
        {"id": "e_two", "op": "assign", "expr": {"nat": 2}, "bind": {"as": "n2"}},
    ]
    edges = [
        {"from": "a_put", "to": "c_wait"},
        {"from": "b_go", "to": "c_wait"},
        {"from": "b_go", "to": "d_one"},
        {"from": "b_go", "to": "e_two"},
    ]
    if with_end:
        same = {
            "put": op("eq", ref("@step:a_put"), ref("@var:p")),
            "receipt": op("eq", ref("@step:c_wait"), ref("@var:r")),
        }
        steps.append(end("z_end", result={"record": same}))
        edges += [{"from": s, "to": "z_end"} for s in ("c_wait", "d_one", "e_two")]
    return plan_world(
        folder,
        schemas={START: {"record": {"key": "text"}}, GO: {"record": {}}},
        plans=[plan("t/fan@1", START, steps, edges, locals={"n1": "nat", "n2": "nat"})],
        triggers=[{"event": START, "plan": "t/fan@1"}],
        grants=[blob_grant()],
        sink_events=[GO],
    )


def _until_the_receipt_is_queued(world: World) -> None:
    """Start the run, let the blob adapter answer, send ``t/Go@1`` and tick until ``c_wait``
    waits (its receipt then queued in the run's mailbox)."""
    world.send(START, {"key": "a"})
    with Engine(world, adapters=[BlobAdapter(world.cas)]) as loop:
        loop.run()
    assert [w["step"] for w in world.kernel.plans.runs[0].waits] == ["b_go"]
    world.send(GO, {})
    for _ in range(20):
        world.step(1)
        if [w["step"] for w in world.kernel.plans.runs[0].waits] == ["c_wait"]:
            return
    raise AssertionError("c_wait never began to wait")


def test_a_receipt_in_before_its_await_is_handed_once_while_the_run_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w"
    with World.create(path, _early_receipt_world(tmp_path / "air")) as world:
        _until_the_receipt_is_queued(world)
        assert world.kernel.plans.runs[0].waits[0]["matched"]  # handed at once
        assert world.kernel.effects.receipt_of(world.kernel.plans.runs[0].vars["p"])
        world.run_until_idle()  # d_one and e_two tick before the receipt binds c_wait
        assert not world.kernel.plans.runs
        assert world.kernel.dead_letters.total == 0
        assert world.kernel.effects.held == {}  # the ended run's receipts are let go
    assert ended(records(path))[0]["status"] == "ok"
    binds = [r.body["step"] for r in of_kind(records(path), "plan.step") if "intent_hash" in r.body]
    assert binds == ["a_put", "c_wait"]
    assert verify_world(path).ok


def test_cancel_dead_letters_a_receipt_queued_for_the_run(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with World.create(path, _early_receipt_world(tmp_path / "air")) as world:
        _until_the_receipt_is_queued(world)
        seq, _body = cancel_run(world.kernel, "0")
        world.commit()
        letters = world.kernel.dead_letters.letters
        assert "sys/receipt" in [d.schema for d in letters]
        assert {(d.seq, d.reducer, d.code) for d in letters} == {(seq, "t/fan@1", "run_cancelled")}
        world.run_until_idle()
        assert not world.kernel.plans.runs
    assert verify_world(path).ok


def test_a_step_result_reads_what_the_step_bound(tmp_path: Path) -> None:
    """``@step:<id>`` of an ``emit_effect`` is its intent's hash, of an ``await_receipt`` the
    receipt it bound: the same values as the vars they bind."""
    path = tmp_path / "w"
    with World.create(path, _early_receipt_world(tmp_path / "air", with_end=True)) as world:
        _until_the_receipt_is_queued(world)
        world.run_until_idle()
    result = ended(records(path))[0]["result"]
    assert result == {"put": True, "receipt": True}


# --- effects refused --------------------------------------------------------------------------


def _put_world(folder: Path, *, rules: list[dict[str, Any]], host: str | None = None) -> Path:
    """``t/put@1`` stores a blob (or, with ``host``, GETs ``http://<host>/`` under a grant for
    ``example.com`` only), then awaits its receipt."""
    if host is None:
        first = blob_put("a_put", {"bytes": "AAAA"}, "p")
        grants = [blob_grant()]
    else:
        first = http_get("a_put", {"text": f"http://{host}/"}, "p")
        grants = [http_grant(["example.com"])]
    wait = {"id": "wait", "op": "await_receipt", "for": ref("@var:p"), "bind": {"as": "r"}}
    return plan_world(
        folder,
        schemas=SCHEMAS,
        plans=[plan("t/put@1", START, [first, wait, end()], chain("a_put", "wait", "end"))],
        triggers=[{"event": START, "plan": "t/put@1"}],
        grants=grants,
        rules=rules,
    )


def test_an_effect_the_grant_refuses_fails_the_run_at_the_steps_cap(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with World.create(
        path, _put_world(tmp_path / "air", rules=ALLOW_ALL, host="other.test")
    ) as world:
        world.send(START, {"key": "a"})
        world.run_until_idle()
        failure = world.kernel.plans.failures[0]
        assert (failure["step"], failure["pointer"]) == ("a_put", "/steps/0/cap")
        assert failure["code"].startswith("cap.")
    assert verify_world(path).ok


def test_an_effect_the_policy_denies_is_journaled_before_the_runs_end(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with World.create(
        path, _put_world(tmp_path / "air", rules=[{"when": {}, "decision": "deny"}])
    ) as world:
        world.send(START, {"key": "a"})
        world.run_until_idle()
        failure = world.kernel.plans.failures[0]
        assert (failure["code"], failure["step"]) == ("policy.denied", "a_put")
    assert records(path)[-1].kind == "plan.ended"  # the effect's records come before it
    recs = [r for r in records(path) if r.subject.startswith("/world/run/")]
    assert [r.kind for r in recs][-2:] == ["plan.step", "plan.ended"]
    assert recs[-2].body["step"] == "a_put"
    assert recs[-1].body["error"]["code"] == "policy.denied"
    assert verify_world(path).ok


# --- snapshots ----------------------------------------------------------------------------------


def test_a_snapshot_with_waiting_runs_and_no_failure_reopens_as_it_was(tmp_path: Path) -> None:
    """The world opens from its snapshot (no "derived state damaged" notice: a snapshot the
    kernel cannot read is thrown away and the journal replayed, which would hide a bad
    restore), with its runs waiting and no failed run counted."""
    path = tmp_path / "w"
    with World.create(path, pair_air(tmp_path / "air")) as world:
        world.send(PAIR, {"at_a": 5, "at_b": 2})
        world.run_until_idle()
        world.snapshot()
    with World.open(path) as world:
        assert world.notices == []
        [run] = world.kernel.plans.runs.values()
        assert [w["step"] for w in run.waits] == ["await_a", "await_b"]
        assert world.kernel.plans.failed_total == 0
        assert world.info()["runs_failed"] == 0


def test_failed_runs_are_kept_in_the_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "w"
    with World.create(path, _invariant_world(tmp_path / "air")) as world:
        world.send_many([(START, {"key": "a"}), (START, {"key": "b"})])
        world.run_until_idle()
        kept = dict(world.kernel.plans.failures)
        world.snapshot()
    assert sorted(kept) == [0, 1]
    with World.open(path) as world:
        assert world.notices == []
        assert world.kernel.plans.failed_total == 2
        assert world.kernel.plans.failures == kept


def test_a_guard_that_is_not_a_bool_fails_the_run_at_its_edge(tmp_path: Path) -> None:
    """The guard reads a text from the input's map (no check at load can see it is no bool)."""
    schemas = {IN: {"record": {"m": {"map": {"key": "text", "value": "text"}}}}}
    steps = [
        {"id": "a", "op": "assign", "expr": {"nat": 1}, "bind": {"as": "x"}},
        {"id": "b", "op": "assign", "expr": {"nat": 2}, "bind": {"as": "y"}},
    ]
    when = op("get", ref("@plan.input.m"), {"text": "g"})
    doc = plan(
        "t/g@1",
        IN,
        steps,
        [{"from": "a", "to": "b", "when": when}],
        locals={"x": "nat", "y": "nat"},
    )
    air = plan_world(
        tmp_path / "air", schemas=schemas, plans=[doc], triggers=[{"event": IN, "plan": "t/g@1"}]
    )
    path = tmp_path / "w"
    with World.create(path, air) as world:
        world.send(IN, {"m": {"g": "yes"}})
        world.run_until_idle()
        failure = world.kernel.plans.failures[0]
        assert (failure["code"], failure["step"], failure["pointer"]) == (
            "plan.guard",
            "b",
            "/edges/0/when",
        )
    error = ended(records(path))[0]["error"]
    assert error == {"code": "plan.guard", "detail": "guard on a -> b is not a bool"}
    assert verify_world(path).ok


def test_a_where_reads_the_schemas_of_its_era(tmp_path: Path) -> None:
    """``json_encode`` in a ``where`` prints the event through its schema, which the run's
    era supplies."""
    text = op("json_encode", ref("@event"), REPLY)
    where = op("eq", text, {"text": '{"key":"a","n":1}'})
    path = tmp_path / "w"
    air = _wait_world(tmp_path / "air", where=where)
    _start_then_reply(path, air, [{"key": "a", "n": 2}, {"key": "a", "n": 1}])
    assert _results(path) == {0: ("ok", {"key": "a", "n": 1})}
    assert verify_world(path).ok


def test_a_where_reads_the_runs_vars_and_step_results(tmp_path: Path) -> None:
    """``k_set`` assigns ``k`` from the input; ``wait`` (after it) matches a reply whose key
    is ``@var:k`` and ``@step:k_set``."""
    steps = [
        {"id": "k_set", "op": "assign", "expr": ref("@plan.input.key"), "bind": {"as": "k"}},
        _wait(
            op(
                "and",
                op("eq", ref("@event.key"), ref("@var:k")),
                op("eq", ref("@event.key"), ref("@step:k_set")),
            )
        ),
        end(result=ref("@var:got")),
    ]
    air = plan_world(
        tmp_path / "air",
        schemas=SCHEMAS,
        plans=[plan("t/wait@1", START, steps, chain("k_set", "wait", "end"), locals={"k": "text"})],
        triggers=[{"event": START, "plan": "t/wait@1"}],
        sink_events=[REPLY],
    )
    path = tmp_path / "w"
    _start_then_reply(path, air, [{"key": "b", "n": 2}, {"key": "a", "n": 1}])
    assert _results(path) == {0: ("ok", {"key": "a", "n": 1})}
    assert verify_world(path).ok


def test_a_run_that_ends_with_a_reply_in_its_mailbox_dead_letters_it(tmp_path: Path) -> None:
    """``a_wait`` begins to wait, the reply is delivered, then ``b_end`` (ready all along)
    ends the run before the reply is bound: it becomes a ``run_ended`` dead letter of the
    tick that ended the run."""
    steps = [_wait(), end("b_end")]
    steps[0]["id"] = "a_wait"
    air = plan_world(
        tmp_path / "air",
        schemas=SCHEMAS,
        plans=[plan("t/wait@1", START, steps, [])],
        triggers=[{"event": START, "plan": "t/wait@1"}],
        sink_events=[REPLY],
    )
    path = tmp_path / "w"
    with World.create(path, air) as world:
        world.send(START, {"key": "a"})
        for _ in range(10):
            world.step(1)
            if world.kernel.plans.runs[0].waits:
                break
        assert [w["step"] for w in world.kernel.plans.runs[0].waits] == ["a_wait"]
        world.send(REPLY, {"key": "a", "n": 1})
        world.run_until_idle()
        assert not world.kernel.plans.runs
        letters = [d for d in world.kernel.dead_letters.letters if d.schema == REPLY]
    [end_record] = of_kind(records(path), "plan.ended")
    assert end_record.body["status"] == "ok"
    assert [(d.seq, d.reducer, d.code, d.detail) for d in letters] == [
        (end_record.seq, "t/wait@1", "run_ended", "run 0 had already ended")
    ]
    assert verify_world(path).ok


def test_a_steps_exprs_read_the_schemas_of_its_era(tmp_path: Path) -> None:
    steps = [
        {
            "id": "a",
            "op": "assign",
            "expr": op("json_encode", ref("@plan.input"), START),
            "bind": {"as": "j"},
        },
        end(result=ref("@var:j")),
    ]
    air = plan_world(
        tmp_path / "air",
        schemas=SCHEMAS,
        plans=[plan("t/json@1", START, steps, chain("a", "end"), locals={"j": "text"})],
        triggers=[{"event": START, "plan": "t/json@1"}],
    )
    path = tmp_path / "w"
    _start_then_reply(path, air, [])
    assert _results(path) == {0: ("ok", '{"key":"a"}')}


# --- @run.id ----------------------------------------------------------------------------------


def _run_id_world(folder: Path, result: Any) -> Path:
    step = {"id": "name", "op": "assign", "expr": result, "bind": {"as": "named"}}
    return plan_world(
        folder,
        schemas=SCHEMAS,
        plans=[
            plan("t/named@1", START, [step, end(result=ref("@var:named"))], chain("name", "end"))
        ],
        triggers=[{"event": START, "plan": "t/named@1"}],
    )


def test_run_id_is_each_run_s_own_and_replays_the_same(tmp_path: Path) -> None:
    """``@run.id`` reads the run's id (a nat): a plan builds a key from it that no other run
    of the world has, the same on every replay."""
    key = op("concat", {"text": "charge-"}, op("int_to_text", ref("@run.id")))
    path = tmp_path / "w"
    with World.create(path, _run_id_world(tmp_path / "air", key)) as world:
        for name in ("a", "b", "c"):
            world.send(START, {"key": name})
        world.run_until_idle()
    results = {run: body["result"] for run, body in ended(records(path)).items()}
    assert results == {0: "charge-0", 1: "charge-1", 2: "charge-2"}
    assert verify_world(path).ok


@pytest.mark.parametrize(
    ("written", "code"),
    [
        ("@run", "expr.parse.ref"),
        ("@run.id.x", "expr.parse.ref"),
        ("@run.input", "expr.parse.ref"),
    ],
)
def test_only_run_id_is_a_run_ref(written: str, code: str) -> None:
    with pytest.raises(ExprError) as refused:
        parse_expr({"ref": written})
    assert refused.value.code == code


def test_run_id_is_a_nat_to_the_type_checker(tmp_path: Path) -> None:
    """Where text is wanted, ``@run.id`` is refused when the AIR loads, naming the step."""
    from air.errors import ManifestError

    step = {"id": "name", "op": "assign", "expr": op("concat", {"text": "x"}, ref("@run.id")),
            "bind": {"as": "named"}}  # fmt: skip
    air = plan_world(
        tmp_path / "air",
        schemas=SCHEMAS,
        plans=[plan("t/named@1", START, [step, end()], chain("name", "end"))],
        triggers=[{"event": START, "plan": "t/named@1"}],
    )
    with pytest.raises(ManifestError) as refused:
        World.create(tmp_path / "w", air)
    assert any("/steps/0" in d.pointer for d in refused.value.diagnostics)
