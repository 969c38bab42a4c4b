"""Rung 01, hello-timer: a reducer asks for a micro-effect (a timer) and gets its receipt."""

from __future__ import annotations

from pathlib import Path

from world.ladder._kit import Rung, Say, create, expect

REDUCER = "demo/TimerSM@1"


def _drive(path: Path, say: Say) -> None:
    from world import Engine

    with create(path, "agentos-01-hello-timer") as world:
        world.send("demo/TimerEvent@1", {"Start": {"deliver_at_ns": 5_000, "key": "hello"}})
        say("Start {deliver_at_ns: 5000, key: hello}: the reducer sets a timer")
        with Engine(world, sim=True) as loop:
            receipts = loop.run().receipts
        state = world.state(REDUCER)
    expect("timer receipts", receipts, 1)
    wanted = {"pc": "Done", "key": "hello", "deadline_ns": 5_000, "fired_key": "hello"}
    expect("the timer machine", state, wanted)
    say(f"the timer fired: {REDUCER} is {state['pc']}")


RUNG = Rung(
    example="agentos-01-hello-timer",
    title="hello-timer: a reducer's micro-effect (timer.set) and its receipt",
    drive=_drive,
)
