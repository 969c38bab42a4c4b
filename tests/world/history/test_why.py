"""``world why``: the chain of causes back from the record that wrote a cell's state, each link
read from the journal (``world.history._why``); and ``plan.started``'s ``src``, the link from a
run to its trigger, replayed exactly in new journals and absent, still replaying, in old ones.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from httpkit import Answer, Loopback
from plans_kit import ORDER, ORDER_PLACED
from typer.testing import CliRunner

from air import cbor
from cli.main import app
from kernel.errors import ReplayDivergence
from world import World
from world.history import why

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT, add, counter_with_plans, extract_fixture

runner = CliRunner()
WORLD = str(Path(sys.executable).parent / "world")
OLD_WORLD = ROOT / "tests" / "fixtures" / "world_before_run_src.tar.gz"
"""An order world (two orders, effects stub) written before ``plan.started`` had ``src``."""

REMIND = {
    "$kind": "defplan",
    "name": "hello/remind@1",
    "input": "hello/Reminder@1",
    "steps": [
        {
            "id": "wait",
            "op": "emit_effect",
            "kind": "timer.set",
            "cap": "timer",
            "params": {
                "record": {
                    "deliver_at_ns": {"ref": "@plan.input.at_ns"},
                    "key": {"ref": "@plan.input.key"},
                }
            },
            "bind": {"effect_id_as": "timer"},
        },
        {"id": "fired", "op": "await_receipt", "for": {"ref": "@var:timer"}, "bind": {"as": "t"}},
        {
            "id": "add",
            "op": "raise_event",
            "reducer": COUNTER,
            "key": {"ref": "@plan.input.key"},
            "event": {
                "record": {
                    "key": {"ref": "@plan.input.key"},
                    "op": {"variant": {"tag": "Add", "value": {"ref": "@plan.input.amount"}}},
                }
            },
        },
    ],
    "edges": [{"from": "wait", "to": "fired"}, {"from": "fired", "to": "add"}],
    "required_caps": ["timer"],
    "allowed_effects": ["timer.set"],
}
"""The tutorial's plan: a timer, then an ``Add`` raised to the reminder's cell."""

RELAY = {
    "$kind": "defplan",
    "name": "hello/relay@1",
    "input": "demo/CounterEvent@1",
    "steps": [
        {"id": "look", "op": "assign", "expr": {"ref": "@plan.input.key"}, "bind": {"as": "k"}},
        {
            "id": "pass",
            "op": "raise_event",
            "reducer": COUNTER,
            "key": {"text": "pears"},
            "event": {
                "record": {
                    "key": {"text": "pears"},
                    "op": {"variant": {"tag": "Add", "value": {"nat": 1}}},
                }
            },
        },
    ],
    "edges": [
        {
            "from": "look",
            "to": "pass",
            "when": {"op": "eq", "args": [{"ref": "@var:k"}, {"text": "apples"}]},
        }
    ],
}
"""A second plan, started by every counter event: one for ``apples`` adds 1 to ``pears``."""


def reminder_air(
    folder: Path,
    decision: str,
    plans: list[dict[str, Any]] = (),  # type: ignore[assignment]
    triggers: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> Path:
    """The counter world with the tutorial's reminder plan (``REMIND``), its timers' policy
    ``decision`` (``allow``, ``require_approval``), and more ``plans`` and ``triggers``."""
    reminder = {"record": {"key": "text", "amount": "nat", "at_ns": "nat"}}
    policy = {
        "$kind": "defpolicy",
        "name": "hello/policy@1",
        "rules": [{"when": {"effect_kind": "timer.set"}, "decision": decision}],
    }
    return counter_with_plans(
        folder,
        [{"event": "hello/Reminder@1", "plan": "hello/remind@1"}, *triggers],
        [
            {"$kind": "defschema", "name": "hello/Reminder@1", "type": reminder},
            REMIND,
            *plans,
            policy,
        ],
        {
            "policy": "hello/policy@1",
            "cap_grants": [{"name": "timer", "cap": "sys/timer@1", "params": {}}],
        },
    )


def _two_plans_air(folder: Path) -> Path:
    """The counter world, with ``remind`` (timer, then an Add to the reminder's key) and
    ``relay`` (an Add to ``apples`` makes an Add to ``pears``)."""
    relay = {"event": "demo/CounterEvent@1", "plan": "hello/relay@1"}
    return reminder_air(folder, "allow", [RELAY], [relay])


def _old_world(fixture: Path, tmp_path: Path) -> Path:
    """A world from a fixture archive (written by older code), extracted into ``tmp_path``."""
    extract_fixture(fixture, tmp_path)
    return tmp_path / "w"


def _cli(*args: object) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def two_plans(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("why")
    path = base / "w"
    _cli("init", path, "--air", _two_plans_air(base / "air"))
    reminder = {"key": "apples", "amount": 5, "at_ns": 1_000_000_000}
    _cli("send", path, "hello/Reminder@1", json.dumps(reminder), "--id", "remind-1")
    _cli("run", path, "--sim")
    return path


def _links(answer: Any) -> list[tuple[str, str]]:
    return [(cause.kind, cause.link) for cause in answer.chain]


def test_a_chain_through_two_plans_and_a_timer(two_plans: Path) -> None:
    answer = why(two_plans, COUNTER, "pears")
    assert answer.state == {"count": 1, "events": 1}
    assert _links(answer) == [
        ("step", "wrote the state"),
        ("plan.step", "raised it"),  # relay's Add to pears
        ("plan.started", "ran it"),  # relay, started by...
        ("plan.step", "raised it"),  # ...remind's Add to apples
        ("plan.started", "ran it"),  # remind, started by...
        ("event.in", "delivered it"),  # ...the reminder sent from outside
    ]
    assert answer.ends == "sent from outside"
    assert "remind-1" in answer.chain[-1].says
    plans = [c.record["subject"].split("/")[3:5] for c in answer.chain if c.kind == "plan.started"]
    assert plans == [["hello", "relay@1"], ["hello", "remind@1"]]
    # Each run's start names the record of its trigger, and the chain went there.
    for start, trigger in zip(answer.chain[2::2], answer.chain[3::2], strict=False):
        if start.kind == "plan.started":
            assert start.record["body"]["src"] == trigger.seq
    # remind raised its Add after binding the timer's receipt: beside it, the receipt, and
    # beside that its intent and the policy's decision.
    remind_raise = answer.chain[3]
    [receipt] = remind_raise.beside
    assert receipt.kind == "receipt"
    assert receipt.record["body"]["adapter_id"] == "timer.sim"
    assert [b.kind for b in receipt.beside] == ["effect.queued", "policy.decision"]
    assert receipt.beside[0].record["body"]["kind"] == "timer.set"
    assert receipt.beside[1].record["body"]["decision"] == "allow"


def test_at_an_earlier_seq_the_chain_is_of_the_state_then(two_plans: Path) -> None:
    now = why(two_plans, COUNTER, "apples")
    assert now.state == {"count": 5, "events": 1}
    writer = now.chain[0].seq
    before = why(two_plans, COUNTER, "apples", at=writer - 1)
    assert before.state is None
    assert before.chain == []
    assert before.ends == "the cell did not exist then"
    assert why(two_plans, COUNTER, "apples", at=writer).chain[0].seq == writer


def test_a_receipt_delivered_to_a_cell_leads_to_the_step_that_asked_for_it(tmp_path: Path) -> None:
    """The timer example's reducer sets a timer; its ``TimerFired`` step's cause is the
    receipt, whose intent was made by the cell's own earlier step (its tick's first record)."""
    path = tmp_path / "w"
    _cli("init", path, "--example", "timer")
    air = json.loads(_cli("validate", ROOT / "manifests" / "timer", "--json"))
    assert air["ok"]
    docs = json.loads((ROOT / "manifests" / "timer" / "timer.air.json").read_text())
    route = next(d for d in docs if d["$kind"] == "manifest")["routing"]["events"][0]
    key_field, event = route["key_field"], route["event"]
    event_value = _timer_event(docs, event, key_field)
    _cli("send", path, event, json.dumps(event_value))
    _cli("run", path, "--sim")
    reducer = route["reducer"]
    answer = why(path, reducer, event_value[key_field])
    kinds = [c.kind for c in answer.chain]
    assert kinds == ["step", "receipt", "step", "event.in"], _links(answer)
    receipt, asked = answer.chain[1], answer.chain[2]
    assert receipt.link == "answered it"
    assert asked.link == "asked for it"
    assert "asking for 1 effect" in asked.says
    assert [b.kind for b in receipt.beside] == ["effect.queued", "policy.decision"]
    assert receipt.beside[0].record["body"]["origin"]["kind"] == "reducer"


def _timer_event(docs: list[dict[str, Any]], event: str, key_field: str) -> dict[str, Any]:
    schema = next(d for d in docs if d.get("name") == event)
    fields = schema["type"]["record"]
    value: dict[str, Any] = {}
    for name, kind in fields.items():
        value[name] = "k1" if name == key_field else 1_000_000
        if kind == "text" and name != key_field:
            value[name] = "x"
    return value


@pytest.mark.parametrize(("status", "tag"), [(200, "Fetched"), (503, "Failed")])
def test_an_order_fetched_over_http_leads_back_to_its_receipt(
    tmp_path: Path, status: int, tag: str
) -> None:
    with Loopback({"/o1": Answer(status=status)}) as server:
        path = tmp_path / "w"
        _cli("init", path, "--example", "order")
        placed = {"order_id": "o1", "url": server.url("/o1")}
        _cli("send", path, ORDER_PLACED, json.dumps(placed))
        _cli("run", path, "--until-idle")
    answer = why(path, ORDER, "o1")
    assert answer.state["status"]["$tag"] == tag
    assert [c.kind for c in answer.chain] == [
        "step",
        "plan.step",
        "plan.started",
        "step",
        "event.in",
    ]
    receipts = answer.chain[1].beside  # a 5xx is retried by the plan: each one it bound
    assert {r.record["body"]["adapter_id"] for r in receipts} == {"http"}
    receipt = receipts[-1]
    assert receipt.record["body"]["payload"]["status"] == status
    queued = receipt.beside[0]
    assert queued.record["body"]["params"]["url"] == server.url("/o1")


def test_world_why_through_the_installed_script(two_plans: Path) -> None:
    text = subprocess.run(
        [WORLD, "why", str(two_plans), COUNTER, "pears"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert text.splitlines()[0].startswith(f"{COUNTER} pears at seq ")
    assert "raised it: run 1 raised demo/CounterEvent@1" in text
    assert "timer.sim answered intent blake3:" in text
    assert text.rstrip().endswith("(sent from outside)")
    done = subprocess.run(
        [WORLD, "why", str(two_plans), COUNTER, "pears", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    answer = json.loads(done.stdout)
    assert answer["ok"] is True
    assert answer["ends"] == "sent from outside"
    assert [c["kind"] for c in answer["chain"]][:2] == ["step", "plan.step"]
    missing = subprocess.run(
        [WORLD, "why", str(two_plans), COUNTER, "plums", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["ok"] is False
    plain = subprocess.run(
        [WORLD, "why", str(two_plans), COUNTER, "plums"], capture_output=True, text=True
    )
    assert plain.returncode == 1
    assert "no cell for key plums" in plain.stderr


def test_why_of_an_unknown_reducer_or_a_seq_past_the_end_names_it(two_plans: Path) -> None:
    bad = runner.invoke(app, ["why", str(two_plans), "demo/Nope@1", "a"])
    assert bad.exit_code == 1
    assert "demo/Nope@1" in bad.output
    past = runner.invoke(app, ["why", str(two_plans), COUNTER, "apples", "--at", "99999"])
    assert past.exit_code == 1
    assert "99999" in past.output


def test_a_new_run_names_its_trigger_and_replays(two_plans: Path) -> None:
    with World.open(two_plans, readonly=True) as world:
        starts = [r for r in world.journal.read(0) if r.kind == "plan.started"]
        triggers = {r.seq: r for r in world.journal.read(0)}
    assert starts
    for start in starts:
        trigger = triggers[start.body["src"]]
        assert start.body["idx"] >= 0
        assert trigger.kind in ("event.in", "plan.step", "step")
    assert "replay ok" in _cli("replay", two_plans, "--verify")


def test_a_journal_from_before_runs_named_their_trigger_replays_and_goes_on(
    tmp_path: Path,
) -> None:
    path = _old_world(OLD_WORLD, tmp_path)
    with World.open(path, readonly=True) as world:
        old = [r for r in world.journal.read(0) if r.kind == "plan.started"]
    assert len(old) == 2
    assert all("src" not in r.body for r in old)
    assert "replay ok" in _cli("replay", path, "--verify")
    placed = {"order_id": "o3", "url": "http://127.0.0.1:9/z"}
    _cli("send", path, ORDER_PLACED, json.dumps(placed))
    _cli("run", path, "--until-idle", "--effects", "stub")
    with World.open(path, readonly=True) as world:
        starts = [r for r in world.journal.read(0) if r.kind == "plan.started"]
    assert ["src" in r.body for r in starts] == [False, False, True]
    assert "replay ok" in _cli("replay", path, "--verify")
    # The old runs' chains stop at the start that does not name its trigger, and say so.
    answer = why(path, ORDER, "o1")
    assert answer.chain[-1].kind == "plan.started"
    assert "does not name" in answer.ends
    assert why(path, ORDER, "o3").ends == "sent from outside"


def test_an_edited_start_that_names_another_trigger_diverges_on_replay(tmp_path: Path) -> None:
    """The new field is checked like every other: replay recomputes it."""
    with World.create(tmp_path / "w", _two_plans_air(tmp_path / "air")) as world:
        world.send(EVENT, add("apples", 1))
        world.run_until_idle()
        records = list(world.journal.read(0))
        blank = world.blank_kernel()
    start = next(r for r in records if r.kind == "plan.started")
    assert start.body["src"] == 1
    edited = [
        r if r is not start else dataclasses.replace(r, body={**r.body, "src": 0}) for r in records
    ]
    with pytest.raises(ReplayDivergence) as caught:
        _apply_all(blank, edited)
    assert caught.value.seq == start.seq


def _apply_all(kernel: Any, records: list[Any]) -> None:
    for record in records:
        kernel.apply(record)


def test_the_writer_is_found_when_the_history_index_stored_its_state(tmp_path: Path) -> None:
    """The index stores a cell's state after some of its steps; the step it stored after is
    still the cell's writer (a reader that starts from the stored state must not skip it)."""
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        world.send_many([(EVENT, add("a", 1)) for _ in range(70)])
        world.run_until_idle()
        world.snapshot()
        last_step = max(r.seq for r in world.journal.read(0) if r.kind == "step")
    answer = why(tmp_path / "w", COUNTER, "a")
    assert answer.state == {"count": 70, "events": 70}
    assert answer.chain[0].seq == last_step
    assert [c.kind for c in answer.chain] == ["step", "event.in"]


