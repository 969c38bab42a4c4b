"""The partitioned variant (``--cluster``): a ``LocalCluster`` of ``PARTITIONS`` counter
partitions and a plan, ``sim/fan@1``, started by ``sim/Fan@1 {a, b, c}`` (no keyed route: it
runs in partition 0) that raises ``Add 1`` to each of the three cells it names, so most of its
events are forwarded to other partitions (``kernel._partition``: exactly once).

Actions: ``send`` a batch of ``Add``s and ``Fan``s, some with ids (each journaled in its home
partition); ``resend`` an earlier batch; ``run`` the cluster until idle; ``kill`` one partition
(its process dies: no checkpoint, reopened, its outbox resynced); ``crash`` every partition;
``power`` (a power cut over the whole cluster directory inside the next few actions, then every
partition reopened from what was durable).

Invariants: every acknowledged event is journaled once in its partition at its seq (an
unacknowledged id at most once); no partition journals one origin's forwarded event twice; at
the end, every partition replays exactly on its own and the cells equal the model: the sum of
the ``Add``s journaled, and 1 for each of a ``Fan``'s three cells.
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from powerloss import PowerLoss  # type: ignore[import-not-found]

from air import cbor
from simulation._script import Action
from simulation._world import COUNTER, EVENT, KEYS, Failure, air_folders, under_power
from world.cluster import LocalCluster, PartitionNode, init_cluster, partition_dir, resync
from world.history import verify_world

PARTITIONS: Final = 3
FAN: Final = "sim/Fan@1"
POWER_ACTIONS: Final = 6
CLUSTER_KEYS: Final = (*KEYS, "e", "f", "g", "h")
"""More keys than the single world's, so every partition owns some."""


def make_cluster(root: Path) -> Path:
    """A partitioned world of ``PARTITIONS`` under ``root``; its directory."""
    path = root / "c"
    init_cluster(path, air_folders() / "air_fan", PARTITIONS)
    return path


def draw_cluster_script(seed: int, steps: int) -> list[Action]:
    rng = random.Random(seed)
    kinds = ["send"] * 6 + ["resend", "run", "run", "kill", "kill", "crash", "power"]
    script = []
    for _ in range(steps):
        kind = rng.choice(kinds)
        if kind == "send":
            events: list[tuple[str, Any, bool]] = []
            for _e in range(rng.randint(1, 4)):
                with_id = rng.random() < 0.6
                if rng.random() < 0.3:
                    cells = tuple(rng.choice(CLUSTER_KEYS) for _c in range(3))
                    events.append(("fan", cells, with_id))
                else:
                    events.append(("add", (rng.choice(CLUSTER_KEYS), rng.randint(1, 9)), with_id))
            script.append(Action("send", tuple(events)))
        elif kind in ("resend", "kill"):
            script.append(Action(kind, (rng.randrange(1 << 16),)))
        elif kind == "power":
            script.append(Action("power", (rng.randint(0, 40),)))
        else:
            script.append(Action(kind))
    return script


@dataclass
class Batch:
    """A batch as sent: its events (schema, value, id) and, once acknowledged, each one's
    (partition, seq)."""

    events: list[tuple[str, Any, str | None]]
    placed: list[tuple[int, int]] | None = None


