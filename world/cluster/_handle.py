"""The handle of a partitioned world (``PartitionedHandle``): the same methods, results and
errors as a single world's (``world.ops.Handle``), each operation answered by the partitions
it concerns, through a handle of each (``LocalHandle`` on a partition open in this process, or
``world.cluster.ray.ActorHandle`` on a partition's Ray actor, which runs the operation there;
``world.cluster.open_cluster`` picks).

How each operation is answered (``ROUTES`` has one entry per operation; a test checks it):
- **by the owner of a key**: ``world.state``, ``cells.show``, ``cells.tail``, ``why``; positions
  (``at``, ``from_seq``, the seqs in a cell's history) are that partition's journal's. A key
  that does not read as the reducer's key, and a non-keyed reducer, go to partition 0, which
  says what a single world says.
- **split by owner**: ``events.send``: each event goes to its home (``Router``: the owner of
  its key), one durable batch per partition; ``Sent.partitions`` names the partition of each
  seq. A batch with a value that does not read as its schema goes to partition 0 whole, which
  rejects it as a single world does (nothing journaled anywhere). ``cells.upgrade`` with keys
  sends each key to its owner.
- **every partition, merged**: ``world.info`` (figures summed, lists joined, each partition's
  own in ``partitions``), ``world.snapshot`` (each partition's in ``partitions``), ``cells.ls``
  (every partition's page merged in key order: the same pages as one world holding every
  cell, each with its ``partition``), ``cells.upgrade`` without keys, and the listings ``runs.ls``, ``dead_letters.ls``,
  ``effects.ls``, ``upgrade.ls``, each row with its ``partition``.
- **the one partition that has it**: ``runs.show``/``cancel``, ``dead_letters.show``/
  ``retry``/``drop``, ``effects.approve``/``deny``, ``upgrade.show``. Ids are a partition's
  own: a run id, a dead letter's id, a proposal's id may be in two partitions, and then the
  answer is ``InvalidArgument`` naming them (ask one partition's world, ``DIR/p<i>``); none:
  partition 0's error (``UnknownName``).
- **one partition only**: ``journal.tail``, ``cells.import`` and ``cells.export`` of every cell
  (a partitioned world has a journal per partition; an imported cell would land in the
  partition imported into, whoever owns its key): refused (``WrongMode``) when there are
  more partitions than one; ask ``DIR/p<i>``. ``cells.export`` of one key goes to its owner.
- **refused**: ``upgrade.propose|approve|apply|shadow``: the whole world changes at once, with
  ``world cluster upgrade`` (``upgrade_cluster``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from air.errors import InvalidArgument, UnknownName, WorldError, WrongMode
from air.types import Ref
from air.values import normalise
from world._reading import key_cbor
from world.cluster._layout import Layout, Router
from world.ops import (
    REGISTRY,
    Args,
    CellsOf,
    CellsPage,
    CellsUpgrade,
    CellsUpgraded,
    Handle,
    Info,
    NoArgs,
    Operation,
    Result,
    Send,
    Sent,
    Snapshot,
    lookup,
)

__all__ = ["ROUTES", "PartitionedHandle"]

Route = Callable[["PartitionedHandle", Operation, Any], Result]


class PartitionedHandle(Handle):
    """A partitioned world to ask: ``parts[i]`` asks partition ``i``; ``statuses`` says how
    each partition is (its ``info`` with its outbox and cursors, and on Ray its process);
    ``cluster`` is the ``LocalCluster`` when the partitions are open here (``readonly``: for
    reads only; an operation that writes is refused before anything is asked)."""

    def __init__(
        self,
        layout: Layout,
        parts: Sequence[Handle],
        statuses: Callable[[], list[dict[str, Any]]],
        *,
        cluster: Any = None,
        readonly: bool = False,
    ) -> None:
        self.layout = layout
        self.parts = list(parts)
        self.air = layout.air()
        self.router = Router(self.air, layout.count)
        self.statuses = statuses
        self.cluster = cluster
        self.readonly = readonly

    @property
    def count(self) -> int:
        return len(self.parts)

    def _call(self, op: Operation, args: Args) -> Result:
        if op.writes and self.readonly:
            raise WrongMode(op.name, "open read-only")
        return ROUTES[op.name](self, op, args)

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
        else:
            for part in self.parts:
                part.close()

    def interrupt(self) -> None:
        for part in self.parts:
            part.interrupt()

    @property
    def notices(self) -> list[str]:
        return [f"p{i}: {n}" for i, part in enumerate(self.parts) for n in part.notices]

    def run_until_idle(self) -> int:
        """Drive every partition here until idle (the steps run); a cluster open here only."""
        if self.cluster is None:
            raise WrongMode("run the partitions here", "up on Ray: its actors run them")
        return int(self.cluster.run_until_idle())

    # --- where an operation goes ------------------------------------------------------------

    def owner(self, reducer: str, key: Any) -> int:
        """The partition owning ``reducer``'s cell ``key`` (0 for no key, or one that does
        not read as the reducer's: partition 0 says what is wrong)."""
        if key is None or self.count == 1:
            return 0
        from kernel import owner_of
        from kernel.cells import key_hash

        try:
            found = key_cbor(self.air, reducer, key)
        except WorldError:
            return 0
        return owner_of(key_hash(found), self.count)

    def ask(self, index: int, op: Operation, args: Args) -> Result:
        return self.parts[index]._call(op, args)

    def every(self, op: Operation, args: Args) -> list[Result]:
        return [part._call(op, args) for part in self.parts]

    def _send(self, schema: str, values: list[Any], ids: list[str | None] | None) -> Sent:
        homes = self._homes(schema, values)
        groups: dict[int, list[int]] = {} if values else {0: []}  # partition 0 refuses none
        for i, home in enumerate(homes):
            groups.setdefault(home, []).append(i)
        seqs, partitions, duplicates = [0] * len(values), [0] * len(values), 0
        for home, mine in sorted(groups.items()):
            sent = self.parts[home].send_many(
                schema,
                [values[i] for i in mine],
                ids=None if ids is None else [ids[i] for i in mine],
            )
            duplicates += sent.duplicates
            for i, seq in zip(mine, sent.seqs, strict=True):
                seqs[i], partitions[i] = seq, home
        return Sent(seqs=seqs, duplicates=duplicates, partitions=partitions)

    def _homes(self, schema: str, values: list[Any]) -> list[int]:
        """Each value's home; every one partition 0 when one does not read as ``schema``
        (partition 0 rejects the batch whole, naming it, as a single world does)."""
        if self.count == 1 or not values:
            return [0] * len(values)
        try:
            for value in values:
                normalise(Ref(schema), value, self.air.schemas)
        except (WorldError, KeyError, TypeError, ValueError):
            return [0] * len(values)
        return [self.router.home(schema, value) for value in values]


