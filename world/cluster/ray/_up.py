"""Starting and stopping a partitioned world on Ray (``world cluster up|down``): a local Ray of
its own with token authentication, or one at an address; joining it as a driver with the
process's fault handlers kept."""

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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from air.errors import UsageError
from world._fsutil import atomic_write
from world.cluster._layout import Layout
from world.cluster.ray._actors import (
    NAMESPACE,
    PLACEMENTS,
    RayCluster,
    placement,
    ray_module,
    start_actors,
)

__all__ = [
    "cluster_down",
    "cluster_up",
    "connect",
    "disconnect",
    "signal_handlers_kept",
]

CONNECT_WAIT_S: Final = 60.0
HEAD_STOP_WAIT_S: Final = 3.0
SIGACTION_BYTES: Final = 256
"""Room for a C ``struct sigaction`` (152 bytes on x86-64 and arm64 Linux)."""
RAY_TEMP_DIR: Final = "/tmp/ray"
"""Ray's sessions, sockets and logs, whatever ``TMPDIR`` says: Ray's Unix socket paths go under
it and may not exceed 107 bytes, which a deep ``TMPDIR`` (a test's scratch folder) did."""
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
    if not ray_module().is_initialized():
        with signal_handlers_kept():
            ray_module().init(
                address=address,
                namespace=NAMESPACE,
                logging_level=logging.ERROR,
                log_to_driver=False,
                configure_logging=False,
            )


def disconnect() -> None:
    """``ray.shutdown``, keeping the process's fault handlers (``signal_handlers_kept``)."""
    with signal_handlers_kept():
        ray_module().shutdown()


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
