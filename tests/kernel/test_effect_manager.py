"""The effect manager (``kernel/_effects.py``) checked directly, with AIR loaded from text: an
``http.request.v2``'s inline body (its size limit, and never with ``body_ref``) and how its
headers read to the capability check (a literal's text; a secret names no authority), the grant
a reducer's effect resolves to, budgets at their edges, secrets, and the manager's bookkeeping
seen from outside (counts, refunds, a cancelled run's intents, approvals of what is not parked).

The world tests reach these branches only through a server, so a mutation run of
``kernel/_effects.py`` found them unchecked (TESTING.md, "Mutation testing"); each test here
kills mutants the rest of the suite let live.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from plans_kit import end, plan

from air import AirSource, LoadedAir, cbor, load_air
from air.sys.ondemand import HTTP_INLINE_BODY_BYTES_MAX, HTTP_SECRET_KIND
from kernel._effects import (
    HTTP_BODY_BYTES_HEADER,
    HTTP_RESERVE_BYTES_MAX,
    CapDenied,
    EffectManager,
    Intent,
    Settled,
)
from kernel._scheduler import Delivery, Entity
from kernel.abi import EffectOut, StepOutput
from world._airfiles import builtin_sources

from worldkit import ROOT

HOST = "api.example.com"
URL = f"https://{HOST}/v1/items"
SECRET = {"$tag": "secret", "$value": {"alias": "token", "version": 1}}


def _air(
    grant_params: dict[str, Any],
    budget: dict[str, int] | None = None,
    *,
    decision: str = "allow",
    extra: tuple[dict[str, Any], ...] = (),
) -> LoadedAir:
    """A world with grant ``g`` (and ``h``, the same without a budget) of ``http.out`` and a
    policy that decides every ``http.request.v2`` ``decision``; ``extra`` docs beside."""
    grant: dict[str, Any] = {"name": "g", "cap": "sys/http.out@1", "params": grant_params}
    if budget is not None:
        grant["budget"] = budget
    other = {"name": "h", "cap": "sys/http.out@1", "params": grant_params}
    docs = [
        *extra,
        {
            "$kind": "defpolicy",
            "name": "t/p@1",
            "rules": [{"when": {"effect_kind": HTTP_SECRET_KIND}, "decision": decision}],
        },
        {"$kind": "manifest", "defaults": {"cap_grants": [grant, other], "policy": "t/p@1"}},
    ]
    return load_air([*builtin_sources(), AirSource("t.air.json", json.dumps(docs))])


@pytest.fixture(scope="module")
def effects() -> EffectManager:
    return EffectManager(_air({"hosts": [HOST], "verbs": ["POST"]}))


def literal(value: Any) -> dict[str, Any]:
    return {"$tag": "literal", "$value": value}


def v2(
    *,
    headers: Any = None,
    body: Any = None,
    body_ref: Any = None,
    url: str = URL,
) -> dict[str, Any]:
    return {
        "method": "POST",
        "url": url,
        "headers": {} if headers is None else headers,
        "body": body,
        "body_ref": body_ref,
    }


def refusal(effects: EffectManager, params: Any) -> CapDenied:
    with pytest.raises(CapDenied) as caught:
        effects.check_cap(HTTP_SECRET_KIND, params, "g")
    return caught.value


# --- the inline body ----------------------------------------------------------------------------


def test_an_inline_body_at_the_limit_is_admitted_one_byte_more_is_refused_naming_both(
    effects: EffectManager,
) -> None:
    effects.check_cap(HTTP_SECRET_KIND, v2(body=literal(b"x" * HTTP_INLINE_BODY_BYTES_MAX)), "g")
    over = HTTP_INLINE_BODY_BYTES_MAX + 1
    denied = refusal(effects, v2(body=literal(b"x" * over)))
    assert denied.code == "params.body_too_large"
    assert f"inline body of {over} bytes" in str(denied)
    assert f"HTTP_INLINE_BODY_BYTES_MAX={HTTP_INLINE_BODY_BYTES_MAX}" in str(denied)
    assert "body_ref" in str(denied)


def test_a_secret_body_is_not_counted_whatever_its_size(effects: EffectManager) -> None:
    effects.check_cap(HTTP_SECRET_KIND, v2(body=SECRET), "g")


@pytest.mark.parametrize(
    "body",
    [literal(b""), literal(b"x" * (HTTP_INLINE_BODY_BYTES_MAX + 1)), SECRET],
    ids=["empty", "too-large", "secret"],
)
def test_a_body_given_inline_and_by_body_ref_is_refused_before_its_size(
    effects: EffectManager, body: Any
) -> None:
    denied = refusal(effects, v2(body=body, body_ref=b"\x01" * 32))
    assert (denied.code, denied.detail) == (
        "params.body_twice",
        "give the body inline (body) or by body_ref, not both",
    )


def test_no_body_with_a_body_ref_is_admitted(effects: EffectManager) -> None:
    effects.check_cap(HTTP_SECRET_KIND, v2(body_ref=b"\x01" * 32), "g")


def test_http_request_v1_params_are_not_read_as_v2s(effects: EffectManager) -> None:
    """The inline-body rules are ``http.request.v2``'s: a v1 intent under the same grant with a
    ``body`` field (which its schema does not have) is not refused for it."""
    air = _air({"hosts": [HOST], "verbs": ["POST"]})
    v1 = EffectManager(air)
    params = v2(body=literal(b"x" * (HTTP_INLINE_BODY_BYTES_MAX + 1)), body_ref=b"\x01" * 32)
    v1.check_cap("http.request", params, "g")


# --- the headers as the capability check reads them --------------------------------------------


@pytest.mark.parametrize("name", ["Host", "host", "HOST"])
def test_a_literal_host_header_naming_the_urls_host_is_admitted(
    effects: EffectManager, name: str
) -> None:
    effects.check_cap(HTTP_SECRET_KIND, v2(headers={name: literal(HOST)}), "g")


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": literal("evil.example")},
        {"accept": literal("*/*"), "Host": literal("evil.example")},
        {"Host": SECRET},
        {"accept": literal(HOST), "host": SECRET},
    ],
    ids=["literal-other", "after-another", "secret", "secret-after-a-literal"],
)
def test_a_host_header_naming_another_authority_or_a_secret_is_refused(
    effects: EffectManager, headers: dict[str, Any]
) -> None:
    denied = refusal(effects, v2(headers=headers))
    assert denied.code == "cap.host_header"


def test_other_headers_given_as_secrets_or_literals_are_admitted(effects: EffectManager) -> None:
    headers = {"authorization": SECRET, "accept": literal("*/*"), "x-host": literal("evil")}
    effects.check_cap(HTTP_SECRET_KIND, v2(headers=headers), "g")


def test_a_v2_url_is_held_to_the_grant_as_a_v1_url_is(effects: EffectManager) -> None:
    assert refusal(effects, v2(url="https://evil.example/v1")).code == "cap.host_not_allowed"
    assert refusal(effects, v2(url="https://user@api.example.com/")).code == "cap.url_invalid"


# --- budgets for v2 ---------------------------------------------------------------------------


def test_a_v2_exchange_reserves_as_a_v1_exchange_does() -> None:
    effects = EffectManager(_air({"hosts": [HOST], "verbs": ["POST"]}, budget={"bytes": 100}))
    assert effects.check_cap(HTTP_SECRET_KIND, v2(body=literal(b"abc")), "g") == 100
    roomy = EffectManager(_air({"hosts": [HOST], "verbs": ["POST"]}, budget={"bytes": 1 << 40}))
    assert roomy.check_cap(HTTP_SECRET_KIND, v2(), "g") == HTTP_RESERVE_BYTES_MAX


# --- a reducer's micro-effects ------------------------------------------------------------------

TIMER = "demo/Timer@1"
TIMER_DOCS: list[dict[str, Any]] = json.loads(
    (ROOT / "manifests" / "timer" / "timer.air.json").read_text()
)


def _timer_air(
    rules: list[dict[str, Any]] | None = None,
    *,
    bound: bool = True,
    slots: dict[str, str] | None = None,
    grants: list[dict[str, Any]] | None = None,
    bindings: dict[str, str] | None = None,
) -> LoadedAir:
    """The bundled timer world's AIR (wasm by hash only), with other policy ``rules``, no
    ``module_bindings``, or more cap ``slots``, ``grants`` and slot ``bindings``."""
    docs = copy.deepcopy(TIMER_DOCS)
    for doc in docs:
        if doc["$kind"] == "defmodule":
            doc.pop("wasm", None)
            doc["wasm_hash"] = "blake3:" + "0" * 64
            doc["abi"]["reducer"]["cap_slots"].update(slots or {})
        if doc["$kind"] == "defpolicy" and rules is not None:
            doc["rules"] = rules
        if doc["$kind"] == "manifest":
            doc["defaults"]["cap_grants"] += grants or []
            doc["module_bindings"][TIMER]["slots"].update(bindings or {})
            if not bound:
                del doc["module_bindings"]
    return load_air([*builtin_sources(), AirSource("w.air.json", json.dumps(docs))])


def timer_set(at: int, cap_slot: str | None = None) -> EffectOut:
    return EffectOut("timer.set", cbor.dumps({"deliver_at_ns": at, "key": None}), cap_slot)


def _step(effects: EffectManager, *outs: EffectOut) -> tuple[list[Any], list[Intent]]:
    """A reducer step's effects as ``reducer_intents`` makes them (not added)."""
    entity = Entity(TIMER, cbor.dumps("k"))
    delivery = Delivery(7, 2, "demo/TimerEvent@1", b"")
    return effects.reducer_intents(entity, delivery, StepOutput(None, effects=outs))


