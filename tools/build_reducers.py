"""Build the repository's C reducers into reproducible, import-free wasm32 modules.

Usage::

    python tools/build_reducers.py [--check] [--out-dir DIR] [REDUCER_DIR ...]

A reducer directory holds exactly one ``<name>.c``; it is built next to itself as
``<name>.wasm`` (or into ``--out-dir``). No directories means every example in ``EXAMPLES``.
``--check`` rebuilds into a temporary directory and fails (exit 1) if any byte differs from the
committed ``.wasm``; it never writes into the tree.

This is a thin user of ``world.sdk`` (the pinned toolchain, the flags, the ABI checks), which
``world reducer build`` uses too; what it adds is the repository's layout: the compiler runs
from the repository root on ``reducers/<name>/<name>.c`` with ``-Ireducers/sdk``, and always
uses this checkout's SDK. It does not install the toolchain and does not touch manifests.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from world.errors import BuildError
from world.sdk import CFLAGS, Built, build, check_abi

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
EXAMPLES = (
    "counter",
    "counter_v2",
    "timer",
    "order",
    "session",
    "static_counter",
    "account",
    "account_v2",
    "agentos_counter",
    "agentos_timer",
    "agentos_blob_echo",
    "agentos_retry",
    "agentos_fetch_notify",
    "agentos_aggregator",
    "agentos_chain_comp",
    "agentos_safe_upgrade",
    "agentos_llm_summarizer",
    "sys_workspace",
    "sys_http_publish",
    "agentos_workspaces",
)


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


def build_reducer(reducer_dir: Path, out_dir: Path | None = None) -> Built:
    """Compile ``reducer_dir``'s source to ``<stem>.wasm`` (next to it, or in ``out_dir``)."""
    source = source_of(reducer_dir)
    wasm_path = (out_dir or reducer_dir) / f"{source.stem}.wasm"
    root = REPO_ROOT if source.resolve().is_relative_to(REPO_ROOT) else source.parent
    return build(source, wasm_path, root=root, sdk_dir=SDK_DIR)


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
