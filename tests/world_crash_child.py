"""Child process for the kill -9 tests: a scripted run that SIGKILLs itself at commit number K.

Usage: world_crash_child.py WORLD K MODE   (MODE: before = die before the K-th commit writes,
after = die right after it is durable but before the call returns). Prints one line per
acknowledged call, flushed, only after the call has returned.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from world import World
from world.journal import FileJournal

EVENT = "demo/CounterEvent@1"
SCRIPT = [
    ("send", 1),
    ("send", 2),
    ("step", 1),
    ("send", 3),
    ("send", 4),
    ("step", 2),
    ("send", 5),
    ("step", 5),
]


def main() -> None:
    world_dir, die_at, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    real_commit = FileJournal.commit
    calls = 0

    def commit(self: FileJournal, *, atomic: bool = False) -> int:
        nonlocal calls
        calls += 1
        if calls == die_at and mode == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = real_commit(self, atomic=atomic)
        if calls == die_at and mode == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    FileJournal.commit = commit  # type: ignore[method-assign]
    world = World.open(world_dir)
    for action, n in SCRIPT:
        if action == "send":
            world.send(EVENT, {"key": f"k{n % 2}", "op": {"$tag": "Add", "$value": n}})
        else:
            world.step(n)
        print(f"ack {action} {n}", flush=True)
    world.close()
    print(f"commits {calls}", flush=True)


if __name__ == "__main__":
    main()
