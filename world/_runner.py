"""The kernel's ``Runner`` over the WASM host: modules load lazily by name, compiled once and
cached on disk under ``<world>/cache`` keyed by wasm hash and engine fingerprint. A module the
host refuses for its own bytes (off the ABI, over a limit, a start function that traps or
loops) is kept as that refusal, and every step on it fails with it (``step.failed``, the
delivery a dead letter) while the world's other modules go on; whether the compiled module
came from the cache or was compiled now makes no difference (the refusals are checked before
and after compiling, ``kernel.wasm._host``). ``check_module`` is the reducer check: what
``world reducer check``, ``world init`` and ``upgrade propose`` refuse, through this host.

It is also where the world layer reads ``WORLD_NATIVE`` (``kernel/`` reads no environment):
``0`` (or ``off``, ``false``, ``no``) selects the pure-Python step path for the process, anything
else (the default) the native one where it was built. Every world open, replay and time-travel
makes a runner, so the variable is honoured before any kernel of theirs runs a step.

And it reads the process's address-space limit (``RLIMIT_AS``, ``ulimit -v``; the kernel reads
no resources). The fast backend's pooling allocator reserves ~2.4 GiB of address space when its
engine is created (``kernel.wasm._engine``: 8 slots of 256 MiB memory and 32 MiB guard, and
the tables), and under a lower limit wasmtime aborts the process with a Rust backtrace that
cannot be caught. So below ``FAST_ADDRESS_SPACE_MIN`` a runner takes the public backend, which
reserves no pool (one memory's 288 MiB while a step runs), and says so once per process: a
notice in ``HostRunner.notice`` and on the ``world`` logger (which, unconfigured, writes it to
stderr as one line). The two backends are byte-identical by construction, so the world runs
the same, only slower (BENCHMARKS.md). Rejected: failing with "raise ulimit -v", which would
leave a user who cannot raise it without a world at all.
"""

from __future__ import annotations

import functools
import logging
import os
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Final

from air import LoadedAir
from air.errors import Diagnostic, InvalidArgument, ManifestError, UnknownName
from kernel import native, reducer_fault
from kernel.errors import ReducerLoadError
from kernel.wasm import BackendChoice, HostLimits, Reducer, ReducerHost
from world._modcache import FileModuleCache

__all__ = [
    "FAST_ADDRESS_SPACE_MIN",
    "HostRunner",
    "backend_for_limit",
    "check_module",
    "check_modules",
    "native_requested",
]

FAST_ADDRESS_SPACE_MIN: Final = 4 << 30
"""The least address-space limit (bytes) under which a runner takes the fast backend: its pool
(~2.4 GiB) and the process (~0.2 GiB when the engine is made; measured, the engine is made
under a limit of 2.5 GB and not 2.4 GB), with room for what the process grows to after
(threads' stacks and malloc arenas, the world's cells in memory)."""

_OFF = frozenset({"0", "off", "false", "no"})
_log = logging.getLogger("world")
_told: set[str] = set()


def backend_for_limit(limit_bytes: int) -> tuple[BackendChoice, str | None]:
    """The backend a runner takes under an address-space limit of ``limit_bytes``
    (``resource.RLIM_INFINITY``: none), and the notice that says why if it is not the
    default: ``("auto", None)``, or ``("public", notice)`` below ``FAST_ADDRESS_SPACE_MIN``."""
    if limit_bytes == resource.RLIM_INFINITY or limit_bytes >= FAST_ADDRESS_SPACE_MIN:
        return "auto", None
    return "public", (
        f"the address-space limit (ulimit -v: {limit_bytes // 1024} KiB) is below the "
        f"{FAST_ADDRESS_SPACE_MIN // 1024} KiB the fast reducer engine reserves with room to "
        "spare; running on the public one (same results, slower); raise it "
        f"(ulimit -v {FAST_ADDRESS_SPACE_MIN // 1024} or unlimited) for the fast one"
    )


