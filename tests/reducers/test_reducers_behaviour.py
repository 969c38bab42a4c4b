"""Behaviour of the example C reducers and the SDK, driven through the test harness.

Envelopes are built with ``air.cbor.dumps``; outputs are decoded with the strict
``air.cbor.loads``, so every passing step also proves the module wrote canonical CBOR. The
central property is the wrapper's: one binary, run in cell mode (one state per key) and in v1
mode (one ``map<key, substate>``), computes the same substates, events and effects per key.
Failure tests accept a trap, which is what the SDK does for every bad input (see world.h).
"""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest
import wasmtime
from hypothesis import example, given, settings
from hypothesis import strategies as st

from air import cbor

from reducer_harness import (
    ENGINE,
    FUEL_PER_STEP,
    decode_output,
    envelope,
    load_build_tool,
    load_module,
    module_from_wat,
    run_step,
    step_raw,
    steps_in_one_instance,
)

COUNTER = "demo/CounterEvent@1"
TIMER = "demo/TimerEvent@1"
TIMER_FIRED = "sys/TimerFired@1"
ORDER_PLACED = "demo/OrderPlaced@1"
FETCH_DONE = "demo/FetchDone@1"
SESSION = "demo/SessionEvent@1"

# Keys whose canonical order differs from Python's string order ("b" < "aa": shorter first).
KEYS = ["b", "aa", "a", "order-1", "ü", "zz"]

Event = tuple[str, str, dict[str, Any]]  # (key, schema, value)


def add(key: str, n: int) -> dict[str, Any]:
    return {"key": key, "op": {"$tag": "Add", "$value": n}}


def clear(key: str) -> dict[str, Any]:
    return {"key": key, "op": {"$tag": "Clear", "$value": None}}


def session(key: str, op: str) -> dict[str, Any]:
    return {"id": key, "op": {"$tag": op, "$value": None}}


def timer_fired(key: str | None, at_ns: int, delivered_ns: int) -> dict[str, Any]:
    return {
        "intent_hash": bytes(32),
        "status": "ok",
        "requested": {"deliver_at_ns": at_ns, "key": key},
        "receipt": {"delivered_at_ns": delivered_ns, "key": key},
    }


def _sequence(rng: random.Random, make: Any, length: int = 60) -> list[Event]:
    return [make(rng, rng.choice(KEYS)) for _ in range(length)]


def counter_events(seed: int) -> list[Event]:
    def make(rng: random.Random, key: str) -> Event:
        value = clear(key) if rng.random() < 0.2 else add(key, rng.randrange(0, 1000))
        return (key, COUNTER, value)

    return _sequence(random.Random(seed), make)


def session_events(seed: int) -> list[Event]:
    def make(rng: random.Random, key: str) -> Event:
        return (key, SESSION, session(key, "Close" if rng.random() < 0.25 else "Touch"))

    return _sequence(random.Random(seed), make)


def timer_events(seed: int) -> list[Event]:
    def make(rng: random.Random, key: str) -> Event:
        at = rng.randrange(0, 2**40)
        if rng.random() < 0.5:
            return (key, TIMER, {"key": key, "deliver_at_ns": at})
        return (key, TIMER_FIRED, timer_fired(key, at, at + rng.randrange(0, 10)))

    return _sequence(random.Random(seed), make)


def order_events(seed: int) -> list[Event]:
    # FetchDone only for orders already placed: a FetchDone without an order fails by design.
    rng, placed, events = random.Random(seed), set(), []
    for _ in range(60):
        key = rng.choice(KEYS)
        if key in placed and rng.random() < 0.6:
            status = rng.choice([200, 204, 299, 300, 404, 500, -1])
            events.append((key, FETCH_DONE, {"order_id": key, "status": status}))
        else:
            placed.add(key)
            events.append((key, ORDER_PLACED, {"order_id": key, "url": f"https://x/{key}"}))
    return events


SEQUENCES = [
    pytest.param("counter", counter_events, id="counter"),
    pytest.param("session", session_events, id="session"),
    pytest.param("timer", timer_events, id="timer"),
    pytest.param("order", order_events, id="order"),
]


def _without_state(output: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in output.items() if name != "state"}


# --- one binary, two modes ------------------------------------------------------------------


