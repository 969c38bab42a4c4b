"""AIR v1 plans, caps and policies: the Cells seed's examples validate verbatim, old step shapes
get one diagnostic each, AIR written for AgentOS validates, and the plan checks catch what they
should with a stable code at the right pointer."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from air import AirSource, LoadedAir, expr, load_air
from air._model import RaiseEvent
from air.errors import ManifestError
from world._airfiles import builtin_sources, load_air_path

from worldkit import ROOT, const_wasm, output, write_world_air

# The Cells seed's "Examples" section, character for character.
SEED_ROUTE = (
    '{ "event": "com.acme/ChargeRequested@1", "reducer": "com.acme/OrderSM@2", "key_field": "key" }'
)
SEED_TRIGGER = '{ "event": "com.acme/ChargeRequested@1", "plan": "com.acme/charge_flow@3", "correlate_by": "key" }'
SEED_STEP = '{ "id":"apply", "op":"raise_event", "reducer":"com.acme/OrderSM@2", "key": { "ref":"@plan.input.key" }, "event": { "record": { "$schema":"com.acme/PaymentApplied@1", "order_id": { "ref":"@plan.input.order_id" } } } }'

WASM = const_wasm(output(None))


def _schema(name: str, type_json: Any) -> dict[str, Any]:
    return {"$kind": "defschema", "name": name, "type": type_json}


def _module(name: str, state: str, event: str, **extra: Any) -> dict[str, Any]:
    return {
        "$kind": "defmodule",
        "name": name,
        "module_kind": "reducer",
        "wasm": "reducer.wasm",
        "abi": {"reducer": {"state": state, "event": event}},
        **extra,
    }


def _write(tmp_path: Path, docs: list[dict[str, Any]]) -> Path:
    folder = write_world_air(tmp_path / "air", {}, docs)
    (folder / "reducer.wasm").write_bytes(WASM)
    return folder


def _seed_world() -> list[dict[str, Any]]:
    return [
        _schema("com.acme/ChargeRequested@1", {"record": {"key": "text", "order_id": "text"}}),
        _schema("com.acme/PaymentApplied@1", {"record": {"order_id": "text"}}),
        _schema("com.acme/OrderState@1", {"record": {"paid": "bool"}}),
        _module(
            "com.acme/OrderSM@2",
            "com.acme/OrderState@1",
            "com.acme/PaymentApplied@1",
            key_schema="text",
        ),
        {
            "$kind": "defplan",
            "name": "com.acme/charge_flow@3",
            "input": "com.acme/ChargeRequested@1",
            "steps": [json.loads(SEED_STEP), {"id": "end", "op": "end"}],
            "edges": [{"from": "apply", "to": "end"}],
        },
        {
            "$kind": "manifest",
            "air_version": "1",
            "routing": {"events": [json.loads(SEED_ROUTE)]},
            "triggers": [json.loads(SEED_TRIGGER)],
        },
    ]


def _load(docs: list[dict[str, Any]]) -> LoadedAir:
    """Load with wasm hashes only (no binaries read)."""
    docs = copy.deepcopy(docs)
    for doc in docs:
        if doc["$kind"] == "defmodule":
            doc.pop("wasm", None)
            doc["wasm_hash"] = "blake3:" + "0" * 64
    return load_air([*builtin_sources(), AirSource("w.air.json", json.dumps(docs))])


def _codes(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as info:
        _load(docs)
    return [(d.code, d.pointer) for d in info.value.diagnostics]


def _order_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for f in sorted((ROOT / "manifests" / "order").glob("*.air.json")):
        docs.extend(json.loads(f.read_text()))
    return docs


def _plan_of(docs: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    return next((i, d) for i, d in enumerate(docs) if d["$kind"] == "defplan")


def _step(plan: dict[str, Any], step_id: str) -> tuple[int, dict[str, Any]]:
    return next((i, s) for i, s in enumerate(plan["steps"]) if s["id"] == step_id)


# --- the Cells seed ---------------------------------------------------------------------------


def test_the_seed_examples_validate_verbatim_in_a_small_world(tmp_path: Path) -> None:
    air = load_air_path(_write(tmp_path, _seed_world()))
    (route,) = air.manifest.routing.events
    assert (route.event, route.reducer, route.key_field) == (
        "com.acme/ChargeRequested@1",
        "com.acme/OrderSM@2",
        "key",
    )
    (step, _end) = air.plans["com.acme/charge_flow@3"].steps
    assert isinstance(step, RaiseEvent)
    assert expr.record_schema(expr.parse_expr(step.event)) == "com.acme/PaymentApplied@1"


def test_the_seed_step_raises_its_record_without_the_schema_field() -> None:
    event = expr.parse_expr(json.loads(SEED_STEP)["event"])
    env = expr.Env(plan_input={"key": "k-1", "order_id": "o-1"})
    assert expr.evaluate(event, env) == {"order_id": "o-1"}


def test_a_seed_step_naming_an_unknown_schema_is_reported_at_its_schema() -> None:
    docs = _seed_world()
    i, plan = _plan_of(docs)
    plan["steps"][0]["event"]["record"]["$schema"] = "com.acme/Nope@1"
    assert _codes(docs) == [
        ("air.ref.unknown_schema", f"/{i}/steps/0/event/record/$schema"),
    ]


def test_a_seed_step_with_a_field_its_schema_lacks_is_a_value_mismatch() -> None:
    docs = _seed_world()
    i, plan = _plan_of(docs)
    plan["steps"][0]["event"]["record"]["amount"] = 5
    assert _codes(docs) == [("air.value.mismatch", f"/{i}/steps/0/event/record/amount")]


# --- old shapes -------------------------------------------------------------------------------

# The order world's plan as the project wrote it before AIR v1 shapes.
OLD_ORDER_PLAN: dict[str, Any] = {
    "$kind": "defplan",
    "name": "demo/fetch_flow@1",
    "input": "demo/FetchRequested@1",
    "steps": [
        {
            "id": "fetch",
            "op": "emit_effect",
            "kind": "http.request",
            "cap": "http",
            "params": {
                "record": {
                    "method": "GET",
                    "url": {"ref": "@plan.input.url"},
                    "headers": {"lit": {}},
                    "body_ref": {"none": {}},
                }
            },
        },
        {"id": "response", "op": "await_receipt", "for": "fetch"},
        {
            "id": "done",
            "op": "raise_event",
            "reducer": "demo/Order@1",
            "event": "demo/FetchDone@1",
            "key": {"ref": "@plan.input.order_id"},
            "value": {
                "record": {
                    "order_id": {"ref": "@plan.input.order_id"},
                    "status": {"ref": "@step:response.status"},
                }
            },
        },
        {"id": "end", "op": "end"},
    ],
    "edges": [
        {"from": "fetch", "to": "response"},
        {"from": "response", "to": "done"},
        {"from": "done", "to": "end"},
    ],
}


def test_a_plan_in_the_old_shapes_gets_one_diagnostic_per_old_step_and_nothing_else() -> None:
    docs = _order_docs()
    i, _plan = _plan_of(docs)
    docs[i] = copy.deepcopy(OLD_ORDER_PLAN)
    assert _codes(docs) == [
        ("air.plan.step.old_shape", f"/{i}/steps/0"),
        ("air.plan.step.old_shape", f"/{i}/steps/1"),
        ("air.plan.step.old_shape", f"/{i}/steps/2"),
    ]


def _without_bind(step: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in step.items() if k != "bind"}


OLD_STEPS = {
    "emit_effect-without-bind": ("fetch", _without_bind),
    "await_receipt-for-a-step-id": (
        "response",
        lambda s: {"id": s["id"], "op": "await_receipt", "for": "fetch"},
    ),
    "raise_event-with-value": (
        "fetched",
        lambda s: {
            "id": s["id"],
            "op": "raise_event",
            "reducer": s["reducer"],
            "key": s["key"],
            "event": "demo/FetchDone@1",
            "value": {"record": {"order_id": "o-1", "status": 200}},
        },
    ),
    "assign-with-var-and-value": (
        "fetched",
        lambda s: {"id": s["id"], "op": "assign", "var": "x", "value": 1},
    ),
    "await_event-without-bind": (
        "fetched",
        lambda s: {"id": s["id"], "op": "await_event", "event": "demo/FetchDone@1", "where": True},
    ),
}


@pytest.mark.parametrize(("step_id", "make_old"), OLD_STEPS.values(), ids=list(OLD_STEPS))
def test_each_old_step_shape_gets_exactly_its_diagnostic(step_id: str, make_old: Any) -> None:
    docs = _order_docs()
    i, plan = _plan_of(docs)
    k, step = _step(plan, step_id)
    plan["steps"][k] = make_old(step)
    assert _codes(docs) == [("air.plan.step.old_shape", f"/{i}/steps/{k}")]


def test_the_old_shape_message_spells_the_new_shape() -> None:
    docs = _order_docs()
    _i, plan = _plan_of(docs)
    plan["steps"].append({"id": "a", "op": "assign", "var": "x", "value": 1})
    with pytest.raises(ManifestError) as info:
        _load(docs)
    (diagnostic,) = info.value.diagnostics
    # The one place a message is read: its point is the JSON it tells the author to write.
    written = diagnostic.message.removeprefix("write ").removesuffix(" instead of var/value")
    assert json.loads(written) == {"id": "a", "op": "assign", "expr": 1, "bind": {"as": "x"}}


# --- AgentOS ----------------------------------------------------------------------------------


def _agentos_world() -> list[dict[str, Any]]:
    """AIR as AgentOS writes it: no air_version, long-form types, an inbox, empty bindings, a
    custom http cap with ``methods``, tagged grant params, receipt fields read with ``get``,
    and a variant event raised to a non-keyed reducer."""
    text: dict[str, Any] = {"text": {}}
    return [
        _schema("acme/Ping@1", {"record": {"url": text}}),
        _schema(
            "acme/LogEvent@1",
            {"variant": {"Ok": {"record": {"status": {"int": {}}}}, "Failed": {"int": {}}}},
        ),
        _schema("acme/LogState@1", {"list": {"ref": "acme/LogEvent@1"}}),
        _schema("acme/HttpCap@1", {"record": {"hosts": {"set": text}, "methods": {"set": text}}}),
        _module("acme/Log@1", "acme/LogState@1", "acme/LogEvent@1"),
        {
            "$kind": "defcap",
            "name": "acme/http@1",
            "cap_type": "http.out",
            "schema": "acme/HttpCap@1",
        },
        {
            "$kind": "defpolicy",
            "name": "acme/policy@1",
            "rules": [
                {
                    "when": {"effect_kind": "http.request", "host": "*.example.com"},
                    "decision": "require_approval",
                },
                {
                    "when": {"effect_kind": "http.request", "cap_name": "cap_http"},
                    "decision": "allow",
                },
            ],
        },
        {
            "$kind": "defplan",
            "name": "acme/ping@1",
            "input": "acme/Ping@1",
            "locals": {"code": {"int": {}}},
            "steps": [
                {
                    "id": "emit",
                    "op": "emit_effect",
                    "kind": "http.request",
                    "params": {
                        "record": {
                            "method": {"text": "POST"},
                            "url": {"ref": "@plan.input.url"},
                            "headers": {"lit": {"content-type": "application/json"}},
                            "body_ref": {"none": {}},
                        }
                    },
                    "cap": "cap_http",
                    "bind": {"effect_id_as": "req"},
                },
                {
                    "id": "await",
                    "op": "await_receipt",
                    "for": {"ref": "@var:req"},
                    "bind": {"as": "resp"},
                },
                {
                    "id": "code",
                    "op": "assign",
                    "expr": {"op": "get", "args": [{"ref": "@var:resp"}, "status"]},
                    "bind": {"as": "code"},
                },
                {
                    "id": "ok",
                    "op": "raise_event",
                    "reducer": "acme/Log@1",
                    "event": {
                        "variant": {
                            "tag": "Ok",
                            "value": {
                                "record": {
                                    "status": {
                                        "op": "get",
                                        "args": [{"ref": "@var:resp"}, "status"],
                                    }
                                }
                            },
                        }
                    },
                },
                {
                    "id": "failed",
                    "op": "raise_event",
                    "reducer": "acme/Log@1",
                    "event": {"variant": {"tag": "Failed", "value": {"ref": "@var:code"}}},
                },
                {"id": "end", "op": "end"},
            ],
            "edges": [
                {"from": "emit", "to": "await"},
                {"from": "await", "to": "code"},
                {
                    "from": "code",
                    "to": "ok",
                    "when": {"op": "lt", "args": [{"ref": "@var:code"}, 400]},
                },
                {
                    "from": "code",
                    "to": "failed",
                    "when": {"op": "ge", "args": [{"ref": "@var:code"}, 400]},
                },
                {"from": "ok", "to": "end"},
            ],
            "required_caps": ["cap_http"],
            "allowed_effects": ["http.request"],
        },
        {
            "$kind": "manifest",
            "schemas": [{"name": "acme/Ping@1"}, {"name": "acme/LogEvent@1"}],
            "modules": [{"name": "acme/Log@1"}],
            "plans": [{"name": "acme/ping@1"}],
            "caps": [{"name": "acme/http@1"}],
            "policies": [{"name": "acme/policy@1"}],
            "routing": {
                "events": [{"event": "acme/LogEvent@1", "reducer": "acme/Log@1"}],
                "inboxes": [{"source": "http://inbox/log", "reducer": "acme/Log@1"}],
            },
            "triggers": [{"event": "acme/Ping@1", "plan": "acme/ping@1"}],
            "defaults": {
                "policy": "acme/policy@1",
                "cap_grants": [
                    {
                        "name": "cap_http",
                        "cap": "acme/http@1",
                        "params": {
                            "record": {
                                "hosts": {"set": [{"text": "example.com"}]},
                                "methods": {"set": [{"text": "POST"}, {"text": "GET"}]},
                            }
                        },
                        "budget": {"bytes": 1_000_000},
                    }
                ],
            },
            "module_bindings": {},
        },
    ]


def test_air_written_for_agentos_validates(tmp_path: Path) -> None:
    air = load_air_path(_write(tmp_path, _agentos_world()))
    assert air.manifest.air_version == "1"
    assert [i.reducer for i in air.manifest.routing.inboxes] == ["acme/Log@1"]
    (grant,) = air.manifest.defaults.cap_grants
    assert grant.budget is not None
    assert grant.budget.bytes == 1_000_000


def test_an_absent_air_version_means_1_and_hashes_the_same() -> None:
    docs = _agentos_world()
    written = copy.deepcopy(docs)
    written[-1]["air_version"] = "1"
    assert _load(docs).manifest_hash == _load(written).manifest_hash


def test_an_inbox_to_an_unknown_reducer_is_reported() -> None:
    docs = _agentos_world()
    docs[-1]["routing"]["inboxes"][0]["reducer"] = "acme/Nope@1"
    m = len(docs) - 1
    assert _codes(docs) == [("air.ref.unknown_module", f"/{m}/routing/inboxes/0/reducer")]


def test_a_custom_http_cap_with_a_field_the_kernel_does_not_enforce_is_rejected() -> None:
    docs = _agentos_world()
    docs[3]["type"]["record"]["rpm"] = {"option": {"nat": {}}}
    assert _codes(docs) == [("air.cap.schema", "/5/schema")]


def test_a_policy_rule_naming_an_unknown_effect_kind_is_reported() -> None:
    docs = _agentos_world()
    docs[6]["rules"][1]["when"]["effect_kind"] = "http.requets"
    assert _codes(docs) == [("air.ref.unknown_effect", "/6/rules/1/when/effect_kind")]


def test_two_grants_with_one_name_are_reported() -> None:
    docs = _agentos_world()
    grants = docs[-1]["defaults"]["cap_grants"]
    grants.append(copy.deepcopy(grants[0]))
    m = len(docs) - 1
    assert _codes(docs) == [("air.name.duplicate", f"/{m}/defaults/cap_grants/1/name")]


# --- plan checks on the order world ----------------------------------------------------------


def _statuses_to(docs: list[dict[str, Any]], status: int) -> list[str]:
    """The steps after ``response`` whose edge guard holds for an HTTP ``status``."""
    _i, plan = _plan_of(docs)
    env = expr.Env(plan_input=None, vars={"resp": {"status": status}})
    return [
        e["to"]
        for e in plan["edges"]
        if e["from"] == "response" and expr.evaluate(expr.parse_expr(e["when"]), env) is True
    ]


@pytest.mark.parametrize(
    ("status", "branch"),
    [
        (200, "fetched"),
        (204, "fetched"),
        (301, "failed"),
        (404, "failed"),
        (500, "retry"),
        (503, "retry"),
        (199, "failed"),
    ],
)
def test_the_order_plan_sends_each_status_down_exactly_one_branch(status: int, branch: str) -> None:
    assert _statuses_to(_order_docs(), status) == [branch]


def test_the_order_plan_raises_its_result_to_the_orders_cell_by_key() -> None:
    air = _load(_order_docs())
    plan = air.plans["demo/fetch_flow@1"]
    raised = [s for s in plan.steps if s.op == "raise_event"]
    assert {s.reducer for s in raised} == {"demo/Order@1"}
    assert {json.dumps(s.key) for s in raised} == {'{"ref": "@plan.input.order_id"}'}
    assert {expr.record_schema(expr.parse_expr(s.event)) for s in raised} == {"demo/FetchDone@1"}


def _order_mutation_codes(mutate: Any) -> tuple[int, list[tuple[str, str]]]:
    docs = _order_docs()
    i, plan = _plan_of(docs)
    mutate(plan)
    return i, _codes(docs)


def test_a_var_bound_only_on_another_branch_is_unknown() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        _k, step = _step(plan, "failed")
        step["event"]["record"]["status"] = {"ref": "@var:retry_resp.status"}

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.plan.ref.unknown_var", f"/{i}/steps/6/event/record/status")]


def test_a_receipt_field_the_receipt_schema_lacks_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["edges"][1]["when"]["args"][0]["args"][0] = {"ref": "@var:resp.code"}

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.plan.ref.unknown_field", f"/{i}/edges/1/when/args/0/args/0")]


def test_a_plan_input_field_the_input_schema_lacks_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["steps"][0]["params"]["record"]["url"] = {"ref": "@plan.input.link"}

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.plan.ref.unknown_field", f"/{i}/steps/0/params/record/url")]


def test_await_receipt_for_a_var_no_emit_effect_binds_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["steps"][1]["for"] = {"ref": "@var:resp"}

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.plan.await_receipt.for", f"/{i}/steps/1/for")]


def test_await_receipt_for_an_effect_id_bound_on_no_path_before_it_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["steps"][1]["for"] = {"ref": "@var:retry_req"}

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.plan.await_receipt.for", f"/{i}/steps/1/for")]


def test_await_receipt_for_an_expression_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["steps"][1]["for"] = {"ref": "@var:req.id"}

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.plan.await_receipt.for", f"/{i}/steps/1/for")]


def test_raise_event_to_a_keyed_reducer_without_a_key_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        del plan["steps"][2]["key"]

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.plan.raise_event.key", f"/{i}/steps/2")]


def test_raise_event_with_a_key_of_the_wrong_type_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["steps"][2]["key"] = {"ref": "@var:resp.status"}

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.plan.ref.type_mismatch", f"/{i}/steps/2/key")]


def test_raise_event_with_a_literal_key_of_the_wrong_type_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["steps"][2]["key"] = 7

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.value.mismatch", f"/{i}/steps/2/key")]


def test_raise_event_of_a_schema_not_routed_to_the_reducer_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["steps"][2]["event"]["record"]["$schema"] = "demo/FetchRequested@1"

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.plan.raise_event.unrouted", f"/{i}/steps/2/event/record/$schema")]


def test_raise_event_without_schema_is_checked_against_the_abi_event() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        del plan["steps"][2]["event"]["record"]["$schema"]  # demo/OrderPlaced@1 has url

    i, codes = _order_mutation_codes(mutate)
    assert codes == [
        ("air.value.mismatch", f"/{i}/steps/2/event/record/status"),
        ("air.value.mismatch", f"/{i}/steps/2/event/record"),
    ]


def test_an_event_field_of_the_wrong_type_from_a_typed_ref_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["steps"][2]["event"]["record"]["status"] = {"ref": "@plan.input.url"}

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.plan.ref.type_mismatch", f"/{i}/steps/2/event/record/status")]


def test_an_effect_outside_allowed_effects_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["allowed_effects"] = ["blob.put"]

    i, codes = _order_mutation_codes(mutate)
    assert codes == [
        ("air.plan.allowed_effects", f"/{i}/steps/0/kind"),
        ("air.plan.allowed_effects", f"/{i}/steps/3/kind"),
    ]


def test_a_cap_outside_required_caps_is_reported() -> None:
    docs = _order_docs()
    i, plan = _plan_of(docs)
    manifest = next(d for d in docs if d["$kind"] == "manifest")
    manifest["defaults"]["cap_grants"].append(
        {**manifest["defaults"]["cap_grants"][0], "name": "other"}
    )
    plan["steps"][3]["cap"] = "other"
    assert _codes(docs) == [("air.plan.required_caps", f"/{i}/steps/3/cap")]


def test_an_unknown_cap_grant_in_a_step_or_required_caps_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["steps"][0]["cap"] = "nope"
        plan["required_caps"] = ["http", "nope"]

    i, codes = _order_mutation_codes(mutate)
    assert codes == [
        ("air.ref.unknown_cap_grant", f"/{i}/steps/0/cap"),
        ("air.ref.unknown_cap_grant", f"/{i}/required_caps/1"),
    ]


def test_a_declared_output_needs_a_result_at_every_end() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["output"] = "demo/FetchDone@1"
        for step in plan["steps"]:
            if step["op"] == "end":
                step["result"] = {"ref": "@step:fetched"}
        del plan["steps"][9]["result"]

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.plan.end.result_missing", f"/{i}/steps/9")]


def test_a_declared_output_needs_every_path_to_end_at_an_end() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["output"] = "demo/FetchDone@1"
        for step in plan["steps"]:
            if step["op"] == "end":
                step["result"] = {"record": {"order_id": "o", "status": 200}}
        plan["edges"] = [e for e in plan["edges"] if e["to"] != "end_failed"]

    i, codes = _order_mutation_codes(mutate)
    assert codes == [("air.plan.end.missing", f"/{i}/steps/6")]


def test_an_end_result_that_does_not_match_the_output_is_reported() -> None:
    def mutate(plan: dict[str, Any]) -> None:
        plan["output"] = "demo/FetchDone@1"
        for step in plan["steps"]:
            if step["op"] == "end":
                step["result"] = {"record": {"order_id": "o", "status": {"ref": "@var:resp"}}}

    i, codes = _order_mutation_codes(mutate)
    pointers = [f"/{i}/steps/{k}/result/record/status" for k in (7, 8, 9)]
    assert codes == [("air.plan.ref.type_mismatch", p) for p in pointers]


# --- reducer effects through module bindings --------------------------------------------------


def _timer_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = json.loads(
        (ROOT / "manifests" / "timer" / "timer.air.json").read_text()
    )
    return docs


def test_a_reducer_effect_resolves_through_its_one_bound_slot() -> None:
    _load(_timer_docs())


def test_an_unbound_slot_with_exactly_one_grant_of_its_cap_resolves() -> None:
    docs = _timer_docs()
    docs[-1]["module_bindings"] = {}
    _load(docs)


def test_a_reducer_effect_with_two_slots_of_its_cap_type_is_unresolved() -> None:
    docs = _timer_docs()
    docs[2]["abi"]["reducer"]["cap_slots"]["spare"] = "sys/timer@1"
    assert _codes(docs) == [("air.module.effect_unbound", "/2/abi/reducer/effects_emitted/0")]


def test_a_reducer_effect_with_no_binding_and_no_single_grant_is_unresolved() -> None:
    docs = _timer_docs()
    docs[-1]["module_bindings"] = {}
    grants = docs[-1]["defaults"]["cap_grants"]
    grants.append({**grants[0], "name": "timer2"})
    assert _codes(docs) == [("air.module.effect_unbound", "/2/abi/reducer/effects_emitted/0")]


def test_a_binding_to_a_grant_of_another_cap_type_is_reported() -> None:
    docs = _timer_docs()
    docs[-1]["defaults"]["cap_grants"].append({"name": "blob", "cap": "sys/blob@1", "params": {}})
    docs[-1]["module_bindings"]["demo/Timer@1"]["slots"]["timer"] = "blob"
    m = len(docs) - 1
    assert _codes(docs) == [
        ("air.cap.type_mismatch", f"/{m}/module_bindings/demo~1Timer@1/slots/timer"),
    ]


# --- raise_event, routed ({event, value}) -----------------------------------------------------


def _routed(status: Any = {"ref": "@var:resp.status"}, event: str = "demo/FetchDone@1") -> Any:  # noqa: B006
    return {
        "id": "fetched",
        "op": "raise_event",
        "event": event,
        "value": {"record": {"order_id": {"ref": "@plan.input.order_id"}, "status": status}},
    }


def _with_fetched(step: dict[str, Any]) -> tuple[list[dict[str, Any]], int, int]:
    docs = _order_docs()
    i, plan = _plan_of(docs)
    k, _old = _step(plan, "fetched")
    plan["steps"][k] = step
    return docs, i, k


def test_a_routed_raise_event_validates_and_keeps_its_form() -> None:
    docs, _i, _k = _with_fetched(_routed())
    air = _load(docs)
    (plan,) = air.plans.values()
    step = next(s for s in plan.steps if s.id == "fetched")
    assert isinstance(step, RaiseEvent)
    assert step.routed
    assert (step.event, step.reducer, step.key) == ("demo/FetchDone@1", None, None)


def test_a_routed_raise_event_of_an_unknown_schema_is_reported_at_its_event() -> None:
    docs, i, k = _with_fetched(_routed(event="demo/Nope@1"))
    assert _codes(docs) == [("air.ref.unknown_schema", f"/{i}/steps/{k}/event")]


def test_a_routed_raise_event_value_is_typed_by_its_schema() -> None:
    docs, i, k = _with_fetched(_routed(status={"text": "ok"}))
    codes = _codes(docs)
    assert codes
    assert all(p.startswith(f"/{i}/steps/{k}/value") for _, p in codes)


def test_a_routed_raise_event_as_plain_json_is_read_through_its_schema() -> None:
    step = _routed()
    step["value"] = {"order_id": "o-1", "status": 200}
    docs, _i, _k = _with_fetched(step)
    air = _load(docs)
    (plan,) = air.plans.values()
    lifted = next(s for s in plan.steps if s.id == "fetched").value
    assert expr.is_expr_form(lifted)


OTHER = "demo/FetchOther@1"
"""A schema of FetchDone's type that no route names."""


