"""Benchmark the WASM reducer host: naive public-API path, fast ctypes path and native path.

Run by hand (never from tests):  python tools/bench/bench_host.py [--n 20000]

All three run in the same process and the same run. For each module and path it prints the
median and p99, in microseconds, of
- ``call``: one step, input envelope bytes in, raw output bytes out (fresh store + instance,
  alloc, write, step, read: everything the host does on the wasm side), and
- ``full``: ``abi.encode_input`` + ``call`` + ``abi.decode_output`` (strict) +
  ``abi.validate_output`` against the real schema through ``air.values.SchemaCheckers`` (the
  compiled checkers the kernel uses): what the kernel pays per step for a counter-like reducer.
Modules: a counter-like WAT floor (parses nothing, returns a fixed valid output) and, when
built, ``reducers/counter/counter.wasm`` (the C counter from the SDK). It also times loading
a module by compiling it vs deserializing it from the module cache.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import wasmtime  # noqa: E402

from air import SchemaCheckers, cbor  # noqa: E402
from air.types import parse_type  # noqa: E402
from kernel import abi, native  # noqa: E402
from kernel.wasm import (  # noqa: E402
    InMemoryModuleCache,
    Reducer,
    ReducerHost,
)

SCHEMAS = {"demo/CounterState@1": parse_type({"record": {"count": "nat", "events": "nat"}})}
STATE = cbor.dumps({"count": 41, "events": 7})
EVENT = cbor.dumps({"key": "order-1", "op": {"$tag": "Add", "$value": 1}})
KEY = cbor.dumps("order-1")
FLOOR_OUTPUT = cbor.dumps({"state": cbor.dumps({"count": 42, "events": 8})})


def floor_wat() -> bytes:
    data = "".join(f"\\{b:02x}" for b in FLOOR_OUTPUT)
    return bytes(
        wasmtime.wat2wasm(f"""(module
  (memory (export "memory") 1)
  (global $bump (mut i32) (i32.const 1024))
  (data (i32.const 16) "{data}")
  (func (export "alloc") (param $len i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $bump))
    (global.set $bump (i32.add (global.get $bump) (local.get $len)))
    (local.get $p))
  (func (export "step") (param i32 i32) (result i32 i32)
    (i32.const 16) (i32.const {len(FLOOR_OUTPUT)})))""")
    )


CHECKERS = SchemaCheckers(SCHEMAS)


def _check(name: str, obj: Any) -> None:
    CHECKERS.check(name, obj)  # the compiled checkers the kernel uses


def full_step(reducer: Reducer) -> abi.StepOutput:
    envelope = abi.encode_input(STATE, "demo/CounterEvent@1", EVENT, KEY, True)
    out = reducer.step(envelope)
    abi.validate_output(out, check=_check, state_schema="demo/CounterState@1", effects_emitted=())
    return out


def measure(fn: Callable[[], object], n: int) -> tuple[float, float]:
    for _ in range(min(1000, n)):
        fn()
    clock = time.perf_counter_ns
    samples = []
    for _ in range(n):
        start = clock()
        fn()
        samples.append(clock() - start)
    samples.sort()
    return statistics.median(samples) / 1000, samples[int(len(samples) * 0.99)] / 1000


PATHS = (
    ("public", False, "naive public"),
    ("fast", False, "fast ctypes"),
    ("fast", True, "native"),
)


def bench_steps(modules: dict[str, bytes], n: int) -> None:
    envelope = abi.encode_input(STATE, "demo/CounterEvent@1", EVENT, KEY, True)
    print(f"{'module':<10} {'path':<14} {'what':<6} {'median us':>10} {'p99 us':>10}")
    for name, wasm in modules.items():
        for backend, with_native, label in PATHS:
            if with_native and not native.available():
                continue
            native.set_enabled(with_native)  # encode/decode helpers follow the path measured
            reducer = ReducerHost(backend=backend, native=with_native).load(wasm)  # type: ignore[arg-type]
            runs = n if backend == "fast" else max(n // 10, 500)
            for what, fn in (
                ("call", lambda r=reducer: r.call(envelope)),
                ("full", lambda r=reducer: full_step(r)),
            ):
                median, p99 = measure(fn, runs)
                print(f"{name:<10} {label:<14} {what:<6} {median:>10.1f} {p99:>10.1f}")
    native.set_enabled(native.available())


def bench_load(wasm: bytes, name: str) -> None:
    cache = InMemoryModuleCache()
    start = time.perf_counter_ns()
    ReducerHost(cache=cache, backend="fast").load(wasm)
    compiled = (time.perf_counter_ns() - start) / 1e6
    start = time.perf_counter_ns()
    ReducerHost(cache=cache, backend="fast").load(wasm)
    restored = (time.perf_counter_ns() - start) / 1e6
    print(
        f"load {name} ({len(wasm)} bytes): compile {compiled:.2f} ms, from cache {restored:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="fast-path iterations (naive: n/10)")
    args = parser.parse_args()
    modules = {"floor-wat": floor_wat()}
    counter = ROOT / "reducers" / "counter" / "counter.wasm"
    if counter.exists():
        modules["counter-c"] = counter.read_bytes()
    reducer = ReducerHost(backend="fast").load(modules[next(reversed(modules))])
    assert cbor.loads(full_step(reducer).state_cbor or b"") == {"count": 42, "events": 8}
    bench_steps(modules, args.n)
    for name, wasm in modules.items():
        bench_load(wasm, name)


if __name__ == "__main__":
    main()
