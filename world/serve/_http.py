"""The HTTP front of a served world (``world serve DIR --http HOST:PORT``): every operation of
``world.ops`` as JSON over HTTP, answered by the same server loop as the socket.

    POST /v1/ops/{name}     body: the arguments (a JSON object; empty: none)
                            200: the result            4xx/5xx: {"error": {class, code,
                                                                  detail, fields}}
    GET  /v1/hello          the world served, the protocol version, the operations' names
    GET  /openapi.json      OpenAPI 3.1: every operation, its arguments and result, generated
                            from their models (``openapi``)

Every request, ``/openapi.json`` included, carries ``Authorization: Bearer TOKEN``; without it,
or with another, 401 (the same answer either way, compared in constant time). The token is
read from ``--token-file`` (a file only its owner can read: 0600 or stricter, else refused), or
``WORLD_TOKEN``, else generated once into ``<world>/http.token`` (0600, written atomically) and
kept there for the next start (``server_token``). A token is never taken from the URL, which
ends up in logs and browser histories.

Bounds, each answered before the operation runs: a body over ``REQUEST_BYTES_MAX`` (the
socket's bound) is 413 without being read whole; more than ``HTTP_RATE_PER_S`` requests a
second (a token bucket of ``HTTP_BURST``, over all callers) is 429 with ``Retry-After``; more
than ``HTTP_CLIENTS_MAX`` connections at once is 503 (uvicorn's ``limit_concurrency``, which
counts open connections). A request must arrive whole (its head and body) within
``HTTP_REQUEST_S`` of the connection's opening or of the previous response's end, else the
connection is closed: uvicorn (0.55, h11) has no timer before a request's head is in (its
``timeout_keep_alive`` starts after a response, and any byte stops it), so connections that
send nothing, or a byte now and then, held every one of the ``HTTP_CLIENTS_MAX`` and every
other client got 503 for as long as they liked; the socket's ``FRAME_S`` in HTTP's terms
(``_DeadlineProtocol``). A connection between requests still closes after uvicorn's 5 s
keep-alive; a request the world is answering has no deadline here. An
operation that names files on the server's machine (``cells.export``, ``cells.import``:
``server_files``) is not offered, since an HTTP caller need not share that machine.

It listens on loopback unless ``--http-allow-remote`` is given (``check_bind``): a world's
operations include approving effects and upgrading its code, so being reachable from another
machine is something to choose, not a default; put TLS in front of it (a reverse proxy) when
you do.

Durability: a request is handed to the server's loop (``_Server.submit``) and answered from
there, so ``events.send`` replies only once its batch is journaled and committed, exactly as
over the socket; the HTTP thread never touches the world.

Status codes follow the error's class: ``InvalidArgument``/``UsageError``/``ProtocolError``
400, ``UnknownName`` 404, ``WrongMode`` (a read-only world asked to write) 409, ``LimitExceeded`` 413, ``ServerBusy``/``StorageError``/``JournalDamaged`` (a damaged journal takes no write until repaired) 503, any other
refusal of the world (a wrong mode, a refused event, an upgrade refused) 409, a failure of the
server itself 500. The body names the class, so a client (``world.serve.HttpHandle``) raises
the same error a local handle would.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from air.errors import UsageError

if TYPE_CHECKING:
    import asyncio
    import socket
    from concurrent.futures import Future

    from starlette.applications import Starlette

__all__ = [
    "HTTP_BURST",
    "HTTP_CLIENTS_MAX",
    "HTTP_RATE_PER_S",
    "TOKEN_BYTES",
    "TOKEN_FILE",
    "TOKEN_MIN",
    "HttpFront",
    "HttpSettings",
    "check_bind",
    "listen",
    "make_app",
    "openapi",
    "server_token",
    "url_host",
]

HTTP_RATE_PER_S: Final = 5000.0
"""Requests a second the HTTP front answers, over all callers (``--http-rate``)."""
HTTP_BURST: Final = 5000
"""Requests the rate's bucket holds: a burst this large is answered at once (``world serve``
makes it one second's worth of ``--http-rate``)."""
HTTP_CLIENTS_MAX: Final = 64
HTTP_REQUEST_S: Final = 30.0
"""A request must arrive whole within this long (see the module docstring)."""
"""Requests in flight at once; one more is 503 (as the socket's ``CLIENTS_MAX``)."""
TOKEN_FILE: Final = "http.token"
"""In the world folder: the token generated when none was given."""
TOKEN_BYTES: Final = 32
"""Random bytes of a generated token (URL-safe base64: 43 characters)."""
TOKEN_MIN: Final = 16
"""The shortest token accepted from a file or ``WORLD_TOKEN``: a short one is guessable."""

Submit = Callable[[str, Any], "Future[dict[str, Any]]"]


@dataclass(frozen=True)
class HttpSettings:
    """What ``world serve --http`` was given."""

    host: str
    port: int
    token: str
    token_source: str
    """Where the token came from: a file's path, ``WORLD_TOKEN``, or the generated file's."""
    rate_per_s: float = HTTP_RATE_PER_S
    burst: int = HTTP_BURST


