"""Benchmark the file cell store: put and flush throughput, footprint, then cold reads.

Run by hand (not in CI)::

    python tools/bench/bench_cells.py --cells 10000
    python tools/bench/bench_cells.py --cells 1000000 --dir /var/tmp/cells-1m --keep

For N cells with small states (``{"count": n}``, 2-6 bytes of CBOR; keys ``"order-<n>"``) it
measures, in one process: ``put`` of N new cells and their ``flush``; ``put`` of N changed
states and their ``flush`` (which collects the N superseded shards), with the store's disk
footprint (``state/`` and ``cas/``, in allocated blocks) after the first flush, just before the
second one's collection, and after it. Then, in a fresh child process so that memory and caches
are honest, it opens the store, counts, and makes 10,000 random ``get``s, timing each one (the
median of those that had to read their shard is the cold-read figure) with the RSS after each
step; and in another child, the put and flush of 1,000 random changed cells (a small checkpoint
in a big world). Results print as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
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


def footprint_mib(world: Path) -> float:
    """Allocated bytes of the store's files (``state/`` and ``cas/``), in MiB."""
    total = 0
    for top in ("state", "cas"):
        for dirpath, _dirs, files in os.walk(world / top):
            total += sum(os.stat(os.path.join(dirpath, name)).st_blocks * 512 for name in files)
    return total / (1 << 20)


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


def timed_flush(store: FileCellStore, seq: int) -> float:
    started = time.perf_counter()
    store.flush(cbor.dumps({"seq": seq}))
    return time.perf_counter() - started


def write_phase(world: Path, cells: int) -> dict[str, Any]:
    store = FileCellStore(world)
    out: dict[str, Any] = {"cells": cells}
    out["put_new_s"] = put_all(store, cells, 0)
    out["flush_new_s"] = timed_flush(store, 1)
    out["footprint_mib"] = footprint_mib(world)
    out["footprint_bytes_per_cell"] = out["footprint_mib"] * (1 << 20) / cells
    out["put_changed_s"] = put_all(store, cells, 1)
    collect = store._disk.collect  # measure the peak: new objects written, old not yet gone

    def measured_collect(*args: Any, **kwargs: Any) -> None:
        out["footprint_before_collection_mib"] = footprint_mib(world)
        collect(*args, **kwargs)

    store._disk.collect = measured_collect  # type: ignore[method-assign]
    out["flush_changed_s"] = timed_flush(store, 2)
    out["footprint_after_second_mib"] = footprint_mib(world)
    for phase in ("new", "changed"):
        out[f"put_{phase}_per_s"] = cells / out[f"put_{phase}_s"]
        out[f"flush_{phase}_cells_per_s"] = cells / out[f"flush_{phase}_s"]
    out["writer_peak_rss_mib"] = rss_mib("VmHWM")
    return out


def open_phase(world: Path, cells: int) -> dict[str, Any]:
    """Runs in a fresh process: open, count, then TOUCH random gets, each timed."""
    out: dict[str, Any] = {"baseline_rss_mib": rss_mib()}
    started = time.perf_counter()
    store = FileCellStore(world)
    count = store.count(MODULE)
    out["open_and_count_s"] = time.perf_counter() - started
    out["rss_after_open_mib"] = rss_mib()
    assert count == cells, (count, cells)
    rng = random.Random(1)
    cold: list[float] = []
    warm: list[float] = []
    started = time.perf_counter()
    for _ in range(TOUCH):
        loads = store.stats.shard_loads
        kh = key_hash(key_of(rng.randrange(cells)))
        t0 = time.perf_counter()
        found = store.get(MODULE, kh)
        took = time.perf_counter() - t0
        assert found is not None
        (cold if store.stats.shard_loads > loads else warm).append(took)
    out["random_gets"] = TOUCH
    out["random_get_per_s"] = TOUCH / (time.perf_counter() - started)
    out["cold_get_median_ms"] = statistics.median(cold) * 1000 if cold else None
    out["cold_gets"] = len(cold)
    out["warm_get_median_ms"] = statistics.median(warm) * 1000 if warm else None
    out["rss_after_random_gets_mib"] = rss_mib()
    out["shard_loads"] = store.stats.shard_loads
    out["entries_decoded"] = store.stats.entries_decoded
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
    return {"sparse_cells": SPARSE, "sparse_put_s": put_s, "sparse_flush_s": timed_flush(store, 3)}


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
        result["footprint_after_sparse_mib"] = footprint_mib(world)
        print(
            json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()})
        )
    finally:
        if not args.keep:
            shutil.rmtree(world, ignore_errors=True)
    os.sync()


if __name__ == "__main__":
    main()
