"""``llm.generate``: one chat completion per intent, from an OpenAI-compatible endpoint.

Params ``sys/LlmGenerateParams@1`` (``air.sys.llm``); receipt ``sys/LlmGenerateReceipt@1``.
Where a provider answers is this machine's business, never the world's: ``local.json``'s
``llm.providers`` gives each provider name a ``base_url`` (``world._localconfig``), and the
request is ``POST {base_url}/chat/completions`` with ``{model, messages, max_tokens,
temperature}`` as JSON. The key is the params' ``api_key``: a literal (discouraged) or a secret
reference, resolved by ``world.effects._secrets.SecretResolver`` as the request is built and
sent as ``Authorization: Bearer``; nothing this adapter returns holds it (everything that comes
back is scrubbed of it, as the HTTP adapter does), so no receipt, blob or journal record does.

The exchange itself is the HTTP adapter's (``world.effects._http``, the same settings: connect
timeout, retries with backoff, ``resolve``, ``ca_file``, response size limit), with the LLM's
own ``read_timeout_s`` and ``attempt_deadline_s`` when ``llm`` gives them. A provider that
answers 429 or 5xx is retried like a failed connection; any other status but 2xx is an
``error`` receipt saying the status and the start of what it said.

Messages: each of ``message_refs`` names a blob in the world's store. A blob that is a JSON
object with ``role`` and ``content`` is that message; a JSON list of such objects is those; a
JSON string, or any other UTF-8 text, is one ``user`` message with that text. Anything else
(not UTF-8, a missing blob, an object that is no message) is an ``error`` receipt and nothing
is sent. No tools yet: a non-empty ``tools`` is an ``error`` receipt.

The receipt: the reply's text is put in the blob store as one message ``{"role":
"assistant", "content": TEXT}`` (``output_ref``), and ``summary_preview`` is its first
``LLM_PREVIEW_CHARS`` characters; ``token_usage`` (and ``tokens_prompt``/``tokens_completion``)
are the provider's ``usage``; the costs are 0 (a chat-completions answer names no price);
``provider_id`` is the provider's name, then ``/`` and the answer's ``model``. A receipt that
got no reply keeps the schema's shape: ``output_ref`` null, no tokens, and ``summary_preview``
saying what failed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from air import cbor
from air.sys.llm import LLM_KIND
from world.effects._adapters import Done, Intent, Receipt, ReceiptStatus
from world.effects._blob import BlobStore
from world.effects._http import (
    IDEMPOTENCY_HEADER,
    HttpAdapter,
    _describe,
    _Failed,
    _Request,
    _Scrub,
)
from world.effects._modes import failed_payload
from world.effects._secrets import SecretResolver, SecretUnavailable
from world.effects._workers import Outbox, WorkerPool

__all__ = [
    "LLM_ATTEMPT_DEADLINE_S",
    "LLM_KINDS",
    "LLM_PREVIEW_CHARS",
    "LLM_READ_TIMEOUT_S",
    "LLM_WORKERS",
    "LlmAdapter",
]

LLM_KINDS: Final = frozenset({LLM_KIND})
LLM_PREVIEW_CHARS: Final = 1024
LLM_WORKERS: Final = 2
LLM_RESPONSE_BYTES_MAX: Final = 8 << 20
LLM_READ_TIMEOUT_S: Final = 120.0
"""A model may think for a while before its first byte: longer than an HTTP server's 30 s."""
LLM_ATTEMPT_DEADLINE_S: Final = 300.0
_RETRIED_STATUS: Final = frozenset({408, 429, 500, 502, 503, 504})


