"""``http.request`` and ``http.request.v2``: one HTTP exchange per intent, with retries,
timeouts and size limits.

Params ``{method, url, headers: map<text,text>, body_ref: hash|None}``; receipt ``{status: int,
headers: map<text,text>, body_ref: hash|None, body_preview: text}`` (SPEC §6).

``http.request.v2`` (``sys/HttpRequestParams@2``, ``air.sys.ondemand``) is the same exchange and
receipt; its header values are ``sys/TextOrSecretRef@1`` and it may carry its body inline
(``body``: ``sys/BytesOrSecretRef@1``; the kernel refused one over
``HTTP_INLINE_BODY_BYTES_MAX`` or given with ``body_ref``). A secret is resolved here, as the
request is built, by ``world.effects._secrets.SecretResolver`` (the adapter's ``secrets``):
never before, never stored. A secret that cannot be had (unbound, unset, a file too open, an
``expected_digest`` mismatch) or that is no valid header value is an ``error`` receipt at once
and nothing is sent. What comes back is scrubbed of every value sent (``_Scrub``): response
header names and values (in any letter case: names arrive lower-cased), the body (before it
is previewed or put in the blob store: a server that echoes the token gets ``REDACTED`` in its
place) and every failure message, the value also as the HTTP library quotes it there
(``illegal header line: bytearray(b"...")`` escapes quotes and backslashes), and a failure
before the request was made is scrubbed of the secrets read so far, so neither the receipt nor
the blob store ever holds one. Not caught: a server that sends the value back transformed
(base64, reversed, split): nothing can recognise every transformation. The byte count (``:body-bytes``) counts the bytes
as they moved.

Byte count. Every receipt of an exchange that moved bytes counts them in its ``headers``
under ``kernel.HTTP_BODY_BYTES_HEADER`` (``:body-bytes``, decimal text): the request body sent
plus the response body read. The kernel settles the grant's ``bytes`` budget with it. A
pseudo-header because the receipt schema is a closed record, and no server can send a name
beginning with ``:``. An intent under a budget comes with ``bytes_max``, what its grant
reserved for it: a request body larger than that is an ``error`` receipt and nothing is
sent, and the response body may be at most what remains (``response_bytes_max`` otherwise),
refused like any over-limit body. A failure counts what is known to have moved: the request
body once a response began, plus the response bytes read up to the limit. An answer over the
limit counts as the whole limit, whether it stopped being read at the chunk that crossed it or
was refused by its ``Content-Length`` unread: it asked for more than was left, so what was
left is spent, and under a budget smaller than one answer the next request is refused
(``cap.budget_exhausted``) rather than sent again and again for free (what the server had
already written into the connection crossed the wire whether or not it was read). Only the
last attempt is counted.

Outcomes:

* Any HTTP response, whatever its status (200, 404, 503), is an ``ok`` receipt carrying that
  status: the exchange happened; what it means is the plan's business.
* A transport failure (connection refused or reset, connect/read timeout, the server closing
  without an answer, ``HTTP_ATTEMPT_DEADLINE_S`` passed) is retried after ``backoff_s`` waits,
  at most ``retries_max`` times; the last failure decides the receipt: ``timeout`` if it was a
  timeout, else ``error``. An error receipt keeps the schema's shape: ``status`` 0, no headers,
  no ``body_ref``, and ``body_preview`` saying what failed.
* A request that cannot be sent as given (a URL the normaliser refuses, a header that is not
  ASCII or one only the client writes, ``air.sys.ondemand.HTTP_HEADERS_REFUSED``, a
  ``body_ref`` not in the blob store) and a response body over ``response_bytes_max`` are
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
import functools
import re
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import httpx
from blake3 import blake3

from air import cbor
from air.errors import WorldError
from air.sys.ondemand import HTTP_KINDS, HTTP_SECRET_KIND, http_header_refused
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
from world.effects._secrets import SecretResolver, SecretUnavailable
from world.effects._workers import Outbox, WorkerPool

__all__ = [
    "HTTP_KIND",
    "HTTP_KINDS",
    "HTTP_SECRET_KIND",
    "HTTP_USER_AGENT",
    "IDEMPOTENCY_CONTEXT",
    "IDEMPOTENCY_HEADER",
    "REDACTED",
    "HttpAdapter",
]

T = TypeVar("T")

HTTP_KIND: Final = "http.request"
REDACTED: Final = "[redacted secret]"
"""What stands in a receipt (and a stored response body) where a secret's value was."""
HTTP_USER_AGENT: Final = "world-kernel"
"""Sent as ``user-agent`` unless the intent's headers name one."""
IDEMPOTENCY_HEADER: Final = "idempotency-key"
"""Sent with every request unless the intent's headers name one (``idempotency_key``)."""
IDEMPOTENCY_CONTEXT: Final = "world-kernel 2026-12 idempotency key"
"""The receipt key's derivation context for the world's idempotency secret (``world.effects._pump``)."""

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


