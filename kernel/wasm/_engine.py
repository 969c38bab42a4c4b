"""The deterministic wasmtime engine: every engine setting the kernel makes is written here.

Invariants:
- ``ENGINE_FLAGS`` is the whole public-API configuration (SPEC §5 determinism: no wasm
  threads or shared memory, NaN canonicalisation on, relaxed SIMD off (and deterministic should
  it ever be switched on), fuel metering on, no epoch interruption) plus a feature set kept to
  what C/Zig reducers use. Proposals that add state or nondeterminism surface (GC, exceptions,
  stack switching, memory64, multi-memory) are off.
- ``POOLING`` adds wasmtime's pooling instance allocator on the fast backend, which makes the
  fresh instance per step cheap. Its limits are at least the largest ``HostLimits`` allows, so
  a module runs the same on both backends; the store limiter (see ``host``) is the real bound.
- Address space: ``memory_reservation`` is 256 MiB (not wasmtime's 4 GiB), on both backends so
  their code is the same; Cranelift then emits explicit bounds checks, which cost little here
  (see BENCHMARKS.md). The pool reserves 8 x (256 + 32) MiB, ~2.3 GiB of PROT_NONE address
  space, when the fast engine is created. Under an address-space rlimit (``ulimit -v``) below
  ~3 GiB that reservation fails and wasmtime aborts the process (a Rust panic in
  ``wasm_engine_new_with_config``; it cannot be caught): run such hosts with
  ``backend="public"``.
- The engine fingerprint names all of the above plus what wasmtime itself checks before it
  accepts a serialized module (version, target, every Cranelift flag, CPU features): the bytes
  of an empty module serialized by this engine. So a cache entry is found only by an engine
  that would accept it, and a different wasmtime or config recompiles.
- Engines are memoised per backend for the process (``kernel.wasm._host.engine_for``, which
  builds them from these settings and, for the fast backend, ``_fastcall``'s pooling setup):
  their configuration is constant, and modules compiled by one engine only run on that engine.

Residual nondeterminism, recorded here so nobody assumes otherwise: the native stack depth at
which deep recursion traps (``stack_overflow``) depends on Cranelift's frame sizes, so it can
differ across wasmtime versions or CPU feature sets. ``max_wasm_stack`` is pinned to make it
stable on one machine and build. Fuel, by contrast, is counted per wasm operator and is exact.

Not here: reading the installed wasmtime version. The kernel may not read package metadata
(``importlib``, files), so the fast path is pinned by the shape of wasmtime's ctypes bindings
instead (see ``_fastcall``) and the cache key by wasmtime's own serialized engine header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Protocol

import blake3
import wasmtime

__all__ = [
    "ENGINE_FLAGS",
    "POOLING",
    "POOL_MEMORY_BYTES_MAX",
    "POOL_TABLE_ELEMENTS_MAX",
    "Backend",
    "EngineHandle",
    "Session",
    "WasmCallError",
    "fingerprint",
    "public_config",
    "settings_text",
    "trap_name",
]

Backend = Literal["fast", "public"]

ENGINE_FLAGS: Final[tuple[tuple[str, bool | int | str], ...]] = (
    ("strategy", "cranelift"),
    ("cranelift_opt_level", "speed"),
    ("cranelift_nan_canonicalization", True),
    ("consume_fuel", True),
    ("epoch_interruption", False),
    ("max_wasm_stack", 512 * 1024),
    ("debug_info", False),
    ("wasm_threads", False),
    ("shared_memory", False),
    ("wasm_simd", True),
    ("wasm_relaxed_simd", False),
    ("wasm_relaxed_simd_deterministic", True),
    ("wasm_multi_value", True),
    ("wasm_bulk_memory", True),
    ("wasm_reference_types", True),
    ("wasm_tail_call", True),
    ("wasm_memory64", False),
    ("wasm_multi_memory", False),
    ("wasm_gc", False),
    ("gc_support", False),
    ("wasm_function_references", False),
    ("wasm_exceptions", False),
    ("wasm_stack_switching", False),
    ("wasm_wide_arithmetic", False),
    ("wasm_custom_page_sizes", False),
    ("memory_init_cow", True),
    ("memory_reservation", 256 * 1024 * 1024),
    ("memory_guard_size", 32 * 1024 * 1024),
)

POOL_MEMORY_BYTES_MAX: Final = 256 * 1024 * 1024
POOL_TABLE_ELEMENTS_MAX: Final = 1 << 20

# Name -> value for ``wasmtime_pooling_allocation_config_<name>_set``. Live instances are at
# most one per store and a store lives for one step, so a handful of slots is plenty.
# ``linear_memory_keep_resident``: a reused slot's first 256 KiB are reset with memset instead
# of madvise, so a reducer whose memory fits (the SDK links a 64 KiB stack: 2 pages) takes no
# page faults per step. Measured with reducers/counter: 19.6 us per call at 64 KiB, 13.1 at
# 128 KiB, 13.3 at 256 KiB (which leaves room to grow by two pages).
POOLING: Final[tuple[tuple[str, int], ...]] = (
    ("total_core_instances", 8),
    ("total_memories", 8),
    ("total_tables", 8),
    ("total_stacks", 1),  # async stacks: unused (no async calls), default 1000 x 2 MiB reserved
    ("total_component_instances", 1),  # no components
    ("max_memories_per_module", 1),
    ("max_tables_per_module", 1),
    ("max_memory_size", POOL_MEMORY_BYTES_MAX),
    ("table_elements", POOL_TABLE_ELEMENTS_MAX),
    ("max_unused_warm_slots", 8),
    ("linear_memory_keep_resident", 256 * 1024),
    ("table_keep_resident", 64 * 1024),
)

_EMPTY_MODULE: Final = b"\x00asm\x01\x00\x00\x00"


class WasmCallError(Exception):
    """Internal: wasmtime refused or trapped. ``trap_code`` is wasmtime's numeric trap code,
    ``None`` for a plain error (e.g. instantiation refused). The host turns this into a
    ``ReducerError``; it never escapes ``kernel``."""

    def __init__(self, trap_code: int | None, detail: str) -> None:
        self.trap_code = trap_code
        self.detail = detail
        super().__init__(detail)


class Session(Protocol):
    """One reducer's step machinery; ``open(fuel)`` .. ``close()`` brackets one step on a fresh
    store and instance. Addresses and sizes are u32. ``write(addr, data, span)`` writes ``data``
    at ``addr`` if ``[addr, addr + span)`` is inside memory; ``write``/``read`` check bounds and
    say so (``False``/``None``); everything wasmtime refuses raises ``WasmCallError``."""

    def open(self, fuel: int) -> None: ...
    def close(self) -> None: ...
    def alloc(self, size: int) -> int: ...
    def step(self, ptr: int, size: int) -> tuple[int, int]: ...
    def step_retptr(self, retptr: int, ptr: int, size: int) -> None: ...
    def memory_size(self) -> int: ...
    def write(self, addr: int, data: bytes, span: int) -> bool: ...
    def read(self, addr: int, size: int) -> bytes | None: ...


@dataclass(frozen=True)
class EngineHandle:
    engine: wasmtime.Engine
    backend: Backend
    fingerprint: str


def trap_name(code: int) -> str:
    """A stable lower-case name for a wasmtime trap code (``unreachable``, ``out_of_fuel``)."""
    try:
        return wasmtime.TrapCode(code).name.lower()
    except ValueError:
        return f"trap_{code}"


def public_config() -> wasmtime.Config:
    """A ``wasmtime.Config`` with ``ENGINE_FLAGS`` set (the fast backend adds ``POOLING``)."""
    config = wasmtime.Config()
    for name, value in ENGINE_FLAGS:
        setattr(config, name, value)
    return config


def fingerprint(engine: wasmtime.Engine, settings: str) -> str:
    """The engine fingerprint: ``settings`` (``settings_text``) and the serialized header."""
    header = bytes(wasmtime.Module(engine, _EMPTY_MODULE).serialize())
    return blake3.blake3(settings.encode() + b"\n" + header).hexdigest()


def settings_text(backend: Backend, bindings_digest: str) -> str:
    """Every setting of an engine of ``backend``, as text (the fast one names its bindings)."""
    parts = [f"{name}={value!r}" for name, value in ENGINE_FLAGS]
    if backend == "fast":
        parts += [f"pool.{name}={value}" for name, value in POOLING]
        parts.append(f"bindings={bindings_digest}")
    return ";".join(parts)
