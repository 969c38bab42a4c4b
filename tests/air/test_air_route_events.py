"""A route to a reducer that cannot take its event is refused at validation
(``air.route.event_not_accepted``; the rule is ``air._validate``'s "Routes"): the route's event
is neither the reducer's ABI event nor a case of it, and the ABI event reaches the reducer by no
route and no plan. Reducers of several events, as the bundled order world and AgentOS write
them, still validate."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from air import AirSource, LoadedAir, load_air
from air.errors import ManifestError
from world._airfiles import builtin_sources, load_air_path

ROOT = Path(__file__).resolve().parents[2]
CODE = "air.route.event_not_accepted"
RECORD = {"record": {"key": "text"}}


def _schema(name: str, type_json: Any = RECORD) -> dict[str, Any]:
    return {"$kind": "defschema", "name": name, "type": type_json}


def _module(name: str, event: str) -> dict[str, Any]:
    return {
        "$kind": "defmodule",
        "name": name,
        "module_kind": "reducer",
        "wasm_hash": "blake3:" + "0" * 64,
        "abi": {"reducer": {"state": "t/State@1", "event": event}},
    }


def _world(routes: list[tuple[str, str]], *extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Schemas t/A@1, t/B@1, t/C@1; reducer t/R@1 takes t/A@1, t/S@1 takes t/B@1."""
    return [
        _schema("t/State@1", "nat"),
        *(_schema(f"t/{n}@1") for n in "ABC"),
        _module("t/R@1", "t/A@1"),
        _module("t/S@1", "t/B@1"),
        *extra,
        {
            "$kind": "manifest",
            "routing": {"events": [{"event": e, "reducer": r} for e, r in routes]},
        },
    ]


def _load(docs: list[dict[str, Any]]) -> LoadedAir:
    return load_air([*builtin_sources(), AirSource("w.air.json", json.dumps(docs))])


def _found(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as info:
        _load(docs)
    return [(d.code, d.pointer) for d in info.value.diagnostics]


def _raise_plan(event: Any) -> dict[str, Any]:
    return {
        "$kind": "defplan",
        "name": "t/plan@1",
        "input": "t/C@1",
        "steps": [
            {"id": "r", "op": "raise_event", "reducer": "t/R@1", "event": event},
            {"id": "end", "op": "end"},
        ],
        "edges": [{"from": "r", "to": "end"}],
    }


def test_a_route_of_the_abi_event_is_accepted() -> None:
    _load(_world([("t/A@1", "t/R@1"), ("t/B@1", "t/S@1")]))


def test_a_reducer_routed_only_another_event_is_refused_at_the_routes_event() -> None:
    docs = _world([("t/B@1", "t/R@1")])
    assert _found(docs) == [(CODE, "/6/routing/events/0/event")]


def test_each_wrong_route_is_refused_and_the_right_ones_of_other_reducers_are_not() -> None:
    docs = _world([("t/B@1", "t/S@1"), ("t/B@1", "t/R@1"), ("t/C@1", "t/R@1")])
    assert _found(docs) == [
        (CODE, "/6/routing/events/1/event"),
        (CODE, "/6/routing/events/2/event"),
    ]


def test_the_message_names_the_reducer_its_abi_event_and_the_route_event() -> None:
    with pytest.raises(ManifestError) as info:
        _load(_world([("t/B@1", "t/R@1")]))
    (diag,) = info.value.diagnostics
    assert (diag.file, diag.code) == ("w.air.json", CODE)
    assert all(name in diag.message for name in ("t/R@1", "t/A@1", "t/B@1"))


def test_another_event_beside_the_abi_event_is_how_a_reducer_takes_several() -> None:
    _load(_world([("t/A@1", "t/R@1"), ("t/B@1", "t/R@1"), ("t/C@1", "t/R@1")]))


def test_the_abi_event_raised_by_a_plan_counts_as_reaching_the_reducer() -> None:
    named = {"record": {"$schema": "t/A@1", "key": {"ref": "@plan.input.key"}}}
    _load(_world([("t/B@1", "t/R@1")], _raise_plan(named)))
    unnamed = {"record": {"key": {"ref": "@plan.input.key"}}}  # the ABI event by default
    _load(_world([("t/B@1", "t/R@1")], _raise_plan(unnamed)))


def test_a_plan_raising_another_event_does_not_make_a_wrong_route_right() -> None:
    other = {"record": {"$schema": "t/C@1", "key": {"ref": "@plan.input.key"}}}
    docs = _world([("t/B@1", "t/R@1"), ("t/C@1", "t/R@1")], _raise_plan(other))
    assert _found(docs) == [
        (CODE, "/7/routing/events/0/event"),
        (CODE, "/7/routing/events/1/event"),
    ]


def test_a_case_of_a_variant_abi_event_is_accepted_as_agentos_writes_it() -> None:
    docs = _world([("t/B@1", "t/R@1"), ("t/C@1", "t/R@1")])
    docs.insert(4, _schema("t/Events@1", {"variant": {"B": "t/B@1", "C": {"ref": "t/C@1"}}}))
    docs[5]["abi"]["reducer"]["event"] = "t/Events@1"
    _load(docs)


def test_a_route_outside_a_variant_abi_event_none_of_whose_cases_arrive_is_refused() -> None:
    docs = _world([("t/C@1", "t/R@1")])
    docs.insert(4, _schema("t/Events@1", {"variant": {"B": "t/B@1", "Tick": "unit"}}))
    docs[5]["abi"]["reducer"]["event"] = "t/Events@1"
    assert _found(docs) == [(CODE, "/7/routing/events/0/event")]


def test_an_unknown_abi_event_is_reported_once_as_unknown() -> None:
    docs = _world([("t/B@1", "t/R@1")])
    docs[4]["abi"]["reducer"]["event"] = "t/Nope@1"
    assert _found(docs) == [("air.ref.unknown_schema", "/4/abi/reducer/event")]


def test_the_bundled_order_world_routes_a_second_event_to_its_reducer_and_validates() -> None:
    air = load_air_path(ROOT / "manifests" / "order")
    abi_event = air.modules["demo/Order@1"].abi.reducer.event
    routed = {r.event for r in air.manifest.routing.events if r.reducer == "demo/Order@1"}
    assert routed == {abi_event, "demo/FetchDone@1"}


def test_the_counter_world_routed_a_wrong_event_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "counter"
    folder.mkdir()
    for src in (ROOT / "manifests" / "counter").glob("*.air.json"):
        docs = json.loads(src.read_text())
        for doc in docs:
            if doc["$kind"] == "defmodule":
                doc["wasm"] = str(ROOT / "reducers" / "counter" / "counter.wasm")
            if doc["$kind"] == "manifest":
                doc["routing"]["events"][0]["event"] = "demo/CounterState@1"
                doc["routing"]["events"][0].pop("key_field")
                doc.pop("module_bindings", None)
        (folder / src.name).write_text(json.dumps(copy.deepcopy(docs)))
    with pytest.raises(ManifestError) as info:
        load_air_path(folder)
    assert CODE in {d.code for d in info.value.diagnostics}
