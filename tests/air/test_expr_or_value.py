"""ExprOrValue: AgentOS's plain-JSON literals in ``emit_effect.params``, ``raise_event.event``,
``assign.expr`` and ``end.result``, read through the schema the position expects; the rule for
one-key objects (an Expr form name wins, ``lit`` forces a literal); the static checks of params,
events and the typed ops; and the hashes of a literal and its equivalent Expr."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from plans_kit import ended, plan, plan_world, raised, records

from air import AirSource, LoadedAir, load_air
from air.errors import ManifestError
from world import Engine, World
from world._airfiles import builtin_sources, load_air_path

from worldkit import const_wasm, output, write_world_air

FETCH, RESULT, LOG, PLAN = "acme/Fetch@1", "acme/Result@1", "acme/Log@1", "acme/fetch@1"
PARAMS = {
    "method": "GET",
    "url": "https://example.com/x",
    "headers": {"accept": "text/plain"},
    "body_ref": None,
}
ERR_EVENT = {"err": {"code": "http", "message": "failed"}}
SCHEMAS: dict[str, Any] = {
    FETCH: {"record": {"url": {"text": {}}}},
    RESULT: {
        "variant": {
            "ok": {"record": {"status": {"int": {}}}},
            "err": {"record": {"code": {"text": {}}, "message": {"text": {}}}},
        }
    },
    "acme/LogState@1": {"list": {"ref": RESULT}},
    "acme/Out@1": {"record": {"ids": {"set": {"uuid": {}}}, "when": {"time": {}}}},
}


def _plan(params: Any = PARAMS, event: Any = ERR_EVENT, **extra: Any) -> dict[str, Any]:
    """A plan in AgentOS's convention (modelled on its examples): literal params and a variant
    event in ``{"Tag": value}`` sugar."""
    steps = [
        {
            "id": "emit",
            "op": "emit_effect",
            "kind": "http.request",
            "params": params,
            "cap": "cap_http",
            "bind": {"effect_id_as": "req"},
        },
        {"id": "await", "op": "await_receipt", "for": {"ref": "@var:req"}, "bind": {"as": "resp"}},
        {"id": "raise", "op": "raise_event", "reducer": LOG, "event": event},
        {"id": "end", "op": "end"},
    ]
    return {
        "$kind": "defplan",
        "name": PLAN,
        "input": FETCH,
        "steps": steps,
        "edges": [
            {"from": "emit", "to": "await"},
            {"from": "await", "to": "raise"},
            {"from": "raise", "to": "end"},
        ],
        **extra,
    }


def _docs(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        *({"$kind": "defschema", "name": n, "type": t} for n, t in SCHEMAS.items()),
        {
            "$kind": "defmodule",
            "name": LOG,
            "module_kind": "reducer",
            "wasm_hash": "blake3:" + "0" * 64,
            "abi": {"reducer": {"state": "acme/LogState@1", "event": RESULT}},
        },
        {
            "$kind": "defcap",
            "name": "acme/http@1",
            "cap_type": "http.out",
            "schema": {"record": {"hosts": {"set": {"text": {}}}}},
        },
        plan,
        {
            "$kind": "manifest",
            "routing": {"events": [{"event": RESULT, "reducer": LOG}]},
            "triggers": [{"event": FETCH, "plan": PLAN}],
            "defaults": {
                "cap_grants": [
                    {"name": "cap_http", "cap": "acme/http@1", "params": {"hosts": ["example.com"]}}
                ]
            },
        },
    ]


AT = f"/{len(SCHEMAS) + 2}"
"""The plan's pointer in ``_docs``: after the schemas, the module and the cap."""
HEADERS_LIT = {"lit": {"accept": "text/plain"}}


def _load(plan: dict[str, Any]) -> LoadedAir:
    return load_air([*builtin_sources(), AirSource("w.air.json", json.dumps(_docs(plan)))])


def _hash(plan: dict[str, Any]) -> str:
    return _load(plan).def_hashes[PLAN]


def _diags(plan: dict[str, Any]) -> list[tuple[str, str, str]]:
    with pytest.raises(ManifestError) as info:
        _load(plan)
    return [(d.code, d.pointer, d.message) for d in info.value.diagnostics]


def _field(step: Any, name: str) -> Any:
    """A step's ExprOrValue field, as the loaded plan holds it."""
    return getattr(step, name)


