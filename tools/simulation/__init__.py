"""The seeded whole-world simulation behind ``tools/simulate.py`` (its docstring says what is
simulated and checked). Parts: ``_world`` (the world's AIR, the world, the adapter whose answers
the script schedules, ``Failure``), ``_script`` (the actions a seed draws), ``_sim`` (one world
in one process: the actions, crashes, power cuts, disk faults and the invariants), ``_shrink``
(running a script on a fresh world, shrinking a failure, printing).

Importing it puts the repository and ``tests/`` on ``sys.path``: the power-loss fake
(``tests/powerloss.py``) is a test kit, and this is a development tool, never shipped.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

_ROOT: Final = Path(__file__).resolve().parents[2]
for _path in (_ROOT / "tests", _ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from simulation._script import Action, draw_script  # noqa: E402
from simulation._shrink import Outcome, check_seed, run_script, shrink, simulate  # noqa: E402

__all__ = ["Action", "Outcome", "check_seed", "draw_script", "run_script", "shrink", "simulate"]
