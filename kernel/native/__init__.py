"""The native step path: the kernel's hot functions in C (``kernel.native._native``), with the pure-Python
functions they stand for kept as the reference and the fallback.

What is native. One reducer step through wasmtime's C API in one call (``Session.step``: the
input envelope encoded straight into a buffer, new store, limiter, fuel, instance, three export
lookups, ``alloc``, write, ``step``, read, store deleted) instead of ~8 ctypes crossings
(``_fastcall``); the strict decode of a step's output (``decode_output``); canonical CBOR both
ways (``dumps``, ``loads``); the journal payload join (``encode_record``) and a record's decode
(``decode_record``); and, for the file cell store, the merge of a packed index shard with its
dirty cells at a checkpoint (``shard_splice``) and the bisection of a shard's keys at a lookup
(``find_key``, ``keys_ascend``). Everything else (routing, the scheduler, schema checks, the
stores) stays Python: measured, the C call boundary is not where what is left of the step goes
(BENCHMARKS.md).

The contract, one-sided by construction. Each native function either returns exactly what its
Python reference returns, or answers "not mine" (``None``, or ``ValueError`` for ``loads``) and
the wrapper here runs the reference, which raises the precise error with its code and pointer
(or returns, where the C code was merely stricter). So errors keep one source of truth, and the
only thing native code must get right is acceptance. ``tests/kernel/native/test_native_fuzz.py`` holds every
native function to its reference on random and mutated inputs (the outputs of real reducers,
journal records, AIR values); ``tests/kernel/native/test_native_parity.py`` runs bundled worlds and hostile
reducers through both paths and compares journal bytes, states and index roots;
``tests/kernel/native/test_native_asan.py`` runs both under AddressSanitizer. A wasm step that fails is
returned by the C code as a tuple (see ``wasm.c``) that ``kernel.wasm._host`` turns into the
same ``ReducerError`` the ctypes path raises.

Selection. ``enabled()`` is a process-wide switch, on when the extension is built; the world
layer sets it from ``WORLD_NATIVE`` (``world._runner``; this package reads no environment), and
tests set it directly. It only chooses the code that runs: journals, states and hashes are the
same bytes either way. Where the extension was not built (no compiler when the package was
installed: ``setup.py`` prints a one-line notice and installs pure Python) ``available()`` is
False and every function here runs its reference.

Pinned like ``_fastcall``: the C code is handed the addresses of wasmtime's C functions from the
library wasmtime-py loaded (it does not link libwasmtime), and declares the few struct layouts
it uses; ``wasm_unavailable_reason`` checks them against wasmtime-py's ctypes layouts, and the
wasm part is used only together with the fast backend.

Rejected: mypyc over the existing modules (measured in shared/perf-notes.md: steps/s unchanged,
the cost being calls into C libraries), and a whole tick in C reaching into the Python stores
through the C API (the stores' own Python code would still run per step; see BENCHMARKS.md for
where the rest of the step goes). Not thread-safe per session, like ``_fastcall``.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Final

from air import cbor
from air.errors import WorldError
from air.types import ListT, OptionT, Prim, Record, Schemas, TypeNode, Variant, resolve

if TYPE_CHECKING:
    from kernel.native._native import Spliced  # its one definition: the extension's stub

_ext: Any
try:  # built by setup.py where a compiler is found; absent otherwise
    import kernel.native._native as _ext
except ImportError:  # pragma: no cover - exercised by installs without a compiler
    _ext = None

__all__ = [
    "WASMTIME_FUNCTIONS",
    "available",
    "bind_types",
    "bind_wasmtime",
    "built",
    "decode_record",
    "dumps",
    "enabled",
    "ext",
    "find_key",
    "keys_ascend",
    "loads",
    "norm_program",
    "normalise",
    "set_enabled",
    "shard_splice",
    "wasm_unavailable_reason",
]

WASMTIME_FUNCTIONS: Final = (
    "wasmtime_store_new",
    "wasmtime_store_context",
    "wasmtime_store_limiter",
    "wasmtime_store_delete",
    "wasmtime_context_set_fuel",
    "wasmtime_instance_pre_instantiate",
    "wasmtime_instance_export_get",
    "wasmtime_func_call_unchecked",
    "wasmtime_memory_data",
    "wasmtime_memory_data_size",
    "wasmtime_trap_code",
    "wasm_trap_delete",
    "wasmtime_error_message",
    "wasmtime_error_delete",
    "wasm_byte_vec_delete",
)
"""The C functions the extension calls, in the order of its function table (``bind``)."""

_state = {"enabled": _ext is not None, "bound": False}


def available() -> bool:
    """Whether the extension was built and imports."""
    return _ext is not None


def enabled() -> bool:
    """Whether the native path is in use (built, and not switched off)."""
    return bool(_state["enabled"])


def set_enabled(flag: bool) -> None:
    """Switch the native path on or off for this process (off is always possible)."""
    _state["enabled"] = bool(flag) and _ext is not None


def ext() -> Any:
    """The extension module when enabled, else ``None``."""
    return _ext if _state["enabled"] else None


def built() -> Any:
    """The extension module if it was built, enabled or not (for an explicit choice)."""
    return _ext


def dumps(obj: Any) -> bytes:
    """``air.cbor.dumps``; native when enabled, the reference otherwise and for every error."""
    if _state["enabled"] and _ext is not None:
        encoded: bytes | None = _ext.dumps(obj)
        if encoded is not None:
            return encoded
    return cbor.dumps(obj)


def loads(data: bytes) -> Any:
    """``air.cbor.loads``; native when enabled, the reference otherwise and for every error."""
    if _state["enabled"] and _ext is not None and type(data) is bytes:
        try:
            return _ext.loads(data)
        except ValueError:
            pass
    return cbor.loads(data)


def decode_record(payload: bytes) -> tuple[int, str, str, Any] | None:
    """``(seq, subject, kind, body)`` of a canonical record payload, or ``None`` (use Python)."""
    if _state["enabled"] and _ext is not None and type(payload) is bytes:
        found: tuple[int, str, str, Any] | None = _ext.decode_record(payload)
        return found
    return None


def shard_splice(
    fields: tuple[bytes, bytes, bytes, bytes, bytes],
    cells: dict[bytes, tuple[Any, bytes] | None],
    inline_bytes_max: int,
) -> Spliced | None:
    """A packed shard's five fields merged with its dirty cells (``kernel/native/shard.c`` and
    ``world.cellstore._flush.splice`` say what goes in and comes out); None when not enabled or
    not the C code's input, and the caller runs the Python merge."""
    if _state["enabled"] and _ext is not None:
        out: Spliced | None = _ext.shard_splice(*fields, cells, inline_bytes_max)
        return out
    return None