def _with_other(docs: list[dict[str, Any]]) -> None:
    docs.append(
        {
            "$kind": "defschema",
            "name": OTHER,
            "type": {"record": {"order_id": "text", "status": "int"}},
        }
    )


def test_a_routed_raise_event_nothing_takes_is_an_error_naming_the_step() -> None:
    docs, i, k = _with_fetched(_routed(event=OTHER))
    _with_other(docs)
    assert _codes(docs) == [("air.plan.raise_event.unrouted", f"/{i}/steps/{k}/event")]


def test_a_routed_raise_event_a_trigger_takes_needs_no_route() -> None:
    docs, _i, _k = _with_fetched(_routed(event=OTHER))
    _with_other(docs)
    manifest = next(d for d in docs if d["$kind"] == "manifest")
    manifest["triggers"].append({"event": OTHER, "plan": "demo/done@1"})
    end = [{"id": "end", "op": "end"}]
    docs.append({"$kind": "defplan", "name": "demo/done@1", "input": OTHER, "steps": end})
    _load(docs)


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({"key": {"text": "o-1"}}, id="a-key"),
        pytest.param({"value": None}, id="no-value"),
    ],
)
def test_a_routed_raise_event_with_a_key_or_without_a_value_is_refused_at_the_step(
    extra: dict[str, Any],
) -> None:
    """At the step itself, not under pydantic's ``op`` tag (``/steps/2/raise_event``)."""
    step = {**_routed(), **extra}
    if step.get("value") is None:
        del step["value"]
    docs, i, k = _with_fetched(step)
    assert _codes(docs) == [("air.shape", f"/{i}/steps/{k}")]


def test_a_routed_raise_event_hashes_apart_from_the_reducer_form_and_the_rest_keep_theirs() -> None:
    before = _load(_order_docs())
    docs, _i, _k = _with_fetched(_routed())
    after = _load(docs)
    (name,) = before.plans
    assert before.def_hashes[name] != after.def_hashes[name]
    assert {n: h for n, h in before.def_hashes.items() if n != name} == {
        n: h for n, h in after.def_hashes.items() if n != name
    }