def _backend() -> tuple[BackendChoice, str | None]:
    """``backend_for_limit`` of this process's soft ``RLIMIT_AS``; its notice is logged once."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    backend, notice = backend_for_limit(soft)
    if notice is not None and notice not in _told:
        _told.add(notice)
        _log.warning("notice: %s", notice)
    return backend, notice


def native_requested() -> bool:
    """Whether ``WORLD_NATIVE`` leaves the native step path on (the default)."""
    return os.environ.get("WORLD_NATIVE", "1").strip().lower() not in _OFF


class HostRunner:
    """The kernel's ``Runner`` for ``air``'s reducers. ``notice`` says why it runs on the
    public backend when the address-space limit made it (see the module docstring), else
    None."""

    def __init__(
        self,
        air: LoadedAir,
        cache_dir: Path,
        limits: HostLimits | None = None,
        *,
        readonly: bool = False,
        wasm_of: Callable[[str], bytes] | None = None,
    ) -> None:
        """Modules run by wasm hash: ``air``'s own, and any other through ``wasm_of`` (the
        world's CAS, where every era's wasm is stored)."""
        self._wasm = {air.wasm_hashes[name]: data for name, data in air.wasm_bytes.items()}
        self._wasm_of = wasm_of
        native.set_enabled(native_requested())
        backend, self.notice = _backend()
        cache = FileModuleCache(cache_dir, readonly=readonly)
        self._host = ReducerHost(limits, cache=cache, backend=backend)
        self._reducers: dict[str, Reducer | _Refused] = {}

    @property
    def backend(self) -> str:
        return self._host.backend

    @property
    def native(self) -> bool:
        """Whether steps run through the native extension."""
        return self._host.native

    def run(self, module: str, input_cbor: bytes) -> bytes:
        found = self._reducers.get(module)
        if found is None:
            found = self._reducers[module] = self._load(module)
        return found.call(input_cbor)

    def _load(self, module: str) -> Reducer | _Refused:
        """The loaded module of wasm hash ``module`` (``blake3:<hex>``), or, when the host
        refuses it for its own bytes (``kernel.reducer_fault``), its stand-in ``_Refused``."""
        data = self._wasm.get(module)
        if data is None:
            if self._wasm_of is None:
                raise UnknownName("module", module, sorted(self._wasm))
            data = self._wasm_of(module)
        try:
            return self._host.load(data, expected_hash=module)
        except ReducerLoadError as exc:
            if not reducer_fault(exc):
                raise  # the environment's: nothing kept, the next step tries again
            return _Refused(exc)


class _Refused:
    """A module the host refused for its own bytes, in place of its ``Reducer``: every step on
    it fails with that refusal (``step.failed``, the delivery a dead letter), and it is not
    loaded again, so a start function that loops costs its fuel once per runner, not once
    per delivery. Deterministic: the refusal depends on the bytes and the limits only."""

    def __init__(self, refusal: ReducerLoadError) -> None:
        self.refusal = refusal

    def call(self, input_cbor: bytes) -> bytes:
        raise self.refusal.with_traceback(None)  # one traceback, not one per raise


def check_module(wasm_bytes: bytes | bytearray) -> None:
    """The reducer check: ``ReducerLoadError`` (its ``code`` and ``detail``) unless a world's
    host loads ``wasm_bytes`` and runs its start function within the default ``HostLimits``,
    i.e. unless a step on it could run at all. ``world reducer check`` and ``reducer build``
    (``world.sdk.check_abi``), ``world init`` and ``upgrade propose`` (``check_modules``) all
    refuse through it, so they refuse the same modules with the same detail. It runs on the
    backend a runner would take here, on one host per process (``_check_host``)."""
    backend, _notice = _backend()
    _check_host(backend).load(bytes(wasm_bytes))


@functools.cache
def _check_host(backend: BackendChoice) -> ReducerHost:
    """The host ``check_module`` loads on, kept for the process: a module that passed is kept
    by hash and not compiled again (~45 ms for the bundled counter), so a process that inits
    many worlds of the same modules pays once; one a check refused is not kept."""
    return ReducerHost(backend=backend, native=False)


def check_modules(air: LoadedAir) -> None:
    """``check_module`` for every reducer of ``air`` (a world's AIR about to be created or
    proposed): ``InvalidArgument`` if one has no wasm, ``ManifestError`` naming the AIR file
    and ``/wasm`` of each module it refuses, with the check's detail and ``air.module.<code>``."""
    missing = sorted(name for name in air.modules if name not in air.wasm_bytes)
    if missing:
        raise InvalidArgument("modules", missing, "modules without a wasm binary cannot run")
    found: list[Diagnostic] = []
    for name, wasm_bytes in sorted(air.wasm_bytes.items()):
        try:
            check_module(wasm_bytes)
        except ReducerLoadError as exc:
            if not reducer_fault(exc):
                raise  # the engine's, not the module's: not a refusal of the AIR
            loc = air.defs[name]
            code = f"air.module.{exc.code}"
            found.append(Diagnostic(loc.file, f"{loc.pointer}/wasm", code, exc.detail))
    if found:
        raise ManifestError(found)
