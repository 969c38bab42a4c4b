"""The ``llm.generate`` adapter (``world.effects._llm``) against a loopback chat-completions
server that records what it got: the request it makes, the messages it reads from the blob
store, the answers it turns into receipts (and the ones it refuses), retries, and that the key
is in nothing that comes back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from blake3 import blake3

from air import cbor
from air.types import Ref
from air.values import normalise
from kernel.cells import MemoryCas
from world._airfiles import load_air_path
from world.effects import HttpAdapter, Intent, Receipt
from world.effects._llm import LLM_PREVIEW_CHARS, LlmAdapter
from world.effects._modes import failed_payload
from world.ladder._kit import FakeHttp, Seen

from worldkit import ROOT

KEY = "sk-test-0123456789"


def completion(text: str, prompt: int = 11, done: int = 5) -> bytes:
    return json.dumps(
        {
            "id": "c1",
            "model": "m-2026",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": done},
        }
    ).encode()


class Provider:
    """The adapter over a fake provider that answers with ``replies`` in turn (the last
    one again and again)."""

    def __init__(self, replies: list[tuple[int, bytes]]) -> None:
        self.replies = replies
        self.fake = FakeHttp(self._reply)
        self.cas = MemoryCas()

    def _reply(self, seen: Seen) -> tuple[int, dict[str, str], bytes]:
        status, body = self.replies[min(len(self.fake.seen), len(self.replies)) - 1]
        return status, {"Content-Type": "application/json"}, body

    def __enter__(self) -> Provider:
        self.fake.__enter__()
        self.http = HttpAdapter(self.cas, retries_max=2, backoff_base_s=0, backoff_max_s=0)
        base = f"http://{self.fake.address}/v1"
        self.llm = LlmAdapter(self.cas, http=self.http, providers={"p": base})
        return self

    def __exit__(self, *exc: object) -> None:
        self.llm.close()
        self.http.close()
        self.fake.__exit__(None, None, None)

    def message(self, data: bytes) -> bytes:
        return cbor.hash_to_raw(self.cas.put(data))

    def ask(self, **given: Any) -> Receipt:
        params = {
            "provider": "p",
            "model": "m",
            "temperature": "0.7",
            "max_tokens": 64,
            "message_refs": [self.message(b"Summarize: the sky is blue.")],
            "tools": [],
            "api_key": {"$tag": "literal", "$value": KEY},
            **given,
        }
        intent = Intent(blake3(json.dumps(repr(params)).encode()).digest(), "llm.generate",
                        params, "plan t/p@1")  # fmt: skip
        receipt = self.llm._answer(intent)
        assert receipt is not None
        return receipt

    @property
    def asked(self) -> list[dict[str, Any]]:
        return [json.loads(s.body) for s in self.fake.seen]


@pytest.fixture
def provider(request: pytest.FixtureRequest) -> Iterator[Provider]:
    replies = getattr(request, "param", [(200, completion("The sky is blue."))])
    with Provider(replies) as found:
        yield found


def _receipt_schema() -> Any:
    return load_air_path(ROOT / "manifests" / "agentos-07-llm-summarizer").schemas


def test_a_completion_is_asked_as_the_params_say_and_answered_with_its_text(
    provider: Provider,
) -> None:
    receipt = provider.ask()
    assert receipt.status == "ok"
    payload = receipt.payload
    assert payload["summary_preview"] == "The sky is blue."
    assert payload["token_usage"] == {"prompt": 11, "completion": 5}
    assert (payload["tokens_prompt"], payload["tokens_completion"]) == (11, 5)
    assert payload["provider_id"] == "p/m-2026"
    output = json.loads(provider.cas.get(cbor.raw_to_hash(payload["output_ref"])))
    assert output == {"role": "assistant", "content": "The sky is blue."}
    [seen] = provider.fake.seen
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["content-type"] == "application/json"
    assert provider.asked == [
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Summarize: the sky is blue."}],
            "max_tokens": 64,
            "temperature": 0.7,
        }
    ]
    normalise(Ref("sys/LlmGenerateReceipt@1"), payload, _receipt_schema())


def test_a_message_blob_may_be_a_message_a_list_of_them_a_json_string_or_text(
    provider: Provider,
) -> None:
    system = {"role": "system", "content": "Be brief."}
    turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    refs = [
        provider.message(json.dumps(system).encode()),
        provider.message(json.dumps(turns).encode()),
        provider.message(json.dumps("a JSON string").encode()),
        provider.message("plain text, ünïcode".encode()),
    ]
    assert provider.ask(message_refs=refs).status == "ok"
    assert provider.asked[0]["messages"] == [
        system,
        *turns,
        {"role": "user", "content": "a JSON string"},
        {"role": "user", "content": "plain text, ünïcode"},
    ]


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"provider": "elsewhere"}, "provider 'elsewhere' has no base_url here"),
        ({"tools": ["search"]}, "tools are not supported"),
        ({"temperature": "warm"}, "temperature 'warm' is not a decimal"),
        ({"api_key": {"$tag": "secret", "$value": {"alias": "a", "version": 1}}},
         "no secrets are available"),
        ({"api_key": {"$tag": "literal", "$value": "two words"}}, "not a valid token"),
        ({"message_refs": [b"\x01" * 32]}, "message blake3:0101"),
    ],
)  # fmt: skip
def test_a_request_that_cannot_be_made_is_an_error_receipt_and_nothing_is_sent(
    provider: Provider, given: dict[str, Any], says: str
) -> None:
    receipt = provider.ask(**given)
    assert receipt.status == "error"
    assert says in receipt.payload["summary_preview"]
    assert receipt.payload["output_ref"] is None
    assert provider.fake.seen == []
    normalise(Ref("sys/LlmGenerateReceipt@1"), receipt.payload, _receipt_schema())


@pytest.mark.parametrize(
    "blob", [b'{"content": "no role"}', b"[]", b"\xff\xfe not utf-8", b'[{"role": "user"}]']
)
def test_a_message_blob_that_is_no_message_is_refused(provider: Provider, blob: bytes) -> None:
    receipt = provider.ask(message_refs=[provider.message(blob)])
    assert receipt.status == "error"
    assert "message blake3:" in receipt.payload["summary_preview"]
    assert provider.fake.seen == []


@pytest.mark.parametrize(
    "provider", [[(503, b"busy"), (429, b"slow down"), (200, completion("ok"))]], indirect=True
)
def test_a_busy_provider_is_asked_again(provider: Provider) -> None:
    receipt = provider.ask()
    assert (receipt.status, receipt.payload["summary_preview"]) == ("ok", "ok")
    assert len(provider.fake.seen) == 3


@pytest.mark.parametrize("provider", [[(429, b"slow down")]], indirect=True)
def test_a_provider_busy_past_the_retries_is_an_error_naming_the_attempts(
    provider: Provider,
) -> None:
    receipt = provider.ask()
    assert receipt.status == "error"
    assert (
        receipt.payload["summary_preview"] == "3 attempts; last: provider answered 429: slow down"
    )
    assert len(provider.fake.seen) == 3


@pytest.mark.parametrize(
    "provider",
    [[(401, json.dumps({"error": f"key {KEY} is not valid"}).encode())]],
    indirect=True,
)
def test_a_refusal_is_not_retried_and_the_key_it_echoes_is_scrubbed(provider: Provider) -> None:
    receipt = provider.ask()
    assert receipt.status == "error"
    preview = receipt.payload["summary_preview"]
    assert preview.startswith("provider answered 401: ")
    assert KEY not in preview
    assert "[redacted secret]" in preview
    assert len(provider.fake.seen) == 1


@pytest.mark.parametrize(
    "provider", [[(200, completion(f"your key is {KEY}, and " + "x" * 2000))]], indirect=True
)
def test_a_key_echoed_in_the_reply_is_in_neither_the_receipt_nor_the_output(
    provider: Provider,
) -> None:
    payload = provider.ask().payload
    assert payload["summary_preview"].startswith("your key is [redacted secret], and ")
    assert len(payload["summary_preview"]) == LLM_PREVIEW_CHARS
    output = provider.cas.get(cbor.raw_to_hash(payload["output_ref"]))
    assert KEY.encode() not in output
    assert b"[redacted secret]" in output


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"choices": []}', b'{"choices": [{"message": {"content": 5}}]}',
     b'{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": -1}}'],
)  # fmt: skip
def test_an_answer_that_is_not_a_chat_completion_is_an_error(body: bytes) -> None:
    with Provider([(200, body)]) as provider:
        receipt = provider.ask()
    assert receipt.status == "error"
    assert "not a chat completion" in receipt.payload["summary_preview"]


def test_the_answer_when_effects_are_not_live_has_the_receipt_schema_s_shape() -> None:
    payload = failed_payload("llm.generate", "stub: not sent")
    found = normalise(Ref("sys/LlmGenerateReceipt@1"), payload, _receipt_schema())
    assert found["summary_preview"] == "stub: not sent"
    assert found["output_ref"] is None


def test_the_bundled_example_loads_with_its_built_ins() -> None:
    air = load_air_path(ROOT / "manifests" / "agentos-07-llm-summarizer")
    assert air.effects["llm.generate"].cap_type == "llm.basic"
    assert "sys/VaultRotateReceipt@1" in air.schemas
