"""``http.request``: one HTTP exchange per intent, with retries, timeouts and size limits.

Params ``{method, url, headers: map<text,text>, body_ref: hash|None}``; receipt ``{status: int,
headers: map<text,text>, body_ref: hash|None, body_preview: text}`` (SPEC §6).

Byte count. Every receipt of an exchange that moved bytes counts them in its ``headers``
under ``kernel.HTTP_BODY_BYTES_HEADER`` (``:body-bytes``, decimal text): the request body sent
plus the response body read. The kernel settles the grant's ``bytes`` budget with it. A
pseudo-header because the receipt schema is a closed record, and no server can send a name
beginning with ``:``. An intent under a budget comes with ``bytes_max``, what its grant
reserved for it: a request body larger than that is an ``error`` receipt and nothing is
sent, and the response body may be at most what remains (``response_bytes_max`` otherwise),
refused like any over-limit body. A failure counts only what is known to have moved: the
request body once a response began, plus the response bytes read up to the limit; a body
refused by its ``Content-Length`` is not read at all. Only the last attempt is counted.

Outcomes:

* Any HTTP response, whatever its status (200, 404, 503), is an ``ok`` receipt carrying that
  status: the exchange happened; what it means is the plan's business.
* A transport failure (connection refused or reset, connect/read timeout, the server closing
  without an answer, ``HTTP_ATTEMPT_DEADLINE_S`` passed) is retried after ``backoff_s`` waits,
  at most ``retries_max`` times; the last failure decides the receipt: ``timeout`` if it was a
  timeout, else ``error``. An error receipt keeps the schema's shape: ``status`` 0, no headers,
  no ``body_ref``, and ``body_preview`` saying what failed.
* A request that cannot be sent as given (a URL the normaliser refuses, a header that is not
  ASCII, a ``body_ref`` not in the blob store) and a response body over ``response_bytes_max`` are
  ``error`` receipts at once: trying again would not change them.

Bodies: the request body is read from the blob store when ``body_ref`` is given. The response
body is read raw (no content decoding: nothing asks for an encoding unless the plan's headers
do, and a decompression bomb cannot expand past the limit), streamed, and refused at the first
byte past ``response_bytes_max``. A body of at most ``body_inline_bytes_max`` bytes of UTF-8
that fits the preview stays in the receipt (``body_ref`` null, ``body_preview`` the whole
body); any other non-empty body goes to the blob store and ``body_ref`` names it.
``body_preview`` is the first ``body_preview_chars`` characters either way. Response header
names are lowercase, and repeated headers are joined with ", " (RFC 9110 §5.3); the receipt's
map is canonical, so sorted, when encoded.

The URL sent is exactly the one the capability check matched: the intent's URL read through the
kernel's normaliser (``kernel.read_url``: lower-case scheme and host, IDNA, no default port,
unreserved escapes decoded, dot segments removed, no fragment), and its ``Url.text`` is what
httpx is given, already in the form httpx would put it in, so httpx changes nothing. A URL the
normaliser refuses is an ``error`` receipt at once and no request is made (the kernel refuses
such an intent before it is queued; the adapter reads the URL again for an intent queued by an
older kernel, or handed to it directly). A ``Host`` header in the params is dropped, so httpx
sends the normalised URL's authority: the kernel refused any header that named another.

What is deliberately not done, because the capability check (kernel) saw only the intent's URL:
redirects are not followed (httpx's transports never follow them, and no client is used: a 3xx
is an ``ok`` receipt carrying its status and its ``location`` header, and the plan decides
whether to make a new, checked request), no proxy is taken from the environment, no cookie is
kept from one intent to the next, and no auth is added. The adapter uses an
``httpx.HTTPTransport`` (a thread-safe connection pool) directly rather than ``httpx.Client``,
because the client carries exactly that state (cookie jar, env proxies, default headers).
Requests run on ``HTTP_WORKERS`` threads (``_worker.WorkerPool``).

Retries may repeat a request that the server did receive (a read timeout after the request was
sent), and so may the re-dispatch of an intent that had no receipt when the world stopped:
delivery is at least once. An idempotency key header is the plan's tool for that.
"""

from __future__ import annotations

import codecs
import time
from dataclasses import dataclass
from typing import Any, Final

import httpx

from air import cbor
from air.errors import WorldError
from kernel import HTTP_BODY_BYTES_HEADER, UrlRefused, read_url
from world.effects._adapters import (
    BACKOFF_BASE_S,
    BACKOFF_MAX_S,
    HTTP_ATTEMPT_DEADLINE_S,
    HTTP_BODY_INLINE_BYTES_MAX,
    HTTP_BODY_PREVIEW_CHARS,
    HTTP_CONNECT_TIMEOUT_S,
    HTTP_READ_TIMEOUT_S,
    HTTP_RESPONSE_BYTES_MAX,
    HTTP_WORKERS,
    RETRIES_MAX,
    Done,
    Intent,
    Receipt,
    ReceiptStatus,
    backoff_s,
)
from world.effects._blob import BlobStore
from world.effects._workers import Outbox, WorkerPool

