"""The control protocol of a served world (``world serve``) and its client.

A frame is a 4-byte big-endian length followed by that many bytes of one msgpack map::

    request  {"v": PROTOCOL_VERSION, "op": "send", "args": {"schema": ..., "values": [...]}}
    reply    {"v": PROTOCOL_VERSION, "ok": true, "result": {...}}
             {"v": PROTOCOL_VERSION, "ok": false,
              "error": {"class": "UnknownName", "code": "...", "detail": "...", "fields": {...}}}

One request, one reply, in order, on one connection; a connection may carry many requests.
Values travel as sugar JSON (what the CLI reads and prints), so msgpack's types are enough.
The socket is ``<world>/control.sock``, mode 0600: only the world's owner can talk to it.

Paged ops (``journal_tail``, ``cells_tail``) answer a pass over the journal a page at a time:
each reply carries ``next`` (where the following page starts) and ``end`` (where the pass
ends, fixed by its first page); ``Client.pages`` asks for pages until ``next`` reaches ``end``.

Limits: a request is at most ``REQUEST_BYTES_MAX`` bytes (the server replies with an error and
closes the connection past it, since it will not read that much to find the next frame); a
reply is at most ``REPLY_BYTES_MAX``. A version other than ``PROTOCOL_VERSION`` is refused.

Not here: the server (``world.serve._server``; ``listening`` makes its socket), and any authentication
beyond the socket's mode.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import msgpack

from air.errors import InvalidArgument, LimitExceeded
from world.errors import ProtocolError, ServedError, WorldLocked

__all__ = [
    "BACKLOG",
    "PROTOCOL_VERSION",
    "REPLY_BYTES_MAX",
    "REQUEST_BYTES_MAX",
    "SOCKET_NAME",
    "Client",
    "decode",
    "encode",
    "error_reply",
    "frame_length",
    "listening",
    "ok_reply",
    "served",
    "socket_path",
]

PROTOCOL_VERSION: Final = 1
REQUEST_BYTES_MAX: Final = 16 * 1024 * 1024
"""The largest request body (after the length prefix) a server reads."""
REPLY_BYTES_MAX: Final = 256 * 1024 * 1024
"""The largest reply body a client reads (``cells_ls`` with a large ``limit`` is the big one)."""
SOCKET_NAME: Final = "control.sock"
BACKLOG: Final = 16
"""Connections the socket queues before the server accepts them."""
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


class Client:
    """A connection to a served world's socket (made at the first call, kept for the next).
    ``timeout_s`` bounds each call (None: wait as long as the server takes, e.g. a drain)."""

    def __init__(self, path: Path | str, *, timeout_s: float | None = None) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
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
        sock = self._connected()
        try:
            sock.sendall(frame)
            reply = decode(self._read_frame(sock))
        except BaseException:
            self.close()  # the stream may be mid-frame: never reuse it
            raise
        if reply.get("ok") is True:
            return reply.get("result")
        error = reply.get("error")
        if not isinstance(error, dict):
            raise ProtocolError("malformed", "an error reply without an error map")
        fields = error.get("fields")
        raise ServedError(
            str(error.get("class")),
            str(error.get("code")),
            str(error.get("detail")),
            fields if isinstance(fields, dict) else None,
        )

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
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout_s)
            try:
                sock.connect(str(self.path))
            except BaseException:
                sock.close()
                raise
            self._sock = sock
        return self._sock

    def _read_frame(self, sock: socket.socket) -> bytes:
        length = frame_length(_read_exact(sock, _LENGTH.size))
        if length > REPLY_BYTES_MAX:
            raise ProtocolError("too_large", f"a reply of {length} bytes (max {REPLY_BYTES_MAX})")
        return _read_exact(sock, length)


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ProtocolError("closed", "the server closed the connection before replying")
        chunks += chunk
    return bytes(chunks)


def served(world_dir: Path | str) -> bool:
    """Whether a server listens on ``world_dir``'s socket (it exists and takes a connection)."""
    path = socket_path(world_dir)
    if not path.is_socket():
        return False
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(1.0)
    try:
        sock.connect(str(path))
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