# --- the routes ---------------------------------------------------------------------------------


def _send(h: PartitionedHandle, op: Operation, args: Send) -> Result:
    if args.batch is not None or args.more:
        raise InvalidArgument("more", args.more, "a partitioned world takes a send whole")
    return h._send(args.schema_, list(args.values), None if args.ids is None else list(args.ids))


def _by_key(h: PartitionedHandle, op: Operation, args: Any) -> Result:
    return h.ask(h.owner(args.reducer, args.key), op, args)


def _single(what: str) -> Route:
    def route(h: PartitionedHandle, op: Operation, args: Any) -> Result:
        if h.count > 1:
            raise WrongMode(op.name, f"a partitioned world {what}: ask one partition, DIR/p<i>")
        return h.ask(0, op, args)

    return route


def _export(h: PartitionedHandle, op: Operation, args: Any) -> Result:
    if args.all:
        return _single("exports a partition's cells at a time")(h, op, args)
    return _by_key(h, op, args)


def _refused(h: PartitionedHandle, op: Operation, args: Any) -> Result:
    raise WrongMode(
        op.name,
        "a partitioned world changes its AIR in every partition at once: world cluster upgrade",
    )


def _info(h: PartitionedHandle, op: Operation, args: NoArgs) -> Result:
    rows = h.statuses()
    live = [r for r in rows if r.get("ok", True) and "journal_seq_next" in r]
    first = live[0] if live else {}
    reducers: dict[str, dict[str, Any]] = {}
    for row in live:
        for name, figures in row["reducers"].items():
            if name not in reducers:
                reducers[name] = dict(figures)
            elif "cells" in figures:
                reducers[name]["cells"] = reducers[name].get("cells", 0) + figures["cells"]
    effects: dict[str, int] = {}
    for row in live:
        for name, n in row["effects"].items():
            effects[name] = effects.get(name, 0) + n

    def total(field: str) -> int:
        return sum(int(r[field]) for r in live)

    def joined(field: str) -> list[dict[str, Any]]:
        return [{**item, "partition": r["partition"]} for r in live for item in r[field]]

    return Info.model_validate(
        {
            "path": str(h.layout.root),
            "manifest_hash": first.get("manifest_hash", ""),
            "eras": first.get("eras", []),
            "journal_seq_next": total("journal_seq_next"),
            "steps_total": total("steps_total"),
            "pending_deliveries": total("pending_deliveries"),
            "ready_entities": total("ready_entities"),
            "reducers": reducers,
            "dead_letters": joined("dead_letters"),
            "dead_letters_total": total("dead_letters_total"),
            "dead_letters_kept": total("dead_letters_kept"),
            "steps_failed": total("steps_failed"),
            "runs": joined("runs"),
            "runs_started": total("runs_started"),
            "runs_failed": total("runs_failed"),
            "effects": effects,
            "effects_mode": first.get("effects_mode", {}),
            "logical_now_ns": max((int(r["logical_now_ns"]) for r in live), default=0),
            "notices": [f"p{r['partition']}: {n}" for r in live for n in r["notices"]],
            "ok": len(live) == len(rows),
            "partitions": rows,
        }
    )


