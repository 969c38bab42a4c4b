"""Effect adapters: the I/O that an allowed effect intent asks for, done beside the engine loop.

Public surface: ``Intent``, ``Receipt``, the ``Adapter`` protocol, ``Dispatcher`` (adapters by
kind, with an ``in_flight`` count), ``backoff_s``, and the named limits below. The adapters
themselves live in ``world.effects._timer`` (``TimerAdapter``, ``SimClock``),
``world.effects._blob`` (``BlobAdapter``) and ``world.effects._http`` (``HttpAdapter``);
importing this package does not import them (nor httpx).

Where this sits: the deterministic kernel decides which intents run (capabilities, policy) and
journals them; it never does I/O. The shell hands each allowed intent to ``Dispatcher.submit``
with a ``done`` callback, the adapter does the work on its own thread(s), and ``done`` receives
one ``Receipt``, from whatever thread finished it. The shell signs it (``world.effects._receipts``),
verifies it and journals it. Replay never calls an adapter: it reuses the journaled receipts.

Invariants, for every adapter here:

* ``submit`` does not block on I/O and does not raise for anything the world or the network
  does: a failure is a receipt with status ``error`` or ``timeout``, never an exception.
* ``done`` is called at most once per intent, and exactly once unless the adapter is closed
  first. Once ``close()`` has begun no ``done`` is called at all: an intent still pending then
  has no journaled receipt and is dispatched again when the world next runs (so delivery is
  at least once; an HTTP request that reached its server may be sent again).
* A receipt's payload has the shape of the effect's receipt schema (SPEC §6 table) whatever
  its status, because a reducer receives it inside ``sys/TimerFired@1`` & co., whose
  ``receipt`` field is typed. Only ``Dispatcher``'s receipt for an unknown kind, which has no
  schema, is ``{error, kind}``.
* ``close()`` waits a bounded time (``ADAPTER_CLOSE_WAIT_S``) and its threads are daemons, so
  a stuck socket cannot hold the process open.

Rejected alternative: asyncio adapters on the engine's loop. The engine loop is synchronous
(``world._engine``) and a step must never wait on the network; threads plus a thread-safe
callback keep the loop free of I/O without making the engine async.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeAlias

from air import cbor
from air.errors import InvalidArgument, WrongMode
from world._localconfig import read_local_config

__all__ = [
    "ADAPTER_CLOSE_WAIT_S",
    "BACKOFF_BASE_S",
    "BACKOFF_MAX_S",
    "BLOB_GET_BYTES_MAX",
    "DISPATCHER_ID",
    "HTTP_ATTEMPT_DEADLINE_S",
    "HTTP_BODY_INLINE_BYTES_MAX",
    "HTTP_BODY_PREVIEW_CHARS",
    "HTTP_CONNECT_TIMEOUT_S",
    "HTTP_READ_TIMEOUT_S",
    "HTTP_RESPONSE_BYTES_MAX",
    "HTTP_WORKERS",
    "INTENT_HASH_BYTES",
    "RECEIPT_STATUSES",
    "RETRIES_MAX",
    "Adapter",
    "Dispatcher",
    "Done",
    "Intent",
    "Receipt",
    "ReceiptStatus",
    "backoff_s",
    "http_settings",
    "llm_providers",
]

RETRIES_MAX: Final = 3
"""Retries after a transport failure (so at most ``1 + RETRIES_MAX`` attempts); then the intent
ends in an ``error`` or ``timeout`` receipt."""

BACKOFF_BASE_S: Final = 0.05
"""Wait before the first retry; each later retry waits twice the one before (``backoff_s``)."""

BACKOFF_MAX_S: Final = 2.0
"""Cap on one backoff wait, however many retries came before."""

HTTP_CONNECT_TIMEOUT_S: Final = 5.0
"""Longest wait to open a connection (TCP and TLS) for one attempt."""

HTTP_READ_TIMEOUT_S: Final = 30.0
"""Longest wait for the next bytes of a response (also used for writing the request)."""

HTTP_ATTEMPT_DEADLINE_S: Final = 120.0
"""Longest one attempt may take from connecting to the end of the body. A server dripping one
byte just inside the read timeout would otherwise hold a worker for days. Checked between
reads, so an attempt can overrun it by at most one read timeout; it counts as a timeout."""

HTTP_RESPONSE_BYTES_MAX: Final = 16 * 1024 * 1024
"""Largest response body read, in bytes as sent (before any content decoding, which is not
done). A larger ``Content-Length`` is refused before reading; a body without one is streamed
and refused at the first byte past the limit, so memory stays bounded. Not retried."""

HTTP_BODY_INLINE_BYTES_MAX: Final = 1024
"""Largest response body kept in the receipt itself (as ``body_preview``, with ``body_ref``
null). A larger body, or one that is not UTF-8 text, goes to the blob store and the receipt
carries its ``body_ref``."""

HTTP_BODY_PREVIEW_CHARS: Final = 1024
"""Most characters of ``body_preview``: the body's first characters, decoded as UTF-8 with
replacement characters for bad bytes."""

HTTP_WORKERS: Final = 4
"""Threads running HTTP requests; more concurrent intents wait in their queue."""

BLOB_GET_BYTES_MAX: Final = 16 * 1024 * 1024
"""Largest blob that ``blob.get`` returns in a receipt (the receipt is journaled and handed to
a reducer); a larger one is an ``error`` receipt."""

ADAPTER_CLOSE_WAIT_S: Final = 5.0
"""Longest ``close()`` waits for each adapter thread to stop."""

INTENT_HASH_BYTES: Final = 32
DISPATCHER_ID: Final = "dispatcher"
"""``adapter_id`` of the receipts ``Dispatcher`` makes itself (for an unknown kind)."""

ReceiptStatus: TypeAlias = Literal["ok", "error", "timeout", "stub"]
RECEIPT_STATUSES: Final = frozenset({"ok", "error", "timeout", "stub"})
"""``stub``: no adapter was asked; the run's effects are stubbed (``world.effects._modes``).
No adapter here returns it."""


def _check_intent_hash(intent_hash: bytes) -> None:
    if not isinstance(intent_hash, bytes) or len(intent_hash) != INTENT_HASH_BYTES:
        raise InvalidArgument("intent_hash", intent_hash, "must be 32 raw bytes")


@dataclass(frozen=True)
class Intent:
    """An allowed effect intent. ``params`` is the decoded canonical CBOR of the params,
    already normalised by the effect's params schema; ``origin`` names who asked.
    ``bytes_max``: the most body bytes (request plus response) the intent may move, which its
    grant's ``bytes`` budget reserved for it (the HTTP adapter holds to it); None when its
    grant has no budget, and the adapter's own limits alone apply."""

    intent_hash: bytes
    kind: str
    params: Any
    origin: str
    bytes_max: int | None = None

    def __post_init__(self) -> None:
        _check_intent_hash(self.intent_hash)


