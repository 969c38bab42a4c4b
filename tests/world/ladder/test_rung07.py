"""Rung 07 (``world.ladder.rung07``): a summary from the loopback LLM, the key never journaled."""

from __future__ import annotations

from pathlib import Path

from plans_kit import of_kind, records

from air import cbor
from world.history import verify_world
from world.ladder import drive
from world.ladder.rung07 import KEY, SUMMARY, TOKENS


def test_the_plan_summarizes_through_the_llm_and_the_key_is_nowhere(tmp_path: Path) -> None:
    path = drive("rung07", tmp_path)
    journal = records(path)
    llm = [r.body for r in of_kind(journal, "effect.queued") if r.body["kind"] == "llm.generate"]
    [queued] = llm
    assert cbor.loads(queued["params"])["api_key"] == {
        "$tag": "secret",
        "$value": {"alias": "demo/llm_api_secret", "version": 1},
    }
    http, generated = (cbor.loads(r.body["payload"]) for r in of_kind(journal, "receipt"))
    assert generated["summary_preview"] == SUMMARY
    assert generated["token_usage"] == {"prompt": TOKENS[0], "completion": TOKENS[1]}
    assert generated["provider_id"] == "mock/mock-summarizer"
    assert generated["output_ref"] is not None
    assert http["body_ref"] is not None
    assert not [f for f in path.rglob("*") if f.is_file() and KEY in f.read_bytes()]
    assert verify_world(path).ok
