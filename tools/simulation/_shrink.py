"""Running a script on a fresh world, shrinking a failing one, and printing what happened:
the same bytes for the same seed (paths under the run's folder are printed as ``<tmp>``)."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from simulation._cluster import ClusterSim, draw_cluster_script, make_cluster
from simulation._script import Action, draw_script
from simulation._sim import Sim
from simulation._world import Failure, make_world


@dataclass
class Outcome:
    failure: str | None
    lines: list[str]
    failed_at: int | None = None  # index of the action after which a check failed

    @property
    def kind(self) -> str | None:
        """The failure without its numbers, hashes and values: what a shrunk script must
        still break (an exception's class; an invariant's words)."""
        if self.failure is None:
            return None
        head, colon, _rest = self.failure.partition(":")
        if colon and head.isidentifier():
            return head
        return re.sub(r"[0-9a-f]{6,}|\d+|\(.*?\)|\[.*?\]|\{.*?\}", "", self.failure)


def run_script(script: Sequence[Action], *, cluster: bool = False) -> Outcome:
    """Run ``script`` on a fresh world (``cluster``: a fresh partitioned one) in a fresh
    folder; what happened."""
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="world-sim-") as tmp:
        sim: Sim | ClusterSim
        if cluster:
            sim = ClusterSim(make_cluster(Path(tmp)))
        else:
            sim = Sim(make_world(Path(tmp)))
        index: int | None = None
        try:
            sim.start()
            for index, action in enumerate(script):
                said = sim.act(action)
                lines.append(f"{index:4d}. {action}  ->  {said}")
                sim.check()
            index = len(script)
            sim.final()
            return Outcome(None, lines)
        except Failure as broken:
            return Outcome(_relative(str(broken), tmp), _raised(lines, script, index), index)
        except Exception as exc:  # the product raised where it should not: a failure too
            said = f"{type(exc).__name__}: {_relative(str(exc), tmp)}"
            return Outcome(said, _raised(lines, script, index), index)
        finally:
            with contextlib.suppress(Exception):
                sim.stop()


def _raised(lines: list[str], script: Sequence[Action], index: int | None) -> list[str]:
    """``lines`` with the action that raised, if one did (its line was never written)."""
    if index is not None and index < len(script) and len(lines) == index:
        lines.append(f"{index:4d}. {script[index]}  ->  raised")
    return lines


def _relative(text: str, tmp: str) -> str:
    return text.replace(os.path.realpath(tmp), "<tmp>").replace(tmp, "<tmp>")


def shrink(
    script: list[Action], runs_max: int, *, cluster: bool = False
) -> tuple[list[Action], Outcome]:
    """The shortest script found that fails the same way (``Outcome.kind``), by dropping
    chunks, then single actions, re-running each candidate from scratch; at most ``runs_max``
    runs. A candidate failing another way is not taken: a dropped fsync shrunk to "the
    checkpoint is ahead of the journal" would hide the acknowledged event it lost."""
    outcome = run_script(script, cluster=cluster)
    assert outcome.failure is not None
    if outcome.failed_at is not None:
        script = script[: outcome.failed_at + 1]
    runs = 1
    chunk = max(1, len(script) // 2)
    while chunk >= 1 and runs < runs_max:
        start = 0
        while start < len(script) and runs < runs_max:
            candidate = script[:start] + script[start + chunk :]
            tried = run_script(candidate, cluster=cluster)
            runs += 1
            if tried.failure is not None and tried.kind == outcome.kind:
                script, outcome = candidate, tried
            else:
                start += chunk
        chunk //= 2
    return script, outcome


def simulate(
    seed: int,
    steps: int,
    *,
    trace: bool,
    shrink_runs: int,
    out: Callable[[str], None],
    cluster: bool = False,
) -> bool:
    """Run seed ``seed``'s script of ``steps`` actions; on a failure print it, shrink it and
    print the shortest; whether the seed held."""
    shortest = check_seed(
        seed, steps, trace=trace, shrink_runs=shrink_runs, out=out, cluster=cluster
    )
    return shortest is None


def check_seed(
    seed: int,
    steps: int,
    *,
    trace: bool,
    shrink_runs: int,
    out: Callable[[str], None],
    cluster: bool = False,
) -> list[Action] | None:
    """``simulate``'s work: None if the seed held, else the shortest failing script (printed)."""
    script = draw_cluster_script(seed, steps) if cluster else draw_script(seed, steps)
    outcome = run_script(script, cluster=cluster)
    if trace:
        for line in outcome.lines:
            out(line)
    if outcome.failure is None:
        out(f"seed {seed}: ok ({len(script)} actions)")
        return None
    out(f"seed {seed}: FAILED after action {outcome.failed_at}: {outcome.failure}")
    shortest, shrunk = shrink(script, shrink_runs, cluster=cluster)
    out(f"seed {seed}: shortest failing trace ({len(shortest)} of {len(script)} actions):")
    for line in shrunk.lines:
        out("  " + line)
    out(f"  -> {shrunk.failure}")
    variant = " --cluster" if cluster else ""
    out(f"reproduce: python tools/simulate.py --seed {seed} --steps {steps}{variant}")
    return shortest
