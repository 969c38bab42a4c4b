"""The fault-injection script, and a child process that crashes itself at durable operation K.

``SCRIPT`` is a small workload on the counter world: create; ``send_many`` batches of different
sizes, each event with an id; ``step``; ``run_until_idle``; ``snapshot``; a retry of an earlier
batch (its ids: nothing new is journaled); close; reopen; another retry; more sends and runs;
close.
``run_script`` plays it and calls ``on_ack(index, world)`` after each action that returned
normally. It stops at the first action that raises and returns that action's index and exception
(after closing the handle it was using, as a ``with`` block would). The Add values are distinct
(1..11), so every journaled event names the action that sent it.

Usage as a child: ``world_fault_child.py WORLD AIR K``. A ``world._fileio`` fault hook counts the
durable operations and calls ``os._exit(137)`` at operation K (0-based; ``-1`` never crashes).
The child writes ``ack I`` to stdout (unbuffered, so a crash cannot lose it) after action I
returns, and, when it gets to the end, ``ops N`` with the number of operations it performed.

``world_fault_child.py --serve`` is the same child, made cheap: importing the world costs ~0.5 s
and one crash run ~0.05 s, and the suite crashes once per durable operation (~300 times). The
server imports once, then reads requests ``K WORLD AIR OUT`` from stdin; for each it forks a
process that runs the script as above with its output going to the file ``OUT``, waits for it,
and answers with its exit status. The forked process is a whole process that dies by
``os._exit`` at the operation, exactly like a fresh child; the server holds no world and no
thread when it forks (it only imported modules), so nothing is shared but the code. The server
also makes ``fsync``/``fdatasync``/``sync`` no-ops (``no_flush``); the direct mode keeps them.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from world import World
from world import _fileio as fileio

EVENT: Final = "demo/CounterEvent@1"
CRASH_STATUS: Final = 137
NO_FLUSH: Final = ("fsync", "fdatasync", "sync")
"""The flushes the server turns off (see ``no_flush``)."""

Batch = tuple[tuple[str, int], ...]
SCRIPT: Final[tuple[tuple[str, Any], ...]] = (
    ("create", None),
    ("send", (("a", 1), ("b", 2), ("a", 3))),
    ("send", (("b", 4),)),
    ("step", 2),
    ("send", (("a", 5), ("b", 6), ("a", 7), ("b", 8))),
    ("run", None),
    ("snapshot", None),
    ("retry", 1),
    ("send", (("a", 9),)),
    ("close", None),
    ("open", None),
    ("retry", 4),
    ("send", (("b", 10), ("a", 11))),
    ("step", 1),
    ("run", None),
    ("close", None),
)


def add(key: str, n: int) -> dict[str, Any]:
    return {"key": key, "op": {"$tag": "Add", "$value": n}}


def sent_by(index: int) -> Batch:
    """The (key, n) pairs action ``index`` journals (empty for other actions, and for a retry:
    its batch is journaled already)."""
    action, arg = SCRIPT[index]
    return tuple(arg) if action == "send" else ()


def run_script(
    world_dir: Path, air_dir: Path, on_ack: Callable[[int, World | None], None]
) -> tuple[int, Exception] | None:
    """Play ``SCRIPT``; None when every action returned, else (index, exception) of the first
    one that raised. ``on_ack`` gets the index and the handle the action used. The handle in
    use is closed before returning, as ``with`` would."""
    world: World | None = None
    for index, (action, arg) in enumerate(SCRIPT):
        used = world
        try:
            if action == "create":
                world = used = World.create(world_dir, air_dir)
            elif action == "open":
                world = used = World.open(world_dir)
            elif world is None:
                raise AssertionError(f"{action} without a world")
            elif action in ("send", "retry"):
                pairs = arg if action == "send" else SCRIPT[arg][1]
                events = [(EVENT, add(key, n)) for key, n in pairs]
                world.send_many(events, ids=[f"n{n}" for _key, n in pairs])
            elif action == "step":
                world.step(arg)
            elif action == "run":
                world.run_until_idle()
            elif action == "snapshot":
                world.snapshot()
            elif action == "close":
                world.close()
                world = None
        except Exception as exc:
            if world is not None:
                world.close()
            return index, exc
        on_ack(index, used)
    return None


def no_flush(*_fd: int) -> None:
    """Stands in for ``os.fsync``/``fdatasync``/``sync`` in the server: a crash by ``os._exit``
    keeps the page cache, so flushing changes nothing a crash test can observe, and it is most
    of a run's time. The fault hook still sees every flush, before this is called."""


def crash_run(world_dir: Path, air_dir: Path, crash_at: int, out_fd: int) -> None:
    """Play the script, dying with status 137 at durable operation ``crash_at``."""
    ops = 0

    def hook(_op: str, _path: str) -> None:
        nonlocal ops
        if ops == crash_at:
            os._exit(CRASH_STATUS)
        ops += 1

    def say(line: str) -> None:
        os.write(out_fd, f"{line}\n".encode())

    with fileio.fault_hook(hook):
        failed = run_script(world_dir, air_dir, lambda index, _world: say(f"ack {index}"))
    if failed is not None:
        say(f"failed {failed[0]} {type(failed[1]).__name__}")
    say(f"ops {ops}")


def serve() -> None:
    """Answer ``K WORLD AIR OUT`` lines with the exit status of a forked ``crash_run``."""
    for name in NO_FLUSH:
        setattr(os, name, no_flush)
    fileio._sync_data = no_flush  # bound to os.fdatasync at import: the journal's commits
    for line in sys.stdin:
        crash_at, world_dir, air_dir, out = line.split()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                crash_run(Path(world_dir), Path(air_dir), int(crash_at), fd)
                status = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(status)  # never return into the server's loop
        _, wait_status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(wait_status), flush=True)


def main() -> None:
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        crash_run(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.stdout.fileno())


if __name__ == "__main__":
    main()
