"""A served world (``world serve DIR``): the world stays open for writing with its adapters live,
and answers requests on ``<world>/control.sock`` (the protocol is ``world.control``).

One thread does everything, so the world is never touched concurrently (``World`` is not
thread-safe)::

    select (accept, read, write; never blocks while work is ready)
      -> answer each complete request, one at a time
      -> one turn of the effect loop: up to TICKS_PER_TURN ticks, dispatch new intents,
         journal the receipts that arrived
      -> repeat until ``stop`` (a request, SIGINT/SIGTERM, or ``stop_event``)

Invariants. A ``send`` is one durable batch (``World.send_many``: one group commit) and its
reply carries the journal seqs, so an acknowledged event is never lost; a send that failed
journaled nothing. Reads (``state``, ``info``, ``cells_ls``) first run the ready work (up to
``READ_CATCHUP_TICKS_MAX`` ticks), so a client that sent and then reads sees its events
processed. Stopping drains (runs until idle, as ``world run --until-idle``), checkpoints,
replies to the ``stop`` request, removes the socket and closes the world.

A bad request costs only its reply: bytes that are not msgpack, a wrong version or an unknown
op get an error reply and the connection stays usable (the framing is intact); a length prefix
past ``REQUEST_BYTES_MAX`` gets an error reply and the connection is closed (the server will
not read that much to find the next frame). A client that disconnects mid-frame leaves a
partial buffer that is dropped with it. Replies are buffered per connection and written when
the socket takes them, so a client that never reads cannot block the others.

The socket is created mode 0600 without a window: it is bound inside a fresh 0700 folder,
chmodded, then renamed into place. A stale socket file (a server that crashed) is replaced
only if nothing answers on it; the world's write lock already keeps a second server out.

Rejected: a thread per client with a lock around the world. Every request would still run one
at a time, and receipts and ticks would need the same lock; the selector loop gives the same
order with no lock and no shared state. Not here: authentication beyond the socket's mode,
``--sim`` time (a served world runs on the wall clock).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final

from air.errors import InvalidArgument, LimitExceeded, UnknownName, WorldError
from world.control import (
    REPLY_BYTES_MAX,
    REQUEST_BYTES_MAX,
    ProtocolError,
    decode,
    encode,
    error_reply,
    frame_length,
    ok_reply,
    served,
    socket_path,
)
from world.effectloop import EffectLoop, LoopReport
from world.errors import Interrupted
from world.fsutil import WorldLocked
from world.world import World

__all__ = [
    "CLIENTS_MAX",
    "POLL_S",
    "READ_CATCHUP_TICKS_MAX",
    "TICKS_PER_TURN",
    "ServeReport",
    "cells_listing",
    "serve",
]

TICKS_PER_TURN: Final = 64
"""Ticks run between two rounds of requests: requests wait at most this many steps."""
READ_CATCHUP_TICKS_MAX: Final = 100_000
"""Ticks a read runs first so it sees what was sent before it (bounds a runaway world)."""
POLL_S: Final = 0.05
"""How long the loop sleeps in ``select`` when idle before it looks at stop flags and receipts."""
CLIENTS_MAX: Final = 64
"""Connections served at once; one more is accepted and closed at once."""
RECV_BYTES: Final = 1 << 16
FLUSH_WAIT_S: Final = 5.0
"""At stop, how long the last replies may take to be written."""
_BACKLOG: Final = 16


@dataclass
class ServeReport:
    requests: int = 0
    loop: LoopReport = field(default_factory=LoopReport)
    snapshot: str | None = None
    notices: list[str] = field(default_factory=list)


class _ServedLoop(EffectLoop):
    """The effect loop driven one turn at a time between requests (``EffectLoop.run`` blocks)."""

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self.report = LoopReport()

    def turn(self, ticks: int) -> None:
        if not self.world.kernel.idle():
            self.report.steps += self.world.step(ticks)
        self.report.dispatched += self._dispatch()
        self._take(self.report, wait=False)

    def busy(self) -> bool:
        """Ticks are ready. (Intents a turn queued were dispatched by that turn; receipts are
        looked for every ``POLL_S`` at most.)"""
        return not self.world.kernel.idle()


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.closing = False  # close once outbuf is written

    def closed(self) -> bool:
        return self.sock.fileno() < 0


class _Server:
    def __init__(self, world: World, listener: socket.socket, stop_event: Any) -> None:
        self.world = world
        self.loop = _ServedLoop(world)
        self.listener = listener
        self.stop_event = stop_event
        self.stop_asked = False
        self.stopper: _Conn | None = None
        self.sel = selectors.DefaultSelector()
        self.conns: dict[int, _Conn] = {}
        self.report = ServeReport(loop=self.loop.report)
        self.ops: dict[str, Callable[[dict[str, Any]], Any]] = {
            "send": self._send,
            "state": self._state,
            "info": self._info,
            "cells_ls": self._cells_ls,
            "snapshot": self._snapshot,
        }

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        self.sel.register(self.listener, selectors.EVENT_READ)
        try:
            try:
                self._serve()
            except Interrupted:  # a second SIGINT/SIGTERM while a turn ran: stop at once
                pass
            else:
                self._finish_stop()
        finally:
            for conn in list(self.conns.values()):
                self._drop(conn)
            self.sel.close()
            self.loop.close()

    def _serve(self) -> None:
        while not self._stopping():
            timeout = 0.0 if self.loop.busy() else POLL_S
            for key, mask in self.sel.select(timeout):
                if key.fileobj is self.listener:
                    self._accept()
                    continue
                conn = self.conns.get(key.fd)
                if conn is not None and mask & selectors.EVENT_WRITE:
                    self._flush(conn)
                conn = self.conns.get(key.fd)
                if conn is not None and mask & selectors.EVENT_READ:
                    self._read(conn)
                if self.stopper is not None:
                    return
            self.loop.turn(TICKS_PER_TURN)

    def _stopping(self) -> bool:
        event_set = self.stop_event is not None and self.stop_event.is_set()
        return self.stop_asked or event_set or self.stopper is not None

    def _finish_stop(self) -> None:
        """Drain, checkpoint, then answer the ``stop`` request (if one asked) and let its
        reply and any other pending replies go out, each bounded by ``FLUSH_WAIT_S``."""
        try:
            drained = self.loop.run(until_idle=True)
            self.report.loop.steps += drained.steps
            self.report.snapshot = self.world.snapshot()
            reply = ok_reply(
                {
                    "steps": drained.steps,
                    "snapshot": self.report.snapshot,
                    "journal_seq_next": self.world.journal.seq_next,
                }
            )
        except WorldError as exc:
            reply = error_reply(exc, _fields(exc))
            if self.stopper is None:
                raise
        if self.stopper is not None:
            self._queue(self.stopper, reply)
        for conn in list(self.conns.values()):
            if conn.outbuf:
                with contextlib.suppress(OSError):
                    conn.sock.settimeout(FLUSH_WAIT_S)
                    conn.sock.sendall(conn.outbuf)

    # --- connections ------------------------------------------------------------------------

    def _accept(self) -> None:
        try:
            sock, _addr = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if len(self.conns) >= CLIENTS_MAX:
            sock.close()
            return
        sock.setblocking(False)
        conn = _Conn(sock)
        self.conns[sock.fileno()] = conn
        self.sel.register(sock, selectors.EVENT_READ)

    def _drop(self, conn: _Conn) -> None:
        self.conns.pop(conn.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn.sock)
        conn.sock.close()

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away, maybe mid-frame: its partial request is dropped
            self._drop(conn)
            return
        conn.inbuf += data
        while len(conn.inbuf) >= 4 and not conn.closing and self.stopper is None:
            length = frame_length(bytes(conn.inbuf[:4]))
            if length > REQUEST_BYTES_MAX:
                conn.inbuf.clear()
                conn.closing = True
                too_large = ProtocolError(
                    "too_large", f"a request of {length} bytes (max {REQUEST_BYTES_MAX})"
                )
                self._queue(conn, error_reply(too_large))
                return
            if len(conn.inbuf) < 4 + length:
                return
            body = bytes(conn.inbuf[4 : 4 + length])
            del conn.inbuf[: 4 + length]
            self.report.requests += 1
            reply = self._answer(conn, body)
            if reply is not None:
                self._queue(conn, reply)

    def _queue(self, conn: _Conn, reply: dict[str, Any]) -> None:
        try:
            frame = encode(reply)
            if len(frame) - 4 > REPLY_BYTES_MAX:
                raise LimitExceeded("REPLY_BYTES_MAX", REPLY_BYTES_MAX, f"{len(frame)} bytes")
        except WorldError as exc:  # a result msgpack cannot carry, or one too large
            frame = encode(error_reply(exc, _fields(exc)))
        conn.outbuf += frame
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        if conn.closed():
            return
        try:
            while conn.outbuf:
                sent = conn.sock.send(conn.outbuf)
                del conn.outbuf[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # the client went away before reading its reply
            self._drop(conn)
            return
        if conn.closing and not conn.outbuf:
            self._drop(conn)
            return
        events = selectors.EVENT_WRITE if conn.closing else selectors.EVENT_READ
        if conn.outbuf:
            events |= selectors.EVENT_WRITE
        self.sel.modify(conn.sock, events)

    # --- requests ---------------------------------------------------------------------------

    def _answer(self, conn: _Conn, body: bytes) -> dict[str, Any] | None:
        """The reply to one request (None for ``stop``: it is answered after the drain)."""
        try:
            request = decode(body)
            op, args = request.get("op"), request.get("args", {})
            if not isinstance(op, str) or not isinstance(args, dict):
                raise ProtocolError("malformed", "a request needs op (text) and args (a map)")
            if op == "stop":
                self.stopper = conn
                return None
            handler = self.ops.get(op)
            if handler is None:
                raise UnknownName("op", op, [*sorted(self.ops), "stop"])
            return ok_reply(handler(args))
        except WorldError as exc:
            return error_reply(exc, _fields(exc))
        except RecursionError as exc:  # a value nested deeper than normalisation allows
            return error_reply(InvalidArgument("args", "...", f"nested too deeply ({exc})"))

    def _catch_up(self) -> None:
        if not self.world.kernel.idle():
            self.loop.report.steps += self.world.step(READ_CATCHUP_TICKS_MAX)

    def _send(self, args: dict[str, Any]) -> Any:
        schema = _arg(args, "schema", str)
        values = _arg(args, "values", list)
        if not values:
            raise InvalidArgument("values", 0, "send at least one event")
        return {"seqs": self.world.send_many([(schema, v) for v in values])}

    def _state(self, args: dict[str, Any]) -> Any:
        reducer = _arg(args, "reducer", str)
        self._catch_up()
        return {"state": self.world.state(reducer, args.get("key"))}

    def _info(self, _args: dict[str, Any]) -> Any:
        self._catch_up()
        return self.world.info()

    def _cells_ls(self, args: dict[str, Any]) -> Any:
        reducer = _arg(args, "reducer", str)
        limit = _arg(args, "limit", int)
        self._catch_up()
        return cells_listing(self.world, reducer, limit)

    def _snapshot(self, _args: dict[str, Any]) -> Any:
        return {"snapshot": self.world.snapshot()}


def cells_listing(world: World, reducer: str, limit: int) -> dict[str, Any]:
    """``cells_ls``'s result (and ``world cells ls --json`` without ``ok``): the first ``limit``
    cells of ``reducer`` in key-hash order, and how many there are."""
    if limit < 0:
        raise InvalidArgument("limit", limit, "a count, 0 or more")
    cells: list[dict[str, Any]] = []
    for view in world.cells(reducer):
        if len(cells) >= limit:
            break
        cells.append(
            {
                "key": view.key,
                "key_hash": view.key_hash,
                "state": view.state,
                "size": view.entry.size,
                "last_active": view.entry.last_active,
            }
        )
    return {"reducer": reducer, "count": world.cell_count(reducer), "cells": cells}


def _arg(args: dict[str, Any], name: str, kind: type) -> Any:
    value = args.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidArgument(name, repr(value), f"must be {kind.__name__}")
    return value


def _fields(exc: BaseException) -> dict[str, Any]:
    """An error's public fields, as plain values msgpack can carry."""
    out: dict[str, Any] = {}
    for name, value in vars(exc).items():
        if not name.startswith("_"):
            out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value if not isinstance(value, int) or abs(value) < 2**63 else str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