class LlmAdapter:
    adapter_id: str = "llm"
    kinds: frozenset[str] = LLM_KINDS

    def __init__(
        self,
        blobs: BlobStore,
        *,
        http: HttpAdapter,
        providers: Mapping[str, str],
        secrets: SecretResolver | None = None,
        read_timeout_s: float = LLM_READ_TIMEOUT_S,
        attempt_deadline_s: float = LLM_ATTEMPT_DEADLINE_S,
        workers: int = LLM_WORKERS,
    ) -> None:
        """``http``: the world's HTTP adapter, whose exchanges (and settings) this one uses;
        it stays the caller's to close. ``providers``: provider name -> base URL."""
        self.blobs = blobs
        self.http = http
        self.providers = dict(providers)
        self.secrets = secrets
        self.read_timeout_s = read_timeout_s
        self.attempt_deadline_s = attempt_deadline_s
        self._outbox = Outbox()
        self._workers = workers
        self._pool: WorkerPool | None = None  # made at the first intent: most runs send none
        self._pool_lock = threading.Lock()

    def submit(self, intent: Intent, done: Done) -> None:
        def job() -> None:
            receipt = self._answer(intent)
            if receipt is not None:
                self._outbox.deliver(done, receipt)

        with self._pool_lock:
            if self._pool is None:
                self._pool = WorkerPool("llm", self._workers)
            pool = self._pool
        pool.run(job)

    def close(self) -> None:
        self._outbox.close()
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _answer(self, intent: Intent) -> Receipt | None:
        sent: list[bytes] = []  # the key, once read: scrubbed from everything that comes back
        status: ReceiptStatus
        try:
            params = intent.params
            provider = str(params["provider"])
            request = self._request(params, provider, sent)
            request.headers[IDEMPOTENCY_HEADER] = self.http.idempotency_key(intent.intent_hash)
            answer = self.http.retried(lambda: self._attempt(request))
            if answer is None:
                return None
            return Receipt(intent.intent_hash, self.adapter_id, "ok", self._ok(provider, answer))
        except _Failed as exc:
            status, detail = exc.status, exc.detail
        except Exception as exc:  # a bug or an input nothing above foresaw: still one receipt
            status, detail = "error", _describe(exc)
        says = _Scrub(sent).text(detail)[:LLM_PREVIEW_CHARS]
        return Receipt(intent.intent_hash, self.adapter_id, status, failed_payload(LLM_KIND, says))

    def _request(self, params: Any, provider: str, sent: list[bytes]) -> _Request:
        base = self.providers.get(provider)
        if base is None:
            known = ", ".join(sorted(self.providers)) or "none"
            raise _Failed(
                "error",
                f"provider {provider!r} has no base_url here (local.json llm.providers; "
                f"known: {known})",
                retry=False,
            )
        if params.get("tools"):
            raise _Failed("error", "tools are not supported by this adapter", retry=False)
        try:
            temperature = float(Decimal(str(params["temperature"])))
        except (InvalidOperation, ValueError) as exc:
            detail = f"temperature {params['temperature']!r} is not a decimal"
            raise _Failed("error", detail, retry=False) from exc
        body = {
            "model": str(params["model"]),
            "messages": [m for ref in params["message_refs"] for m in self._messages(ref)],
            "max_tokens": int(params["max_tokens"]),
            "temperature": temperature,
        }
        headers = {"content-type": "application/json", "accept": "application/json"}
        key = params.get("api_key")
        if key is not None:
            headers["authorization"] = "Bearer " + self._key(key, sent).decode("ascii")
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        url = f"{base}/chat/completions"
        return _Request(
            "POST",
            url,
            headers,
            data,
            LLM_RESPONSE_BYTES_MAX,
            _Scrub(sent),
            read_timeout_s=self.read_timeout_s,
            attempt_deadline_s=self.attempt_deadline_s,
        )

    def _messages(self, ref: bytes) -> list[dict[str, Any]]:
        name = cbor.raw_to_hash(ref)
        try:
            data = self.blobs.get(name)
        except Exception as exc:
            raise _Failed("error", f"message {name}: {_describe(exc)}", retry=False) from exc
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Failed("error", f"message {name} is not UTF-8 text", retry=False) from exc
        try:
            doc = json.loads(text)
        except ValueError:
            return [{"role": "user", "content": text}]
        if isinstance(doc, str):
            return [{"role": "user", "content": doc}]
        messages = doc if isinstance(doc, list) else [doc]
        if not messages or not all(_is_message(m) for m in messages):
            detail = (
                f"message {name} is JSON but not a message ({{role, content}}) or a list of them"
            )
            raise _Failed("error", detail, retry=False)
        return messages

    def _key(self, key: Any, sent: list[bytes]) -> bytes:
        tag, value = (key.get("$tag"), key.get("$value")) if isinstance(key, dict) else (None, None)
        if tag == "literal" and isinstance(value, str):
            data = value.encode("utf-8")
        elif tag == "secret" and isinstance(value, dict):
            if self.secrets is None:
                raise _Failed("error", "api_key: no secrets are available here", retry=False)
            try:
                data = self.secrets.resolve(str(value["alias"]), int(value["version"]))
            except SecretUnavailable as exc:
                raise _Failed("error", f"api_key: {exc}", retry=False) from exc
        else:
            raise _Failed("error", "api_key is neither a literal nor a secret", retry=False)
        sent.append(data)
        if not data.isascii() or any(b <= 0x20 or b == 0x7F for b in data):
            raise _Failed("error", "api_key: its value is not a valid token", retry=False)
        return data

    def _attempt(self, request: _Request) -> dict[str, Any]:
        """One exchange: the provider's JSON answer (scrubbed), or ``_Failed``."""
        response, body = self.http.exchange(request)
        body = request.scrub.data(body)
        status = response.status_code
        if not 200 <= status < 300:
            said = request.scrub.text(body.decode("utf-8", "replace"))[:200]
            detail = f"provider answered {status}: {said}"
            raise _Failed("error", detail, retry=status in _RETRIED_STATUS)
        try:
            answer = json.loads(body)
            text = answer["choices"][0]["message"]["content"]
            usage = answer.get("usage") or {}
            tokens = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            detail = f"the answer is not a chat completion: {_describe(exc)}"
            raise _Failed("error", detail, retry=False) from exc
        if not isinstance(text, str) or min(tokens) < 0:
            raise _Failed("error", "the answer is not a chat completion", retry=False)
        return {"text": text, "tokens": tokens, "model": str(answer.get("model") or "")}

    def _ok(self, provider: str, answer: dict[str, Any]) -> dict[str, Any]:
        text: str = answer["text"]
        prompt, completion = answer["tokens"]
        message = json.dumps({"role": "assistant", "content": text}, ensure_ascii=False)
        output = self.blobs.put(message.encode("utf-8"))
        model = answer["model"]
        return {
            "output_ref": cbor.hash_to_raw(output),
            "token_usage": {"prompt": prompt, "completion": completion},
            "cost_cents": 0,
            "provider_id": f"{provider}/{model}" if model else provider,
            "summary_preview": text[:LLM_PREVIEW_CHARS],
            "tokens_prompt": prompt,
            "tokens_completion": completion,
            "cost_millis": 0,
        }


def _is_message(node: Any) -> bool:
    return isinstance(node, dict) and isinstance(node.get("role"), str) and "content" in node
