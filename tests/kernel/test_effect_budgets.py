"""Byte budgets charged and settled, and the effect manager's state kept bounded (issue 20,
items 2 and 7).

A grant's ``bytes`` budget: a ``blob.put`` reserves its data's length, an ``http.request``
what it may move at most (bounded by what is left); a receipt settles the reservation to the
bytes really used, a failed put and a denied intent give it back. Settled intents leave the
live set: a bounded line of each is remembered, receipts' payloads are not (a plan's are held
until its run ends).
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpkit import Answer, Exchange, Loopback, Script, loopback_fixture
from plans_kit import (
    ALLOW_ALL,
    await_receipt,
    blob_grant,
    chain,
    end,
    ended,
    http_get,
    http_grant,
    of_kind,
    plan,
    plan_world,
    records,
    ref,
)

from air import cbor
from kernel import HTTP_BODY_BYTES_HEADER, Intent
from kernel._effects import SETTLED_RECENT_MAX, EffectManager
from world import Engine, World
from world.effects import BlobAdapter, HttpAdapter, Receipt
from world.effects import Intent as AdapterIntent
from world.history import verify_world

GO = "t/Go@1"
DATA6 = {"bytes": base64.b64encode(b"6bytes").decode()}


server = loopback_fixture()


def _drive(world: World, adapters: list[Any] | None = None) -> None:
    with Engine(world, adapters=adapters) as loop:
        loop.run()


def _gets(*names: str) -> dict[str, Any]:
    """One plan: a GET of ``<url><name>`` for each name, each awaited before the next."""
    steps: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        url = {"op": "concat", "args": [ref("@plan.input.url"), {"lit": name}]}
        steps += [http_get(f"get_{i}", url, f"h{i}"), await_receipt(f"wait_{i}", f"h{i}", f"r{i}")]
    steps.append(end())
    return plan("t/go@1", GO, steps, chain(*[s["id"] for s in steps]))


def _puts(*datas: Any) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for i, data in enumerate(datas):
        put = {
            "id": f"put_{i}",
            "op": "emit_effect",
            "kind": "blob.put",
            "params": {"record": {"data": data}},
            "cap": "blob",
            "bind": {"effect_id_as": f"p{i}"},
        }
        steps += [put, await_receipt(f"wait_{i}", f"p{i}", f"r{i}")]
    steps.append(end())
    return plan("t/go@1", GO, steps, chain(*[s["id"] for s in steps]))


def _world(
    tmp_path: Path, plan_doc: dict[str, Any], grants: list[dict[str, Any]], rules: Any = ALLOW_ALL
) -> Path:
    return plan_world(
        tmp_path / "air",
        schemas={GO: {"record": {"url": "text"}}},
        plans=[plan_doc],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=grants,
        rules=rules,
    )


def _one_queued(world: World) -> Intent:
    (intent,) = world.kernel.effects.intents.values()
    return intent


# --- A. HTTP bytes charged to a bytes budget ------------------------------------------------


def test_three_gets_under_a_50_byte_budget_send_only_those_that_fit(
    tmp_path: Path, server: Loopback
) -> None:
    for path in ("/a", "/b", "/c"):
        server.routes[path] = Answer(200, b"x" * 25)
    air = _world(tmp_path, _gets("a", "b", "c"), [http_grant(["127.0.0.1"], budget={"bytes": 50})])
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send(GO, {"url": server.url("/")})
        _drive(world)
        assert world.kernel.effects.spent == {"http": 50}
    recs = records(w)
    assert len(of_kind(recs, "effect.queued")) == 2
    assert ended(recs)[0]["error"]["code"] == "cap.budget_exhausted"
    assert (server.hits["/a"], server.hits["/b"], server.hits["/c"]) == (1, 1, 0)
    assert verify_world(w).ok


def test_gets_emitted_together_do_not_fit_beside_the_one_that_reserved_the_budget(
    tmp_path: Path, server: Loopback
) -> None:
    server.routes["/a"] = Answer(200, b"ok")
    air = _world(tmp_path, _gets("a"), [http_grant(["127.0.0.1"], budget={"bytes": 50})])
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send_many([(GO, {"url": server.url("/")})] * 3)
        world.run_until_idle()  # all three runs ask before any receipt
        assert world.kernel.effects.spent == {"http": 50}
        _drive(world)
        assert world.kernel.effects.spent == {"http": 2}  # settled: the 2 bytes of "ok"
    codes = sorted(str(body.get("error", {}).get("code")) for body in ended(records(w)).values())
    assert codes == ["None", "cap.budget_exhausted", "cap.budget_exhausted"]
    assert server.total == 1


def test_a_response_larger_than_what_is_left_is_an_error_and_spends_what_was_left(
    tmp_path: Path, server: Loopback
) -> None:
    server.routes["/a"] = Answer(200, b"x" * 30)
    server.routes["/b"] = Answer(200, b"y" * 30)
    air = _world(tmp_path, _gets("a", "b"), [http_grant(["127.0.0.1"], budget={"bytes": 50})])
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send(GO, {"url": server.url("/")})
        _drive(world)
        assert world.kernel.effects.spent == {"http": 50}  # /b declared 30 > 20 left: unread
    first, second = (cbor.loads(r.body["payload"]) for r in of_kind(records(w), "receipt"))
    assert first["headers"][HTTP_BODY_BYTES_HEADER] == "30"
    assert (second["status"], second["body_ref"]) == (0, None)
    assert second["headers"] == {HTTP_BODY_BYTES_HEADER: "20"}
    assert "exceeds" in second["body_preview"]


def _close_delimited(body: bytes) -> Script:
    """An answer with no length: the body ends when the server closes (HTTP/1.0)."""

    def answer(exchange: Exchange) -> None:
        exchange.send_response(200)
        exchange.end_headers()
        exchange.wfile.write(body)
        exchange.close_connection = True

    return answer


@pytest.mark.parametrize("framing", ["content-length", "close-delimited"])
def test_a_budget_smaller_than_one_answer_runs_out_at_the_first_and_refuses_the_rest(
    tmp_path: Path, server: Loopback, framing: str
) -> None:
    for path in ("/a", "/b", "/c"):
        big = b"z" * 100
        server.routes[path] = (
            Answer(200, big) if framing == "content-length" else _close_delimited(big)
        )
    air = _world(tmp_path, _gets("a"), [http_grant(["127.0.0.1"], budget={"bytes": 10})])
    w = tmp_path / "w"
    with World.create(w, air) as world:
        for path in ("a", "b", "c"):  # three runs, one after the other
            world.send(GO, {"url": server.url(f"/{path}")[: -len(path)]})
            _drive(world)
        assert world.kernel.effects.spent == {"http": 10}
    recs = records(w)
    (receipt,) = of_kind(recs, "receipt")
    assert receipt.body["status"] == "error"
    assert cbor.loads(receipt.body["payload"])["headers"] == {HTTP_BODY_BYTES_HEADER: "10"}
    codes = [body.get("error", {}).get("code") for _run, body in sorted(ended(recs).items())]
    assert codes == [None, "cap.budget_exhausted", "cap.budget_exhausted"]
    assert server.total == 1
    assert verify_world(w).ok  # the charge is in the journaled receipt: replay settles alike
    with World.open(w) as again:
        assert again.kernel.effects.spent == {"http": 10}


def _streaming(chunks: int, chunk: bytes, pulled: list[int]) -> httpx.MockTransport:
    """A server answering with a body of ``chunks`` chunks and no length; ``pulled`` counts
    how many chunks the client asked for."""

    def body() -> Iterator[bytes]:
        for _ in range(chunks):
            pulled.append(1)
            yield chunk

    return httpx.MockTransport(lambda _request: httpx.Response(200, content=body()))


def _answer(adapter: HttpAdapter, intent: AdapterIntent) -> Receipt:
    got: list[Receipt] = []
    arrived = threading.Event()

    def done(receipt: Receipt) -> None:
        got.append(receipt)
        arrived.set()

    adapter.submit(intent, done)
    assert arrived.wait(10)
    return got[0]


def _get_intent(bytes_max: int | None, body_ref: bytes | None = None) -> AdapterIntent:
    method = "GET" if body_ref is None else "POST"
    params = {"method": method, "url": "http://example.com/x", "headers": {}, "body_ref": body_ref}
    return AdapterIntent(bytes(32), "http.request", params, "t", bytes_max)


def test_the_adapter_stops_reading_a_response_at_the_chunk_that_crosses_the_reservation() -> None:
    pulled: list[int] = []
    blobs = BlobStoreForTest()
    adapter = HttpAdapter(blobs, transport=_streaming(100, b"z" * 10, pulled), retries_max=0)
    try:
        receipt = _answer(adapter, _get_intent(25))
    finally:
        adapter.close()
    assert receipt.status == "error"
    assert len(pulled) == 3  # 10 + 10 + 10 > 25: the rest is never asked for
    assert receipt.payload["headers"] == {HTTP_BODY_BYTES_HEADER: "25"}


def test_without_a_reservation_the_adapter_reads_to_its_own_limit_and_counts_the_body() -> None:
    pulled: list[int] = []
    adapter = HttpAdapter(
        BlobStoreForTest(), transport=_streaming(100, b"z" * 10, pulled), retries_max=0
    )
    try:
        receipt = _answer(adapter, _get_intent(None))
    finally:
        adapter.close()
    assert (receipt.status, len(pulled)) == ("ok", 100)
    assert receipt.payload["headers"][HTTP_BODY_BYTES_HEADER] == "1000"


def test_a_request_body_larger_than_the_reservation_is_never_sent() -> None:
    seen: list[httpx.Request] = []
    blobs = BlobStoreForTest()
    body_ref = cbor.hash_to_raw(blobs.put(b"b" * 40))

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, stream=httpx.ByteStream(b""))

    transport = httpx.MockTransport(handler)
    adapter = HttpAdapter(blobs, transport=transport, retries_max=0)
    try:
        refused = _answer(adapter, _get_intent(39, body_ref))
        sent = _answer(adapter, _get_intent(45, body_ref))
    finally:
        adapter.close()
    assert refused.status == "error"
    assert "reserved" in refused.payload["body_preview"]
    assert len(seen) == 1
    assert sent.payload["headers"][HTTP_BODY_BYTES_HEADER] == "40"  # 40 sent, 0 back


class BlobStoreForTest:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        address = cbor.content_hash(data)
        self.data[address] = data
        return address

    def get(self, address: str) -> bytes:
        return self.data[address]


def test_an_http_receipt_settles_its_reservation_to_the_bytes_it_moved(tmp_path: Path) -> None:
    air = _world(tmp_path, _gets("a"), [http_grant(["127.0.0.1"], budget={"bytes": 1000})])
    with World.create(tmp_path / "w", air) as world:
        world.send(GO, {"url": "http://127.0.0.1/"})
        world.run_until_idle()
        effects = world.kernel.effects
        intent = _one_queued(world)
        assert (intent.reserved, effects.spent) == (1000, {"http": 1000})
        payload = {"status": 200, "headers": {HTTP_BODY_BYTES_HEADER: "17"}, "body_ref": None}
        effects.apply_receipt(intent.intent_hash, "ok", {**payload, "body_preview": ""})
        assert effects.spent == {"http": 17}


@pytest.mark.parametrize(
    ("headers", "spent"),
    [
        pytest.param({}, 0, id="no-count-refunds"),
        pytest.param({HTTP_BODY_BYTES_HEADER: "5000"}, 1000, id="never-past-the-reservation"),
        pytest.param({HTTP_BODY_BYTES_HEADER: "-3"}, 0, id="not-a-count-refunds"),
    ],
)
def test_an_http_receipt_without_a_sound_count_settles_within_its_reservation(
    tmp_path: Path, headers: dict[str, str], spent: int
) -> None:
    air = _world(tmp_path, _gets("a"), [http_grant(["127.0.0.1"], budget={"bytes": 1000})])
    with World.create(tmp_path / "w", air) as world:
        world.send(GO, {"url": "http://127.0.0.1/"})
        world.run_until_idle()
        intent = _one_queued(world)
        payload = {"status": 0, "headers": headers, "body_ref": None, "body_preview": ""}
        world.kernel.effects.apply_receipt(intent.intent_hash, "error", payload)
        assert world.kernel.effects.spent == {"http": spent}


# --- B. blob.put settlement ---------------------------------------------------------------


def _queued_put(tmp_path: Path, rules: Any = ALLOW_ALL) -> World:
    air = _world(tmp_path, _puts(DATA6), [blob_grant(budget={"bytes": 10})], rules)
    world = World.create(tmp_path / "w", air)
    world.send(GO, {"url": "-"})
    world.run_until_idle()
    return world


def test_a_blob_put_settles_the_stored_size_not_its_reservation(tmp_path: Path) -> None:
    with _queued_put(tmp_path) as world:
        effects = world.kernel.effects
        intent = _one_queued(world)
        assert (intent.reserved, effects.spent) == (6, {"blob": 6})
        effects.apply_receipt(intent.intent_hash, "ok", {"blob_ref": bytes(32), "size": 2})
        assert effects.spent == {"blob": 2}
        assert effects.status_of(intent.intent_hash) == "done"
        assert intent.intent_hash not in effects.intents


def test_a_failed_blob_put_is_refunded(tmp_path: Path) -> None:
    class Refusing:
        def put(self, data: bytes) -> str:
            raise OSError(28, "No space left on device")

        def get(self, address: str) -> bytes:
            raise OSError(2, "absent")

    with _queued_put(tmp_path) as world:
        _drive(world, [BlobAdapter(Refusing(), synchronous=True)])
        assert world.kernel.effects.spent == {"blob": 0}
        (receipt,) = of_kind(list(world.journal.read(0)), "receipt")
        assert receipt.body["status"] == "error"
        assert cbor.loads(receipt.body["payload"])["size"] == 6  # what it would have stored


def test_an_approver_denying_a_parked_put_gives_its_bytes_back(tmp_path: Path) -> None:
    park = [{"when": {"effect_kind": "blob.put"}, "decision": "require_approval"}]
    with _queued_put(tmp_path, park) as world:
        effects = world.kernel.effects
        (intent,) = effects.parked()
        assert effects.spent == {"blob": 6}
        world.kernel.ingest_approval(intent.intent_hash, False)
        assert effects.spent == {"blob": 0}
        assert (effects.status_of(intent.intent_hash), effects.intents) == ("denied", {})
        assert effects.counts()["denied"] == 1


# --- C. bounded effect state ---------------------------------------------------------------


def _manager(tmp_path: Path) -> EffectManager:
    air = _world(tmp_path, _puts(DATA6), [blob_grant()])
    with World.create(tmp_path / "w", air) as world:
        return EffectManager(world.air)


def _settle_many(effects: EffectManager, count: int, payload: Any) -> list[bytes]:
    hashes = []
    for i in range(count):
        origin = {"kind": "reducer", "name": "t/Sink@1", "key": None}
        intent = effects.intent_for("blob.put", {"data": b"d"}, "blob", origin, f"cell:{i}")
        effects.add(intent)
        assert effects.apply_receipt(intent.intent_hash, "ok", payload) is intent
        hashes.append(intent.intent_hash)
    return hashes


def test_ten_thousand_settled_intents_leave_a_small_bounded_state(tmp_path: Path) -> None:
    effects = _manager(tmp_path)
    big = {"blob_ref": bytes(32), "size": 1, "data": b"p" * (1 << 20)}
    hashes = _settle_many(effects, 10_000, big)
    assert effects.intents == {}
    assert len(effects.settled) == SETTLED_RECENT_MAX
    assert effects.counts() == {"queued": 0, "parked": 0, "done": 10_000, "denied": 0}
    state = cbor.dumps(effects.to_obj())
    assert len(state) < 200 * SETTLED_RECENT_MAX  # no payload: about 150 bytes a line
    small = _manager(tmp_path / "again")
    _settle_many(small, 10_000, {"blob_ref": bytes(32), "size": 1})
    assert len(cbor.dumps(small.to_obj())) == len(state)  # the payload's size is not kept
    assert effects.spent == {"blob": 10_000}
    # The recent ones are still known as settled; the oldest are forgotten.
    assert effects.status_of(hashes[-1]) == "done"
    assert effects.apply_receipt(hashes[-1], "ok", big) is None
    assert effects.status_of(hashes[0]) is None


def test_a_duplicate_receipt_of_a_recent_intent_is_still_ignored_by_the_pump(
    tmp_path: Path,
) -> None:
    with _queued_put(tmp_path) as world:
        _drive(world, [BlobAdapter(world.cas, synchronous=True)])
        (receipt,) = of_kind(list(world.journal.read(0)), "receipt")
        from world.effects import ReceiptKey, accept_receipt

        key = ReceiptKey.load_or_create(world.path)
        again = Receipt(receipt.body["intent_hash"], "blob", "ok", {"blob_ref": bytes(32)})
        assert accept_receipt(world, key, again, key.sign(again)) is False


def test_a_settled_intent_is_not_enqueued_again(tmp_path: Path) -> None:
    effects = _manager(tmp_path)
    origin = {"kind": "reducer", "name": "t/Sink@1", "key": None}
    intent = effects.intent_for("blob.put", {"data": b"d"}, "blob", origin, "cell:0")
    effects.add(intent)
    effects.apply_receipt(intent.intent_hash, "ok", {"blob_ref": bytes(32), "size": 1})
    effects.add(effects.intent_for("blob.put", {"data": b"d"}, "blob", origin, "cell:0"))
    assert (effects.queued(), effects.spent) == ([], {"blob": 1})


def test_a_plan_receipt_is_held_for_its_run_and_let_go_when_the_run_ends(
    tmp_path: Path,
) -> None:
    with _queued_put(tmp_path) as world:
        effects = world.kernel.effects
        intent = _one_queued(world)
        effects.apply_receipt(intent.intent_hash, "ok", {"blob_ref": bytes(32), "size": 6})
        assert effects.receipt_of(intent.intent_hash) is not None  # its run may await it
    with _queued_put(tmp_path / "live") as world:
        _drive(world, [BlobAdapter(world.cas, synchronous=True)])
        assert world.info()["runs"] == []
        assert world.kernel.effects.held == {}
        assert world.kernel.effects.to_obj()["held"] == []


def _old_form(effects: EffectManager) -> dict[str, Any]:
    """The effect state as the version before bounded state wrote it: every intent, with its
    receipt."""
    origin = {"kind": "plan", "name": "t/go@1", "run_id": 0, "step": "put_0"}
    done = effects.intent_for("blob.put", {"data": b"d"}, "blob", origin, "run:0:put_0")
    done.status, done.receipt = "done", {"status": "ok", "payload": {"size": 1}}
    other = {**origin, "run_id": 1, "step": "put_0"}
    gone = effects.intent_for("blob.put", {"data": b"e"}, "blob", other, "run:1:put_0")
    gone.status, gone.receipt = "done", {"status": "error", "payload": {"size": 1}}
    denied = effects.intent_for("blob.put", {"data": b"f"}, "blob", other, "run:1:put_1")
    denied.status = "denied"
    queued = effects.intent_for("blob.put", {"data": b"g"}, "blob", other, "run:1:put_2")
    return {
        "intents": [i.to_obj() for i in sorted((done, gone, denied, queued), key=_hash)],
        "spent": {"blob": 3},
        "now_ns": 7,
    }


def _hash(intent: Intent) -> bytes:
    return intent.intent_hash


def test_effect_state_written_by_the_previous_version_still_restores(tmp_path: Path) -> None:
    effects = _manager(tmp_path)
    old = _old_form(effects)
    effects.restore(old)
    assert [i.status for i in effects.intents.values()] == ["queued"]
    assert effects.counts() == {"queued": 1, "parked": 0, "done": 2, "denied": 1}
    assert (effects.spent, effects.now_ns) == ({"blob": 3}, 7)
    assert len(effects.held) == 2
    effects.keep_runs({0})  # run 1 is no longer live
    [(held_hash, held)] = effects.held.items()
    assert held == [0, "ok", {"size": 1}]
    again = _manager(tmp_path / "again")
    again.restore(effects.to_obj())
    assert again.to_obj() == effects.to_obj()
    assert again.receipt_of(held_hash) == {"status": "ok", "payload": {"size": 1}}


def test_an_http_reservation_is_at_most_what_the_adapter_would_read_anyway() -> None:
    from kernel._effects import HTTP_RESERVE_BYTES_MAX
    from world.effects import HTTP_RESPONSE_BYTES_MAX

    assert HTTP_RESERVE_BYTES_MAX == HTTP_RESPONSE_BYTES_MAX