# --- AgentOS's convention loads ------------------------------------------------------------------


def test_a_plan_in_agentos_convention_validates_through_load_air_path(tmp_path: Path) -> None:
    folder = write_world_air(tmp_path / "air", {}, _docs(_plan()))
    air = load_air_path(folder)
    steps = air.plans[PLAN].steps
    # the kernel sees the literals' equivalent Exprs
    assert _field(steps[0], "params") == {
        "record": {
            "body_ref": None,
            "headers": {"record": {"accept": "text/plain"}},
            "method": "GET",
            "url": "https://example.com/x",
        }
    }
    assert _field(steps[2], "event") == {
        "variant": {"tag": "err", "value": {"record": {"code": "http", "message": "failed"}}}
    }


def test_an_existing_expr_position_is_left_as_written() -> None:
    params = {"record": {**{k: {"lit": v} for k, v in PARAMS.items()}}}
    assert _field(_load(_plan(params=params)).plans[PLAN].steps[0], "params") == params


# --- what hashes alike ---------------------------------------------------------------------------

EQUAL_PARAMS = [
    pytest.param(PARAMS, id="sugar"),
    pytest.param({k: v for k, v in PARAMS.items() if k != "body_ref"}, id="absent-option-is-null"),
    pytest.param({"lit": PARAMS}, id="lit"),
    pytest.param(
        {
            "method": {"text": "GET"},
            "url": {"text": "https://example.com/x"},
            "headers": {"map": [{"key": {"text": "accept"}, "value": {"text": "text/plain"}}]},
            "body_ref": None,
        },
        id="tagged-lens",
    ),
    pytest.param(
        {
            "record": {
                "method": "GET",
                "url": {"text": "https://example.com/x"},
                "headers": {"map": [{"key": "accept", "value": "text/plain"}]},
                "body_ref": {"none": {}},
            }
        },
        id="record-expr",
    ),
]


@pytest.mark.parametrize("params", EQUAL_PARAMS)
def test_a_literal_and_its_equivalent_expr_hash_the_same(params: Any) -> None:
    assert _hash(_plan(params=params)) == _hash(_plan())


EQUAL_EVENTS = [
    pytest.param({"$tag": "err", "$value": ERR_EVENT["err"]}, id="dollar-tag-sugar"),
    pytest.param({"lit": ERR_EVENT}, id="lit"),
    pytest.param({"variant": {"tag": "err", "value": {"record": ERR_EVENT["err"]}}}, id="expr"),
]


@pytest.mark.parametrize("event", EQUAL_EVENTS)
def test_both_variant_sugars_and_the_variant_expr_hash_the_same(event: Any) -> None:
    assert _hash(_plan(event=event)) == _hash(_plan())


def test_different_literals_hash_differently() -> None:
    assert _hash(_plan(params={**PARAMS, "method": "POST"})) != _hash(_plan())
    assert _hash(_plan(event={"ok": {"status": 200}})) != _hash(_plan())


def test_an_expr_that_omits_an_option_field_is_not_the_literal() -> None:
    """Exprs are not normalised by schema (existing plans keep their hashes), so a record
    construct without ``body_ref`` is another value than the literal, which gets ``null``."""
    params = {"record": {"method": "GET", "url": PARAMS["url"], "headers": HEADERS_LIT}}
    assert _hash(_plan(params=params)) != _hash(_plan())


# --- literals are read through the position's schema ---------------------------------------------


def test_a_literal_that_does_not_fit_is_reported_at_its_field() -> None:
    found = _diags(_plan(params={**PARAMS, "method": 5}))
    assert [(c, p) for c, p, _ in found] == [("air.value.mismatch", f"{AT}/steps/0/params/method")]
    found = _diags(_plan(params={**PARAMS, "verb": "GET"}))
    assert [(c, p) for c, p, _ in found] == [("air.value.mismatch", f"{AT}/steps/0/params/verb")]
    found = _diags(_plan(event={"nope": {}}))
    assert [(c, p) for c, p, _ in found] == [("air.value.mismatch", f"{AT}/steps/2/event")]
    found = _diags(_plan(event={"err": {"code": "x"}}))
    assert [(c, p) for c, p, _ in found] == [
        ("air.value.mismatch", f"{AT}/steps/2/event/err/message")
    ]


