"""Child for the kill -9 tests of a checkpoint: opens a world, changes its cells, and checkpoints
it, SIGKILLing itself at durable operation K of the checkpoint (``World.snapshot``: the journal
commit, the snapshot object, the cell store's plan, objects, sync, commit and collection).

``cellstore_crash_child.py --serve``: imports once, then for each request line ``K WORLD OUT``
forks a process that runs ``crash_run`` (``K`` = -1 runs to the end and writes ``ops N`` to
``OUT``) and answers with how it ended (``killed`` or ``exit <status>``). As in
``world_fault_child``, the server holds no world and no thread when it forks, and turns
``fsync``/``fdatasync``/``sync`` into no-ops: a kill keeps the page cache, so flushing changes
nothing these tests can see. The cell store's inline limit is set to ``INLINE_BYTES_MAX`` so
that counter states cross it (16 bytes inline, larger ones out of line) and two keys that get
the same events share one out-of-line state.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from world import World
from world import _fileio as fileio
from world.cellstore import FileCellStore

EVENT: Final = "demo/CounterEvent@1"
INLINE_BYTES_MAX: Final = 17
NO_FLUSH: Final = ("fsync", "fdatasync", "sync")


def use_small_inline_limit() -> None:
    defaults = FileCellStore.__init__.__kwdefaults__
    assert defaults is not None
    defaults["cell_inline_bytes_max"] = INLINE_BYTES_MAX


def add(key: str, n: int) -> dict[str, object]:
    return {"key": key, "op": {"$tag": "Add", "$value": n}}


def base_events() -> list[tuple[str, dict[str, object]]]:
    """Before the checkpoint under test: small states everywhere."""
    return [(EVENT, add(key, 1)) for key in ("a", "b", "c", "d", "e", "f", "g", "h")]


def change_events() -> list[tuple[str, dict[str, object]]]:
    """a and b grow alike (one shared out-of-line state); c goes large; d is deleted."""
    return [
        (EVENT, add("a", 300)),
        (EVENT, add("b", 300)),
        (EVENT, add("c", 400)),
        (EVENT, add("e", 2)),
        (EVENT, {"key": "d", "op": "Clear"}),
        (EVENT, add("i", 5000)),
    ]


def crash_run(world_dir: Path, crash_at: int, out_fd: int) -> None:
    use_small_inline_limit()
    with World.open(world_dir) as world:
        world.send_many(change_events())
        world.run_until_idle()
        ops = 0

        def hook(_op: str, _path: str) -> None:
            nonlocal ops
            if ops == crash_at:
                os.kill(os.getpid(), signal.SIGKILL)
            ops += 1

        with fileio.fault_hook(hook):
            world.snapshot()
        os.write(out_fd, f"ops {ops}\n".encode())
        world.stale = (
            "a test: no second checkpoint on close"  # a stale world closes without a checkpoint
        )


def _no_flush(*_fd: int) -> None:
    """Stands in for ``os.fsync``/``fdatasync``/``sync`` (see the module docstring)."""


def serve() -> None:
    for name in NO_FLUSH:
        setattr(os, name, _no_flush)
    for line in sys.stdin:
        crash_at, world_dir, out = line.split()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                crash_run(Path(world_dir), int(crash_at), fd)
                status = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(status)
        _pid, wait_status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(wait_status) and os.WTERMSIG(wait_status) == signal.SIGKILL:
            answer = "killed"
        else:
            answer = f"exit {os.waitstatus_to_exitcode(wait_status)}"
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
