"""A plan's routed ``raise_event`` (``{event, value}``, AgentOS's form) at run time: the kernel
routes it as it routes an event of that schema from outside (every route whose event matches,
the key from each route's ``key_field``), it replays exactly, and a value the routes cannot key
ends the run with ``plan.raise_event.key_field``. And ``emit_effect.idempotency_key``: journaled
in ``effect.queued`` and folded into the intent hash only when given."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

from plans_kit import of_kind, records
from typer.testing import CliRunner

from air import cbor
from air._model import Route, Routing
from air.types import Ref
from air.values import check as check_value
from cli.main import app
from kernel._effects import intent_hash
from kernel._plans import CONTINUE, PlanEngine, Run
from world import World
from world._airfiles import load_air_path
from world.history import verify_world

from worldkit import COUNTER, EVENT, counter_with_plans

GO = "t/Go@1"
TWIN = "demo/CounterTwin@1"

RAISE = {
    "id": "add",
    "op": "raise_event",
    "event": EVENT,
    "value": {
        "record": {
            "key": {"ref": "@plan.input.key"},
            "op": {"variant": {"tag": "Add", "value": {"ref": "@plan.input.n"}}},
        }
    },
}
"""The routed form: no reducer, no key; the counter's route keys it by ``key``."""


def _plan(steps: list[dict[str, Any]], edges: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {"$kind": "defplan", "name": "t/go@1", "input": GO, "steps": steps, "edges": edges}


def _world_air(folder: Path, steps: list[dict[str, Any]], *, twin: bool = False, **kw: Any) -> Path:
    go = {"$kind": "defschema", "name": GO, "type": {"record": {"key": "text", "n": "nat"}}}
    path = counter_with_plans(folder, [{"event": GO, "plan": "t/go@1"}], [go, _plan(steps)], **kw)
    if twin:  # a second keyed reducer (the same wasm) that the counter's event is routed to too
        file = path / "counter.air.json"
        module, manifest = json.loads(file.read_text())
        other = copy.deepcopy(module)
        other["name"] = TWIN
        manifest["routing"]["events"].append({"event": EVENT, "reducer": TWIN, "key_field": "key"})
        file.write_text(json.dumps([module, other, manifest]))
    return path


def test_a_routed_raise_reaches_the_routed_cell_by_its_key_field_and_replays(
    tmp_path: Path,
) -> None:
    w = tmp_path / "w"
    with World.create(w, _world_air(tmp_path / "air", [RAISE])) as world:
        world.send(GO, {"key": "apples", "n": 3})
        world.run_until_idle()
        assert world.state(COUNTER, "apples")["count"] == 3
    (step,) = [r for r in of_kind(records(w), "plan.step") if r.body["op"] == "raise_event"]
    assert step.body["event"][0] == EVENT
    assert "reducer" not in step.body
    assert "key" not in step.body
    assert verify_world(w).ok


def test_an_event_routed_to_two_reducers_reaches_both(tmp_path: Path) -> None:
    w = tmp_path / "w"
    with World.create(w, _world_air(tmp_path / "air", [RAISE], twin=True)) as world:
        world.send(GO, {"key": "pears", "n": 2})
        world.run_until_idle()
        assert world.state(COUNTER, "pears")["count"] == 2
        assert world.state(TWIN, "pears")["count"] == 2
    steps = of_kind(records(w), "step")
    assert sorted(r.body["reducer"] for r in steps) == [COUNTER, TWIN]
    assert verify_world(w).ok


def test_a_value_without_the_routes_key_field_ends_the_run_with_its_code(tmp_path: Path) -> None:
    """Validation refuses a route whose ``key_field`` the schema lacks, so this is the engine's
    own check (a run's era and its routes are the engine's), met here by a route edited in."""
    air = load_air_path(_world_air(tmp_path / "air", [RAISE]))
    routing = Routing(events=[Route(event=EVENT, reducer=COUNTER, key_field="owner")])
    air = dataclasses.replace(air, manifest=air.manifest.model_copy(update={"routing": routing}))

    def check(schema: str, value: Any) -> None:
        check_value(Ref(schema), value, air.schemas)

    engine = PlanEngine(air, check, air.key_types)
    run = Run(0, "t/go@1", {"key": "a", "n": 1}, None, None, b"\0" * 32)
    out = engine.tick(run, CONTINUE, None)
    assert out.ended
    assert out.raised == []
    (_kind, body) = out.records[-1]
    assert body["error"]["code"] == "plan.raise_event.key_field"
    assert out.where == {"step": "add", "pointer": "/steps/0/value"}


# --- emit_effect.idempotency_key -------------------------------------------------------------

TIMER_DEFAULTS = {"cap_grants": [{"name": "timer", "cap": "sys/timer@1", "params": {}}]}


def _emit(key: Any = None) -> dict[str, Any]:
    step: dict[str, Any] = {
        "id": "wait",
        "op": "emit_effect",
        "kind": "timer.set",
        "cap": "timer",
        "params": {"record": {"deliver_at_ns": {"nat": 10}, "key": {"none": {}}}},
        "bind": {"effect_id_as": "timer"},
    }
    if key is not None:
        step["idempotency_key"] = key
    return step


def _queued(tmp_path: Path, name: str, key: Any) -> dict[str, Any]:
    policy = {
        "$kind": "defpolicy",
        "name": "t/policy@1",
        "rules": [{"when": {"effect_kind": "timer.set"}, "decision": "allow"}],
    }
    go = {"$kind": "defschema", "name": GO, "type": {"record": {"key": "text", "n": "nat"}}}
    air = counter_with_plans(
        tmp_path / f"{name}-air",
        [{"event": GO, "plan": "t/go@1"}],
        [go, _plan([_emit(key)]), policy],
        {**TIMER_DEFAULTS, "policy": "t/policy@1"},
    )
    w = tmp_path / name
    with World.create(w, air) as world:
        world.send(GO, {"key": "k", "n": 1})
        world.run_until_idle(max_steps=20)
    assert verify_world(w).ok
    (queued,) = of_kind(records(w), "effect.queued")
    return dict(queued.body)


def test_an_idempotency_key_is_journaled_and_folded_into_the_intent_hash(tmp_path: Path) -> None:
    keyed = _queued(
        tmp_path, "keyed", {"op": "concat", "args": ["order-", {"ref": "@plan.input.key"}]}
    )
    plain = _queued(tmp_path, "plain", None)
    assert keyed["idempotency_key"] == "order-k"
    assert "idempotency_key" not in plain
    origin_key = "run:0:wait"
    assert plain["intent_hash"] == intent_hash("timer.set", plain["params"], "timer", origin_key)
    assert keyed["intent_hash"] == intent_hash(
        "timer.set", keyed["params"], "timer", origin_key, "order-k"
    )
    assert keyed["intent_hash"] != plain["intent_hash"]


def test_a_live_intent_shows_its_idempotency_key_in_effects_ls(tmp_path: Path) -> None:
    _queued(tmp_path, "listed", "order-7")
    _queued(tmp_path, "unlisted", None)
    for name, want in (("listed", "order-7"), ("unlisted", None)):
        result = CliRunner().invoke(app, ["effects", "ls", str(tmp_path / name), "--json"])
        assert result.exit_code == 0, result.stdout
        (row,) = json.loads(result.stdout)["intents"]
        assert row["status"] == "queued"
        assert row.get("idempotency_key") == want


def test_an_idempotency_key_of_the_hash_op_is_bytes(tmp_path: Path) -> None:
    keyed = _queued(tmp_path, "hashed", {"op": "hash", "args": [{"ref": "@plan.input"}]})
    assert keyed["idempotency_key"] == cbor.digest(cbor.dumps({"key": "k", "n": 1}))