def test_a_forced_literal_that_does_not_fit_points_inside_lit() -> None:
    found = _diags(_plan(params={"lit": {**PARAMS, "url": 1}}))
    assert [(c, p) for c, p, _ in found] == [("air.value.mismatch", f"{AT}/steps/0/params/lit/url")]


def test_assign_and_end_read_literals_by_the_local_and_the_output() -> None:
    plan = _plan(output="acme/Out@1", locals={"body": {"bytes": {}}})
    plan["steps"].insert(3, {"id": "keep", "op": "assign", "expr": "AAEC", "bind": {"as": "body"}})
    plan["steps"].append(
        {"id": "loose", "op": "assign", "expr": [1, {"a": 2}], "bind": {"as": "x"}}
    )
    plan["steps"][4]["result"] = {
        "ids": ["01234567-89ab-cdef-0123-456789abcdef"] * 2,
        "when": "2024-01-01T00:00:00Z",
    }
    plan["edges"][-1] = {"from": "raise", "to": "keep"}
    plan["edges"] += [{"from": "keep", "to": "loose"}, {"from": "loose", "to": "end"}]
    steps = _load(plan).plans[PLAN].steps
    assert _field(steps[3], "expr") == {"bytes": "AAEC"}  # read as the local's type: bytes
    assert _field(steps[4], "result") == {
        "record": {
            "ids": {"list": [{"bytes": "ASNFZ4mrze8BI0VniavN7w=="}]},
            "when": 1_704_067_200_000_000_000,
        }
    }
    assert _field(steps[5], "expr") == {"list": [1, {"record": {"a": 2}}]}  # no type: plain JSON


def test_an_assign_to_a_typed_local_is_checked() -> None:
    plan = _plan(locals={"n": {"nat": {}}})
    plan["steps"].insert(3, {"id": "a", "op": "assign", "expr": {"text": "x"}, "bind": {"as": "n"}})
    plan["edges"] += [{"from": "raise", "to": "a"}]
    assert [(c, p) for c, p, _ in _diags(plan)] == [("air.value.mismatch", f"{AT}/steps/3/expr")]


# --- the one-key rule ----------------------------------------------------------------------------


def test_an_expr_form_name_wins_and_the_diagnostic_shows_the_lit_to_write() -> None:
    SCHEMAS["acme/Odd@1"] = {"variant": {"text": {"text": {}}, "ref": {"text": {}}}}
    try:
        docs = _docs(_plan(event={"text": "hi"}))
        at = len(SCHEMAS) + 2
        docs[len(SCHEMAS)]["abi"]["reducer"]["event"] = "acme/Odd@1"  # Log takes Odd events
        docs[-1]["routing"]["events"][0]["event"] = "acme/Odd@1"
        with pytest.raises(ManifestError) as info:
            load_air([*builtin_sources(), AirSource("w.air.json", json.dumps(docs))])
        (diag,) = info.value.diagnostics
        assert (diag.code, diag.pointer) == ("air.value.mismatch", f"/{at}/steps/2/event")
        assert 'write {"lit": {"text": "hi"}}' in diag.message
        # the form {"ref": ...} is read as a ref, and a bad one is a parse error with the hint
        docs[at]["steps"][2]["event"] = {"ref": "hello"}
        with pytest.raises(ManifestError) as info:
            load_air([*builtin_sources(), AirSource("w.air.json", json.dumps(docs))])
        (diag,) = info.value.diagnostics
        assert (diag.code, diag.pointer) == ("air.expr.parse.ref", f"/{at}/steps/2/event/ref")
        assert '{"lit": {"ref": "hello"}}' in diag.message
        # lit forces the literal: the variant case "ref"
        docs[at]["steps"][2]["event"] = {"lit": {"ref": "hello"}}
        air = load_air([*builtin_sources(), AirSource("w.air.json", json.dumps(docs))])
        assert _field(air.plans[PLAN].steps[2], "event") == {
            "variant": {"tag": "ref", "value": "hello"}
        }
    finally:
        del SCHEMAS["acme/Odd@1"]


def test_objects_that_are_not_expr_forms_are_literals() -> None:
    """Two keys, or ``op`` without exactly ``args``, is not an Expr: a record with a field
    named ``op`` is a literal."""
    SCHEMAS["acme/Cmd@1"] = {
        "record": {"op": {"text": {}}, "args": {"list": {"text": {}}}, "x": {"int": {}}}
    }
    try:
        plan = _plan(output="acme/Cmd@1")
        plan["steps"][-1]["result"] = {"op": "get", "args": ["a"], "x": 1}
        assert _field(_load(plan).plans[PLAN].steps[-1], "result") == {
            "record": {"args": {"list": ["a"]}, "op": "get", "x": 1}
        }
    finally:
        del SCHEMAS["acme/Cmd@1"]