def _added(effects: EffectManager, *outs: EffectOut) -> list[Intent]:
    """A reducer step's effects, added as the kernel adds them once the step commits."""
    _records, intents = _step(effects, *outs)
    for intent in intents:
        effects.add(intent)
    return intents


def test_a_step_with_two_effects_journals_both_with_keys_that_tell_them_apart() -> None:
    effects = EffectManager(_timer_air())
    records, intents = _step(effects, timer_set(5), timer_set(5))
    assert [r[0] for r in records] == ["effect.queued", "policy.decision"] * 2
    assert len({i.intent_hash for i in intents}) == 2  # same params, another index
    assert [r[2]["intent_hash"] for r in records] == [
        i.intent_hash for i in intents for _ in range(2)
    ]
    assert all(i.status == "queued" and i.cap == "timer" for i in intents)
    assert records[0][2]["origin"] == {"kind": "reducer", "name": TIMER, "key": cbor.dumps("k")}


def test_a_reducers_effect_the_policy_denies_fails_its_step() -> None:
    deny = [{"when": {"effect_kind": "timer.set"}, "decision": "deny"}]
    with pytest.raises(CapDenied) as caught:
        _step(EffectManager(_timer_air(deny)), timer_set(5))
    assert caught.value.code == "policy.denied"
    assert "policy denied timer.set" in str(caught.value)