class _Scrub:
    """Replaces every secret value an exchange sent, in what comes back: in a body, the bytes
    as sent; in text (header names and values, previews, failure messages), the value in any
    letter case (header names arrive lower-cased) and as an HTTP library quotes it in a
    message (``repr``: ``illegal header line: bytearray(b"...")`` escapes ``\\``, quotes and
    non-printing bytes)."""

    def __init__(self, values: list[bytes]) -> None:
        self.values = sorted({v for v in values if v}, key=len, reverse=True)
        forms = {form for value in self.values for form in _quoted_forms(value)}
        alternatives = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
        self._pattern = re.compile(alternatives, re.IGNORECASE) if forms else None

    def __bool__(self) -> bool:
        return bool(self.values)

    def data(self, body: bytes) -> bytes:
        for value in self.values:
            body = body.replace(value, REDACTED.encode())
        return body

    def text(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub(REDACTED, text)


def _quoted_forms(value: bytes) -> set[str]:
    """``value`` as text, and as ``repr`` spells it inside a bytes, bytearray or str literal,
    with either quote escaped."""
    text = value.decode("utf-8", "replace")
    escaped = repr(value)[2:-1]
    return {
        form
        for form in (
            text,
            escaped,
            repr(bytearray(value))[len("bytearray(b") + 1 : -2],
            repr(text)[1:-1],
            escaped.replace("'", "\\'").replace('"', '\\"'),
            escaped.replace("\\'", "'").replace('\\"', '"'),
        )
        if form
    }


@dataclass(frozen=True)
class _Request:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None
    response_bytes_max: int
    scrub: _Scrub
    read_timeout_s: float | None = None  # None: the adapter's (another adapter's exchange may
    attempt_deadline_s: float | None = None  # have its own: ``world.effects._llm``)

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


@functools.cache
def _tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """httpx's default TLS context (the CA bundle, ``SSL_CERT_FILE``/``SSL_CERT_DIR`` as httpx
    reads them) trusting ``ca_file``'s authorities too (``local.json``'s ``http.ca_file``),
    made once per process and file: loading the bundle costs ~40 ms, and a context is safe to
    share between connection pools and threads."""
    context = httpx.create_ssl_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=ca_file)
    return context


