"""Handles of a served world (``connect``): over its Unix socket (``SocketHandle``) or over
HTTP (``HttpHandle``). Both carry an operation's name and plain arguments and bring back
its reply; everything else (the methods, paging, sends in parts, errors by class) is
``RemoteHandle``'s, the same for both.

HTTP, as ``world serve --http`` answers it (``world.serve._http``)::

    POST /v1/ops/{name}      body: the arguments (JSON)     200: the result (JSON)
                             Authorization: Bearer TOKEN    4xx/5xx: {"error": {class, code,
                                                                       detail, fields}}
    GET  /openapi.json       every operation, its arguments and result, generated

A socket connection is checked before anything is sent (``world.serve._protocol``, "Trust");
an HTTP one carries the bearer token (``token``, or the file ``token_file``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from air.errors import InvalidArgument
from world.ops import RemoteHandle

__all__ = ["HTTP_TIMEOUT_S", "HttpHandle", "SocketHandle", "connect"]

HTTP_TIMEOUT_S: Final = 300.0
"""How long one HTTP request may take (an export or a shadow of a large world is long)."""


class SocketHandle(RemoteHandle):
    """A served world over its socket (``<world>/control.sock``)."""

    def __init__(self, world_dir: Path | str, *, timeout_s: float | None = None) -> None:
        from world.serve._protocol import Client, socket_path

        self.path = Path(world_dir)
        self.client = Client(socket_path(self.path), timeout_s=timeout_s, world_dir=self.path)

    def _transport(self, name: str, args: dict[str, Any]) -> Any:
        return self.client.call(name, **args)

    def close(self) -> None:
        self.client.close()


class HttpHandle(RemoteHandle):
    """A served world over HTTP (``world serve --http``), at ``url`` (``http://host:port``)."""

    def __init__(
        self, url: str, *, token: str | None = None, timeout_s: float = HTTP_TIMEOUT_S
    ) -> None:
        import httpx

        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def _transport(self, name: str, args: dict[str, Any]) -> Any:
        import httpx

        from world.errors import ProtocolError
        from world.serve._protocol import served_error

        try:
            reply = self.http.post(f"/v1/ops/{name}", json=args)
        except httpx.HTTPError as exc:
            raise ProtocolError("closed", f"{self.url}: {exc}") from exc
        try:
            body = reply.json()
        except ValueError as exc:
            raise ProtocolError("malformed", f"{self.url}: a reply that is not JSON") from exc
        if reply.status_code == 200:
            return body
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            raise ProtocolError("malformed", f"{self.url}: HTTP {reply.status_code} without error")
        raise served_error(error)

    def close(self) -> None:
        self.http.close()


def connect(
    where: Path | str,
    *,
    token: str | None = None,
    token_file: Path | str | None = None,
    timeout_s: float | None = None,
) -> RemoteHandle:
    """A handle of the served world at ``where``: a world folder (its socket) or an
    ``http://`` URL (``token`` or ``token_file``: its bearer token; else ``WORLD_TOKEN``)."""
    text = str(where)
    if text.startswith(("http://", "https://")):
        if token is None and token_file is not None:
            token = Path(token_file).read_text().strip()
        if token is None:
            import os

            token = os.environ.get("WORLD_TOKEN")
        return HttpHandle(text, token=token, timeout_s=timeout_s or HTTP_TIMEOUT_S)
    if token is not None or token_file is not None:
        raise InvalidArgument("token", "...", "a token is for an http:// URL; a socket is 0600")
    return SocketHandle(Path(where), timeout_s=timeout_s)
