"""``world journal tail -n 20`` (also of a ``--subject``), ``--from N`` and ``world cells tail
KEY`` on a large world, run by hand (issue 35: each read the whole journal, 4.0-4.2 s and 7.6 s
on 400,000 records, though they show a few records at its end or one cell's).

Builds the keyed-counter world of ``bench_journal_tail.py`` (``--records`` journal records over
``--cells`` keys, then a snapshot), or reuses ``--keep DIR``, then times each command with its
stdout a pipe this script drains, ``--repeat`` runs after one untimed warm-up: the median and
best wall time and the child's CPU time. The lines are counted and must be the same in every
run.

    .venv/bin/python tools/bench/bench_tail_seek.py [--records 400000] [--repeat 3]
        [--keep DIR] [--world PATH/TO/world]

``--world`` times another install's ``world`` script (a worktree of the commit before, to
compare). Not a test: nothing asserts but the line counts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_journal_tail import build, tail_once

REDUCER = "demo/Counter@1"


def commands(world: Path, records: int) -> dict[str, list[str]]:
    return {
        "journal tail -n 20": ["journal", "tail", str(world), "-n", "20"],
        f"journal tail --from {records - 20}": [
            "journal",
            "tail",
            str(world),
            "--from",
            str(records - 20),
        ],
        "journal tail -n 20 --subject /world/cell/**": [
            "journal",
            "tail",
            str(world),
            "-n",
            "20",
            "--subject",
            "/world/cell/**",
        ],
        "cells tail k5 --json": ["cells", "tail", str(world), REDUCER, '"k5"', "--json"],
    }


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
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="bench-seek-"))
    path = args.keep if args.keep is not None else folder / "w"
    try:
        if args.keep is not None and path.exists():
            print(f"reusing {path}")
        else:
            seconds = build(path, args.records, args.cells)
            print(f"built ~{args.records} records over {args.cells} cells: {seconds:.1f} s")
        for name, tail_args in commands(path, args.records).items():
            argv = [str(args.world), *tail_args]
            _wall, _cpu, expected = tail_once(argv)  # the warm-up
            walls, cpus = [], []
            for _ in range(args.repeat):
                wall, cpu, lines = tail_once(argv)
                if lines != expected:
                    raise SystemExit(f"{name}: a run wrote {lines} lines, the warm-up {expected}")
                walls.append(wall)
                cpus.append(cpu)
            print(
                f"{name}: {expected} lines; wall {statistics.median(walls):.2f} s median, "
                f"{min(walls):.2f} s best; cpu {statistics.median(cpus):.2f} s median (of "
                f"{args.repeat}; {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f})"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
