"""Benchmark the file cell store: put and flush throughput, then open time and memory.

Run by hand (not in CI)::

    python tools/bench/bench_cells.py --cells 10000
    python tools/bench/bench_cells.py --cells 1000000 --dir /var/tmp/cells-1m --keep

For N cells with small states (``{"count": n}``, 12-20 bytes) it measures, in one process:
``put`` of N new cells, ``flush`` of them, ``put`` of N changed states and their ``flush``
(which also unlinks the N superseded files). Then, in a fresh child process so that memory is
honest, it measures opening the store, ``count``, the first ``get``, and ``get`` of 10,000
random cells, with the RSS after each; and in another child, the put and flush of 1,000 random
changed cells (a small checkpoint in a big world). Results print as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from air import cbor  # noqa: E402 - the repo root goes on sys.path first
from kernel.cells import CellEntry, key_hash  # noqa: E402
from world.cellstore import FileCellStore  # noqa: E402

MODULE = "ab" * 32
MANIFEST = bytes(32)
TOUCH = 10_000
SPARSE = 1_000


def rss_mib(field: str = "VmRSS") -> float:
    """Resident set size now (``VmRSS``) or at peak (``VmHWM``) of this process, in MiB.

    Read from /proc: ``getrusage``'s ``ru_maxrss`` survives exec, so a child would report its
    parent's peak.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def key_of(n: int) -> bytes:
    return cbor.dumps(f"order-{n}")


def put_all(store: FileCellStore, cells: int, generation: int) -> float:
    started = time.perf_counter()
    for n in range(cells):
        key_cbor = key_of(n)
        state_cbor = cbor.dumps({"count": n + generation})
        entry = CellEntry.of(key_cbor, state_cbor, last_active=n, manifest_hash=MANIFEST)
        store.put(MODULE, key_hash(key_cbor), entry, state_cbor)
    return time.perf_counter() - started


def timed_flush(store: FileCellStore) -> float:
    started = time.perf_counter()
    store.flush(cbor.dumps({"seq": 1}))
    return time.perf_counter() - started


def write_phase(world: Path, cells: int) -> dict[str, Any]:
    store = FileCellStore(world)
    out: dict[str, Any] = {"cells": cells}
    out["put_new_s"] = put_all(store, cells, 0)
    out["flush_new_s"] = timed_flush(store)
    out["put_changed_s"] = put_all(store, cells, 1)
    out["flush_changed_s"] = timed_flush(store)
    for phase in ("new", "changed"):
        out[f"put_{phase}_per_s"] = cells / out[f"put_{phase}_s"]
        out[f"flush_{phase}_cells_per_s"] = cells / out[f"flush_{phase}_s"]
    out["writer_peak_rss_mib"] = rss_mib("VmHWM")
    return out


def open_phase(world: Path, cells: int) -> dict[str, Any]:
    """Runs in a fresh process: open, count, first get, then TOUCH random gets."""
    out: dict[str, Any] = {"baseline_rss_mib": rss_mib()}
    started = time.perf_counter()
    store = FileCellStore(world)
    count = store.count(MODULE)
    out["open_and_count_s"] = time.perf_counter() - started
    out["rss_after_open_mib"] = rss_mib()
    assert count == cells, (count, cells)
    started = time.perf_counter()
    assert store.get(MODULE, key_hash(key_of(0))) is not None
    out["first_get_s"] = time.perf_counter() - started
    rng = random.Random(1)
    started = time.perf_counter()
    for _ in range(TOUCH):
        assert store.get(MODULE, key_hash(key_of(rng.randrange(cells)))) is not None
    out["random_gets"] = TOUCH
    out["random_get_per_s"] = TOUCH / (time.perf_counter() - started)
    out["rss_after_random_gets_mib"] = rss_mib()
    out["shard_loads"] = store.stats.shard_loads
    return out


def sparse_phase(world: Path, cells: int) -> dict[str, Any]:
    """Runs in a fresh process: change SPARSE random cells of the big store and flush them."""
    store = FileCellStore(world)
    rng = random.Random(3)
    started = time.perf_counter()
    for n in rng.sample(range(cells), SPARSE):
        key_cbor = key_of(n)
        state_cbor = cbor.dumps({"count": n + 2})
        entry = CellEntry.of(key_cbor, state_cbor, last_active=n, manifest_hash=MANIFEST)
        store.put(MODULE, key_hash(key_cbor), entry, state_cbor)
    put_s = time.perf_counter() - started
    return {"sparse_cells": SPARSE, "sparse_put_s": put_s, "sparse_flush_s": timed_flush(store)}


def disk_usage(world: Path) -> dict[str, Any]:
    done = subprocess.run(["du", "-sm", str(world)], capture_output=True, text=True, check=True)
    return {"disk_mib": int(done.stdout.split()[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None, help="world dir (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the world afterwards")
    parser.add_argument("--open-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sparse-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    world = args.dir or Path(tempfile.mkdtemp(prefix="bench-cells-"))
    if args.open_only or args.sparse_only:
        phase = open_phase if args.open_only else sparse_phase
        print(json.dumps(phase(world, args.cells)))
        return
    try:
        result = write_phase(world, args.cells)
        for mode in ("--open-only", "--sparse-only"):
            command = [sys.executable, __file__, "--cells", str(args.cells), "--dir", str(world)]
            child = subprocess.run([*command, mode], capture_output=True, text=True, check=True)
            result.update(json.loads(child.stdout))
        result.update(disk_usage(world))
        print(
            json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()})
        )
    finally:
        if not args.keep:
            shutil.rmtree(world, ignore_errors=True)
    os.sync()


if __name__ == "__main__":
    main()
