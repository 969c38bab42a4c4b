"""Test kit for HTTP: one loopback server that records what it is sent and answers as the test
scripts it. Every test that needs an HTTP server to talk to uses this one.

``Loopback`` listens on 127.0.0.1 only (never any other address), on a port the OS picks. It
records every request (``seen``: method, path, headers, body), counts them per path
(``hits``, ``total``) and queues each path as it arrives (``arrived``), so a test can say that a
refused effect never reached it, that replay sent nothing, or wait until N requests are in.

What it answers is scripted per path (the path without its query): an ``Answer`` (a status, a
body, headers, and optionally a gate to wait on before answering, a number of first requests
to drop without an answer, or no answer at all until the server closes), or a ``Script``, a
function of the ``Exchange`` that writes what it likes (a streamed or dripping body, an echo).
A path with no route gets ``default`` (404 ``no route``). Its ``Date`` and ``Server`` headers
are fixed, so two runs against it get byte-identical responses.

No sleeps: a held answer waits on an event (its gate, or ``release``, which ``close`` sets),
bounded by ``GATE_WAIT_S`` so that a test that never sets it still ends. ``start(listening=
False)`` binds the port without listening (connections are refused until ``listen()``), for
the retry tests. ``join_handlers=True`` makes ``close`` wait for every handler thread, for
tests that count what a handler did after its client gave up; the default leaves them as
daemons, because a world's adapter may hold a kept-alive connection open past the test.

Use it as a context manager (``with Loopback(routes) as server:``) or as a module's fixture
(``server = loopback_fixture(routes)``: a fresh server per test, its routes copied).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final

import pytest

GATE_WAIT_S: Final = 10.0
"""Longest a held answer waits for its gate or for ``release`` (a test that never sets it ends)."""

FIXED_DATE: Final = "Thu, 01 Jan 1970 00:00:00 GMT"

_TEXT: Final = {"content-type": "text/plain; charset=utf-8"}


@dataclass(frozen=True)
class Request:
    """One request as it arrived: ``path`` as sent (query included), header names lowercased."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def route(self) -> str:
        """The path without its query: what routes and hits are keyed by."""
        return self.path.split("?", 1)[0]

    @property
    def query(self) -> str:
        """The query, percent-decoded (``/bytes?5000&é`` -> ``5000&é``)."""
        return urllib.parse.unquote(self.path).partition("?")[2]


@dataclass
class Answer:
    """How the server answers one path."""

    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] | None = None  # None: text/plain; the length is always added
    gate: threading.Event | None = None  # answer only once this is set
    drop_first: int = 0  # close the first N connections without answering
    hang: bool = False  # never answer (until the server closes)


Script = Callable[["Exchange"], None]
"""An answer written by the test: it gets the exchange and writes the response itself."""


class Exchange(BaseHTTPRequestHandler):
    """One request being answered: ``seen`` (the recorded ``Request``), ``loopback`` (the
    server, for its ``release`` event), ``reply``, and the handler's own ``send_response``,
    ``send_header``, ``end_headers`` and ``wfile`` for a script that streams."""

    server: _Server
    seen: Request

    @property
    def loopback(self) -> Loopback:
        return self.server.loopback

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        self.seen = Request(self.command, self.path, headers, body)
        hit = self.loopback.arrive(self.seen)
        route = self.loopback.routes.get(self.seen.route, self.loopback.default)
        if isinstance(route, Answer):
            self._answer(route, hit)
        else:
            route(self)

    def _answer(self, answer: Answer, hit: int) -> None:
        if hit <= answer.drop_first:
            self.close_connection = True
            return  # no status line at all: the client sees the connection close
        if answer.hang:
            self.loopback.release.wait(GATE_WAIT_S)
            self.close_connection = True
            return
        if answer.gate is not None:
            answer.gate.wait(GATE_WAIT_S)
        self.reply(answer.status, answer.body, answer.headers)

    def reply(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        """A whole response: the status, ``headers`` (None: text/plain), the length, the body."""
        self.send_response(status)
        for name, value in (_TEXT if headers is None else headers).items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def version_string(self) -> str:
        return "loopback"

    def date_time_string(self, timestamp: float | None = None) -> str:
        return FIXED_DATE

    def log_message(self, format: str, *args: Any) -> None:
        return


class _Server(ThreadingHTTPServer):
    loopback: Loopback

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that hung up on a held answer, or mid-body: expected here


class Loopback:
    """A threaded HTTP server on 127.0.0.1 (the module docstring); ``close`` stops it."""

    def __init__(
        self,
        routes: Mapping[str, Answer | Script] | None = None,
        *,
        default: Answer | Script | None = None,
        join_handlers: bool = False,
    ) -> None:
        self.routes: dict[str, Answer | Script] = dict(routes or {})
        self.default: Answer | Script = Answer(404, b"no route") if default is None else default
        self.seen: list[Request] = []
        self.hits: Counter[str] = Counter()
        self.arrived: queue.Queue[str] = queue.Queue()
        self.release = threading.Event()
        self._join_handlers = join_handlers
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self, *, listening: bool = True) -> Loopback:
        """Bind a port (``port`` is known from here on) and, unless told not to, listen."""
        server = _Server(("127.0.0.1", 0), Exchange, bind_and_activate=False)
        server.daemon_threads = not self._join_handlers
        server.loopback = self
        server.server_bind()
        self._server = server
        if listening:
            self.listen()
        return self

    def listen(self) -> None:
        assert self._server is not None, "start() first"
        self._server.server_activate()
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def arrive(self, request: Request) -> int:
        """Record ``request``; how many requests its route has had, this one included."""
        with self._lock:
            self.seen.append(request)
            self.hits[request.route] += 1
            hit = self.hits[request.route]
        self.arrived.put(request.path)
        return hit

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.hits.values())

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.server_address[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        """Release every held answer, stop serving, and join the server's thread."""
        self.release.set()
        for answer in self.routes.values():
            if isinstance(answer, Answer) and answer.gate is not None:
                answer.gate.set()
        if self._server is not None:
            if self._thread is not None:
                self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(GATE_WAIT_S)

    def __enter__(self) -> Loopback:
        return self if self._server is not None else self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def loopback_fixture(
    routes: Mapping[str, Answer | Script] | None = None, **options: Any
) -> Callable[[], Iterator[Loopback]]:
    """A pytest fixture (assign it to the fixture's name in a test module) that serves a fresh
    ``Loopback(routes, **options)`` for each test; each ``Answer`` is copied, so no test sees
    another's hits. A gate belongs in the test that sets it, not in these routes."""
    given = dict(routes or {})

    @pytest.fixture
    def serve() -> Iterator[Loopback]:
        copied = {
            path: dataclasses.replace(answer) if isinstance(answer, Answer) else answer
            for path, answer in given.items()
        }
        with Loopback(copied, **options) as loopback:
            yield loopback

    return serve
