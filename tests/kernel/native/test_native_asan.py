"""The native step path's tests, run once under AddressSanitizer.

Builds ``kernel.native._native`` with ``-fsanitize=address`` (through ``setup.py build_ext``, with
``WORLD_NATIVE_CFLAGS``) into a copy of the source tree in a temporary folder, then runs the
parity and fuzz tests there in a subprocess with ``LD_PRELOAD`` of gcc's ``libasan`` (Python
itself is not built with ASan, so the runtime must come first). Any invalid read or write in the
C code aborts that run with an ASan report, which this test shows. Leak detection is off
(CPython keeps its arenas to exit) and ASan leaves SIGSEGV to wasmtime, whose traps use it.
Skipped, with the reason, only where gcc or its libasan is missing. Marked ``long`` (about two
minutes of one core): ``tools/check.sh`` runs it after the main suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
COPIED = ("air", "kernel", "world", "cli", "tests", "tools", "manifests", "reducers", "setup.py")
ASAN_OPTIONS = (
    "detect_leaks=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:allow_user_segv_handler=1:"
    "abort_on_error=0:exitcode=86"
)
ASAN_FUZZ_RUNS = 1000
"""The atheris run's inputs under ASan (the plain suite runs more): under ASan an input costs
~5 times as much, and what ASan adds is a check of every C access on the paths these reach;
the hypothesis and seeded tests beside it run in full."""


ASAN_EXAMPLES_SCALE = 0.2
"""The property tests' example counts under ASan (``fuzzkit.examples``), for the same reason:
300 examples of a shard merge cost ~5 times as much there."""


def _libasan() -> str | None:
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    found = subprocess.run(
        [gcc, "-print-file-name=libasan.so"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return found if os.path.isabs(found) and os.path.exists(found) else None


def _copy_tree(target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.so", ".hypothesis", "corpus")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=ignore)
        else:
            shutil.copy2(source, target / name)
    shutil.copy2(ROOT / "pyproject.toml", target / "pyproject.toml")


@pytest.mark.long
@pytest.mark.skipif(_libasan() is None, reason="gcc's libasan.so is not installed")
def test_the_native_tests_pass_under_address_sanitizer(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    _copy_tree(tree)
    env = {**os.environ, "WORLD_NATIVE_CFLAGS": "-fsanitize=address -fno-omit-frame-pointer -g"}
    build = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    built = list((tree / "kernel" / "native").glob("_native*.so"))
    assert build.returncode == 0, build.stderr[-3000:]
    assert built, build.stderr[-3000:]
    assert b"__asan_report" in built[0].read_bytes(), "the extension was not built with ASan"
    env = {
        **os.environ,
        "LD_PRELOAD": str(_libasan()),
        "ASAN_OPTIONS": ASAN_OPTIONS,
        "PYTHONPATH": str(tree),
        "PYTHONDONTWRITEBYTECODE": "1",
        "WORLD_FUZZ_RUNS": str(ASAN_FUZZ_RUNS),
        "WORLD_EXAMPLES_SCALE": str(ASAN_EXAMPLES_SCALE),
    }
    where = subprocess.run(
        [sys.executable, "-c", "import kernel.native._native as n; print(n.__file__)"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert where.stdout.strip() == str(built[0]), where.stderr[-3000:]
    tests = [
        "tests/kernel/native/test_native_parity.py",
        "tests/kernel/native/test_native_fuzz.py",
        "tests/kernel/native/test_native_shard.py",
        "tests/world/cellstore/test_cellstore_merge.py",
    ]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-x", "-m", "not long", *tests],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,  # a guard against a hang only: the runs are bounded by input counts
        check=False,
    )
    report = run.stdout[-4000:] + run.stderr[-6000:]
    assert "AddressSanitizer" not in run.stderr, report
    assert run.returncode == 0, report
    assert " passed" in run.stdout, report
