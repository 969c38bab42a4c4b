"""One partition of a partitioned world: which keys it owns, what it owes other partitions
(its outbox) and what it has taken from them (a cursor per source).

A partitioned world is N ordinary worlds with the same AIR (``world.cluster``); partition
``index`` of ``count`` is told so by its genesis record (``world.created`` carries
``partition: {index, count}``), so replay routes exactly as the live world did.

Ownership (stable across versions: changing it would move every cell)::

    owner(key) = (first 8 bytes of blake3(canonical CBOR of the key), big-endian) * count >> 64

so partition ``i`` owns the key hashes in ``[i * 2**64 / count, (i + 1) * 2**64 / count)`` of
the hash's top 64 bits, the same range for a key whatever reducer it is a key of. A delivery to
a non-keyed reducer belongs to partition 0. A plan run belongs where its trigger event was first
journaled; its ``await_event``s and receipts stay there.

Routing. An event journaled here (from outside, emitted by a step, raised by a plan) is routed
as in any world, with the same delivery indices; a delivery owned by another partition is not
queued here but owed: one outbox entry per (event, owner), named by its origin ``(this
partition, seq of the record, index of the event's first delivery)``. A plan's ``raise_event``
to a cell owned elsewhere is an entry naming that cell (``to``). The owner journals an entry
as ``event.in`` with ``origin`` (and ``to``), queues only the deliveries it owns (never owing
any on: the source owes each owner itself), and starts no plan run for it (the source did).

Exactly once. Entries from one source reach an owner in the order the source journaled them,
so the owner's memory of a source is one cursor, the last origin it journaled: an entry at or
before it is a second delivery and is not journaled again. The source journals
``outbox.delivered {to, seq, idx}`` once the owner says it holds everything up to that origin,
and drops those entries; before it sends after a restart it asks the owner's cursor first, so
what was delivered is not sent again. Both the outbox and the cursors are kernel state: in the
snapshot, and rebuilt by replay from the records above.

Ordering promise: per source partition, in the source's journal order; none across sources
(two partitions' events to one key arrive in any interleaving the forwarders make).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from air import cbor
from air.cbor import digest
from air.errors import InvalidArgument, UsageError
from kernel._moves import CELL_IMPORTED

__all__ = [
    "OUTBOX_DELIVERED",
    "PARTITIONS_MAX",
    "Outgoing",
    "Partition",
    "owner_of",
]

PARTITIONS_MAX: Final = 1024
"""Partitions of one world at most (the count is fixed at creation)."""
OUTBOX_DELIVERED: Final = "outbox.delivered"

Origin = tuple[int, int, int]
"""(source partition, seq of the record that holds the event there, index of its first
delivery): an event's identity across partitions."""


def owner_of(key_hash: bytes, count: int) -> int:
    """The partition (of ``count``) owning a key whose blake3 digest is ``key_hash``."""
    return (int.from_bytes(key_hash[:8], "big") * count) >> 64


@dataclass(frozen=True, slots=True)
class Outgoing:
    """An outbox entry: an event owed to partition ``to``. ``target`` names the cell for a
    plan's ``raise_event`` (``[reducer, key_cbor]``); None when the owner routes the event."""

    to: int
    seq: int
    idx: int
    schema: str
    value_cbor: bytes
    target: tuple[str, bytes | None] | None = None

    def to_obj(self) -> list[Any]:
        target = None if self.target is None else list(self.target)
        return [self.to, self.seq, self.idx, self.schema, self.value_cbor, target]

    @classmethod
    def from_obj(cls, obj: list[Any]) -> Outgoing:
        to, seq, idx, schema, value_cbor, target = obj
        return cls(to, seq, idx, schema, value_cbor, None if target is None else tuple(target))


