"""The floors of the house and no circles: every import of ``air``, ``kernel``, ``world`` and
``cli`` (at the top of a module, inside a function, or only for the type checker) goes down a
floor or stays on its own, and no set of modules imports itself round, however hidden.

The floors are ``docs/ARCHITECTURE.md``'s: ``air`` <- ``kernel`` <- ``world`` <- ``cli``.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLOORS = {"air": 1, "kernel": 2, "world": 3, "cli": 4}


def _modules() -> dict[str, Path]:
    files = subprocess.run(
        ["git", "ls-files", *FLOORS], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    found = {}
    for name in files:
        if name.endswith((".py", ".pyi")) and "/_bundle/" not in name:
            module = name.rsplit(".", 1)[0].replace("/", ".").removesuffix(".__init__")
            found[module] = ROOT / name
    return found


def _imports(path: Path, here: str, modules: dict[str, Path]) -> set[str]:
    """Every project module ``path`` imports, wherever the import statement is."""
    found = set()
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [  # a submodule named in the import, else the package (its face)
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != here:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def test_every_import_goes_down_a_floor_or_stays_on_its_own() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in _graph().items()
        for target in targets
        if FLOORS[target.split(".")[0]] > FLOORS[module.split(".")[0]]
    ]
    assert upward == []


def test_no_modules_import_each_other_round() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert circles == []
