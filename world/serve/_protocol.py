"""The control protocol of a served world (``world serve``) and its client.

A frame is a 4-byte big-endian length followed by that many bytes of one msgpack map::

    request  {"v": PROTOCOL_VERSION, "op": "events.send", "args": {"schema": ..., "values": [...]}}
    reply    {"v": PROTOCOL_VERSION, "ok": true, "result": {...}}
             {"v": PROTOCOL_VERSION, "ok": false,
              "error": {"class": "UnknownName", "code": "...", "detail": "...", "fields": {...}}}

One request, one reply, in order, on one connection; a connection may carry many requests.
Values travel as sugar JSON (what the CLI reads and prints), so msgpack's types are enough.
The socket is ``<world>/control.sock``, mode 0600: only the world's owner can talk to it.

``op`` names an operation of ``world.ops`` (``world.serve._dispatch`` answers it), besides
``hello`` (the world served, the version and the operations) and ``stop``. Paged operations
(``journal.tail``, ``cells.tail``) answer a pass over the journal a page at a time: each reply
carries ``next`` and ``end``; ``world.ops.Handle.pages`` asks until ``next`` reaches ``end``.

Limits: a request is at most ``REQUEST_BYTES_MAX`` bytes (the server replies with an error and
closes the connection past it, since it will not read that much to find the next frame); a
reply is at most ``REPLY_BYTES_MAX``. A version other than ``PROTOCOL_VERSION`` is refused.

Trust. A client talks only to its own world's server, and checks that before it sends anything
(``SocketNotTrusted`` otherwise, naming the socket and why): the socket file is a socket (not a
symlink: ``A/control.sock`` pointing at ``B/control.sock`` would deliver A's events to B),
owned by this user; the process that accepted the connection runs as this user (its peer
credentials, where the OS gives them); and its first reply, to ``hello``, names the world
folder it serves by device and inode, which must be the folder the client was given (a hard
link to another world's socket passes the first checks, not this one). ``served`` applies the
same file checks: a world whose socket is a symlink or another user's is refused, not opened
beside it. A server with ``CLIENTS_MAX`` connections answers a new one with ``ServerBusy`` and
closes it; the client reads that reply even when the server closed before it sent its request.
A connection the server closed while it was kept (idle too long) is noticed before the next
request and replaced.

Not here: the server (``world.serve._server``; ``listening`` makes its socket), and any authentication
beyond the socket's mode and owner.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import msgpack

from air.errors import InvalidArgument, LimitExceeded
from world.errors import ProtocolError, ServedError, SocketNotTrusted, WorldLocked

__all__ = [
    "BACKLOG",
    "PROTOCOL_VERSION",
    "REPLY_BYTES_MAX",
    "REQUEST_BYTES_MAX",
    "SERVED_WAIT_S",
    "SOCKET_NAME",
    "Client",
    "decode",
    "encode",
    "error_reply",
    "folder_id",
    "frame_length",
    "listening",
    "ok_reply",
    "reply_result",
    "served",
    "served_error",
    "socket_path",
]

PROTOCOL_VERSION: Final = 2
"""2: operations by their ``world.ops`` names (``events.send``, ``runs.ls``, ...); 1 had its own."""
REQUEST_BYTES_MAX: Final = 16 * 1024 * 1024
"""The largest request body (after the length prefix) a server reads."""
REPLY_BYTES_MAX: Final = 256 * 1024 * 1024
"""The largest reply body a client reads (``cells_ls`` with a large ``limit`` is the big one)."""
SOCKET_NAME: Final = "control.sock"
BACKLOG: Final = 16
"""Connections the socket queues before the server accepts them."""
SERVED_WAIT_S: Final = 1.0
"""How long ``served`` waits for room in a full queue before it takes the world as served."""
_LENGTH = struct.Struct(">I")


def socket_path(world_dir: Path | str) -> Path:
    return Path(world_dir) / SOCKET_NAME


def encode(obj: dict[str, Any]) -> bytes:
    """One frame: the length prefix and the msgpack body."""
    try:
        body: bytes = msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:  # e.g. an int past 64 bits
        raise ProtocolError("malformed", f"cannot encode the message: {exc}") from exc
    return _LENGTH.pack(len(body)) + body


def frame_length(prefix: bytes) -> int:
    return int(_LENGTH.unpack(prefix)[0])


def decode(body: bytes) -> dict[str, Any]:
    """A frame body as a map with a supported version; ``ProtocolError`` otherwise."""
    try:
        obj = msgpack.unpackb(body, raw=False)
    except Exception as exc:  # untrusted bytes: every way msgpack can fail means "malformed"
        raise ProtocolError("malformed", f"not a msgpack value ({type(exc).__name__})") from exc
    if not isinstance(obj, dict):
        raise ProtocolError("malformed", "a message must be a map")
    if obj.get("v") != PROTOCOL_VERSION:
        raise ProtocolError("version", f"version {obj.get('v')!r}; this side speaks 1")
    return obj


def ok_reply(result: Any) -> dict[str, Any]:
    return {"v": PROTOCOL_VERSION, "ok": True, "result": result}


def error_reply(exc: BaseException, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    code = getattr(exc, "code", None)
    return {
        "v": PROTOCOL_VERSION,
        "ok": False,
        "error": {
            "class": type(exc).__name__,
            "code": code if isinstance(code, str) and code else type(exc).__name__,
            "detail": str(exc),
            "fields": fields or {},
        },
    }


def served_error(error: dict[str, Any]) -> ServedError:
    """The ``ServedError`` an error map stands for (``{class, code, detail, fields}``, as
    ``error_reply`` writes it and ``world serve --http`` answers it): what a remote handle
    raises, whichever transport brought the map."""
    fields = error.get("fields")
    return ServedError(
        str(error.get("class")),
        str(error.get("code")),
        str(error.get("detail")),
        fields if isinstance(fields, dict) else None,
    )


def reply_result(reply: dict[str, Any]) -> Any:
    """The result a reply carries; ``ServedError`` for an error reply (``served_error``)."""
    if reply.get("ok") is True:
        return reply.get("result")
    error = reply.get("error")
    if not isinstance(error, dict):
        raise ProtocolError("malformed", "an error reply without an error map")
    raise served_error(error)


def folder_id(path: Path | str) -> list[int]:
    """What ``hello`` names a world folder by: ``[device, inode]`` (the folder, not a path to
    it, so every spelling of one folder gives one id)."""
    found = os.stat(path)
    return [found.st_dev, found.st_ino]


def _check_socket_file(path: Path) -> None:
    """Refuse a socket path that is a symlink, or a socket of another user (the module
    docstring); a path with nothing there is left to ``connect`` to report."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SocketNotTrusted(str(path), f"cannot look at it: {exc.strerror}") from exc
    if stat.S_ISLNK(found.st_mode):
        raise SocketNotTrusted(str(path), "a symlink; a world's socket never is one")
    if not stat.S_ISSOCK(found.st_mode):
        raise SocketNotTrusted(str(path), "not a socket")
    if found.st_uid != os.getuid():
        raise SocketNotTrusted(str(path), f"owned by uid {found.st_uid}, not {os.getuid()}")