@pytest.mark.parametrize("v1_key_hint", [True, False], ids=["v1_with_ctx_key", "v1_key_from_event"])
@pytest.mark.parametrize(("reducer", "make_events"), SEQUENCES)
@pytest.mark.parametrize("seed", [1, 2])
def test_cell_mode_and_v1_mode_compute_the_same_substate_per_key(
    reducer, make_events, seed, v1_key_hint
):
    module = load_module(reducer)
    cells: dict[str, Any] = {}
    v1_state: Any = None
    for key, schema, value in make_events(seed):
        cell = run_step(module, state=cells.get(key), schema=schema, value=value, key=key)
        v1 = run_step(
            module,
            state=v1_state,
            schema=schema,
            value=value,
            key=key if v1_key_hint else None,
            cell_mode=False,
        )
        if cell.state is None:
            cells.pop(key, None)
        else:
            cells[key] = cell.state
        v1_state = v1.state
        assert v1_state == cells
        assert _without_state(v1.output) == _without_state(cell.output)
    assert cells, "the sequence should leave some cells alive"


def test_v1_state_map_keys_are_in_canonical_order():
    module = load_module("counter")
    state = None
    for key in ["zz", "aa", "b", "a"]:
        state = run_step(module, state=state, schema=COUNTER, value=add(key, 1), cell_mode=False)
        state = state.state
    raw = step_raw(
        module, envelope(state=state, schema=COUNTER, value=add("c", 1), cell_mode=False)
    )
    state_cbor = cbor.loads(raw)["state"]
    assert state_cbor == cbor.dumps(cbor.loads(state_cbor))
    assert list(cbor.loads(state_cbor)) == ["a", "b", "c", "aa", "zz"]


def test_v1_null_state_is_the_empty_map():
    result = run_step(load_module("counter"), schema=COUNTER, value=add("k", 3), cell_mode=False)
    assert result.state == {"k": {"count": 3, "events": 1}}


# --- counter --------------------------------------------------------------------------------


def test_counter_add_accumulates_count_and_events():
    module = load_module("counter")
    state = None
    for n in (5, 0, 7):
        state = run_step(module, state=state, schema=COUNTER, value=add("k", n), key="k").state
    assert state == {"count": 12, "events": 3}


def test_counter_clear_deletes_the_cell_in_cell_mode():
    result = run_step(
        load_module("counter"),
        state={"count": 4, "events": 2},
        schema=COUNTER,
        value=clear("k"),
        key="k",
    )
    assert result.output == {"state": None}


def test_counter_clear_removes_only_that_entry_in_v1_mode():
    state = {"k": {"count": 4, "events": 2}, "j": {"count": 1, "events": 1}}
    result = run_step(
        load_module("counter"), state=state, schema=COUNTER, value=clear("k"), cell_mode=False
    )
    assert result.state == {"j": {"count": 1, "events": 1}}


def test_counter_clearing_the_last_entry_leaves_an_empty_map_not_null():
    state = {"k": {"count": 4, "events": 2}}
    result = run_step(
        load_module("counter"), state=state, schema=COUNTER, value=clear("k"), cell_mode=False
    )
    assert result.output["state"] == cbor.dumps({})


# --- timer ----------------------------------------------------------------------------------


def test_timer_event_arms_and_emits_exactly_one_timer_set_effect():
    result = run_step(
        load_module("timer"),
        schema=TIMER,
        value={"key": "t1", "deliver_at_ns": 1_000_000},
        key="t1",
    )
    assert result.state == {"armed": 1, "fired": 0, "last_fired_ns": None}
    assert result.effects == [
        {"kind": "timer.set", "params": {"deliver_at_ns": 1_000_000, "key": "t1"}}
    ]
    assert result.domain_events == []


def test_timer_fired_counts_and_records_the_delivery_time():
    state = {"armed": 2, "fired": 0, "last_fired_ns": None}
    result = run_step(
        load_module("timer"),
        state=state,
        schema=TIMER_FIRED,
        value=timer_fired("t1", 1_000, 1_003),
        key="t1",
    )
    assert result.state == {"armed": 2, "fired": 1, "last_fired_ns": 1_003}
    assert "effects" not in result.output


def test_timer_fired_without_a_key_anywhere_fails_in_v1_mode():
    with pytest.raises(wasmtime.Trap):
        run_step(
            load_module("timer"),
            schema=TIMER_FIRED,
            value=timer_fired(None, 1, 1),
            cell_mode=False,
        )


# --- order ----------------------------------------------------------------------------------


def test_order_placed_stores_pending_and_emits_fetch_requested():
    result = run_step(
        load_module("order"),
        schema=ORDER_PLACED,
        value={"order_id": "o-1", "url": "https://example.com/o-1"},
        key="o-1",
    )
    assert result.state == {
        "status": {"$tag": "Pending", "$value": None},
        "url": "https://example.com/o-1",
    }
    assert result.domain_events == [
        {
            "schema": "demo/FetchRequested@1",
            "value": {"order_id": "o-1", "url": "https://example.com/o-1"},
        }
    ]
    assert "effects" not in result.output