__all__ = ["HTTP_KIND", "HTTP_USER_AGENT", "HttpAdapter"]

HTTP_KIND: Final = "http.request"
HTTP_USER_AGENT: Final = "world-kernel"
"""Sent as ``user-agent`` unless the intent's headers name one."""

_NOT_RETRIED: Final = (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.ProxyError)


class _Failed(Exception):
    """One attempt failed: ``status`` ``timeout`` or ``error``; ``retry`` if worth retrying."""

    def __init__(
        self, status: ReceiptStatus, detail: str, *, retry: bool, body_bytes: int = 0
    ) -> None:
        super().__init__(detail)
        self.status: ReceiptStatus = status
        self.detail = detail
        self.retry = retry
        self.body_bytes = body_bytes


@dataclass(frozen=True)
class _Request:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None
    response_bytes_max: int

    @property
    def body_bytes(self) -> int:
        return 0 if self.body is None else len(self.body)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _preview(body: bytes, chars: int) -> str:
    """The first ``chars`` characters of ``body`` as UTF-8, bad bytes replaced; a character cut
    in half by the read window is left out rather than replaced."""
    window = body[: chars * 4]
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    return decoder.decode(window, final=len(window) == len(body))[:chars]


def _response_headers(response: httpx.Response, body_bytes: int) -> dict[str, str]:
    """The response's headers, and the body bytes moved (``HTTP_BODY_BYTES_HEADER``)."""
    headers: dict[str, str] = {}
    for name, value in response.headers.multi_items():
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    headers[HTTP_BODY_BYTES_HEADER] = str(body_bytes)  # no server can send a ":" name
    return dict(sorted(headers.items()))


