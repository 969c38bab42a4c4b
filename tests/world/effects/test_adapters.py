"""Effect adapters: the contract every adapter keeps (one suite over all of them, each store
backend included), then the dispatcher, timers on the wall and simulated clocks, blobs, and
HTTP against a loopback server this file starts on 127.0.0.1 (never any other address).

Every wait has a timeout. Only the wall-clock timer test waits on purpose (~0.2 s); HTTP tests
use tiny timeouts and backoffs passed to the constructor, except where a named default is the
limit under test.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpkit import Answer, Exchange, Loopback, Script, loopback_fixture

import air.sys
from air import cbor
from air.errors import InvalidArgument, WrongMode
from air.types import TypeNode, parse_type
from air.values import check
from kernel.cells import Cas, MemoryCas
from world._cas import FileCas
from world.effects import (
    BACKOFF_BASE_S,
    BACKOFF_MAX_S,
    BLOB_GET_BYTES_MAX,
    HTTP_BODY_INLINE_BYTES_MAX,
    HTTP_BODY_PREVIEW_CHARS,
    HTTP_RESPONSE_BYTES_MAX,
    HTTP_WORKERS,
    RETRIES_MAX,
    Adapter,
    BlobAdapter,
    Dispatcher,
    Done,
    HttpAdapter,
    Intent,
    Receipt,
    SimClock,
    TimerAdapter,
    backoff_s,
)
from world.effects._adapters import DISPATCHER_ID
from world.effects._workers import WorkerPool

WAIT_S = 5.0  # the most any test waits for a receipt it expects

# --- helpers ----------------------------------------------------------------------------------

_RECEIPT_SCHEMAS = {
    "timer.set": "sys/TimerSetReceipt@1",
    "blob.put": "sys/BlobPutReceipt@1",
    "blob.get": "sys/BlobGetReceipt@1",
    "http.request": "sys/HttpRequestReceipt@1",
}


def _sys_schemas() -> dict[str, TypeNode]:
    defs = json.loads((Path(air.sys.__file__).parent / "sys.air.json").read_text())
    return {d["name"]: parse_type(d["type"]) for d in defs if d["$kind"] == "defschema"}


SCHEMAS = _sys_schemas()


def assert_receipt_schema(kind: str, receipt: Receipt) -> None:
    """The payload is exactly a canonical value of the effect's receipt schema."""
    name = _RECEIPT_SCHEMAS[kind]
    check(SCHEMAS[name], receipt.payload, SCHEMAS)
    assert cbor.loads(receipt.payload_cbor) == receipt.payload


_counter = iter(range(1, 1 << 30))


def intent(kind: str, params: Any) -> Intent:
    return Intent(cbor.digest(b"intent %d" % next(_counter)), kind, params, "test")


class Inbox:
    """A ``done`` callback that keeps receipts for the test thread to wait on."""

    def __init__(self) -> None:
        self.receipts: queue.Queue[Receipt] = queue.Queue()

    def __call__(self, receipt: Receipt) -> None:
        self.receipts.put(receipt)

    def take(self, timeout_s: float = WAIT_S) -> Receipt:
        return self.receipts.get(timeout=timeout_s)

    def take_all(self, count: int) -> list[Receipt]:
        return [self.take() for _ in range(count)]

    def empty(self) -> bool:
        return self.receipts.empty()


def http_params(url: str, method: str = "GET", **extra: Any) -> dict[str, Any]:
    return {"method": method, "url": url, "headers": {}, "body_ref": None, **extra}


# --- the loopback HTTP server's answers --------------------------------------------------------


def _echo(exchange: Exchange) -> None:
    headers = {"X-Method": exchange.seen.method, "Content-Type": "x/echo"}
    exchange.reply(201, exchange.seen.body, headers)


def _bytes(exchange: Exchange) -> None:
    """``/bytes?<n>&<char>``: n copies of a UTF-8 character."""
    count, _, char = exchange.seen.query.partition("&")
    exchange.reply(200, (char or "a").encode() * int(count))


def _stream(exchange: Exchange) -> None:
    """``/stream?<n>``: n bytes without Content-Length: the body ends at close."""
    exchange.send_response(200)
    exchange.end_headers()
    left = int(exchange.seen.query)
    while left:
        exchange.wfile.write(b"s" * min(left, 65536))
        left -= min(left, 65536)


