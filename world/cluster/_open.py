"""``open_cluster``: a partitioned world's handle, asking its Ray actors while it is up (``world
cluster up``), else its partitions opened in this process."""

from __future__ import annotations

from pathlib import Path

from world.cluster._handle import PartitionedHandle
from world.cluster._layout import Layout
from world.cluster._local import LocalCluster
from world.ops import LocalHandle

__all__ = ["open_cluster"]


def open_cluster(root: Path | str, *, readonly: bool = False) -> PartitionedHandle:
    """The partitioned world at ``root``: through its Ray actors while it is up, else every
    partition open here (``readonly``: for reads only, beside a writer; an operation that
    writes is refused)."""
    layout = Layout.read(Path(root))
    up = layout.up()
    if up is not None:
        from world.cluster.ray import RayCluster, connect

        connect(up["address"], up.get("token_path"))
        return RayCluster(layout.root).handle()
    local = LocalCluster(layout.root, readonly=readonly)
    return PartitionedHandle(
        layout,
        [LocalHandle(node.world) for node in local.nodes],
        lambda: [{**node.info(), "ok": True} for node in local.nodes],
        cluster=local,
        readonly=readonly,
    )