@pytest.mark.parametrize(
    ("status", "tag"),
    [
        (200, "Fetched"),
        (299, "Fetched"),
        (199, "Failed"),
        (300, "Failed"),
        (503, "Failed"),
        (-7, "Failed"),
    ],
)
def test_order_fetch_done_stores_fetched_for_2xx_else_failed(status, tag):
    pending = {"status": {"$tag": "Pending", "$value": None}, "url": "https://x"}
    result = run_step(
        load_module("order"),
        state=pending,
        schema=FETCH_DONE,
        value={"order_id": "o-1", "status": status},
        key="o-1",
    )
    assert result.state == {"status": {"$tag": tag, "$value": status}, "url": "https://x"}
    assert result.domain_events == []


def test_order_fetch_done_for_an_unknown_order_fails():
    with pytest.raises(wasmtime.Trap):
        run_step(
            load_module("order"),
            schema=FETCH_DONE,
            value={"order_id": "o-9", "status": 200},
            key="o-9",
        )


# --- session --------------------------------------------------------------------------------


def test_session_touch_counts_and_close_deletes_the_cell():
    module = load_module("session")
    state = None
    for _ in range(3):
        state = run_step(
            module, state=state, schema=SESSION, value=session("s", "Touch"), key="s"
        ).state
    assert state == {"touches": 3}
    closed = run_step(module, state=state, schema=SESSION, value=session("s", "Close"), key="s")
    assert closed.output == {"state": None}


# --- static_counter: nothing carries over between steps -------------------------------------


def test_static_counter_sees_a_fresh_instance_on_every_step():
    module = load_module("static_counter")
    state = None
    for steps in (1, 2, 3):
        state = run_step(
            module, state=state, schema="demo/Anything@1", value=None, cell_mode=False
        ).state
        assert state == {"steps": steps, "static_steps": 1}


def test_static_counter_would_expose_a_host_that_reuses_an_instance():
    module = load_module("static_counter")
    env = envelope(schema="demo/Anything@1", value=None, cell_mode=False)
    reused = [decode_output(out).state for out in steps_in_one_instance(module, [env, env])]
    assert reused[1]["static_steps"] == 2
    assert decode_output(step_raw(module, env)).state == reused[0]


# --- envelope handling ----------------------------------------------------------------------


def test_unknown_ctx_fields_are_ignored():
    module = load_module("counter")
    plain = step_raw(
        module,
        envelope(state={"count": 1, "events": 1}, schema=COUNTER, value=add("k", 2), key="k"),
    )
    extra = {"height": 7, "now_ns": 10**18, "zz_future": [1, {"a": None}], "": b"\x00"}
    with_extra = step_raw(
        module,
        envelope(
            state={"count": 1, "events": 1},
            schema=COUNTER,
            value=add("k", 2),
            key="k",
            ctx_extra=extra,
        ),
    )
    assert with_extra == plain


def test_unknown_top_level_fields_are_ignored():
    module = load_module("counter")
    env = cbor.loads(envelope(schema=COUNTER, value=add("k", 2), key="k"))
    plain = step_raw(module, cbor.dumps(env))
    assert step_raw(module, cbor.dumps({**env, "trace": "x"})) == plain


def test_harness_accepts_the_multi_value_step_signature():
    output = cbor.dumps({"state": None})
    data = "".join(f"\\{b:02x}" for b in output)
    module = module_from_wat(
        f"""(module
          (memory (export "memory") 1)
          (data (i32.const 16) "{data}")
          (func (export "alloc") (param i32) (result i32) i32.const 1024)
          (func (export "step") (param i32 i32) (result i32 i32)
            i32.const 16 i32.const {len(output)}))"""
    )
    assert step_raw(module, envelope(schema=COUNTER, value=None)) == output


# --- malformed input fails cleanly ----------------------------------------------------------


def _valid_env(**overrides: Any) -> dict[str, Any]:
    env = {
        "version": 1,
        "state": None,
        "event": {"schema": COUNTER, "value": cbor.dumps(add("k", 1))},
        "ctx": {"cell_mode": True, "key": cbor.dumps("k")},
    }
    env.update(overrides)
    return env


VALID = cbor.dumps(_valid_env())

