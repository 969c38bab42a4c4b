"""Progress bars for long work (``world replay``, ``migrate cells``, ``send --file`` of a big
file, ``run`` and ``step``), drawn on stderr, and only when stderr is a terminal and the command
is not in ``--json`` mode. Everywhere else (pipes, files, CI, tests) the helpers do nothing, so
what a command prints is the same byte for byte with or without them.

``WORLD_PROGRESS`` overrides the terminal check: ``1`` draws the bars on stderr even when it is
not a terminal (as if it were one: for tests, and for terminals behind ``script`` or ``tee``),
``0`` never draws them. ``--json`` always turns them off.

World-level work takes ``progress: Callable[[int, int], None] | None`` (done, total), called
from the working thread. ``bar`` yields such a callback, or None when bars are off, so callers
pass it straight through and the work does not even count when nobody watches. ``counter``
is for work that has no callback (``world run`` inside the effect loop): the bar's own refresh
thread reads a count (an int the work keeps anyway, read and never written: the kernel stays
untouched). Bars are transient: the bar is erased when the work ends, and the streams are not
redirected meanwhile (rich's ``Live`` would otherwise route stdout through stderr).

Not here: the determinism rule's side of this. Progress never reaches ``air/`` or ``kernel/``:
they must not read time, and a bar is all about time.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

__all__ = ["ENV", "ProgressFn", "bar", "counter", "enabled"]

ENV: Final = "WORLD_PROGRESS"
ProgressFn = Callable[[int, int], None]
"""``progress(done, total)``: ``done`` of ``total`` units; counts only grow."""


def enabled(json_output: bool = False) -> bool:
    """Whether to draw: never with ``--json``; ``WORLD_PROGRESS`` if set; else stderr's TTY."""
    if json_output:
        return False
    forced = os.environ.get(ENV, "")
    if forced in ("0", "1"):
        return forced == "1"
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr: no terminal
        return False


def _progress(*columns: Any) -> Any:
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        *columns,
        TimeElapsedColumn(),
        console=Console(stderr=True, force_terminal=True, highlight=False),
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )


@contextmanager
def bar(label: str, *, json_output: bool = False) -> Iterator[ProgressFn | None]:
    """A bar for work that reports ``progress(done, total)``; yields None when bars are off."""
    if not enabled(json_output):
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn

    with _progress(BarColumn(), MofNCompleteColumn()) as progress:
        task = progress.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield update


@contextmanager
def counter(
    label: str,
    count: Callable[[], int],
    *,
    total: int | None = None,
    unit: str = "steps",
    json_output: bool = False,
) -> Iterator[None]:
    """A spinner (or a bar, when ``total`` is known) showing ``count()`` ``unit``, read by the
    bar's refresh thread while the work runs. ``count`` must only read."""
    if not enabled(json_output):
        yield
        return
    from rich.progress import ProgressColumn, Task
    from rich.progress_bar import ProgressBar
    from rich.text import Text

    class Count(ProgressColumn):
        def render(self, task: Task) -> Text:
            return Text(f"{count()} {unit}" + ("" if total is None else f" of {total}"))

    class CountBar(ProgressColumn):  # the bar drawn from count(), not from the task
        def render(self, task: Task) -> ProgressBar:
            return ProgressBar(total=total, completed=min(count(), total or 0), width=40)

    columns = (CountBar(),) if total is not None else ()
    with _progress(*columns, Count()) as progress:
        progress.add_task(label, total=total)
        yield