@pytest.mark.parametrize("bound", [True, False], ids=["bound", "its-one-grant"])
@pytest.mark.parametrize("slot", [None, "timer"], ids=["no-slot", "named-slot"])
def test_a_reducers_effect_uses_its_slots_grant(bound: bool, slot: str | None) -> None:
    effects = EffectManager(_timer_air(bound=bound))
    assert effects.grant_for(TIMER, "timer.set", slot) == "timer"
    _records, [intent] = _step(effects, timer_set(5, slot))
    assert intent.cap == "timer"


def test_a_slot_binding_wins_over_the_one_grant_of_its_type() -> None:
    spare = {"name": "spare", "cap": "sys/timer@1", "params": {}}
    effects = EffectManager(_timer_air(grants=[spare], bindings={"timer": "spare"}))
    assert effects.grant_for(TIMER, "timer.set", None) == "spare"
    assert effects.grant_for(TIMER, "timer.set", "timer") == "spare"


def test_an_effect_naming_a_slot_of_another_cap_type_is_refused_by_that_slots_grant() -> None:
    store = {"name": "store", "cap": "sys/blob@1", "params": {}}
    effects = EffectManager(
        _timer_air(slots={"store": "sys/blob@1"}, grants=[store], bindings={"store": "store"})
    )
    assert effects.grant_for(TIMER, "timer.set", None) == "timer"  # the one slot of its type
    with pytest.raises(CapDenied) as caught:
        _step(effects, timer_set(5, "store"))
    assert caught.value.code == "cap.type_mismatch"


