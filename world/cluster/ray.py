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
(the client makes one when the user gave none): a partition does not journal an id it
remembers (``Kernel.ingest_many``). A retried ``take`` is exactly once by origin. A partition
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
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from air.errors import UsageError
from kernel import Outgoing
from world._fsutil import atomic_write
from world._reading import key_cbor as _key_cbor
from world.cluster._layout import Layout, Router, partition_dir
from world.cluster._node import PartitionNode

__all__ = [
    "NAMESPACE",
    "PLACEMENTS",
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

NAMESPACE: Final = "world-cluster"
IDLE_WAIT_S: Final = 0.2
"""How long an idle partition sleeps when nothing wakes it (a send or a take wakes it at once;
this bounds how late a due timer or a retry of a failed forward is)."""
RETRY_WAIT_S: Final = 0.5
CONNECT_WAIT_S: Final = 60.0
HEAD_STOP_WAIT_S: Final = 3.0
PLACEMENTS: Final = ("local", "shared")
PIN_SHARE: Final = 0.001
"""How much of a machine's ``node:<address>`` resource a pinned partition asks: any share
pins it there, and a thousand partitions fit on one machine."""
SIGACTION_BYTES: Final = 256
"""Room for a C ``struct sigaction`` (152 bytes on x86-64 and arm64 Linux)."""
RAY_TEMP_DIR: Final = "/tmp/ray"
"""Ray's sessions, sockets and logs, whatever ``TMPDIR`` says: Ray's Unix socket paths go under
it and may not exceed 107 bytes, which a deep ``TMPDIR`` (a test's scratch folder) did."""
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

    def state(self, reducer: str, key: Any) -> Any:
        with self._lock:
            return self._open().world.state(reducer, key)

    def cells(self, reducer: str, limit: int) -> list[tuple[Any, Any]]:
        with self._lock:
            world = self._open().world
            found: list[tuple[Any, Any]] = []
            for cell in world.cells(reducer):
                if len(found) >= limit:
                    break
                found.append((cell.key, cell.state))
            return found

    def info(self) -> dict[str, Any]:
        ray = _ray()
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
            peer = self._peers[to] = _ray().get_actor(name, namespace=NAMESPACE)
        return peer

    def _owner(self, to: int) -> Any:
        actor = self

        class Remote:
            def take(self, source: int, entries: Sequence[Outgoing]) -> tuple[int, int] | None:
                cursor: tuple[int, int] | None = _ray().get(
                    actor._peer(to).take.remote(source, entries)
                )
                return cursor

            def cursor(self, source: int) -> tuple[int, int] | None:
                found: tuple[int, int] | None = _ray().get(actor._peer(to).cursor.remote(source))
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
            peer = self._peers[index] = _ray().get_actor(name, namespace=NAMESPACE)
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
        for i, seq in zip(groups[home], _ray().get(ref), strict=True):
            placed[i] = (home, seq)
    return placed


def _ray() -> Any:
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
    alive = [node for node in _ray().nodes() if node["Alive"]]
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
    ray = _ray()
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
        self._air = self.layout.air()
        self._router = Router(self._air, self.layout.count)

    def actor(self, what: str) -> Any:
        return _ray().get_actor(actor_name(self.layout.id, what), namespace=NAMESPACE)

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
        placed: list[tuple[int, int]] = _ray().get(
            self.actor("router").send.remote(list(events), ids)
        )
        return [tuple(p) for p in placed]  # type: ignore[misc]

    def owner(self, reducer: str, key: Any) -> int:
        if key is None:
            return 0
        from kernel import owner_of
        from kernel.cells import key_hash

        return owner_of(key_hash(_key_cbor(self._air, reducer, key)), self.layout.count)

    def state(self, reducer: str, key: Any = None) -> Any:
        return _ray().get(self.partition(self.owner(reducer, key)).state.remote(reducer, key))

    def cells(self, reducer: str, limit: int) -> list[tuple[int, Any, Any]]:
        refs = [self.partition(i).cells.remote(reducer, limit) for i in range(self.layout.count)]
        return [(i, k, s) for i, ref in enumerate(refs) for k, s in _ray().get(ref)][:limit]

    def info(self) -> list[dict[str, Any]]:
        refs = [self.partition(i).info.remote() for i in range(self.layout.count)]
        return list(_ray().get(refs))

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
                _ray().get(actor.close.remote())
                _ray().kill(actor, no_restart=True)
        with contextlib.suppress(Exception):
            _ray().kill(self.actor("router"), no_restart=True)


# --- up and down (the CLI's) --------------------------------------------------------------------


FAULT_SIGNALS: Final = ("SIGSEGV", "SIGILL", "SIGBUS", "SIGFPE", "SIGTRAP")


@contextlib.contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """Put the process's handlers of the fault signals back as they were after the block.

    wasmtime turns a reducer's trap into an exception with its own handlers of these signals
    (a trap is a SIGILL or SIGSEGV in the wasm code); ``ray.init`` and ``ray.shutdown`` put Ray's
    crash reporters over them, and the next trap in this process killed it (an ``unreachable``
    in a reducer: "Illegal instruction"). So every ``ray.init`` and ``ray.shutdown`` of ours
    runs inside this. Python's ``signal`` module sees only handlers written in Python, so the
    C ``sigaction`` structures are saved and restored whole (``ctypes``; where there is no
    ``sigaction``, nothing is kept). A partition actor needs none of it: Ray's handlers are
    there before its world creates a wasm engine, whose handlers then go over them."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        sigaction = libc.sigaction
    except (OSError, AttributeError):
        yield
        return
    saved = []
    for name in FAULT_SIGNALS:
        number = getattr(signal, name, None)
        state = ctypes.create_string_buffer(SIGACTION_BYTES)
        if number is not None and sigaction(int(number), None, state) == 0:
            saved.append((int(number), state))
    try:
        yield
    finally:
        for number, state in saved:
            sigaction(number, state, None)


def connect(address: str, token_path: str | None = None) -> None:
    """Join the Ray instance at ``address`` as a driver; ``token_path``: the file holding the
    token of a Ray that ``cluster_up`` started (Ray's token authentication)."""
    if token_path is not None:
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN_PATH"] = token_path
    if not _ray().is_initialized():
        with signal_handlers_kept():
            _ray().init(
                address=address,
                namespace=NAMESPACE,
                logging_level=logging.ERROR,
                log_to_driver=False,
                configure_logging=False,
            )


def disconnect() -> None:
    """``ray.shutdown``, keeping the process's fault handlers (``signal_handlers_kept``)."""
    with signal_handlers_kept():
        _ray().shutdown()


def cluster_up(
    root: Path,
    address: str | None = None,
    num_cpus: int | None = None,
    placement_mode: str = "local",
) -> dict[str, Any]:
    """Start the actors of the cluster at ``root`` on the Ray instance at ``address`` (a new
    local one, kept running in the background until ``cluster_down``, when None), placed by
    ``placement_mode`` (``placement``); what it wrote in ``up.json``."""
    layout = Layout.read(root)
    if layout.up() is not None:
        raise UsageError(f"{root} is up already ({layout.up_file}); world cluster down first")
    if placement_mode not in PLACEMENTS:
        raise UsageError(f"placement {placement_mode!r}: one of {', '.join(PLACEMENTS)}")
    up: dict[str, Any] = {"address": address, "head_pid": None, "token_path": None}
    if address is None:
        up["token_path"] = str(_token_file(layout))
        up["address"], up["head_pid"] = _start_head(
            layout, num_cpus or os.cpu_count() or 1, up["token_path"]
        )
    try:
        connect(up["address"], up["token_path"])
        up["placement"] = placement_mode
        up["nodes"] = placement(layout, placement_mode)  # entry i: partition i
        start_actors(layout, detached=True, nodes=up["nodes"])
        client = RayCluster(root)
        client.info()  # every partition has opened its world (or said why not)
    except BaseException:
        _stop_head(up.get("head_pid"))
        raise
    atomic_write(layout.up_file, json.dumps(up).encode())
    return up


def cluster_down(root: Path) -> None:
    layout = Layout.read(root)
    up = layout.up()
    if up is None:
        raise UsageError(f"{root} is not up (no {layout.up_file.name})")
    try:
        connect(up["address"], up.get("token_path"))
        RayCluster(root).close_actors()
    finally:
        disconnect()
        _stop_head(up.get("head_pid"))
        layout.up_file.unlink(missing_ok=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _token_file(layout: Layout) -> Path:
    """A new random token for a local Ray, in a file only this user reads: the Ray ``up``
    starts takes no call without it (Ray's token authentication)."""
    path = layout.root / "ray-token"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32))
    return path


def _start_head(layout: Layout, num_cpus: int, token_path: str) -> tuple[str, int]:
    """``ray start --head --block`` in its own session (its own process group: ``down``
    stops this instance only, never another Ray on the machine), with token
    authentication."""
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray_bin is None:
        raise UsageError("the ray command is not installed: pip install 'world-kernel[cluster]'")
    port = _free_port()
    log = open(layout.root / "ray-head.log", "ab")  # noqa: SIM115 - the child keeps it
    head = subprocess.Popen(
        [
            ray_bin,
            "start",
            "--head",
            "--block",
            f"--port={port}",
            f"--num-cpus={num_cpus}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={RAY_TEMP_DIR}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path},
    )
    log.close()
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + CONNECT_WAIT_S
    while time.monotonic() < deadline:
        if head.poll() is not None:
            raise UsageError(f"ray start failed; see {layout.root / 'ray-head.log'}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return address, head.pid
        time.sleep(0.2)
    _stop_head(head.pid)
    raise UsageError(f"the Ray head did not start in {CONNECT_WAIT_S:.0f} s")


def _stop_head(pid: int | None) -> None:
    """Stop the Ray ``up`` started: SIGTERM to its process group, SIGKILL after
    ``HEAD_STOP_WAIT_S`` (Ray drains for 30 s otherwise; the actors closed their worlds
    before, so nothing of ours is in it); returns once no process of the group is left."""
    if pid is None:
        return
    for sig, wait_s in ((signal.SIGTERM, HEAD_STOP_WAIT_S), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.1)
