"""A partitioned world's directory, and the router that picks the partition of an event.

Layout::

    <dir>/cluster.json      {"format": 1, "id": <hex>, "partitions": N}: written last by
                            ``init``, so a folder without it is not a cluster (a killed init)
    <dir>/p0/ ... p<N-1>/   each an ordinary world directory, partition i of N by its genesis
                            record (``kernel._partition``): ``world replay --verify <dir>/p1``
                            and every other single-world command work on it as on any world
    <dir>/up.json           while ``world cluster up`` runs it: the Ray address, and whether
                            ``up`` started that Ray instance (``down`` stops it then)
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from air import LoadedAir, cbor
from air.errors import InvalidArgument, WorldError
from air.types import Ref
from air.values import normalise
from kernel import PARTITIONS_MAX, Partition, owner_of
from kernel.cells import key_hash
from world._directory import load_world_air
from world._fsutil import atomic_write
from world._world import World
from world.errors import NotACluster, WorldExists

__all__ = ["CLUSTER_FILE", "FORMAT", "Layout", "Router", "init_cluster", "partition_dir"]

CLUSTER_FILE: Final = "cluster.json"
UP_FILE: Final = "up.json"
FORMAT: Final = 1


def partition_dir(root: Path, index: int) -> Path:
    return Path(root) / f"p{index}"


@dataclass(frozen=True)
class Layout:
    root: Path
    id: str
    count: int

    @classmethod
    def read(cls, root: Path) -> Layout:
        """The cluster at ``root``; ``NotACluster`` naming what is missing or wrong."""
        root = Path(root)
        path = root / CLUSTER_FILE
        try:
            doc = json.loads(path.read_text())
            count, cluster_id = doc["partitions"], doc["id"]
            if doc.get("format") != FORMAT or not isinstance(count, int):
                raise ValueError(f"format {doc.get('format')!r}")
        except FileNotFoundError:
            raise NotACluster(
                str(root), f"no {CLUSTER_FILE}: not a partitioned world (world cluster init)"
            ) from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise NotACluster(str(path), f"unreadable: {exc}") from None
        Partition(0, count)  # in range
        return cls(root, str(cluster_id), count)

    def partitions(self) -> list[Path]:
        return [partition_dir(self.root, i) for i in range(self.count)]

    @property
    def up_file(self) -> Path:
        return self.root / UP_FILE

    def up(self) -> dict[str, Any] | None:
        """What ``world cluster up`` wrote (None when the cluster is not up)."""
        try:
            doc: dict[str, Any] = json.loads(self.up_file.read_text())
        except FileNotFoundError:
            return None
        return doc

    def air(self) -> LoadedAir:
        return load_world_air(partition_dir(self.root, 0))


def init_cluster(
    root: Path,
    air_path: Path,
    count: int,
    modules: Mapping[str, str | os.PathLike[str]] | None = None,
) -> Layout:
    """Create a partitioned world of ``count`` partitions at ``root`` (absent or empty), each
    a world of the AIR at ``air_path``. ``cluster.json`` is written last."""
    root = Path(root)
    if not isinstance(count, int) or not 1 <= count <= PARTITIONS_MAX:
        raise InvalidArgument("--partitions", count, f"between 1 and {PARTITIONS_MAX}")
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise WorldExists(str(root))
    root.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        World.create(
            partition_dir(root, index), air_path, modules=modules, partition=(index, count)
        ).close()
    doc = {"format": FORMAT, "id": secrets.token_hex(8), "partitions": count}
    atomic_write(root / CLUSTER_FILE, json.dumps(doc, indent=1).encode())
    return Layout.read(root)


class Router:
    """Picks the partition an outside event goes to: the owner of the key of the first keyed
    route its schema has, partition 0 when it has none. Any partition would take it (an
    event journaled in one partition is forwarded to the owners of its deliveries), but the
    owner saves a hop, and the choice is a function of the event: a retried send, with its
    id, reaches the partition that remembers the id."""

    def __init__(self, air: LoadedAir, count: int) -> None:
        self.air = air
        self.count = count
        self._keyed: dict[str, str] = {}
        for route in air.manifest.routing.events:
            if route.key_field and route.event not in self._keyed:
                self._keyed[route.event] = route.key_field

    def home(self, schema: str, value: Any) -> int:
        field = self._keyed.get(schema)
        if field is None or self.count == 1:
            return 0
        try:
            normalised = normalise(Ref(schema), value, self.air.schemas)
            key = normalised[field]
        except (WorldError, KeyError, TypeError):
            return 0  # the partition says what is wrong with it
        return owner_of(key_hash(cbor.dumps(key)), self.count)
