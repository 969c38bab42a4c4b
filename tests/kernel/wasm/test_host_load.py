"""Loading reducer modules: what is refused at load time (and with which code), content
addressing, the compiled-module cache, limits validation and backend selection."""

from __future__ import annotations

import pytest

from air.cbor import content_hash
from air.errors import HashMismatch, UsageError
from kernel.errors import ReducerLoadError
from kernel.wasm import HostLimits, InMemoryModuleCache, ReducerHost, cache_key
from kernel.wasm._engine import POOL_MEMORY_BYTES_MAX

from host_wat import OK_OUTPUT, reducer, reducer_wat, wasm

_NO_STEP = """(module (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 0)))"""
_NO_ALLOC = """(module (memory (export "memory") 1)
  (func (export "step") (param i32 i32) (result i32 i32) (i32.const 0) (i32.const 0)))"""
_NO_MEMORY = """(module (memory 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 0))
  (func (export "step") (param i32 i32) (result i32 i32) (i32.const 0) (i32.const 0)))"""
_IMPORTS = reducer_wat().replace("(module", '(module (import "env" "clock" (func (result i64)))', 1)
_BAD_STEP = """(module (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 0))
  (func (export "step") (param i32) (result i32) (i32.const 0)))"""
_START_TRAPS = reducer_wat(extra="(func $boom unreachable) (start $boom)")


@pytest.fixture(params=["fast", "public"])
def host(request: pytest.FixtureRequest) -> ReducerHost:
    return ReducerHost(backend=request.param)


@pytest.mark.parametrize(
    ("wat", "code"),
    [
        pytest.param(_IMPORTS, "imports", id="an-import"),
        pytest.param(_NO_MEMORY, "export_missing", id="no-memory-export"),
        pytest.param(_NO_ALLOC, "export_missing", id="no-alloc"),
        pytest.param(_NO_STEP, "export_missing", id="no-step"),
        pytest.param(_BAD_STEP, "step_signature", id="step-signature"),
    ],
)
def test_a_module_off_the_abi_is_refused_at_load_with_a_code(
    host: ReducerHost, wat: str, code: str
) -> None:
    data = wasm(wat)
    with pytest.raises(ReducerLoadError) as caught:
        host.load(data)
    assert (caught.value.code, caught.value.module) == (code, content_hash(data))


def test_bytes_that_are_not_wasm_are_refused(host: ReducerHost) -> None:
    with pytest.raises(ReducerLoadError) as caught:
        host.load(b"#!/bin/sh\necho hi\n")
    assert caught.value.code == "not_wasm"


def test_a_module_whose_code_does_not_validate_is_refused(host: ReducerHost) -> None:
    # Section structure is fine; the body of step returns an i64 where an i32 is declared.
    broken = bytearray(reducer())
    body = broken.rfind(b"\x41\x10")  # i32.const 16 in step
    broken[body] = 0x42  # i64.const 16
    with pytest.raises(ReducerLoadError) as caught:
        host.load(bytes(broken))
    assert caught.value.code == "invalid_wasm"


@pytest.mark.parametrize(
    ("start", "code", "detail"),
    [
        pytest.param("unreachable", "trap", "the start function trapped: unreachable", id="traps"),
        pytest.param(
            "(drop (i32.div_u (i32.const 1) (i32.const 0)))",
            "trap",
            "the start function trapped: integer_division_by_zero",
            id="divides-by-zero",
        ),
        pytest.param(
            "(loop $l (br $l))",
            "fuel_exhausted",
            "the start function used all 1000 fuel",
            id="loops",
        ),
    ],
)
def test_a_start_function_that_fails_is_refused_at_load_with_its_cause(
    host: ReducerHost, start: str, code: str, detail: str
) -> None:
    small = ReducerHost(HostLimits(fuel_per_step=1000), backend=host.backend, native=host.native)
    with pytest.raises(ReducerLoadError) as caught:
        small.load(reducer(extra=f"(func $s {start}) (start $s)"))
    assert (caught.value.code, caught.value.detail) == (code, detail)


@pytest.mark.parametrize(
    "tables",
    [
        pytest.param("(table 11 funcref)", id="one-over-the-limit"),
        pytest.param("(table 1 funcref) (table 1 funcref)", id="two-tables"),
    ],
)
def test_tables_past_the_limits_are_refused_at_load_on_both_backends(
    host: ReducerHost, tables: str
) -> None:
    limits = HostLimits(table_elements_max=10)
    with pytest.raises(ReducerLoadError) as caught:
        ReducerHost(limits, backend=host.backend).load(reducer(extra=tables))
    assert caught.value.code == "table_limit"


