"""The peer baseline: eventsourcing 9.5 on SQLite, the same counter workload as bench_world.

Not a project dependency. Run in a separate venv, by hand:

    python3 -m venv /tmp/esvenv && /tmp/esvenv/bin/pip install eventsourcing==9.5.6
    /tmp/esvenv/bin/python tools/bench/bench_peer_eventsourcing.py [--cells 1000] [--events 20000]

One aggregate per key; each event is a command on the aggregate (`add(n)`); SQLite file
persistence (durable commits). Measured two ways: one `save` (one transaction) per event, as
the library's examples do, and one `save` of many aggregates per batch of 1,000 events, the
closest thing to our group commit.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from uuid import NAMESPACE_URL, uuid5

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event


class Counter(Aggregate):
    @event("Created")
    def __init__(self, key: str) -> None:
        self.key = key
        self.count = 0

    @staticmethod
    def create_id(key: str):  # type: ignore[no-untyped-def]
        return uuid5(NAMESPACE_URL, f"/counter/{key}")

    @event("Added")
    def add(self, n: int) -> None:
        self.count += n


class Counters(Application):
    pass


def run(cells: int, events: int, batch: int) -> float:
    folder = tempfile.mkdtemp(prefix="bench-es-")
    os.environ["PERSISTENCE_MODULE"] = "eventsourcing.sqlite"
    os.environ["SQLITE_DBNAME"] = os.path.join(folder, "es.sqlite")
    app = Counters()
    live: dict[str, Counter] = {}
    start = time.perf_counter()
    pending: list[Counter] = []
    for i in range(events):
        key = f"k{i % cells}"
        agg = live.get(key)
        if agg is None:
            agg = live[key] = Counter(key)
        agg.add(1)
        pending.append(agg)
        if len(pending) >= batch:
            app.save(*{id(a): a for a in pending}.values())
            pending.clear()
    if pending:
        app.save(*{id(a): a for a in pending}.values())
    return events / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    per_event = run(args.cells, min(args.events, 5_000), 1)
    batched = run(args.cells, args.events, 1_000)
    print(
        f"eventsourcing 9.5 + SQLite, {args.cells} aggregates: one save per event {per_event:,.0f} events/s; "
        f"one save per 1,000 events {batched:,.0f} events/s"
    )


if __name__ == "__main__":
    main()
