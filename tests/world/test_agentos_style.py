"""Worlds of our own in AgentOS's conventions (issue 22, "done when"): each AIR folder under
``fixtures/agentos_style/<name>/air`` is written the way AgentOS's ``examples/00-counter`` ...
``08-retry-backoff`` are (December 2025, when plans existed): modules name no wasm, the
``sys/timer@1`` / ``sys/blob@1`` built-ins written again in ``capabilities.air.json``,
``cap_slots`` naming cap types, schemas in the tagged type forms (``{"text": {}}``), manifests
listing every def, plans with ExprOrValue literals (``"params": {"method": "GET", ...}``,
``"event": {"err": {...}}``), ``map`` Exprs for headers, edge guards. The reducers are ours, in C
against ``reducers/sdk/world.h``: the bundled counter and timer examples, and one small reducer
per other world (``fixtures/agentos_style/<name>/<name>.c``, built once per session), bound at
creation with ``modules={...}`` / ``world init --module NAME=FILE.wasm``.

The stories: a counter counted to 3 (through the CLI), a timer fired on the simulated clock, a
blob put and read back, a fetch whose 200 reaches the reducer, an aggregator joining three
answers that arrive in reverse order, a charge/reserve/notify saga and its refund path when the
reservation answers 409, a retry reducer backing off with timers until the work succeeds (or it
gives up). HTTP goes to a loopback server. Every world verifies afterwards.

The aggregator's steps have AgentOS's own ids (``emit_fetch_a``, ``await_fetch_a``, ...):
``await_fetch_a`` sorts before ``emit_fetch_b``, and a run goes on with its ready steps while it
waits (semantics 2, ``kernel/_plans.py``), so the three requests are in flight before the first
answer (``test_agentos_step_ids_fan_out``).
"""

from __future__ import annotations

import base64
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from httpkit import Answer, Loopback, loopback_fixture
from plans_kit import ReceiptGates, ended, of_kind, queued_urls, records

from air import load_air
from world import Engine, World
from world._airfiles import air_sources, builtin_sources, inspect_wasm, read_file
from world.effects import HttpAdapter
from world.history import verify_world

from worldkit import ROOT

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agentos_style"
WORLDS = ("counter", "timer", "blob_echo", "fetch_notify", "aggregator", "chain_comp", "retry")
OUR_REDUCERS = ("blob_echo", "fetch_notify", "aggregator", "chain_comp", "retry")
PLACEHOLDER = "127.0.0.1:8080"  # fetch_notify's literal URL; the test points it at the server

