"""Journal bytes do not depend on the process: the same commands give the same journal in
processes with different string hashing (``PYTHONHASHSEED``) and with the native step path off.

A set or dict of strings iterates in an order that changes with ``PYTHONHASHSEED``; one such
loop on the path to a journal record makes the journal differ between two processes although
each process replays its own journal faithfully. Nothing inside one process can see that, so
each variant below is its own child process that runs every scenario of
``tests/world/journal/test_journal_golden.py`` (and ``plan_fan_out``, below) and prints the journal digests;
the test compares the children's answers. The golden test pins the bytes in the test's own
process; this one pins that no other process would write others.

Cost: one child per variant, each a few seconds (the scenarios' fsyncs, mostly), started
together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from plans_kit import SINK, end, plan, plan_world
from test_journal_golden import SCENARIOS, journal_digest

from world import World

from worldkit import ROOT

TESTS = Path(__file__).resolve().parents[1]

FAN_LEGS = ("a", "b", "c", "d", "e", "f", "g", "h")
"""Steps of one plan that are all ready at once: the engine runs them by step id."""


def plan_fan_out(tmp: Path) -> dict[str, Path]:
    """A plan whose first tick finds every leg ready (no edge into any of them) and whose end
    waits for all of them: the order of its ``plan.step`` records is the tie-break's order.
    None of the bundled worlds has two plan steps ready at once."""
    go, leg = "t/Go@1", "t/Leg@1"
    legs = [
        {
            "id": x,
            "op": "raise_event",
            "reducer": SINK,
            "event": {"record": {"$schema": leg, "leg": {"lit": x}, "n": {"ref": "@plan.input"}}},
        }
        for x in FAN_LEGS
    ]
    edges = [{"from": x, "to": "end"} for x in FAN_LEGS]
    air = plan_world(
        tmp / "air",
        schemas={go: "int", leg: {"record": {"leg": "text", "n": "int"}}},
        plans=[plan("t/fan@1", go, [*legs, end()], edges)],
        triggers=[{"event": go, "plan": "t/fan@1"}],
        sink_events=[leg],
    )
    w = tmp / "fan"
    with World.create(w, air) as world:
        for n in range(2):
            world.send(go, n)
        world.run_until_idle()
    return {"fan": w}


def every_digest(tmp: Path) -> dict[str, dict[str, str]]:
    """Run every scenario in its own folder under ``tmp``: its journals' digests by name."""
    scenarios = {**SCENARIOS, "plan_fan_out": plan_fan_out}
    digests = {}
    for name, scenario in sorted(scenarios.items()):
        folder = tmp / name
        folder.mkdir()
        worlds = scenario(folder)
        digests[name] = {label: journal_digest(path) for label, path in worlds.items()}
    return digests


_CHILD = """
import json, os, sys
from pathlib import Path
sys.path[:0] = sys.argv[1].split(os.pathsep)
from test_determinism import every_digest
print(json.dumps(every_digest(Path(sys.argv[2]))))
"""


VARIANTS = {
    "seed 1": {"PYTHONHASHSEED": "1", "WORLD_NATIVE": "1"},
    "seed 2": {"PYTHONHASHSEED": "2", "WORLD_NATIVE": "1"},
    "seed 2, pure Python": {"PYTHONHASHSEED": "2", "WORLD_NATIVE": "0"},
}
"""The first two differ in the hash seed only, the last two in the step path only."""


def _digests_in_children(tmp: Path) -> dict[str, Any]:
    """Every variant's digests, from children started together (they wait on fsync, mostly)."""
    children = {}
    for index, (variant, env) in enumerate(VARIANTS.items()):
        folder = tmp / str(index)
        folder.mkdir()
        children[variant] = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _CHILD,
                os.pathsep.join(p for p in sys.path if p.startswith(str(TESTS))),
                str(folder),
            ],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    outputs = {variant: child.communicate() for variant, child in children.items()}
    for variant, child in children.items():
        assert child.returncode == 0, f"{variant}: {outputs[variant][1]}"
    return {variant: json.loads(out.splitlines()[-1]) for variant, (out, _err) in outputs.items()}


def test_journals_are_the_same_bytes_under_other_hash_seeds_and_without_the_native_path(
    tmp_path: Path,
) -> None:
    answers = _digests_in_children(tmp_path)
    first = answers["seed 1"]
    assert set(first) == {*SCENARIOS, "plan_fan_out"}
    for variant, digests in answers.items():
        differing = sorted(name for name in first if digests.get(name) != first[name])
        assert differing == [], f"{variant} differs from seed 1"
