"""A tiny, test-only harness that runs one reducer step with plain wasmtime.

This is not the kernel's host (``kernel/wasm/_host.py`` is): it exists so the SDK and the example
reducers can be tested on their own. Per step it instantiates the module afresh (so nothing can
carry over between steps), calls ``alloc(len)``, writes the input envelope, calls ``step`` in
either ABI form -- multi-value ``step(ptr, len) -> (i32, i32)`` or ``step(retptr, ptr, len)`` with
the pair written little-endian at ``retptr`` -- and reads the output back. The output is decoded
with ``air.cbor.loads``, which rejects any non-canonical byte, exactly as the kernel does.

Limits: a fuel cap stops a runaway module; there is no memory cap and no schema validation.
A trap surfaces as ``wasmtime.Trap`` (or ``wasmtime.WasmtimeError``).
"""

from __future__ import annotations

import functools
import importlib.util
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import wasmtime

from air import cbor

REPO_ROOT = Path(__file__).resolve().parent.parent
REDUCERS_DIR = REPO_ROOT / "reducers"
FUEL_PER_STEP = 50_000_000


def _engine() -> wasmtime.Engine:
    config = wasmtime.Config()
    config.consume_fuel = True
    config.cranelift_nan_canonicalization = True
    return wasmtime.Engine(config)


ENGINE = _engine()


@functools.cache
def load_module(wasm: Path | str) -> wasmtime.Module:
    """Compile a module once: ``wasm`` is a path, or an example name such as ``"counter"``."""
    path = Path(wasm)
    if not path.suffix:
        path = REDUCERS_DIR / str(wasm) / f"{wasm}.wasm"
    return wasmtime.Module(ENGINE, path.read_bytes())


def load_build_tool() -> Any:
    """Import ``tools/build_reducers.py`` (a script, not a package) as a module."""
    name = "build_reducers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tools" / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def module_from_wat(wat: str) -> wasmtime.Module:
    return wasmtime.Module(ENGINE, bytes(wasmtime.wat2wasm(wat)))


def _instantiate(module: wasmtime.Module) -> tuple[wasmtime.Store, wasmtime.Instance]:
    store = wasmtime.Store(ENGINE)
    store.set_fuel(FUEL_PER_STEP)
    return store, wasmtime.Instance(store, module, [])


def _call_step(store: wasmtime.Store, instance: wasmtime.Instance, input_bytes: bytes) -> bytes:
    exports = instance.exports(store)
    memory, alloc, step = exports["memory"], exports["alloc"], exports["step"]
    assert isinstance(memory, wasmtime.Memory)
    assert isinstance(alloc, wasmtime.Func)
    assert isinstance(step, wasmtime.Func)
    in_ptr = alloc(store, len(input_bytes))
    memory.write(store, input_bytes, in_ptr)
    if len(step.type(store).params) == 3:
        ret_ptr = alloc(store, 8)
        step(store, ret_ptr, in_ptr, len(input_bytes))
        out_ptr, out_len = struct.unpack("<II", memory.read(store, ret_ptr, ret_ptr + 8))
    else:
        out_ptr, out_len = step(store, in_ptr, len(input_bytes))
    return bytes(memory.read(store, out_ptr, out_ptr + out_len))


def step_raw(module: wasmtime.Module, input_bytes: bytes) -> bytes:
    """Run one step on a fresh instance; return the output bytes as the module wrote them."""
    store, instance = _instantiate(module)
    return _call_step(store, instance, input_bytes)


def steps_in_one_instance(module: wasmtime.Module, inputs: list[bytes]) -> list[bytes]:
    """Run several steps in ONE instance -- what a host must never do; for contrast only."""
    store, instance = _instantiate(module)
    return [_call_step(store, instance, input_bytes) for input_bytes in inputs]


def envelope(
    *,
    state: Any = None,
    schema: str,
    value: Any,
    key: Any = None,
    cell_mode: bool = True,
    ctx_extra: dict[str, Any] | None = None,
    state_cbor: bytes | None = None,
) -> bytes:
    """Encode an input envelope. ``key=None`` omits ``ctx.key``; ``state=None`` sends null."""
    ctx: dict[str, Any] = {"cell_mode": cell_mode, **(ctx_extra or {})}
    if key is not None:
        ctx["key"] = cbor.dumps(key)
    if state_cbor is None and state is not None:
        state_cbor = cbor.dumps(state)
    return cbor.dumps(
        {
            "version": 1,
            "state": state_cbor,
            "event": {"schema": schema, "value": cbor.dumps(value)},
            "ctx": ctx,
        }
    )


@dataclass(frozen=True)
class StepResult:
    """A decoded output envelope; nested CBOR payloads are decoded too (strictly)."""

    output: dict[str, Any]
    state: Any = None
    domain_events: list[dict[str, Any]] = field(default_factory=list)
    effects: list[dict[str, Any]] = field(default_factory=list)


def decode_output(output_bytes: bytes) -> StepResult:
    output = cbor.loads(output_bytes)
    state_cbor = output["state"]
    events = [
        {
            **e,
            "value": cbor.loads(e["value"]),
            **({"key": cbor.loads(e["key"])} if "key" in e else {}),
        }
        for e in output.get("domain_events", [])
    ]
    effects = [{**e, "params": cbor.loads(e["params"])} for e in output.get("effects", [])]
    state = None if state_cbor is None else cbor.loads(state_cbor)
    return StepResult(output=output, state=state, domain_events=events, effects=effects)


def run_step(module: wasmtime.Module, **envelope_fields: Any) -> StepResult:
    """Build an envelope from keyword fields (see ``envelope``), step, decode the output."""
    return decode_output(step_raw(module, envelope(**envelope_fields)))
