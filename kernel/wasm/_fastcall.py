"""Fast path: one reducer step through wasmtime's C API via ctypes, skipping wasmtime-py's
per-call type introspection and value boxing (~50 us a call) for raw calls (~1 us).

What it does per step, exactly like the public path in ``_publiccall``: a new store (limiter,
fuel), a new instance from a pre-linked ``InstancePre``, three export lookups, the calls, and
the store deleted. With the engine's pooling allocator that is a few microseconds, and it is
what makes "no carry-over" hold by construction (see ``host``).

Not public API, so pinned: it is used only when ``unavailable_reason()`` is ``None``, i.e. every
C symbol and ctypes layout below exists and the binding surface of ``wasmtime._bindings`` hashes
to the digest recorded for wasmtime 50.0.1 (the version this was tested with). Otherwise the
host falls back to the public API. Internals used:
- ``wasmtime._bindings.dll`` (the loaded libwasmtime) to declare our own prototypes, so nothing
  in wasmtime-py's bindings is mutated; the C functions named in ``_PROTOTYPES``;
- wasmtime-py's ``wasmtime_pooling_allocation_*`` wrappers, to configure the pooling allocator;
- the layouts ``wasmtime_extern_t``, ``wasmtime_val_raw_t``, ``wasmtime_instance_t``,
  ``wasm_byte_vec_t`` from ``wasmtime._bindings``;
- ``Managed.ptr()`` of ``Engine`` and ``InstancePre`` to get their C pointers.

Memory access goes through the raw data pointer, fetched after every call (``memory.grow`` may
move it) and bounds-checked against the data size here, not by the caller.
Not thread-safe: a session reuses its ctypes buffers; one step at a time per reducer.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, Final

import blake3
import wasmtime

from kernel.wasm._engine import POOLING, WasmCallError, trap_name

__all__ = [
    "PINNED_BINDINGS_DIGEST",
    "PINNED_WASMTIME",
    "FastSession",
    "bindings",
    "bindings_digest",
    "configure_pooling",
    "unavailable_reason",
]

PINNED_WASMTIME: Final = "50.0.1"
PINNED_BINDINGS_DIGEST: Final = "410cb28d2ba56797119c85a03a4ad77883e698745fe63318bcb22eab66c77bda"

_P = ctypes.c_void_p
_PROTOTYPES: Final[dict[str, tuple[Any, tuple[Any, ...]]]] = {
    "wasmtime_store_new": (_P, (_P, _P, _P)),
    "wasmtime_store_context": (_P, (_P,)),
    "wasmtime_store_limiter": (
        None,
        (_P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64),
    ),
    "wasmtime_store_delete": (None, (_P,)),
    "wasmtime_context_set_fuel": (_P, (_P, ctypes.c_uint64)),
    "wasmtime_instance_pre_instantiate": (_P, (_P, _P, _P, _P)),
    "wasmtime_instance_export_get": (ctypes.c_bool, (_P, _P, ctypes.c_char_p, ctypes.c_size_t, _P)),
    "wasmtime_func_call_unchecked": (_P, (_P, _P, _P, ctypes.c_size_t, _P)),
    "wasmtime_memory_data": (_P, (_P, _P)),
    "wasmtime_memory_data_size": (ctypes.c_size_t, (_P, _P)),
    "wasmtime_trap_code": (ctypes.c_bool, (_P, _P)),
    "wasm_trap_delete": (None, (_P,)),
    "wasmtime_error_message": (None, (_P, _P)),
    "wasmtime_error_delete": (None, (_P,)),
    "wasm_byte_vec_delete": (None, (_P,)),
}
_RUNS_WASM: Final = frozenset({"wasmtime_instance_pre_instantiate", "wasmtime_func_call_unchecked"})
_LAYOUTS: Final = {"wasmtime_extern_t": 32, "wasmtime_val_raw_t": 16, "wasmtime_instance_t": 16}
_EXTERN_FUNC, _EXTERN_MEMORY = 0, 3
_POOLING_SETTER: Final = "wasmtime_pooling_allocation_config_{}_set"


def _bindings() -> Any:
    from wasmtime import _bindings  # private: imported only when probed

    return _bindings


def bindings() -> Any:
    """wasmtime-py's private ctypes bindings (for ``kernel.native``, which shares the pin)."""
    return _bindings()


