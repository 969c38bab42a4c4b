"""Events/s end to end of a partitioned world on a local Ray, against one world in the same run
(the issue "Past one machine"), and what a cross-partition event costs over a local one. Run by
hand; nothing is asserted but the final cell counts.

End to end: ``--events`` counter events over ``--keys`` keys, sent in batches of ``--batch``
(one durable batch per partition per send) and stepped until every partition is idle and owes
nothing; timed from the first send to idle. One world: the same events through ``send_many`` and
``run_until_idle`` in this process. Partitioned: ``N`` partition actors and a router on a local
Ray with ``--cpus`` CPUs; the client sends through the router, each partition runs its own loop.

Cross-partition: a 2-partition cluster driven in this process (``LocalCluster``, no Ray, so the
difference is ours, not the transport's): ``--events`` events sent to partition 0, once for keys
partition 0 owns (local) and once for keys partition 1 owns (each journaled in 0, owed, forwarded
in batches, journaled again in 1 and stepped there).

    .venv/bin/python tools/bench/bench_cluster.py [--events 200000] [--partitions 1 2 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

EVENT = "demo/CounterEvent@1"
COUNTER = "demo/Counter@1"
AIR = ROOT / "manifests" / "counter"


def events(n: int, keys: int, prefix: str = "k") -> list[tuple[str, Any]]:
    return [
        (EVENT, {"key": f"{prefix}{i % keys}", "op": {"$tag": "Add", "$value": 1}})
        for i in range(n)
    ]


def one_world(folder: Path, batch_events: list[tuple[str, Any]], batch: int) -> float:
    from world import World

    start = time.perf_counter()
    with World.create(folder / "one", AIR) as world:
        for at in range(0, len(batch_events), batch):
            world.send_many(batch_events[at : at + batch])
            world.run_until_idle()
        took = time.perf_counter() - start
        assert world.cell_count(COUNTER) > 0
    return took


def partitioned(
    folder: Path, count: int, batch_events: list[tuple[str, Any]], batch: int
) -> tuple[float, list[dict[str, Any]]]:
    from world.cluster import Layout, init_cluster
    from world.cluster.ray import RayCluster, start_actors

    root = folder / f"c{count}"
    init_cluster(root, AIR, count)
    cluster = RayCluster(root, start_actors(Layout.read(root), detached=False))
    cluster.info()  # every actor has opened its world
    ids = [f"e{i}" for i in range(len(batch_events))]
    start = time.perf_counter()
    for at in range(0, len(batch_events), batch):
        cluster.send_many(batch_events[at : at + batch], ids[at : at + batch])
    infos = cluster.wait_idle(poll_s=0.02)
    took = time.perf_counter() - start
    cluster.close_actors()
    return took, infos


def routing(folder: Path, count: int, sent: list[tuple[str, Any]], batch: int) -> dict[str, float]:
    """Sends only (the partitions journal; their loops step meanwhile): through the router
    actor, and routed by the client straight to the owners (``send_many(direct=True)``)."""
    from world.cluster import Layout, init_cluster
    from world.cluster.ray import RayCluster, start_actors

    root = folder / f"r{count}"
    init_cluster(root, AIR, count)
    layout = Layout.read(root)
    cluster = RayCluster(root, start_actors(layout, detached=False))
    cluster.info()
    times = {}
    half = len(sent) // 2
    start = time.perf_counter()
    for at in range(0, half, batch):
        cluster.send_many(sent[at : at + batch], [f"a{i}" for i in range(at, at + batch)])
    times["router"] = time.perf_counter() - start
    start = time.perf_counter()
    for at in range(half, 2 * half, batch):
        ids = [f"b{i}" for i in range(at, at + batch)]
        cluster.send_many(sent[at : at + batch], ids, direct=True)
    times["direct"] = time.perf_counter() - start
    cluster.wait_idle(poll_s=0.05)
    cluster.close_actors()
    return {k: half / v for k, v in times.items()}


def cross_partition(folder: Path, n: int, keys: int) -> dict[str, float]:
    from air import cbor
    from kernel import owner_of
    from kernel.cells import key_hash
    from world.cluster import LocalCluster, init_cluster

    def owned_keys(index: int) -> list[str]:
        found, i = [], 0
        while len(found) < keys:
            if owner_of(key_hash(cbor.dumps(f"x{i}")), 2) == index:
                found.append(f"x{i}")
            i += 1
        return found

    times = {}
    for name, owner in (("local", 0), ("cross", 1)):
        root = folder / f"x-{name}"
        init_cluster(root, AIR, 2)
        mine = owned_keys(owner)
        sent = [
            (EVENT, {"key": mine[i % keys], "op": {"$tag": "Add", "$value": 1}}) for i in range(n)
        ]
        with LocalCluster(root) as cluster:
            start = time.perf_counter()
            for at in range(0, n, 10_000):
                cluster.nodes[0].send(sent[at : at + 10_000], [None] * len(sent[at : at + 10_000]))
                cluster.run_until_idle()
            times[name] = time.perf_counter() - start
            assert sum(1 for _ in cluster.cells(COUNTER)) == keys
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--cross-events", type=int, default=100_000)
    args = parser.parse_args()
    import ray

    folder = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        sent = events(args.events, args.keys)
        results: dict[str, Any] = {"events": args.events, "keys": args.keys, "cpus": args.cpus}
        took = one_world(folder, sent, args.batch)
        results["one_world_s"] = round(took, 2)
        results["one_world_events_per_s"] = round(args.events / took)
        print(f"one world: {took:.2f} s, {args.events / took:,.0f} events/s", flush=True)
        from world.cluster.ray import disconnect, signal_handlers_kept

        with signal_handlers_kept():
            ray.init(
                address="local",
                num_cpus=args.cpus,
                include_dashboard=False,
                logging_level="ERROR",
                log_to_driver=False,
                object_store_memory=200 * 1024 * 1024,
            )
        for count in args.partitions:
            took, infos = partitioned(folder, count, sent, args.batch)
            results[f"p{count}_s"] = round(took, 2)
            results[f"p{count}_events_per_s"] = round(args.events / took)
            cells = sum(sum(r.get("cells", 0) for r in i["reducers"].values()) for i in infos)
            print(
                f"{count} partition(s): {took:.2f} s, {args.events / took:,.0f} events/s "
                f"({cells} cells)",
                flush=True,
            )
        sends = routing(folder, 2, sent, args.batch)
        results["sends_per_s"] = {k: round(v) for k, v in sends.items()}
        print(
            f"sends only, 2 partitions: through the router {sends['router']:,.0f} events/s, "
            f"client to owners {sends['direct']:,.0f} events/s",
            flush=True,
        )
        disconnect()
        cross = cross_partition(folder, args.cross_events, 1000)
        per_local = cross["local"] / args.cross_events * 1e6
        per_cross = cross["cross"] / args.cross_events * 1e6
        results["cross"] = {"local_us": round(per_local, 1), "cross_us": round(per_cross, 1)}
        print(
            f"2 partitions in one process, {args.cross_events} events sent to p0: local keys "
            f"{per_local:.1f} us/event, keys of p1 {per_cross:.1f} us/event "
            f"(+{per_cross - per_local:.1f} us, x{per_cross / per_local:.2f})"
        )
        print(json.dumps(results))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