@dataclass
class ClusterSim:
    """The partitioned world at ``path`` as the script drives it (``Sim``'s counterpart)."""

    path: Path
    batches: list[Batch] = field(default_factory=list)
    next_id: int = 0
    cluster: LocalCluster | None = None
    power: PowerLoss | None = None
    power_left: int = 0
    _power_on: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    # --- the processes ----------------------------------------------------------------------

    def start(self) -> None:
        self.cluster = LocalCluster(self.path)

    @staticmethod
    def _die(node: PartitionNode) -> None:
        if node.engine is not None:
            node.engine.close()
        w = node.world
        w._closed = True  # no checkpoint: the process is gone
        with contextlib.suppress(Exception):
            w.journal.close()
        w._lock.release()

    def die(self) -> None:
        if self.cluster is not None:
            for node in self.cluster.nodes:
                self._die(node)
            self.cluster.nodes = []
        self.cluster = None

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    # --- actions ----------------------------------------------------------------------------

    def act(self, action: Action) -> str:
        do = getattr(self, f"do_{action.kind}")
        if self.power is None:
            return str(do(*action.args))
        return under_power(
            self, do, action.args, lambda: "every partition reopened from what was durable"
        )

    def do_send(self, *events: tuple[str, Any, bool]) -> str:
        batch = Batch([])
        for kind, what, with_id in events:
            event_id = None
            if with_id:
                event_id, self.next_id = f"e{self.next_id}", self.next_id + 1
            if kind == "fan":
                a, b, c = what
                batch.events.append((FAN, {"a": a, "b": b, "c": c}, event_id))
            else:
                key, n = what
                batch.events.append(
                    (EVENT, {"key": key, "op": {"$tag": "Add", "$value": n}}, event_id)
                )
        self.batches.append(batch)
        return self._send(batch)

    def _send(self, batch: Batch) -> str:
        assert self.cluster is not None
        placed = self.cluster.send_many(
            [(s, v) for s, v, _i in batch.events], [i for _s, _v, i in batch.events]
        )
        if batch.placed is not None:
            for (_s, _v, event_id), old, new in zip(
                batch.events, batch.placed, placed, strict=True
            ):
                if event_id is not None and old != new:
                    raise Failure(
                        f"resent id {event_id} answered {new}, first acknowledged at {old}"
                    )
        else:
            batch.placed = placed
        return f"acknowledged (partition, seq) {placed}"

    def do_resend(self, pick: int) -> str:
        if not self.batches:
            return "nothing to resend"
        index = pick % len(self.batches)
        return self._send(self.batches[index]) + f" (batch {index} again)"

    def do_run(self) -> str:
        assert self.cluster is not None
        steps = self.cluster.run_until_idle()
        return f"ran {steps} step(s)"

    def do_kill(self, pick: int) -> str:
        assert self.cluster is not None
        index = pick % PARTITIONS
        self._die(self.cluster.nodes[index])
        node = PartitionNode(partition_dir(self.path, index))
        self.cluster.nodes[index] = node
        resync(node, self.cluster.node)
        return f"killed partition {index} and reopened it"

    def do_crash(self) -> str:
        self.die()
        self.start()
        return "every partition crashed and reopened"

    def do_power(self, cut_at: int) -> str:
        if self.power is not None:
            return "a power cut is armed already"
        self.power, self.power_left = PowerLoss(self.path, cut_at=cut_at, seed=None), POWER_ACTIONS
        self._power_on = contextlib.ExitStack()
        self._power_on.enter_context(self.power.installed())
        return (
            f"armed a power cut at durable operation {cut_at} of the next {POWER_ACTIONS} actions"
        )

    # --- invariants -------------------------------------------------------------------------

    def _records(self) -> list[list[Any]]:
        assert self.cluster is not None
        return [list(node.world.journal.read(0)) for node in self.cluster.nodes]

    def check(self) -> None:
        journals = self._records()
        for index, recs in enumerate(journals):
            ins = [r for r in recs if r.kind == "event.in"]
            ids = Counter(r.body["id"] for r in ins if "id" in r.body)
            for event_id, count in ids.items():
                if count > 1:
                    raise Failure(
                        f"event id {event_id} journaled {count} times in partition {index}"
                    )
            origins = Counter(tuple(r.body["origin"]) for r in ins if "origin" in r.body)
            for origin, count in origins.items():
                if count > 1:
                    raise Failure(
                        f"partition {index} journaled the forwarded {list(origin)} {count} times"
                    )
        by_seq = [{r.seq: r for r in recs} for recs in journals]
        for batch in self.batches:
            for (schema, value, event_id), (part, seq) in zip(
                batch.events, batch.placed or [], strict=False
            ):
                rec = by_seq[part].get(seq)
                if rec is None or rec.kind != "event.in":
                    raise Failure(
                        f"acknowledged ({part}, {seq}) {schema} {value} is not in its journal"
                    )
                got = (rec.body["schema"], cbor.loads(rec.body["value"]), rec.body.get("id"))
                if got != (schema, value, event_id):
                    raise Failure(f"acknowledged ({part}, {seq}) holds {got}")

    def final(self) -> None:
        if self.power is not None:
            self.power = None
            self._power_on.close()
        assert self.cluster is not None
        self.cluster.run_until_idle()
        self.check()
        model: dict[str, list[int]] = {}
        for recs in self._records():
            for rec in recs:
                if rec.kind != "event.in" or "origin" in rec.body:
                    continue
                value = cbor.loads(rec.body["value"])
                if rec.body["schema"] == EVENT:
                    adds = [(value["key"], value["op"]["$value"])]
                else:
                    adds = [(value[slot], 1) for slot in ("a", "b", "c")]
                for key, n in adds:
                    cell = model.setdefault(key, [0, 0])
                    cell[0] += n
                    cell[1] += 1
        got = {c.key: c.state for c in self.cluster.cells(COUNTER)}
        want = {k: {"count": c, "events": e} for k, (c, e) in model.items()}
        if got != want:
            raise Failure(
                f"cells {sorted(got.items())} differ from the model {sorted(want.items())}"
            )
        for node in self.cluster.nodes:
            node.world.commit()
        for index in range(PARTITIONS):
            report = verify_world(partition_dir(self.path, index))
            if report.divergence is not None or report.mismatches:
                raise Failure(
                    f"partition {index} replays differently: {report.divergence or report.mismatches[:3]}"
                )