# --- the socket -----------------------------------------------------------------------------


@contextlib.contextmanager
def _listening(world_dir: Path) -> Iterator[socket.socket]:
    """``<world>/control.sock``, mode 0600, listening; removed on exit if it is still ours."""
    path = socket_path(world_dir)
    if os.path.lexists(path):
        if not path.is_socket():
            raise InvalidArgument("control socket", str(path), "exists and is not a socket")
        if served(world_dir):
            raise WorldLocked(str(path), "serve")
        path.unlink()  # stale: a server that crashed
    private = Path(tempfile.mkdtemp(prefix=".cs", dir=world_dir))  # mode 0700
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(private / "s"))
        os.chmod(private / "s", 0o600)
        os.replace(private / "s", path)
        inode = path.stat().st_ino
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    finally:
        shutil.rmtree(private, ignore_errors=True)
    try:
        yield sock
    finally:
        sock.close()
        with contextlib.suppress(OSError):
            if path.stat().st_ino == inode:
                path.unlink()


@contextlib.contextmanager
def _signals_stop(server: _Server) -> Iterator[None]:
    """SIGINT/SIGTERM ask for a stop (drain and checkpoint); a second one interrupts the
    turn in progress. Only the main thread can take signals; elsewhere use ``stop_event``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: FrameType | None) -> None:
        if server.stop_asked:
            server.world.interrupt()
        server.stop_asked = True

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def serve(
    world_dir: Path | str,
    *,
    stop_event: threading.Event | None = None,
    on_listening: Callable[[Path], None] | None = None,
) -> ServeReport:
    """Serve the world at ``world_dir`` until stopped (a ``stop`` request, SIGINT/SIGTERM in
    the main thread, or ``stop_event``); return what was done. ``on_listening`` is called
    with the socket's path once clients can connect."""
    world_dir = Path(world_dir)
    world = World.open(world_dir)
    try:
        with _listening(world_dir) as listener:
            server = _Server(world, listener, stop_event)
            with _signals_stop(server):
                if on_listening is not None:
                    on_listening(socket_path(world_dir))
                server.run()
            report = server.report
    finally:
        world.close()
    report.notices = list(world.notices)
    return report