@dataclass(frozen=True)
class Receipt:
    """What an adapter reports for one intent. ``payload`` is a value of the effect's receipt
    schema (a dict), whatever the ``status``."""

    intent_hash: bytes
    adapter_id: str
    status: ReceiptStatus
    payload: Any

    def __post_init__(self) -> None:
        _check_intent_hash(self.intent_hash)
        if self.status not in RECEIPT_STATUSES:
            raise InvalidArgument("status", self.status, "must be ok, error, timeout or stub")

    @property
    def payload_cbor(self) -> bytes:
        return cbor.dumps(self.payload)


Done: TypeAlias = Callable[[Receipt], None]
"""Receives an intent's receipt; called from any thread. It must be quick and must not raise
(hand the receipt to the engine loop and return)."""


class Adapter(Protocol):
    """Does the I/O of the intents of ``kinds``; see the module docstring for the contract."""

    adapter_id: str
    kinds: frozenset[str]

    def submit(self, intent: Intent, done: Done) -> None:
        """Start the work and return at once; ``done`` gets the receipt later."""
        ...

    def close(self) -> None:
        """Stop the adapter's threads (bounded wait); pending intents get no receipt."""
        ...


def backoff_s(retry: int, base_s: float = BACKOFF_BASE_S, cap_s: float = BACKOFF_MAX_S) -> float:
    """The wait before retry number ``retry`` (1 for the first): ``base_s`` doubling, capped."""
    if retry < 1:
        raise InvalidArgument("retry", retry, "retries are numbered from 1")
    return min(base_s * 2.0 ** min(retry - 1, 62), cap_s)


