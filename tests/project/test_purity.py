"""``air/`` and ``kernel/`` stay pure: no module there imports anything that reads files,
clocks, randomness or the environment (SPEC §2). Walks the AST, so a lazy import inside a
function is caught too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BANNED = {
    "os",
    "io",
    "time",
    "datetime",
    "random",
    "secrets",
    "uuid",
    "pathlib",
    "tempfile",
    "shutil",
    "glob",
    "socket",
    "subprocess",
    "threading",
    "multiprocessing",
    "asyncio",
    "signal",
    "fcntl",
    "sqlite3",
    "urllib",
    "http",
    "importlib",
    "builtins",
    "sys",
    "world",
    "cli",
}
BANNED_CALLS = {"open", "input", "__import__", "eval", "exec"}


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in BANNED_CALLS
        ):
            found.append(f"{path.name}:{node.lineno} calls {node.func.id}()")
        found += [
            f"{path.name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in BANNED
        ]
    return found


@pytest.mark.parametrize(
    "path", _modules("air") + _modules("kernel"), ids=lambda p: str(p.relative_to(ROOT))
)
def test_pure_module_imports_no_io(path: Path) -> None:
    assert _violations(path) == []


def test_the_purity_check_catches_a_banned_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    import time\n    return open('x')\n")
    assert len(_violations(bad)) == 2
