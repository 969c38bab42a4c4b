"""A partitioned world on Ray (the ``cluster`` extra): each partition a Ray actor that opens
its directory and runs the world's loop, a router actor that sends each event to the partition
owning its key, and the client the ``world cluster`` commands use.

Actors. ``PartitionActor`` ``i`` (named ``<cluster id>-p<i>`` in the ``world-cluster``
namespace) opens ``<dir>/p<i>`` for writing in its constructor and drives it from one
thread: a cycle of the world's loop, then one batch of forwarding to each partition it owes
(``world.cluster._node.forward``: the owner's ``take`` commits before it answers), then
waits for work. Calls from outside (``send``, ``take``, reads) run in Ray's threads under one
lock with that loop, so the world sees one thread at a time. ``RouterActor`` holds only the
AIR: it is stateless.

Failures. Every actor is created with ``max_restarts=-1`` and ``max_task_retries=-1``: a killed
process is restarted by Ray, reopens its world from disk (checkpoint plus journal: what was
acknowledged is there) and asks each owner's cursor before forwarding again; a call that was
in flight is retried. A retried ``send`` is exactly once because every event carries an id
(the client makes one when the user gave none): a partition does not journal an id its
journal holds (``world._event_ids``). A retried ``take`` is exactly once by origin. A partition
whose directory cannot be opened does not restart in a loop: its actor stays up and answers
every call with the error a single world gives for that directory (``failure``); the others
go on, and what they owe it waits in their outboxes.

Placement (``placement``). Each partition opens ``<dir>/p<i>`` on the machine it runs on, so
``<dir>`` is at the same path on every machine. ``local`` (the default: each machine's own disk)
pins partition ``i`` to the ``i``-th machine, one partition per machine while there are as many,
and for good: Ray restarts it there, and while that machine is down the partition waits for it
(the others go on; what they owe it waits in their outboxes); its directory must be on that
machine (``up`` prints where each partition runs). ``shared`` (storage every machine mounts)
pins none: partitions are spread, and one whose machine dies restarts on another and reopens
its directory there. On one machine both are the local disk. Nothing is replicated by us:
durability is the disk's (``fsync``).

Parts: ``_actors`` (the partition and router actors, placement, the client, and
``ActorHandle``: one partition asked through ``PartitionActor.call``, which answers any
operation of ``world.ops`` as a served world does), ``_up`` (``up`` and
``down``: a local Ray of its own, tokens, joining as a driver with the fault handlers kept).
"""

from __future__ import annotations

from world.cluster.ray._actors import (
    NAMESPACE,
    PLACEMENTS,
    ActorHandle,
    PartitionActor,
    RayCluster,
    RouterActor,
    placement,
    route,
    start_actors,
)
from world.cluster.ray._up import (
    cluster_down,
    cluster_up,
    connect,
    disconnect,
    signal_handlers_kept,
)

__all__ = [
    "NAMESPACE",
    "PLACEMENTS",
    "ActorHandle",
    "PartitionActor",
    "RayCluster",
    "RouterActor",
    "cluster_down",
    "cluster_up",
    "connect",
    "disconnect",
    "placement",
    "route",
    "signal_handlers_kept",
    "start_actors",
]