def bindings_digest() -> str:
    """blake3 over the sorted C-API names wasmtime-py binds: changes whenever its surface does."""
    names = sorted(n for n in vars(_bindings()) if n.startswith(("wasm", "WASM")))
    return blake3.blake3("\n".join(names).encode()).hexdigest()


def unavailable_reason() -> str | None:
    """Why the fast path cannot be used here, or ``None`` if it can."""
    try:
        bindings = _bindings()
    except ImportError:
        return "wasmtime._bindings is missing"
    missing = [n for n in _PROTOTYPES if not hasattr(bindings.dll, n)]
    missing += [n for n in _pooling_names() if not hasattr(bindings, n)]
    if missing:
        return f"wasmtime lacks {', '.join(missing)}"
    for name, size in _LAYOUTS.items():
        layout = getattr(bindings, name, None)
        if layout is None or ctypes.sizeof(layout) != size:
            return f"layout of {name} is not the one tested"
    if bindings_digest() != PINNED_BINDINGS_DIGEST:
        return f"wasmtime bindings differ from those of {PINNED_WASMTIME}, the tested version"
    return None


def _pooling_names() -> list[str]:
    fixed = ["new", "delete"]
    names = [f"wasmtime_pooling_allocation_config_{n}" for n in fixed]
    names += [_POOLING_SETTER.format(name) for name, _ in POOLING]
    return [*names, "wasmtime_pooling_allocation_strategy_set"]


def configure_pooling(config: wasmtime.Config) -> None:
    """Switch ``config`` to the pooling instance allocator with ``_engine.POOLING``."""
    bindings = _bindings()
    pool = bindings.wasmtime_pooling_allocation_config_new()
    try:
        for name, value in POOLING:
            getattr(bindings, _POOLING_SETTER.format(name))(pool, value)
        bindings.wasmtime_pooling_allocation_strategy_set(config.ptr(), pool)
    finally:
        bindings.wasmtime_pooling_allocation_config_delete(pool)


class _Lib:
    """Our own ctypes prototypes over libwasmtime, pointer arguments as plain ints.

    Calls that run wasm release the GIL (as wasmtime-py's do), so other Python threads are not
    stalled for the length of a step; the microsecond bookkeeping calls keep it, which saves
    ~0.7 us a step in GIL hand-offs.
    """

    def __init__(self) -> None:
        dll = _bindings().dll
        for name, (restype, argtypes) in _PROTOTYPES.items():
            factory = ctypes.CFUNCTYPE if name in _RUNS_WASM else ctypes.PYFUNCTYPE
            setattr(self, name.removeprefix("wasmtime_"), factory(restype, *argtypes)((name, dll)))

    def __getattr__(self, name: str) -> Callable[..., Any]:  # for mypy: set in __init__
        raise AttributeError(name)


_LIB: _Lib | None = None


def _lib() -> _Lib:
    global _LIB  # prototypes are built once per process
    if _LIB is None:
        _LIB = _Lib()
    return _LIB


def _addr(obj: Any) -> int:
    return ctypes.addressof(obj)


def _ptr_value(pointer: Any) -> int:
    value = ctypes.cast(pointer, ctypes.c_void_p).value
    if value is None:
        raise WasmCallError(None, "wasmtime returned a null pointer")
    return value