class Dispatcher:
    """Routes each intent to the adapter serving its kind and counts intents in flight.

    ``in_flight`` drops only after an intent's ``done`` has returned, so when the shell sees
    it at 0 every receipt is already in the shell's hands. An unknown kind gets an immediate
    ``error`` receipt from the dispatcher itself (the kernel should never send one: validation
    refuses effects that are not defined).
    """

    def __init__(self, adapters: Iterable[Adapter]) -> None:
        self._adapters: list[Adapter] = list(adapters)
        self._by_kind: dict[str, Adapter] = {}
        for adapter in self._adapters:
            for kind in sorted(adapter.kinds):
                if kind in self._by_kind:
                    reason = (
                        f"served by both {self._by_kind[kind].adapter_id} and {adapter.adapter_id}"
                    )
                    raise InvalidArgument("adapters", kind, reason)
                self._by_kind[kind] = adapter
        self._lock = threading.Lock()
        self._in_flight = 0
        self._closed = False

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(self._by_kind)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def submit(self, intent: Intent, done: Done) -> None:
        """Hand ``intent`` to its adapter; ``done`` gets exactly one receipt (none after close)."""
        with self._lock:
            if self._closed:
                raise WrongMode("submit an intent", "closed")
            self._in_flight += 1
        adapter = self._by_kind.get(intent.kind)
        finish = self._finisher(intent, done)
        if adapter is None:
            payload = {"error": "unknown_kind", "kind": intent.kind}
            finish(Receipt(intent.intent_hash, DISPATCHER_ID, "error", payload))
            return
        try:
            adapter.submit(intent, finish)
        except BaseException:
            with self._lock:
                self._in_flight -= 1
            raise

    def _finisher(self, intent: Intent, done: Done) -> Done:
        answered = False

        def finish(receipt: Receipt) -> None:
            nonlocal answered
            with self._lock:
                if answered:
                    raise RuntimeError(f"intent {intent.intent_hash.hex()} answered twice")
                answered = True
            try:
                done(receipt)
            finally:
                with self._lock:
                    self._in_flight -= 1

        return finish

    def close(self) -> None:
        """Close every adapter (each waits a bounded time). Intents still in flight are left
        without receipts and stay counted in ``in_flight``."""
        with self._lock:
            self._closed = True
        for adapter in self._adapters:
            adapter.close()


def http_settings(world_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The HTTP adapter's settings for the world at ``world_dir`` on this machine: its
    ``local.json`` (``world._localconfig``) over the adapter's defaults (``world info``)."""
    return {
        "connect_timeout_s": HTTP_CONNECT_TIMEOUT_S,
        "read_timeout_s": HTTP_READ_TIMEOUT_S,
        "attempt_deadline_s": HTTP_ATTEMPT_DEADLINE_S,
        "retries_max": RETRIES_MAX,
        "backoff_base_s": BACKOFF_BASE_S,
        "backoff_max_s": BACKOFF_MAX_S,
        **read_local_config(world_dir).http.given(),
    }


def llm_providers(world_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The ``llm.generate`` providers this machine's ``local.json`` names: name -> base URL
    (``world info``; ``world.effects._llm``)."""
    return {n: p.base_url for n, p in read_local_config(world_dir).llm.providers.items()}