class HttpAdapter:
    adapter_id: str = "http"
    kinds: frozenset[str] = frozenset({HTTP_KIND})

    def __init__(
        self,
        blobs: BlobStore,
        *,
        connect_timeout_s: float = HTTP_CONNECT_TIMEOUT_S,
        read_timeout_s: float = HTTP_READ_TIMEOUT_S,
        attempt_deadline_s: float = HTTP_ATTEMPT_DEADLINE_S,
        retries_max: int = RETRIES_MAX,
        backoff_base_s: float = BACKOFF_BASE_S,
        backoff_max_s: float = BACKOFF_MAX_S,
        response_bytes_max: int = HTTP_RESPONSE_BYTES_MAX,
        body_inline_bytes_max: int = HTTP_BODY_INLINE_BYTES_MAX,
        body_preview_chars: int = HTTP_BODY_PREVIEW_CHARS,
        workers: int = HTTP_WORKERS,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.blobs = blobs
        self.attempt_deadline_s = attempt_deadline_s
        self.retries_max = retries_max
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.response_bytes_max = response_bytes_max
        self.body_inline_bytes_max = body_inline_bytes_max
        self.body_preview_chars = body_preview_chars
        timeout = httpx.Timeout(
            connect=connect_timeout_s,
            read=read_timeout_s,
            write=read_timeout_s,
            pool=connect_timeout_s,
        )
        self._timeout = timeout.as_dict()
        self._transport = transport if transport is not None else httpx.HTTPTransport()
        self._outbox = Outbox()
        self._pool = WorkerPool("http", workers)

    def submit(self, intent: Intent, done: Done) -> None:
        def job() -> None:
            receipt = self._answer(intent)
            if receipt is not None:
                self._outbox.deliver(done, receipt)

        self._pool.run(job)

    def close(self) -> None:
        self._outbox.close()
        self._pool.close()
        self._transport.close()

    def _answer(self, intent: Intent) -> Receipt | None:
        """The receipt for ``intent``, or None when the adapter closed while waiting to retry."""
        try:
            request = self._request(intent.params, intent.bytes_max)
            failed: _Failed | None = None
            for retry in range(self.retries_max + 1):
                if retry:
                    wait_s = backoff_s(retry, self.backoff_base_s, self.backoff_max_s)
                    if self._pool.closing.wait(wait_s):
                        return None
                try:
                    payload = self._attempt(request)
                except _Failed as exc:
                    failed = exc
                    if exc.retry:
                        continue
                    break
                return Receipt(intent.intent_hash, self.adapter_id, "ok", payload)
            assert failed is not None
            if failed.retry:
                attempts = self.retries_max + 1
                failed = _Failed(
                    failed.status,
                    f"{attempts} attempts; last: {failed.detail}",
                    retry=False,
                    body_bytes=failed.body_bytes,
                )
        except _Failed as exc:  # the request cannot be made as given
            failed = exc
        except Exception as exc:  # a bug or an input nothing above foresaw: still one receipt
            failed = _Failed("error", _describe(exc), retry=False)
        return self._failure(intent, failed)

    def _failure(self, intent: Intent, failed: _Failed) -> Receipt:
        payload = {
            "status": 0,
            "headers": {HTTP_BODY_BYTES_HEADER: str(failed.body_bytes)}
            if failed.body_bytes
            else {},
            "body_ref": None,
            "body_preview": failed.detail[: self.body_preview_chars],
        }
        return Receipt(intent.intent_hash, self.adapter_id, failed.status, payload)

    def _request(self, params: Any, bytes_max: int | None) -> _Request:
        if not isinstance(params, dict):
            raise _Failed("error", "params are not a record", retry=False)
        method, url, headers = params.get("method"), params.get("url"), params.get("headers") or {}
        if not (isinstance(method, str) and isinstance(url, str) and isinstance(headers, dict)):
            raise _Failed("error", "params are not of sys/HttpRequestParams@1", retry=False)
        try:
            url = read_url(url).text
        except UrlRefused as exc:
            raise _Failed(
                "error", f"url refused ({exc.reason}): {exc.detail}", retry=False
            ) from exc
        headers = {
            str(name).lower(): str(value)
            for name, value in headers.items()
            if str(name).strip().lower() != "host"  # httpx sends the normalised authority
        }
        headers.setdefault("user-agent", HTTP_USER_AGENT)
        body_ref = params.get("body_ref")
        body = None
        if body_ref is not None:
            try:
                body = self.blobs.get(cbor.raw_to_hash(body_ref))
            except (WorldError, OSError) as exc:
                detail = f"request body {cbor.raw_to_hash(body_ref)}: {_describe(exc)}"
                raise _Failed("error", detail, retry=False) from exc
        sent = 0 if body is None else len(body)
        if bytes_max is not None and sent > bytes_max:
            detail = f"request body of {sent} bytes exceeds the {bytes_max} bytes reserved"
            raise _Failed("error", detail, retry=False)
        limit = self.response_bytes_max
        if bytes_max is not None:
            limit = min(limit, bytes_max - sent)
        return _Request(method, url, headers, body, limit)

    def _attempt(self, request: _Request) -> dict[str, Any]:
        """One exchange: the receipt payload, or ``_Failed``."""
        started = time.monotonic()
        try:
            outgoing = httpx.Request(
                request.method,
                request.url,
                headers=request.headers,
                content=request.body,
                extensions={"timeout": self._timeout},
            )
            response = self._transport.handle_request(outgoing)
            try:
                body = self._read_body(response, started, request)
            finally:
                response.close()
        except httpx.TimeoutException as exc:
            raise _Failed("timeout", _describe(exc), retry=True) from exc
        except _NOT_RETRIED as exc:
            raise _Failed("error", _describe(exc), retry=False) from exc
        except httpx.TransportError as exc:
            raise _Failed("error", _describe(exc), retry=True) from exc
        except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
            raise _Failed("error", _describe(exc), retry=False) from exc
        return self._payload(response, body, request.body_bytes)

    def _read_body(self, response: httpx.Response, started: float, request: _Request) -> bytes:
        """The response body, read up to the request's limit (``response_bytes_max``, less
        when the intent's reservation is smaller): a body declared larger is not read at
        all; one that turns out larger stops being read at the chunk that crosses the limit,
        and only the bytes up to the limit count as moved."""
        limit = request.response_bytes_max
        sent = request.body_bytes
        declared = response.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            detail = f"response body of {declared} bytes exceeds response_bytes_max={limit}"
            raise _Failed("error", detail, retry=False, body_bytes=sent)
        body = bytearray()
        for chunk in response.iter_raw():
            body += chunk
            if len(body) > limit:
                detail = f"response body exceeds response_bytes_max={limit}"
                raise _Failed("error", detail, retry=False, body_bytes=sent + limit)
            if time.monotonic() - started > self.attempt_deadline_s:
                detail = (
                    f"response not complete within attempt_deadline_s={self.attempt_deadline_s}"
                )
                raise _Failed("timeout", detail, retry=True, body_bytes=sent + len(body))
        return bytes(body)

    def _payload(self, response: httpx.Response, body: bytes, sent: int) -> dict[str, Any]:
        preview = _preview(body, self.body_preview_chars)
        body_ref: bytes | None = None
        # The preview encodes back to the body exactly when the body is valid UTF-8 and whole.
        inline = len(body) <= self.body_inline_bytes_max and preview.encode("utf-8") == body
        if not inline:
            body_ref = cbor.hash_to_raw(self.blobs.put(body))
        return {
            "status": response.status_code,
            "headers": _response_headers(response, sent + len(body)),
            "body_ref": body_ref,
            "body_preview": preview,
        }