_PEERCRED = getattr(socket, "SO_PEERCRED", None)
_UCRED = struct.Struct("3i")  # pid, uid, gid


def _check_peer(sock: socket.socket, path: Path) -> None:
    """Refuse a server process of another user (Linux's ``SO_PEERCRED``; elsewhere the
    socket file's owner and mode stand for it)."""
    if _PEERCRED is None:
        return
    _pid, uid, _gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, _PEERCRED, _UCRED.size))
    if uid != os.getuid():
        raise SocketNotTrusted(str(path), f"its server runs as uid {uid}, not {os.getuid()}")


class Client:
    """A connection to a served world's socket (made at the first call, kept for the next).
    ``timeout_s`` bounds each call (None: wait as long as the server takes, e.g. a drain).
    ``world_dir`` is the world the server must serve (default: the socket's folder); the
    connection is checked before anything is sent (the module docstring's "Trust")."""

    def __init__(
        self,
        path: Path | str,
        *,
        timeout_s: float | None = None,
        world_dir: Path | str | None = None,
    ) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.world_dir = Path(world_dir) if world_dir is not None else self.path.parent
        self._sock: socket.socket | None = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def call(self, op: str, **args: Any) -> Any:
        """Send one request and return its result; ``ServedError`` for an error reply."""
        frame = encode({"v": PROTOCOL_VERSION, "op": op, "args": args})
        if len(frame) - _LENGTH.size > REQUEST_BYTES_MAX:
            raise LimitExceeded(
                "REQUEST_BYTES_MAX", REQUEST_BYTES_MAX, f"{op} of {len(frame)} bytes"
            )
        return reply_result(self._exchange(self._connected(), frame, op))

    def _exchange(self, sock: socket.socket, frame: bytes, op: str) -> dict[str, Any]:
        """Send one request frame on ``sock`` and read its reply. A server that goes away
        after the whole request was sent may have carried it out: the error says so (for a
        ``send``: a retry with the same event ids is exactly-once)."""
        try:
            try:
                sock.sendall(frame)
            except (BrokenPipeError, ConnectionResetError) as exc:
                return self._reply_after_close(sock, exc)
            try:
                return decode(self._read_frame(sock))
            except (ProtocolError, ConnectionResetError) as exc:
                if isinstance(exc, ProtocolError) and exc.code != "closed":
                    raise
                raise ProtocolError("closed", _outcome_unknown(op)) from exc
        except BaseException:
            self.close()  # the stream may be mid-frame: never reuse it
            raise

    def _reply_after_close(self, sock: socket.socket, exc: OSError) -> dict[str, Any]:
        """The reply a server wrote before it closed the connection under our request (a busy
        server answers at once and closes); ``exc`` if there is none."""
        try:
            return decode(self._read_frame(sock))
        except (OSError, ProtocolError):
            raise exc from None

    def pages(self, op: str, *, from_seq: int, **args: Any) -> Iterator[dict[str, Any]]:
        """The replies of one pass of a paged op from ``from_seq``: the first fixes ``end``,
        each next one starts at the ``next`` of the one before, until ``next >= end``. The last
        reply's ``next`` is where a later pass (``--follow``) goes on."""
        reply = self._page(op, from_seq, None, args)
        yield reply
        end = reply["end"]
        while reply["next"] < end:
            cursor = reply["next"]
            reply = self._page(op, cursor, end, args)
            if reply["next"] <= cursor:  # a server that does not move on would loop forever
                raise ProtocolError("malformed", f"{op}: a page that does not advance")
            yield reply

    def _page(
        self, op: str, from_seq: int, until_seq: int | None, args: dict[str, Any]
    ) -> dict[str, Any]:
        reply = self.call(op, from_seq=from_seq, until_seq=until_seq, **args)
        if not (
            isinstance(reply, dict)
            and type(reply.get("next")) is int
            and type(reply.get("end")) is int
        ):
            raise ProtocolError("malformed", f"{op}: a page without next and end")
        return reply

    def _connected(self) -> socket.socket:
        if self._sock is not None and _closed_by_peer(self._sock):
            self.close()  # the server let it go (idle): a new one
        if self._sock is None:
            _check_socket_file(self.path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                _connect(sock, self.path, self.timeout_s)
                sock.settimeout(self.timeout_s)
                _check_peer(sock, self.path)
                self._sock = sock
                self._greet(sock)
            except BaseException:
                sock.close()
                self._sock = None
                raise
        return self._sock

    def _greet(self, sock: socket.socket) -> None:
        """``hello``: the server must serve ``world_dir`` (the module docstring)."""
        frame = encode({"v": PROTOCOL_VERSION, "op": "hello", "args": {}})
        try:
            hello = reply_result(self._exchange(sock, frame, "hello"))
        except ServedError as exc:
            if exc.error_class == "ServerBusy":
                raise
            raise SocketNotTrusted(str(self.path), f"its server did not greet ({exc})") from exc
        served_id = hello.get("world") if isinstance(hello, dict) else None
        try:
            ours = folder_id(self.world_dir)
        except OSError as exc:
            raise SocketNotTrusted(str(self.path), f"cannot look at {self.world_dir}") from exc
        if served_id != ours:
            theirs = hello.get("path") if isinstance(hello, dict) else None
            raise SocketNotTrusted(
                str(self.path), f"its server serves {theirs or 'another folder'}, not this world"
            )

    def _read_frame(self, sock: socket.socket) -> bytes:
        length = frame_length(_read_exact(sock, _LENGTH.size))
        if length > REPLY_BYTES_MAX:
            raise ProtocolError("too_large", f"a reply of {length} bytes (max {REPLY_BYTES_MAX})")
        return _read_exact(sock, length)


def _outcome_unknown(op: str) -> str:
    detail = (
        f"the server closed the connection before replying to {op!r}, which it may or may not "
        "have carried out"
    )
    if op == "events.send":
        detail += (
            '; retry with the same event ids (send --id, or "$id" in each line) and the events '
            "already journaled under them are not journaled again"
        )
    return detail


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ProtocolError("closed", "the server closed the connection before replying")
        chunks += chunk
    return bytes(chunks)


_TIMEVAL = struct.Struct("ll")


def _connect(sock: socket.socket, path: Path, timeout_s: float | None) -> None:
    """Connect, waiting while the server's queue of connections is full (up to ``timeout_s``
    if given). Not ``settimeout``: a non-blocking ``connect`` to a Unix socket whose queue is
    full fails at once (``EAGAIN``), while a blocking one waits for room, bounded by the
    socket's send timeout."""
    sock.settimeout(None)
    if timeout_s is not None:
        whole = int(timeout_s)
        micro = int((timeout_s - whole) * 1_000_000)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _TIMEVAL.pack(whole, micro))
    sock.connect(str(path))
    if timeout_s is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _TIMEVAL.pack(0, 0))


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (it reads as at its end, without waiting)."""
    timeout = sock.gettimeout()
    sock.setblocking(False)  # with a timeout, recv would first wait for bytes
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
    finally:
        sock.settimeout(timeout)


def served(world_dir: Path | str) -> bool:
    """Whether a server listens on ``world_dir``'s socket (it exists and takes a connection).
    Nothing there, or something that is not a socket: False. A symlink, or a socket of
    another user: ``SocketNotTrusted`` (the module docstring's "Trust")."""
    path = socket_path(world_dir)
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return False
    if not (stat.S_ISSOCK(found.st_mode) or stat.S_ISLNK(found.st_mode)):
        return False
    _check_socket_file(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        _connect(sock, path, SERVED_WAIT_S)
    except BlockingIOError:  # a listener whose queue stayed full: served, and busy
        return True
    except OSError:
        return False
    finally:
        sock.close()
    return True


@contextlib.contextmanager
def listening(world_dir: Path) -> Iterator[socket.socket]:
    """``<world>/control.sock``, mode 0600, listening (non-blocking); removed on exit if it is
    still ours. It is bound inside a fresh 0700 folder, chmodded, then renamed into place, so
    there is no moment when another user could connect. A socket file nothing answers on (a
    server that crashed) is replaced; one a server answers on is ``WorldLocked``."""
    path = socket_path(world_dir)
    if os.path.lexists(path):
        if path.is_symlink() or not path.is_socket():
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
        sock.listen(BACKLOG)
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
