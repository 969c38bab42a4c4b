"""A script: the actions a seed draws (``draw_script``), each with its own random numbers, so
a shrunk script still means something."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from simulation._world import ANSWERS, KEYS


@dataclass(frozen=True)
class Action:
    """One step of a script; ``args`` are the numbers drawn for it (interpreted against the
    state the script is in, so a shrunk script still runs)."""

    kind: str
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return " ".join([self.kind, *map(str, self.args)])


def draw_script(seed: int, steps: int) -> list[Action]:
    rng = random.Random(seed)
    kinds = ["send"] * 6 + ["resend", "run", "run", "answer", "answer", "answer"]
    kinds += ["crash", "power", "disk", "checkpoint", "dead", "decide", "decide", "cancel"]
    kinds += ["upgrade", "upgrade"]
    script = []
    for _ in range(steps):
        kind = rng.choice(kinds)
        if kind == "send":
            events = []
            for _e in range(rng.randint(1, 4)):
                schema = "fetch" if rng.random() < 0.3 else "add"
                with_id = rng.random() < 0.6
                events.append((schema, rng.choice(KEYS), rng.randint(1, 9), with_id))
            script.append(Action("send", tuple(events)))
        elif kind == "answer":
            script.append(Action("answer", (rng.randrange(1 << 16), rng.choice(ANSWERS))))
        elif kind in ("resend", "dead", "cancel"):
            script.append(Action(kind, (rng.randrange(1 << 16),)))
        elif kind == "upgrade":
            stage = rng.choice(("propose", "shadow", "approve", "apply"))
            script.append(Action(kind, (stage, rng.randrange(1 << 16))))
        elif kind == "decide":
            verdict = "approve" if rng.random() < 0.7 else "deny"
            script.append(Action(kind, (rng.randrange(1 << 16), verdict)))
        elif kind == "power":
            script.append(Action("power", (rng.randint(0, 30),)))
        elif kind == "disk":
            script.append(Action("disk", (rng.choice(("EIO", "ENOSPC")), rng.randint(0, 30))))
        else:
            script.append(Action(kind))
    return script
