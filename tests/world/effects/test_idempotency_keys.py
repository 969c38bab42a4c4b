"""The idempotency key on the wire (``world.effects._http``, ``HttpAdapter.idempotency_key``):
every HTTP request of an intent carries the same ``idempotency-key``, on each attempt and from
each run of the world (and of its forks, which re-derive its intents), another world's differ,
and a plan that sets the header itself keeps its own."""

from __future__ import annotations

import re
from pathlib import Path

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