def test_a_memory_maximum_over_the_limit_is_not_refused(host: ReducerHost) -> None:
    # Growth is bounded by the store limiter whatever the module declares.
    small = ReducerHost(HostLimits(memory_bytes_max=1 << 20), backend=host.backend)
    loaded = small.load(reducer(memory='(memory (export "memory") 1 65536)'))
    assert loaded.call(b"") == OK_OUTPUT


def test_initial_memory_over_the_limit_is_refused_at_load(host: ReducerHost) -> None:
    small = ReducerHost(HostLimits(memory_bytes_max=1 << 20), backend=host.backend)
    with pytest.raises(ReducerLoadError) as caught:
        small.load(reducer(memory='(memory (export "memory") 17)'))
    assert caught.value.code == "memory_limit"


def test_a_module_is_addressed_by_its_content_hash(host: ReducerHost) -> None:
    data = reducer()
    loaded = host.load(data, expected_hash=content_hash(data))
    assert loaded.module_hash == content_hash(data)
    assert host.get(content_hash(data)) is loaded
    assert host.load(data) is loaded


def test_a_module_that_does_not_match_its_expected_hash_is_refused(host: ReducerHost) -> None:
    other = content_hash(b"something else")
    with pytest.raises(HashMismatch) as caught:
        host.load(reducer(), expected_hash=other)
    assert (caught.value.expected, caught.value.actual) == (other, content_hash(reducer()))
    assert host.get(content_hash(reducer())) is None


def test_a_second_load_deserializes_from_the_cache_instead_of_compiling(host: ReducerHost) -> None:
    cache = InMemoryModuleCache()
    data = reducer(body="nop")
    first = ReducerHost(cache=cache, backend=host.backend).load(data)
    assert (cache.gets, cache.hits, cache.puts) == (1, 0, 1)
    second = ReducerHost(cache=cache, backend=host.backend).load(data)
    assert (cache.gets, cache.hits, cache.puts) == (2, 1, 1)
    assert first.call(b"") == second.call(b"") == OK_OUTPUT


def test_a_corrupt_cache_entry_is_recompiled_and_replaced(host: ReducerHost) -> None:
    cache = InMemoryModuleCache()
    data = reducer(body="nop nop")
    key = cache_key(content_hash(data), host.engine_fingerprint)
    cache.put(key, b"\x00" * 64)
    loaded = ReducerHost(cache=cache, backend=host.backend).load(data)
    assert (cache.hits, cache.puts) == (1, 2)
    assert loaded.call(b"") == OK_OUTPUT
    assert cache.get(key) != b"\x00" * 64


def test_the_two_backends_key_the_cache_by_different_engine_fingerprints() -> None:
    fast, public = ReducerHost(backend="fast"), ReducerHost(backend="public")
    assert fast.engine_fingerprint != public.engine_fingerprint
    assert ReducerHost(backend="fast").engine_fingerprint == fast.engine_fingerprint


def test_the_cache_key_is_the_wasm_hash_and_the_engine_fingerprint() -> None:
    data = reducer()
    key = cache_key(content_hash(data), "ab" * 32)
    assert key == f"{content_hash(data).removeprefix('blake3:')}-{'ab' * 16}"


@pytest.mark.parametrize(
    "limits",
    [
        {"fuel_per_step": 0},
        {"memory_bytes_max": -1},
        {"output_bytes_max": True},
        {"table_elements_max": 1.5},
        {"memory_bytes_max": POOL_MEMORY_BYTES_MAX + 1},
    ],
)
def test_host_limits_must_be_positive_ints_within_the_pool(limits: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        HostLimits(**limits)  # type: ignore[arg-type]


def test_auto_picks_the_fast_backend_when_its_pinned_internals_are_present() -> None:
    host = ReducerHost()
    assert (host.backend, host.backend_reason) == ("fast", "pinned wasmtime internals present")


def test_auto_falls_back_to_the_public_api_when_the_fast_path_is_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernel.wasm import _fastcall

    monkeypatch.setattr(_fastcall, "PINNED_BINDINGS_DIGEST", "0" * 64)
    host = ReducerHost()
    assert host.backend == "public"
    assert "50.0.1" in host.backend_reason
    with pytest.raises(UsageError):
        ReducerHost(backend="fast")


def test_an_unknown_backend_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        ReducerHost(backend="turbo")  # type: ignore[arg-type]
