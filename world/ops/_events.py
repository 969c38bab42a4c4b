"""Events in: ``events.send``, one durable batch of events of one schema.

A batch is all or nothing (``World.send_many``): every value is normalised before any is
journaled, and a bad one rejects the batch by its index (``EventRejected``). Each event may
carry an idempotency id: an event whose id the journal already holds (any ever journaled:
``world._event_ids``), or an earlier event of the same batch has, is not journaled again, and that
one's seq is answered for it, so a client that lost an acknowledgement sends again, whatever the
size of the batch and however often. The answer says exactly what happened: ``seqs`` (each
event's), ``duplicates`` (how many were not journaled) and ``journaled`` (the first and last seq
of those that were, consecutive; empty when none was).

A batch too big for one request of a transport is sent in parts: each part but the last says
``more`` and gets a ``batch`` token the next part names; the parts are only staged (at most
``STAGED_EVENTS_MAX`` events, ``STAGED_BATCHES_MAX`` batches at a time, the oldest dropped: a
client that went away) and the last part journals them all as one batch, so a client that goes
away mid-batch leaves nothing journaled. The remote handles split and send the parts
(``world.ops._handle.RemoteHandle``); in process there is one part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

from pydantic import Field

from air.errors import InvalidArgument, LimitExceeded
from world.ops._base import Args, Context, Result, operation

__all__ = ["STAGED_BATCHES_MAX", "STAGED_EVENTS_MAX", "Send", "Sent", "send"]

STAGED_EVENTS_MAX: Final = 10_000_000
"""Events one batch may stage before its last part."""
STAGED_BATCHES_MAX: Final = 8
"""Batches staged at a time; a ninth drops the oldest (a client that went away)."""


class Send(Args):
    schema_: str = Field(alias="schema", description="The events' schema, e.g. demo/CounterEvent@1")
    values: list[Any] = Field(description="The event values, sugar JSON")
    ids: list[str | None] | None = Field(
        default=None, description="One idempotency id per value (text, or null for none)"
    )
    batch: int | None = Field(default=None, description="The token of the batch this part goes on")
    more: bool = Field(default=False, description="More parts follow: stage, journal nothing yet")


class Sent(Result):
    seqs: list[int] = Field(description="The journal seq of each event (a duplicate's: the first)")
    duplicates: int = Field(
        default=0, description="Events not journaled: one under their id was already"
    )
    journaled: list[int] = Field(
        default_factory=list,
        description="The first and last seq of the events this batch journaled (consecutive); "
        "empty when none was new, or in a partitioned world (each partition's own)",
    )
    batch: int | None = Field(default=None, description="With more: the batch's token")
    staged: int = Field(default=0, description="With more: the events staged so far")
    partitions: list[int] | None = Field(
        default=None,
        description="A partitioned world: the partition that journaled each event (the seqs "
        "are its journal's)",
    )


@operation("events.send", writes=True)
def send(ctx: Context, args: Send) -> Sent:
    """Send events into the world: one durable batch, acknowledged when journaled."""
    values, ids = list(args.values), _ids(args)
    if not values:
        raise InvalidArgument("values", 0, "send at least one event")
    if args.batch is not None:
        staged = ctx.staged.pop(args.batch, None)
        if staged is None:
            raise InvalidArgument("batch", args.batch, "no batch by that token is being staged")
        if staged[0] != args.schema_:
            raise InvalidArgument("schema", args.schema_, f"batch {args.batch} is of {staged[0]}")
        values, ids = staged[1] + values, staged[2] + ids
    if len(values) > STAGED_EVENTS_MAX:
        raise LimitExceeded("STAGED_EVENTS_MAX", STAGED_EVENTS_MAX, f"{len(values)} events")
    if args.more:
        ctx.tokens += 1
        ctx.staged[ctx.tokens] = (args.schema_, values, ids)
        while len(ctx.staged) > STAGED_BATCHES_MAX:
            ctx.staged.pop(next(iter(ctx.staged)))
        return Sent(seqs=[], batch=ctx.tokens, staged=len(values))
    world = ctx.world
    seq_before = world.journal.seq_next
    events = [(args.schema_, v) for v in values]
    taken = events if ctx.progress is None else _counted(events, ctx.progress)
    seqs = world.send_many(taken, ids=ids)
    seq_after = world.journal.seq_next
    journaled = [seq_before, seq_after - 1] if seq_after > seq_before else []
    return Sent(seqs=seqs, duplicates=len(seqs) - (seq_after - seq_before), journaled=journaled)


def _counted(items: list[Any], progress: Callable[[int, int], None]) -> Iterator[Any]:
    """``items``, calling ``progress(done, total)`` as they are taken (about 100 times in
    all): ``World.send_many`` checks each event as it takes it, then journals them all."""
    total = len(items)
    every = max(1, total // 100)
    for done, item in enumerate(items, start=1):
        yield item
        if done % every == 0 or done == total:
            progress(done, total)


def _ids(args: Send) -> list[str | None]:
    if args.ids is None:
        return [None] * len(args.values)
    if len(args.ids) != len(args.values):
        count = len(args.values)
        raise InvalidArgument("ids", len(args.ids), f"must be a list of {count} ids (text or null)")
    return list(args.ids)
