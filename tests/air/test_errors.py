"""The error tree: drawn once (``air.errors``' docstring), held to the classes.

Every ``WorldError`` subclass lives in its layer's errors module (``air.errors``,
``kernel.errors``, ``world.errors``), is drawn under its real base with its real fields, and
every class but the family bases takes fields and builds its message from them. ``OSError``
becomes ``StorageError`` in one place (``world.errors.storage_error``).
"""

from __future__ import annotations

import errno
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import air
import air.errors
import kernel
import kernel.errors
import world
import world.errors
from air.errors import WorldError
from world.errors import StorageError, storage_error, storage_errors

ERROR_MODULES = ("air.errors", "kernel.errors", "world.errors")
FAMILY_BASES = {"WorldError", "DerivedStateError", "Refused", "WorldUnavailable", "ServeError"}
_LINE = re.compile(
    r"^(?P<indent>[ │]*)(?:[├└]── )?(?P<name>[A-Z]\w*)(?P<fields>\([^)]*\))?(?P<rest>.*)$"
)


def _drawing() -> dict[str, tuple[str | None, str, str | None]]:
    """Each drawn class: (its parent, its module, its fields as drawn)."""
    doc = air.errors.__doc__ or ""
    lines = [line[4:] for line in doc.splitlines() if line.startswith("    ") and line.strip()]
    drawn: dict[str, tuple[str | None, str, str | None]] = {}
    stack: list[tuple[int, str, str]] = []  # (depth, name, module)
    for line in lines:
        if "── " not in line and not line.startswith("WorldError"):
            continue  # a description's second line
        match = _LINE.match(line)
        assert match is not None, line
        depth = len(match.group("indent")) // 4 + (0 if line.startswith("WorldError") else 1)
        name = match.group("name")
        named = re.search(r"\b(air|kernel|world)\.errors\b", match.group("rest"))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1] if stack else None
        module = named.group(0) if named else (stack[-1][2] if stack else "air.errors")
        drawn[name] = (parent, module, match.group("fields"))
        stack.append((depth, name, module))
    return drawn


def _every_module() -> None:
    for package in (air, kernel, world):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("_native"):
                continue
            importlib.import_module(info.name)


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def test_every_error_class_is_in_its_layers_errors_module_and_drawn_under_its_base() -> None:
    _every_module()
    classes = {c for c in _subclasses(WorldError) if not c.__name__.startswith("_")}
    assert {c.__module__ for c in classes} <= set(ERROR_MODULES), sorted(
        f"{c.__module__}.{c.__name__}" for c in classes if c.__module__ not in ERROR_MODULES
    )
    drawn = _drawing()
    assert set(drawn) == {c.__name__ for c in classes} | {"WorldError"}
    for cls in classes:
        parent, module, _fields = drawn[cls.__name__]
        assert cls.__module__ == module, cls
        base = next(b for b in cls.__mro__[1:] if not b.__name__.startswith("_"))
        assert base.__name__ == parent, cls


def test_every_class_but_a_family_base_has_fields_and_draws_them() -> None:
    _every_module()
    drawn = _drawing()
    for cls in _subclasses(WorldError):
        if cls.__name__.startswith("_") or cls.__name__ in FAMILY_BASES:
            continue
        params = [p for p in inspect.signature(cls).parameters if p not in ("args", "kwargs")]
        assert params, f"{cls.__name__} has no fields"
        fields = drawn[cls.__name__][2]
        own = cls.__init__ is not cls.__bases__[0].__init__
        if own and fields is not None and "..." not in fields:
            listed = [f.strip() for f in fields.strip("()").split(",")]
            assert set(listed) <= set(params), cls.__name__  # a subclass draws what it adds


@pytest.mark.parametrize("name", sorted(FAMILY_BASES - {"WorldError"}))
def test_a_family_base_is_caught_for_its_members(name: str) -> None:
    base = getattr(world.errors, name)
    members = [c for c in vars(world.errors).values() if isinstance(c, type) and c is not base]
    assert any(issubclass(c, base) for c in members)


@pytest.mark.parametrize(
    ("code", "name"), [(errno.ENOSPC, "ENOSPC"), (errno.EIO, "EIO"), (None, "EUNKNOWN")]
)
def test_an_os_error_becomes_a_storage_error_with_its_errno_name(
    code: int | None, name: str, tmp_path: Path
) -> None:
    exc = OSError(code, "no room") if code is not None else OSError("odd")
    error = storage_error(exc, "write", tmp_path / "f")
    assert (error.path, error.operation, error.errno_name) == (str(tmp_path / "f"), "write", name)


def test_storage_errors_names_the_file_the_os_named_when_no_path_is_given(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(StorageError) as caught, storage_errors("read"):
        missing.read_bytes()
    assert (caught.value.path, caught.value.operation, caught.value.errno_name) == (
        str(missing),
        "read",
        "ENOENT",
    )
    assert isinstance(caught.value.__cause__, FileNotFoundError)