class HttpAdapter:
    adapter_id: str = "http"
    kinds: frozenset[str] = HTTP_KINDS

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
        secrets: SecretResolver | None = None,
        resolve: Mapping[str, str] | None = None,
        ca_file: str | None = None,
        idempotency_secret: bytes | None = None,
    ) -> None:
        self.blobs = blobs
        self.idempotency_secret = idempotency_secret
        self.resolve = dict(resolve or {})
        self.ca_file = ca_file
        self.secrets = secrets
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
        self._transport = transport
        self._transport_lock = threading.Lock()
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
        with self._transport_lock:
            if self._transport is not None:
                self._transport.close()

    def _connections(self) -> httpx.BaseTransport:
        """The connection pool, made at the first request: a world that sends none (most
        ``world run``s) never loads the CA bundle (~40 ms), and every adapter of a process
        shares one TLS context (``_tls_context``)."""
        with self._transport_lock:
            if self._transport is None:
                self._transport = httpx.HTTPTransport(verify=_tls_context(self.ca_file))
            return self._transport

    def _answer(self, intent: Intent) -> Receipt | None:
        """The receipt for ``intent``, or None when the adapter closed while waiting to retry."""
        resolved: list[bytes] = []  # every secret read so far, to scrub even a failure
        try:
            request = self._request(intent.params, intent.bytes_max, intent.kind, resolved)
            request.headers.setdefault(IDEMPOTENCY_HEADER, self.idempotency_key(intent.intent_hash))
            payload = self.retried(lambda: self._scrubbed(self._attempt(request), request.scrub))
            if payload is None:
                return None
            return Receipt(intent.intent_hash, self.adapter_id, "ok", payload)
        except _Failed as exc:  # the request cannot be made as given, or every attempt failed
            failed = exc
        except Exception as exc:  # a bug or an input nothing above foresaw: still one receipt
            failed = _Failed("error", _describe(exc), retry=False)
        return self._failure(intent, failed, _Scrub(resolved))

    def idempotency_key(self, intent_hash: bytes) -> str:
        """The ``idempotency-key`` of an intent: ``wk1-`` and the blake3 of its hash keyed by
        the world's idempotency secret (derived from its receipt key, so a copy or a fork of the
        world, which re-derives its intents, sends the same keys, and no other world can). The
        same on every attempt and after every restart: a server that honours the header
        (Stripe's convention) does a request once however often it arrives. Without a secret
        (an adapter made outside a world) the hash alone is keyed by nothing."""
        keyed = (
            blake3(intent_hash, key=self.idempotency_secret)
            if self.idempotency_secret
            else blake3(intent_hash)
        )
        return "wk1-" + keyed.hexdigest()

    def retried(self, attempt: Callable[[], T]) -> T | None:
        """``attempt()``, tried again with backoff while it fails with ``_Failed`` worth
        retrying, up to ``retries_max`` times; the last failure raised (saying how many
        attempts there were), or None when the adapter closed while waiting to retry. Every
        adapter that speaks HTTP through this one (``world.effects._llm``) retries so."""
        failed: _Failed | None = None
        for retry in range(self.retries_max + 1):
            if retry:
                wait_s = backoff_s(retry, self.backoff_base_s, self.backoff_max_s)
                if self._pool.closing.wait(wait_s):
                    return None
            try:
                return attempt()
            except _Failed as exc:
                failed = exc
                if not exc.retry:
                    raise
        assert failed is not None
        attempts = self.retries_max + 1
        raise _Failed(
            failed.status,
            f"{attempts} attempts; last: {failed.detail}",
            retry=False,
            body_bytes=failed.body_bytes,
        )

    @staticmethod
    def _scrubbed(payload: dict[str, Any], scrub: _Scrub) -> dict[str, Any]:
        """``payload`` with no secret value in its header names, values or preview."""
        if not scrub:
            return payload
        headers: dict[str, str] = {}
        for name, value in payload["headers"].items():
            if name == HTTP_BODY_BYTES_HEADER:
                headers[name] = value
                continue
            name, value = scrub.text(name), scrub.text(value)
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        preview = scrub.text(payload["body_preview"])
        return {**payload, "headers": dict(sorted(headers.items())), "body_preview": preview}

    def _failure(self, intent: Intent, failed: _Failed, scrub: _Scrub) -> Receipt:
        payload = {
            "status": 0,
            "headers": {HTTP_BODY_BYTES_HEADER: str(failed.body_bytes)}
            if failed.body_bytes
            else {},
            "body_ref": None,
            "body_preview": scrub.text(failed.detail)[: self.body_preview_chars],
        }
        return Receipt(intent.intent_hash, self.adapter_id, failed.status, payload)

    def _request(
        self, params: Any, bytes_max: int | None, kind: str, sent_secrets: list[bytes]
    ) -> _Request:
        """The request to make; ``sent_secrets`` gets each secret's value as it is read."""
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
        refused = sorted(str(name) for name in headers if http_header_refused(name))
        if refused:
            detail = f"header {refused[0]!r} is the HTTP client's to write, not a plan's"
            raise _Failed("error", detail, retry=False)
        inline: bytes | None = None
        if kind == HTTP_SECRET_KIND:
            headers = {
                name: self._header_value(name, value, sent_secrets)
                for name, value in headers.items()
                if str(name).strip().lower() != "host"
            }
            if params.get("body") is not None:
                inline = self._value_of(params["body"], "body", sent_secrets)
        headers = {
            str(name).lower(): str(value)
            for name, value in headers.items()
            if str(name).strip().lower() != "host"  # httpx sends the normalised authority
        }
        headers.setdefault("user-agent", HTTP_USER_AGENT)
        body_ref = params.get("body_ref")
        body = inline
        if body_ref is not None and inline is not None:
            raise _Failed("error", "params give both body and body_ref", retry=False)
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
        return _Request(method, url, headers, body, limit, _Scrub(sent_secrets))

    def _value_of(self, value: Any, where: str, sent: list[bytes]) -> bytes:
        """A ``TextOrSecretRef``/``BytesOrSecretRef`` as bytes: a literal's (text as UTF-8),
        or the secret's value, resolved now (and remembered in ``sent``, to scrub)."""
        tag = value.get("$tag") if isinstance(value, dict) else None
        inner = value.get("$value") if isinstance(value, dict) else None
        if tag == "literal" and isinstance(inner, str | bytes):
            return inner.encode("utf-8") if isinstance(inner, str) else inner
        if tag != "secret" or not isinstance(inner, dict):
            raise _Failed("error", f"{where} is neither a literal nor a secret", retry=False)
        alias, version = inner.get("alias"), inner.get("version")
        if self.secrets is None:
            raise _Failed(
                "error", f"{where}: no secrets are available to this adapter", retry=False
            )
        try:
            data = self.secrets.resolve(str(alias), int(version))  # type: ignore[arg-type]
        except SecretUnavailable as exc:
            raise _Failed("error", f"{where}: {exc}", retry=False) from None
        sent.append(data)
        return data

    def _header_value(self, name: str, value: Any, sent: list[bytes]) -> str:
        data = self._value_of(value, f"header {name!r}", sent)
        if any((b < 0x20 and b != 0x09) or b == 0x7F for b in data) or not data.isascii():
            what = "secret" if data in sent else "value"
            raise _Failed(
                "error",
                f"header {name!r}: its {what} is not a valid header value (visible ASCII only)",
                retry=False,
            )
        return data.decode("ascii")

    def _attempt(self, request: _Request) -> dict[str, Any]:
        """One exchange: the receipt payload, or ``_Failed``."""
        response, body = self.exchange(request)
        return self._payload(response, body, request.body_bytes, request.scrub)

    def exchange(self, request: _Request) -> tuple[httpx.Response, bytes]:
        """One exchange: the response (closed) and its body, or ``_Failed`` (``retry`` when
        trying again could help: a timeout, a connection that failed)."""
        started = time.monotonic()
        try:
            outgoing = self._outgoing(request)
            response = self._connections().handle_request(outgoing)
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
        return response, body

    def _outgoing(self, request: _Request) -> httpx.Request:
        """The message to send. A host in ``resolve`` (``local.json``) is reached at its mapped
        address; the ``Host`` header and TLS's server name (so the certificate checked) keep
        the URL's name, as ``curl --resolve`` does."""
        url = httpx.URL(request.url)
        timeout = self._timeout
        if request.read_timeout_s is not None:
            timeout = {**timeout, "read": request.read_timeout_s, "write": request.read_timeout_s}
        extensions: dict[str, Any] = {"timeout": timeout}
        headers = dict(request.headers)
        address = self.resolve.get(url.host)
        if address is not None:
            host, _, port = address.rpartition(":")
            headers["Host"] = url.netloc.decode("ascii")
            extensions["sni_hostname"] = url.host
            url = url.copy_with(host=host.strip("[]"), port=int(port))
        return httpx.Request(
            request.method, url, headers=headers, content=request.body, extensions=extensions
        )

    def _read_body(self, response: httpx.Response, started: float, request: _Request) -> bytes:
        """The response body, read up to the request's limit (``response_bytes_max``, less
        when the intent's reservation is smaller): a body declared larger is not read at
        all; one that turns out larger stops being read at the chunk that crosses the limit.
        Either way the limit counts as moved (the module docstring, "Byte count")."""
        limit = request.response_bytes_max
        sent = request.body_bytes
        declared = response.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            detail = f"response body of {declared} bytes exceeds response_bytes_max={limit}"
            raise _Failed("error", detail, retry=False, body_bytes=sent + limit)
        body = bytearray()
        for chunk in response.iter_raw():
            body += chunk
            if len(body) > limit:
                detail = f"response body exceeds response_bytes_max={limit}"
                raise _Failed("error", detail, retry=False, body_bytes=sent + limit)
            deadline_s = request.attempt_deadline_s or self.attempt_deadline_s
            if time.monotonic() - started > deadline_s:
                detail = f"response not complete within attempt_deadline_s={deadline_s}"
                raise _Failed("timeout", detail, retry=True, body_bytes=sent + len(body))
        return bytes(body)

    def _payload(
        self, response: httpx.Response, body: bytes, sent: int, scrub: _Scrub
    ) -> dict[str, Any]:
        moved = sent + len(body)
        if scrub:
            body = scrub.data(body)  # before it is previewed or stored
        preview = _preview(body, self.body_preview_chars)
        body_ref: bytes | None = None
        # The preview encodes back to the body exactly when the body is valid UTF-8 and whole.
        inline = len(body) <= self.body_inline_bytes_max and preview.encode("utf-8") == body
        if not inline:
            body_ref = cbor.hash_to_raw(self.blobs.put(body))
        return {
            "status": response.status_code,
            "headers": _response_headers(response, moved),
            "body_ref": body_ref,
            "body_preview": preview,
        }