def test_an_effect_no_slot_serves_is_refused_naming_the_reducer() -> None:
    effects = EffectManager(_timer_air())
    with pytest.raises(CapDenied) as caught:
        effects.grant_for(TIMER, "blob.put", None)
    assert (caught.value.code, caught.value.detail) == (
        "cap.slot_missing",
        f"{TIMER} has no single slot for blob.put",
    )


def test_an_unbound_slot_with_two_grants_of_its_cap_has_no_grant() -> None:
    """Validation refuses an emitted effect whose slot resolves to no one grant; a slot no
    declared effect uses is not checked there, and a reducer may still name it."""
    grants = [{"name": n, "cap": "sys/blob@1", "params": {}} for n in ("b1", "b2")]
    effects = EffectManager(_timer_air(slots={"store": "sys/blob@1"}, grants=grants))
    with pytest.raises(CapDenied) as caught:
        effects.grant_for(TIMER, "blob.put", "store")
    assert (caught.value.code, caught.value.detail) == (
        "cap.grant_missing",
        f"no grant bound to slot store of {TIMER}",
    )


# --- the manager's bookkeeping ------------------------------------------------------------------

PARK_PLANS = [
    {"when": {"effect_kind": "timer.set", "origin_kind": "plan"}, "decision": "require_approval"},
    {"when": {"effect_kind": "timer.set"}, "decision": "allow"},
]


def _plan_intent(effects: EffectManager, run_id: int, at: int) -> Intent:
    origin = {"kind": "plan", "name": "demo/p@1", "run_id": run_id}
    params = {"deliver_at_ns": at, "key": None}
    intent = effects.intent_for("timer.set", params, "timer", origin, f"run:{run_id}:s{at}")
    effects.add(intent)
    return intent


def test_approving_what_is_not_parked_changes_nothing() -> None:
    effects = EffectManager(_timer_air(PARK_PLANS))
    [queued] = _added(effects, timer_set(5))
    assert effects.approve(queued.intent_hash, True) is None
    assert effects.approve(queued.intent_hash, False) is None
    assert effects.status_of(queued.intent_hash) == "queued"
    assert effects.approve(b"\0" * 32, True) is None


def test_cancelling_a_run_settles_its_intents_only_and_forgets_its_receipts() -> None:
    effects = EffectManager(_timer_air(PARK_PLANS))
    mine = [_plan_intent(effects, 1, 10), _plan_intent(effects, 1, 11)]
    theirs = _plan_intent(effects, 2, 12)
    [reducers] = _added(effects, timer_set(13))
    for intent in mine:
        effects.approve(intent.intent_hash, True)
    done = _plan_intent(effects, 1, 14)
    effects.approve(done.intent_hash, True)
    effects.apply_receipt(done.intent_hash, "ok", {"delivered_at_ns": 14})
    kept = _plan_intent(effects, 2, 15)
    effects.approve(kept.intent_hash, True)
    effects.apply_receipt(kept.intent_hash, "ok", {"delivered_at_ns": 15})
    assert effects.receipt_of(done.intent_hash) is not None

    assert effects.run_intents(1) == sorted(mine, key=lambda i: i.intent_hash)
    assert effects.cancel_run(1) == sorted(i.intent_hash for i in mine)
    assert [effects.status_of(i.intent_hash) for i in mine] == ["cancelled"] * 2
    assert effects.status_of(theirs.intent_hash) == "parked"
    assert effects.status_of(reducers.intent_hash) == "queued"
    assert effects.receipt_of(done.intent_hash) is None  # its run is gone
    assert effects.receipt_of(kept.intent_hash) is not None  # another run's stays
    assert effects.counts() == {
        "queued": 1,
        "parked": 1,
        "done": 2,
        "denied": 0,
        "cancelled": 2,
    }


