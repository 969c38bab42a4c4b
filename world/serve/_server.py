"""A served world (``world serve DIR``): the world stays open for writing with its adapters live,
and answers requests on ``<world>/control.sock`` (the protocol is ``world.serve._protocol``).

One thread does everything with the world, so it is never touched concurrently (``World`` is
not thread-safe)::

    select (accept, read, write; never blocks while work is ready)
      -> answer each complete request, one at a time
      -> one cycle of the world's engine (``world._engine``): up to TICKS_PER_TURN ticks,
         dispatch new intents, journal the receipts that arrived
      -> repeat until ``stop`` (a request, SIGINT/SIGTERM, or ``stop_event``)

Invariants. A ``send`` is one durable batch (``World.send_many``: one group commit) and its
reply carries the journal seqs, so an acknowledged event is never lost; a send that failed
journaled nothing. Reads (``world.serve._dispatch``: every operation of ``world.ops`` that
does not write) first run the ready work (up to ``READ_CATCHUP_TICKS_MAX`` ticks), so a client that sent
and then reads sees its events processed. Stopping answers the deferred requests still
running, drains (runs until idle, as ``world run --until-idle``), checkpoints, replies to the
``stop`` request, removes the socket and closes the world.

Long reads do not hold the loop. The journal is read a page per request (``journal_tail``,
``cells_tail``; the client asks for the next page). A replay to a past position or an export
is a *deferred* request: it runs on a worker thread (``JOBS_MAX`` at once) with a read-only
handle of its own, as a reader process would, and the loop wakes when it finishes (a socket
pair) and answers it. Its connection reads no further request meanwhile, so replies on one
connection stay in request order; the other connections are served as usual.

A bad request costs only its reply: bytes that are not msgpack, a wrong version or an unknown
op get an error reply and the connection stays usable (the framing is intact); a length prefix
past ``REQUEST_BYTES_MAX`` gets an error reply and the connection is closed (the server will
not read that much to find the next frame). A client that disconnects mid-frame leaves a
partial buffer that is dropped with it. Replies are buffered per connection and written when
the socket takes them, so a client that never reads cannot block the others.

The socket (``world.serve._protocol.listening``) is mode 0600 from the start; a stale one (a server
that crashed) is replaced only if nothing answers on it; the world's write lock already keeps a
second server out. ``hello`` (answered here, not by an op) names the world folder served
(device and inode, ``_protocol.folder_id``) so that a client can check it talks to its world.

Connections are bounded. At most ``CLIENTS_MAX`` are served at once; one more is answered
``ServerBusy`` and closed (it is not reset: the client reads the reply). A connection that
moved no byte either way for ``IDLE_S`` and waits for no deferred reply is closed, so idle or
half-open connections cannot keep the others out for long. Nor can slow ones: a request frame
must arrive whole within ``FRAME_S`` of its first byte (a deadline per frame, not an idle timer
that each byte resets, which a client sending one byte every 25 s never reached), else the
connection gets a ``ProtocolError`` (``too_slow``) and is closed. The socket is local, where a
request of ``REQUEST_BYTES_MAX`` arrives in well under a second; a connection waiting for a
deferred reply reads nothing meanwhile, so its clock does not run.

A failing disk does not end the service. A request that meets ``ENOSPC``/``EIO`` (a ``send``
whose commit failed: nothing of it is journaled) is answered with that error, as ``world run``
reports it; a cycle of the engine that meets one is noted (``ServeReport.notices``). Either way
the world handle is then stale (its memory may be ahead of the journal), so the server closes
it and opens the world again from its journal (``_reopen``) and goes on serving; only a world
that cannot be opened again ends the server, with that error. Between the close and the open
the write lock is let go for an instant (a lock is held per open, and the open takes its own).

Rejected: a thread per client with a lock around the world. Every request would still run one
at a time, and receipts and ticks would need the same lock; the selector loop gives the same
order with no lock and no shared state. HTTP (``--http``, ``world.serve._http``) runs on a
thread of its own and hands each request to this loop (``submit``), which answers it in turn
as it answers the socket's. Not here: ``--sim`` time (a served world runs on the wall clock).

Effects. ``serve(effects=...)`` is ``world serve --effects``: the mode is chosen once, after the
world is open (``world.effects.choose_mode``: a fork is ``stub`` by default, ``live`` given once
makes it live for good), its notice goes to ``on_notice``, and every engine of the server, a
reopen's too, answers outward intents in that mode.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final

from air.errors import InvalidArgument, LimitExceeded, WorldError
from world._engine import Engine, LoopReport
from world._world import World
from world.effects import EffectsMode, choose_mode
from world.errors import (
    DerivedStateError,
    Interrupted,
    ProtocolError,
    ServerBusy,
    StorageError,
    WorldStale,
)
from world.ops import REGISTRY
from world.serve import _http
from world.serve._dispatch import Deferred, Dispatcher, plain_fields
from world.serve._http import HttpSettings
from world.serve._protocol import (
    PROTOCOL_VERSION,
    REPLY_BYTES_MAX,
    REQUEST_BYTES_MAX,
    decode,
    encode,
    error_reply,
    folder_id,
    frame_length,
    listening,
    ok_reply,
    socket_path,
)

__all__ = [
    "CLIENTS_MAX",
    "FRAME_S",
    "IDLE_S",
    "JOBS_MAX",
    "JOB_WAIT_S",
    "POLL_S",
    "READ_CATCHUP_TICKS_MAX",
    "TICKS_PER_TURN",
    "ServeReport",
    "serve",
]

TICKS_PER_TURN: Final = 64
"""Ticks run between two rounds of requests: requests wait at most this many steps."""
READ_CATCHUP_TICKS_MAX: Final = 100_000
"""Ticks a read runs first so it sees what was sent before it (bounds a runaway world)."""
POLL_S: Final = 0.05
"""How long the loop sleeps in ``select`` when idle before it looks at its stop flags (a
request, or a receipt through the engine's wakeup fd, wakes it at once)."""
CLIENTS_MAX: Final = 64
"""Connections served at once; one more is answered ``ServerBusy`` and closed at once."""
IDLE_S: Final = 60.0
"""A connection that moved no byte for this long (and waits for no deferred reply) is closed.
Far above what a live client leaves between requests (``--follow`` polls every 0.2 s)."""
FRAME_S: Final = 30.0
"""A request frame must arrive whole within this long of its first byte (see the module
docstring), however often its bytes come."""
RECV_BYTES: Final = 1 << 16
FLUSH_WAIT_S: Final = 5.0
"""At stop, how long the last replies may take to be written."""
JOBS_MAX: Final = 2
"""Deferred requests (``world.serve._dispatch.Deferred``) running at once; more wait their turn."""
JOB_WAIT_S: Final = 300.0
"""At stop, how long each deferred request still running may take to finish."""


@dataclass
class ServeReport:
    requests: int = 0
    loop: LoopReport = field(default_factory=LoopReport)
    snapshot: str | None = None
    notices: list[str] = field(default_factory=list)


_REOPEN_ON: Final = (StorageError, DerivedStateError, WorldStale)
"""What makes the server reopen its world (see the module docstring)."""


def _now() -> float:
    """The clock of idle connections (a function, so that a test can move it)."""
    return time.monotonic()


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.closing = False  # close once outbuf is written
        self.waiting = False  # a deferred request runs: read nothing more until it is answered
        self.events = selectors.EVENT_READ  # what the selector watches (0: not registered)
        self.active_at = _now()  # when a byte last moved either way
        self.frame_at: float | None = None  # when the first byte of a partial request came

    def closed(self) -> bool:
        return self.sock.fileno() < 0


@dataclass
class _Call:
    """A request from another thread: ``future`` gets its reply."""

    op: str
    args: Any
    future: concurrent.futures.Future[dict[str, Any]]


@dataclass
class _Job:
    """A deferred request: ``conn`` (a socket's) or ``call`` (another thread's) gets ``reply``
    once ``thread`` has finished."""

    conn: _Conn | None = None
    call: _Call | None = None
    deferred: Deferred | None = None
    thread: threading.Thread | None = None
    reply: dict[str, Any] | None = None

    def answered_elsewhere(self) -> bool:
        """A call's job: its future got the reply (the socket's is queued by the loop)."""
        if self.call is None:
            return False
        if not self.call.future.done():
            self.call.future.set_result(self.reply or error_reply(WorldError("no answer")))
        return True


class _Server:
    def __init__(
        self,
        world: World,
        listener: socket.socket,
        stop_event: Any,
        effects: EffectsMode = "live",
    ) -> None:
        self.world = world
        self.effects: EffectsMode = effects
        self.engine = Engine(world, ticks_per_cycle_max=TICKS_PER_TURN, effects=effects)
        self.engine.start()
        self.listener = listener
        self.stop_event = stop_event
        self.stop_asked = False
        self.stopper: _Conn | None = None
        self.sel = selectors.DefaultSelector()
        self.conns: dict[int, _Conn] = {}
        self.report = ServeReport(loop=self.engine.report)
        self.ops = Dispatcher(world, self._catch_up)
        self.hello = {
            "world": folder_id(world.path),
            "path": str(world.path.absolute()),
            "version": PROTOCOL_VERSION,
            "ops": sorted(REGISTRY),
        }
        self.inbox: queue.SimpleQueue[_Call] = queue.SimpleQueue()  # from other threads (HTTP)
        self.closed = False
        self.notices: list[str] = []  # of the worlds closed by a reopen, and why they were
        self.reopen_due: WorldError | None = None
        self.jobs: list[_Job] = []  # running first (at most JOBS_MAX), then waiting, in order
        self.wake_r, self.wake_w = socket.socketpair()  # a finished job wakes the loop
        for end in (self.wake_r, self.wake_w):
            end.setblocking(False)

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.sel.register(self.wake_r, selectors.EVENT_READ)
        self.sel.register(self.engine.wakeup_fd, selectors.EVENT_READ)  # the cycle drains it
        try:
            try:
                self._serve()
            except Interrupted:  # a second SIGINT/SIGTERM while a turn ran: stop at once
                pass
            else:
                if self.reopen_due is not None:  # a failure in the last turn: drain a good one
                    self._reopen()
                self._finish_stop()
        finally:
            self.closed = True
            self._refuse_calls()
            for conn in list(self.conns.values()):
                self._drop(conn)
            self.sel.close()
            self.engine.close()
            self.wake_r.close()
            self.wake_w.close()

    def _serve(self) -> None:
        while not self._stopping():
            timeout = 0.0 if self.engine.busy() else POLL_S
            for key, mask in self.sel.select(timeout):
                if key.fileobj is self.listener:
                    self._accept()
                    continue
                if key.fileobj is self.wake_r:
                    with contextlib.suppress(OSError):
                        self.wake_r.recv(RECV_BYTES)
                    continue
                conn = self.conns.get(key.fd)
                if conn is not None and mask & selectors.EVENT_WRITE:
                    self._flush(conn)
                conn = self.conns.get(key.fd)
                if conn is not None and mask & selectors.EVENT_READ:
                    self._read(conn)
                if self.stopper is not None:
                    return
            self._reap()
            self._take_calls()
            self._close_idle()
            if self.reopen_due is None:
                try:
                    self.engine.process_one_cycle()
                except _REOPEN_ON as exc:
                    self.notices.append(f"the world's loop failed ({exc})")
                    self.reopen_due = exc
            if self.reopen_due is not None:
                self._reopen()

    def _reopen(self) -> None:
        """Close the world, whose memory may be ahead of its journal after a failure, and open
        it again from the journal with a new engine (the module docstring). The engine's report
        goes on counting; the closed world's notices are kept."""
        cause, self.reopen_due = self.reopen_due, None
        self.sel.unregister(self.engine.wakeup_fd)
        self.engine.close()
        with contextlib.suppress(WorldError):  # a stale handle writes no checkpoint
            self.world.close()
        self.notices.extend(self.world.notices)
        self.world = World.open(self.world.path)
        self.engine = Engine(self.world, ticks_per_cycle_max=TICKS_PER_TURN, effects=self.effects)
        self.engine.report = self.report.loop
        self.engine.start()
        self.sel.register(self.engine.wakeup_fd, selectors.EVENT_READ)
        self.ops = Dispatcher(self.world, self._catch_up)
        self.notices.append(f"reopened the world from its journal after: {cause}")

    def _stopping(self) -> bool:
        event_set = self.stop_event is not None and self.stop_event.is_set()
        return self.stop_asked or event_set or self.stopper is not None

    def _finish_stop(self) -> None:
        """Drain, checkpoint, then answer the ``stop`` request (if one asked) and let its
        reply and any other pending replies go out, each bounded by ``FLUSH_WAIT_S``. Deferred
        requests are answered first (each waits at most ``JOB_WAIT_S``)."""
        self._finish_jobs()
        try:
            before = self.engine.report.steps
            drained = self.engine.run(until_idle=True).steps - before
            self.report.snapshot = self.world.snapshot()
            reply = ok_reply(
                {
                    "steps": drained,
                    "snapshot": self.report.snapshot,
                    "journal_seq_next": self.world.journal.seq_next,
                }
            )
        except WorldError as exc:
            reply = error_reply(exc, plain_fields(exc))
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
            self._turn_away(sock)
            return
        sock.setblocking(False)
        conn = _Conn(sock)
        self.conns[sock.fileno()] = conn
        self.sel.register(sock, selectors.EVENT_READ)

    @staticmethod
    def _turn_away(sock: socket.socket) -> None:
        """Answer a connection past ``CLIENTS_MAX`` with ``ServerBusy`` and close it. The reply
        is a few hundred bytes, which an empty socket buffer always takes without blocking."""
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.send(encode(error_reply(ServerBusy(CLIENTS_MAX), {"clients_max": CLIENTS_MAX})))
        sock.close()

    def _close_idle(self) -> None:
        """Close the connections that moved no byte for ``IDLE_S``, or whose partial request
        began more than ``FRAME_S`` ago (told so first), and wait for no job."""
        now = _now()
        for conn in list(self.conns.values()):
            if conn.waiting or conn is self.stopper:
                continue
            if conn.frame_at is not None and conn.frame_at < now - FRAME_S:
                self._too_slow(conn)
            elif conn.active_at < now - IDLE_S:
                self._drop(conn)

    def _too_slow(self, conn: _Conn) -> None:
        """Tell ``conn`` its request took too long to arrive (if its socket takes the few
        bytes now: the loop does not wait for a slow reader either), and close it."""
        slow = ProtocolError(
            "too_slow", f"a request frame did not arrive whole within {FRAME_S:g} s of its start"
        )
        with contextlib.suppress(OSError):
            conn.sock.send(encode(error_reply(slow)))
        self._drop(conn)

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
        conn.active_at = _now()
        if not conn.inbuf:
            conn.frame_at = conn.active_at  # a request begins
        conn.inbuf += data
        self._answer_buffered(conn)

    def _answer_buffered(self, conn: _Conn) -> None:
        """Answer the whole requests in ``conn``'s buffer, in order, up to a deferred one."""
        while len(conn.inbuf) >= 4 and not (conn.closing or conn.waiting or self.stopper):
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
                break
            body = bytes(conn.inbuf[4 : 4 + length])
            del conn.inbuf[: 4 + length]
            conn.frame_at = _now() if conn.inbuf else None  # the next one began with this read
            self.report.requests += 1
            reply = self._answer(conn, body)
            if reply is not None:
                self._queue(conn, reply)
        self._watch(conn)

    def _queue(self, conn: _Conn, reply: dict[str, Any]) -> None:
        try:
            frame = encode(reply)
            if len(frame) - 4 > REPLY_BYTES_MAX:
                raise LimitExceeded("REPLY_BYTES_MAX", REPLY_BYTES_MAX, f"{len(frame)} bytes")
        except WorldError as exc:  # a result msgpack cannot carry, or one too large
            frame = encode(error_reply(exc, plain_fields(exc)))
        conn.outbuf += frame
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        if conn.closed():
            return
        try:
            while conn.outbuf:
                sent = conn.sock.send(conn.outbuf)
                del conn.outbuf[:sent]
                conn.active_at = _now()
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # the client went away before reading its reply
            self._drop(conn)
            return
        if conn.closing and not conn.outbuf:
            self._drop(conn)
            return
        self._watch(conn)

    def _watch(self, conn: _Conn) -> None:
        """Watch ``conn`` for what it can do now: read unless it is closing or waiting for a
        deferred reply (its next requests stay unread, so replies keep their order), write
        while replies are buffered."""
        if conn.closed():
            return
        events = 0 if conn.closing or conn.waiting else selectors.EVENT_READ
        if conn.outbuf or conn.closing:
            events |= selectors.EVENT_WRITE
        if events == conn.events:
            return
        if not events:
            self.sel.unregister(conn.sock)
        elif not conn.events:
            self.sel.register(conn.sock, events)
        else:
            self.sel.modify(conn.sock, events)
        conn.events = events

    # --- requests ---------------------------------------------------------------------------

    def _answer(self, conn: _Conn, body: bytes) -> dict[str, Any] | None:
        """The reply to one request (None for ``stop``, answered after the drain, and for a
        deferred request, answered when its job finishes)."""
        try:
            request = decode(body)
            op, args = request.get("op"), request.get("args", {})
            if not isinstance(op, str) or not isinstance(args, dict):
                raise ProtocolError("malformed", "a request needs op (text) and args (a map)")
        except WorldError as exc:
            return error_reply(exc, plain_fields(exc))
        if op == "stop":
            self.stopper = conn
            return None
        if op == "hello":
            return ok_reply(self.hello)
        return self._run_op(op, args, _Job(conn=conn), http=False)

    def _run_op(self, op: str, args: Any, job: _Job, *, http: bool) -> dict[str, Any] | None:
        """The reply to operation ``op``, or None when it was deferred (``job`` answers it). A
        reopen an earlier request made due is done first, so no request is answered by a
        stale world."""
        if self.reopen_due is not None:
            self._reopen()
        try:
            result = self.ops.answer(op, args, http=http)
            if isinstance(result, Deferred):
                job.deferred = result
                if job.conn is not None:
                    job.conn.waiting = True
                self.jobs.append(job)
                self._start_jobs()
                return None
            return ok_reply(result)
        except WorldError as exc:
            if isinstance(exc, _REOPEN_ON) or self.world.stale is not None:
                self.reopen_due = self.reopen_due or exc  # answered first, then reopened
            return error_reply(exc, plain_fields(exc))
        except RecursionError as exc:  # a value nested deeper than normalisation allows
            return error_reply(_too_deep(exc))
        except Exception as exc:  # a bug in one operation must not take the server down
            self.notices.append(f"{op} failed: {type(exc).__name__}: {exc}")
            return error_reply(exc)

    # --- requests from other threads (the HTTP front, ``world.serve._http``) ----------------

    def submit(self, op: str, args: Any) -> concurrent.futures.Future[dict[str, Any]]:
        """Ask for operation ``op`` from another thread; the future gets its reply (as the
        socket's: ``{ok, result}`` or ``{ok: false, error}``). Thread-safe: the loop takes it
        at its next turn (woken at once)."""
        call = _Call(op, args, concurrent.futures.Future())
        self.inbox.put(call)
        if self.closed:
            self._refuse_calls()
        with contextlib.suppress(OSError):  # full: the loop has a wake-up to read already
            self.wake_w.send(b"\0")
        return call.future

    def _take_calls(self) -> None:
        while True:
            try:
                call = self.inbox.get_nowait()
            except queue.Empty:
                return
            self.report.requests += 1
            reply = self._run_op(call.op, call.args, _Job(call=call), http=True)
            if reply is not None:
                call.future.set_result(reply)

    def _refuse_calls(self) -> None:
        """At the end: the calls still waiting are answered, not left hanging."""
        gone = ProtocolError("closed", "the served world stopped before answering")
        while True:
            try:
                call = self.inbox.get_nowait()
            except queue.Empty:
                return
            call.future.set_result(error_reply(gone))

    def _catch_up(self) -> None:
        if not self.world.kernel.idle():
            self.engine.report.steps += self.world.step(READ_CATCHUP_TICKS_MAX)

    # --- deferred requests (worker threads) -------------------------------------------------

    def _start_jobs(self) -> None:
        for job in self.jobs[:JOBS_MAX]:
            if job.thread is None:
                job.thread = threading.Thread(target=self._work, args=(job,), daemon=True)
                job.thread.start()

    def _work(self, job: _Job) -> None:
        """A job's thread: it touches only its own read-only handle and ``job.reply``."""
        try:
            assert job.deferred is not None
            job.reply = ok_reply(job.deferred.run())
        except WorldError as exc:
            job.reply = error_reply(exc, plain_fields(exc))
        except RecursionError as exc:
            job.reply = error_reply(_too_deep(exc))
        except Exception as exc:  # a bug in one read must not take the server down
            job.reply = error_reply(exc)
        finally:
            with contextlib.suppress(OSError):  # full: the loop has a wake-up to read already
                self.wake_w.send(b"\0")

    def _reap(self) -> None:
        """Answer the finished jobs, read on from their connections, start waiting jobs."""
        for job in [j for j in self.jobs if j.thread is not None and not j.thread.is_alive()]:
            self.jobs.remove(job)
            if job.answered_elsewhere() or job.conn is None:
                continue
            job.conn.waiting = False
            if job.conn.frame_at is not None:  # its clock did not run while it waited
                job.conn.frame_at = _now()
            if job.conn.closed():
                continue
            self._queue(job.conn, job.reply or error_reply(WorldError("ended without an answer")))
            if not job.conn.closed():
                self._answer_buffered(job.conn)
        self._start_jobs()

    def _finish_jobs(self) -> None:
        """At stop: let every deferred request finish (each within ``JOB_WAIT_S``) and answer
        it; a connection whose job did not finish in time is closed unanswered."""
        while self.jobs:
            self._start_jobs()
            for job in self.jobs[:JOBS_MAX]:
                assert job.thread is not None
                job.thread.join(JOB_WAIT_S)
                if job.thread.is_alive():
                    self.jobs.remove(job)
                    if job.conn is not None:
                        self._drop(job.conn)
                    else:
                        job.answered_elsewhere()
            self._reap()


def _too_deep(exc: RecursionError) -> InvalidArgument:
    return InvalidArgument("args", "...", f"nested too deeply ({exc})")


# --- the socket -----------------------------------------------------------------------------


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
    effects: EffectsMode | None = None,
    on_notice: Callable[[str], None] | None = None,
    http: HttpSettings | None = None,
    on_http: Callable[[str], None] | None = None,
) -> ServeReport:
    """Serve the world at ``world_dir`` until stopped (a ``stop`` request, SIGINT/SIGTERM in
    the main thread, or ``stop_event``); return what was done. ``on_listening`` is called
    with the socket's path once clients can connect. ``effects``: ``--effects`` (None: the
    world's mode); ``on_notice`` gets the line saying a mode that is not live by default.
    ``http``: answer over HTTP too (``world.serve._http``); ``on_http`` is called with its
    URL once it listens, before ``on_listening``."""
    world_dir = Path(world_dir)
    http_sock = None if http is None else _http.listen(http.host, http.port)
    world = World.open(world_dir)
    server: _Server | None = None
    front: _http.HttpFront | None = None
    try:
        chosen = choose_mode(world_dir, effects)
        if chosen.notice is not None and on_notice is not None:
            on_notice(chosen.notice)
        with listening(world_dir) as listener:
            server = _Server(world, listener, stop_event, chosen.mode)
            if http is not None and http_sock is not None:
                app = _http.make_app(
                    server.submit,
                    http.token,
                    server.hello,
                    rate_per_s=http.rate_per_s,
                    burst=http.burst,
                )
                front = _http.HttpFront(app, http_sock)
                front.start()
                if on_http is not None:
                    host, port = http_sock.getsockname()[:2]
                    on_http(f"http://{_http.url_host(host)}:{port}")
            with _signals_stop(server):
                if on_listening is not None:
                    on_listening(socket_path(world_dir))
                server.run()
            report = server.report
    finally:
        if front is not None:
            front.stop()
        elif http_sock is not None:
            http_sock.close()
        if server is not None:
            world = server.world  # a reopen replaced it
        world.close()
    assert server is not None
    report.notices = [*server.notices, *world.notices]
    return report