def test_across_an_upgrade_that_renamed_the_reducer_the_upgrade_and_the_old_step_are_causes(
    tmp_path: Path,
) -> None:
    from world.gov import apply, propose, upgrade_cells

    path = tmp_path / "w"
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add("a", 3))])
        world.run_until_idle()
        made, _diff = propose(world, ROOT / "tests" / "fixtures" / "counter_v2_air")
        apply(world, made.id)
    with World.open(path) as world:
        before = why(path, "demo/Counter@2", "a")  # pinned to the old era, not upgraded yet
        upgrade_cells(world, "demo/Counter@2")
    assert [c.kind for c in before.chain] == ["step", "event.in"]
    assert before.chain[0].record["body"]["reducer"] == COUNTER  # its name then
    answer = why(path, "demo/Counter@2", "a")
    assert "upgraded_from" in answer.state
    assert [(c.kind, c.link) for c in answer.chain] == [
        ("cell.upgraded", "upgraded the state"),
        ("step", "wrote the state it upgraded"),
        ("event.in", "delivered it"),
    ]


def test_a_chain_longer_than_its_bound_ends_saying_so(
    two_plans: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from world.history import _why

    monkeypatch.setattr(_why, "CHAIN_MAX", 3)
    answer = why(two_plans, COUNTER, "pears")
    assert len(answer.chain) == 3
    assert answer.ends == "the chain is longer than 3 links"


OLD_AWAIT_WORLD = ROOT / "tests" / "fixtures" / "world_before_await_src.tar.gz"
"""A world of ``_await_air`` (an Ask, the run waiting, a Reply it bound, its Add raised),
written before the binding ``plan.step`` had ``src``."""


def _await_air(folder: Path) -> Path:
    """The counter world with ``t/ask@1`` (started by ``t/Ask@1``: await ``t/Reply@1``, then
    Add its amount to the asker's key) and ``t/ack@1`` (a trigger for replies, so that one can
    be sent)."""
    triggers = [
        {"event": "t/Ask@1", "plan": "t/ask@1"},
        {"event": "t/Reply@1", "plan": "t/ack@1"},
    ]
    docs = json.loads((ROOT / "tests" / "fixtures" / "await_air" / "ask.air.json").read_text())
    return counter_with_plans(folder, triggers, docs)


def test_an_awaited_event_is_shown_beside_the_raise_with_the_record_that_sent_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w"
    _cli("init", path, "--air", _await_air(tmp_path / "air"))
    _cli("send", path, "t/Ask@1", '{"key": "apples"}')
    _cli("run", path, "--until-idle")
    _cli("send", path, "t/Reply@1", '{"amount": 4}', "--id", "reply-1")
    _cli("run", path, "--until-idle")
    answer = why(path, COUNTER, "apples")
    assert answer.state == {"count": 4, "events": 1}
    assert [c.kind for c in answer.chain] == ["step", "plan.step", "plan.started", "event.in"]
    [awaited] = answer.chain[1].beside
    assert awaited.link == "awaited by the run before"
    assert awaited.record["body"]["event"] == {"schema": "t/Reply@1", "value": {"amount": 4}}
    [sent] = awaited.beside
    assert sent.kind == "event.in"
    assert sent.record["body"]["id"] == "reply-1"
    assert awaited.record["body"]["src"] == sent.seq
    assert "replay ok" in _cli("replay", path, "--verify")


def test_a_binding_from_before_bindings_named_their_event_replays_and_says_so(
    tmp_path: Path,
) -> None:
    path = _old_world(OLD_AWAIT_WORLD, tmp_path)
    with World.open(path, readonly=True) as world:
        [old] = [
            r
            for r in world.journal.read(0)
            if r.kind == "plan.step" and r.body["op"] == "await_event" and "event" in r.body
        ]
    assert "src" not in old.body
    assert "replay ok" in _cli("replay", path, "--verify")
    answer = why(path, COUNTER, "apples")
    [awaited] = answer.chain[1].beside
    assert "journaled before bindings named" in awaited.says
    assert awaited.beside == []
    # a new run's binding names its event's record, and the whole journal replays
    _cli("send", path, "t/Ask@1", '{"key": "pears"}')
    _cli("run", path, "--until-idle")
    _cli("send", path, "t/Reply@1", '{"amount": 2}')
    _cli("run", path, "--until-idle")
    with World.open(path, readonly=True) as world:
        bindings = [r for r in world.journal.read(0) if _binds_an_event(r)]
    assert ["src" in r.body for r in bindings] == [False, True]
    assert "replay ok" in _cli("replay", path, "--verify")
    assert why(path, COUNTER, "pears").chain[1].beside[0].beside[0].kind == "event.in"


def _binds_an_event(record: Any) -> bool:
    body = record.body
    return record.kind == "plan.step" and body["op"] == "await_event" and "event" in body


def test_a_re_pin_keeps_the_step_as_the_writer(tmp_path: Path, fixed_wasm: bytes) -> None:
    """``cells upgrade`` with the same state schema re-pins the cell (``cell.upgraded`` with no
    new state): the state is still the one its last step wrote."""
    from test_upgrade_apply import counter_air

    from world.gov import apply, propose, upgrade_cells

    path = tmp_path / "w"
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add("a", 3))])
        world.run_until_idle()
        made, _diff = propose(world, counter_air(tmp_path, "v2", fixed_wasm))
        apply(world, made.id)
        upgrade_cells(world, COUNTER)
        repin = [r for r in world.journal.read(0) if r.kind == "cell.upgraded"]
    assert [entry[2] for entry in repin[0].body["cells"]] == [None]  # a re-pin
    answer = why(path, COUNTER, "a")
    assert [(c.kind, c.link) for c in answer.chain] == [
        ("step", "wrote the state"),
        ("event.in", "delivered it"),
    ]


def test_a_seq_the_index_gives_for_another_cell_is_not_taken_for_this_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history index names a cell by 8 bytes of its hash, so it can hand over another
    cell's record: the walk checks each record's subject."""
    from world.history import _why

    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        world.send_many([(EVENT, add("a", 1)), (EVENT, add("b", 1))])
        world.run_until_idle()
        steps = {r.body["key"]: r.seq for r in world.journal.read(0) if r.kind == "step"}
    a_step, b_step = steps[cbor.dumps("a")], steps[cbor.dumps("b")]
    assert b_step > a_step  # b's is the newer: taken without the check, it would be the writer
    real = _why.cell_seqs
    monkeypatch.setattr(_why, "cell_seqs", lambda *args: sorted({*real(*args), b_step}))
    assert why(tmp_path / "w", COUNTER, "a").chain[0].seq == a_step
