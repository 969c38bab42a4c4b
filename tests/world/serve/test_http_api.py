"""``world serve --http``: the operations over HTTP as a client that is not ours sees them
(plain ``httpx``, knowing only ``/openapi.json`` and the token), the token's gate and the ways
to sneak past it, the bounds (size, rate), the bind rule, and the token files.

The contract (same results and errors as in process and over the socket) is
``tests/world/ops/test_ops_contract.py``'s; this file checks what only HTTP has.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from air.errors import UsageError
from world import World
from world.serve import TOKEN_FILE, HttpSettings, check_bind, serve, server_token

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

WAIT_S = 30.0
TOKEN = "tok-" + "x" * 40


class Served:
    """A world served on a thread with HTTP on a free loopback port (``url``)."""

    def __init__(self, path: Path, *, rate: float = 5000.0, burst: int = 5000) -> None:
        self.path = path
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.url = ""
        self.errors: list[BaseException] = []
        settings = HttpSettings("127.0.0.1", 0, TOKEN, "test", rate, burst)

        def run() -> None:
            try:
                serve(
                    path,
                    stop_event=self.stop_event,
                    on_listening=lambda _p: self.ready.set(),
                    http=settings,
                    on_http=self._at,
                )
            except BaseException as exc:
                self.errors.append(exc)
                self.ready.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert self.ready.wait(WAIT_S)
        assert self.errors == []

    def _at(self, url: str) -> None:
        self.url = url

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive()
        assert self.errors == []


@pytest.fixture
def world_dir(tmp_path: Path) -> Path:
    with World.create(tmp_path / "w", COUNTER_AIR):
        pass
    return tmp_path / "w"


@pytest.fixture
def served(world_dir: Path) -> Iterator[Served]:
    server = Served(world_dir)
    yield server
    server.stop()


def _client(url: str, token: str | None = TOKEN) -> httpx.Client:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=url, headers=headers, timeout=WAIT_S)


def _operation(document: dict[str, Any], operation_id: str) -> tuple[str, dict[str, Any]]:
    """The path of ``operation_id`` and its request body's schema, read from the document."""
    for path, methods in document["paths"].items():
        post = methods.get("post", {})
        if post.get("operationId") == operation_id:
            ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            return path, document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    raise AssertionError(f"{operation_id} is not in the document")


def test_a_client_that_knows_only_the_document_and_the_token_sends_reads_and_lists(
    served: Served,
) -> None:
    with _client(served.url) as http:
        document = http.get("/openapi.json").json()
        send_path, send_schema = _operation(document, "events.send")
        assert {"schema", "values"} <= set(send_schema["properties"])
        sent = http.post(
            send_path,
            json={"schema": EVENT, "values": [add("o6", 5), add("o6", 2)]},
        )
        assert sent.status_code == 200, sent.text
        assert len(sent.json()["seqs"]) == 2  # acknowledged: journaled and committed
        state_path, state_schema = _operation(document, "world.state")
        assert "key" in state_schema["properties"]
        state = http.post(state_path, json={"reducer": COUNTER, "key": "o6"})
        assert state.status_code == 200, state.text
        assert state.json()["state"] == {"count": 7, "events": 2}
        runs_path, _ = _operation(document, "runs.ls")
        runs = http.post(runs_path, json={})
        assert runs.status_code == 200
        assert runs.json()["runs"] == []
        hello = http.get("/v1/hello").json()
        assert "events.send" in hello["ops"]


