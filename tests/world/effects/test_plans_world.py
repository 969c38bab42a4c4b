"""Plans end to end: worlds whose plans send HTTP requests to a loopback server the test runs,
through ``World`` + ``Engine`` and the ``world`` CLI (SPEC §3 plans, caps, policies; §6
Plans, Effects).

Every server here listens on 127.0.0.1 on a port the OS picks and counts its requests, so a
refused effect, or a replay, is seen to send nothing. No test sleeps: an out-of-order arrival
is forced with gates (an answer waits until another receipt is in the loop's hands), and the
transport failures use tiny adapter timeouts and backoffs.
"""

from __future__ import annotations

import base64
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from httpkit import Answer, Loopback, loopback_fixture
from plans_kit import (
    ALLOW_ALL,
    ORDER,
    ORDER_AIR,
    ORDER_PLACED,
    ReceiptGates,
    await_receipt,
    blob_grant,
    blob_put,
    chain,
    end,
    ended,
    http_get,
    http_grant,
    lines,
    of_kind,
    op,
    plan,
    plan_world,
    queued_urls,
    raised,
    records,
    ref,
    started,
    steps_of,
)
from typer.testing import CliRunner

from air import cbor
from air.errors import ManifestError
from cli.main import app
from world import Engine, World
from world._engine import LoopReport
from world.effects import Adapter, BlobAdapter, HttpAdapter, PumpReport, decide_parked
from world.history import verify_world

runner = CliRunner()


def world_cli(*args: Any) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout


server = loopback_fixture()


def drive(world: World, adapters: list[Adapter] | None = None) -> LoopReport:
    """Run ``world`` with its adapters live until it is idle; the loop is closed on return."""
    with Engine(world, adapters=adapters) as loop:
        return loop.run()


def quick_http(world: World, **limits: Any) -> list[Adapter]:
    """Adapters: the world's blob store and an HTTP adapter on tiny timeouts."""
    http = HttpAdapter(world.cas, backoff_base_s=0.01, backoff_max_s=0.02, **limits)
    return [BlobAdapter(world.cas), http]


# --- 1. the bundled order world ------------------------------------------------------------------

ORDER_ROUTES = {"/ok": Answer(200), "/missing": Answer(404), "/broken": Answer(503)}


def _order_of(recs: list[Any], run_id: int) -> tuple[str, list[int]]:
    """The order a fetch_flow run served and the statuses it reported (FetchDone events)."""
    events = raised(recs, run_id)
    assert {schema for schema, _v in events} == {"demo/FetchDone@1"}
    return events[0][1]["order_id"], [v["status"] for _s, v in events]


def test_order_world_sends_2xx_and_4xx_5xx_down_different_branches_and_replays_offline(
    tmp_path: Path, server: Loopback
) -> None:
    server.routes.update(ORDER_ROUTES)
    w = tmp_path / "w"
    orders = {"o-ok": "/ok", "o-missing": "/missing", "o-broken": "/broken"}
    with World.create(w, ORDER_AIR) as world:
        world.send_many(
            [(ORDER_PLACED, {"order_id": k, "url": server.url(p)}) for k, p in orders.items()]
        )
        report = drive(world)
        states = {k: world.state(ORDER, k)["status"] for k in orders}
        assert world.info()["runs"] == []
        assert world.info()["dead_letters"] == []
    assert report.receipts == 4
    assert states == {
        "o-ok": {"$tag": "Fetched", "$value": 200},
        "o-missing": {"$tag": "Failed", "$value": 404},
        "o-broken": {"$tag": "Failed", "$value": 503},
    }
    recs = records(w)
    assert set(started(recs).values()) == {"demo/fetch_flow@1"}
    runs = ended(recs)
    assert sorted(runs) == [0, 1, 2]
    assert {b["status"] for b in runs.values()} == {"ok"}
    branch = {}
    for run_id in runs:
        order_id, statuses = _order_of(recs, run_id)
        branch[order_id] = (statuses, [s for s in steps_of(recs, run_id) if s != "response"])
    assert branch == {
        "o-ok": ([200], ["fetch", "fetched"]),
        "o-missing": ([404], ["fetch", "failed"]),
        "o-broken": ([503], ["fetch", "retry", "retry_response", "retry_response", "retried"]),
    }
    hits = dict(server.hits)
    assert hits == {"/ok": 1, "/missing": 1, "/broken": 2}

    replay = verify_world(w)
    assert replay.ok, replay
    assert replay.records == len(recs)
    assert dict(server.hits) == hits  # replay reused the journaled receipts