def test_counts_count_every_live_intent() -> None:
    effects = EffectManager(_timer_air(PARK_PLANS))
    _added(effects, timer_set(1), timer_set(2), timer_set(3))
    for run in (1, 2):
        _plan_intent(effects, run, run)
    assert effects.counts() == {"queued": 3, "parked": 2, "done": 0, "denied": 0}


def test_a_denied_intent_is_settled_at_once_and_reserves_nothing() -> None:
    effects = EffectManager(_timer_air([]))  # no rule: every intent is denied
    [intent] = _plan_intents(effects, 1)
    assert intent.status == "denied"
    assert intent.reserved == 0
    assert intent.intent_hash not in effects.intents
    assert effects.status_of(intent.intent_hash) == "denied"
    assert effects.counts()["denied"] == 1
    [row] = effects.listing()
    assert (row.kind, row.cap, row.status) == ("timer.set", "timer", "denied")


def _plan_intents(effects: EffectManager, run_id: int) -> list[Intent]:
    return [_plan_intent(effects, run_id, 1)]


def test_a_settled_line_keeps_its_kind_and_grant_and_a_receipt_its_payload() -> None:
    effects = EffectManager(_timer_air())
    [intent] = _added(effects, timer_set(5))
    settled = effects.apply_receipt(intent.intent_hash, "ok", {"delivered_at_ns": 5})
    assert settled is not None
    assert settled.receipt == {
        "status": "ok",
        "payload": {"delivered_at_ns": 5},
    }
    [row] = effects.listing()
    assert isinstance(row, Settled)
    assert (row.kind, row.cap, row.status, row.receipt_status) == (
        "timer.set",
        "timer",
        "done",
        "ok",
    )


def test_only_a_timers_receipt_moves_the_clock() -> None:
    effects = EffectManager(_air({"hosts": [HOST], "verbs": ["POST"]}))
    intent = effects.intent_for(HTTP_SECRET_KIND, v2(), "g", {"kind": "plan"}, "i")
    effects.add(intent)
    effects.apply_receipt(intent.intent_hash, "ok", {"delivered_at_ns": 99, "headers": {}})
    assert effects.now_ns == 0


def test_release_forgets_one_held_receipt_and_an_unknown_hash_is_no_error() -> None:
    effects = EffectManager(_timer_air(PARK_PLANS))
    first, second = _plan_intent(effects, 1, 1), _plan_intent(effects, 1, 2)
    for intent in (first, second):
        effects.approve(intent.intent_hash, True)
        effects.apply_receipt(intent.intent_hash, "ok", {"delivered_at_ns": 1})
    effects.release(first.intent_hash)
    effects.release(b"\0" * 32)
    assert effects.receipt_of(first.intent_hash) is None
    assert effects.receipt_of(second.intent_hash) == {
        "status": "ok",
        "payload": {"delivered_at_ns": 1},
    }


# --- the capability check's own refusals --------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "cap", "code", "detail"),
    [
        ("timer.set", "nope", "cap.grant_missing", "no cap grant named 'nope'"),
        ("bogus.kind", "timer", "cap.effect_unknown", "unknown effect kind bogus.kind"),
        (
            "blob.put",
            "timer",
            "cap.type_mismatch",
            "grant timer is a timer capability; blob.put needs blob",
        ),
    ],
    ids=["no-grant", "no-effect", "another-type"],
)
def test_what_no_grant_allows_is_refused_naming_it(
    kind: str, cap: str, code: str, detail: str
) -> None:
    effects = EffectManager(_timer_air())
    with pytest.raises(CapDenied) as caught:
        effects.check_cap(kind, {"deliver_at_ns": 1, "key": None}, cap)
    assert (caught.value.code, caught.value.detail) == (code, detail)


