"""How the world package and its concept packages hand out their API on first use.

Each face (``world/__init__.py``, ``world/journal/__init__.py``, ...) lists its supported names
in ``__all__``, imports them under ``TYPE_CHECKING`` for type checkers, and maps each to the
private module that defines it (``_WHERE``); its ``__getattr__`` (PEP 562) calls ``export``,
which imports that one module. Lazy on purpose: a concept's modules import each other's parts
(``world._world`` needs the history index while ``world.history``'s time travel needs
``World``), which an eager face would turn into import cycles; and ``world --help`` imports no
world module at all. ``tests/project/test_faces.py`` holds each face's lists equal.

``air`` and ``kernel`` do the same through ``air._face``, without ``importlib`` (their purity
test bans it): their faces import their few private modules together.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["export"]


def export(package: str, where: Mapping[str, str], name: str, namespace: dict[str, Any]) -> Any:
    """``name`` from the module ``where`` maps it to, kept in the face's ``namespace`` so the
    next lookup is a plain attribute; ``AttributeError`` for a name the face does not map."""
    module = where.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