def test_order_world_through_the_cli(tmp_path: Path, server: Loopback) -> None:
    server.routes.update(ORDER_ROUTES)
    w = tmp_path / "w"
    assert world_cli("init", w, "--air", ORDER_AIR)[0] == 0
    placed = json.dumps({"order_id": "o-1", "url": server.url("/ok")})
    assert world_cli("send", w, ORDER_PLACED, placed)[0] == 0
    code, out = world_cli("run", w, "--json")
    assert code == 0, out
    assert json.loads(out)["receipts"] == 1
    code, out = world_cli("state", w, ORDER, "--key", "o-1", "--json")
    assert code == 0
    assert json.loads(out)["state"] == {
        "status": {"$tag": "Fetched", "$value": 200},
        "url": server.url("/ok"),
    }
    code, out = world_cli("journal", "tail", w, "--subject", "/world/run/**")
    assert code == 0
    shown = list(lines(out))
    assert {r["subject"].rsplit("/", 1)[0] for r in shown} == {"/world/run/demo/fetch_flow@1/0"}
    kinds = [r["kind"] for r in shown]
    assert kinds[0] == "plan.started"
    assert kinds[-1] == "plan.ended"
    assert set(kinds[1:-1]) == {"plan.step"}
    assert [r["body"]["step"] for r in shown[1:-1]] == ["fetch", "response", "response", "fetched"]
    assert shown[-1]["body"] == {"run_id": 0, "status": "ok"}
    assert server.hits["/ok"] == 1


# --- 2. fan-out and join -------------------------------------------------------------------------

FAN = "t/FanOut@1"
STATUSES = "t/Statuses@1"


def _fan_out_world(folder: Path) -> Path:
    legs = ("a", "b", "c")
    steps = [http_get(f"emit_{x}", ref(f"@plan.input.{x}"), f"req_{x}") for x in legs]
    steps += [await_receipt(f"wait_{x}", f"req_{x}", f"resp_{x}") for x in legs]
    statuses = {x: ref(f"@var:resp_{x}.status") for x in legs}
    steps.append(
        {
            "id": "join",
            "op": "raise_event",
            "reducer": "t/Sink@1",
            "event": {"record": {"$schema": STATUSES, **statuses}},
        }
    )
    steps.append(end(result={"record": statuses}))
    ids = [s["id"] for s in steps]
    return plan_world(
        folder,
        schemas={
            STATUSES: {"record": {"a": "int", "b": "int", "c": "int"}},
            FAN: {"record": {"a": "text", "b": "text", "c": "text"}},
        },
        plans=[plan("t/fan@1", FAN, steps, chain(*ids), output=STATUSES)],
        triggers=[{"event": FAN, "plan": "t/fan@1"}],
        grants=[http_grant(["127.0.0.1"])],
        sink_events=[STATUSES],
    )


def test_fan_out_binds_each_receipt_to_its_own_var_when_they_arrive_out_of_order(
    tmp_path: Path, server: Loopback
) -> None:
    # /slow answers only once /mid's receipt is with the loop, /mid once /fast's is: the
    # receipts come back fast, mid, slow, the reverse of the order the plan awaits them.
    gates = {"/fast": threading.Event(), "/mid": threading.Event()}
    server.routes.update(
        {
            "/slow": Answer(201, gate=gates["/mid"]),
            "/mid": Answer(404, gate=gates["/fast"]),
            "/fast": Answer(503),
        }
    )
    w = tmp_path / "w"
    with World.create(w, _fan_out_world(tmp_path / "air")) as world:
        urls = {"a": server.url("/slow"), "b": server.url("/mid"), "c": server.url("/fast")}
        world.send(FAN, urls)
        http = ReceiptGates(HttpAdapter(world.cas), gates)
        report = drive(world, [http])
    assert report.receipts == 3
    recs = records(w)
    url_of = queued_urls(recs)
    arrived = [url_of[r.body["intent_hash"]] for r in of_kind(recs, "receipt")]
    assert arrived == [server.url("/fast"), server.url("/mid"), server.url("/slow")]
    assert steps_of(recs, 0) == [
        *("emit_a", "emit_b", "emit_c"),
        *("wait_a", "wait_a", "wait_b", "wait_b", "wait_c", "wait_c"),
        "join",
    ]
    want = {"a": 201, "b": 404, "c": 503}
    assert raised(recs, 0) == [(STATUSES, want)]
    assert ended(recs)[0] == {"run_id": 0, "status": "ok", "result": want}
    assert dict(server.hits) == {"/slow": 1, "/mid": 1, "/fast": 1}
    assert verify_world(w).ok


