"""The native step path and the pure-Python one are interchangeable, byte for byte.

Host level: every hostile, broken and well-behaved WAT module and every example C reducer gives,
on every input, the same output bytes or the same error (type and fields) through the native
session as through the ctypes one. World level: the bundled example worlds and a world of hostile
reducers, driven with the same inputs once with ``WORLD_NATIVE=1`` and once with ``0``, write
the same journal bytes, the same cell states and index roots, the same dead letters; and each
world replays (``world replay --verify``) under the other path. Kernel level: the native helpers
the kernel calls give what their references give on the values those worlds produce.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from air import cbor
from air.errors import WorldError
from kernel import abi, native
from kernel.wasm import HostLimits, ReducerHost
from world import Engine, World
from world.history import verify_world

from host_wat import (
    INFINITE_LOOP,
    MEMORY_BOMB,
    MEMORY_GROW_AND_COPE,
    STACK_OVERFLOW,
    STACK_OVERFLOW_EXTRA,
    UNREACHABLE,
    reducer,
    wasm,
)
from worldkit import ROOT, const_wasm, manifest, module, output, schema, write_world_air

pytestmark = pytest.mark.skipif(
    not native.available(),
    reason="the native extension is not built (no C compiler at install): nothing to compare",
)

LIMITS = HostLimits(fuel_per_step=5_000_000, memory_bytes_max=2 << 20, output_bytes_max=4096)
START_TRAP = wasm("""(module (memory (export "memory") 1)
  (func $boom unreachable) (start $boom)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "step") (param i32 i32) (result i32 i32) (i32.const 0) (i32.const 0)))""")
WAT_CASES = {
    "ok-multi-value": reducer(),
    "ok-retptr": reducer(step_abi="retptr"),
    "echo": reducer(body="(return (local.get $ptr) (local.get $len))"),
    "echo-retptr": reducer(
        step_abi="retptr",
        body="(i32.store (local.get $ret) (local.get $ptr))"
        "(i32.store offset=4 (local.get $ret) (local.get $len)) (return)",
    ),
    "fuel": reducer(body=INFINITE_LOOP),
    "unreachable": reducer(body=UNREACHABLE),
    "unreachable-retptr": reducer(step_abi="retptr", body=UNREACHABLE),
    "memory-bomb": reducer(body=MEMORY_BOMB),
    "memory-cope": reducer(body=MEMORY_GROW_AND_COPE),
    "stack-overflow": reducer(body=STACK_OVERFLOW, extra=STACK_OVERFLOW_EXTRA),
    "too-large": reducer(out_len=LIMITS.output_bytes_max + 1),
    "too-large-retptr": reducer(step_abi="retptr", out_len=2**31 + 5),
    "out-of-bounds": reducer(body="(return (i32.const 65530) (i32.const 100))"),
    "alloc-out-of-bounds": reducer(
        alloc='(func (export "alloc") (param i32) (result i32) (i32.const 70000))'
    ),
    "alloc-wraps": reducer(alloc='(func (export "alloc") (param i32) (result i32) (i32.const -8))'),
    "alloc-traps": reducer(alloc='(func (export "alloc") (param i32) (result i32) unreachable)'),
    "not-cbor": reducer(b"\xff\xfe"),
    "not-canonical": reducer(b"\xa1\x65state\x58\x01\x00"),
    "unknown-key": reducer(cbor.dumps({"state": None, "zzz": 1})),
    "bad-payload": reducer(cbor.dumps({"state": b"\x18\x01"})),
    "events": reducer(output({"n": 1}, [("t/E@1", {"a": 1}), ("t/F@1", [1, "x"])])),
    "effect": reducer(
        cbor.dumps(
            {
                "state": None,
                "effects": [{"kind": "timer.set", "params": cbor.dumps({"a": 1}), "cap_slot": "t"}],
                "ann": cbor.dumps("note"),
            }
        )
    ),
    "start-trap": START_TRAP,
}


def _inputs() -> list[bytes]:
    event = cbor.dumps({"key": "a", "op": {"$tag": "Add", "$value": 2}})
    state = cbor.dumps({"count": 5, "events": 2})
    return [
        abi.encode_input(None, "t/E@1", cbor.dumps(None), None, True),
        abi.encode_input(state, "demo/CounterEvent@1", event, cbor.dumps("a"), True),
        abi.encode_input(None, "demo/Nope@1", event, cbor.dumps("a"), False),
        b"!" * 300,
        b"",
    ]


def _outcome(host: ReducerHost, data: bytes, input_cbor: bytes) -> object:
    try:
        raw = host.load(data).call(input_cbor)
    except WorldError as exc:
        return type(exc).__name__, vars(exc)
    try:
        return raw, abi.decode_output(raw, module="m")
    except WorldError as exc:
        return raw, type(exc).__name__, vars(exc)


def _hosts() -> tuple[ReducerHost, ReducerHost]:
    with_native = ReducerHost(LIMITS, backend="fast", native=True)
    assert with_native.native, "the extension is built, so the native session must be in use"
    return with_native, ReducerHost(LIMITS, backend="fast", native=False)


@pytest.fixture
def native_off() -> Iterator[None]:
    """The pure path for helpers the kernel calls (``abi``, ``journal``), restored after."""
    was = native.enabled()
    native.set_enabled(False)
    yield
    native.set_enabled(was)


@pytest.mark.parametrize("case", sorted(WAT_CASES))
def test_native_and_ctypes_steps_agree_on_wat_modules(case: str, native_off: None) -> None:
    with_native, ctypes_only = _hosts()
    for input_cbor in _inputs():
        ours = _outcome(with_native, WAT_CASES[case], input_cbor)
        assert ours == _outcome(ctypes_only, WAT_CASES[case], input_cbor)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "reducers").glob("*/*.wasm")), ids=lambda p: p.parent.name
)
def test_native_and_ctypes_steps_agree_on_the_example_c_reducers(path: Path) -> None:
    with_native, ctypes_only = _hosts()
    for input_cbor in _inputs():
        assert _outcome(with_native, path.read_bytes(), input_cbor) == _outcome(
            ctypes_only, path.read_bytes(), input_cbor
        )


def test_the_host_cases_cover_every_failure_kind() -> None:
    with_native, _ = _hosts()
    kinds = set()
    for data in WAT_CASES.values():
        found = _outcome(with_native, data, _inputs()[0])
        kinds.add(found[0] if isinstance(found[0], str) else found[1])  # type: ignore[index]
    wanted = {"ReducerTrap", "FuelExhausted", "MemoryLimitExceeded", "OutputTooLarge"}
    assert wanted | {"ReducerError", "ReducerLoadError", "StepRejected"} <= kinds


# --- worlds -------------------------------------------------------------------------------------

COUNTER = "demo/CounterEvent@1"
KEYS = ["b", "aa", "a", "order-1", "ü", "zz", "k" * 40]


def _counter_events() -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    for i in range(60):
        key = KEYS[i % len(KEYS)]
        op = {"$tag": "Clear", "$value": None} if i % 17 == 16 else {"$tag": "Add", "$value": i}
        events.append((COUNTER, {"key": key, "op": op}))
    return events


def _hostile_air(folder: Path) -> Path:
    record = {"record": {"n": "nat"}}
    bad = {
        "fuel": reducer(body=INFINITE_LOOP),
        "trap": reducer(body=UNREACHABLE),
        "bomb": reducer(body=MEMORY_BOMB),
        "deep": reducer(body=STACK_OVERFLOW, extra=STACK_OVERFLOW_EXTRA),
        "large": reducer(out_len=2 << 20),
        "oob": reducer(body="(return (i32.const 65530) (i32.const 100))"),
        "garbage": const_wasm(b"\xff\xfe"),
        "shape": const_wasm(cbor.dumps({"state": 5})),
        "schema": const_wasm(output({"n": -1})),
        "emits": const_wasm(output({"n": 1}, [("t/Ping@1", {"n": 2}), ("t/Nope@1", {"n": 1})])),
        "good": const_wasm(output({"n": 9})),
    }
    docs: list[dict[str, Any]] = [schema("t/State@1", record), schema("t/Nope@1", record)]
    routes = []
    for name in bad:
        docs += [schema(f"t/{name}@1", record), module(f"t/R{name}@1", "t/State@1", f"t/{name}@1")]
        routes.append({"event": f"t/{name}@1", "reducer": f"t/R{name}@1"})
    docs += [schema("t/Ping@1", record), module("t/Keyed@1", "t/State@1", "t/Ping@1", "nat")]
    routes.append({"event": "t/Ping@1", "reducer": "t/Keyed@1", "key_field": "n"})
    modules = {f"t/R{name}@1": data for name, data in bad.items()}
    modules["t/Keyed@1"] = const_wasm(output({"n": 3}))
    return write_world_air(folder, modules, [*docs, manifest(routes)])


def _hostile_events() -> list[tuple[str, Any]]:
    names = ["fuel", "trap", "bomb", "deep", "large", "oob", "garbage", "shape", "schema"]
    events = [(f"t/{name}@1", {"n": i}) for i, name in enumerate(names)]
    return [*events, ("t/emits@1", {"n": 1}), ("t/good@1", {"n": 1}), ("t/Ping@1", {"n": 7})]


WORLDS = {
    "counter": (lambda tmp: ROOT / "manifests" / "counter", _counter_events),
    "counter-v1": (lambda tmp: ROOT / "manifests" / "counter_v1", _counter_events),
    "session": (
        lambda tmp: ROOT / "manifests" / "session",
        lambda: [
            ("demo/SessionEvent@1", {"id": k, "op": {"$tag": op, "$value": None}})
            for k in KEYS
            for op in ("Touch", "Touch", "Close", "Touch")
        ],
    ),
    "order": (
        lambda tmp: ROOT / "manifests" / "order",
        lambda: [
            ("demo/OrderPlaced@1", {"order_id": k, "url": f"https://example.test/{i}"})
            for i, k in enumerate(KEYS)
        ],
    ),
    "timer": (
        lambda tmp: ROOT / "manifests" / "timer",
        lambda: [
            ("demo/TimerEvent@1", {"key": k, "deliver_at_ns": 1000 * (i % 3 + 1)})
            for i, k in enumerate(KEYS)
        ],
    ),
    "hostile": (_hostile_air, _hostile_events),
}


def _drive(path: Path, events: list[tuple[str, Any]], timers: bool) -> None:
    with World.open(path) as world:
        for start in range(0, len(events), 7):  # several commits, steps between sends
            world.send_many(events[start : start + 7])
            world.step(5)
        world.run_until_idle()
        world.snapshot()
    if timers:
        with World.open(path) as world, Engine(world, sim=True) as loop:
            loop.run()


def _facts(path: Path) -> dict[str, Any]:
    journal = b"".join(p.read_bytes() for p in sorted((path / "journal").glob("*.log")))
    with World.open(path, readonly=True) as world:
        roots = {
            name: world.store.index_root(world.kernel.cell_space(name))
            for name in sorted(world.air.modules)
        }
        kernel = world.kernel.snapshot_obj(world.journal.seq_next)
        records = [(r.kind, r.subject, r.body) for r in world.journal.read(0)]
    return {"journal": journal, "roots": roots, "kernel": kernel, "records": records}


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_both_paths_write_the_same_world_and_replay_each_other(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    air_of, events_of = WORLDS[name]
    World.create(tmp_path / "base", air_of(tmp_path / "air")).close()  # one receipt key for both
    facts = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("WORLD_NATIVE", flag)
        shutil.copytree(tmp_path / "base", tmp_path / flag)
        _drive(tmp_path / flag, events_of(), timers=name == "timer")
        facts[flag] = _facts(tmp_path / flag)
    assert facts["1"]["records"] == facts["0"]["records"]
    assert facts["1"]["journal"] == facts["0"]["journal"]
    assert facts["1"]["roots"] == facts["0"]["roots"]
    assert facts["1"]["kernel"] == facts["0"]["kernel"]
    assert len(facts["1"]["records"]) > len(events_of())
    for flag, other in (("1", "0"), ("0", "1")):
        monkeypatch.setenv("WORLD_NATIVE", other)  # each world replays under the other path
        assert verify_world(tmp_path / flag).ok


def test_the_hostile_world_fails_each_bad_step_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_NATIVE", "1")
    World.create(tmp_path / "w", _hostile_air(tmp_path / "air")).close()
    _drive(tmp_path / "w", _hostile_events(), timers=False)
    with World.open(tmp_path / "w", readonly=True) as world:
        codes = sorted({d.code for d in world.kernel.dead_letters.letters})
    assert {"fuel_exhausted", "trap", "memory_limit", "output_too_large"} <= set(codes)
    assert {"output_out_of_bounds", "output_not_cbor", "output_shape", "schema_mismatch"} <= set(
        codes
    )
    assert "no_route" in codes


def test_the_native_switch_follows_world_native(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for flag, wanted in (("0", False), ("off", False), ("1", True), ("", True)):
        monkeypatch.setenv("WORLD_NATIVE", flag)
        with World.create(tmp_path / f"w{flag}", ROOT / "manifests" / "counter") as world:
            world.send(COUNTER, {"key": "a", "op": {"$tag": "Add", "$value": 1}})
            world.run_until_idle()
            assert native.enabled() is wanted
            assert world.kernel.steps.runner.native is wanted
