"""The actors of a partitioned world on Ray and their client (``world.cluster.ray`` says how
they work together, fail and are placed)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from air.errors import UsageError
from kernel import Outgoing
from world.cluster._layout import Layout, Router, partition_dir
from world.cluster._node import PartitionNode
from world.ops import RemoteHandle, Sent

if TYPE_CHECKING:
    from world.cluster._handle import PartitionedHandle
    from world.serve import Dispatcher

__all__ = [
    "ACTOR_OPTIONS",
    "NAMESPACE",
    "PLACEMENTS",
    "ActorHandle",
    "PartitionActor",
    "RayCluster",
    "RouterActor",
    "actor_name",
    "placement",
    "ray_module",
    "route",
    "start_actors",
]

NAMESPACE: Final = "world-cluster"
IDLE_WAIT_S: Final = 0.2
"""How long an idle partition sleeps when nothing wakes it (a send or a take wakes it at once;
this bounds how late a due timer or a retry of a failed forward is)."""
RETRY_WAIT_S: Final = 0.5
PLACEMENTS: Final = ("local", "shared")
PIN_SHARE: Final = 0.001
"""How much of a machine's ``node:<address>`` resource a pinned partition asks: any share
pins it there, and a thousand partitions fit on one machine."""
ACTOR_OPTIONS: Final[dict[str, Any]] = {
    "max_restarts": -1,
    "max_task_retries": -1,
    "num_cpus": 0.001,
    "max_concurrency": 8,
}
"""``num_cpus``: a thousandth of a core, so a thousand partitions fit on one (a partition
mostly waits on its disk; a whole CPU each would cap them at one per core), and a node that
offers no CPU (a head kept for drivers) hosts none."""


def actor_name(cluster_id: str, what: str) -> str:
    return f"{cluster_id}-{what}"


class PartitionActor:
    def __init__(self, root: str, index: int, cluster_id: str) -> None:
        self.index = index
        self.cluster_id = cluster_id
        self.failure: str | None = None
        self.node: PartitionNode | None = None
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._peers: dict[int, Any] = {}
        self._peer_errors: dict[int, str] = {}
        self._dispatcher: Dispatcher | None = None
        self._started = time.monotonic()
        self._events_at_start = 0
        try:
            self.node = PartitionNode(partition_dir(Path(root), index))
        except Exception as exc:  # the world's own message; the actor stays to say it
            self.failure = str(exc)
            return
        self._events_at_start = self.node.world.journal.seq_next
        self._thread = threading.Thread(target=self._loop, name=f"p{index}", daemon=True)
        self._thread.start()

    # --- calls --------------------------------------------------------------------------------

    def _open(self) -> PartitionNode:
        if self.node is None:
            raise UsageError(f"partition {self.index} stopped: {self.failure}")
        return self.node

    def send(self, events: Sequence[tuple[str, Any]], ids: Sequence[str | None]) -> list[int]:
        with self._lock:
            seqs = self._open().send(list(events), list(ids))
        self._wake.set()
        return seqs

    def take(self, source: int, entries: Sequence[Outgoing]) -> tuple[int, int] | None:
        with self._lock:
            cursor = self._open().take(source, list(entries))
        self._wake.set()
        return cursor

    def cursor(self, source: int) -> tuple[int, int] | None:
        with self._lock:
            return self._open().cursor(source)

    def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Operation ``name`` of ``world.ops`` on this partition, answered as a served world
        answers (``world.serve._dispatch``): its reply, or an error reply naming its class.
        It runs under the loop's lock; one that runs off the loop (``why``, a cell at a past
        position, an export) runs after it, on a read-only handle of its own."""
        from world.serve import Dispatcher

        with self._lock:  # the node and the dispatcher are the loop's too
            try:
                node = self._open()
            except UsageError as exc:  # a partition that could not open says why
                return Dispatcher.refusal(exc)
            if self._dispatcher is None:
                self._dispatcher = Dispatcher(node.world, lambda: None)
        reply: dict[str, Any] = self._dispatcher.reply(name, args, self._lock)
        self._wake.set()
        return reply

    def info(self) -> dict[str, Any]:
        ray = ray_module()
        base: dict[str, Any] = {
            "partition": self.index,
            "pid": os.getpid(),
            "node": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
        }
        if self.node is None:
            return {**base, "ok": False, "failure": self.failure}
        with self._lock:
            data = {**self.node.info(), **base, "ok": self.failure is None}
            elapsed = max(time.monotonic() - self._started, 1e-9)
            journaled = self.node.world.journal.seq_next - self._events_at_start
        data["records_per_s"] = round(journaled / elapsed, 1)
        data["idle"] = self.node.idle() and not data["outbox_backlog"]
        if self.failure is not None:
            data["failure"] = self.failure
        if self._peer_errors:
            data["forward_errors"] = {str(k): v for k, v in self._peer_errors.items()}
        return data

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        """Stop the loop and close the world (a checkpoint, as any writer's close)."""
        self._stop.set()
        self._wake.set()
        if self.node is not None:
            self._thread.join()
            with self._lock:
                self.node.close()
                self.node = None
                self.failure = "closed"

    # --- the loop -----------------------------------------------------------------------------

    def _peer(self, to: int) -> Any:
        peer = self._peers.get(to)
        if peer is None:
            name = actor_name(self.cluster_id, f"p{to}")
            peer = self._peers[to] = ray_module().get_actor(name, namespace=NAMESPACE)
        return peer

    def _owner(self, to: int) -> Any:
        actor = self

        class Remote:
            def take(self, source: int, entries: Sequence[Outgoing]) -> tuple[int, int] | None:
                cursor: tuple[int, int] | None = ray_module().get(
                    actor._peer(to).take.remote(source, entries)
                )
                return cursor

            def cursor(self, source: int) -> tuple[int, int] | None:
                found: tuple[int, int] | None = ray_module().get(
                    actor._peer(to).cursor.remote(source)
                )
                return found

        return Remote()

    def _loop(self) -> None:
        node = self.node
        assert node is not None
        synced = False
        while not self._stop.is_set():
            try:
                with self._lock:
                    ran = node.cycle()
                if not synced:
                    self._resync(node)
                    synced = True
                moved = self._forward(node)
            except Exception as exc:  # the world stopped (I/O, damage): say so, stop
                self.failure = f"{type(exc).__name__}: {exc}"
                return
            if not ran and not moved:
                wait = RETRY_WAIT_S if self._peer_errors else IDLE_WAIT_S
                self._wake.wait(wait)
                self._wake.clear()

    def _resync(self, node: PartitionNode) -> None:
        """``world.cluster._node.resync``, asking each owner without holding the lock."""
        with self._lock:
            owners = list(node.partition.backlog())
        for to in owners:
            cursor = self._owner(to).cursor(self.index)
            with self._lock:
                node.delivered(to, cursor)

    def _forward(self, node: PartitionNode) -> int:
        """One batch to each owner; an owner that fails is retried next turn (its entries
        stay owed), the others go on."""
        moved = 0
        with self._lock:
            owed = node.owed()
        for to, entries in owed.items():
            try:
                cursor = self._owner(to).take(self.index, entries)
            except Exception as exc:
                self._peer_errors[to] = str(exc).splitlines()[0][:300]
                continue
            self._peer_errors.pop(to, None)
            with self._lock:
                node.delivered(to, cursor)
            moved += len(entries)
        return moved


