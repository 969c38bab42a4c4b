"""The idempotency key on the wire (``world.effects._http``, ``HttpAdapter.idempotency_key``):
every HTTP request of an intent carries the same ``idempotency-key``, on each attempt and from
each run of the world (and of its forks, which re-derive its intents), another world's differ,
and a plan that sets the header itself keeps its own."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from blake3 import blake3
from httpkit import Answer, Loopback, loopback_fixture
from plans_kit import ORDER, ORDER_AIR, ORDER_PLACED

from kernel.cells import MemoryCas
from world import Engine, World
from world.effects import HttpAdapter, Intent
from world.effects._http import IDEMPOTENCY_CONTEXT
from world.effects._receipts import ReceiptKey
from world.history import fork_world

server = loopback_fixture({"/flaky": Answer(200, drop_first=1), "/ok": Answer(200)})
KEY = re.compile(r"wk1-[0-9a-f]{64}")


def _order(path: Path, url: str) -> None:
    with World.create(path, ORDER_AIR) as world:
        world.send(ORDER_PLACED, {"order_id": "o-1", "url": url})
        (path / "local.json").write_text('{"http": {"backoff_base_s": 0.01}}')
        with Engine(world) as loop:
            loop.run()
        assert world.state(ORDER, "o-1")["status"] == {"$tag": "Fetched", "$value": 200}


def test_every_attempt_of_an_intent_sends_the_same_key(tmp_path: Path, server: Loopback) -> None:
    _order(tmp_path / "w", server.url("/flaky"))
    first, second = (r.headers["idempotency-key"] for r in server.seen)
    assert first == second
    assert KEY.fullmatch(first)


def test_the_key_is_the_world_s_a_fork_s_the_same_another_world_s_not(
    tmp_path: Path, server: Loopback
) -> None:
    _order(tmp_path / "w", server.url("/ok"))
    _order(tmp_path / "other", server.url("/ok"))
    fork_world(tmp_path / "w", 1, tmp_path / "fork")
    intent = blake3(b"an intent").digest()

    def key_of(world: Path) -> str:
        key = ReceiptKey.load(world)
        assert key is not None
        adapter = HttpAdapter(MemoryCas(), idempotency_secret=key.derive(IDEMPOTENCY_CONTEXT))
        try:
            return adapter.idempotency_key(intent)
        finally:
            adapter.close()

    assert key_of(tmp_path / "w") == key_of(tmp_path / "fork")
    assert key_of(tmp_path / "w") != key_of(tmp_path / "other")
    sent = [r.headers["idempotency-key"] for r in server.seen]
    assert len(set(sent)) == 2  # the two worlds' one order each: the same intent, two keys


def test_a_plan_that_names_the_header_keeps_its_own(server: Loopback) -> None:
    adapter = HttpAdapter(MemoryCas())
    params = {"method": "POST", "url": server.url("/ok"),
              "headers": {"Idempotency-Key": "order-7"}, "body_ref": None}  # fmt: skip
    intent = Intent(blake3(b"x").digest(), "http.request", params, "plan t")
    try:
        receipt = adapter._answer(intent)
    finally:
        adapter.close()
    assert receipt is not None
    assert receipt.status == "ok"
    [seen] = server.seen
    assert seen.headers["idempotency-key"] == "order-7"


class PaymentServer:
    """A loopback payment service that honours ``Idempotency-Key`` (a key it has seen gets the
    answer it got, and is not charged again), and can SIGKILL the world's process at one point
    of the first charge: ``before`` answering or right ``after``."""

    def __init__(self, kill_at: str) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.kill_at = kill_at
        self.victim: int | None = None
        self.charges: list[str] = []
        self.requests: list[str] = []
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                key = self.headers["idempotency-key"]
                with service._lock:
                    service.requests.append(key)
                    first = key not in service.charges
                    if first:
                        service.charges.append(key)
                kill = first and len(service.charges) == 1 and service.victim is not None
                if kill and service.kill_at == "before":
                    os.kill(service.victim, signal.SIGKILL)
                    self.close_connection = True
                    return
                body = b"charged"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                if kill and service.kill_at == "after":
                    os.kill(service.victim, signal.SIGKILL)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("kill_at", ["before", "after"])
def test_a_kill_mid_charge_then_a_rerun_charges_once(tmp_path: Path, kill_at: str) -> None:
    """``kill -9`` of ``world run`` while the charge is at the server (before it answers, or
    just after): the next run sends the intent again with the same key, and the server, which
    honours it, charges once."""
    world_cmd = str(Path(sys.executable).parent / "world")
    service = PaymentServer(kill_at)
    try:
        path = tmp_path / "w"
        with World.create(path, ORDER_AIR) as world:
            world.send(ORDER_PLACED, {"order_id": "o-1", "url": service.url("/charge")})
        (path / "local.json").write_text('{"http": {"retries_max": 0}}')
        first = subprocess.Popen([world_cmd, "run", str(path), "--until-idle"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        service.victim = first.pid
        assert first.wait(timeout=60) == -signal.SIGKILL
        again = subprocess.run([world_cmd, "run", str(path), "--until-idle"],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert again.returncode == 0, again.stderr
    finally:
        service.close()
    assert len(service.charges) == 1
    assert len(set(service.requests)) == 1
    with World.open(path, readonly=True) as world:
        assert world.state(ORDER, "o-1")["status"] == {"$tag": "Fetched", "$value": 200}
