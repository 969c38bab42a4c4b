"""How a package's face hands out its API on first use (PEP 562 ``__getattr__``).

A face (``air/__init__.py``, ``kernel/__init__.py``, ``world/__init__.py`` and the concept
packages' ``__init__``) lists its supported names in ``__all__`` and, for type checkers, imports
them under ``TYPE_CHECKING``; at run time its ``__getattr__`` imports the private modules that
define them and calls ``export``. So importing a package costs nothing until one of its names
is used: ``world --help`` imports ``air.errors`` alone. ``tests/project/test_faces.py`` holds each
face's two lists equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["export"]


def export(
    package: str, name: str, modules: Sequence[ModuleType], namespace: dict[str, Any]
) -> Any:
    """``name`` from the first of ``modules`` that has it, kept in the face's ``namespace``
    so the next lookup is a plain attribute. The face checks ``name`` against its ``__all__``
    before it imports ``modules``: importing a submodule asks the package for it first, and
    that lookup must not come back here."""
    for module in modules:
        found = vars(module).get(name, namespace)
        if found is not namespace:
            namespace[name] = found
            return found
    raise AttributeError(f"module {package!r} has no attribute {name!r}")
