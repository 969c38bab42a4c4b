"""The cost of idempotency ids on the send path (run by hand; results go to BENCHMARKS.md).

Workload: the keyed counter world, E events to N keys sent with ``World.send_many`` in batches of
B (one durable commit each), first without ids, then (in a second world) each with an id, then
the same batches again (every event a duplicate), then, in a new session, once more (the ids
come from the index on disk, not this session's memory). Prints events/s of each, the peak RSS
and the index's size.

    .venv/bin/python tools/bench/bench_send_ids.py [--cells 10000] [--events 200000] [--batch 10000]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from world import World  # noqa: E402

EVENT = "demo/CounterEvent@1"


def _send(world: World, values: list[object], ids: list[str] | None, batch: int) -> float:
    """Events/s of sending ``values`` in batches of ``batch``."""
    start = time.perf_counter()
    for i in range(0, len(values), batch):
        part = [(EVENT, v) for v in values[i : i + batch]]
        world.send_many(part, ids=None if ids is None else ids[i : i + batch])
    return len(values) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000)
    args = parser.parse_args()
    values: list[object] = [
        {"key": f"k{i % args.cells}", "op": {"$tag": "Add", "$value": 1}}
        for i in range(args.events)
    ]
    ids = [f"order-{i:09d}" for i in range(args.events)]
    folder = Path(tempfile.mkdtemp(prefix="bench-send-ids-"))
    try:
        with World.create(folder / "plain", ROOT / "manifests" / "counter") as world:
            plain = _send(world, values, None, args.batch)
        path = folder / "ids"
        with World.create(path, ROOT / "manifests" / "counter") as world:
            named = _send(world, values, ids, args.batch)
            again = _send(world, values, ids, args.batch)
            journaled = world.journal.seq_next
        with World.open(path) as world:
            reopened = _send(world, values, ids, args.batch)
            duplicated = world.journal.seq_next - journaled
        index = sum(p.stat().st_size for p in (path / "cache").glob("event_ids*"))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"events {args.events} batch {args.batch}: send without ids {plain:,.0f}/s, "
            f"with ids {named:,.0f}/s, again (all duplicates) {again:,.0f}/s, again after "
            f"reopen {reopened:,.0f}/s; journal {journaled:,} records, {duplicated:,} more after the "
            f"retries; peak RSS {rss:,.0f} MB; "
            f"index {index / 1e6:.1f} MB"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
