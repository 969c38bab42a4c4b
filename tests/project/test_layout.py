"""The tests of a module are found by its name (``TESTING.md``, "Where a test lives").

A source module ``PKG/SUB/_name.py`` (or ``name.py``) of ``air``, ``kernel``, ``world`` or
``cli`` has its own tests in the mirrored folder ``tests/PKG/SUB/``, in a file whose name has
the module's name as a word: ``test_name.py``, ``test_name_<aspect>.py`` or
``test_<concept>_name.py`` (``ls tests/PKG/SUB/*name*`` finds them). A package's
``__init__.py`` is its folder: the folder's tests are the package's. ``__main__.py`` is not
counted.

Two lists keep what the convention does not hold yet explicit, and both only shrink:
``UNNAMED``, the modules whose tests live in their folder under the names of the behaviours
they check (the layout before this rule); and ``ELSEWHERE``, the source folders with no test
folder of their own, with the test file that covers them. A module added to the code gets a
test file named after it; one that gets such a file, moves or goes leaves ``UNNAMED``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
PACKAGES = ("air", "kernel", "world", "cli")

UNNAMED: dict[str, str] = {
    "air": "_builtins _canonical _checkers _ctx _diagnostics _diff _expr_eval _face _loaded "
    "_loader _model _plan_checks _plan_old_shapes _plan_types _scalars jsontext secretrefs types",
    "air/sys": "ondemand",
    "kernel": "_core _deadletters _divergence _effects _eras _moves _partition _plans _recorder "
    "_scheduler _steps _upgrades _urls abi cells errors journal subjects",
    "kernel/wasm": "_engine _fastcall _info _publiccall",
    "world": "_airfiles _airstore _archive _attach _directory _face _localconfig _modcache "
    "_object_check _prefixes _reading _recovery _runner _views _watch sdk",
    "world/cellstore": "_checkpoint _flush _shards _store",
    "world/cluster": "_layout _local _node _open _upgrade",
    "world/cluster/ray": "_actors _up",
    "world/effects": "_blob _http _pump _timer _workers",
    "world/gov": "_cells _proposals _shadow_report",
    "world/history": "_fork",
    "world/journal": "_batch _commit _frames _repair _seals _segments _verified",
    "world/moves": "_cellfiles _signing",
    "world/operate": "_deadletters",
    "world/ops": "_base _deadletters _effects _events _families _handle _history _journal "
    "_moves _runs _status _upgrades",
    "world/serve": "_dispatch _protocol _remote _server",
    "cli": "_runtext app archive cells cluster common core deadletters demo effects "
    "history journal main moves replay runs serve upgrade validate why",
    "cli/ui": "_app _dag _views",
}
"""Source folder -> its modules without a test file named after them."""

ELSEWHERE: dict[str, str] = {
    "world/cluster/ray": "world/cluster/test_cluster_ray.py",
}
"""Source folder without a test folder -> the test file (under ``tests/``) that covers it."""


def _sources() -> list[Path]:
    """Every source module, relative to the repository."""
    return sorted(
        path.relative_to(ROOT)
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    )


def named_tests(source: Path) -> list[Path]:
    """The test files named after ``source`` in its mirrored folder."""
    word = re.escape(source.stem.lstrip("_"))
    folder = TESTS / source.parent
    return sorted(
        path
        for path in folder.glob("test_*.py")
        if re.search(rf"(^|_){word}(_|$)", path.stem.removeprefix("test_"))
    )


def test_every_module_has_a_test_file_named_after_it_or_is_listed() -> None:
    unnamed = {(folder, name) for folder, names in UNNAMED.items() for name in names.split()}
    modules = [s for s in _sources() if s.name not in ("__init__.py", "__main__.py")]
    without = {(str(s.parent), s.stem) for s in modules if not named_tests(s)}
    assert sorted(without - unnamed) == [], "give these modules a test file named after them"
    assert sorted(unnamed - without) == [], "these have a named test file or are gone: unlist them"


def test_every_source_folder_has_its_test_folder_or_names_the_file_that_covers_it() -> None:
    folders = sorted({str(s.parent) for s in _sources()})
    for folder in folders:
        mirrored = sorted((TESTS / folder).glob("test_*.py"))
        if folder in ELSEWHERE:
            assert mirrored == [], f"{folder} has tests/{folder}/ now: unlist it from ELSEWHERE"
            assert (TESTS / ELSEWHERE[folder]).is_file(), ELSEWHERE[folder]
        else:
            assert mirrored, f"no tests/{folder}/test_*.py"
    assert sorted(set(ELSEWHERE) - set(folders)) == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("world/gov/_apply.py", "test_upgrade_apply.py"),
        ("kernel/wasm/_host.py", "test_host_abi.py"),
        ("world/gov/_proposals.py", None),  # test_upgrade_propose.py: another word
    ],
)
def test_a_named_test_file_has_the_module_name_as_a_word(source: str, found: str | None) -> None:
    names = [p.name for p in named_tests(Path(source))]
    assert (found in names) if found else names == []