def _drip(exchange: Exchange) -> None:
    """Promises 1000 bytes, sends one every 20 ms until the server is released."""
    exchange.send_response(200)
    exchange.send_header("Content-Length", "1000")
    exchange.end_headers()
    while not exchange.loopback.release.wait(0.02):
        exchange.wfile.write(b"d")
        exchange.wfile.flush()


ROUTES: dict[str, Answer | Script] = {
    "/ok": Answer(200, b"hello"),
    "/unavailable": Answer(503, b"busy"),
    "/echo": _echo,
    "/bytes": _bytes,
    "/binary": Answer(200, b"\xff\xfe\x00bin"),
    "/headers": Answer(200, b"", {"X-Twice": "a", "x-twice": "b", "X-Mixed-Case": "v"}),
    "/stream": _stream,
    "/drip": _drip,
    "/hang": Answer(hang=True),  # never answers
}
"""What the HTTP tests ask for; each server joins its handlers on close, so what a handler
saw is all in ``seen`` by then."""

loopback = loopback_fixture(ROUTES, join_handlers=True)


@pytest.fixture
def blobs() -> MemoryCas:
    return MemoryCas()


@pytest.fixture
def http(blobs: MemoryCas) -> Iterator[HttpAdapter]:
    adapter = HttpAdapter(blobs, connect_timeout_s=1.0, read_timeout_s=1.0, backoff_base_s=0.001)
    yield adapter
    adapter.close()


def request(adapter: HttpAdapter, params: dict[str, Any]) -> Receipt:
    inbox = Inbox()
    sent = intent("http.request", params)
    adapter.submit(sent, inbox)
    receipt = inbox.take()
    assert receipt.intent_hash == sent.intent_hash
    assert_receipt_schema("http.request", receipt)
    return receipt


# --- the contract every adapter keeps ----------------------------------------------------------


@dataclass
class Case:
    """An adapter, one intent it serves, and how to make that intent's receipt come."""

    adapter: Adapter
    kind: str
    params: dict[str, Any]
    drive: Callable[[], object]
    cleanup: Callable[[], None] = lambda: None


def _timer_case(sim: bool) -> Case:
    if sim:
        adapter = TimerAdapter(SimClock())
        return Case(adapter, "timer.set", {"deliver_at_ns": 5, "key": "k"}, adapter.advance)
    return Case(TimerAdapter(), "timer.set", {"deliver_at_ns": 0, "key": None}, lambda: None)


def _blob_case(store: Cas, synchronous: bool) -> Case:
    adapter = BlobAdapter(store, synchronous=synchronous)
    return Case(adapter, "blob.put", {"data": b"contract"}, lambda: None)


def _http_case() -> Case:
    server = Loopback(ROUTES, join_handlers=True).start()
    adapter = HttpAdapter(MemoryCas(), read_timeout_s=1.0)
    return Case(adapter, "http.request", http_params(server.url("/ok")), lambda: None, server.close)


@pytest.fixture(
    params=["timer-wall", "timer-sim", "blob-memory", "blob-file", "blob-sync", "http-loopback"]
)
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    name = request.param
    made = {
        "timer-wall": lambda: _timer_case(sim=False),
        "timer-sim": lambda: _timer_case(sim=True),
        "blob-memory": lambda: _blob_case(MemoryCas(), synchronous=False),
        "blob-file": lambda: _blob_case(FileCas(tmp_path), synchronous=False),
        "blob-sync": lambda: _blob_case(MemoryCas(), synchronous=True),
        "http-loopback": _http_case,
    }[name]()
    yield made
    made.adapter.close()
    made.cleanup()


def test_an_adapter_answers_each_intent_once_with_a_receipt_of_the_effect_schema(
    case: Case,
) -> None:
    inbox = Inbox()
    sent = [intent(case.kind, case.params) for _ in range(3)]
    for one in sent:
        case.adapter.submit(one, inbox)
    case.drive()
    receipts = inbox.take_all(3)
    assert sorted(r.intent_hash for r in receipts) == sorted(i.intent_hash for i in sent)
    for receipt in receipts:
        assert receipt.status == "ok"
        assert receipt.adapter_id == case.adapter.adapter_id
        assert_receipt_schema(case.kind, receipt)
    case.drive()
    assert inbox.empty()


