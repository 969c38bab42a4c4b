"""The planted bugs of ``tools/mutants/planted.py`` still apply to the code as it is now.

The run itself (plant each, run its tests, expect a failure) is by hand (``TESTING.md``): it
rebuilds the native extension and runs slow files. This keeps its list from rotting: a plant
whose text no longer occurs exactly once would be reported as stale by that run, so it fails
here first, at the change that moved the code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "mutants" / "planted.py"
_spec = importlib.util.spec_from_file_location("planted", TOOL)
assert _spec is not None
assert _spec.loader is not None
planted = importlib.util.module_from_spec(_spec)
sys.modules["planted"] = planted  # dataclasses look their module up while the class is made
_spec.loader.exec_module(planted)


@pytest.mark.parametrize("plant", planted.PLANTS, ids=lambda p: p.path)
def test_the_plant_still_applies_once(plant: object) -> None:
    assert planted.check(plant) is None


@pytest.mark.parametrize("plant", planted.PLANTS, ids=lambda p: p.path)
def test_the_plant_changes_the_code_and_names_tests_that_exist(plant: object) -> None:
    assert plant.old != plant.new  # type: ignore[attr-defined]
    root = TOOL.parents[2]
    for test in plant.tests:  # type: ignore[attr-defined]
        assert (root / test).is_file(), test


def test_there_are_twenty() -> None:
    assert len(planted.PLANTS) == 20
