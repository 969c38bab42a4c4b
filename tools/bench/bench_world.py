"""End-to-end kernel benchmark (run by hand; results go to BENCHMARKS.md).

Workload (issue 4): keyed counter, N cells, E events sent in batches, run until idle, durable
journal; then replay from genesis; then open time. Also events/s across cell counts.

    .venv/bin/python tools/bench/bench_world.py [--cells 10000] [--events 200000] [--batch 10000]
    WORLD_NATIVE=0 .venv/bin/python tools/bench/bench_world.py ...   # the pure-Python path

Compare the two paths pairwise in one window (the machine's speed drifts): native, pure, native,
pure. The line printed names the path that ran.

``--collector cli`` runs the collector as the ``world`` CLI does (``cli.main.COLLECTOR_THRESHOLDS``);
the default keeps Python's thresholds, as every figure before 2026-11-26 09:20 was measured.
"""

from __future__ import annotations

import argparse
import gc
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cli.main import COLLECTOR_THRESHOLDS  # noqa: E402
from kernel import native  # noqa: E402
from world import World  # noqa: E402
from world.history import verify_world  # noqa: E402

EVENT = "demo/CounterEvent@1"


def run(cells: int, events: int, batch: int, folder: Path) -> dict[str, float]:
    path = folder / f"w-{cells}-{events}"
    world = World.create(path, ROOT / "manifests" / "counter")
    values = [{"key": f"k{i % cells}", "op": {"$tag": "Add", "$value": 1}} for i in range(events)]
    start = time.perf_counter()
    sending = 0.0
    for i in range(0, events, batch):
        t0 = time.perf_counter()
        world.send_many((EVENT, v) for v in values[i : i + batch])
        sending += time.perf_counter() - t0
        world.run_until_idle()
    loop_s = time.perf_counter() - start
    t0 = time.perf_counter()
    world.snapshot()
    checkpoint_s = time.perf_counter() - t0
    elapsed = time.perf_counter() - start
    world.close()
    t0 = time.perf_counter()
    World.open(path).close()
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = verify_world(path)
    replay_s = time.perf_counter() - t0
    assert report.ok, report
    shutil.rmtree(path)
    return {
        "events_per_s": events / elapsed,
        "send_events_per_s": events / sending,
        "step_events_per_s": events / (loop_s - sending),
        "checkpoint_s": checkpoint_s,
        "replay_events_per_s": events / replay_s,
        "open_s": open_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--sweep", action="store_true", help="events/s for 100 .. 1,000,000 cells")
    parser.add_argument("--collector", choices=("default", "cli"), default="default")
    args = parser.parse_args()
    if args.collector == "cli":
        gc.set_threshold(*COLLECTOR_THRESHOLDS)
    folder = Path(tempfile.mkdtemp(prefix="bench-world-"))
    try:
        result = run(args.cells, args.events, args.batch, folder)
        path = "native" if native.enabled() else "pure"
        print(
            f"path={path} collector={args.collector} cells={args.cells} events={args.events}: "
            f"{result['events_per_s']:,.0f} events/s end to end "
            f"(send {result['send_events_per_s']:,.0f}/s, steps {result['step_events_per_s']:,.0f}/s, "
            f"final checkpoint {result['checkpoint_s']:.2f} s), "
            f"replay {result['replay_events_per_s']:,.0f} events/s, open {result['open_s']:.3f} s, "
            f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
        )
        if args.sweep:
            for cells in (100, 1_000, 10_000, 100_000, 1_000_000):
                events = max(cells, 100_000)
                r = run(cells, events, 10_000, folder)
                print(
                    f"sweep cells={cells:>9,} events={events:,}: {r['events_per_s']:,.0f} events/s "
                    f"(steps {r['step_events_per_s']:,.0f}/s, final checkpoint {r['checkpoint_s']:.1f} s, "
                    f"open {r['open_s']:.2f} s, replay {r['replay_events_per_s']:,.0f}/s)",
                    flush=True,
                )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
