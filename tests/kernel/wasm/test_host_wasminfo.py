"""``inspect_wasm``: imports, exports and ABI problems reported as data; only bytes that are not
a core wasm module raise."""

from __future__ import annotations

import pytest

from kernel.errors import WasmFormatError
from kernel.wasm import WasmProblem, inspect_wasm, inspect_wasm_report
from kernel.wasm._info import FuncSig

from host_wat import reducer, reducer_wat, wasm


def test_a_good_reducer_has_no_problems_and_reports_its_exports() -> None:
    info = inspect_wasm(reducer())
    assert info.problems == ()
    assert info.imports == []
    assert info.exports == {"memory": "memory", "alloc": "func", "step": "func"}
    assert info.func_exports["step"] == FuncSig(("i32", "i32"), ("i32", "i32"))
    assert (info.step_abi, info.memory_min_bytes, info.error) == ("multi_value", 65536, None)


def test_the_retptr_step_flavour_is_recognised() -> None:
    info = inspect_wasm(reducer(step_abi="retptr"))
    assert info.step_abi == "retptr"
    assert info.func_exports["step"] == FuncSig(("i32", "i32", "i32"), ())


def test_imports_of_every_kind_are_listed_and_reported() -> None:
    imports = """
  (import "env" "f" (func (param i32)))
  (import "env" "t" (table 1 funcref))
  (import "env" "g" (global (mut i64)))"""
    info = inspect_wasm(wasm(reducer_wat().replace("(module", "(module" + imports, 1)))
    assert info.imports == ["env::f", "env::t", "env::g"]
    assert [p.code for p in info.problems] == ["imports"]


def test_an_imported_function_shifts_the_index_of_exported_ones() -> None:
    with_import = reducer_wat().replace(
        "(module", '(module (import "m" "n" (func (param i64))) ', 1
    )
    assert inspect_wasm(wasm(with_import)).func_exports["alloc"] == FuncSig(("i32",), ("i32",))


@pytest.mark.parametrize("missing", ["memory", "alloc", "step"])
def test_each_missing_abi_export_is_a_problem(missing: str) -> None:
    wat = reducer_wat().replace(f'(export "{missing}")', "")
    assert inspect_wasm(wasm(wat)).problems == (
        WasmProblem("export_missing", missing, f"no export named {missing!r}"),
    )


def test_an_export_of_the_wrong_kind_is_a_problem() -> None:
    wat = reducer_wat(extra='(global (export "alloc2") i32 (i32.const 0))').replace(
        '(export "alloc")', ""
    )
    wat = wat.replace('"alloc2"', '"alloc"')
    codes = [(p.code, p.name) for p in inspect_wasm(wasm(wat)).problems]
    assert codes == [("export_kind", "alloc")]


def test_wrong_alloc_and_step_signatures_are_problems() -> None:
    wat = """(module (memory (export "memory") 1)
      (func (export "alloc") (param i64) (result i32) (i32.const 0))
      (func (export "step") (param i32 i32) (result i32) (i32.const 0)))"""
    info = inspect_wasm(wasm(wat))
    assert [p.code for p in info.problems] == ["alloc_signature", "step_signature"]
    assert info.step_abi is None


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x7fELF\x02\x01", id="elf"),
        pytest.param(b"\x00asm\x0d\x00\x01\x00", id="component"),
        pytest.param(b"\x00asm\x01\x00\x00\x00\x01\x05\x01", id="truncated-section"),
        pytest.param(b"\x00asm\x01\x00\x00\x00\x07\x02\x01\x05", id="name-past-end"),
    ],
)
def test_bytes_that_are_not_a_core_module_raise(data: bytes) -> None:
    with pytest.raises(WasmFormatError) as caught:
        inspect_wasm(data)
    assert caught.value.offset >= 0
    assert inspect_wasm_report(data).error is not None


def test_the_report_variant_matches_inspect_for_a_module() -> None:
    assert inspect_wasm_report(reducer()) == inspect_wasm(reducer())


def test_every_table_s_initial_size_is_reported_imported_ones_first() -> None:
    tables = '(import "env" "t" (table 3 funcref)) (memory (export "memory") 1)'
    info = inspect_wasm(wasm(f"(module {tables} (table 7 20 externref))"))
    assert info.table_min_elements == (3, 7)
    assert inspect_wasm(reducer()).table_min_elements == ()
