import os
import signal
import sys
from pathlib import Path

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