MALFORMED = [
    pytest.param(b"", id="empty"),
    pytest.param(b"\xff\x00", id="garbage"),
    pytest.param(VALID[:-1], id="truncated"),
    pytest.param(VALID + b"\x00", id="trailing_byte"),
    pytest.param(b"\xbf" + VALID[1:] + b"\xff", id="indefinite_length_map"),
    pytest.param(VALID.replace(b"\x01", b"\x18\x01", 1), id="non_shortest_integer"),
    pytest.param(
        b"\xa4"
        + b"".join(cbor.dumps({k: v})[1:] for k, v in sorted(_valid_env().items(), reverse=True)),
        id="map_keys_out_of_order",
    ),
    pytest.param(
        VALID[:1].replace(b"\xa4", b"\xa5") + VALID[1:] + b"gversion\x01", id="duplicate_key"
    ),
    pytest.param(cbor.dumps(_valid_env(version=2)), id="unknown_version"),
    pytest.param(cbor.dumps(_valid_env(state=b"\xa1")), id="state_not_cbor"),
    pytest.param(cbor.dumps(_valid_env(state=b"\xf9\x3c\x00")), id="state_is_a_float"),
    pytest.param(cbor.dumps(_valid_env(state=b"\x61\xff")), id="state_text_not_utf8"),
    pytest.param(
        cbor.dumps(_valid_env(event={"schema": COUNTER, "value": cbor.dumps(add("k", -1))})),
        id="event_value_wrong_type",
    ),
    pytest.param(
        cbor.dumps(_valid_env(event={"schema": "demo/Other@1", "value": cbor.dumps(add("k", 1))})),
        id="unknown_event_schema",
    ),
    pytest.param(
        cbor.dumps(
            _valid_env(event={"schema": COUNTER, "value": cbor.dumps({"key": "k", "op": "Add"})})
        ),
        id="variant_not_a_map",
    ),
    pytest.param(cbor.dumps(_valid_env(ctx={"cell_mode": True})), id="cell_mode_without_key"),
    pytest.param(cbor.dumps(_valid_env(ctx={"key": cbor.dumps("k")})), id="ctx_without_cell_mode"),
    pytest.param(
        cbor.dumps(_valid_env(ctx={"cell_mode": False, "key": cbor.dumps([1])})),
        id="v1_key_not_a_map_key",
    ),
    pytest.param(
        cbor.dumps(_valid_env(state=cbor.dumps({"count": 2**64 - 1, "events": 1}))),
        id="count_overflow",
    ),
]


@pytest.mark.parametrize("input_bytes", MALFORMED)
def test_malformed_or_unacceptable_input_traps(input_bytes):
    with pytest.raises(wasmtime.Trap):
        step_raw(load_module("counter"), input_bytes)


def _nested(depth: int) -> bytes:
    return b"\x81" * depth + b"\x00"


@pytest.mark.parametrize(("depth", "accepted"), [(64, True), (65, False), (100_000, False)])
def test_nesting_deeper_than_the_sdk_limit_traps(depth, accepted):
    env = cbor.dumps(_valid_env(event={"schema": "demo/Anything@1", "value": _nested(depth)}))
    module = load_module("static_counter")
    if accepted:
        assert decode_output(step_raw(module, env)).state == {"steps": 1, "static_steps": 1}
    else:
        with pytest.raises(wasmtime.Trap):
            step_raw(module, env)


@pytest.mark.parametrize(
    ("value_cbor", "accepted"),
    [
        pytest.param(cbor.dumps(cbor.Tag(2000, bytes(range(16)))), True, id="dec128"),
        pytest.param(b"\xd9\x07\xd0\x4f" + bytes(15), False, id="dec128_of_15_bytes"),
        pytest.param(b"\xc1\x00", False, id="other_tag"),
        pytest.param(b"\xf7", False, id="undefined"),
        pytest.param(b"\xfb" + bytes(8), False, id="float64"),
        pytest.param(b"\xa1\x81\x00\x00", False, id="array_as_map_key"),
    ],
)
def test_only_the_air_value_model_is_accepted(value_cbor, accepted):
    env = cbor.dumps(_valid_env(event={"schema": "demo/Anything@1", "value": value_cbor}))
    module = load_module("static_counter")
    if accepted:
        assert decode_output(step_raw(module, env)).state == {"steps": 1, "static_steps": 1}
    else:
        with pytest.raises(wasmtime.Trap):
            step_raw(module, env)


