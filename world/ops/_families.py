"""Every family of operations, imported so that each registers its operations."""

from world.ops import (  # noqa: F401
    _cells,
    _deadletters,
    _effects,
    _events,
    _history,
    _journal,
    _moves,
    _runs,
    _status,
    _upgrades,
)
