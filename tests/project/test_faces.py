"""The packages' faces: each ``__init__`` exports its supported API and nothing else runs.

A face lists its names in ``__all__`` and, for type checkers, imports them under
``TYPE_CHECKING``; the world's faces also map each name to its module (``_WHERE``). The lists
agree, every name resolves to the object its module defines, and a face imports nothing until a
name is used (``world --help`` loads no world module; ``air.errors`` brings no pydantic).
Outside a package, code uses its face, never its private modules (tests and tools aside).
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACES = (
    "air",
    "kernel",
    "kernel.wasm",
    "world",
    "world.journal",
    "world.cellstore",
    "world.effects",
    "world.serve",
    "world.history",
    "world.moves",
    "world.operate",
)


def _face(package: str) -> tuple[list[str], dict[str, str]]:
    """``__all__`` and the names the ``TYPE_CHECKING`` block imports, with their modules."""
    tree = ast.parse((ROOT / package.replace(".", "/") / "__init__.py").read_text())
    names: list[str] = []
    typed: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names = list(ast.literal_eval(node.value))
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                assert imp.module is not None
                typed.update({alias.name: imp.module for alias in imp.names})
    return names, typed


@pytest.mark.parametrize("package", FACES)
def test_a_face_exports_what_it_imports_for_the_type_checker_and_each_name_resolves(
    package: str,
) -> None:
    names, typed = _face(package)
    assert set(names) == set(typed)
    face = importlib.import_module(package)
    where = getattr(face, "_WHERE", None)
    if where is not None:
        assert where == typed
    for name in names:
        assert getattr(face, name) is getattr(importlib.import_module(typed[name]), name)
    with pytest.raises(AttributeError):
        _ = face.no_such_name


def _imported_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys; print('MODULES', *sorted(sys.modules))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    (line,) = [line for line in out.stdout.splitlines() if line.startswith("MODULES ")]
    return set(line.split()[1:])


def test_importing_a_face_or_the_errors_loads_nothing_behind_them() -> None:
    loaded = _imported_after("import air, kernel, world, world.errors, kernel.errors, air.errors")
    ours = {m for m in loaded if m.split(".")[0] in ("air", "kernel", "world")}
    assert ours == {"air", "air.errors", "kernel", "kernel.errors", "world", "world.errors"}
    assert "pydantic" not in loaded


def test_world_help_loads_no_world_or_kernel_module() -> None:
    loaded = _imported_after(
        "import sys; sys.argv = ['world', '--help']\n"
        "from cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    assert not {m for m in loaded if m.split(".")[0] in ("world", "kernel")}


_PRIVATE_IMPORT = re.compile(
    r"^\s*from ((?:air|kernel|world)(?:\.[a-z]+)*)(?:\.(_[a-z_]+))? import (.+)$", re.M
)


def test_outside_a_package_only_its_face_is_used() -> None:
    files = subprocess.run(
        ["git", "ls-files", "air", "kernel", "world", "cli"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    crossings = []
    for name in files:
        if not name.endswith(".py"):
            continue
        here = name[:-3].replace("/", ".").removesuffix(".__init__")
        for match in _PRIVATE_IMPORT.finditer((ROOT / name).read_text()):
            package, private, names = match.groups()
            if here == package or here.startswith(package + "."):
                continue  # a package's own parts
            if private is None and not re.search(r"(^|[ ,(])_[a-z]", names):
                continue  # through the face
            if package.split(".")[0] == "air" and private == "_face":
                continue  # the faces' own helper
            crossings.append(f"{name}: from {package}{'.' + private if private else ''}")
    assert crossings == []


def test_the_world_face_exports_every_error_the_world_raises() -> None:
    import world.errors

    classes = {
        name
        for name, value in vars(world.errors).items()
        if isinstance(value, type) and issubclass(value, Exception) and not name.startswith("_")
    }
    assert classes - {"WorldError"} <= set(_face("world")[0])


def test_the_world_face_is_what_an_application_uses_and_nothing_else() -> None:
    import air.errors
    import world.errors
    import world.ops

    names = set(_face("world")[0])
    models = {
        name
        for name in world.ops.__all__
        if isinstance(value := getattr(world.ops, name), type)
        and issubclass(value, (world.ops.Args, world.ops.Result))
        and value not in (world.ops.Args, world.ops.Result)
    }
    errors = {
        name
        for module in (world.errors, air.errors)
        for name in module.__all__
        if isinstance(value := getattr(module, name), type) and issubclass(value, Exception)
    }
    assert models <= names, "every operation's argument and result model"
    assert names - models - errors == {"open", "connect", "attach", "Handle", "World", "Engine"}


def test_only_the_cli_takes_the_names_the_world_face_keeps_for_it() -> None:
    import world

    kept = set(world._FOR_THE_CLI)
    assert not kept & set(world.__all__)
    files = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    takers = []
    for name in files:
        for node in ast.walk(ast.parse((ROOT / name).read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "world" and node.level == 0:
                taken = {alias.name for alias in node.names} & kept
                if taken and not name.startswith("cli/"):
                    takers.append(f"{name}: {sorted(taken)}")
    assert takers == []