def _snapshot(h: PartitionedHandle, op: Operation, args: NoArgs) -> Result:
    found = [s.snapshot for s in h.every(op, args)]  # type: ignore[attr-defined]
    return Snapshot(snapshot=found[0], partitions=found)


def _cells_ls(h: PartitionedHandle, op: Operation, args: CellsOf) -> Result:
    """Every partition's page after ``after``, merged by key (its canonical CBOR, as one world
    sorts): the first ``limit``; more follow when a partition had more or some were left."""
    pages = [p for p in h.every(op, args) if isinstance(p, CellsPage)]
    cells = [{**c, "partition": i} for i, p in enumerate(pages) for c in p.cells]
    if h.count > 1:
        cells.sort(key=lambda c: key_cbor(h.air, args.reducer, c["key"]))
    more = len(cells) > args.limit or any(p.next_after is not None for p in pages)
    cells = cells[: args.limit]
    return CellsPage(
        reducer=args.reducer,
        count=sum(p.count for p in pages),
        cells=cells,
        current_era=pages[0].current_era,
        next_after=cells[-1]["key"] if more and cells else None,
    )


def _cells_upgrade(h: PartitionedHandle, op: Operation, args: CellsUpgrade) -> Result:
    if args.keys is None:
        asked = dict.fromkeys(range(h.count), args)
    else:
        keys: dict[int, list[Any]] = {}
        for key in args.keys:
            keys.setdefault(h.owner(args.reducer, key), []).append(key)
        asked = {i: CellsUpgrade(reducer=args.reducer, keys=k) for i, k in sorted(keys.items())}
    found = [h.ask(i, op, a) for i, a in asked.items()]
    done = [f for f in found if isinstance(f, CellsUpgraded)]
    return CellsUpgraded(
        upgraded=sum(f.upgraded for f in done),
        already_current=sum(f.already_current for f in done),
        failed=[x for f in done for x in f.failed],
        records=[x for f in done for x in f.records],
    )