def check_bind(host: str, allow_remote: bool) -> None:
    """Refuse a host that is not loopback unless ``allow_remote`` (``--http-allow-remote``)."""
    if allow_remote:
        return
    if host == "localhost":
        return
    import ipaddress

    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise UsageError(
            f"--http {host}: not a loopback address; the HTTP API can approve effects and "
            "upgrade the world, so binding elsewhere needs --http-allow-remote"
        )


def server_token(world_dir: Path, token_file: Path | None) -> tuple[str, str]:
    """The token and where it came from: ``token_file`` (0600 or stricter, owned by this
    user), else ``WORLD_TOKEN``, else ``<world>/http.token`` (generated when missing)."""
    if token_file is not None:
        return _token_from_file(token_file, given=True), str(token_file)
    env = os.environ.get("WORLD_TOKEN")
    if env is not None:
        return _checked(env.strip(), "WORLD_TOKEN"), "WORLD_TOKEN"
    path = world_dir / TOKEN_FILE
    if path.exists():
        return _token_from_file(path, given=False), str(path)
    from world._fsutil import atomic_write

    token = secrets.token_urlsafe(TOKEN_BYTES)
    atomic_write(path, (token + "\n").encode())  # a temp file of mode 0600, renamed
    return token, str(path)


def _token_from_file(path: Path, *, given: bool) -> str:
    flag = "--token-file" if given else "the token file"
    try:
        info = path.stat()
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{flag} {path}: cannot read it ({exc})") from exc
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{flag} {path}: not a regular file")
    if info.st_mode & 0o077:
        raise UsageError(
            f"{flag} {path}: mode {stat.S_IMODE(info.st_mode):04o} lets others read it; "
            f"chmod 600 {path}"
        )
    if info.st_uid != os.getuid():
        raise UsageError(f"{flag} {path}: owned by another user (uid {info.st_uid})")
    return _checked(text.strip(), f"{flag} {path}")


def _checked(token: str, where: str) -> str:
    if len(token) < TOKEN_MIN or not token.isascii() or not token.isprintable() or " " in token:
        raise UsageError(
            f"{where}: a token must be at least {TOKEN_MIN} printable ASCII characters "
            "without spaces"
        )
    return token


# --- the app ----------------------------------------------------------------------------------


class _Bucket:
    """A token bucket: ``take`` is 0.0 when a request may go, else the seconds to wait."""

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate = rate_per_s
        self.burst = float(burst)
        self.level = float(burst)
        self.at = time.monotonic()
        self.lock = threading.Lock()

    def take(self) -> float:
        with self.lock:
            now = time.monotonic()
            self.level = min(self.burst, self.level + (now - self.at) * self.rate)
            self.at = now
            if self.level >= 1.0:
                self.level -= 1.0
                return 0.0
            return (1.0 - self.level) / self.rate


def _status(error: dict[str, Any]) -> int:
    from air.errors import LimitExceeded, UnknownName, WrongMode
    from world.errors import JournalDamaged, ProtocolError, ServerBusy, StorageError
    from world.ops import error_class

    cls = error_class(str(error.get("class")))
    if cls is None:
        return 500
    if issubclass(cls, UnknownName):
        return 404
    if issubclass(cls, WrongMode):
        return 409
    if issubclass(cls, LimitExceeded):
        return 413
    if issubclass(cls, UsageError | ProtocolError):
        return 400
    if issubclass(cls, ServerBusy | StorageError | JournalDamaged):
        return 503
    return 409


