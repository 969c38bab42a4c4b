"""No carry-over (SPEC §5): a reducer carries nothing from one step to the next except through
``state``. Hostile modules keep a counter in linear memory, in a non-exported mutable global,
in a table, and in a dropped data segment; the outputs of a long-lived host must equal those of
a brand-new host per step. A control run in one plain wasmtime instance shows each module does
carry state when given the chance, so the property is not passing vacuously."""

from __future__ import annotations

from pathlib import Path

import pytest
import wasmtime

from air import cbor
from kernel.abi import encode_input
from kernel.wasm import ReducerHost

from host_wat import CARRY_OVER_MODULES, wasm

STEPS = 4
INPUT = cbor.dumps(
    {
        "version": 1,
        "state": None,
        "event": {"schema": "t/E@1", "value": b"\xf6"},
        "ctx": {"cell_mode": True},
    }
)


def _one_instance_outputs(wasm_bytes: bytes) -> list[object]:
    """What a host that reused one instance would see: the control run."""
    engine = wasmtime.Engine()
    store = wasmtime.Store(engine)
    exports = wasmtime.Instance(store, wasmtime.Module(engine, wasm_bytes), []).exports(store)
    seen: list[object] = []
    for _ in range(STEPS):
        try:
            ptr, size = exports["step"](store, 0, 0)
        except wasmtime.Trap:
            seen.append("trap")
            continue
        seen.append(bytes(exports["memory"].read(store, ptr, ptr + size)))
    return seen


@pytest.mark.parametrize("where", sorted(CARRY_OVER_MODULES))
def test_the_hostile_module_does_carry_state_inside_one_instance(where: str) -> None:
    seen = _one_instance_outputs(wasm(CARRY_OVER_MODULES[where]))
    assert len(set(map(repr, seen))) > 1


@pytest.mark.parametrize("backend", ["fast", "public"])
@pytest.mark.parametrize("where", sorted(CARRY_OVER_MODULES))
def test_a_long_lived_host_gives_the_outputs_of_a_fresh_host_per_step(
    backend: str, where: str
) -> None:
    data = wasm(CARRY_OVER_MODULES[where])
    long_lived = ReducerHost(backend=backend).load(data)  # type: ignore[arg-type]
    together = [long_lived.call(INPUT) for _ in range(STEPS)]
    one_by_one = [ReducerHost(backend=backend).load(data).call(INPUT) for _ in range(STEPS)]  # type: ignore[arg-type]
    assert together == one_by_one
    assert len(set(together)) == 1
    assert cbor.loads(cbor.loads(together[0])["state"]) == 1


@pytest.mark.parametrize("where", sorted(CARRY_OVER_MODULES))
def test_interleaving_modules_on_one_host_carries_nothing_between_them(where: str) -> None:
    host = ReducerHost(backend="fast")
    others = [host.load(wasm(wat)) for name, wat in CARRY_OVER_MODULES.items() if name != where]
    target = host.load(wasm(CARRY_OVER_MODULES[where]))
    outputs = []
    for _ in range(STEPS):
        for other in others:
            other.call(INPUT)
        outputs.append(target.call(INPUT))
    assert len(set(outputs)) == 1


_STATIC_COUNTER = (
    Path(__file__).resolve().parents[3] / "reducers" / "static_counter" / "static_counter.wasm"
)


@pytest.mark.skipif(not _STATIC_COUNTER.exists(), reason="reducers/static_counter is not built")
@pytest.mark.parametrize("backend", ["fast", "public"])
def test_a_c_static_counter_sees_a_fresh_instance_while_state_threads_through(backend: str) -> None:
    loaded = ReducerHost(backend=backend).load(_STATIC_COUNTER.read_bytes())  # type: ignore[arg-type]
    state = None
    for steps in range(1, STEPS + 1):
        envelope = encode_input(state, "t/Any@1", cbor.dumps(None), None, False)
        state = loaded.step(envelope).state_cbor
        assert state is not None
        assert cbor.loads(state) == {"steps": steps, "static_steps": 1}