class FastSession:
    """One reducer's step machinery on the C API; ``open`` .. ``close`` brackets one step.

    Every address handed to C is computed once here; per step only ints cross into ctypes.
    """

    def __init__(
        self, engine: wasmtime.Engine, module: wasmtime.Module, limits: tuple[int, int]
    ) -> None:
        bindings = _bindings()
        self._lib = _lib()
        self._pre = wasmtime.Linker(engine).instantiate_pre(module)  # owns the C object
        self._pre_ptr = _ptr_value(self._pre.ptr())
        self._engine_ptr = _ptr_value(engine.ptr())
        self._memory_bytes_max, self._table_elements_max = limits
        self._instance = bindings.wasmtime_instance_t()
        self._instance_addr = _addr(self._instance)
        self._externs = (bindings.wasmtime_extern_t * 3)()
        size = ctypes.sizeof(bindings.wasmtime_extern_t)
        self._extern_addrs = tuple(_addr(self._externs) + i * size for i in range(3))
        offset = bindings.wasmtime_extern_t.of.offset
        self._memory, self._alloc, self._step = (a + offset for a in self._extern_addrs)
        self._args = (bindings.wasmtime_val_raw_t * 3)()
        self._args_addr = _addr(self._args)
        self._a0, self._a1, self._a2 = self._args[0], self._args[1], self._args[2]
        self._trap = ctypes.c_void_p()
        self._trap_addr = _addr(self._trap)
        self._store: int | None = None
        self._ctx = 0
        self._kinds_checked = False

    @property
    def engine_address(self) -> int:
        """The C ``wasm_engine_t*`` (for the native session, which makes the same calls)."""
        return self._engine_ptr

    @property
    def pre_address(self) -> int:
        """The C ``wasmtime_instance_pre_t*``; valid while this session lives."""
        return self._pre_ptr

    def open(self, fuel: int) -> None:
        lib = self._lib
        self._trap.value = None
        store = self._store = lib.store_new(self._engine_ptr, None, None)
        ctx = self._ctx = lib.store_context(store)
        lib.store_limiter(store, self._memory_bytes_max, self._table_elements_max, 1, 1, 1)
        error = lib.context_set_fuel(ctx, fuel)
        if error:
            self._raise(error)
        error = lib.instance_pre_instantiate(
            self._pre_ptr, ctx, self._instance_addr, self._trap_addr
        )
        if error or self._trap.value:
            self._raise(error)
        get, instance = lib.instance_export_get, self._instance_addr
        memory, alloc, step = self._extern_addrs
        found = get(ctx, instance, b"memory", 6, memory)
        found = get(ctx, instance, b"alloc", 5, alloc) and found
        found = get(ctx, instance, b"step", 4, step) and found
        if not found or not self._kinds_checked:
            self._check_kinds(found)

    def _check_kinds(self, found: bool) -> None:
        kinds = tuple(self._externs[i].kind for i in range(3))
        if not found or kinds != (_EXTERN_MEMORY, _EXTERN_FUNC, _EXTERN_FUNC):
            raise WasmCallError(None, f"ABI exports missing or of the wrong kinds {kinds}")
        self._kinds_checked = True

    def close(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            self._lib.store_delete(store)

    def _call(self, func: int) -> None:
        error = self._lib.func_call_unchecked(self._ctx, func, self._args_addr, 3, self._trap_addr)
        if error or self._trap.value:
            self._raise(error)

    def alloc(self, size: int) -> int:
        self._a0.i32 = _i32(size)
        self._call(self._alloc)
        return int(self._a0.i32) & 0xFFFFFFFF

    def step(self, ptr: int, size: int) -> tuple[int, int]:
        self._a0.i32, self._a1.i32 = _i32(ptr), _i32(size)
        self._call(self._step)
        return int(self._a0.i32) & 0xFFFFFFFF, int(self._a1.i32) & 0xFFFFFFFF

    def step_retptr(self, retptr: int, ptr: int, size: int) -> None:
        self._a0.i32, self._a1.i32, self._a2.i32 = _i32(retptr), _i32(ptr), _i32(size)
        self._call(self._step)

    def memory_size(self) -> int:
        return int(self._lib.memory_data_size(self._ctx, self._memory))

    def write(self, addr: int, data: bytes, span: int) -> bool:
        lib, ctx, memory = self._lib, self._ctx, self._memory
        if addr + max(span, len(data)) > lib.memory_data_size(ctx, memory):
            return False
        ctypes.memmove(lib.memory_data(ctx, memory) + addr, data, len(data))
        return True

    def read(self, addr: int, size: int) -> bytes | None:
        lib, ctx, memory = self._lib, self._ctx, self._memory
        if addr + size > lib.memory_data_size(ctx, memory):
            return None
        return ctypes.string_at(lib.memory_data(ctx, memory) + addr, size)

    def _raise(self, error: int | None) -> None:
        if error:
            raise WasmCallError(None, self._error_text(error))
        trap, self._trap.value = self._trap.value, None
        code = ctypes.c_uint8()
        known = self._lib.trap_code(trap, _addr(code))
        self._lib.wasm_trap_delete(trap)
        number = code.value if known else None
        raise WasmCallError(number, trap_name(number) if number is not None else "trap")

    def _error_text(self, error: int) -> str:
        message = _bindings().wasm_byte_vec_t()
        self._lib.error_message(error, _addr(message))
        text = ctypes.string_at(message.data, message.size).decode("utf-8", "replace")
        self._lib.wasm_byte_vec_delete(_addr(message))
        self._lib.error_delete(error)
        return text


def _i32(value: int) -> int:
    """A u32 as the signed i32 wasm receives (ctypes would wrap silently; make it explicit)."""
    return value - (1 << 32) if value >= 1 << 31 else value
