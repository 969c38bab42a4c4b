"""``blob.put`` and ``blob.get``: bytes in and out of the world's content store.

``blob.put {data}`` -> ``{blob_ref, size}``; ``blob.get {blob_ref}`` -> ``{blob_ref, size,
data}`` (SPEC §6). ``blob_ref`` is the raw 32-byte blake3 of the data, as inside canonical
CBOR; the store speaks ``blake3:<hex>`` and ``air.cbor.hash_to_raw``/``raw_to_hash`` convert.

The store is anything with ``put(data) -> address`` and ``get(address) -> bytes``
(``world._cas.FileCas``, ``kernel.cells.MemoryCas``); it must be safe to call from the
adapter's thread while other threads use it (both are: a put is a temp file and a rename).

Failures are receipts, shaped as the receipt schema: a blob that is missing, damaged (its
bytes do not hash to its address) or larger than ``BLOB_GET_BYTES_MAX`` is an ``error``
receipt ``{blob_ref, size: 0, data: b""}``; a put the store refuses (disk full, read-only) is
an ``error`` receipt carrying the ref and size the data would have had. Store errors are not
retried: they are local and would fail again.

By default the work runs on one worker thread (a put fsyncs, which must not stall the engine
loop), in submission order. ``synchronous=True`` runs it inside ``submit``, which calls
``done`` before returning: for simulated runs and tests.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from air import cbor
from air.errors import WorldError, WrongMode
from world.effects._adapters import BLOB_GET_BYTES_MAX, Done, Intent, Receipt, ReceiptStatus
from world.effects._workers import Outbox, WorkerPool

__all__ = ["BLOB_GET_KIND", "BLOB_PUT_KIND", "BlobAdapter", "BlobStore"]

BLOB_PUT_KIND: Final = "blob.put"
BLOB_GET_KIND: Final = "blob.get"


class BlobStore(Protocol):
    def put(self, data: bytes) -> str: ...
    def get(self, address: str) -> bytes: ...


class BlobAdapter:
    adapter_id: str = "blob"
    kinds: frozenset[str] = frozenset({BLOB_PUT_KIND, BLOB_GET_KIND})

    def __init__(
        self,
        store: BlobStore,
        *,
        synchronous: bool = False,
        get_bytes_max: int = BLOB_GET_BYTES_MAX,
    ) -> None:
        self.store = store
        self.get_bytes_max = get_bytes_max
        self._outbox = Outbox()
        self._pool = None if synchronous else WorkerPool("blob", 1)

    def submit(self, intent: Intent, done: Done) -> None:
        def job() -> None:
            self._outbox.deliver(done, self._answer(intent))

        if self._outbox.closed:
            raise WrongMode("submit an intent", "closed")
        if self._pool is None:
            job()
        else:
            self._pool.run(job)

    def _answer(self, intent: Intent) -> Receipt:
        params = intent.params if isinstance(intent.params, dict) else {}
        if intent.kind == BLOB_PUT_KIND:
            status, payload = self._put(params.get("data"))
        else:
            status, payload = self._get(params.get("blob_ref"))
        return Receipt(intent.intent_hash, self.adapter_id, status, payload)

    def _put(self, data: Any) -> tuple[ReceiptStatus, dict[str, Any]]:
        if not isinstance(data, bytes):
            return "error", {"blob_ref": bytes(32), "size": 0}
        try:
            blob_ref = cbor.hash_to_raw(self.store.put(data))
        except (WorldError, OSError):
            return "error", {"blob_ref": cbor.digest(data), "size": len(data)}
        return "ok", {"blob_ref": blob_ref, "size": len(data)}

    def _get(self, blob_ref: Any) -> tuple[ReceiptStatus, dict[str, Any]]:
        if not isinstance(blob_ref, bytes) or len(blob_ref) != 32:
            return "error", {"blob_ref": bytes(32), "size": 0, "data": b""}
        failed: dict[str, Any] = {"blob_ref": blob_ref, "size": 0, "data": b""}
        try:
            data = self.store.get(cbor.raw_to_hash(blob_ref))
        except (WorldError, OSError):  # ObjectMissing, HashMismatch, a failed read
            return "error", failed
        if len(data) > self.get_bytes_max:
            return "error", failed
        return "ok", {"blob_ref": blob_ref, "size": len(data), "data": data}

    def close(self) -> None:
        self._outbox.close()
        if self._pool is not None:
            self._pool.close()
