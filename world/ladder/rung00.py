"""Rung 00, counter: a reducer alone, a state machine counting down by events."""

from __future__ import annotations

from pathlib import Path

from world.ladder._kit import Rung, Say, create, expect

REDUCER = "demo/CounterSM@1"
EVENT = "demo/CounterEvent@1"


def _drive(path: Path, say: Say) -> None:
    from world import Engine

    with create(path, "agentos-00-counter") as world:
        world.send(EVENT, {"Start": {"target": 3}})
        say("Start {target: 3}, then Tick three times")
        for _ in range(3):
            world.send(EVENT, "Tick")
        with Engine(world) as loop:
            loop.run()
        state = world.state(REDUCER)
    expect("the counter", state, {"pc": "Done", "remaining": 0})
    say(f"{REDUCER}: {state}")


RUNG = Rung(
    example="agentos-00-counter",
    title="counter: a reducer's state machine, deterministic by replay",
    drive=_drive,
)
