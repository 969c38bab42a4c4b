"""The fast path (ctypes over wasmtime's C API) and the public-API path are interchangeable:
on the same module and input they return byte-identical outputs, or fail with the same error
type and fields. Covers well-behaved, hostile and broken WAT modules and the example C
reducers, with valid and garbage inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from air import cbor
from air.errors import WorldError
from kernel.abi import encode_input
from kernel.wasm import HostLimits, ReducerHost

from host_wat import (
    CARRY_OVER_MODULES,
    INFINITE_LOOP,
    MEMORY_BOMB,
    MEMORY_GROW_AND_COPE,
    STACK_OVERFLOW,
    STACK_OVERFLOW_EXTRA,
    UNREACHABLE,
    reducer,
    wasm,
)

REDUCERS = Path(__file__).resolve().parents[3] / "reducers"
LIMITS = HostLimits(fuel_per_step=5_000_000, memory_bytes_max=2 << 20, output_bytes_max=4096)

WAT_CASES = {
    "ok-multi-value": reducer(),
    "ok-retptr": reducer(step_abi="retptr"),
    "echo": reducer(body="(return (local.get $ptr) (local.get $len))"),
    "fuel": reducer(body=INFINITE_LOOP),
    "unreachable": reducer(body=UNREACHABLE),
    "memory-bomb": reducer(body=MEMORY_BOMB),
    "memory-cope": reducer(body=MEMORY_GROW_AND_COPE),
    "stack-overflow": reducer(body=STACK_OVERFLOW, extra=STACK_OVERFLOW_EXTRA),
    "too-large": reducer(out_len=LIMITS.output_bytes_max + 1),
    "out-of-bounds": reducer(body="(return (i32.const 65530) (i32.const 100))"),
    "not-cbor": reducer(b"\xff\xfe"),
    **{f"carry-{name}": wasm(wat) for name, wat in CARRY_OVER_MODULES.items()},
}


def _counter_inputs() -> list[bytes]:
    event = cbor.dumps({"key": "a", "op": {"$tag": "Add", "$value": 2}})
    clear = cbor.dumps({"key": "a", "op": {"$tag": "Clear", "$value": None}})
    state = cbor.dumps({"count": 5, "events": 2})
    return [
        encode_input(None, "demo/CounterEvent@1", event, cbor.dumps("a"), True),
        encode_input(state, "demo/CounterEvent@1", event, cbor.dumps("a"), True),
        encode_input(state, "demo/CounterEvent@1", clear, cbor.dumps("a"), True),
        encode_input(None, "demo/Nope@1", event, cbor.dumps("a"), True),
        b"\xff not an envelope",
        b"",
    ]


INPUTS = [
    encode_input(None, "t/E@1", cbor.dumps(None), None, True),
    b"!" * 300,
    *_counter_inputs(),
]


def _outcome(host: ReducerHost, data: bytes, input_cbor: bytes) -> object:
    try:
        return host.load(data).call(input_cbor)
    except WorldError as exc:
        fields = {k: v for k, v in vars(exc).items() if k != "detail"}
        return type(exc).__name__, fields


def _c_reducers() -> list[Path]:
    return sorted(REDUCERS.glob("*/*.wasm"))


@pytest.mark.parametrize("case", sorted(WAT_CASES))
def test_fast_and_public_paths_agree_on_wat_modules(case: str) -> None:
    fast, public = ReducerHost(LIMITS, backend="fast"), ReducerHost(LIMITS, backend="public")
    for input_cbor in INPUTS:
        assert _outcome(fast, WAT_CASES[case], input_cbor) == _outcome(
            public, WAT_CASES[case], input_cbor
        )


@pytest.mark.skipif(not _c_reducers(), reason="no reducers built under reducers/")
@pytest.mark.parametrize("path", _c_reducers(), ids=lambda p: p.stem)
def test_fast_and_public_paths_agree_on_the_example_c_reducers(path: Path) -> None:
    fast, public = ReducerHost(LIMITS, backend="fast"), ReducerHost(LIMITS, backend="public")
    data = path.read_bytes()
    for input_cbor in INPUTS:
        assert _outcome(fast, data, input_cbor) == _outcome(public, data, input_cbor)


def test_the_agreement_covers_both_successes_and_every_failure_kind() -> None:
    host = ReducerHost(LIMITS, backend="fast")
    outcomes = [_outcome(host, data, INPUTS[0]) for data in WAT_CASES.values()]
    kinds = {"output" if isinstance(o, bytes) else o[0] for o in outcomes}  # type: ignore[index]
    wanted = {
        "output",
        "ReducerTrap",
        "FuelExhausted",
        "MemoryLimitExceeded",
        "OutputTooLarge",
        "ReducerError",
    }
    assert wanted <= kinds
