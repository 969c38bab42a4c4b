"""Build C reducers into reproducible, import-free wasm32 modules.

Usage::

    python tools/build_reducers.py [--check] [--out-dir DIR] [REDUCER_DIR ...]

A reducer directory holds exactly one ``<name>.c``; it is built next to itself as
``<name>.wasm`` (or into ``--out-dir``). No directories means every example in ``EXAMPLES``.
``--check`` rebuilds into a temporary directory and fails (exit 1) if any byte differs from the
committed ``.wasm``; it never writes into the tree.

Reproducibility: the toolchain is pinned (PyPI ``ziglang``, run as ``sys.executable -m ziglang
cc``), the compiler runs from the repository root on relative paths with
``-ffile-prefix-map=<root>=.``, debug info and the producers section are stripped (``-s``),
zig's linker adds ``--build-id=none``, and ``-Werror=date-time`` (zig's default) refuses
``__DATE__``/``__TIME__``. The same sources therefore give the same bytes on any machine.

Every module is checked after linking: no imports, exports exactly ``memory``, ``alloc`` and
``step``, with the ABI's signatures (SPEC section 5). This tool does not install the toolchain
and does not touch manifests.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import blake3
import wasmtime

__all__ = [
    "CFLAGS",
    "EXAMPLES",
    "REPO_ROOT",
    "BuildError",
    "Built",
    "build_reducer",
    "check_abi",
    "main",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
REDUCERS_DIR = REPO_ROOT / "reducers"
SDK_DIR = REDUCERS_DIR / "sdk"
EXAMPLES = ("counter", "timer", "order", "session", "static_counter")

# 64 KiB instead of zig's 1 MiB default: the initial memory (stack + data) is allocated and
# zeroed on every step because the host instantiates afresh; the SDK's stack use is small and
# bounded (see reducers/sdk/world.h). zig cc already links with --stack-first (and rejects the
# flag if repeated), so a stack overflow runs below address 0 and traps.
STACK_SIZE_BYTES = 64 * 1024

CFLAGS: tuple[str, ...] = (
    "--target=wasm32-freestanding",
    "-mcpu=lime1",  # pinned feature set; bulk-memory-opt lowers memcpy/memset without libc
    "-std=c11",
    "-O2",
    "-nostdlib",
    "-Wall",
    "-Wextra",
    "-Werror",
    f"-ffile-prefix-map={REPO_ROOT}=.",
    "-s",
    "-Wl,--no-entry",
    f"-Wl,-z,stack-size={STACK_SIZE_BYTES}",
)

_Signature = tuple[list[str], list[str]]
_ALLOC_TYPE: _Signature = (["i32"], ["i32"])
_STEP_TYPES: tuple[_Signature, ...] = (
    (["i32", "i32"], ["i32", "i32"]),
    (["i32", "i32", "i32"], []),
)


class BuildError(Exception):
    """A reducer failed to compile, or the module does not satisfy the reducer ABI.

    ``code`` is one of ``source`` (not exactly one .c file), ``compile``, ``imports``,
    ``exports`` (wrong set or kind of exports) and ``signature`` (an export's function type).
    """

    def __init__(self, reducer: str, code: str, detail: str) -> None:
        super().__init__(f"{reducer}: {detail}")
        self.reducer = reducer
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class Built:
    """One built module: where it is, and what it is."""

    source: Path
    wasm_path: Path
    size_bytes: int
    content_hash: str


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path.resolve())


def source_of(reducer_dir: Path) -> Path:
    """The single ``*.c`` file in ``reducer_dir``."""
    sources = sorted(reducer_dir.glob("*.c"))
    if len(sources) != 1:
        raise BuildError(str(reducer_dir), "source", f"expected one .c file, found {len(sources)}")
    return sources[0]


def compiler_command(source: Path, output: Path) -> list[str]:
    """The exact compiler invocation (run with the repository root as working directory)."""
    return [
        sys.executable,
        "-m",
        "ziglang",
        "cc",
        *CFLAGS,
        f"-I{_relative(SDK_DIR)}",
        "-o",
        str(output.resolve()),
        _relative(source),
    ]


def _type_names(types: Sequence[wasmtime.ValType]) -> list[str]:
    return [str(t) for t in types]


def check_abi(name: str, wasm_bytes: bytes) -> None:
    """Raise ``BuildError`` unless the module has no imports and exactly the ABI exports."""
    module = wasmtime.Module(wasmtime.Engine(), wasm_bytes)
    if module.imports:
        imported = [f"{i.module}.{i.name}" for i in module.imports]
        raise BuildError(name, "imports", f"module has imports: {imported}")
    exports = {e.name: e.type for e in module.exports}
    if sorted(exports) != ["alloc", "memory", "step"]:
        raise BuildError(name, "exports", f"exports must be memory, alloc, step: {sorted(exports)}")
    if not isinstance(exports["memory"], wasmtime.MemoryType):
        raise BuildError(name, "exports", "export 'memory' is not a memory")
    for export, allowed in (("alloc", (_ALLOC_TYPE,)), ("step", _STEP_TYPES)):
        func_type = exports[export]
        if not isinstance(func_type, wasmtime.FuncType):
            raise BuildError(name, "exports", f"export {export!r} is not a function")
        signature = (_type_names(func_type.params), _type_names(func_type.results))
        if signature not in allowed:
            raise BuildError(name, "signature", f"export {export!r} has signature {signature}")


def build_reducer(reducer_dir: Path, out_dir: Path | None = None) -> Built:
    """Compile ``reducer_dir``'s source to ``<stem>.wasm`` (next to it, or in ``out_dir``)."""
    source = source_of(reducer_dir)
    wasm_path = (out_dir or reducer_dir) / f"{source.stem}.wasm"
    command = compiler_command(source, wasm_path)
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(source.stem, "compile", result.stderr.strip())
    wasm_bytes = wasm_path.read_bytes()
    check_abi(source.stem, wasm_bytes)
    digest = "blake3:" + blake3.blake3(wasm_bytes).hexdigest()
    return Built(source, wasm_path, len(wasm_bytes), digest)


def _reducer_dirs(names: Sequence[str]) -> list[Path]:
    if not names:
        return [REDUCERS_DIR / name for name in EXAMPLES]
    return [Path(name) for name in names]


def _check(dirs: Sequence[Path]) -> int:
    failures = 0
    with tempfile.TemporaryDirectory(prefix="reducers-check-") as tmp:
        for reducer_dir in dirs:
            built = build_reducer(reducer_dir, Path(tmp))
            committed = reducer_dir / built.wasm_path.name
            same = committed.is_file() and committed.read_bytes() == built.wasm_path.read_bytes()
            verdict = "ok" if same else "DIFFERS from the committed module"
            print(f"{_relative(committed)}  {built.content_hash}  {verdict}")
            failures += 0 if same else 1
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reducer_dirs", nargs="*", metavar="REDUCER_DIR")
    parser.add_argument("--check", action="store_true", help="rebuild and compare, write nothing")
    parser.add_argument("--out-dir", type=Path, help="write modules here instead of in place")
    args = parser.parse_args(argv)
    dirs = _reducer_dirs(args.reducer_dirs)
    try:
        if args.check:
            return _check(dirs)
        if args.out_dir:
            args.out_dir.mkdir(parents=True, exist_ok=True)
        for reducer_dir in dirs:
            built = build_reducer(reducer_dir, args.out_dir)
            print(
                f"{_relative(built.wasm_path)}  {built.size_bytes:>7,} bytes  {built.content_hash}"
            )
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
