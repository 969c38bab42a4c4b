"""What a wasm binary imports and exports, and whether it fits the reducer ABI (SPEC §5).

``inspect_wasm(wasm_bytes) -> WasmInfo`` reads the module's section structure (type, import,
function, export) without compiling it, so the AIR validator can check a module cheaply and the
host can refuse a module before wasmtime sees it. ABI problems (an import, a missing or
mistyped ``memory``/``alloc``/``step``) are reported as data in ``WasmInfo.problems``; only
bytes that are not a core wasm module at all raise ``WasmFormatError``.
``inspect_wasm_report`` is the never-raising variant (``WasmInfo.error`` set instead), shaped
for ``air._loader.InspectWasm``.

What this is not: a validator of function bodies. Code validity is wasmtime's job at load
time; this parser only walks section headers and the four sections above. Type forms from the
GC proposal are refused as malformed here, since the engine runs with GC disabled anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from kernel.errors import WasmFormatError

__all__ = [
    "FuncSig",
    "StepAbi",
    "WasmInfo",
    "WasmProblem",
    "inspect_wasm",
    "inspect_wasm_report",
]

StepAbi = Literal["multi_value", "retptr"]

_MAGIC: Final = b"\x00asm\x01\x00\x00\x00"
_VALTYPES: Final = {
    0x7F: "i32",
    0x7E: "i64",
    0x7D: "f32",
    0x7C: "f64",
    0x7B: "v128",
    0x70: "funcref",
    0x6F: "externref",
}
_KINDS: Final = {0: "func", 1: "table", 2: "memory", 3: "global", 4: "tag"}
_SEC_TYPE, _SEC_IMPORT, _SEC_FUNCTION, _SEC_TABLE, _SEC_MEMORY, _SEC_EXPORT = 1, 2, 3, 4, 5, 7
_PAGE_BYTES: Final = 65536

_ALLOC_SIG: Final = (("i32",), ("i32",))
_STEP_SIGS: Final[dict[tuple[tuple[str, ...], tuple[str, ...]], StepAbi]] = {
    (("i32", "i32"), ("i32", "i32")): "multi_value",
    (("i32", "i32", "i32"), ()): "retptr",
}


@dataclass(frozen=True, slots=True)
class FuncSig:
    params: tuple[str, ...]
    results: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WasmProblem:
    """One way the module misses the reducer ABI. ``code`` is stable; ``name`` is the export or
    import concerned."""

    code: Literal["imports", "export_missing", "export_kind", "alloc_signature", "step_signature"]
    name: str
    detail: str


@dataclass(frozen=True, slots=True)
class WasmInfo:
    """Imports as ``"module::name"``, exports as name -> kind (func, table, memory, global,
    tag), exported function signatures, the initial size of memory 0 (bytes, 0 if none), the
    ``step`` flavour if it has one, ABI problems, and the initial size of every table (elements,
    imported ones first)."""

    imports: list[str]
    exports: dict[str, str]
    func_exports: Mapping[str, FuncSig] = field(default_factory=dict)
    memory_min_bytes: int = 0
    step_abi: StepAbi | None = None
    problems: tuple[WasmProblem, ...] = ()
    error: str | None = None
    table_min_elements: tuple[int, ...] = ()


class _Reader:
    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def fail(self, detail: str) -> WasmFormatError:
        return WasmFormatError(self.pos, detail)

    def byte(self) -> int:
        if self.pos >= self.end:
            raise self.fail("unexpected end of section")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def u32(self) -> int:
        result, shift = 0, 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift >= 35:
                raise self.fail("LEB128 integer too long")
        if result >= 1 << 32:
            raise self.fail("LEB128 integer out of u32 range")
        return result

    def u64(self) -> int:
        result, shift = 0, 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7
            if shift >= 70:
                raise self.fail("LEB128 integer too long")

    def take(self, size: int) -> bytes:
        if self.pos + size > self.end:
            raise self.fail("length runs past the end of its section")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def name(self) -> str:
        raw = self.take(self.u32())
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail("name is not UTF-8") from exc

    def valtype(self) -> str:
        code = self.byte()
        if code not in _VALTYPES:
            raise WasmFormatError(self.pos - 1, f"unsupported value type 0x{code:02x}")
        return _VALTYPES[code]

    def limits(self) -> int:
        """Skip a limits record; return its minimum."""
        flags = self.byte()
        if flags > 0x0F:
            raise self.fail(f"unknown limits flags 0x{flags:02x}")
        read = self.u64 if flags & 0x04 else self.u32
        minimum = read()
        if flags & 0x01:
            read()
        if flags & 0x08:
            self.u32()  # custom page size (log2)
        return minimum


@dataclass
class _Sections:
    types: list[FuncSig] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    imported_funcs: list[int] = field(default_factory=list)
    funcs: list[int] = field(default_factory=list)
    memory_pages: list[int] = field(default_factory=list)
    table_elements: list[int] = field(default_factory=list)
    exports: list[tuple[str, int, int]] = field(default_factory=list)


def _read_types(r: _Reader, out: _Sections) -> None:
    for _ in range(r.u32()):
        form = r.byte()
        if form != 0x60:
            raise WasmFormatError(r.pos - 1, f"unsupported type form 0x{form:02x}")
        params = tuple(r.valtype() for _ in range(r.u32()))
        results = tuple(r.valtype() for _ in range(r.u32()))
        out.types.append(FuncSig(params, results))


def _read_imports(r: _Reader, out: _Sections) -> None:
    for _ in range(r.u32()):
        module, name, kind = r.name(), r.name(), r.byte()
        out.imports.append(f"{module}::{name}")
        if kind == 0x00:
            out.imported_funcs.append(r.u32())
        elif kind == 0x01:
            r.valtype()
            out.table_elements.append(r.limits())
        elif kind == 0x02:
            out.memory_pages.append(r.limits())
        elif kind == 0x03:
            r.valtype()
            r.byte()
        elif kind == 0x04:
            r.byte()
            r.u32()
        else:
            raise WasmFormatError(r.pos - 1, f"unknown import kind 0x{kind:02x}")


def _read_table(r: _Reader) -> int:
    """A table type's minimum (elements). A table with an initialiser expression (0x40 0x00,
    function references) is refused as malformed: that proposal is off in the engine."""
    r.valtype()
    return r.limits()


def _read_exports(r: _Reader, out: _Sections) -> None:
    for _ in range(r.u32()):
        name, kind, index = r.name(), r.byte(), r.u32()
        if kind not in _KINDS:
            raise WasmFormatError(r.pos - 1, f"unknown export kind 0x{kind:02x}")
        out.exports.append((name, kind, index))


def _read_sections(data: bytes) -> _Sections:
    if len(data) < len(_MAGIC) or data[:4] != _MAGIC[:4]:
        raise WasmFormatError(0, "missing the \\0asm magic number")
    if data[: len(_MAGIC)] != _MAGIC:
        raise WasmFormatError(4, "not a version-1 core module (a component, or another version)")
    out = _Sections()
    top = _Reader(data, len(_MAGIC))
    while top.pos < top.end:
        section_id = top.byte()
        size = top.u32()
        body = _Reader(data, top.pos, top.pos + size)
        top.take(size)
        if section_id == _SEC_TYPE:
            _read_types(body, out)
        elif section_id == _SEC_IMPORT:
            _read_imports(body, out)
        elif section_id == _SEC_FUNCTION:
            out.funcs = [body.u32() for _ in range(body.u32())]
        elif section_id == _SEC_TABLE:
            out.table_elements += [_read_table(body) for _ in range(body.u32())]
        elif section_id == _SEC_MEMORY:
            out.memory_pages += [body.limits() for _ in range(body.u32())]
        elif section_id == _SEC_EXPORT:
            _read_exports(body, out)
    return out


def _signature(sections: _Sections, func_index: int) -> FuncSig | None:
    type_indices = sections.imported_funcs + sections.funcs
    if func_index >= len(type_indices) or type_indices[func_index] >= len(sections.types):
        return None
    return sections.types[type_indices[func_index]]


def _problems(
    info_exports: dict[str, str], funcs: Mapping[str, FuncSig], imports: list[str]
) -> list[WasmProblem]:
    found: list[WasmProblem] = []
    if imports:
        found.append(
            WasmProblem(
                "imports", imports[0], f"reducers import nothing; found {', '.join(imports)}"
            )
        )
    for name, kind in (("memory", "memory"), ("alloc", "func"), ("step", "func")):
        actual = info_exports.get(name)
        if actual is None:
            found.append(WasmProblem("export_missing", name, f"no export named {name!r}"))
        elif actual != kind:
            found.append(
                WasmProblem("export_kind", name, f"export {name!r} is a {actual}, not a {kind}")
            )
    alloc, step = funcs.get("alloc"), funcs.get("step")
    if alloc is not None and (alloc.params, alloc.results) != _ALLOC_SIG:
        found.append(WasmProblem("alloc_signature", "alloc", "alloc must be (i32) -> i32"))
    if step is not None and (step.params, step.results) not in _STEP_SIGS:
        detail = "step must be (i32, i32) -> (i32, i32) or (i32, i32, i32) -> ()"
        found.append(WasmProblem("step_signature", "step", detail))
    return found


def inspect_wasm(wasm_bytes: bytes) -> WasmInfo:
    """Describe ``wasm_bytes``; raise ``WasmFormatError`` only if they are not a core module."""
    sections = _read_sections(wasm_bytes)
    exports = {name: _KINDS[kind] for name, kind, _ in sections.exports}
    funcs: dict[str, FuncSig] = {}
    for name, kind, index in sections.exports:
        sig = _signature(sections, index) if kind == 0 else None
        if sig is not None:
            funcs[name] = sig
    step = funcs.get("step")
    step_abi = _STEP_SIGS.get((step.params, step.results)) if step is not None else None
    problems = tuple(_problems(exports, funcs, sections.imports))
    memory_min_bytes = sections.memory_pages[0] * _PAGE_BYTES if sections.memory_pages else 0
    return WasmInfo(
        sections.imports,
        exports,
        funcs,
        memory_min_bytes,
        step_abi,
        problems,
        table_min_elements=tuple(sections.table_elements),
    )


def inspect_wasm_report(wasm_bytes: bytes) -> WasmInfo:
    """Like ``inspect_wasm`` but never raises: malformed bytes give ``WasmInfo(error=...)``."""
    try:
        return inspect_wasm(wasm_bytes)
    except WasmFormatError as exc:
        return WasmInfo([], {}, error=str(exc))