# --- budgets at their edges -------------------------------------------------------------------


def _blob_air(limit: int) -> LoadedAir:
    grant = {"name": "b", "cap": "sys/blob@1", "params": {}, "budget": {"bytes": limit}}
    timer = {"name": "t", "cap": "sys/timer@1", "params": {}, "budget": {"bytes": limit}}
    rules = [{"when": {}, "decision": "allow"}]
    docs = [
        {"$kind": "defpolicy", "name": "t/p@1", "rules": rules},
        {"$kind": "manifest", "defaults": {"cap_grants": [grant, timer], "policy": "t/p@1"}},
    ]
    return load_air([*builtin_sources(), AirSource("t.air.json", json.dumps(docs))])


def put(effects: EffectManager, data: bytes) -> Intent:
    intent = effects.intent_for("blob.put", {"data": data}, "b", {"kind": "plan"}, repr(data))
    effects.add(intent)
    return intent


def test_a_put_of_exactly_what_is_left_is_admitted_and_then_nothing_is() -> None:
    effects = EffectManager(_blob_air(10))
    assert put(effects, b"x" * 9).reserved == 9
    assert put(effects, b"y").reserved == 1  # one byte left, one byte put
    with pytest.raises(CapDenied) as caught:
        put(effects, b"")
    assert caught.value.code == "cap.budget_exhausted"
    assert caught.value.detail == "grant b has 0 of 10 bytes left"


def test_a_put_larger_than_what_is_left_says_what_is_left() -> None:
    effects = EffectManager(_blob_air(10))
    put(effects, b"x" * 7)
    with pytest.raises(CapDenied) as caught:
        put(effects, b"x" * 4)
    assert caught.value.detail == "grant b has 3 of 10 bytes left"


def test_an_effect_that_moves_no_bytes_reserves_none_under_a_budget() -> None:
    effects = EffectManager(_blob_air(10))
    params = {"deliver_at_ns": 1, "key": None}
    intent = effects.intent_for("timer.set", params, "t", {"kind": "plan"}, "t")
    assert intent.reserved == 0


def _http_settled(payload: Any, status: str = "ok") -> int:
    """What an HTTP exchange reserving 100 bytes is settled to, by a receipt with ``payload``."""
    effects = EffectManager(_air({"hosts": [HOST], "verbs": ["POST"]}, budget={"bytes": 100}))
    intent = effects.intent_for(HTTP_SECRET_KIND, v2(), "g", {"kind": "plan"}, "i")
    effects.add(intent)
    assert effects.spent["g"] == 100
    effects.apply_receipt(intent.intent_hash, status, payload)
    return effects.spent["g"]


@pytest.mark.parametrize(
    ("payload", "spent"),
    [
        ({"headers": {HTTP_BODY_BYTES_HEADER: "42"}}, 42),
        ({"headers": {HTTP_BODY_BYTES_HEADER: "9" * 20}}, 100),  # capped at the reservation
        ({"headers": {HTTP_BODY_BYTES_HEADER: "1" + "0" * 20}}, 0),  # 21 digits: not a count
        ({"headers": {HTTP_BODY_BYTES_HEADER: "-1"}}, 0),
        ({"headers": None}, 0),
        ({"headers": [HTTP_BODY_BYTES_HEADER, "42"]}, 0),
        ({}, 0),
        (None, 0),
        ("42", 0),
    ],
    ids=[
        "count",
        "20-digits",
        "21-digits",
        "negative",
        "null",
        "list",
        "none",
        "null-payload",
        "text",
    ],
)
def test_an_http_receipt_settles_to_its_count_or_refunds(payload: Any, spent: int) -> None:
    assert _http_settled(payload) == spent


