"""A partitioned world: N ordinary worlds, each owning the keys whose hash falls in its range,
with exactly-once forwarding between them (``kernel._partition`` has the rules).

``init_cluster`` builds the directory (``_layout``), ``LocalCluster`` drives every partition in
one process (``_local``), ``PartitionedHandle`` asks it as a single world is asked
(``_handle``; ``open_cluster``, ``_open``, and ``world.attach`` on a cluster's directory), and ``world.cluster.ray`` runs each partition as a Ray actor (the
``cluster`` extra; imported only by it).
"""

from __future__ import annotations

from world.cluster._handle import ROUTES, PartitionedHandle
from world.cluster._layout import CLUSTER_FILE, Layout, Router, init_cluster, partition_dir
from world.cluster._local import LocalCluster
from world.cluster._node import FORWARD_BATCH, PartitionNode, forward, resync
from world.cluster._open import open_cluster
from world.cluster._upgrade import upgrade_cluster

__all__ = [
    "CLUSTER_FILE",
    "FORWARD_BATCH",
    "ROUTES",
    "Layout",
    "LocalCluster",
    "PartitionNode",
    "PartitionedHandle",
    "Router",
    "forward",
    "init_cluster",
    "open_cluster",
    "partition_dir",
    "resync",
    "upgrade_cluster",
]
