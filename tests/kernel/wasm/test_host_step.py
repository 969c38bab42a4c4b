"""One reducer step on both backends: both step flavours, every limit hit, every failure kind,
and the host still usable (and the caller's bytes untouched) after each failure."""

from __future__ import annotations

import pytest

from air import cbor
from air.errors import UsageError
from kernel.abi import StepOutput
from kernel.errors import (
    FuelExhausted,
    MemoryLimitExceeded,
    OutputTooLarge,
    ReducerError,
    ReducerLoadError,
    ReducerTrap,
    StepRejected,
)
from kernel.wasm import HostLimits, ReducerHost

from host_wat import (
    HEAP_AT,
    INFINITE_LOOP,
    MEMORY_BOMB,
    MEMORY_GROW_AND_COPE,
    OK_OUTPUT,
    STACK_OVERFLOW,
    STACK_OVERFLOW_EXTRA,
    UNREACHABLE,
    reducer,
)

LIMITS = HostLimits(fuel_per_step=200_000, memory_bytes_max=1 << 20, output_bytes_max=4096)
INPUT = cbor.dumps(
    {
        "version": 1,
        "state": None,
        "event": {"schema": "t/E@1", "value": b"\xf6"},
        "ctx": {"cell_mode": True},
    }
)


@pytest.fixture(params=["fast", "public"])
def host(request: pytest.FixtureRequest) -> ReducerHost:
    return ReducerHost(LIMITS, backend=request.param)


@pytest.mark.parametrize("step_abi", ["multi_value", "retptr"])
def test_both_step_signatures_return_the_modules_output(host: ReducerHost, step_abi: str) -> None:
    loaded = host.load(reducer(step_abi=step_abi))
    assert loaded.step_abi == step_abi
    assert loaded.call(INPUT) == OK_OUTPUT
    assert loaded.step(INPUT) == StepOutput(state_cbor=cbor.dumps({"count": 1, "events": 1}))


def test_the_step_sees_the_input_bytes_written_by_the_host(host: ReducerHost) -> None:
    # step returns (ptr, len) of its own input: the output is the input, byte for byte.
    echo = reducer(body="(return (local.get $ptr) (local.get $len))")
    assert host.load(echo).call(b"\xa1\x65state\xf6") == b"\xa1\x65state\xf6"


def test_an_infinite_loop_runs_out_of_fuel(host: ReducerHost) -> None:
    loaded = host.load(reducer(body=INFINITE_LOOP))
    with pytest.raises(FuelExhausted) as caught:
        loaded.call(INPUT)
    assert (caught.value.code, caught.value.trap_code) == ("fuel_exhausted", "out_of_fuel")
    assert caught.value.fuel_per_step == LIMITS.fuel_per_step
    assert caught.value.module == loaded.module_hash


def test_growing_memory_past_the_limit_and_trapping_is_a_memory_limit_error(
    host: ReducerHost,
) -> None:
    loaded = host.load(reducer(body=MEMORY_BOMB))
    with pytest.raises(MemoryLimitExceeded) as caught:
        loaded.call(INPUT)
    assert (caught.value.code, caught.value.trap_code) == ("memory_limit", "unreachable")
    assert caught.value.memory_bytes_max == LIMITS.memory_bytes_max


def test_memory_growth_refused_at_the_limit_is_not_an_error_by_itself(host: ReducerHost) -> None:
    assert host.load(reducer(body=MEMORY_GROW_AND_COPE)).call(INPUT) == OK_OUTPUT


def test_unreachable_is_a_trap_with_its_code(host: ReducerHost) -> None:
    loaded = host.load(reducer(body=UNREACHABLE))
    with pytest.raises(ReducerTrap) as caught:
        loaded.call(INPUT)
    assert type(caught.value) is ReducerTrap
    assert (caught.value.code, caught.value.trap_code) == ("trap", "unreachable")


def test_unbounded_recursion_is_a_stack_overflow_trap(host: ReducerHost) -> None:
    big_fuel = ReducerHost(HostLimits(fuel_per_step=10**9), backend=host.backend)
    loaded = big_fuel.load(reducer(body=STACK_OVERFLOW, extra=STACK_OVERFLOW_EXTRA))
    with pytest.raises(ReducerTrap) as caught:
        loaded.call(INPUT)
    assert caught.value.trap_code == "stack_overflow"


def test_output_that_is_not_cbor_is_rejected_with_a_pointer(host: ReducerHost) -> None:
    loaded = host.load(reducer(b"\xff\x00garbage"))
    assert loaded.call(INPUT) == b"\xff\x00garbage"
    with pytest.raises(StepRejected) as caught:
        loaded.step(INPUT)
    assert (caught.value.code, caught.value.pointer) == ("output_not_cbor", "/")
    assert caught.value.module == loaded.module_hash