def test_an_adapter_refuses_intents_after_close_and_answers_none(case: Case) -> None:
    inbox = Inbox()
    case.adapter.close()
    with pytest.raises(WrongMode):
        case.adapter.submit(intent(case.kind, case.params), inbox)
    assert inbox.empty()


def test_a_done_that_raises_is_reported_and_the_adapter_goes_on(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported: queue.Queue[type[BaseException] | None] = queue.Queue()
    monkeypatch.setattr(threading, "excepthook", lambda args: reported.put(args.exc_type))
    inbox = Inbox()

    def bad_done(receipt: Receipt) -> None:
        raise KeyError("the shell's bug")

    case.adapter.submit(intent(case.kind, case.params), bad_done)
    case.adapter.submit(intent(case.kind, case.params), inbox)
    case.drive()
    inbox.take()
    assert reported.get(timeout=WAIT_S) is KeyError


# --- the dispatcher -----------------------------------------------------------------------------


class HeldAdapter:
    """A fake adapter that keeps each intent until the test releases it."""

    adapter_id = "held"

    def __init__(self, kinds: frozenset[str] = frozenset({"held.op"})) -> None:
        self.kinds = kinds
        self.held: list[tuple[Intent, Done]] = []

    def submit(self, intent: Intent, done: Done) -> None:
        self.held.append((intent, done))

    def release(self, twice: bool = False) -> None:
        intent, done = self.held.pop(0)
        receipt = Receipt(intent.intent_hash, self.adapter_id, "ok", {})
        done(receipt)
        if twice:
            done(receipt)

    def close(self) -> None:
        self.held.clear()


def test_the_dispatcher_answers_an_unknown_kind_at_once_with_an_error_receipt() -> None:
    dispatcher = Dispatcher([HeldAdapter()])
    inbox = Inbox()
    sent = intent("warp.drive", {})
    dispatcher.submit(sent, inbox)
    receipt = inbox.take(timeout_s=0)
    assert receipt == Receipt(
        sent.intent_hash, DISPATCHER_ID, "error", {"error": "unknown_kind", "kind": "warp.drive"}
    )
    assert dispatcher.in_flight == 0


def test_the_dispatcher_counts_intents_in_flight_until_their_receipt_is_handed_over() -> None:
    held = HeldAdapter()
    dispatcher = Dispatcher([held])
    counts_at_delivery: list[int] = []

    def done(receipt: Receipt) -> None:
        counts_at_delivery.append(dispatcher.in_flight)

    dispatcher.submit(intent("held.op", {}), done)
    dispatcher.submit(intent("held.op", {}), done)
    assert dispatcher.in_flight == 2
    held.release()
    held.release()
    assert counts_at_delivery == [2, 1]
    assert dispatcher.in_flight == 0


def test_the_dispatcher_refuses_an_adapter_answering_twice() -> None:
    held = HeldAdapter()
    dispatcher = Dispatcher([held])
    dispatcher.submit(intent("held.op", {}), Inbox())
    with pytest.raises(RuntimeError):
        held.release(twice=True)
    assert dispatcher.in_flight == 0


def test_the_dispatcher_refuses_two_adapters_for_one_kind() -> None:
    with pytest.raises(InvalidArgument) as info:
        Dispatcher([HeldAdapter(), HeldAdapter()])
    assert info.value.value == "held.op"


def test_a_closed_dispatcher_closes_its_adapters_and_refuses_intents() -> None:
    held = HeldAdapter()
    dispatcher = Dispatcher([held])
    dispatcher.submit(intent("held.op", {}), Inbox())
    dispatcher.close()
    assert held.held == []
    with pytest.raises(WrongMode):
        dispatcher.submit(intent("held.op", {}), Inbox())


def test_intents_and_receipts_refuse_a_hash_that_is_not_32_bytes() -> None:
    with pytest.raises(InvalidArgument):
        Intent(b"short", "timer.set", {}, "test")
    with pytest.raises(InvalidArgument):
        Receipt(bytes(32), "timer", "maybe", {})  # type: ignore[arg-type]


# --- timers -----------------------------------------------------------------------------------


def test_a_wall_clock_timer_fires_no_sooner_than_its_deadline() -> None:
    adapter = TimerAdapter()
    inbox = Inbox()
    try:
        started = time.monotonic()
        deadline_ns = time.time_ns() + 200_000_000
        adapter.submit(intent("timer.set", {"deliver_at_ns": deadline_ns, "key": "t"}), inbox)
        receipt = inbox.take()
        assert time.monotonic() - started >= 0.2
    finally:
        adapter.close()
    assert receipt.status == "ok"
    assert receipt.payload["key"] == "t"
    assert receipt.payload["delivered_at_ns"] >= deadline_ns


def test_a_closed_wall_clock_timer_never_fires() -> None:
    adapter = TimerAdapter()
    inbox = Inbox()
    adapter.submit(
        intent("timer.set", {"deliver_at_ns": time.time_ns() + 10**12, "key": None}), inbox
    )
    adapter.close()
    assert inbox.empty()
    with pytest.raises(WrongMode):
        adapter.advance()


def test_simulated_timers_fire_in_deadline_order_only_when_advanced() -> None:
    clock = SimClock()
    adapter = TimerAdapter(clock)
    inbox = Inbox()
    for deadline, key in [(30, "c"), (10, "a1"), (20, "b"), (10, "a2")]:
        adapter.submit(intent("timer.set", {"deliver_at_ns": deadline, "key": key}), inbox)
    assert inbox.empty()
    assert adapter.next_deadline() == 10

    fired = []
    while adapter.next_deadline() is not None:
        count = adapter.advance()
        batch = [inbox.take(timeout_s=0) for _ in range(count)]
        fired.append([(r.payload["delivered_at_ns"], r.payload["key"]) for r in batch])
        assert clock.now_ns() == batch[0].payload["delivered_at_ns"]
    assert fired == [[(10, "a1"), (10, "a2")], [(20, "b")], [(30, "c")]]
    assert adapter.advance() == 0
    adapter.close()


class SteppedClock:
    """A wall clock the test sets: it jumps without telling anyone, as NTP can."""

    def __init__(self) -> None:
        self.ns = 0

    def now_ns(self) -> int:
        return self.ns


def test_a_wall_clock_stepped_past_a_deadline_is_seen_within_the_wait_slice() -> None:
    clock = SteppedClock()
    adapter = TimerAdapter(clock, wait_slice_s=0.02)
    inbox = Inbox()
    try:
        adapter.submit(intent("timer.set", {"deliver_at_ns": 10**18, "key": None}), inbox)
        assert adapter.next_deadline() == 10**18
        clock.ns = 10**18 + 7
        receipt = inbox.take()
    finally:
        adapter.close()
    assert receipt.payload["delivered_at_ns"] == 10**18 + 7


def test_a_simulated_timer_set_in_the_past_fires_at_the_current_time() -> None:
    clock = SimClock(start_ns=1_000)
    adapter = TimerAdapter(clock)
    inbox = Inbox()
    adapter.submit(intent("timer.set", {"deliver_at_ns": 5, "key": None}), inbox)
    adapter.advance()
    receipt = inbox.take(timeout_s=0)
    assert receipt.adapter_id == "timer.sim"
    assert receipt.payload == {"delivered_at_ns": 1_000, "key": None}
    adapter.close()


# --- blobs ------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Cas:
    return MemoryCas() if request.param == "memory" else FileCas(tmp_path)


def test_a_put_blob_comes_back_from_get(store: Cas) -> None:
    adapter = BlobAdapter(store)
    inbox = Inbox()
    try:
        adapter.submit(intent("blob.put", {"data": b"payload"}), inbox)
        put = inbox.take()
        assert put.payload == {"blob_ref": cbor.digest(b"payload"), "size": 7}
        adapter.submit(intent("blob.get", {"blob_ref": put.payload["blob_ref"]}), inbox)
        got = inbox.take()
    finally:
        adapter.close()
    assert got.status == "ok"
    assert got.payload == {"blob_ref": cbor.digest(b"payload"), "size": 7, "data": b"payload"}
    assert store.get(cbor.content_hash(b"payload")) == b"payload"


def test_getting_a_missing_blob_is_an_error_receipt_of_the_schema(store: Cas) -> None:
    adapter = BlobAdapter(store, synchronous=True)
    inbox = Inbox()
    missing = cbor.digest(b"never stored")
    adapter.submit(intent("blob.get", {"blob_ref": missing}), inbox)
    receipt = inbox.take(timeout_s=0)
    assert receipt.status == "error"
    assert receipt.payload == {"blob_ref": missing, "size": 0, "data": b""}
    assert_receipt_schema("blob.get", receipt)
    adapter.close()


def test_a_blob_larger_than_BLOB_GET_BYTES_MAX_is_not_returned() -> None:
    store = MemoryCas()
    adapter = BlobAdapter(store, synchronous=True)
    inbox = Inbox()
    fits = cbor.hash_to_raw(store.put(b"x" * BLOB_GET_BYTES_MAX))
    too_big = cbor.hash_to_raw(store.put(b"x" * (BLOB_GET_BYTES_MAX + 1)))
    adapter.submit(intent("blob.get", {"blob_ref": fits}), inbox)
    adapter.submit(intent("blob.get", {"blob_ref": too_big}), inbox)
    adapter.close()
    assert [r.status for r in inbox.take_all(2)] == ["ok", "error"]


# --- HTTP -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "status"), [("/ok", 200), ("/unavailable", 503)])
def test_any_http_response_is_an_ok_receipt_carrying_its_status(
    http: HttpAdapter, loopback: Loopback, path: str, status: int
) -> None:
    receipt = request(http, http_params(loopback.url(path)))
    assert receipt.status == "ok"
    assert receipt.payload["status"] == status
    assert receipt.payload["body_ref"] is None
    assert receipt.payload["body_preview"] == ("hello" if status == 200 else "busy")
    assert len(loopback.seen) == 1


def test_response_header_names_are_lowercase_sorted_and_repeats_joined(
    http: HttpAdapter, loopback: Loopback
) -> None:
    headers = request(http, http_params(loopback.url("/headers"))).payload["headers"]
    assert headers["x-twice"] == "a, b"
    assert headers["x-mixed-case"] == "v"
    assert list(headers) == sorted(headers)


def test_a_post_body_from_the_blob_store_reaches_the_server_intact(
    http: HttpAdapter, loopback: Loopback, blobs: MemoryCas
) -> None:
    body = bytes(range(256)) * 64
    body_ref = cbor.hash_to_raw(blobs.put(body))
    params = http_params(loopback.url("/echo"), "POST", headers={"X-Trace": "7"}, body_ref=body_ref)
    receipt = request(http, params)
    assert receipt.payload["status"] == 201
    [seen] = loopback.seen
    assert (seen.method, seen.body, seen.headers["x-trace"]) == ("POST", body, "7")
    assert blobs.get(cbor.raw_to_hash(receipt.payload["body_ref"])) == body


def test_a_body_ref_missing_from_the_blob_store_is_an_error_without_a_request(
    http: HttpAdapter, loopback: Loopback
) -> None:
    params = http_params(loopback.url("/echo"), "POST", body_ref=cbor.digest(b"absent"))
    receipt = request(http, params)
    assert (receipt.status, receipt.payload["status"]) == ("error", 0)
    assert receipt.payload["body_preview"].startswith("request body blake3:")
    assert "ObjectMissing" in receipt.payload["body_preview"]
    assert loopback.seen == []


def test_a_url_with_an_unsupported_scheme_is_an_error_without_retries(http: HttpAdapter) -> None:
    # The kernel's URL normaliser refuses it before httpx is asked (tests/kernel/test_grants.py).
    receipt = request(http, http_params("ftp://127.0.0.1/file"))
    assert (receipt.status, receipt.payload["status"]) == ("error", 0)
    assert receipt.payload["body_preview"].startswith("url refused (scheme)")


def test_a_body_of_HTTP_BODY_INLINE_BYTES_MAX_stays_in_the_receipt_and_one_byte_more_does_not(
    http: HttpAdapter, loopback: Loopback, blobs: MemoryCas
) -> None:
    inline = request(http, http_params(loopback.url(f"/bytes?{HTTP_BODY_INLINE_BYTES_MAX}")))
    assert inline.payload["body_ref"] is None
    assert inline.payload["body_preview"] == "a" * HTTP_BODY_INLINE_BYTES_MAX
    stored = request(http, http_params(loopback.url(f"/bytes?{HTTP_BODY_INLINE_BYTES_MAX + 1}")))
    body = blobs.get(cbor.raw_to_hash(stored.payload["body_ref"]))
    assert body == b"a" * (HTTP_BODY_INLINE_BYTES_MAX + 1)


def test_a_large_body_goes_to_the_blob_store_with_a_preview_of_HTTP_BODY_PREVIEW_CHARS(
    http: HttpAdapter, loopback: Loopback, blobs: MemoryCas
) -> None:
    receipt = request(http, http_params(loopback.url("/bytes?5000&é")))
    assert receipt.payload["body_preview"] == "é" * HTTP_BODY_PREVIEW_CHARS
    assert blobs.get(cbor.raw_to_hash(receipt.payload["body_ref"])) == "é".encode() * 5000


def test_a_small_body_that_is_not_utf8_goes_to_the_blob_store(
    http: HttpAdapter, loopback: Loopback, blobs: MemoryCas
) -> None:
    receipt = request(http, http_params(loopback.url("/binary")))
    assert blobs.get(cbor.raw_to_hash(receipt.payload["body_ref"])) == b"\xff\xfe\x00bin"
    assert receipt.payload["body_preview"] == "\ufffd\ufffd\x00bin"


def test_a_streamed_body_past_HTTP_RESPONSE_BYTES_MAX_is_an_error_and_not_retried(
    http: HttpAdapter, loopback: Loopback
) -> None:
    fits = request(http, http_params(loopback.url(f"/stream?{HTTP_RESPONSE_BYTES_MAX}")))
    assert (fits.status, fits.payload["status"]) == ("ok", 200)
    too_big = request(http, http_params(loopback.url(f"/stream?{HTTP_RESPONSE_BYTES_MAX + 1}")))
    assert (too_big.status, too_big.payload["status"]) == ("error", 0)
    assert len(loopback.seen) == 2


def test_a_declared_content_length_past_the_limit_is_refused_before_reading(
    blobs: MemoryCas, loopback: Loopback
) -> None:
    adapter = HttpAdapter(blobs, response_bytes_max=1000)
    try:
        receipt = request(adapter, http_params(loopback.url("/bytes?1001")))
    finally:
        adapter.close()
    assert receipt.status == "error"
    assert "1001 bytes" in receipt.payload["body_preview"]


class ListenOnAttempt(httpx.BaseTransport):
    """The real transport, counting attempts; the server starts listening at attempt ``n``."""

    def __init__(self, server: Loopback, listen_at: int | None) -> None:
        self.server = server
        self.listen_at = listen_at
        self.attempts = 0
        self.attempted = threading.Event()
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        self.attempted.set()
        if self.attempts == self.listen_at:
            self.server.listen()
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def refusing() -> Iterator[Loopback]:
    """A server whose port is bound but not listening: connections are refused until
    ``listen()``."""
    server = Loopback(ROUTES, join_handlers=True).start(listening=False)
    yield server
    server.close()


def test_a_refused_connection_is_retried_with_backoff_until_the_server_answers(
    blobs: MemoryCas, refusing: Loopback
) -> None:
    transport = ListenOnAttempt(refusing, listen_at=3)
    adapter = HttpAdapter(blobs, transport=transport)
    try:
        started = time.monotonic()
        receipt = request(adapter, http_params(refusing.url("/ok")))
        elapsed_s = time.monotonic() - started
    finally:
        adapter.close()
    assert (receipt.status, receipt.payload["status"]) == ("ok", 200)
    assert transport.attempts == 3
    assert elapsed_s >= backoff_s(1) + backoff_s(2)


def test_a_server_refusing_every_attempt_ends_in_an_error_after_RETRIES_MAX_retries(
    blobs: MemoryCas, refusing: Loopback
) -> None:
    transport = ListenOnAttempt(refusing, listen_at=None)
    adapter = HttpAdapter(blobs, transport=transport)
    try:
        receipt = request(adapter, http_params(refusing.url("/ok")))
    finally:
        adapter.close()
    assert (receipt.status, receipt.payload["status"]) == ("error", 0)
    assert "ConnectError" in receipt.payload["body_preview"]
    assert transport.attempts == 1 + RETRIES_MAX


def test_a_server_that_never_answers_ends_in_a_timeout_after_RETRIES_MAX_retries(
    blobs: MemoryCas, loopback: Loopback
) -> None:
    adapter = HttpAdapter(blobs, read_timeout_s=0.05, backoff_base_s=0.001)
    try:
        receipt = request(adapter, http_params(loopback.url("/hang")))
    finally:
        adapter.close()
    assert (receipt.status, receipt.payload["status"]) == ("timeout", 0)
    assert "ReadTimeout" in receipt.payload["body_preview"]
    assert len(loopback.seen) == 1 + RETRIES_MAX


def test_a_connection_nobody_accepts_ends_in_a_connect_timeout(blobs: MemoryCas) -> None:
    # A listener with a backlog of 0 whose queue is full: Linux drops further SYNs.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(3)]
        adapter = HttpAdapter(blobs, connect_timeout_s=0.1, retries_max=0)
        try:
            for filler in fillers:
                filler.setblocking(False)
                filler.connect_ex(("127.0.0.1", port))
            receipt = request(adapter, http_params(f"http://127.0.0.1:{port}/"))
        finally:
            adapter.close()
            for filler in fillers:
                filler.close()
    assert (receipt.status, receipt.payload["status"]) == ("timeout", 0)
    assert "ConnectTimeout" in receipt.payload["body_preview"]


def test_a_dripping_response_is_cut_at_the_attempt_deadline(
    blobs: MemoryCas, loopback: Loopback
) -> None:
    adapter = HttpAdapter(blobs, attempt_deadline_s=0.1, retries_max=1, backoff_base_s=0.001)
    try:
        receipt = request(adapter, http_params(loopback.url("/drip")))
    finally:
        adapter.close()
    assert (receipt.status, receipt.payload["status"]) == ("timeout", 0)
    assert "attempt_deadline_s" in receipt.payload["body_preview"]
    assert len(loopback.seen) == 2


def test_at_most_HTTP_WORKERS_requests_run_at_once(blobs: MemoryCas, loopback: Loopback) -> None:
    adapter = HttpAdapter(blobs, read_timeout_s=WAIT_S, backoff_base_s=0.001)
    inbox = Inbox()
    try:
        for _ in range(HTTP_WORKERS):
            adapter.submit(intent("http.request", http_params(loopback.url("/hang"))), inbox)
        arrived = [loopback.arrived.get(timeout=WAIT_S) for _ in range(HTTP_WORKERS)]
        adapter.submit(intent("http.request", http_params(loopback.url("/ok"))), inbox)
        with pytest.raises(queue.Empty):
            loopback.arrived.get(timeout=0.1)
        loopback.release.set()
        receipts = inbox.take_all(HTTP_WORKERS + 1)
    finally:
        adapter.close()
    assert arrived == ["/hang"] * HTTP_WORKERS
    assert sorted(r.payload["status"] for r in receipts) == [0] * HTTP_WORKERS + [200]


def test_closing_a_worker_pool_waits_no_longer_than_its_bound_for_a_stuck_job() -> None:
    pool = WorkerPool("stuck", 1)
    unblock = threading.Event()
    started = threading.Event()

    def stuck() -> None:
        started.set()
        unblock.wait(WAIT_S)

    pool.run(stuck)
    assert started.wait(WAIT_S)
    began = time.monotonic()
    pool.close(wait_s=0.05)
    assert time.monotonic() - began < 1.0
    unblock.set()


def test_backoff_doubles_from_BACKOFF_BASE_S_up_to_BACKOFF_MAX_S() -> None:
    waits = [backoff_s(retry) for retry in range(1, 12)]
    assert waits[:3] == [BACKOFF_BASE_S, 2 * BACKOFF_BASE_S, 4 * BACKOFF_BASE_S]
    assert max(waits) == BACKOFF_MAX_S == waits[-1]
    assert backoff_s(10_000) == BACKOFF_MAX_S
    with pytest.raises(InvalidArgument):
        backoff_s(0)


def test_closing_the_http_adapter_during_a_backoff_drops_the_intent(
    blobs: MemoryCas, refusing: Loopback
) -> None:
    transport = ListenOnAttempt(refusing, listen_at=None)
    adapter = HttpAdapter(blobs, transport=transport, backoff_base_s=WAIT_S)
    inbox = Inbox()
    adapter.submit(intent("http.request", http_params(refusing.url("/ok"))), inbox)
    assert transport.attempted.wait(WAIT_S)
    started = time.monotonic()
    adapter.close()
    assert time.monotonic() - started < WAIT_S
    assert inbox.empty()