COUNTER = "demo/Counter@1"
TIMER = "demo/TimerSM@1"
BLOB = "demo/BlobEcho@1"
FETCH = "demo/FetchNotify@1"
AGG = "demo/Aggregator@1"
CHAIN = "demo/ChainComp@1"
RETRY = "demo/RetrySM@1"


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Our C reducers for these worlds, built by the project's toolchain once per session (in
    parallel: each is one zig process)."""
    from reducer_harness import load_build_tool

    tool = load_build_tool()
    out = tmp_path_factory.mktemp("agentos_style_wasm")
    with ThreadPoolExecutor(max_workers=len(OUR_REDUCERS)) as pool:
        done = pool.map(lambda n: tool.build_reducer(FIXTURES / n, out), OUR_REDUCERS)
        return {n: Path(b.wasm_path) for n, b in zip(OUR_REDUCERS, done, strict=True)}


server = loopback_fixture()


def air_of(name: str) -> Path:
    return FIXTURES / name / "air"


def air_for(name: str, into: Path, server: Loopback) -> Path:
    """A copy of ``name``'s AIR whose literal loopback URLs name ``server``'s port."""
    into.mkdir(parents=True)
    for file in air_of(name).glob("*.air.json"):
        text = file.read_text().replace(PLACEHOLDER, f"127.0.0.1:{server.port}")
        (into / file.name).write_text(text)
    return into


def run(world: World, **kwargs: Any) -> Any:
    with Engine(world, **kwargs) as loop:
        return loop.run()


def target(name: str, server: Loopback, path: str, method: str = "GET") -> dict[str, str]:
    return {"name": name, "url": server.url(path), "method": method}


# --- every folder validates, as AgentOS writes it -----------------------------------------------


@pytest.mark.parametrize("name", WORLDS)
def test_the_air_validates_with_modules_naming_no_wasm(name: str) -> None:
    docs = []
    for file in air_of(name).glob("*.air.json"):
        loaded = json.loads(file.read_text())
        docs += loaded if isinstance(loaded, list) else [loaded]
    modules = [d for d in docs if d["$kind"] == "defmodule"]
    assert modules
    assert all("wasm" not in m and "wasm_hash" not in m for m in modules)
    air = load_air(builtin_sources() + air_sources(air_of(name)), read_file, inspect_wasm)
    assert [w.code for w in air.warnings] == ["air.module.wasm_unbound"] * len(modules)
    assert air.wasm_hashes == {}


def test_the_built_in_caps_written_again_are_the_built_ins() -> None:
    for name, cap in [
        ("timer", "sys/timer@1"),
        ("blob_echo", "sys/blob@1"),
        ("retry", "sys/timer@1"),
    ]:
        air = load_air(builtin_sources() + air_sources(air_of(name)), read_file, inspect_wasm)
        assert air.defs[cap].builtin, name


# --- 00 counter: through the CLI ------------------------------------------------------------


def test_counter_to_three_through_the_cli(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    w = str(tmp_path / "w")
    wasm = ROOT / "reducers" / "counter" / "counter.wasm"
    cli = CliRunner()
    made = cli.invoke(
        app, ["init", w, "--air", str(air_of("counter")), "--module", f"{COUNTER}={wasm}"]
    )
    assert made.exit_code == 0, made.output
    for _ in range(3):
        sent = cli.invoke(
            app,
            ["send", w, "demo/CounterEvent@1", '{"key": "c", "op": {"$tag": "Add", "$value": 1}}'],
        )
        assert sent.exit_code == 0, sent.output
    ran = cli.invoke(app, ["run", w, "--until-idle"])
    assert ran.exit_code == 0, ran.output
    shown = cli.invoke(app, ["state", w, COUNTER, "--key", "c"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == {"count": 3, "events": 3}
    assert verify_world(Path(w)).ok


# --- 01 hello timer: the cap slot names the cap type; the simulated clock ---------------------


def test_timer_fires_on_the_simulated_clock(tmp_path: Path) -> None:
    w = tmp_path / "w"
    wasm = ROOT / "reducers" / "timer" / "timer.wasm"
    with World.create(w, air_of("timer"), modules={TIMER: wasm}) as world:
        assert world.air.slot_caps == {TIMER: {"timer": "sys/timer@1"}}
        world.send("demo/TimerEvent@1", {"key": "hello", "deliver_at_ns": 5_000})
        assert run(world, sim=True).receipts == 1
        assert world.state(TIMER, "hello") == {"armed": 1, "fired": 1, "last_fired_ns": 5_000}
    assert verify_world(w).ok


# --- 02 blob echo: blob.put, then blob.get of its ref ------------------------------------------


def test_blob_round_trip(tmp_path: Path, built: dict[str, Path]) -> None:
    from blake3 import blake3

    data = b"echo through the CAS \x00\xff"
    w = tmp_path / "w"
    with World.create(w, air_of("blob_echo"), modules={BLOB: built["blob_echo"]}) as world:
        start = {"data": base64.b64encode(data).decode()}
        world.send("demo/BlobEchoEvent@1", {"$tag": "Start", "$value": start})
        assert run(world, sim=True).receipts == 2
        state = world.state(BLOB)
    assert state["pc"] == "Done"
    assert base64.b64decode(state["echoed"]) == data
    assert state["blob_ref"] == "blake3:" + blake3(data).hexdigest()
    assert [r.body["status"] for r in of_kind(records(w), "receipt")] == ["ok", "ok"]
    assert verify_world(w).ok


# --- 03 fetch notify: a literal request, its 200 raised back as a variant case ------------------


def test_fetch_notify_gets_200(tmp_path: Path, built: dict[str, Path], server: Loopback) -> None:
    server.routes["/data.json"] = Answer(200, b"hello from the loopback")
    w = tmp_path / "w"
    air = air_for("fetch_notify", tmp_path / "air", server)
    with World.create(w, air, modules={FETCH: built["fetch_notify"]}) as world:
        world.send("demo/FetchNotifyEvent@1", {"$tag": "Start", "$value": {"note": "go"}})
        assert run(world).receipts == 1
        state = world.state(FETCH)
    assert state == {
        "pc": "Done",
        "next_request_id": 1,
        "last_status": 200,
        "last_body": "hello from the loopback",
    }
    assert dict(server.hits) == {"/data.json": 1}
    assert [b["status"] for b in ended(records(w)).values()] == ["ok"]
    assert verify_world(w).ok


# --- 04 aggregator: three requests at once, answers in reverse order, joined -------------------


def test_aggregator_joins_three_out_of_order_answers(
    tmp_path: Path, built: dict[str, Path], server: Loopback
) -> None:
    # /a answers only once /b's receipt is with the loop, /b once /c's is: c, b, a.
    gates = {"/b": threading.Event(), "/c": threading.Event()}
    server.routes.update(
        {
            "/a": Answer(200, b"alpha", gate=gates["/b"]),
            "/b": Answer(201, b"beta", gate=gates["/c"]),
            "/c": Answer(202, b"gamma"),
        }
    )
    w = tmp_path / "w"
    with World.create(w, air_of("aggregator"), modules={AGG: built["aggregator"]}) as world:
        start = {
            "topic": "weather",
            "primary": target("a", server, "/a"),
            "secondary": target("b", server, "/b"),
            "tertiary": target("c", server, "/c"),
        }
        world.send("demo/AggregatorEvent@1", {"$tag": "Start", "$value": start})
        http = ReceiptGates(HttpAdapter(world.cas), gates)
        assert run(world, adapters=[http]).receipts == 3
        state = world.state(AGG)
    recs = records(w)
    url_of = queued_urls(recs)
    arrived = [url_of[r.body["intent_hash"]] for r in of_kind(recs, "receipt")]
    assert arrived == [server.url("/c"), server.url("/b"), server.url("/a")]
    assert state["pc"] == "Done"
    assert state["topic"] == "weather"
    assert state["responses"] == [
        {"source": "a", "status": 200, "body_preview": "alpha"},
        {"source": "b", "status": 201, "body_preview": "beta"},
        {"source": "c", "status": 202, "body_preview": "gamma"},
    ]
    assert dict(server.hits) == {"/a": 1, "/b": 1, "/c": 1}
    assert verify_world(w).ok


# --- 05 chain comp: charge, reserve, notify; a failed reservation is refunded -----------------


@pytest.mark.parametrize(
    ("reserve_status", "phase", "hits", "statuses"),
    [
        pytest.param(
            200,
            "Completed",
            {"/charge": 1, "/reserve": 1, "/notify": 1},
            {
                "charge_status": 200,
                "reserve_status": 200,
                "notify_status": 202,
                "refund_status": None,
            },
            id="happy-path",
        ),
        pytest.param(
            409,
            "Refunded",
            {"/charge": 1, "/reserve": 1, "/refund": 1},
            {
                "charge_status": 200,
                "reserve_status": 409,
                "notify_status": None,
                "refund_status": 200,
            },
            id="refund-on-4xx",
        ),
    ],
)
def test_chain_saga(
    tmp_path: Path,
    built: dict[str, Path],
    server: Loopback,
    reserve_status: int,
    phase: str,
    hits: dict[str, int],
    statuses: dict[str, Any],
) -> None:
    server.routes.update(
        {
            "/charge": Answer(200, b"charged"),
            "/reserve": Answer(reserve_status, b"reservation"),
            "/notify": Answer(202, b"notified"),
            "/refund": Answer(200, b"refunded"),
        }
    )
    start = {
        "order_id": "o-42",
        "amount_cents": 1999,
        "reserve_sku": "sku-7",
        **{
            step: target(step, server, f"/{step}", "POST")
            for step in ("charge", "reserve", "notify", "refund")
        },
    }
    w = tmp_path / "w"
    with World.create(w, air_of("chain_comp"), modules={CHAIN: built["chain_comp"]}) as world:
        world.send("demo/ChainEvent@1", {"$tag": "Start", "$value": start})
        assert run(world).receipts == 3
        state = world.state(CHAIN)
    assert state["phase"] == phase
    assert {k: state[k] for k in statuses} == statuses
    assert state["start"]["order_id"] == "o-42"
    assert dict(server.hits) == hits
    recs = records(w)
    assert [b["status"] for b in ended(recs).values()] == ["ok"] * 3
    assert verify_world(w).ok


# --- 08 retry backoff: timers between attempts, on the simulated clock -------------------------


@pytest.mark.parametrize(
    ("max_attempts", "want"),
    [
        pytest.param(
            5,
            {"pc": "Done", "attempt": 3, "fired": 2, "clock_ns": 3_000, "hits": [1, 1, 1]},
            id="succeeds-on-the-third",
        ),
        pytest.param(
            2,
            {"pc": "GaveUp", "attempt": 2, "fired": 1, "clock_ns": 1_000, "hits": [1, 1, 0]},
            id="gives-up-after-two",
        ),
    ],
)
def test_retry_backs_off_with_timers(
    tmp_path: Path,
    built: dict[str, Path],
    server: Loopback,
    max_attempts: int,
    want: dict[str, Any],
) -> None:
    server.routes.update({"/work/1": Answer(503), "/work/2": Answer(503), "/work/3": Answer(200)})
    w = tmp_path / "w"
    with World.create(w, air_of("retry"), modules={RETRY: built["retry"]}) as world:
        work = {"req_id": "r-1", "url": server.url("/work"), "max_attempts": max_attempts,
                "base_delay_ns": 1_000}  # fmt: skip
        world.send("demo/RetryEvent@1", {"$tag": "start", "$value": work})
        report = run(world, sim=True)
        state = world.state(RETRY)
    assert report.receipts == want["attempt"] + want["fired"]
    assert state["pc"] == want["pc"]
    assert {k: state[k] for k in ("attempt", "fired", "clock_ns")} == {
        k: want[k] for k in ("attempt", "fired", "clock_ns")
    }
    assert state["last_error"] == "server error, try again"
    assert [server.hits[f"/work/{i}"] for i in (1, 2, 3)] == want["hits"]
    recs = records(w)
    fired_at = [
        r.body for r in of_kind(recs, "receipt") if r.body["adapter_id"].startswith("timer")
    ]
    assert len(fired_at) == want["fired"]
    assert verify_world(w).ok


# --- a run goes on while it waits -----------------------------------------------------------


def test_agentos_step_ids_fan_out(tmp_path: Path, built: dict[str, Path], server: Loopback) -> None:
    server.routes.update({p: Answer(200) for p in ("/a", "/b", "/c")})
    w = tmp_path / "w"
    with World.create(w, air_of("aggregator"), modules={AGG: built["aggregator"]}) as world:
        start = {
            "topic": "t",
            "primary": target("a", server, "/a"),
            "secondary": target("b", server, "/b"),
            "tertiary": target("c", server, "/c"),
        }
        world.send("demo/AggregatorEvent@1", {"$tag": "Start", "$value": start})
        assert run(world).receipts == 3
        assert len(world.state(AGG)["responses"]) == 3
    kinds = [r.kind for r in records(w) if r.kind in ("effect.queued", "receipt")]
    assert kinds == ["effect.queued"] * 3 + ["receipt"] * 3


def test_world_send_takes_agentos_variant_sugar(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    w = str(tmp_path / "w")
    wasm = ROOT / "reducers" / "counter" / "counter.wasm"
    cli = CliRunner()
    made = cli.invoke(
        app, ["init", w, "--air", str(air_of("counter")), "--module", f"{COUNTER}={wasm}"]
    )
    assert made.exit_code == 0, made.output
    sent = cli.invoke(app, ["send", w, "demo/CounterEvent@1", '{"key": "c", "op": {"Add": 1}}'])
    assert sent.exit_code == 0, sent.output
