"""The WASM reducer host: load a module by content hash, run one step, return its output bytes.

Public surface: ``HostLimits``, ``ReducerHost`` (``load``, ``get``), ``Reducer`` (``call`` for
raw output bytes, ``step`` for a strictly decoded ``abi.StepOutput``) and the error classes.

No carry-over, by construction: every step runs in a new wasmtime store holding a new instance,
and the store is deleted when the step ends, so linear memory, mutable globals (exported or
not), tables, dropped segments and anything a future proposal adds start from the module's
image each time. The only thing a reducer sees from its past is ``state`` in the input.
Rejected alternative: one long-lived instance whose linear memory is copied back from a
snapshot and whose globals are reset after each step. It cannot be made sound from outside:
non-exported mutable globals (every C module's stack pointer), tables changed by
``table.set``/``table.grow`` and segments dropped by ``data.drop`` cannot be read or restored
through the embedding API, and a memory that grew cannot shrink. Nor would it be faster: the
fresh instance costs ~5 us (store, ``InstancePre`` instantiation, exports, store deleted) with
wasmtime's pooling allocator and copy-on-write memory images (see ``_engine``), while resetting
memory alone costs ~8 us per MiB here (wasmtime's own memset reset of a 1.1 MiB memory).

Limits (``HostLimits``), each named, defaulted, and hit by a test: ``fuel_per_step`` (fuel is
set once per step and shared by the start function, ``alloc`` and ``step``),
``memory_bytes_max`` (store limiter: ``memory.grow`` past it returns -1 as wasm specifies; a
step that then traps is reported as ``MemoryLimitExceeded``), ``output_bytes_max``, and
``table_elements_max``.

Refusals at load (``ReducerLoadError``), in the order they are checked, each decided by the
module's bytes and the limits alone: ``not_wasm``; the ABI problems ``_info`` reports
(``imports``, ``export_missing``, ``export_kind``, ``alloc_signature``, ``step_signature``);
``memory_limit`` (initial memory over ``memory_bytes_max``); ``table_limit`` (more than one
table, or an initial table over ``table_elements_max``: checked here because the pooling
allocator refuses a second table at compile time and the public backend at instantiation);
``invalid_wasm`` (the deterministic engine does not compile it); and the start function, run
once by ``probe`` on the step's fuel: ``trap`` or ``fuel_exhausted``, detail "the start
function ...". These are the module's own faults: the same bytes are refused the same way on
every machine, so the kernel journals a delivery to such a module as ``step.failed`` (and the
world's ``reducer check``, ``init`` and ``upgrade propose`` refuse it with the same detail).
The one exception is ``instantiate``, any other instantiation error (an exhausted pool, an
engine error): the environment's, so the run stops and the delivery stays queued. A memory
*maximum* over the limit is not refused: the store limiter bounds growth, whatever the module
declares.

Calling convention: the host calls ``alloc(len + pad)``, writes the input at the returned
address and calls ``step``. With the ``retptr`` flavour ``pad`` is 12 and the 8-byte result
slot is the first 4-aligned address after the input, inside that allocation.

Two backends give byte-identical outputs and the same errors: ``fast`` (ctypes over the C API,
``_fastcall``) and ``public`` (wasmtime-py's public API, ``_publiccall``). ``auto`` picks fast
when its pinned internals are present. On the fast backend, with ``native`` on
(``kernel.native``: the extension is built and enabled), a step is one call into C that makes
the same C-API calls in the same order; its failures come back as tuples that
``_native_failure`` turns into the same errors, so the ctypes session stays the reference and
the fallback. The host never mutates its inputs; every failure is a ``ReducerError`` (or
``abi.StepRejected`` for bad output), and the caller's state is untouched.
Not thread-safe: one step at a time per ``Reducer``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Final, Literal

import wasmtime

from air.cbor import content_hash, digest
from air.errors import HashMismatch, InvalidArgument, UnknownName, WrongMode
from kernel import native as native_path
from kernel.abi import StepOutput, decode_output
from kernel.errors import (
    FuelExhausted,
    MemoryLimitExceeded,
    OutputTooLarge,
    ReducerError,
    ReducerLoadError,
    ReducerTrap,
    WasmFormatError,
)
from kernel.wasm import _fastcall
from kernel.wasm._engine import (
    POOL_MEMORY_BYTES_MAX,
    POOL_TABLE_ELEMENTS_MAX,
    Backend,
    EngineHandle,
    Session,
    WasmCallError,
    fingerprint,
    public_config,
    settings_text,
    trap_name,
)
from kernel.wasm._info import StepAbi, WasmInfo, inspect_wasm, inspect_wasm_report
from kernel.wasm._modcache import ModuleCache, cache_key
from kernel.wasm._publiccall import PublicSession

__all__ = [
    "BackendChoice",
    "HostLimits",
    "Reducer",
    "ReducerHost",
    "inspect_wasm",
    "inspect_wasm_report",
]

BackendChoice = Literal["auto", "fast", "public"]

_PAGE_BYTES: Final = 65536
_RETPTR_PAD: Final = 12
_U32_MAX: Final = 0xFFFFFFFF
_INPUT_MAX: Final = _U32_MAX - _RETPTR_PAD


@dataclass(frozen=True, slots=True)
class HostLimits:
    """Per-step and per-instance limits. All positive; memory and table within the pool."""

    fuel_per_step: int = 10_000_000
    memory_bytes_max: int = 32 * 1024 * 1024
    output_bytes_max: int = 1024 * 1024
    table_elements_max: int = 10_000

    def __post_init__(self) -> None:
        for name in ("fuel_per_step", "memory_bytes_max", "output_bytes_max", "table_elements_max"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InvalidArgument(f"HostLimits.{name}", value, "must be a positive int")
        if self.memory_bytes_max > POOL_MEMORY_BYTES_MAX:
            raise InvalidArgument(
                "HostLimits.memory_bytes_max",
                self.memory_bytes_max,
                f"may be at most {POOL_MEMORY_BYTES_MAX}",
            )
        if self.table_elements_max > POOL_TABLE_ELEMENTS_MAX:
            raise InvalidArgument(
                "HostLimits.table_elements_max",
                self.table_elements_max,
                f"may be at most {POOL_TABLE_ELEMENTS_MAX}",
            )


class Reducer:
    """A loaded reducer module. ``call`` runs one step on a fresh instance."""

    def __init__(
        self,
        module_hash: str,
        step_abi: StepAbi,
        session: Session,
        limits: HostLimits,
        native_session: Any = None,
    ) -> None:
        self.module_hash = module_hash
        self.step_abi: StepAbi = step_abi
        self._session = session
        self._limits = limits
        self._native = native_session

    @property
    def native(self) -> bool:
        """Whether steps run through the native extension (``kernel.native``)."""
        return self._native is not None

    def call(self, input_cbor: bytes) -> bytes:
        """Run one step on ``input_cbor``; return the raw output bytes (size-limited)."""
        native = self._native
        if native is not None and type(input_cbor) is bytes and len(input_cbor) <= _INPUT_MAX:
            output = native.call(input_cbor)
            if type(output) is bytes:
                return output
            raise self._native_failure(output)
        if not isinstance(input_cbor, bytes):
            raise InvalidArgument("input_cbor", type(input_cbor).__name__, "must be bytes")
        if len(input_cbor) + _RETPTR_PAD > _U32_MAX:
            raise InvalidArgument("input_cbor", len(input_cbor), "must fit a 32-bit address space")
        session = self._session
        opened = False
        try:
            session.open(self._limits.fuel_per_step)
            opened = True
            return self._exchange(session, input_cbor)
        except WasmCallError as failure:
            raise self._classify(failure, session.memory_size() if opened else None) from failure
        finally:
            session.close()

    def step(self, input_cbor: bytes) -> StepOutput:
        """Run one step and strictly decode its output (``abi.decode_output``)."""
        return decode_output(self.call(input_cbor), module=self.module_hash)

    def probe(self) -> None:
        """Instantiate once and drop it: a start function that traps or runs out of fuel is
        refused with the trap's code (``trap``, ``fuel_exhausted``), the module's own fault;
        any other instantiation error keeps the code ``instantiate`` (the engine's)."""
        if self._native is not None:
            outcome = self._native.probe()
            if outcome is not None:
                raise self._start_failure(self._native_failure(outcome))
            return
        try:
            self._session.open(self._limits.fuel_per_step)
        except WasmCallError as failure:
            raise self._start_failure(self._classify(failure, None)) from failure
        finally:
            self._session.close()

    def _start_failure(self, error: ReducerError) -> ReducerLoadError:
        if isinstance(error, ReducerTrap):
            detail = f"the start function {error.detail}"
            return ReducerLoadError(self.module_hash, error.code, detail)
        return ReducerLoadError(self.module_hash, "instantiate", error.detail)

    def _exchange(self, session: Session, data: bytes) -> bytes:
        size = len(data)
        need = size + (_RETPTR_PAD if self.step_abi == "retptr" else 0)
        ptr = session.alloc(need)
        if not session.write(ptr, data, need):
            raise ReducerError(
                self.module_hash, "alloc_out_of_bounds", f"alloc({need}) returned {ptr}"
            )
        if self.step_abi == "multi_value":
            out_ptr, out_len = session.step(ptr, size)
        else:
            out_ptr, out_len = self._step_retptr(session, ptr, size)
        if out_len > self._limits.output_bytes_max:
            raise OutputTooLarge(self.module_hash, out_len, self._limits.output_bytes_max)
        output = session.read(out_ptr, out_len)
        if output is None:
            raise ReducerError(
                self.module_hash,
                "output_out_of_bounds",
                f"output [{out_ptr}, +{out_len}) is outside memory",
            )
        return output

    def _step_retptr(self, session: Session, ptr: int, size: int) -> tuple[int, int]:
        retptr = (ptr + size + 3) & ~3
        session.step_retptr(retptr, ptr, size)
        pair = session.read(retptr, 8)
        if pair is None:
            raise ReducerError(self.module_hash, "output_out_of_bounds", "result slot left memory")
        return int.from_bytes(pair[:4], "little"), int.from_bytes(pair[4:], "little")

    def _native_failure(self, outcome: tuple[Any, ...]) -> ReducerError:
        """The error the ctypes path raises for what the native step returned instead of bytes
        (the tuples are listed in ``wasm.c``)."""
        kind, module = outcome[0], self.module_hash
        if kind == "error":
            _, opened, message, memory_bytes = outcome
            return self._classify(WasmCallError(None, message), memory_bytes if opened else None)
        if kind == "trap":
            _, code, opened, memory_bytes = outcome
            failure = WasmCallError(code, trap_name(code) if code is not None else "trap")
            return self._classify(failure, memory_bytes if opened else None)
        if kind == "kinds":
            detail = f"ABI exports missing or of the wrong kinds {outcome[1]}"
            return self._classify(WasmCallError(None, detail), None)
        if kind == "alloc_oob":
            return ReducerError(
                module, "alloc_out_of_bounds", f"alloc({outcome[1]}) returned {outcome[2]}"
            )
        if kind == "slot_oob":
            return ReducerError(module, "output_out_of_bounds", "result slot left memory")
        if kind == "too_large":
            return OutputTooLarge(module, outcome[1], self._limits.output_bytes_max)
        detail = f"output [{outcome[1]}, +{outcome[2]}) is outside memory"
        return ReducerError(module, "output_out_of_bounds", detail)

    def _classify(self, failure: WasmCallError, memory_bytes: int | None) -> ReducerError:
        if failure.trap_code is None:
            return ReducerError(
                self.module_hash,
                "engine" if memory_bytes is not None else "instantiate",
                failure.detail,
            )
        name = trap_name(failure.trap_code)
        if name == "out_of_fuel":
            return FuelExhausted(self.module_hash, self._limits.fuel_per_step)
        if memory_bytes is not None and memory_bytes + _PAGE_BYTES > self._limits.memory_bytes_max:
            return MemoryLimitExceeded(self.module_hash, name, self._limits.memory_bytes_max)
        return ReducerTrap(self.module_hash, name)


def _frame(serialized: bytes) -> bytes:
    return digest(serialized) + serialized


def _unframe(framed: bytes) -> bytes | None:
    body = framed[32:]
    return body if len(framed) > 32 and digest(body) == framed[:32] else None


def _resolve_backend(requested: BackendChoice) -> tuple[Backend, str]:
    if requested not in ("auto", "fast", "public"):
        raise UnknownName("backend", str(requested), ["auto", "fast", "public"])
    if requested == "public":
        return "public", "requested"
    reason = _fastcall.unavailable_reason()
    if reason is None:
        return "fast", "pinned wasmtime internals present"
    if requested == "fast":
        raise WrongMode("use the fast backend", f"unavailable: {reason}")
    return "public", reason


@functools.cache
def engine_for(backend: Backend) -> EngineHandle:
    """The process-wide engine for ``backend``: ``_engine``'s settings; the fast one adds the
    pooling allocator through ``_fastcall`` and names its bindings in the fingerprint."""
    config = public_config()
    digest = ""
    if backend == "fast":
        _fastcall.configure_pooling(config)
        digest = _fastcall.bindings_digest()
    engine = wasmtime.Engine(config)
    return EngineHandle(engine, backend, fingerprint(engine, settings_text(backend, digest)))


class ReducerHost:
    """Loads reducer modules (compiling or restoring them via ``cache``) and keeps them by hash.

    ``backend``: ``auto`` (fast if available), ``fast`` (fail if unavailable) or ``public``.
    After construction ``self.backend`` is the one in use and ``self.backend_reason`` says why.
    ``native``: run fast-backend steps through the extension (default: ``kernel.native.enabled()``);
    ``self.native`` says whether it is in use.
    """

    def __init__(
        self,
        limits: HostLimits | None = None,
        *,
        cache: ModuleCache | None = None,
        backend: BackendChoice = "auto",
        native: bool | None = None,
    ) -> None:
        self.limits = limits if limits is not None else HostLimits()
        self.backend, self.backend_reason = _resolve_backend(backend)
        wanted = native_path.enabled() if native is None else native
        self.native = (
            wanted
            and self.backend == "fast"
            and native_path.wasm_unavailable_reason(_fastcall.bindings()) is None
        )
        self._engine: EngineHandle = engine_for(self.backend)
        self.engine_fingerprint = self._engine.fingerprint
        self._cache = cache
        self._reducers: dict[str, Reducer] = {}

    def get(self, module_hash: str) -> Reducer | None:
        """The reducer already loaded under ``module_hash``, if any."""
        return self._reducers.get(module_hash)

    def load(self, wasm_bytes: bytes, *, expected_hash: str | None = None) -> Reducer:
        """Load (or return the already loaded) module; check it against ``expected_hash``."""
        if not isinstance(wasm_bytes, bytes):
            raise InvalidArgument("wasm_bytes", type(wasm_bytes).__name__, "must be bytes")
        module_hash = content_hash(wasm_bytes)
        if expected_hash is not None and expected_hash != module_hash:
            raise HashMismatch(expected_hash, module_hash)
        loaded = self._reducers.get(module_hash)
        if loaded is not None:
            return loaded
        info = self._inspect(module_hash, wasm_bytes)
        module = self._module(module_hash, wasm_bytes)
        limits = (self.limits.memory_bytes_max, self.limits.table_elements_max)
        session_type = _fastcall.FastSession if self.backend == "fast" else PublicSession
        if info.step_abi is None:  # inspect_wasm reports this as a problem; never trust that alone
            raise ReducerLoadError(module_hash, "export_missing", "no usable step export")
        session = session_type(self._engine.engine, module, limits)
        reducer = Reducer(
            module_hash, info.step_abi, session, self.limits, self._native_session(session, info)
        )
        reducer.probe()
        self._reducers[module_hash] = reducer
        return reducer

    def _native_session(self, session: Session, info: WasmInfo) -> Any:
        if not self.native or not isinstance(session, _fastcall.FastSession):
            return None
        bindings = _fastcall.bindings()
        native_path.bind_wasmtime(bindings)
        extension = native_path.built()
        if extension is None:
            return None
        return extension.Session(
            session.engine_address,
            session.pre_address,
            self.limits.memory_bytes_max,
            self.limits.table_elements_max,
            self.limits.fuel_per_step,
            self.limits.output_bytes_max,
            info.step_abi == "retptr",
        )

    def _inspect(self, module_hash: str, wasm_bytes: bytes) -> WasmInfo:
        try:
            info = inspect_wasm(wasm_bytes)
        except WasmFormatError as exc:
            raise ReducerLoadError(module_hash, "not_wasm", str(exc)) from exc
        if info.problems:
            problem = info.problems[0]
            raise ReducerLoadError(module_hash, problem.code, problem.detail)
        if info.memory_min_bytes > self.limits.memory_bytes_max:
            limit = self.limits.memory_bytes_max
            detail = f"initial memory of {info.memory_min_bytes} bytes exceeds {limit}"
            raise ReducerLoadError(module_hash, "memory_limit", detail)
        tables = info.table_min_elements
        if len(tables) > 1:  # refused here, not by the engine: its two backends differ on it
            detail = f"{len(tables)} tables; a reducer may have one"
            raise ReducerLoadError(module_hash, "table_limit", detail)
        if tables and tables[0] > self.limits.table_elements_max:
            limit = self.limits.table_elements_max
            detail = f"initial table of {tables[0]} elements exceeds {limit}"
            raise ReducerLoadError(module_hash, "table_limit", detail)
        return info

    def _module(self, module_hash: str, wasm_bytes: bytes) -> wasmtime.Module:
        key = cache_key(module_hash, self.engine_fingerprint)
        if self._cache is not None:
            framed = self._cache.get(key)
            restored = self._restore(framed) if framed is not None else None
            if restored is not None:
                return restored
        try:
            module = wasmtime.Module(self._engine.engine, wasm_bytes)
        except wasmtime.WasmtimeError as exc:
            raise ReducerLoadError(module_hash, "invalid_wasm", str(exc)) from exc
        if self._cache is not None:
            self._cache.put(key, _frame(bytes(module.serialize())))
        return module

    def _restore(self, framed: bytes) -> wasmtime.Module | None:
        serialized = _unframe(framed)
        if serialized is None:
            return None
        try:
            return wasmtime.Module.deserialize(self._engine.engine, serialized)
        except wasmtime.WasmtimeError:
            return None
