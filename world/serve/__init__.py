"""A served world: one process holds a world open for writing, with its adapters live, and
answers the other commands over ``<world>/control.sock``.

Invariants:
- One thread does everything with the world (a selector loop driving the world's ``Engine``
  one cycle per turn), so the world is never touched concurrently.
- An acknowledged ``send`` is durable (one group commit, its seqs in the reply); a send that
  failed journaled nothing; a send in parts is journaled whole with its last part, or not.
- Reads see what was sent before them; long reads are paged, and replays and exports run on a
  worker thread with a read-only handle of their own, so no request holds the loop.
- A bad request costs only its reply; a client that never reads cannot block the others.
- The socket is mode 0600 from the start; a stale one is replaced only if nothing answers.
- A client talks only to its own world's server: a socket that is a symlink, another user's,
  or answered by a server of another world folder is refused before anything is sent.
- Connections are bounded: one past ``CLIENTS_MAX`` is answered busy, not reset, and one idle
  for ``IDLE_S`` is closed. A request that meets a failing disk is answered with the error,
  and the server reopens the world from its journal and serves on.

Parts: ``_server`` (the loop, connections, deferred requests, stopping), ``_dispatch`` (every
operation of ``world.ops``, by name, for every transport), ``_remote`` (the handles of a
served world: ``connect``; ``world.attach`` picks one for a folder that may be served), ``_protocol`` (frames, replies, the socket, and the ``Client`` the other
commands use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from world.serve._dispatch import Dispatcher
    from world.serve._http import (
        HTTP_BURST,
        HTTP_CLIENTS_MAX,
        HTTP_RATE_PER_S,
        TOKEN_FILE,
        HttpSettings,
        check_bind,
        server_token,
    )
    from world.serve._protocol import (
        PROTOCOL_VERSION,
        REPLY_BYTES_MAX,
        REQUEST_BYTES_MAX,
        SOCKET_NAME,
        Client,
        reply_result,
        served,
        socket_path,
    )
    from world.serve._remote import HttpHandle, SocketHandle, connect
    from world.serve._server import (
        CLIENTS_MAX,
        IDLE_S,
        JOBS_MAX,
        POLL_S,
        READ_CATCHUP_TICKS_MAX,
        TICKS_PER_TURN,
        ServeReport,
        serve,
    )

__all__ = [
    "CLIENTS_MAX",
    "HTTP_BURST",
    "HTTP_CLIENTS_MAX",
    "HTTP_RATE_PER_S",
    "IDLE_S",
    "JOBS_MAX",
    "POLL_S",
    "PROTOCOL_VERSION",
    "READ_CATCHUP_TICKS_MAX",
    "REPLY_BYTES_MAX",
    "REQUEST_BYTES_MAX",
    "SOCKET_NAME",
    "TICKS_PER_TURN",
    "TOKEN_FILE",
    "Client",
    "Dispatcher",
    "HttpHandle",
    "HttpSettings",
    "ServeReport",
    "SocketHandle",
    "check_bind",
    "connect",
    "reply_result",
    "serve",
    "served",
    "server_token",
    "socket_path",
]

_WHERE: dict[str, str] = {
    name: module
    for module, names in (
        (
            "world.serve._server",
            (
                "ServeReport",
                "serve",
                "CLIENTS_MAX",
                "IDLE_S",
                "JOBS_MAX",
                "POLL_S",
                "READ_CATCHUP_TICKS_MAX",
                "TICKS_PER_TURN",
            ),
        ),
        (
            "world.serve._protocol",
            (
                "Client",
                "reply_result",
                "served",
                "socket_path",
                "PROTOCOL_VERSION",
                "REPLY_BYTES_MAX",
                "REQUEST_BYTES_MAX",
                "SOCKET_NAME",
            ),
        ),
        ("world.serve._remote", ("HttpHandle", "SocketHandle", "connect")),
        ("world.serve._dispatch", ("Dispatcher",)),
        (
            "world.serve._http",
            (
                "HTTP_BURST",
                "HTTP_CLIENTS_MAX",
                "HTTP_RATE_PER_S",
                "TOKEN_FILE",
                "HttpSettings",
                "check_bind",
                "server_token",
            ),
        ),
    )
    for name in names
}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``world._face``)."""
    from world._face import export

    return export("world.serve", _WHERE, name, globals())