def test_the_document_lists_every_operation_offered_and_its_models(served: Served) -> None:
    from world.ops import REGISTRY

    with _client(served.url) as http:
        document = http.get("/openapi.json").json()
    offered = {post["post"]["operationId"] for post in document["paths"].values()}
    assert offered == {name for name, op in REGISTRY.items() if not op.server_files}
    assert document["openapi"].startswith("3.1")
    for methods in document["paths"].values():
        result = methods["post"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert result["$ref"].rsplit("/", 1)[1] in document["components"]["schemas"]


def test_errors_carry_their_class_and_a_status_by_kind(served: Served) -> None:
    with _client(served.url) as http:
        bad_field = http.post("/v1/ops/runs.ls", json={"bogus": 1})
        unknown = http.post("/v1/ops/no.such", json={})
        not_json = http.post("/v1/ops/world.info", content=b"{nope")
        not_map = http.post("/v1/ops/world.info", json=[1, 2])
        refused = http.post("/v1/ops/events.send", json={"schema": EVENT, "values": [{"k": 1}]})
        files = http.post("/v1/ops/cells.export", json={"reducer": COUNTER, "out": "/tmp/x"})
        wrong_method = http.get("/v1/ops/world.info")
    assert (bad_field.status_code, bad_field.json()["error"]["class"]) == (400, "InvalidArgument")
    assert bad_field.json()["error"]["fields"]["name"] == "bogus"
    assert (unknown.status_code, unknown.json()["error"]["class"]) == (404, "UnknownName")
    assert (not_json.status_code, not_json.json()["error"]["code"]) == (400, "malformed")
    assert not_map.status_code == 400
    assert (refused.status_code, refused.json()["error"]["class"]) == (409, "EventRejected")
    assert files.status_code == 400
    assert "not offered over HTTP" in files.json()["error"]["detail"]
    assert wrong_method.status_code == 405


# Each way a caller might try to get past the token, and what it must get.
SNEAKS: list[tuple[str, dict[str, str], str]] = [
    ("no header", {}, ""),
    ("the scheme alone", {"Authorization": "Bearer"}, ""),
    ("no scheme", {"Authorization": TOKEN}, ""),
    ("basic scheme", {"Authorization": f"Basic {TOKEN}"}, ""),
    ("a prefix of it", {"Authorization": f"Bearer {TOKEN[:-1]}"}, ""),
    ("it and more", {"Authorization": f"Bearer {TOKEN}x"}, ""),
    ("two spaces", {"Authorization": f"Bearer  {TOKEN}"}, ""),
    ("other case", {"Authorization": f"Bearer {TOKEN.upper()}"}, ""),
    ("in the query", {}, f"?token={TOKEN}"),
    ("in a cookie", {"Cookie": f"token={TOKEN}"}, ""),
    ("another header", {"X-Token": TOKEN}, ""),
]


@pytest.mark.parametrize(("how", "headers", "query"), SNEAKS, ids=[s[0] for s in SNEAKS])
def test_no_way_past_the_token(
    served: Served, how: str, headers: dict[str, str], query: str
) -> None:
    with _client(served.url, token=None) as http:
        for method, path in (
            ("POST", "/v1/ops/events.send"),
            ("POST", "/v1/ops/world.info"),
            ("GET", "/openapi.json"),
            ("GET", "/v1/hello"),
        ):
            body = {"schema": EVENT, "values": [add("a", 1)]}
            reply = http.request(method, path + query, headers=headers, json=body)
            assert reply.status_code == 401, (how, path)
            assert reply.json()["error"]["code"] == "unauthorized"
            assert reply.headers["www-authenticate"].startswith("Bearer")
    with _client(served.url) as http:  # and nothing was journaled by any of them
        assert http.post("/v1/ops/world.info").json()["journal_seq_next"] == 1


def test_the_scheme_is_case_insensitive_as_rfc_7235_says(served: Served) -> None:
    with httpx.Client(base_url=served.url, timeout=WAIT_S) as http:
        reply = http.post("/v1/ops/world.info", headers={"Authorization": f"bearer {TOKEN}"})
    assert reply.status_code == 200


def test_a_body_over_the_bound_is_413_and_not_read(served: Served) -> None:
    from world.serve import REQUEST_BYTES_MAX

    host, port = served.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as raw:  # says, not sends
        raw.sendall(
            f"POST /v1/ops/world.info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}"
            f"\r\nContent-Length: {REQUEST_BYTES_MAX + 1}\r\n\r\n{{}}".encode()
        )
        assert raw.recv(4096).startswith(b"HTTP/1.1 413 ")
    with _client(served.url) as http:

        def chunks() -> Iterator[bytes]:  # no length declared: counted as it arrives
            piece = b" " * (1 << 20)
            for _ in range(REQUEST_BYTES_MAX // len(piece) + 2):
                yield piece

        streamed = http.post("/v1/ops/world.info", content=chunks())
        assert streamed.status_code == 413
        assert streamed.json()["error"]["code"] == "too_large"
        assert http.post("/v1/ops/world.info").status_code == 200  # and it goes on


def test_over_the_rate_is_429_with_retry_after(world_dir: Path) -> None:
    server = Served(world_dir, rate=0.001, burst=3)  # 3 at once, then one per 1,000 s
    try:
        with _client(server.url) as http:
            codes = [http.post("/v1/ops/world.info").status_code for _ in range(5)]
            last = http.post("/v1/ops/world.info")
    finally:
        server.stop()
    assert codes == [200, 200, 200, 429, 429]
    assert last.status_code == 429
    assert last.json()["error"]["code"] == "rate"
    assert int(last.headers["retry-after"]) >= 900


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.com", "10.0.0.1"])
def test_binding_beyond_loopback_needs_the_flag(host: str) -> None:
    with pytest.raises(UsageError, match="--http-allow-remote"):
        check_bind(host, allow_remote=False)
    check_bind(host, allow_remote=True)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_binds_without_the_flag(host: str) -> None:
    check_bind(host, allow_remote=False)


def test_a_token_file_others_can_read_is_refused(tmp_path: Path, world_dir: Path) -> None:
    loose = tmp_path / "token"
    loose.write_text(TOKEN)
    loose.chmod(0o644)
    with pytest.raises(UsageError, match="chmod 600"):
        server_token(world_dir, loose)
    loose.chmod(0o600)
    assert server_token(world_dir, loose) == (TOKEN, str(loose))
    short = tmp_path / "short"
    short.write_text("abc")
    short.chmod(0o600)
    with pytest.raises(UsageError, match="at least"):
        server_token(world_dir, short)
    with pytest.raises(UsageError, match="cannot read"):
        server_token(world_dir, tmp_path / "missing")


def test_without_a_token_one_is_generated_once_and_kept(
    world_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WORLD_TOKEN", raising=False)
    token, where = server_token(world_dir, None)
    path = world_dir / TOKEN_FILE
    assert where == str(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert len(token) >= 40
    assert server_token(world_dir, None) == (token, where)  # the next start: the same
    monkeypatch.setenv("WORLD_TOKEN", TOKEN)
    assert server_token(world_dir, None) == (TOKEN, "WORLD_TOKEN")


def test_world_serve_http_from_the_command_line(world_dir: Path, tmp_path: Path) -> None:
    """The command a user types: it prints the URL and where the token is, answers, stops."""
    env = {k: v for k, v in os.environ.items() if k != "WORLD_TOKEN"}
    command = [sys.executable, "-m", "cli", "serve", str(world_dir), "--http", "127.0.0.1:0"]
    child = subprocess.Popen(
        [*command, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None
        said = json.loads(child.stdout.readline())
        token = (world_dir / TOKEN_FILE).read_text().strip()
        assert said["token_from"] == str(world_dir / TOKEN_FILE)
        with _client(said["http"], token) as http:
            sent = http.post("/v1/ops/events.send", json={"schema": EVENT, "values": [add("a", 3)]})
            assert sent.status_code == 200, sent.text
            state = http.post("/v1/ops/world.state", json={"reducer": COUNTER, "key": "a"})
            assert state.json()["state"]["count"] == 3
    finally:
        subprocess.run(
            [sys.executable, "-m", "cli", "serve", str(world_dir), "--stop"],
            check=True,
            capture_output=True,
            timeout=WAIT_S,
        )
        child.communicate(timeout=WAIT_S)  # its pipes read to the end and closed
    assert child.returncode == 0
    refused = subprocess.run(
        [*command[:-2], "--http", "0.0.0.0:0"], capture_output=True, text=True, timeout=WAIT_S
    )
    assert refused.returncode != 0
    assert "--http-allow-remote" in refused.stdout + refused.stderr


def test_slow_connections_are_closed_and_every_slot_is_free_again(
    world_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connections that send nothing, or half a request head, hold uvicorn's slots (it has no
    timer before a head is in): each is closed ``HTTP_REQUEST_S`` after it opened, and a
    normal client, answered 503 while they held every slot, is answered again."""
    from world.serve import _http

    monkeypatch.setattr(_http, "HTTP_CLIENTS_MAX", 3)
    monkeypatch.setattr(_http, "HTTP_REQUEST_S", 5.0)  # far above what the 503 below takes
    server = Served(world_dir)
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    slow = []
    try:
        for sent in (b"", b"GET /v1/hel", b"POST /v1/ops/world.info HTTP/1.1\r\nHost: x\r\n"):
            sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
            sock.sendall(sent)
            slow.append(sock)
        with _client(server.url) as client:
            assert client.get("/v1/hello").status_code == 503  # answered, while they are held
        for sock in slow:
            assert sock.recv(1) == b""  # closed by the server (recv waits for it, bounded)
        with _client(server.url) as client:
            assert client.get("/v1/hello").status_code == 200
            for _ in range(3):  # one connection, request after request: each its own deadline
                assert client.post("/v1/ops/world.info", json={}).status_code == 200
    finally:
        for sock in slow:
            sock.close()
        server.stop()
