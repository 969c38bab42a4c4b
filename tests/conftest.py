import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

if "WORLD_EXAMPLES_SCALE" in os.environ:  # the default count too (``fuzzkit.examples``)
    from fuzzkit import examples
    from hypothesis import settings

    settings.register_profile("scaled", max_examples=examples(100))
    settings.load_profile("scaled")


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
