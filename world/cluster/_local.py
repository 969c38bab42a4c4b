"""A partitioned world driven in one process: every partition open here, cycled in turn, the
outboxes forwarded between cycles. What ``world cluster run|send|state|...`` use when the cluster
is not up on Ray, and what the tests compare the Ray actors with: the same journals' meaning
(the same cell states), whichever drives them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from air.errors import LimitExceeded
from world._reading import CellView
from world.cluster._layout import Layout, Router
from world.cluster._node import PartitionNode, forward, resync

__all__ = ["ROUNDS_MAX", "LocalCluster"]

ROUNDS_MAX: Final = 1_000_000
"""Rounds (a cycle of every partition, then forwarding) one ``run_until_idle`` takes at most."""


class LocalCluster:
    def __init__(self, root: Path, *, sim: bool = False, readonly: bool = False) -> None:
        """``readonly``: every partition opened for reads only (writes nothing)."""
        self.layout = Layout.read(Path(root))
        self.router = Router(self.layout.air(), self.layout.count)
        self.nodes: list[PartitionNode] = []
        try:
            for path in self.layout.partitions():
                self.nodes.append(PartitionNode(path, sim=sim, readonly=readonly))
            for node in [] if readonly else self.nodes:
                resync(node, self.node)
        except BaseException:
            self.close()
            raise

    def node(self, index: int) -> PartitionNode:
        return self.nodes[index]

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        self.nodes = []

    def send_many(
        self, events: Sequence[tuple[str, Any]], ids: Sequence[str | None] | None = None
    ) -> list[tuple[int, int]]:
        """Journal each event in its home partition (one durable batch per partition);
        ``(partition, seq)`` of each, in the order given."""
        ids = list(ids) if ids is not None else [None] * len(events)
        homes = [self.router.home(schema, value) for schema, value in events]
        placed: list[tuple[int, int]] = [(0, 0)] * len(events)
        for home in sorted(set(homes)):
            mine = [i for i, h in enumerate(homes) if h == home]
            seqs = self.nodes[home].send([events[i] for i in mine], [ids[i] for i in mine])
            for i, seq in zip(mine, seqs, strict=True):
                placed[i] = (home, seq)
        return placed

    def run_until_idle(self, max_rounds: int = ROUNDS_MAX) -> int:
        """Cycle every partition and forward, until none steps, none owes anything and no
        effect is in flight; the steps run."""
        steps = 0
        for _ in range(max_rounds):
            ran = sum(node.cycle() for node in self.nodes)
            moved = sum(forward(node, self.node) for node in self.nodes)
            steps += ran
            if not ran and not moved and all(node.idle() for node in self.nodes):
                return steps
        raise LimitExceeded("rounds", max_rounds, "the partitions are still busy")

    def owner(self, key_cbor: bytes | None) -> PartitionNode:
        from kernel.cells import key_hash

        part = self.nodes[0].partition
        return self.nodes[0 if key_cbor is None else part.owner(key_cbor, key_hash(key_cbor))]

    def state(self, reducer: str, key: Any = None) -> Any:
        """A cell's state, read in the partition owning its key."""
        world = self.nodes[0].world
        key_cbor = None if key is None else world.key_cbor(reducer, key)
        return self.owner(key_cbor).world.state(reducer, key)

    def cells(self, reducer: str) -> Iterator[CellView]:
        """Every cell of ``reducer``, partition by partition."""
        for node in self.nodes:
            yield from node.world.cells(reducer)

    def info(self) -> list[dict[str, Any]]:
        return [node.info() for node in self.nodes]