class ActorHandle(RemoteHandle):
    """Partition ``actor`` asked as a served world is (``PartitionActor.call`` runs the
    operation there). A send gives every event without an id one, so a call Ray retries (an
    actor restarted) journals it once."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def _transport(self, name: str, args: dict[str, Any]) -> Any:
        from world.serve import reply_result

        return reply_result(ray_module().get(self.actor.call.remote(name, args)))

    def _send(self, schema: str, values: list[Any], ids: list[str | None] | None) -> Sent:
        given = ids if ids is not None else [None] * len(values)
        named = [i if i is not None else f"cluster:{uuid.uuid4().hex}" for i in given]
        return super()._send(schema, values, list(named))


class RouterActor:
    def __init__(self, root: str, cluster_id: str) -> None:
        layout = Layout.read(Path(root))
        self.router = Router(layout.air(), layout.count)
        self.cluster_id = cluster_id
        self._peers: dict[int, Any] = {}

    def _peer(self, index: int) -> Any:
        peer = self._peers.get(index)
        if peer is None:
            name = actor_name(self.cluster_id, f"p{index}")
            peer = self._peers[index] = ray_module().get_actor(name, namespace=NAMESPACE)
        return peer

    def send(
        self, events: Sequence[tuple[str, Any]], ids: Sequence[str | None]
    ) -> list[tuple[int, int]]:
        """Each event to its home partition (one batch each); ``(partition, seq)`` of each."""
        return route(self.router, self._peer, events, ids)

    def pid(self) -> int:
        return os.getpid()


def route(
    router: Router, partition: Any, events: Sequence[tuple[str, Any]], ids: Sequence[str | None]
) -> list[tuple[int, int]]:
    """Send each event to its home partition (``partition(i)``: its actor), one batch per
    partition, all at once; ``(partition, seq)`` of each, in the order given."""
    homes = [router.home(schema, value) for schema, value in events]
    groups: dict[int, list[int]] = {}
    for i, home in enumerate(homes):
        groups.setdefault(home, []).append(i)
    refs = {
        home: partition(home).send.remote([events[i] for i in mine], [ids[i] for i in mine])
        for home, mine in groups.items()
    }
    placed: list[tuple[int, int]] = [(0, 0)] * len(events)
    for home, ref in refs.items():
        for i, seq in zip(groups[home], ray_module().get(ref), strict=True):
            placed[i] = (home, seq)
    return placed


def ray_module() -> Any:
    """Ray, imported on first use: its token settings are read from the environment when it
    is imported, and ``connect`` sets them first."""
    import ray

    return ray


def placement(layout: Layout, mode: str = "local") -> list[dict[str, str] | None]:
    """Where each partition runs, one entry per partition:

    - ``local`` (a directory on each machine's own disk): ``{"machine": address}``, the live
      machines taken in turn, pinned to that machine for good by Ray's ``node:<address>``
      resource, so a restart goes back there and, while it is down, waits for it (a node id
      would not do: a machine that comes back is a new node);
    - ``shared`` (a directory every machine mounts): None, not pinned: Ray spreads the
      partitions, and one whose node dies restarts on another (soft node affinity was tried
      for an even start: Ray put such actors on another node as often as not)."""
    if mode not in PLACEMENTS:
        raise UsageError(f"placement {mode!r}: one of {', '.join(PLACEMENTS)}")
    if mode == "shared":
        return [None] * layout.count
    alive = [node for node in ray_module().nodes() if node["Alive"]]
    machines = sorted({node["NodeManagerAddress"] for node in alive})
    return [{"machine": machines[i % len(machines)]} for i in range(layout.count)]


def _placed(where: dict[str, str] | None) -> dict[str, Any]:
    """The actor options of a ``placement`` entry (None: spread, not pinned)."""
    if where is None:
        return {"scheduling_strategy": "SPREAD"}
    return {"scheduling_strategy": "SPREAD", "resources": {f"node:{where['machine']}": PIN_SHARE}}


def start_actors(
    layout: Layout, *, detached: bool, nodes: Sequence[dict[str, str] | None] | None = None
) -> list[Any]:
    """Create the partition actors and the router (Ray must be initialised); their handles.
    Actors that are not ``detached`` live while a handle does (keep the list). ``nodes``: where
    each partition runs (``placement``; no list: spread, not pinned)."""
    lifetime = {"lifetime": "detached"} if detached else {}
    root = str(layout.root.resolve())
    handles = []
    ray = ray_module()
    partition_class, router_class = ray.remote(PartitionActor), ray.remote(RouterActor)
    for index in range(layout.count):
        handle = partition_class.options(
            name=actor_name(layout.id, f"p{index}"),
            namespace=NAMESPACE,
            **_placed(None if nodes is None else nodes[index]),
            **ACTOR_OPTIONS,
            **lifetime,
        ).remote(root, index, layout.id)
        handles.append(handle)
    router = router_class.options(
        name=actor_name(layout.id, "router"), namespace=NAMESPACE, **ACTOR_OPTIONS, **lifetime
    ).remote(root, layout.id)
    return [*handles, router]


class RayCluster:
    """The client: a partitioned world whose actors run on Ray (``ray.init`` done)."""

    def __init__(self, root: Path, handles: Sequence[Any] = ()) -> None:
        """``handles``: of actors this client started (``start_actors``), kept alive by it."""
        self.layout = Layout.read(Path(root))
        self._handles = list(handles)
        self._router = Router(self.layout.air(), self.layout.count)

    def actor(self, what: str) -> Any:
        return ray_module().get_actor(actor_name(self.layout.id, what), namespace=NAMESPACE)

    def partition(self, index: int) -> Any:
        return self.actor(f"p{index}")

    def send_many(
        self,
        events: Sequence[tuple[str, Any]],
        ids: Sequence[str | None] | None = None,
        *,
        direct: bool = False,
    ) -> list[tuple[int, int]]:
        """Through the router actor, or (``direct``) routed here, straight to the owners
        (one hop less, and no single router for every client: BENCHMARKS.md, "Partitioned
        worlds"). Every event gets an id when it has none, so a retry after a crash journals
        it once."""
        given = list(ids) if ids is not None else [None] * len(events)
        ids = [i if i is not None else f"cluster:{uuid.uuid4().hex}" for i in given]
        if direct:
            return route(self._router, self.partition, list(events), ids)
        placed: list[tuple[int, int]] = ray_module().get(
            self.actor("router").send.remote(list(events), ids)
        )
        return [tuple(p) for p in placed]  # type: ignore[misc]

    def handle(self) -> PartitionedHandle:
        """The partitioned world's handle (``world.cluster._handle``), asking each partition's
        actor."""
        from world.cluster._handle import PartitionedHandle

        parts = [ActorHandle(self.partition(i)) for i in range(self.layout.count)]
        return PartitionedHandle(self.layout, parts, self.info)

    def info(self) -> list[dict[str, Any]]:
        """Each partition actor's ``info``: its world's, its process's, whether it runs."""
        refs = [self.partition(i).info.remote() for i in range(self.layout.count)]
        return list(ray_module().get(refs))

    def wait_idle(self, timeout_s: float = 600.0, poll_s: float = 0.1) -> list[dict[str, Any]]:
        """Until every partition is idle with nothing owed (twice in a row: a forward in
        flight between two polls shows as work on the second); the last infos."""
        deadline = time.monotonic() + timeout_s
        quiet = 0
        while True:
            infos = self.info()
            if all(i.get("idle") or not i["ok"] for i in infos):
                quiet += 1
                if quiet >= 2:
                    return infos
            else:
                quiet = 0
            if time.monotonic() > deadline:
                raise TimeoutError(f"the partitions were still busy after {timeout_s} s")
            time.sleep(poll_s)

    def close_actors(self) -> None:
        for index in range(self.layout.count):
            with contextlib.suppress(Exception):
                actor = self.partition(index)
                ray_module().get(actor.close.remote())
                ray_module().kill(actor, no_restart=True)
        with contextlib.suppress(Exception):
            ray_module().kill(self.actor("router"), no_restart=True)


# --- up and down (the CLI's) --------------------------------------------------------------------