# --- 3. await_event: correlation, where, future-only --------------------------------------------

START = "t/Start@1"
REPLY = "t/Reply@1"


def _await_world(folder: Path) -> Path:
    wait = {
        "id": "wait",
        "op": "await_event",
        "event": REPLY,
        "where": op("eq", ref("@event.key"), ref("@plan.input.key")),
        "bind": {"as": "got"},
    }
    return plan_world(
        folder,
        schemas={
            REPLY: {"record": {"key": "text", "n": "int"}},
            START: {"record": {"key": "text"}},
        },
        plans=[plan("t/wait@1", START, [wait, end(result=ref("@var:got"))], chain("wait", "end"))],
        triggers=[{"event": START, "plan": "t/wait@1", "correlate_by": "key"}],
        sink_events=[REPLY],
    )


def _waiting(world: World) -> dict[int, str | None]:
    return {r["run_id"]: r["waiting"] for r in world.info()["runs"]}


def test_await_event_wakes_only_its_own_correlated_run_and_only_for_later_events(
    tmp_path: Path,
) -> None:
    w = tmp_path / "w"
    with World.create(w, _await_world(tmp_path / "air")) as world:
        world.send_many([(START, {"key": "a"}), (START, {"key": "b"})])
        drive(world)
        assert _waiting(world) == {0: "wait", 1: "wait"}

        world.send(REPLY, {"key": "b", "n": 2})
        drive(world)
        assert _waiting(world) == {0: "wait"}
        world.send(REPLY, {"key": "a", "n": 1})
        drive(world)
        assert _waiting(world) == {}

        # c's reply is journaled after its run starts but before the run waits: not seen.
        world.send_many([(START, {"key": "c"}), (REPLY, {"key": "c", "n": 7})])
        drive(world)
        assert _waiting(world) == {2: "wait"}
        world.send(REPLY, {"key": "c", "n": 8})
        drive(world)
        assert _waiting(world) == {}
    runs = ended(records(w))
    assert list(runs) == [1, 0, 2]  # b's run ended first
    assert {i: (b["status"], b["result"]) for i, b in runs.items()} == {
        0: ("ok", {"key": "a", "n": 1}),
        1: ("ok", {"key": "b", "n": 2}),
        2: ("ok", {"key": "c", "n": 8}),
    }
    assert verify_world(w).ok


def test_a_run_denied_while_its_awaited_event_is_queued_leaves_the_world_runnable(
    tmp_path: Path,
) -> None:
    put = blob_put("a_put", {"bytes": "AAAA"}, "p")
    wait = {
        "id": "wait",
        "op": "await_event",
        "event": REPLY,
        "where": op("eq", ref("@event.key"), ref("@plan.input.key")),
        "bind": {"as": "got"},
    }
    air = plan_world(
        tmp_path / "air",
        schemas={
            REPLY: {"record": {"key": "text", "n": "int"}},
            START: {"record": {"key": "text"}},
        },
        plans=[plan("t/wait@1", START, [put, wait, end()], chain("a_put", "wait", "end"))],
        triggers=[{"event": START, "plan": "t/wait@1", "correlate_by": "key"}],
        grants=[blob_grant()],
        rules=[{"when": {}, "decision": "require_approval"}],
        sink_events=[REPLY],
    )
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send(START, {"key": "a"})
        drive(world)
        (parked,) = world.kernel.effects.parked()
        decide_parked(world, parked.intent_hash.hex(), approved=False)
        world.send(REPLY, {"key": "a", "n": 1})  # matched while the denial is still queued
        drive(world)
        assert world.info()["runs"] == []
        assert world.kernel.scheduler.pending == 0
    (body,) = ended(records(w)).values()
    assert body["error"]["code"] == "effect.denied"