def find_key(keys: bytes, key_hash: bytes) -> int | None:
    """The index of ``key_hash`` in a shard's strictly ascending ``keys`` (32-byte hashes,
    concatenated), -1 if absent, by bisection; None when not enabled or not the C code's input.
    Ascending is the caller's promise (``world.cellstore._shards`` checks it at load)."""
    if _state["enabled"] and _ext is not None:
        found: int | None = _ext.find_key(keys, key_hash)
        return found
    return None


def keys_ascend(keys: bytes) -> bool | None:
    """Whether ``keys`` (32-byte hashes, concatenated) strictly ascend; None when not enabled
    or not the C code's input."""
    if _state["enabled"] and _ext is not None:
        ascend: bool | None = _ext.keys_ascend(keys)
        return ascend
    return None


def bind_types(*shapes: tuple[type, tuple[str, ...]]) -> None:
    """Let ``decode_output`` build ``kernel.abi``'s result objects itself (each a slots dataclass
    given with its fields in order); checked against the classes by the extension."""
    if _ext is not None:
        _ext.bind_types(shapes)


# --- normalising outside values -----------------------------------------------------------------

_PRIM_CODES: Final = {
    "bool": 1,
    "int": 2,
    "time": 2,  # an int of ns once normalised; text forms are declined
    "duration": 2,
    "nat": 3,
    "text": 4,
    "bytes": 5,  # bytes objects only; base64 text is declined
    "hash": 6,
    "uuid": 7,
    "unit": 8,
}
_NORM_DEPTH_MAX: Final = 64
_P_PRIM, _P_RECORD, _P_VARIANT, _P_OPTION, _P_LIST, _P_DECLINE = range(6)


