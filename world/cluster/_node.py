"""One partition's process-side driver (``PartitionNode``), and forwarding its outbox.

A node opens its partition's world for writing and runs the world's one loop
(``world._engine.Engine``: ticks, effects, receipts) a cycle at a time; between cycles its
driver (``LocalCluster`` in one process, or a Ray actor, ``world.cluster._ray``) calls
``forward``: each batch of what the partition owes another goes to that partition's ``take``,
which journals and commits it and answers with its cursor of this source; the source then
journals ``outbox.delivered`` up to it. A crash anywhere in between loses nothing and applies
nothing twice: an entry is dropped only after its owner has it durably, and the owner ignores
what it already has (``kernel._partition``). ``resync`` (at start) asks each owner its cursor
first, so what a previous process delivered is not sent again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from air.errors import WrongMode
from kernel import Outgoing, Partition
from world._engine import Engine
from world._world import COMMIT_EVERY_STEPS, World
from world.effects import choose_mode
from world.errors import NotACluster

__all__ = ["FORWARD_BATCH", "PartitionNode", "Peer", "forward", "resync"]

FORWARD_BATCH: Final = 4096
"""Entries one ``take`` carries at most (one journal commit at the owner)."""
TICKS_PER_CYCLE: Final = COMMIT_EVERY_STEPS
"""Ticks of one cycle: a cycle ends with a commit, so as many as a world's own run commits
after (``world run`` commits every ``COMMIT_EVERY_STEPS``); the engine's default, 1,024, made
a partition fsync four times as often as one world running the same events."""


class Peer(Protocol):
    def take(self, source: int, entries: Sequence[Outgoing]) -> tuple[int, int] | None: ...

    def cursor(self, source: int) -> tuple[int, int] | None: ...


class PartitionNode:
    """Partition ``index`` of ``count``, open for writing, with its loop."""

    def __init__(self, path: Path, *, sim: bool = False, readonly: bool = False) -> None:
        """``readonly``: for reads only (no loop; it writes nothing, beside a writer)."""
        self.world = World.open(Path(path), readonly=readonly)
        self.engine: Engine | None = None
        try:
            part = self.world.kernel.partition
            if part is None:
                raise NotACluster(str(path), "a world that is not a partition of one")
            self.partition: Partition = part
            if not readonly:
                mode = choose_mode(path, None, sim=sim)
                self.engine = Engine(
                    self.world, sim=sim, effects=mode.mode, ticks_per_cycle_max=TICKS_PER_CYCLE
                )
                self.engine.start()
        except BaseException:
            self.world.close()
            raise

    def _engine(self) -> Engine:
        if self.engine is None:
            raise WrongMode("run a partition", "open read-only")
        return self.engine

    @property
    def index(self) -> int:
        return self.partition.index

    def send(self, events: Sequence[tuple[str, Any]], ids: Sequence[str | None]) -> list[int]:
        """Journal outside events (one durable batch); their seqs."""
        return self.world.send_many(events, ids=ids)

    def cycle(self) -> int:
        """One cycle of the world's loop; the steps it ran."""
        return self._engine().process_one_cycle()

    def idle(self) -> bool:
        """Nothing ready and no effect in flight (what it owes may still be unsent)."""
        return self.world.kernel.idle() and self._engine().pump.in_flight == 0

    def owed(self, limit: int = FORWARD_BATCH) -> dict[int, list[Outgoing]]:
        """The oldest entries owed to each other partition (``limit`` each)."""
        part = self.partition
        return {to: part.pending(to, limit) for to in part.backlog()}

    def take(self, source: int, entries: Sequence[Outgoing]) -> tuple[int, int] | None:
        return self.world.take_forwarded(source, entries)

    def cursor(self, source: int) -> tuple[int, int] | None:
        return self.partition.cursor(source)

    def delivered(self, to: int, cursor: tuple[int, int] | None) -> None:
        if cursor is not None:
            self.world.outbox_delivered(to, cursor)

    def info(self) -> dict[str, Any]:
        """The world's ``info`` (its ``partition``: index, count, outbox, cursors), with the
        index, the count and the entries owed in all at the top."""
        data = self.world.info()
        mine = data["partition"]
        data["partitions"] = mine["count"]
        data["outbox"], data["cursors"] = mine["outbox"], mine["cursors"]
        data["outbox_backlog"] = sum(mine["outbox"].values())
        data["partition"] = mine["index"]
        return data

    def close(self) -> None:
        try:
            if self.engine is not None:
                self.engine.close()
        finally:
            self.world.close()


def forward(node: PartitionNode, peer: Callable[[int], Peer], limit: int = FORWARD_BATCH) -> int:
    """Send one batch of what ``node`` owes to each owner; the entries sent."""
    sent = 0
    for to, entries in node.owed(limit).items():
        node.delivered(to, peer(to).take(node.index, entries))
        sent += len(entries)
    return sent


def resync(node: PartitionNode, peers: Mapping[int, Peer] | Callable[[int], Peer]) -> None:
    """Drop what each owner already holds (a previous process delivered it, and stopped
    before journaling that it had)."""
    get = peers if callable(peers) else peers.__getitem__
    for to in node.partition.backlog():
        node.delivered(to, get(to).cursor(node.index))