# --- 4. refusals -------------------------------------------------------------------------------

GO = "t/Go@1"
DATA8 = {"bytes": base64.b64encode(b"8 bytes!").decode()}
DATA6 = {"bytes": base64.b64encode(b"6bytes").decode()}


def _http_plan(method: str = "GET") -> dict[str, Any]:
    fetch = http_get("fetch", ref("@plan.input.url"), "req")
    fetch["params"]["record"]["method"] = method
    steps = [fetch, await_receipt("wait", "req", "resp"), end()]
    return plan("t/go@1", GO, steps, chain("fetch", "wait", "end"))


def _blob_plan(*puts: Any) -> dict[str, Any]:
    """One ``blob.put`` of each data Expr in ``puts``, each awaited before the next."""
    steps: list[dict[str, Any]] = []
    for i, data in enumerate(puts):
        steps += [blob_put(f"put_{i}", data, f"p{i}"), await_receipt(f"wait_{i}", f"p{i}", f"r{i}")]
    steps.append(end())
    return plan("t/go@1", GO, steps, chain(*[s["id"] for s in steps]))


OK_HOSTS = ["127.0.0.1"]
NO_POLICY = None


def _cap_refusal(plan_doc: dict[str, Any], grant: dict[str, Any], code: str, name: str) -> Any:
    """Refused by the capability check: the policy would allow anything."""
    return pytest.param(plan_doc, [grant], ALLOW_ALL, code, None, id=name)


REFUSALS = [
    pytest.param(
        _http_plan(),
        [http_grant(OK_HOSTS)],
        [
            {"when": {"effect_kind": "blob.put"}, "decision": "allow"},
            {"when": {"effect_kind": "http.request", "host": "127.*"}, "decision": "deny"},
        ],
        "policy.denied",
        (1, "deny"),
        id="policy-deny-rule",
    ),
    pytest.param(
        _http_plan(),
        [http_grant(OK_HOSTS)],
        [{"when": {"effect_kind": "http.request", "method": "POST"}, "decision": "allow"}],
        "policy.denied",
        (-1, "deny"),
        id="no-rule-matches-default-deny",
    ),
    pytest.param(
        _http_plan(),
        [http_grant(OK_HOSTS)],
        NO_POLICY,
        "policy.denied",
        (-1, "deny"),
        id="no-policy-default-deny",
    ),
    _cap_refusal(
        _http_plan(),
        http_grant(["example.com", "127.0.0.1:1"]),
        "cap.host_not_allowed",
        "host-outside-grant",
    ),
    _cap_refusal(
        _http_plan(),
        {"name": "http", "cap": "sys/http.out@1", "params": {"hosts": [], "verbs": []}},
        "cap.host_not_allowed",
        "empty-grant",
    ),
    _cap_refusal(
        _http_plan("POST"), http_grant(OK_HOSTS), "cap.method_not_allowed", "method-outside-grant"
    ),
    _cap_refusal(
        _http_plan(),
        http_grant(
            OK_HOSTS, params={"hosts": OK_HOSTS, "verbs": ["GET"], "path_prefixes": ["/api/"]}
        ),
        "cap.path_not_allowed",
        "path-outside-grant",
    ),
    _cap_refusal(_http_plan(), http_grant(OK_HOSTS, expiry_ns=0), "cap.expired", "expired-grant"),
    _cap_refusal(
        _blob_plan(DATA8),
        blob_grant(budget={"bytes": 4}),
        "cap.budget_exhausted",
        "budget-smaller-than-data",
    ),
]