def test_a_put_whose_receipt_is_not_a_record_is_refunded() -> None:
    effects = EffectManager(_blob_air(10))
    intent = put(effects, b"abc")
    effects.apply_receipt(intent.intent_hash, "ok", None)
    assert effects.spent["b"] == 0


# --- secrets ------------------------------------------------------------------------------------

SECRET_AIR_PLANS = ("t/a@1", "t/b@1", "t/c@1")


@pytest.fixture(scope="module")
def secretive() -> EffectManager:
    plans = [plan(name, "t/In@1", [end()], []) for name in SECRET_AIR_PLANS]
    docs = (
        {"$kind": "defschema", "name": "t/In@1", "type": {"record": {}}},
        *plans,
        {
            "$kind": "defsecret",
            "name": "acme/token@1",
            "binding_id": "token",
            "allowed_caps": ["g"],
            "allowed_plans": ["t/b@1", "t/a@1"],
        },
        {"$kind": "defsecret", "name": "acme/free@1", "binding_id": "free"},
    )
    return EffectManager(_air({"hosts": [HOST], "verbs": ["POST"]}, extra=docs))


def secret(alias: str) -> dict[str, Any]:
    return {"$tag": "secret", "$value": {"alias": alias, "version": 1}}


def _secrets_refusal(
    effects: EffectManager, alias: str, cap: str, origin: dict[str, Any]
) -> CapDenied | None:
    params = v2(headers={"authorization": secret(alias)})
    try:
        effects.check_secrets(HTTP_SECRET_KIND, params, cap, origin)
    except CapDenied as denied:
        return denied
    return None


A_PLAN = {"kind": "plan", "name": "t/a@1"}


def test_a_secret_is_used_under_its_grants_by_its_plans(secretive: EffectManager) -> None:
    assert _secrets_refusal(secretive, "acme/token", "g", A_PLAN) is None
    assert _secrets_refusal(secretive, "acme/free", "h", {"kind": "reducer", "name": "r"}) is None
    intent = secretive.intent_for(
        HTTP_SECRET_KIND, v2(headers={"a": secret("acme/token")}), "g", A_PLAN, "i"
    )
    assert intent.status == "queued"


@pytest.mark.parametrize(
    ("alias", "cap", "origin", "code", "detail"),
    [
        (
            "acme/missing",
            "g",
            A_PLAN,
            "secret.unknown",
            "secret acme/missing@1 is not declared (no defsecret)",
        ),
        (
            "acme/token",
            "h",
            A_PLAN,
            "secret.cap_not_allowed",
            "secret acme/token@1 may not be used under grant h",
        ),
        (
            "acme/token",
            "g",
            {"kind": "plan", "name": "t/c@1"},
            "secret.plan_not_allowed",
            "secret acme/token@1 may not be used by plan t/c@1 (allowed_plans: t/a@1, t/b@1)",
        ),
        (
            "acme/token",
            "g",
            {"kind": "reducer", "name": "t/a@1"},
            "secret.plan_not_allowed",
            "secret acme/token@1 may not be used by reducer t/a@1 (allowed_plans: t/a@1, t/b@1)",
        ),
    ],
    ids=["undeclared", "another-grant", "another-plan", "a-reducer-of-a-plans-name"],
)
def test_a_secret_outside_its_grants_and_plans_is_refused_naming_it(
    secretive: EffectManager,
    alias: str,
    cap: str,
    origin: dict[str, Any],
    code: str,
    detail: str,
) -> None:
    denied = _secrets_refusal(secretive, alias, cap, origin)
    assert denied is not None
    assert (denied.code, denied.detail) == (code, detail)


def test_secrets_are_not_checked_for_an_intent_the_policy_denies() -> None:
    grant = {"hosts": [HOST], "verbs": ["POST"]}
    effects = EffectManager(_air(grant, budget={"bytes": 100}, decision="deny"))
    params = v2(headers={"authorization": secret("acme/missing")})
    intent = effects.intent_for(HTTP_SECRET_KIND, params, "g", A_PLAN, "i")
    assert intent.status == "denied"
    assert intent.reserved == 0  # what it would have reserved is not held for it