def test_output_over_the_size_limit_is_refused_before_it_is_read(host: ReducerHost) -> None:
    loaded = host.load(reducer(out_len=LIMITS.output_bytes_max + 1))
    with pytest.raises(OutputTooLarge) as caught:
        loaded.call(INPUT)
    assert (caught.value.code, caught.value.output_bytes) == (
        "output_too_large",
        LIMITS.output_bytes_max + 1,
    )
    assert caught.value.output_bytes_max == LIMITS.output_bytes_max


def test_output_exactly_at_the_size_limit_is_accepted(host: ReducerHost) -> None:
    # One page of memory holds it; the bytes past the data segment are zeros.
    assert (
        len(host.load(reducer(out_len=LIMITS.output_bytes_max)).call(INPUT))
        == LIMITS.output_bytes_max
    )


def test_output_pointing_outside_memory_is_an_error(host: ReducerHost) -> None:
    loaded = host.load(reducer(body="(return (i32.const 65530) (i32.const 100))"))
    with pytest.raises(ReducerError) as caught:
        loaded.call(INPUT)
    assert caught.value.code == "output_out_of_bounds"


def test_alloc_returning_an_address_outside_memory_is_an_error(host: ReducerHost) -> None:
    bad_alloc = '(func (export "alloc") (param i32) (result i32) (i32.const 70000))'
    with pytest.raises(ReducerError) as caught:
        host.load(reducer(alloc=bad_alloc)).call(INPUT)
    assert caught.value.code == "alloc_out_of_bounds"


def test_an_empty_input_is_passed_as_a_zero_length_buffer(host: ReducerHost) -> None:
    echo = reducer(body="(return (local.get $ptr) (local.get $len))")
    assert host.load(echo).call(b"") == b""


@pytest.mark.parametrize(
    "body", [INFINITE_LOOP, UNREACHABLE, MEMORY_BOMB], ids=["fuel", "trap", "memory"]
)
def test_a_failed_step_leaves_the_reducer_usable_and_the_input_untouched(
    host: ReducerHost, body: str
) -> None:
    flaky = reducer(
        body=f"(if (i32.eq (i32.load8_u (local.get $ptr)) (i32.const 0x21)) (then {body}))"
    )
    loaded = host.load(flaky)
    poison = bytearray(b"!boom")
    with pytest.raises(ReducerError):
        loaded.call(bytes(poison))
    assert poison == bytearray(b"!boom")
    assert loaded.call(INPUT) == OK_OUTPUT


def test_the_retptr_slot_sits_after_the_input_inside_the_allocation(host: ReducerHost) -> None:
    # step writes the pair at retptr and returns its own view of (retptr - ptr) as the output
    # length, so the output is the input plus its alignment padding.
    probe = reducer(
        step_abi="retptr",
        body="""
    (i32.store (local.get $ret) (local.get $ptr))
    (i32.store offset=4 (local.get $ret) (i32.sub (local.get $ret) (local.get $ptr)))
    (return)""",
    )
    assert host.load(probe).call(b"abcde") == b"abcde\x00\x00\x00"
    assert HEAP_AT % 4 == 0


def test_a_non_bytes_input_is_a_usage_error(host: ReducerHost) -> None:
    with pytest.raises(UsageError):
        host.load(reducer()).call(bytearray(b"x"))  # type: ignore[arg-type]


def test_table_growth_past_the_limit_is_refused(host: ReducerHost) -> None:
    # table.grow returns -1 past table_elements_max; this module traps when refused.
    limits = HostLimits(table_elements_max=10)
    grow = "(table.grow $t (ref.null func) (i32.const 20))"
    grow = f"(if (i32.eq {grow} (i32.const -1)) (then unreachable))"
    loaded = ReducerHost(limits, backend=host.backend).load(
        reducer(body=grow, extra="(table $t 1 funcref)")
    )
    with pytest.raises(ReducerTrap) as caught:
        loaded.call(INPUT)
    assert (caught.value.code, caught.value.trap_code) == ("trap", "unreachable")


def test_a_table_larger_than_the_limit_is_refused_at_load(host: ReducerHost) -> None:
    limits = HostLimits(table_elements_max=10)
    with pytest.raises(ReducerLoadError) as caught:
        ReducerHost(limits, backend=host.backend).load(reducer(extra="(table 11 funcref)"))
    assert caught.value.code == "table_limit"
