"""``attach``: the handle a command (or an application that does not know what is there) asks
a world folder through. Above the packages it chooses between (``world.ops``, ``world.serve``,
``world.cluster``), so none of them needs to know the others."""

from __future__ import annotations

from pathlib import Path

from world.cluster import CLUSTER_FILE, open_cluster
from world.errors import WorldLocked, WorldServed
from world.ops import Handle
from world.ops import open as open_world
from world.serve import connect, served

__all__ = ["attach"]


def attach(path: Path | str, *, readonly: bool = False) -> Handle:
    """The handle of the world at ``path``:

    - a partitioned world's directory (its ``cluster.json``): its handle
      (``world.cluster.open_cluster``: its Ray actors while it is up, else its partitions
      open here);
    - a world ``world serve`` holds: the server's handle (a served world must be asked:
      opening it would fail on the write lock, or show a reader a view without the server's
      ready work);
    - else the world itself, open here (``world.ops.open``; ``readonly``: a reader)."""
    if (Path(path) / CLUSTER_FILE).is_file():
        return open_cluster(path, readonly=readonly)
    if served(path):
        return connect(path)
    try:
        return open_world(path, readonly=readonly)
    except WorldLocked as exc:  # a server that started since the look
        if not readonly and served(path):
            raise WorldServed(str(path)) from exc
        raise