class Partition:
    """Partition ``index`` of ``count``: ownership, the outbox, and the cursor per source."""

    def __init__(self, index: int, count: int) -> None:
        if not isinstance(count, int) or not 1 <= count <= PARTITIONS_MAX:
            raise InvalidArgument("partitions", count, f"between 1 and {PARTITIONS_MAX}")
        if not isinstance(index, int) or not 0 <= index < count:
            raise InvalidArgument("partition", index, f"between 0 and {count - 1}")
        self.index = index
        self.count = count
        self.outbox: dict[int, deque[Outgoing]] = {}
        self.cursors: dict[int, tuple[int, int]] = {}

    @classmethod
    def from_genesis(cls, body: dict[str, Any]) -> Partition | None:
        """The partition a ``world.created`` body names; None for an ordinary world."""
        spec = body.get("partition")
        if spec is None:
            return None
        return cls(spec["index"], spec["count"])

    def genesis(self) -> dict[str, int]:
        return {"index": self.index, "count": self.count}

    def owner(self, key_cbor: bytes | None, key_hash: bytes) -> int:
        """The partition owning a delivery to a cell (``key_cbor`` None: a non-keyed
        reducer, partition 0)."""
        return 0 if key_cbor is None else owner_of(key_hash, self.count)

    # --- the outbox (this partition as a source) -------------------------------------------

    def owe(self, entry: Outgoing) -> None:
        self.outbox.setdefault(entry.to, deque()).append(entry)

    def pending(self, to: int, limit: int) -> list[Outgoing]:
        """The first ``limit`` entries owed to ``to``, oldest first."""
        queue = self.outbox.get(to, ())
        return [entry for _, entry in zip(range(limit), queue, strict=False)]

    def backlog(self) -> dict[int, int]:
        """Entries owed, per owner (only owners owed something)."""
        return {to: len(queue) for to, queue in sorted(self.outbox.items()) if queue}

    def delivered(self, to: int, seq: int, idx: int) -> None:
        """Owner ``to`` holds everything up to origin ``(seq, idx)``: drop those entries."""
        queue = self.outbox.get(to)
        while queue and (queue[0].seq, queue[0].idx) <= (seq, idx):
            queue.popleft()
        if queue is not None and not queue:
            del self.outbox[to]

    # --- cursors (this partition as an owner) -----------------------------------------------

    def new_entries(self, source: int, entries: Sequence[Outgoing]) -> list[Outgoing]:
        """The entries from ``source`` past its cursor, in order (one at or before the
        cursor, or before an earlier one of the batch, is a second delivery: left out)."""
        if not isinstance(source, int) or not 0 <= source < self.count or source == self.index:
            raise InvalidArgument("source", source, f"another partition of {self.count}")
        last = self.cursors.get(source, (-1, -1))
        taken = []
        for entry in entries:
            if entry.to != self.index:
                raise UsageError(f"an entry for partition {entry.to} sent to {self.index}")
            if (entry.seq, entry.idx) > last:
                taken.append(entry)
                last = (entry.seq, entry.idx)
        return taken

    @staticmethod
    def forwarded_body(source: int, entry: Outgoing) -> dict[str, Any]:
        """The ``event.in`` body an owner journals for an entry."""
        body: dict[str, Any] = {
            "schema": entry.schema,
            "value": entry.value_cbor,
            "origin": [source, entry.seq, entry.idx],
        }
        if entry.target is not None:
            body["to"] = list(entry.target)
        return body

    def refuse_foreign(self, records: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
        """Refuse (before anything is journaled) a ``cell.imported`` of a cell another
        partition owns: it would live where no event for it is routed."""
        for kind, _subject, body in records:
            key_cbor = body.get("key")
            if kind != CELL_IMPORTED or key_cbor is None:
                continue
            owner = owner_of(digest(key_cbor), self.count)
            if owner != self.index:
                raise InvalidArgument(
                    "cell",
                    f"{body['reducer']} {cbor.loads(key_cbor)!r}",
                    f"partition {owner} of {self.count} owns it, not this one ({self.index}): "
                    "import it there",
                )

    def take(self, origin: Origin) -> None:
        source, seq, idx = origin
        self.cursors[source] = (seq, idx)

    def cursor(self, source: int) -> tuple[int, int] | None:
        """The last origin of ``source`` journaled here; None before the first."""
        return self.cursors.get(source)

    # --- snapshot ---------------------------------------------------------------------------

    def to_obj(self) -> dict[str, Any]:
        return {
            **self.genesis(),
            "outbox": [e.to_obj() for to in sorted(self.outbox) for e in self.outbox[to]],
            "cursors": [[s, *c] for s, c in sorted(self.cursors.items())],
        }

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> Partition:
        partition = cls(obj["index"], obj["count"])
        for item in obj["outbox"]:
            partition.owe(Outgoing.from_obj(item))
        partition.cursors = {s: (seq, idx) for s, seq, idx in obj["cursors"]}
        return partition
