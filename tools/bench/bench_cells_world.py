"""End to end over many cells (issue 11's targets): events/s of send + run + final checkpoint
for the same events over more and more cells, the checkpoint's time, open time, the store's
footprint per cell, and (``--replay``) replay from genesis.

Run by hand (not in CI)::

    python tools/bench/bench_cells_world.py                      # 100,000 events over 1k..100k
    python tools/bench/bench_cells_world.py --cells 1000000 --events 1000000

Workload: the keyed counter world (``manifests/counter``), E events ``Add 1`` to keys
``k<i mod N>`` sent with ``World.send_many`` in batches of B (one group commit each) and
``run_until_idle`` after each batch; automatic checkpoints happen as in production (every
``SNAPSHOT_DIRTY_MAX`` dirty cells); then ``World.snapshot`` and ``close``. Each size runs in
its own process, so one run's memory and caches do not help the next. Prints one JSON line per
size.

Each batch's events are made just before it is sent, as a stream brings them (a million events
made up front were two million dicts in the heap for the collector to walk: the bench's memory,
not the kernel's). The process runs the collector as the ``world`` CLI does
(``cli.main.COLLECTOR_THRESHOLDS``); ``--collector default`` keeps Python's defaults, as a
program embedding the library without tuning would have them.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cli.main import COLLECTOR_THRESHOLDS  # noqa: E402 - the repo root goes on sys.path first

EVENT = "demo/CounterEvent@1"


def footprint(world: Path) -> int:
    """Allocated bytes of the store: ``state/`` and ``cas/`` minus the AIR objects at creation."""
    total = 0
    for top in ("state", "cas"):
        for dirpath, _dirs, files in os.walk(world / top):
            total += sum(os.stat(os.path.join(dirpath, name)).st_blocks * 512 for name in files)
    return total


def run_one(cells: int, events: int, batch: int, folder: Path, replay: bool) -> dict[str, Any]:
    from world import World
    from world.history import verify_world

    path = folder / f"w-{cells}-{events}"
    world = World.create(path, ROOT / "manifests" / "counter")
    air_bytes = footprint(path)
    started = time.perf_counter()
    sending = 0.0
    for i in range(0, events, batch):
        values = [
            {"key": f"k{n % cells}", "op": {"$tag": "Add", "$value": 1}}
            for n in range(i, min(events, i + batch))
        ]
        t0 = time.perf_counter()
        world.send_many((EVENT, v) for v in values)
        sending += time.perf_counter() - t0
        world.run_until_idle()
    t0 = time.perf_counter()
    world.snapshot()
    checkpoint_s = time.perf_counter() - t0
    elapsed = time.perf_counter() - started
    world.close()
    out: dict[str, Any] = {
        "cells": cells,
        "events": events,
        "events_per_s": events / elapsed,
        "elapsed_s": elapsed,
        "send_events_per_s": events / sending,
        "final_checkpoint_s": checkpoint_s,
        "store_bytes_per_cell": (footprint(path) - air_bytes) / cells,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    t0 = time.perf_counter()
    World.open(path).close()
    out["open_s"] = time.perf_counter() - t0
    if replay:
        t0 = time.perf_counter()
        report = verify_world(path)
        out["replay_events_per_s"] = events / (time.perf_counter() - t0)
        assert report.ok, report
    shutil.rmtree(path)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--replay", action="store_true")
    parser.add_argument("--collector", choices=("cli", "default"), default="cli")
    parser.add_argument("--dir", type=Path, default=None, help="parent folder (default: temp)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-cells-world-", dir=args.dir))
    try:
        if args.one:
            if args.collector == "cli":
                gc.set_threshold(*COLLECTOR_THRESHOLDS)
            (cells,) = args.cells
            result = run_one(cells, args.events, args.batch, folder, args.replay)
            print(
                json.dumps(
                    {k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}
                )
            )
            return
        for cells in args.cells:
            command = [sys.executable, __file__, "--one", "--cells", str(cells)]
            command += ["--events", str(args.events), "--batch", str(args.batch)]
            command += ["--dir", str(folder), "--collector", args.collector]
            command += ["--replay"] if args.replay else []
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            print(done.stdout.strip(), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