@pytest.mark.parametrize(("plan_doc", "grants", "rules", "code", "decision"), REFUSALS)
def test_a_refused_effect_ends_its_run_with_its_reason_and_reaches_no_server(
    tmp_path: Path,
    server: Loopback,
    plan_doc: dict[str, Any],
    grants: list[dict[str, Any]],
    rules: list[dict[str, Any]] | None,
    code: str,
    decision: tuple[int, str] | None,
) -> None:
    server.routes["/ok"] = Answer(200)
    air = plan_world(
        tmp_path / "air",
        schemas={GO: {"record": {"url": "text"}}},
        plans=[plan_doc],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=grants,
        rules=rules,
    )
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send(GO, {"url": server.url("/ok")})
        drive(world)
        info = world.info()
    assert info["runs"] == []
    recs = records(w)
    (body,) = ended(recs).values()
    assert body["status"] == "error"
    assert body["error"]["code"] == code
    assert body["error"]["detail"]
    decisions = [
        (r.body["rule_index"], r.body["decision"]) for r in of_kind(recs, "policy.decision")
    ]
    if decision is None:  # refused by the capability check: no intent at all
        assert of_kind(recs, "effect.queued") == []
        assert decisions == []
    else:
        assert decisions == [decision]
        assert info["effects"]["denied"] == 1
    assert of_kind(recs, "receipt") == []
    assert server.total == 0
    assert verify_world(w).ok


def test_a_budget_spent_by_an_earlier_put_refuses_the_next(tmp_path: Path) -> None:
    air = plan_world(
        tmp_path / "air",
        schemas={GO: {"record": {"url": "text"}}},
        plans=[_blob_plan(DATA6, DATA6)],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=[blob_grant(budget={"bytes": 10})],
    )
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send(GO, {"url": "-"})
        drive(world)
        assert world.cas.get(cbor.content_hash(b"6bytes")) == b"6bytes"
    recs = records(w)
    (receipt,) = of_kind(recs, "receipt")
    assert receipt.body["status"] == "ok"
    assert cbor.loads(receipt.body["payload"])["size"] == 6
    assert steps_of(recs, 0) == ["put_0", "wait_0", "wait_0"]
    assert ended(recs)[0]["error"]["code"] == "cap.budget_exhausted"


def test_a_grant_of_the_wrong_cap_type_is_refused_when_the_world_loads(tmp_path: Path) -> None:
    # The validator catches this before any run: http.request through a sys/blob@1 grant.
    air = plan_world(
        tmp_path / "air",
        schemas={GO: {"record": {"url": "text"}}},
        plans=[_http_plan()],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=[blob_grant(name="http")],
    )
    with pytest.raises(ManifestError) as info:
        World.create(tmp_path / "w", air)
    codes = [(d.code, d.pointer.rsplit("/", 3)[1:]) for d in info.value.diagnostics]
    assert codes == [("air.cap.type_mismatch", ["steps", "0", "cap"])]
    assert not (tmp_path / "w" / "journal").exists()


@pytest.mark.parametrize(
    ("url", "grant_params", "code"),
    [
        pytest.param(
            "{base}#@api.example.com/ok",
            {"hosts": ["api.example.com"], "verbs": ["GET"]},
            "cap.host_not_allowed",
            id="fragment-hides-the-host",
        ),
        pytest.param(
            "{base}?@api.example.com/ok",
            {"hosts": ["api.example.com"], "verbs": ["GET"]},
            "cap.host_not_allowed",
            id="query-hides-the-host",
        ),
        pytest.param(
            "http://api.example.com@127.0.0.1:1/ok",
            {"hosts": ["api.example.com"], "verbs": ["GET"]},
            "cap.url_invalid",
            id="userinfo-is-refused-outright",
        ),
        pytest.param(
            "{base}/api/../admin",
            {"hosts": OK_HOSTS, "verbs": ["GET"], "path_prefixes": ["/api/"]},
            "cap.path_not_allowed",
            id="dot-segments-leave-the-prefix",
        ),
    ],
)
def test_a_url_that_disguises_its_host_or_path_is_refused_by_the_grant(
    tmp_path: Path, server: Loopback, url: str, grant_params: dict[str, Any], code: str
) -> None:
    # Every URL here really goes to the loopback server (or nowhere): the grant names another
    # host, or another path, so the capability check must refuse it.
    server.routes["/admin"] = Answer(200)
    air = plan_world(
        tmp_path / "air",
        schemas={GO: {"record": {"url": "text"}}},
        plans=[_http_plan()],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=[{"name": "http", "cap": "sys/http.out@1", "params": grant_params}],
    )
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send(GO, {"url": url.format(base=f"http://127.0.0.1:{server.port}")})
        drive(world, quick_http(world, retries_max=0))
    (body,) = ended(records(w)).values()
    assert server.total == 0
    assert (body["status"], body["error"]["code"]) == ("error", code)


