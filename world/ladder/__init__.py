"""AgentOS's example ladder, rung by rung: one driver per rung runs its bundled example
(``agentos-NN-*``) to the end its README states. ``world demo --ladder`` and the tests call
the same drivers, as AgentOS's ``aos-examples`` runs its own.

    from world.ladder import RUNGS, drive
    for name in RUNGS:
        path = drive(name, folder)      # the world it made, closed; replay it to check

A driver raises ``RungFailed`` naming what differs from the README (got against wanted).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Final

from world.ladder._kit import Rung, RungFailed, Say, quiet

__all__ = ["RUNGS", "Rung", "RungFailed", "Say", "drive", "quiet", "rung"]

RUNGS: Final[tuple[str, ...]] = (
    "rung00",
    "rung01",
    "rung02",
    "rung03",
    "rung04",
    "rung05",
    "rung06",
    "rung07",
    "rung08",
    "rung09",
)
"""The rungs with a driver, in the ladder's order (module names under ``world.ladder``)."""


def rung(name: str) -> Rung:
    """The rung ``name`` (one of ``RUNGS``)."""
    if name not in RUNGS:
        raise KeyError(f"no rung {name!r}: the rungs are {', '.join(RUNGS)}")
    found: Rung = importlib.import_module(f"world.ladder.{name}").RUNG
    return found


def drive(name: str, folder: Path, say: Say = quiet) -> Path:
    """Runs rung ``name`` in a new world at ``folder / "world"`` (``folder`` made if it is
    not there; a driver may keep files beside the world in it) and returns that path."""
    path = folder / "world"
    folder.mkdir(parents=True, exist_ok=True)
    rung(name).drive(path, say)
    return path
