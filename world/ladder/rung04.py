"""Rung 04, aggregator: a plan fans out three HTTPS GETs, their receipts come back out of
order, and the plan joins them into one ``AggregateComplete`` raised back to the reducer."""

from __future__ import annotations

import threading
from pathlib import Path

from world.ladder._kit import FakeHttp, Rung, Say, Seen, create, expect, resolve, self_signed

REDUCER = "demo/Aggregator@1"
TARGETS = {"primary": "alpha", "secondary": "beta", "tertiary": "gamma"}
ANSWER_ORDER = ("/gamma", "/alpha", "/beta")
"""The order the fake answers in, none of them the order the plan emitted."""
WAIT_S = 10.0
"""How long a request waits for its turn: past it (an adapter sending one at a time), it is
answered anyway and the driver fails naming the order it got."""


def start() -> dict[str, object]:
    """The ``Start`` event: one topic, three targets on ``example.com``."""
    targets = {
        field: {"name": name, "url": f"https://example.com/{name}", "method": "GET"}
        for field, name in TARGETS.items()
    }
    return {"Start": {"topic": "weather", **targets}}


class _OutOfOrder:
    """Answers each path only once every path before it in ``ANSWER_ORDER`` is answered."""

    def __init__(self) -> None:
        self.answered: list[str] = []
        self._turn = threading.Condition()

    def __call__(self, seen: Seen) -> tuple[int, dict[str, str], bytes]:
        with self._turn:
            if seen.path in ANSWER_ORDER:
                ahead = ANSWER_ORDER[: ANSWER_ORDER.index(seen.path)]
                self._turn.wait_for(lambda: set(ahead) <= set(self.answered), WAIT_S)
            self.answered.append(seen.path)
            self._turn.notify_all()
        return 200, {"Content-Type": "text/plain"}, f"{seen.path[1:]} says hi".encode()


def _drive(path: Path, say: Say) -> None:
    from world import Engine

    pem = path.with_name("example.com.pem")
    answer = _OutOfOrder()
    with (
        FakeHttp(answer, tls=self_signed(("example.com",), pem)) as fake,
        create(path, "agentos-04-aggregator") as world,
    ):
        resolve(path, {"example.com": fake.address}, ca_file=pem)
        world.send("demo/AggregatorEvent@1", start())
        say("Start: the plan fans out GETs to /alpha, /beta and /gamma on example.com")
        with Engine(world) as loop:
            receipts = loop.run().receipts
        state = world.state(REDUCER)
    expect("the order the server answered", tuple(answer.answered), ANSWER_ORDER)
    say(f"the server answered {', '.join(answer.answered)}: out of the order they were sent")
    expect("http receipts", receipts, 3)
    expect("the aggregator", state.get("pc"), "Done")
    got = [(r["source"], r["status"], r["body_preview"]) for r in state["last_responses"]]
    expect("the joined responses", got, [(n, 200, f"{n} says hi") for n in TARGETS.values()])
    expect("what is pending", (state["pending_request"], state["pending_targets"]), (None, []))
    say(f"joined in the plan's order: {', '.join(n for n, _, _ in got)}; {state['pc']}")


RUNG = Rung(
    example="agentos-04-aggregator",
    title="aggregator: fan-out of three HTTPS calls, receipts out of order, one join",
    drive=_drive,
)
