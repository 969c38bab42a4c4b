"""Rung 07, llm-summarizer: a plan fetches a document over HTTPS, hands it to
``llm.generate`` (an OpenAI-compatible chat-completions endpoint, its key a secret reference
resolved as the request goes out), and raises the summary and token counts back to the
reducer. The key reaches the provider and nothing the world writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from world.ladder._kit import FakeHttp, Rung, Say, Seen, create, expect, resolve, self_signed

REDUCER = "demo/LlmSummarizer@1"
URL = "https://example.com/story.txt"
KEY = b"sk-ladder-07-not-a-real-key"
DOCUMENT = (
    "AOS keeps plans and reducers separate. Summaries should be deterministic so reviewers "
    "can trust the replay path. "
) * 12  # over 1 KiB: the HTTP receipt names it by body_ref, which the plan hands the model
SUMMARY = "Plans and reducers stay apart, so a replay can be trusted."
TOKENS = (187, 14)


def _answer(seen: Seen) -> tuple[int, dict[str, str], bytes]:
    json_type = {"Content-Type": "application/json"}
    if (seen.method, seen.path) == ("GET", "/story.txt"):
        return 200, {"Content-Type": "text/plain; charset=utf-8"}, DOCUMENT.encode()
    if (seen.method, seen.path) != ("POST", "/v1/chat/completions"):
        return 404, {}, b""
    if seen.headers.get("authorization") != "Bearer " + KEY.decode():
        return 401, json_type, b'{"error": {"message": "bad key"}}'
    asked = json.loads(seen.body)
    if asked["messages"] != [{"role": "user", "content": DOCUMENT}]:
        return 400, json_type, b'{"error": {"message": "not the document"}}'
    reply = {
        "id": "chatcmpl-ladder-07",
        "object": "chat.completion",
        "model": asked["model"],
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": SUMMARY},
             "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": TOKENS[0], "completion_tokens": TOKENS[1]},
    }  # fmt: skip
    return 200, json_type, json.dumps(reply).encode()


def _settings(path: Path, key_file: Path) -> None:
    """Where the provider ``mock`` answers and where the secret's value is, in ``local.json``."""
    file = path / "local.json"
    settings = json.loads(file.read_text())
    settings["llm"] = {"providers": {"mock": {"base_url": "https://llm.example/v1"}}}
    settings["secrets"] = {"env:LLM_API_KEY": {"file": str(key_file.absolute())}}
    file.write_text(json.dumps(settings, indent=2) + "\n")


def _drive(path: Path, say: Say) -> None:
    from world import Engine

    pem = path.with_name("example.com.pem")
    key_file = path.with_name("llm-api-key")
    key_file.write_bytes(KEY + b"\n")
    os.chmod(key_file, 0o600)
    tls = self_signed(("example.com", "llm.example"), pem)
    with (
        FakeHttp(_answer, tls=tls) as fake,
        create(path, "agentos-07-llm-summarizer") as world,
    ):
        resolve(path, {"example.com": fake.address, "llm.example": fake.address}, ca_file=pem)
        _settings(path, key_file)
        world.send("demo/LlmSummarizerEvent@1", {"Start": {"url": URL}})
        say(f"Start: demo/summarize_plan@1 GETs {URL}, then asks the model mock-summarizer")
        with Engine(world) as loop:
            receipts = loop.run().receipts
        state = world.state(REDUCER)
    calls = [(s.method, s.path) for s in fake.seen]
    expect("calls made", calls, [("GET", "/story.txt"), ("POST", "/v1/chat/completions")])
    expect("receipts", receipts, 2)
    expect("the summarizer", state.get("pc"), "Done")
    expect("the summary", state.get("last_summary"), SUMMARY)
    got = (state.get("last_tokens_prompt"), state.get("last_tokens_completion"))
    expect("the tokens", got, TOKENS)
    say(f"SummaryReady: {state['last_summary']!r}, {got[0]} + {got[1]} tokens")
    holding = sorted(
        str(f.relative_to(path)) for f in path.rglob("*") if f.is_file() and KEY in f.read_bytes()
    )
    expect("files of the world holding the key", holding, [])
    say("the key went to the provider as a bearer token; no file of the world holds it")


RUNG = Rung(
    example="agentos-07-llm-summarizer",
    title="llm-summarizer: fetch, llm.generate under caps and policy, a secret key",
    drive=_drive,
)
