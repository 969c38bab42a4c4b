"""The SDK side of cell state upgrades: the `sys/StateUpgrade@1` event reaches a reducer's
upgrade hook (``WORLD_CELL_REDUCER_UPGRADABLE``), never its ordinary step.

Every step runs in the kernel's host (``kernel.wasm.ReducerHost``, both backends) on an envelope
built by ``kernel.abi.encode_input``, exactly as the kernel will build it: ``state`` is the
cell's old state, ctx carries the key and ``cell_mode``, and the event value is
``{from_module, from_schema, state}`` with ``state`` the same bytes as the envelope's state.
The example is ``reducers/counter_v2`` (``demo/Counter@2``, state ``demo/CounterState@2``,
AIR in ``tests/fixtures/counter_v2_air``); its new states are checked against that AIR's schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from air import cbor
from air.types import Ref
from air.values import check
from kernel.abi import encode_input
from kernel.errors import ReducerTrap
from kernel.wasm import ReducerHost
from world._airfiles import load_air_path

from reducer_harness import load_build_tool

ROOT = Path(__file__).resolve().parents[3]
COUNTER_WASM = ROOT / "reducers" / "counter" / "counter.wasm"
COUNTER_V2_WASM = ROOT / "reducers" / "counter_v2" / "counter_v2.wasm"
COUNTER_V2_AIR = ROOT / "tests" / "fixtures" / "counter_v2_air"

UPGRADE = "sys/StateUpgrade@1"
EVENT = "demo/CounterEvent@1"
OLD_MODULE = "blake3:" + "ab" * 32
COUNT_MAX = 2**53 - 1  # counter_v2.c's COUNTER_V2_MAX
KEY = cbor.dumps("a")


@pytest.fixture(scope="module", params=["fast", "public"])
def host(request: pytest.FixtureRequest) -> ReducerHost:
    return ReducerHost(backend=request.param)


@pytest.fixture(scope="module")
def schemas() -> Any:
    return load_air_path(COUNTER_V2_AIR).schemas


def _upgrade_value(old_state: bytes, from_schema: str = "demo/CounterState@1") -> bytes:
    return cbor.dumps({"from_module": OLD_MODULE, "from_schema": from_schema, "state": old_state})


def _upgrade(host: ReducerHost, wasm: Path, old: Any, *, cell_mode: bool = True, **kw: Any) -> Any:
    """Step ``wasm`` with an upgrade of the old state ``old``; the new state, decoded."""
    old_cbor = cbor.dumps(old)
    env = encode_input(old_cbor, UPGRADE, _upgrade_value(old_cbor, **kw), KEY, cell_mode)
    out = host.load(wasm.read_bytes()).step(env)
    assert out.domain_events == ()
    assert out.effects == ()
    return None if out.state_cbor is None else cbor.loads(out.state_cbor)


def _add(host: ReducerHost, wasm: Path, state: Any, n: int) -> Any:
    value = cbor.dumps({"key": "a", "op": {"$tag": "Add", "$value": n}})
    state_cbor = None if state is None else cbor.dumps(state)
    out = host.load(wasm.read_bytes()).step(encode_input(state_cbor, EVENT, value, KEY, True))
    return None if out.state_cbor is None else cbor.loads(out.state_cbor)


def _v2_state_ok(schemas: Any, state: Any) -> None:
    check(Ref("demo/CounterState@2"), state, schemas)


# --- counter_v2: the upgrade hook ---------------------------------------------------------------


def test_an_upgrade_carries_the_count_and_records_the_old_module(host, schemas) -> None:
    new = _upgrade(host, COUNTER_V2_WASM, {"count": 7, "events": 2})
    assert new == {"count": 7, "events": 2, "upgraded_from": OLD_MODULE}
    _v2_state_ok(schemas, new)


def test_an_upgraded_cell_then_counts_as_usual_and_keeps_where_it_came_from(host, schemas) -> None:
    new = _upgrade(host, COUNTER_V2_WASM, {"count": 7, "events": 2})
    after = _add(host, COUNTER_V2_WASM, new, 3)
    assert after == {"count": 10, "events": 3, "upgraded_from": OLD_MODULE}
    _v2_state_ok(schemas, after)


def test_an_ordinary_event_still_counts_on_a_new_cell(host, schemas) -> None:
    state = _add(host, COUNTER_V2_WASM, None, 5)
    assert state == {"count": 5, "events": 1, "upgraded_from": None}
    _v2_state_ok(schemas, state)
    assert _add(host, COUNTER_V2_WASM, state, 1) == {"count": 6, "events": 2, "upgraded_from": None}


def test_an_upgrade_at_the_limit_succeeds_and_past_it_fails(host) -> None:
    at = _upgrade(host, COUNTER_V2_WASM, {"count": COUNT_MAX, "events": 1})
    assert at["count"] == COUNT_MAX
    with pytest.raises(ReducerTrap):
        _upgrade(host, COUNTER_V2_WASM, {"count": COUNT_MAX + 1, "events": 1})
    with pytest.raises(ReducerTrap):  # and counting past it fails too
        _add(host, COUNTER_V2_WASM, at, 1)


def test_an_upgrade_from_a_schema_counter_v2_does_not_know_fails(host) -> None:
    with pytest.raises(ReducerTrap):
        _upgrade(host, COUNTER_V2_WASM, {"count": 1, "events": 1}, from_schema="demo/Other@1")


def test_an_old_state_of_the_wrong_shape_fails_the_upgrade(host) -> None:
    with pytest.raises(ReducerTrap):
        _upgrade(host, COUNTER_V2_WASM, {"total": 1})


def test_the_event_state_must_be_the_envelope_state(host) -> None:
    env = encode_input(
        cbor.dumps({"count": 1, "events": 1}),
        UPGRADE,
        _upgrade_value(cbor.dumps({"count": 2, "events": 1})),
        KEY,
        True,
    )
    with pytest.raises(ReducerTrap):
        host.load(COUNTER_V2_WASM.read_bytes()).step(env)


def test_an_upgrade_of_a_null_state_fails(host) -> None:
    env = encode_input(None, UPGRADE, _upgrade_value(cbor.dumps(None)), KEY, True)
    with pytest.raises(ReducerTrap):
        host.load(COUNTER_V2_WASM.read_bytes()).step(env)


def test_cell_mode_upgrade_needs_the_key(host) -> None:
    old = cbor.dumps({"count": 1, "events": 1})
    env = encode_input(old, UPGRADE, _upgrade_value(old), None, True)
    with pytest.raises(ReducerTrap):
        host.load(COUNTER_V2_WASM.read_bytes()).step(env)


def test_v1_mode_upgrades_every_entry_of_the_map_in_one_step(host) -> None:
    old = {"a": {"count": 1, "events": 1}, "bb": {"count": 20, "events": 4}}
    new = _upgrade(host, COUNTER_V2_WASM, old, cell_mode=False, from_schema="demo/CounterMap@1")
    assert new == {
        "a": {"count": 1, "events": 1, "upgraded_from": OLD_MODULE},
        "bb": {"count": 20, "events": 4, "upgraded_from": OLD_MODULE},
    }
    assert (
        _upgrade(host, COUNTER_V2_WASM, {}, cell_mode=False, from_schema="demo/CounterMap@1") == {}
    )


def test_v1_mode_upgrade_fails_when_any_entry_cannot_be_carried(host) -> None:
    old = {"a": {"count": 1, "events": 1}, "b": {"count": COUNT_MAX + 1, "events": 1}}
    with pytest.raises(ReducerTrap):
        _upgrade(host, COUNTER_V2_WASM, old, cell_mode=False, from_schema="demo/CounterMap@1")


# --- reducers without an upgrade hook -------------------------------------------------------------


def test_the_committed_counter_fails_an_upgrade_event(host) -> None:
    with pytest.raises(ReducerTrap):
        _upgrade(host, COUNTER_WASM, {"count": 7, "events": 2})


# --- world_event_is_upgrade / world_upgrade_read, through the SDK probe ---------------------------


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    pytest.importorskip("ziglang")
    tool = load_build_tool()
    out_dir = tmp_path_factory.mktemp("probe")
    return tool.build_reducer(tool.REDUCERS_DIR / "sdk" / "probe", out_dir).wasm_path.read_bytes()


def test_the_probe_reads_the_upgrade_event_fields(host, probe) -> None:
    old = cbor.dumps({"count": 3, "events": 1})
    value = _upgrade_value(old)
    out = host.load(probe).step(encode_input(old, UPGRADE, value, KEY, True))
    assert cbor.loads(out.state_cbor) == {
        "from_module": OLD_MODULE,
        "from_schema": "demo/CounterState@1",
        "state": old,
    }


def test_world_event_is_upgrade_is_false_for_another_event(host, probe) -> None:
    out = host.load(probe).step(encode_input(None, "probe/IsUpgrade@1", cbor.dumps(1), None, False))
    assert cbor.loads(out.state_cbor) is False


@pytest.mark.parametrize(
    "value",
    [
        {"from_schema": "s/S@1", "state": cbor.dumps(1)},  # from_module missing
        {"from_module": OLD_MODULE, "state": cbor.dumps(1)},  # from_schema missing
        {"from_module": OLD_MODULE, "from_schema": "s/S@1"},  # state missing
        {"from_module": 1, "from_schema": "s/S@1", "state": cbor.dumps(1)},  # not text
        {"from_module": OLD_MODULE, "from_schema": "s/S@1", "state": "x"},  # not bytes
        {"from_module": OLD_MODULE, "from_schema": "s/S@1", "state": b"\x18\x01"},  # not canonical
    ],
)
def test_a_malformed_upgrade_event_fails_the_step(host, probe, value) -> None:
    env = encode_input(cbor.dumps(1), UPGRADE, cbor.dumps(value), KEY, True)
    with pytest.raises(ReducerTrap):
        host.load(probe).step(env)