def _approval_world(tmp_path: Path, server: Loopback, name: str) -> Path:
    """A run whose GET of ``/ok`` a policy parks with ``require_approval``; run once, so the
    intent is parked and the run waits for its receipt."""
    air = plan_world(
        tmp_path / f"air-{name}",
        schemas={GO: {"record": {"url": "text"}}},
        plans=[_http_plan()],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=[http_grant(OK_HOSTS)],
        rules=[{"when": {"effect_kind": "http.request"}, "decision": "require_approval"}],
    )
    w = tmp_path / name
    with World.create(w, air) as world:
        world.send(GO, {"url": f"http://127.0.0.1:{server.port}/ok"})
        drive(world, quick_http(world))
    return w


def _intents(w: Path) -> list[dict[str, Any]]:
    code, out = world_cli("effects", "ls", w, "--json")
    assert code == 0
    return list(json.loads(out)["intents"])


def test_an_approved_effect_is_sent_at_the_next_run_and_the_run_completes(
    tmp_path: Path, server: Loopback
) -> None:
    server.routes["/ok"] = Answer(200)
    w = _approval_world(tmp_path, server, "approve")
    (intent,) = _intents(w)
    assert (intent["status"], intent["decision"], intent["rule_index"]) == (
        "parked",
        "require_approval",
        0,
    )
    code, out = world_cli("info", w, "--json")
    assert [r["waiting"] for r in json.loads(out)["runs"]] == ["wait"]
    assert ended(records(w)) == {}
    assert server.total == 0

    assert world_cli("effects", "approve", w, intent["intent_hash"])[0] == 0
    assert server.total == 0  # approving sends nothing by itself
    code, out = world_cli("run", w, "--json")
    assert (code, json.loads(out)["receipts"]) == (0, 1)
    assert server.hits["/ok"] == 1
    (intent,) = _intents(w)
    assert (intent["status"], intent["receipt_status"]) == ("done", "ok")
    assert ended(records(w)) == {0: {"run_id": 0, "status": "ok"}}
    assert verify_world(w).ok


def test_a_denied_effect_ends_its_run_with_an_error(tmp_path: Path, server: Loopback) -> None:
    server.routes["/ok"] = Answer(200)
    w = _approval_world(tmp_path, server, "deny")
    (intent,) = _intents(w)
    assert world_cli("effects", "deny", w, intent["intent_hash"])[0] == 0
    assert world_cli("run", w)[0] == 0
    (body,) = ended(records(w)).values()
    assert (body["status"], body["error"]["code"]) == ("error", "effect.denied")
    assert [i["status"] for i in _intents(w)] == ["denied"]
    code, _out = world_cli("effects", "approve", w, intent["intent_hash"])
    assert code == 1  # no longer parked
    assert server.total == 0
    assert verify_world(w).ok


# --- 6. transport failures ---------------------------------------------------------------------


def _branching_world(folder: Path) -> Path:
    """GET the input's url; end with the status, by way of ``answered`` or ``unreachable``."""
    status = ref("@var:resp.status")
    steps = [
        http_get("fetch", ref("@plan.input.url"), "req"),
        await_receipt("wait", "req", "resp"),
        {"id": "answered", "op": "assign", "expr": status, "bind": {"as": "got"}},
        {"id": "unreachable", "op": "assign", "expr": -1, "bind": {"as": "got"}},
        end("end_answered", ref("@var:got")),
        end("end_unreachable", ref("@var:got")),
    ]
    edges = [
        *chain("fetch", "wait"),
        {"from": "wait", "to": "answered", "when": op("ne", status, 0)},
        {"from": "wait", "to": "unreachable", "when": op("eq", status, 0)},
        *chain("answered", "end_answered"),
        *chain("unreachable", "end_unreachable"),
    ]
    return plan_world(
        folder,
        schemas={GO: {"record": {"url": "text"}}},
        plans=[plan("t/go@1", GO, steps, edges)],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=[http_grant(OK_HOSTS)],
    )


