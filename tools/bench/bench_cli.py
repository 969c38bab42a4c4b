"""CLI latency benchmark (issue 9 item 7; run by hand, not a timed test).

Builds a keyed-counter world of N events (``World.send_many`` batches, ``run_until_idle``,
then a snapshot), then times these as subprocesses, median of --repeat runs each:
``world --help``, ``world send`` of one event, ``world state``, ``world info``, and
``world cells show --at`` at a position in the middle of the journal.

The commands run with ``PYTHONDONTWRITEBYTECODE`` removed from their environment and one
untimed warm-up run each, as on a user's machine where Python caches compiled modules (some
sandboxes set it, which makes every run compile every module: ~0.1 s more per command).

    .venv/bin/python tools/bench/bench_cli.py [--events 100000] [--batch 10000] [--repeat 5]
        [--keep DIR]

With --keep DIR the world is built once in DIR and reused by later runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

EVENT = "demo/CounterEvent@1"
CELLS = 1000


def world_binary() -> list[str]:
    """The installed ``world`` script beside this interpreter, else ``python -m``-free import."""
    script = Path(sys.executable).with_name("world")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from cli.main import main; main()"]


def build(path: Path, events: int, batch: int) -> float:
    from world import World

    start = time.perf_counter()
    world = World.create(path, ROOT / "manifests" / "counter")
    for i in range(0, events, batch):
        n = min(batch, events - i)
        world.send_many(
            (EVENT, {"key": f"k{(i + j) % CELLS}", "op": {"$tag": "Add", "$value": 1}})
            for j in range(n)
        )
        world.run_until_idle()
    world.snapshot()
    world.close()
    return time.perf_counter() - start


def timed(argv: list[str], repeat: int) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    runs = []
    for attempt in range(repeat + 1):
        t0 = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env)
        if attempt:  # the first run is the warm-up
            runs.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", type=Path, default=None, help="Build (or reuse) the world here")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    path = args.keep if args.keep is not None else folder / "w"
    try:
        if args.keep is not None and path.exists():
            print(f"reusing {path}")
        else:
            print(f"building {args.events} events: {build(path, args.events, args.batch):.1f} s")
        world = world_binary()
        event = json.dumps({"key": "k1", "op": {"$tag": "Add", "$value": 1}})
        results = {
            "--help": timed([*world, "--help"], args.repeat),
            "send (1 event)": timed([*world, "send", str(path), EVENT, event], args.repeat),
            "state": timed(
                [*world, "state", str(path), "demo/Counter@1", "--key", '"k1"'], args.repeat
            ),
            "info": timed([*world, "info", str(path)], args.repeat),
            "cells show --at": timed(
                [
                    *world,
                    "cells",
                    "show",
                    str(path),
                    "demo/Counter@1",
                    '"k7"',
                    "--at",
                    str(args.events),
                ],
                args.repeat,
            ),
        }
        for name, seconds in results.items():
            print(f"{name:16} {seconds * 1000:8.0f} ms (median of {args.repeat})")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
