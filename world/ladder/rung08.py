"""Rung 08, retry-backoff: the reducer decides retries; a plan per attempt, timers between."""

from __future__ import annotations

from pathlib import Path

from world.ladder._kit import Rung, Say, create, expect

REDUCER = "demo/RetrySM@1"
START = {"req_id": "req-123", "payload": "p", "max_attempts": 3, "base_delay_ms": 10,
         "now_ns": 1_000}  # fmt: skip


def _drive(path: Path, say: Say) -> None:
    from world import Engine

    with create(path, "agentos-08-retry-backoff") as world:
        world.send("demo/RetryEvent@1", {"start": START})
        say("start req-123, at most 3 attempts, backoff from 10 ms; every attempt fails")
        with Engine(world, sim=True) as loop:
            receipts = loop.run().receipts
        state = world.state(REDUCER)
    expect("backoff timers", receipts, 2)
    expect("attempts", state.get("attempt"), 3)
    expect("the retry machine", state.get("pc"), "Failed")
    say(f"three attempts, two timers between, then {state['pc']}")


RUNG = Rung(
    example="agentos-08-retry-backoff",
    title="retry-backoff: reducer-driven retries with timers, then Failed",
    drive=_drive,
)