# --- static checks of the ops --------------------------------------------------------------------


def test_ops_are_typed_against_the_params_schema() -> None:
    params = {
        "record": {
            **PARAMS,
            "headers": HEADERS_LIT,
            "url": {"op": "utf8_encode", "args": [{"ref": "@plan.input.url"}]},
        }
    }
    found = _diags(_plan(params=params))
    assert [(c, p) for c, p, _ in found] == [
        ("air.plan.op.type_mismatch", f"{AT}/steps/0/params/record/url")
    ]


def test_op_args_are_typed() -> None:
    url = {
        "op": "base64_decode",
        "args": [{"op": "utf8_encode", "args": [{"ref": "@plan.input.url"}]}],
    }
    params = {
        "record": {**PARAMS, "headers": HEADERS_LIT, "url": {"op": "utf8_decode", "args": [url]}}
    }
    found = _diags(_plan(params=params))
    assert [(c, p) for c, p, _ in found] == [
        ("air.plan.op.type_mismatch", f"{AT}/steps/0/params/record/url/args/0/args/0")
    ]


URL_AT = f"{AT}/steps/0/params/record/url"


@pytest.mark.parametrize(
    ("url", "pointer", "says"),
    [
        (  # the run would fail with expr.type: concat's args are all text, all bytes or all lists
            {"op": "concat", "args": ["https://example.com/", {"ref": "@plan.input.n"}]},
            f"{URL_AT}/args/1",
            "concat arg 1 must be bytes or list or text; this is nat",
        ),
        (
            {"op": "concat", "args": [{"ref": "@plan.input.url"}, {"ref": "@plan.input.n"}]},
            f"{URL_AT}/args/1",
            "concat arg 1 must be bytes or list or text; this is nat",
        ),
        (
            {
                "op": "concat",
                "args": ["https://example.com/", {"op": "utf8_encode", "args": ["x"]}],
            },
            f"{URL_AT}/args/1",
            "concat arg 1 is bytes but arg 0 is text: concat's args must all be of one kind",
        ),
        ({"op": "concat", "args": [{"ref": "@plan.input.url"}, "/x"]}, None, None),
    ],
)
def test_concat_args_are_typed_and_the_finding_names_the_plan_step_and_field(
    url: Any, pointer: str | None, says: str | None
) -> None:
    SCHEMAS[FETCH] = {"record": {"url": {"text": {}}, "n": {"nat": {}}}}
    try:
        params = {"record": {**PARAMS, "headers": HEADERS_LIT, "url": url}}
        if pointer is None:
            _load(_plan(params=params))
            return
        found = _diags(_plan(params=params))
    finally:
        SCHEMAS[FETCH] = {"record": {"url": {"text": {}}}}
    assert [(c, p) for c, p, _ in found] == [("air.plan.op.type_mismatch", pointer)]
    message = found[0][2]
    assert message.startswith(f"plan {PLAN}, step 'emit', field params: {says}")


def test_concat_of_text_and_a_number_made_text_passes() -> None:
    url = {
        "op": "concat",
        "args": ["https://example.com/", {"op": "int_to_text", "args": [{"ref": "@plan.input.n"}]}],
    }
    SCHEMAS[FETCH] = {"record": {"url": {"text": {}}, "n": {"nat": {}}}}
    try:
        _load(_plan(params={"record": {**PARAMS, "headers": HEADERS_LIT, "url": url}}))
    finally:
        SCHEMAS[FETCH] = {"record": {"url": {"text": {}}}}


def test_a_comparison_of_text_with_a_number_is_found_before_the_run() -> None:
    found = _diags(_plan(event={"op": "lt", "args": [{"ref": "@plan.input.url"}, 5]}))
    assert ("air.plan.op.type_mismatch", f"{AT}/steps/2/event/args/1") in [
        (c, p) for c, p, _ in found
    ]