def _joined(field: str, *, sums: Sequence[str] = (), firsts: Sequence[str] = ()) -> Route:
    """Every partition's listing ``field`` joined, each row with its ``partition``; the
    figures ``sums`` added up, ``firsts`` partition 0's."""

    def route(h: PartitionedHandle, op: Operation, args: Any) -> Result:
        found = [f.model_dump() for f in h.every(op, args)]
        merged: dict[str, Any] = {
            field: [{**row, "partition": i} for i, f in enumerate(found) for row in f[field]]
        }
        merged.update({name: sum(f[name] for f in found) for name in sums})
        merged.update({name: found[0][name] for name in firsts})
        return op.result.model_validate(merged)

    return route


def _located(show: str | None = None) -> Route:
    """Asked of the one partition that has the thing ``args`` names (``show``: the read that
    says whether one has it; None: the operation itself, a read)."""

    def route(h: PartitionedHandle, op: Operation, args: Any) -> Result:
        index = _locate(h, lookup(show) if show else op, args)
        return h.ask(index, op, args)

    return route


def _locate(h: PartitionedHandle, probe: Operation, args: Any) -> int:
    if h.count == 1:
        return 0
    found: list[int] = []
    first_error: WorldError | None = None
    for index in range(h.count):
        try:
            h.ask(index, probe, args)
        except UnknownName as exc:
            first_error = first_error or exc
            continue
        found.append(index)
    if not found:
        assert first_error is not None
        raise first_error
    if len(found) > 1:
        name, value = next(iter(args.plain().items()))
        where = ", ".join(f"p{i}" for i in found)
        raise InvalidArgument(name, value, f"in partitions {where}: ask one, DIR/p<i>")
    return found[0]


def _intent(h: PartitionedHandle, op: Operation, args: Any) -> Result:
    """The partition holding an intent with that hash (or prefix); none or several: partition
    0's answer (its ``UnknownName``), or ``InvalidArgument`` naming them."""
    listed = lookup("effects.ls")
    holders = [
        i
        for i in range(h.count)
        if any(
            row["intent_hash"].startswith(args.intent)
            for row in h.ask(i, listed, NoArgs()).intents  # type: ignore[attr-defined]
        )
    ]
    if len(holders) > 1:
        where = ", ".join(f"p{i}" for i in holders)
        raise InvalidArgument("intent", args.intent, f"in partitions {where}: give more of it")
    return h.ask(holders[0] if holders else 0, op, args)


ROUTES: Final[dict[str, Route]] = {
    "events.send": _send,
    "world.info": _info,
    "world.state": _by_key,
    "world.snapshot": _snapshot,
    "cells.ls": _cells_ls,
    "cells.show": _by_key,
    "cells.tail": _by_key,
    "cells.upgrade": _cells_upgrade,
    "cells.export": _export,
    "cells.import": _single("takes a cell in the partition owning its key only"),
    "journal.tail": _single("has a journal per partition"),
    "runs.ls": _joined("runs"),
    "runs.show": _located(),
    "runs.cancel": _located("runs.show"),
    "dead_letters.ls": _joined("letters", sums=("total", "kept", "steps_failed")),
    "dead_letters.show": _located(),
    "dead_letters.retry": _located("dead_letters.show"),
    "dead_letters.drop": _located("dead_letters.show"),
    "effects.ls": _joined("intents", sums=("dead_effects",)),
    "effects.approve": _intent,
    "effects.deny": _intent,
    "upgrade.ls": _joined("proposals", firsts=("current",)),
    "upgrade.show": _located(),
    "upgrade.propose": _refused,
    "upgrade.approve": _refused,
    "upgrade.apply": _refused,
    "upgrade.shadow": _refused,
    "why": _by_key,
}
assert set(ROUTES) == set(REGISTRY), sorted(set(ROUTES) ^ set(REGISTRY))
