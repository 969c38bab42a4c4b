"""The ``world`` console entry point (``[project.scripts]``) and ``python -m cli``'s: ``main``.

Start-up and Ctrl-C. Loading the app (``cli.app``) imports typer and click (rich comes when a
command first prints), ~0.05-0.1 s of imports; a SIGINT in them used to raise
``KeyboardInterrupt`` in the middle of one and print a 20-line traceback. So this module imports only the standard library, and ``main`` puts a SIGINT
handler in place before it loads the app that writes one line (``interrupted``) and exits 130
at once: nothing has been read or written yet, so there is nothing to finish. ``cli.app.run``
puts the usual handler back inside its ``try``, so from that instant a Ctrl-C is the app's to
handle (one line, exit 130; a command that changes the world defers it to a tick boundary,
``cli.common.signals_deferred``). A SIGINT the parent ignores stays ignored.

Not covered: a SIGINT before ``main`` runs, in Python's own start-up (~10 ms before it installs
its handler, when the signal simply ends the process; then ``site``, ~15-25 ms, where it is a
"Fatal Python error" with a traceback), the console script's first lines and this module's
import (~3 ms: it imports ``gc``, ``os`` and ``signal`` alone, not even ``typing``). No code of
ours runs earlier.

``app`` is still importable from here (``from cli.main import app``, as tests and tools do); it is
loaded on first use, so that importing ``main`` stays cheap.

Rejected: a ``try/except KeyboardInterrupt`` around the import of the app. The exception can
land inside a library's own ``try`` or ``finally`` and be swallowed or replaced, and an import
cut short leaves a half-initialised module in ``sys.modules``; the handler exits before any of
that can matter.
"""

from __future__ import annotations

import gc
import os
import signal

TYPE_CHECKING = False  # typing's, without importing typing: ~4 ms more of unguarded start-up
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, Final

    from cli.app import app

__all__ = ["COLLECTOR_THRESHOLDS", "app", "main"]

COLLECTOR_THRESHOLDS: Final = (100_000, 20, 100)
"""The collector's thresholds for a ``world`` process. The default first threshold (700
allocations) makes it run every few events of a big send or replay, over a heap that only
grows: measured on the issue-4 workload, native path, same window, a threshold of 50,000 took
send from 46,500 to 67,700 events/s and replay from 13,700 to 22,400 (steps unchanged). At
100,000 a run of 10,000 events over 10,000 cells leaves the young generation below it (a batch's
deliveries and mailboxes die before it fills): 1,000,000 events over 10,000 cells spent 0.03 s
in the collector instead of ~1 s, and over 1,000,000 new cells 1.6 s instead of 3.4 (its
callbacks timed, three runs each). The cost is cyclic garbage (rare here: a failed step's
traceback) waiting up to 100,000 allocations to go; 200,000 saved ~0.4 s more at a million
cells for twice that. The process is ours, so it is set in ``main``, not in the world library (a program embedding it
keeps its own policy); ``tools/bench`` runs the kernel with it, as ``world`` does."""


def main() -> None:
    """The console entry point: set the collector, guard start-up against Ctrl-C, run the app."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    previous = signal.getsignal(signal.SIGINT)
    guarded = previous is signal.default_int_handler  # not SIG_IGN, nor an embedder's own
    if guarded:
        signal.signal(signal.SIGINT, _interrupted_at_start_up)
    from cli.app import run

    run(previous if guarded else None)


def _interrupted_at_start_up(signum: int, frame: FrameType | None) -> None:
    os.write(2, b"interrupted\n")
    os._exit(130)  # cli.common.EXIT_INTERRUPTED, not imported: it would bring typer with it


def __getattr__(name: str) -> Any:
    """``app``: the typer app of ``cli.app``, imported on first use."""
    if name == "app":
        from cli.app import app

        return app
    raise AttributeError(f"module 'cli.main' has no attribute {name!r}")