def norm_program(node: TypeNode, schemas: Schemas, depth: int = 0) -> tuple[Any, ...]:
    """``node`` compiled for the extension's ``normalise`` (layout in ``norm.c``): refs
    resolved; sets, maps, decimals and anything unresolvable compile to "decline"."""
    try:
        node = resolve(node, schemas)
    except WorldError:
        return (_P_DECLINE, "")
    if depth > _NORM_DEPTH_MAX:
        return (_P_DECLINE, "")
    if isinstance(node, Prim):
        return (_P_PRIM, node.name, _PRIM_CODES.get(node.name, 0))
    if isinstance(node, Record):
        fields = tuple(
            (name, norm_program(sub, schemas, depth + 1), _is_option(sub, schemas))
            for name, sub in node.fields
        )
        return (_P_RECORD, "record", fields, {name: i for i, (name, _) in enumerate(node.fields)})
    if isinstance(node, Variant):
        cases = {name: norm_program(sub, schemas, depth + 1) for name, sub in node.cases}
        return (_P_VARIANT, "variant", cases)
    if isinstance(node, OptionT):
        return (_P_OPTION, "option", norm_program(node.item, schemas, depth + 1))
    if isinstance(node, ListT):
        return (_P_LIST, "list", norm_program(node.item, schemas, depth + 1))
    return (_P_DECLINE, "set" if type(node).__name__ == "SetT" else "map")


def _is_option(node: TypeNode, schemas: Schemas) -> bool:
    try:
        return isinstance(resolve(node, schemas), OptionT)
    except WorldError:
        return False


def normalise(program: tuple[Any, ...], value: Any) -> tuple[bool, Any]:
    """``(True, normalised)`` when the extension handles ``value``, else ``(False, None)``: the
    caller then runs ``air.values.normalise``, which also raises every error."""
    if _state["enabled"] and _ext is not None:
        try:
            return True, _ext.normalise(program, value)
        except ValueError:
            pass
    return False, None


# --- wasm --------------------------------------------------------------------------------------


def _address(dll: Any, name: str) -> int:
    value = ctypes.cast(getattr(dll, name), ctypes.c_void_p).value
    if not value:
        raise LookupError(name)
    return int(value)


def wasm_unavailable_reason(bindings: Any) -> str | None:
    """Why the native wasm call cannot be used with these wasmtime bindings, or ``None``."""
    if _ext is None:
        return "the extension is not built"
    missing = [name for name in WASMTIME_FUNCTIONS if not hasattr(bindings.dll, name)]
    if missing:
        return f"wasmtime lacks {', '.join(missing)}"
    layouts = {
        "wasmtime_extern_t": (32, ("of", 8)),
        "wasmtime_val_raw_t": (16, None),
        "wasmtime_instance_t": (16, None),
        "wasm_byte_vec_t": (16, ("data", 8)),
    }
    for name, (size, field) in layouts.items():
        layout = getattr(bindings, name, None)
        if layout is None or ctypes.sizeof(layout) != size:
            return f"layout of {name} is not the one the extension declares"
        if field is not None and getattr(layout, field[0]).offset != field[1]:
            return f"field {field[0]} of {name} is not where the extension expects it"
    return None


def bind_wasmtime(bindings: Any) -> None:
    """Hand the extension the addresses of wasmtime's C functions (once per process)."""
    if _ext is None or _state["bound"]:
        return
    _ext.bind(tuple(_address(bindings.dll, name) for name in WASMTIME_FUNCTIONS))
    _state["bound"] = True
