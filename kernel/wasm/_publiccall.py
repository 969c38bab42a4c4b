"""Public-API path: one reducer step through wasmtime-py's documented classes only.

Same protocol and same per-step shape as ``_fastcall.FastSession`` (new store with limiter and
fuel, new instance, calls, store dropped), so the two paths give byte-identical outputs and the
same failures; ``tests/kernel/wasm/test_host_backends.py`` holds them to that. This is the fallback when the
fast path's pinned internals are missing, and the baseline in ``tools/bench/bench_host.py``.
"""

from __future__ import annotations

from typing import Any

import wasmtime

from kernel.wasm._engine import WasmCallError, trap_name

__all__ = ["PublicSession"]

_MASK = 0xFFFFFFFF


def _failure(exc: Exception) -> WasmCallError:
    if isinstance(exc, wasmtime.Trap) and exc.trap_code is not None:
        code = int(exc.trap_code.value)
        return WasmCallError(code, trap_name(code))
    return WasmCallError(None, str(exc))


def _i32(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


class PublicSession:
    """One reducer's step machinery on wasmtime-py's public API."""

    def __init__(
        self, engine: wasmtime.Engine, module: wasmtime.Module, limits: tuple[int, int]
    ) -> None:
        self._engine = engine
        self._module = module
        self._memory_bytes_max, self._table_elements_max = limits
        self._store: wasmtime.Store | None = None
        self._exports: Any = None

    def open(self, fuel: int) -> None:
        store = wasmtime.Store(self._engine)
        self._store = store
        store.set_limits(
            memory_size=self._memory_bytes_max,
            table_elements=self._table_elements_max,
            instances=1,
            tables=1,
            memories=1,
        )
        try:
            store.set_fuel(fuel)
            instance = wasmtime.Instance(store, self._module, [])
            exports = instance.exports(store)
            self._exports = (exports["memory"], exports["alloc"], exports["step"])
        except (wasmtime.Trap, wasmtime.WasmtimeError, KeyError) as exc:
            raise _failure(exc) from exc

    def close(self) -> None:
        store, self._store, self._exports = self._store, None, None
        if store is not None:
            store.close()

    def alloc(self, size: int) -> int:
        try:
            return int(self._exports[1](self._store, _i32(size))) & _MASK
        except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
            raise _failure(exc) from exc

    def step(self, ptr: int, size: int) -> tuple[int, int]:
        try:
            out_ptr, out_len = self._exports[2](self._store, _i32(ptr), _i32(size))
        except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
            raise _failure(exc) from exc
        return int(out_ptr) & _MASK, int(out_len) & _MASK

    def step_retptr(self, retptr: int, ptr: int, size: int) -> None:
        try:
            self._exports[2](self._store, _i32(retptr), _i32(ptr), _i32(size))
        except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
            raise _failure(exc) from exc

    def memory_size(self) -> int:
        return int(self._exports[0].data_len(self._store))

    def write(self, addr: int, data: bytes, span: int) -> bool:
        if addr + max(span, len(data)) > self.memory_size():
            return False
        if data:
            self._exports[0].write(self._store, data, addr)
        return True

    def read(self, addr: int, size: int) -> bytes | None:
        if addr + size > self.memory_size():
            return None
        return bytes(self._exports[0].read(self._store, addr, addr + size))