def test_a_server_that_drops_twice_then_answers_is_retried_and_the_run_completes(
    tmp_path: Path, server: Loopback
) -> None:
    server.routes["/flaky"] = Answer(200, drop_first=2)
    w = tmp_path / "w"
    with World.create(w, _branching_world(tmp_path / "air")) as world:
        world.send(GO, {"url": server.url("/flaky")})
        report = drive(world, quick_http(world, retries_max=3))
        assert world.info()["dead_letters"] == []
    assert report.receipts == 1
    assert server.hits["/flaky"] == 3
    recs = records(w)
    assert [r.body["status"] for r in of_kind(recs, "receipt")] == ["ok"]
    assert steps_of(recs, 0) == ["fetch", "wait", "wait", "answered"]
    assert ended(recs)[0] == {"run_id": 0, "status": "ok", "result": 200}


@pytest.mark.parametrize(
    ("answer", "receipt_status"),
    [
        pytest.param(Answer(hang=True), "timeout", id="never-answers"),
        pytest.param(Answer(drop_first=99), "error", id="always-hangs-up"),
    ],
)
def test_a_server_that_never_answers_ends_in_a_failed_receipt_the_plan_sees_and_a_dead_letter(
    tmp_path: Path, server: Loopback, answer: Answer, receipt_status: str
) -> None:
    server.routes["/gone"] = answer
    w = tmp_path / "w"
    with World.create(w, _branching_world(tmp_path / "air")) as world:
        world.send(GO, {"url": server.url("/gone")})
        drive(world, quick_http(world, retries_max=1, read_timeout_s=0.2))
        info = world.info()
    assert server.hits["/gone"] == 2  # the first attempt and one retry
    recs = records(w)
    (receipt,) = of_kind(recs, "receipt")
    assert receipt.body["status"] == receipt_status
    payload = cbor.loads(receipt.body["payload"])
    assert (payload["status"], payload["headers"], payload["body_ref"]) == (0, {}, None)
    assert steps_of(recs, 0) == ["fetch", "wait", "wait", "unreachable"]
    assert ended(recs)[0] == {"run_id": 0, "status": "ok", "result": -1}
    assert [(d["code"], d["reducer"]) for d in info["dead_letters"]] == [
        ("effect_failed", "t/go@1")
    ]
    assert verify_world(w).ok


def test_an_effect_loop_given_a_dispatcher_leaves_no_timer_thread_behind(tmp_path: Path) -> None:
    w = tmp_path / "w"
    with World.create(w, _branching_world(tmp_path / "air")) as world:
        before = {t.ident for t in threading.enumerate() if t.name == "timer"}
        with Engine(world, adapters=quick_http(world)) as loop:
            loop.run()
        after = {t.ident for t in threading.enumerate() if t.name == "timer" and t.is_alive()}
    assert after <= before


# --- 7. hostile plan input ---------------------------------------------------------------------

CALC = "t/Calc@1"


def test_a_missing_field_in_a_guard_or_a_division_by_zero_fails_only_that_run(
    tmp_path: Path,
) -> None:
    steps = [
        {
            "id": "divide",
            "op": "assign",
            "expr": op("div", 100, ref("@plan.input.d")),
            "bind": {"as": "q"},
        },
        end(result=ref("@var:q")),
    ]
    guard = op("ge", ref("@plan.input.limits.max"), 0)  # a text-keyed map: may lack "max"
    air = plan_world(
        tmp_path / "air",
        schemas={
            CALC: {"record": {"d": "int", "limits": {"map": {"key": "text", "value": "int"}}}}
        },
        plans=[plan("t/calc@1", CALC, steps, [{"from": "divide", "to": "end", "when": guard}])],
        triggers=[{"event": CALC, "plan": "t/calc@1"}],
    )
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send_many(
            [
                (CALC, {"d": 0, "limits": {"max": 1}}),
                (CALC, {"d": 5, "limits": {}}),
                (CALC, {"d": 5, "limits": {"max": 1}}),
            ]
        )
        drive(world)
        assert world.info()["runs"] == []
        assert world.kernel.scheduler.pending == 0
    runs = ended(records(w))
    outcome = {
        i: (b["status"], b.get("result"), b.get("error", {}).get("code")) for i, b in runs.items()
    }
    assert outcome == {
        0: ("error", None, "expr.div_zero"),
        1: ("error", None, "expr.ref.missing"),
        2: ("ok", 20, None),
    }
    assert verify_world(w).ok


