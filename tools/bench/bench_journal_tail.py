"""``world journal tail`` piped, run by hand (the issue "a CLI for scripts": 400,000 records in
8 s or less; it took ~68 s when each line went through the rich console).

Builds a keyed-counter world of about ``--records`` journal records (half ``event.in``, half
the cell ``step`` each one ran, over ``--cells`` keys: ``World.send_many`` batches and
``run_until_idle``, then a snapshot, as ``bench_cli.py`` does), then times ``world journal tail
DIR`` with its stdout a pipe that this script drains (what ``| consumer`` sees; the lines are
counted, so a tail that stops short is an error), ``--repeat`` runs after one untimed warm-up:
the median and best wall time, and the child's CPU time (user + sys), which a shared machine
disturbs less than the wall time.

    .venv/bin/python tools/bench/bench_journal_tail.py [--records 400000] [--repeat 3]
        [--keep DIR] [--world PATH/TO/world] [-- EXTRA TAIL ARGS]

``--keep DIR`` builds the world once in DIR and reuses it; ``--world`` times another install's
``world`` script (say, a worktree of the commit before, to compare). Not a test: nothing
asserts but the line count.
"""

from __future__ import annotations

import argparse
import os
import resource
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


def build(path: Path, records: int, cells: int, batch: int = 20_000) -> float:
    """A counter world of ``records`` records: world.created, then events and their steps."""
    from world import World

    events = max(1, records // 2)
    start = time.perf_counter()
    world = World.create(path, ROOT / "manifests" / "counter")
    for i in range(0, events, batch):
        world.send_many(
            (EVENT, {"key": f"k{(i + j) % cells}", "op": {"$tag": "Add", "$value": 1}})
            for j in range(min(batch, events - i))
        )
        world.run_until_idle()
    world.snapshot()
    world.close()
    return time.perf_counter() - start


def tail_once(argv: list[str]) -> tuple[float, float, int]:
    """One run: wall seconds, the child's CPU seconds, lines it wrote (through a pipe)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stderr is not None
    lines = 0
    while chunk := proc.stdout.read(1 << 20):
        lines += chunk.count(b"\n")
    err = proc.stderr.read()
    code = proc.wait()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({code}): {err.decode(errors='replace')}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="Build (or reuse) the world here")
    parser.add_argument(
        "--world",
        type=Path,
        default=Path(sys.executable).with_name("world"),
        help="The world script to time (default: the one beside this interpreter)",
    )
    parser.add_argument("extra", nargs="*", help="More `journal tail` arguments (after --)")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="bench-tail-"))
    path = args.keep if args.keep is not None else folder / "w"
    try:
        if args.keep is not None and path.exists():
            print(f"reusing {path}")
        else:
            seconds = build(path, args.records, args.cells)
            print(f"built ~{args.records} records over {args.cells} cells: {seconds:.1f} s")
        argv = [str(args.world), "journal", "tail", str(path), *args.extra]
        _wall, _cpu, expected = tail_once(argv)  # the warm-up
        walls, cpus = [], []
        for _ in range(args.repeat):
            wall, cpu, lines = tail_once(argv)
            if lines != expected:
                raise SystemExit(f"a run wrote {lines} lines, the warm-up {expected}")
            walls.append(wall)
            cpus.append(cpu)
        load = os.getloadavg()[0]
        print(f"{' '.join(argv[1:3])} | (piped): {expected} lines")
        print(
            f"wall {statistics.median(walls):.2f} s median, {min(walls):.2f} s best; "
            f"cpu {statistics.median(cpus):.2f} s median (of {args.repeat}; "
            f"{os.cpu_count()} cpus, load {load:.1f}); "
            f"{expected / statistics.median(walls):,.0f} lines/s"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
