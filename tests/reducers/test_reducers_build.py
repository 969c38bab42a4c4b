"""The committed example reducers are reproducible builds of their sources and satisfy the ABI.

Every example is rebuilt into a temporary directory with ``tools/build_reducers.py`` and must be
byte-identical to the ``.wasm`` committed next to its source; a difference means the source,
the SDK or the flags changed without a rebuild. Skipped when the ``ziglang`` toolchain (a dev
extra) is not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import wasmtime

from reducer_harness import load_build_tool

pytest.importorskip("ziglang")

REPO_ROOT = Path(__file__).resolve().parents[2]


build_reducers = load_build_tool()
EXAMPLES = build_reducers.EXAMPLES


def _committed(name: str) -> Path:
    return REPO_ROOT / "reducers" / name / f"{name}.wasm"


@pytest.mark.parametrize("name", EXAMPLES)
def test_rebuilding_an_example_reproduces_the_committed_bytes(name, tmp_path):
    built = build_reducers.build_reducer(REPO_ROOT / "reducers" / name, tmp_path)
    assert built.wasm_path.read_bytes() == _committed(name).read_bytes()


@pytest.mark.parametrize("name", EXAMPLES)
def test_committed_example_has_no_imports_and_exactly_the_abi_exports(name):
    module = wasmtime.Module(wasmtime.Engine(), _committed(name).read_bytes())
    assert module.imports == []
    assert sorted(e.name for e in module.exports) == ["alloc", "memory", "step"]
    build_reducers.check_abi(name, _committed(name).read_bytes())


def test_example_modules_start_small_because_the_stack_is_64_kib():
    module = wasmtime.Module(wasmtime.Engine(), _committed("counter").read_bytes())
    (memory,) = [e.type for e in module.exports if e.name == "memory"]
    assert memory.limits.min <= 2  # one page of stack plus data, not zig's 1 MiB default


def test_check_mode_passes_on_the_committed_tree(capsys):
    assert build_reducers.main(["--check"]) == 0
    assert "DIFFERS" not in capsys.readouterr().out


def test_check_mode_fails_when_a_committed_module_differs(tmp_path, capsys):
    reducer_dir = tmp_path / "counter"
    reducer_dir.mkdir()
    source = REPO_ROOT / "reducers" / "counter" / "counter.c"
    (reducer_dir / "counter.c").write_bytes(source.read_bytes())
    (reducer_dir / "counter.wasm").write_bytes(b"\x00asm\x01\x00\x00\x00")
    assert build_reducers.main(["--check", str(reducer_dir)]) == 1
    assert "DIFFERS" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("source", "code"),
    [
        pytest.param(
            'extern int host_fn(void);\nEXPORT("step") int f(void) { return host_fn(); }\n',
            "compile",
            id="undefined_import_does_not_link",
        ),
        pytest.param(
            'EXPORT("f") int f(void) { return 0; }\n', "export_missing", id="no_abi_exports"
        ),
        pytest.param(
            'EXPORT("alloc") int a(int n) { return n; }\n'
            'EXPORT("step") int s(int p) { return p; }\n',
            "step_signature",
            id="wrong_step_signature",
        ),
    ],
)
def test_a_reducer_that_violates_the_abi_is_refused(source, code, tmp_path):
    reducer_dir = tmp_path / "bad"
    reducer_dir.mkdir()
    prelude = "#define EXPORT(name) __attribute__((export_name(name)))\n"
    (reducer_dir / "bad.c").write_text(prelude + source)
    with pytest.raises(build_reducers.BuildError) as info:
        build_reducers.build_reducer(reducer_dir, tmp_path)
    assert (info.value.reducer, info.value.code) == ("bad", code)


def test_a_module_with_imports_is_refused():
    wasm = wasmtime.wat2wasm(
        """(module (import "env" "f" (func))
             (memory (export "memory") 1)
             (func (export "alloc") (param i32) (result i32) i32.const 0)
             (func (export "step") (param i32 i32) (result i32 i32) i32.const 0 i32.const 0))"""
    )
    with pytest.raises(build_reducers.BuildError) as info:
        build_reducers.check_abi("imports", wasm)
    assert info.value.code == "imports"


def test_a_directory_without_exactly_one_source_is_refused(tmp_path):
    with pytest.raises(build_reducers.BuildError) as info:
        build_reducers.build_reducer(tmp_path, tmp_path)
    assert info.value.code == "source"