# --- 8. determinism ----------------------------------------------------------------------------


def _journal_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((path / "journal").glob("*.log")))


def test_two_runs_of_a_copied_world_against_the_same_answers_journal_the_same_records(
    tmp_path: Path, server: Loopback
) -> None:
    server.routes.update(ORDER_ROUTES)
    w = tmp_path / "w"
    with World.create(w, ORDER_AIR) as world:
        world.send(ORDER_PLACED, {"order_id": "o-1", "url": server.url("/ok")})
    shutil.copytree(w, tmp_path / "copy")
    # One request in flight at a time, so the arrival order is the same on both runs.
    for path in (w, tmp_path / "copy"):
        with World.open(path) as world:
            drive(world)
            world.send(ORDER_PLACED, {"order_id": "o-2", "url": server.url("/missing")})
            drive(world)
            world.send(ORDER_PLACED, {"order_id": "o-3", "url": server.url("/broken")})
            drive(world)
    ours, theirs = records(w), records(tmp_path / "copy")
    assert [r.kind for r in ours] == [r.kind for r in theirs]
    assert [b["status"] for b in ended(ours).values()] == ["ok", "ok", "ok"]
    assert ended(ours) == ended(theirs)
    # The receipt key is born with the world, so the copy signs alike: nothing may differ.
    assert [(r.seq, r.kind, r.subject, r.body) for r in ours] == [
        (r.seq, r.kind, r.subject, r.body) for r in theirs
    ]
    assert _journal_bytes(w) == _journal_bytes(tmp_path / "copy")
    assert len(of_kind(ours, "receipt")) == 4
    assert dict(server.hits) == {"/ok": 2, "/missing": 2, "/broken": 4}


# --- AIR written for AgentOS runs --------------------------------------------------------------


def test_air_written_for_agentos_runs_against_a_loopback_server(
    tmp_path: Path, server: Loopback
) -> None:
    from test_air_plans import _agentos_world, _write

    server.routes["/ping"] = Answer(202)
    docs = _agentos_world()
    grant = docs[-1]["defaults"]["cap_grants"][0]
    grant["params"]["record"]["hosts"] = {"set": [{"text": "127.0.0.1"}]}
    w = tmp_path / "w"
    with World.create(w, _write(tmp_path, docs)) as world:
        world.send("acme/Ping@1", {"url": f"http://127.0.0.1:{server.port}/ping"})
        drive(world, quick_http(world))
    assert server.hits["/ping"] == 1
    assert ended(records(w)) == {0: {"run_id": 0, "status": "ok"}}
    (event,) = raised(records(w), 0)
    assert event == ("acme/LogEvent@1", {"$tag": "Ok", "$value": {"status": 202}})
    assert verify_world(w).ok


def test_a_simulated_run_puts_blobs_inside_dispatch_so_no_receipt_waits_on_a_thread(
    tmp_path: Path,
) -> None:
    # A simulated run writes the same bytes whatever the machine's load: a blob receipt is
    # taken in the cycle that dispatched its intent, never one that a worker thread finished.
    air = plan_world(
        tmp_path / "air",
        schemas={GO: {"record": {"url": "text"}}},
        plans=[_blob_plan(DATA6, DATA8)],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=[blob_grant()],
    )
    w = tmp_path / "w"
    with World.create(w, air) as world, Engine(world, sim=True) as loop:
        world.send(GO, {"url": "-"})
        world.run_until_idle()
        sent = loop.pump.dispatch(PumpReport())
        assert sent == 1
        assert loop.pump.in_flight == 0
        loop.run(until_idle=True)
    assert [r.body["status"] for r in of_kind(records(w), "receipt")] == ["ok", "ok"]