def make_app(
    submit: Submit,
    token: str,
    hello: dict[str, Any],
    *,
    rate_per_s: float = HTTP_RATE_PER_S,
    burst: int = HTTP_BURST,
) -> Starlette:
    """The ASGI app: ``submit(op, args)`` hands an operation to the server's loop."""
    import asyncio

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from world.errors import ProtocolError
    from world.serve._protocol import REQUEST_BYTES_MAX, error_reply

    bucket = _Bucket(rate_per_s, burst)
    expected = f"Bearer {token}".encode()
    document = openapi(str(hello.get("path", "")))

    def refused(exc: BaseException, status: int, headers: dict[str, str] | None = None) -> Response:
        body = {"error": error_reply(exc)["error"]}
        return JSONResponse(body, status, headers=headers)

    def gate(request: Request) -> Response | None:
        wait = bucket.take()
        if wait > 0.0:
            busy = ProtocolError("rate", f"over {rate_per_s:g} requests a second")
            return refused(busy, 429, {"Retry-After": str(max(1, math.ceil(wait)))})
        given = request.headers.get("authorization", "")
        scheme, _, rest = given.partition(" ")
        presented = f"Bearer {rest}".encode() if scheme.lower() == "bearer" else b""
        if not hmac.compare_digest(presented, expected):
            denied = ProtocolError("unauthorized", "this API needs its bearer token")
            return refused(denied, 401, {"WWW-Authenticate": 'Bearer realm="world"'})
        return None

    async def run_op(request: Request) -> Response:
        stopped = gate(request)
        if stopped is not None:
            return stopped
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > REQUEST_BYTES_MAX):
            return refused(_too_large(declared), 413)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > REQUEST_BYTES_MAX:
                return refused(_too_large(f"over {REQUEST_BYTES_MAX}"), 413)
        try:
            args = json.loads(body) if body.strip() else {}
        except (ValueError, RecursionError) as exc:
            return refused(ProtocolError("malformed", f"the body is not JSON ({exc})"), 400)
        if not isinstance(args, dict):
            return refused(ProtocolError("malformed", "the body must be a JSON object"), 400)
        reply = await asyncio.wrap_future(submit(request.path_params["name"], args))
        if reply.get("ok"):
            return JSONResponse(reply["result"])
        return JSONResponse({"error": reply["error"]}, _status(reply["error"]))

    async def get_hello(request: Request) -> Response:
        return gate(request) or JSONResponse(hello)

    async def get_openapi(request: Request) -> Response:
        return gate(request) or JSONResponse(document)

    routes = [
        Route("/v1/ops/{name:str}", run_op, methods=["POST"]),
        Route("/v1/hello", get_hello, methods=["GET"]),
        Route("/openapi.json", get_openapi, methods=["GET"]),
    ]
    return Starlette(routes=routes)


def _too_large(size: str) -> Exception:
    from world.errors import ProtocolError
    from world.serve._protocol import REQUEST_BYTES_MAX

    return ProtocolError("too_large", f"a request of {size} bytes (max {REQUEST_BYTES_MAX})")


def openapi(title: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 document of every operation offered over HTTP, from its models."""
    from pydantic.json_schema import models_json_schema

    from world.ops import REGISTRY

    offered = [op for _, op in sorted(REGISTRY.items()) if not op.server_files]
    models = sorted({m for op in offered for m in (op.args, op.result)}, key=lambda m: m.__name__)
    refs, schema = models_json_schema(
        [(m, "validation") for m in models], ref_template="#/components/schemas/{model}"
    )
    components: dict[str, Any] = dict(schema.get("$defs", {}))
    components["Error"] = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["class", "code", "detail", "fields"],
                "properties": {
                    "class": {"type": "string"},
                    "code": {"type": "string"},
                    "detail": {"type": "string"},
                    "fields": {"type": "object"},
                },
            }
        },
    }
    error = {
        "description": "refused: the error's class, code, text and fields",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    paths: dict[str, Any] = {}
    for op in offered:
        args_ref = refs[(op.args, "validation")]
        result_ref = refs[(op.result, "validation")]
        paths[f"/v1/ops/{op.name}"] = {
            "post": {
                "operationId": op.name,
                "summary": op.summary,
                "tags": [op.name.split(".")[0]],
                "x-writes": op.writes,
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": args_ref}},
                },
                "responses": {
                    "200": {
                        "description": "the result",
                        "content": {"application/json": {"schema": result_ref}},
                    },
                    "4XX": error,
                    "5XX": error,
                },
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {"title": f"world {title}".strip(), "version": "1"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


# --- the server thread ------------------------------------------------------------------------


class HttpFront:
    """uvicorn on its own thread, answering through ``submit`` until ``stop``."""

    def __init__(self, app: Starlette, sock: socket.socket) -> None:
        import uvicorn

        config = uvicorn.Config(
            app,
            http=_deadline_protocol(HTTP_REQUEST_S),
            log_level="warning",
            lifespan="off",
            limit_concurrency=HTTP_CLIENTS_MAX,
            access_log=False,
        )
        self.server = uvicorn.Server(config)
        self.sock = sock
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True, name="world-http"
        )

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10.0)
        self.sock.close()


def _deadline_protocol(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a deadline for each request to arrive whole: from the
    connection's opening and from each response's end, ``seconds``; a connection whose request
    is not in by then (h11's ``their_state`` is not ``DONE``) is closed."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class _DeadlineProtocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(seconds, self._expire)

        def _expire(self) -> None:
            self._deadline = None
            if self.conn.their_state is not h11.DONE and not self.transport.is_closing():
                self.transport.close()

    return _DeadlineProtocol


def url_host(host: str) -> str:
    """``host`` as a URL names it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket at ``host:port`` (0: any free port), or ``UsageError``."""
    import socket as sockets

    family = sockets.AF_INET6 if ":" in host else sockets.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only when the
    # socket's proto says TCP (0 does not), and without it a reply written in two parts waits
    # on the client's delayed ACK (~40-50 ms a request, measured with httpx).
    sock = sockets.socket(family, sockets.SOCK_STREAM, sockets.IPPROTO_TCP)
    sock.setsockopt(sockets.SOL_SOCKET, sockets.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"--http {host}:{port}: cannot listen ({exc.strerror})") from exc
    sock.listen(128)
    return sock