@pytest.mark.parametrize("reducer", ["counter", "timer", "order", "session"])
def test_mutated_input_either_traps_or_yields_canonical_output(reducer):
    """A cheap deterministic fuzz: never an out-of-bounds read, never non-canonical output."""
    module = load_module(reducer)
    rng = random.Random(reducer)
    base = cbor.dumps(_valid_env())
    for _ in range(150):
        mutated = bytearray(base)
        for _ in range(rng.randrange(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        try:
            output = step_raw(module, bytes(mutated))
        except wasmtime.Trap:
            continue
        decode_output(output)  # strict: raises on any non-canonical byte


# --- the SDK itself, through a probe reducer built for the test -----------------------------

_air_keys = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**64 - 1), st.text(max_size=6), st.binary(max_size=4)
)
_air_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.binary(min_size=16, max_size=16).map(lambda raw: cbor.Tag(2000, raw)),
)
air_values = st.recursive(
    _air_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_air_keys, inner, max_size=5),
    max_leaves=25,
)
PROPERTY = settings(max_examples=120, deadline=None, derandomize=True, database=None)


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    pytest.importorskip("ziglang")
    build_tool = load_build_tool()
    out_dir = tmp_path_factory.mktemp("probe")
    built = build_tool.build_reducer(build_tool.REDUCERS_DIR / "sdk" / "probe", out_dir)
    return load_module(built.wasm_path)


def _probe_state_cbor(probe, schema: str, value_cbor: bytes) -> bytes:
    env = cbor.dumps(
        {
            "version": 1,
            "state": None,
            "event": {"schema": schema, "value": value_cbor},
            "ctx": {"cell_mode": False},
        }
    )
    return cbor.loads(step_raw(probe, env))["state"]


@PROPERTY
@given(value=air_values)
def test_sdk_readers_and_writers_round_trip_every_air_value(probe, value):
    value_cbor = cbor.dumps(value)
    assert _probe_state_cbor(probe, "probe/Echo@1", value_cbor) == value_cbor


@PROPERTY
@given(entries=st.dictionaries(_air_keys, _air_scalars, max_size=40), seed=st.integers(0, 99))
@example(entries={100: "a", -1: "b", "": "c", b"": "d", 0: None}, seed=0)
def test_sdk_map_builder_sorts_keys_by_their_encoded_bytes(probe, entries, seed):
    pairs = [[key, value] for key, value in entries.items()]
    random.Random(seed).shuffle(pairs)
    assert _probe_state_cbor(probe, "probe/Map@1", cbor.dumps(pairs)) == cbor.dumps(entries)


def test_sdk_map_builder_traps_on_a_duplicate_key(probe):
    with pytest.raises(wasmtime.Trap):
        _probe_state_cbor(probe, "probe/Map@1", cbor.dumps([["k", 1], ["j", 2], ["k", 3]]))


def test_sdk_emits_up_to_the_domain_event_limit(probe):
    env = envelope(schema="probe/Emit@1", value=64, cell_mode=False)
    result = decode_output(step_raw(probe, env))
    assert [e["value"] for e in result.domain_events] == list(range(64))


@pytest.mark.parametrize("count", [65, 0], ids=["too_many_domain_events", "two_effects"])
def test_sdk_traps_beyond_its_output_limits(probe, count):
    with pytest.raises(wasmtime.Trap):
        step_raw(probe, envelope(schema="probe/Emit@1", value=count, cell_mode=False))


def test_v1_map_orders_mixed_type_keys_bytewise_not_length_first():
    module = load_module("counter")
    state = None
    for hint in ["k", -1, 100, b"\x00"]:
        env = envelope(state=state, schema=COUNTER, value=add("k", 1), key=hint, cell_mode=False)
        state = cbor.loads(cbor.loads(step_raw(module, env))["state"])  # strict at both levels
    assert list(state) == [100, -1, b"\x00", "k"]


def test_step_accepts_a_misaligned_return_pointer():
    module = load_module("counter")
    store = wasmtime.Store(ENGINE)
    store.set_fuel(FUEL_PER_STEP)
    exports = wasmtime.Instance(store, module, []).exports(store)
    memory, alloc, step = exports["memory"], exports["alloc"], exports["step"]
    env = envelope(schema=COUNTER, value=add("k", 2), key="k")
    in_ptr = alloc(store, len(env))
    memory.write(store, env, in_ptr)
    ret_ptr = alloc(store, 16) + 3
    step(store, ret_ptr, in_ptr, len(env))
    out_ptr, out_len = struct.unpack("<II", memory.read(store, ret_ptr, ret_ptr + 8))
    output = bytes(memory.read(store, out_ptr, out_ptr + out_len))
    assert decode_output(output).state == {"count": 2, "events": 1}