def test_json_ops_name_known_schemas_and_json_encode_checks_its_value() -> None:
    body = {"op": "json_encode", "args": [{"record": {"url": 5}}, FETCH]}
    params = {"record": {**PARAMS, "headers": HEADERS_LIT, "url": body}}
    found = _diags(_plan(params=params))
    assert [(c, p) for c, p, _ in found] == [
        ("air.value.mismatch", f"{AT}/steps/0/params/record/url/args/0/url")  # folded
    ]
    decode = {"op": "json_decode", "args": ['{"url": "u"}', "acme/Nope@1"]}
    url = {"op": "get", "args": [decode, "url"]}
    found = _diags(_plan(params={"record": {**PARAMS, "headers": HEADERS_LIT, "url": url}}))
    assert [(c, p) for c, p, _ in found] == [
        ("air.ref.unknown_schema", f"{AT}/steps/0/params/record/url/args/0/args/1")
    ]


def test_json_decode_gives_its_schema() -> None:
    event = {"op": "json_decode", "args": ['{"url": "u"}', FETCH]}
    found = _diags(_plan(event=event))
    assert [(c, p) for c, p, _ in found] == [("air.plan.op.type_mismatch", f"{AT}/steps/2/event")]
    ok = {"op": "json_decode", "args": ['{"$tag": "ok", "$value": {"status": 1}}', RESULT]}
    _load(_plan(event=ok))


# --- end to end: the kernel runs what the loader lifted ------------------------------------------


def test_a_world_runs_literal_events_and_results(tmp_path: Path) -> None:
    sink_state = "acme/LogState@1"
    plan = {
        "$kind": "defplan",
        "name": PLAN,
        "input": FETCH,
        "output": "acme/Out@1",
        "locals": {"n": {"nat": {}}},
        "steps": [
            {"id": "n", "op": "assign", "expr": "7", "bind": {"as": "n"}},
            {"id": "raise", "op": "raise_event", "reducer": LOG, "event": ERR_EVENT},
            {
                "id": "end",
                "op": "end",
                "result": {"ids": ["01234567-89ab-cdef-0123-456789abcdef"], "when": 5},
            },
        ],
        "edges": [{"from": "n", "to": "raise"}, {"from": "raise", "to": "end"}],
    }
    docs = [
        *({"$kind": "defschema", "name": n, "type": t} for n, t in SCHEMAS.items()),
        {
            "$kind": "defmodule",
            "name": LOG,
            "module_kind": "reducer",
            "wasm": "acme_Log@1.wasm",
            "abi": {"reducer": {"state": sink_state, "event": RESULT}},
        },
        plan,
        {
            "$kind": "manifest",
            "routing": {"events": [{"event": RESULT, "reducer": LOG}]},
            "triggers": [{"event": FETCH, "plan": PLAN}],
        },
    ]
    air = write_world_air(tmp_path / "air", {LOG: const_wasm(output([]))}, docs)
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send(FETCH, {"url": "u"})
        with Engine(world) as loop:
            loop.run()
    recs = records(w)
    assert raised(recs, 0) == [
        (RESULT, {"$tag": "err", "$value": {"code": "http", "message": "failed"}})
    ]
    assert ended(recs)[0]["result"] == {
        "ids": [bytes.fromhex("0123456789abcdef0123456789abcdef")],
        "when": 5,
    }


def test_a_running_plan_encodes_its_input_as_json_through_its_schema(tmp_path: Path) -> None:
    """The kernel gives the JSON ops the era's schemas: a plan's result is its input as
    canonical JSON text, and the same text again as base64 of its UTF-8 bytes."""
    go, out = "t/Go@1", "t/Out@1"
    encode = {"op": "json_encode", "args": [{"ref": "@plan.input"}, go]}
    b64 = {"op": "base64_encode", "args": [{"op": "utf8_encode", "args": [encode]}]}
    steps = [{"id": "end", "op": "end", "result": {"record": {"json": encode, "b64": b64}}}]
    air = plan_world(
        tmp_path / "air",
        schemas={
            go: {"record": {"url": "text", "n": "int"}},
            out: {"record": {"json": "text", "b64": "text"}},
        },
        plans=[plan("t/enc@1", go, steps, [], output=out)],
        triggers=[{"event": go, "plan": "t/enc@1"}],
    )
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send(go, {"url": "http://x/", "n": 3})
        world.run_until_idle()
    result = ended(records(w))[0]["result"]
    assert json.loads(result["json"]) == {"url": "http://x/", "n": 3}
    assert base64.b64decode(result["b64"]).decode() == result["json"]
