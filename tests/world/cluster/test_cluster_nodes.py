"""A partitioned world over two Ray worker nodes (``ray.cluster_utils.Cluster``: raylets on this
machine, as machines would be; the head offers no CPU, so it hosts no partition) with ``shared``
placement: the node that holds partition 0 dies in the middle of the sends, its partitions
restart on the other node and reopen their directories there, and nothing acknowledged is lost
or applied twice. Long: three raylets take ~20 s to start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cluster import _verify, counter_air, one_world, workload

from world import World
from world.cluster import Layout, init_cluster, partition_dir

from worldkit import COUNTER

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")
from world.cluster.ray import (  # noqa: E402
    NAMESPACE,
    RayCluster,
    disconnect,
    placement,
    signal_handlers_kept,
    start_actors,
)

pytestmark = pytest.mark.long

NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}


def test_a_partition_whose_node_dies_restarts_on_the_other_with_shared_placement(
    tmp_path: Path,
) -> None:
    air = counter_air(tmp_path)
    events = workload(2000, 60, seed=11)
    expected = one_world(tmp_path / "one", air, events)
    root = tmp_path / "c"
    init_cluster(root, air, 4)
    nodes = cluster_utils.Cluster(
        initialize_head=True, head_node_args={**NODE, "num_cpus": 0, "include_dashboard": False}
    )
    try:
        workers = [nodes.add_node(**NODE) for _ in range(2)]
        with signal_handlers_kept():
            ray.init(address=nodes.address, namespace=NAMESPACE, log_to_driver=False)
        layout = Layout.read(root)
        assert placement(layout, "shared") == [None] * 4
        cluster = RayCluster(root, start_actors(layout, detached=False, nodes=None))
        before = {i["partition"]: i for i in cluster.info()}
        worker = next(w for w in workers if w.node_id == before[0]["node_id"])
        on_worker = [p for p, i in before.items() if i["node_id"] == worker.node_id]
        cluster.send_many(events[:1000])
        nodes.remove_node(worker)  # its partitions' processes die with it
        cluster.send_many(events[1000:])
        after = {i["partition"]: i for i in cluster.wait_idle()}
        assert all(i["ok"] for i in after.values())
        for p in on_worker:  # restarted on the other worker, from their directories
            assert after[p]["node_id"] != worker.node_id
            assert after[p]["pid"] != before[p]["pid"]
        cluster.close_actors()
    finally:
        disconnect()
        with signal_handlers_kept():
            nodes.shutdown()
    found: dict[str, object] = {}
    for index in range(4):
        with World.open(partition_dir(root, index), readonly=True) as world:
            found.update({json.dumps(c.key): c.state for c in world.cells(COUNTER)})
        _verify(partition_dir(root, index))
    assert found == expected
