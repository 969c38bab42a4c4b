import os
import signal
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# The kits (``worldkit``, ``plans_kit``, ...) sit here, and the test files in folders that mirror
# the packages they check (``tests/world/cluster/`` for ``world.cluster``); a test module that
# takes helpers from another (``from test_cluster import ...``) finds it in any folder.
for _folder in sorted({p.parent for p in TESTS.rglob("test_*.py")}, reverse=True):
    sys.path.insert(0, str(_folder))
sys.path.insert(0, str(TESTS))

from zygote import world_bin  # noqa: E402, F401  (the fixture: `world` through a fork server)


def _hypothesis_profile() -> None:
    """Property tests draw the same examples on every run (``derandomize``: a suite's pass
    cannot hang on the draw; a new failing example once failed CI at random), unless
    ``WORLD_HYPOTHESIS_EXPLORE=1`` asks for fresh ones (by hand: TESTING.md, "Fuzzing").
    ``WORLD_EXAMPLES_SCALE`` scales the default count too (``fuzzkit.examples``)."""
    from fuzzkit import examples
    from hypothesis import settings

    explore = os.environ.get("WORLD_HYPOTHESIS_EXPLORE") == "1"
    settings.register_profile(
        "world",
        max_examples=examples(100),
        derandomize=not explore,
        database=None if not explore else settings.default.database,
    )
    settings.load_profile("world")


_hypothesis_profile()
__import__("cli_once").install()  # CliRunner builds the command tree once (tests/cli_once.py)


def pytest_configure() -> None:
    """Ctrl-C must reach the commands the tests start (several send SIGINT and expect 130). A
    suite started as a background job of a non-interactive shell inherits SIGINT ignored, and an
    ignored signal stays ignored across exec, so every child would ignore it too: restore the
    default here (each xdist worker runs this as well)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def fixed_wasm(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The counter example with a bug fixed (``fixtures/counter_fix``: Add(0) is not an
    event), built by the project's toolchain once per session: for upgrade tests."""
    from reducer_harness import load_build_tool

    out = tmp_path_factory.mktemp("counter_fix")
    built = load_build_tool().build_reducer(Path(__file__).parent / "fixtures" / "counter_fix", out)
    return Path(built.wasm_path).read_bytes()
