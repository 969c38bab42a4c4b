"""Journal bytes do not depend on the process: the same commands give the same journal in
processes with different string hashing (``PYTHONHASHSEED``) and with the native step path off.

A set or dict of strings iterates in an order that changes with ``PYTHONHASHSEED``; one such
loop on the path to a journal record makes the journal differ between two processes although
each process replays its own journal faithfully. Nothing inside one process can see that, so
each variant below is its own child process that runs every scenario of
``tests/world/journal/test_journal_golden.py`` (and ``plan_fan_out``, below) and prints the journal digests;
the test compares the children's answers. The golden test pins the bytes in the test's own
process; this one pins that no other process would write others.

The same holds for what a user reads: ``every_output`` runs an upgrade (propose, shadow,
list, apply) on a world of two reducers whose shadow report shows cells of both, a partitioned
world's ``world cluster`` commands, and the inspector's pages of the upgraded world, and
returns every command's output and every page's HTML (the child's folder written as ``TMP``,
and the address of the proposal's document, which names its files, as ``AIR``);
children under three hash seeds must print the same bytes.

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

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT, add

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


TALLY = "t/Tally@1"
"""A second reducer of the counter's code, fed every counter event beside it."""


def two_reducers(folder: Path, wasm: bytes) -> Path:
    """The counter AIR with a second reducer (``TALLY``) of the same code on the same events,
    both of binary ``wasm``."""
    folder.mkdir()
    module, manifest = json.loads((COUNTER_AIR / "counter.air.json").read_text())
    (folder / "schemas.air.json").write_text((COUNTER_AIR / "schemas.air.json").read_text())
    (folder / "counter.wasm").write_bytes(wasm)
    module["wasm"] = "counter.wasm"
    route = manifest["routing"]["events"][0]
    manifest["routing"]["events"].append({**route, "reducer": TALLY})
    (folder / "two.air.json").write_text(json.dumps([module, {**module, "name": TALLY}, manifest]))
    return folder


def every_output(tmp: Path, fixed: Path) -> dict[str, str]:
    """What the upgrade, cluster and inspector scenarios show (see the module docstring), by
    command or page; ``fixed`` is the counter's fixed binary (``fixed_wasm``)."""
    from starlette.testclient import TestClient
    from test_cluster import FAN, fan_air, keys_owned_by
    from typer.testing import CliRunner

    from cli.main import app
    from cli.ui._app import COOKIE, make_app

    runner = CliRunner()
    shown: dict[str, str] = {}

    def cli(*args: object) -> str:
        result = runner.invoke(app, [str(a) for a in args])
        assert result.exit_code == 0, (args, result.output)
        shown[" ".join(str(a) for a in args)] = result.output
        return result.output

    counter = (COUNTER_AIR / "../../reducers/counter/counter.wasm").resolve().read_bytes()
    world = tmp / "w"
    keys = [f"key-{n}" for n in range(12)]
    with World.create(world, two_reducers(tmp / "v1", counter)) as opened:
        opened.send_many([(EVENT, add(k, n % 3)) for n, k in enumerate(keys)])
        opened.send_many([(EVENT, add(k, 0)) for k in keys[::2]])
        opened.send_many([(EVENT, add(k, 1)) for k in keys[:3]])  # both fields change
        opened.run_until_idle()
    v2 = two_reducers(tmp / "v2", fixed.read_bytes())
    made = json.loads(cli("upgrade", "propose", world, "--air", v2, "--json"))
    cli("upgrade", "shadow", world, made["id"])
    report = json.loads(cli("upgrade", "shadow", world, made["id"], "--json"))
    assert {line["reducer"] for line in report["cells"]["shown"]} == {COUNTER, TALLY}
    cli("upgrade", "ls", world, "--json")
    client = TestClient(make_app(world, "t"), base_url="http://127.0.0.1")
    client.cookies.set(COOKIE, "t")
    pages = [("/", {}), ("/upgrades", {"id": str(made["id"])}), ("/journal", {"from": "0"})]
    pages += [("/cells", {"reducer": r}) for r in (COUNTER, TALLY)]
    cell = {"reducer": TALLY, "key": json.dumps(keys[0])}
    newest = client.get("/api/cell", params=cell).json()["steps"][0]["seq"]
    pages += [("/cell", cell), ("/cell", {**cell, "at": str(newest)})]  # with its diff
    cli("upgrade", "apply", world, made["id"], "--json")
    for reducer in (COUNTER, TALLY):
        cli("cells", "upgrade", world, reducer, "--all")
    pages += [("/api/upgrades", {"id": str(made["id"])}), ("/runs", {}), ("/effects", {})]
    for address, params in pages:
        answer = client.get(address, params=params)
        assert answer.status_code == 200, (address, answer.text)
        shown[f"{address} {params}"] = answer.text
    cli("cells", "ls", world, TALLY, "--json")
    cli("info", world)

    owned = keys_owned_by(4)
    cluster = tmp / "c"
    cli("cluster", "init", cluster, "--air", fan_air(tmp / "fan"), "--partitions", 4)
    for n in range(8):
        cli("cluster", "send", cluster, EVENT, json.dumps(add(f"k{n}", n)))
    fan = {"a": owned[1], "b": owned[2], "c": owned[3]}
    cli("cluster", "send", cluster, FAN, json.dumps(fan))
    cli("cluster", "run", cluster)
    for form in ((), ("--json",)):
        cli("cluster", "info", cluster, *form)
        cli("cluster", "cells", "ls", cluster, COUNTER, *form)
    cli("cluster", "replay", cluster, "--json")

    def same(text: str) -> str:  # the proposal document names its files: its address too
        return text.replace(str(tmp), "TMP").replace(made["air"].removeprefix("blake3:"), "AIR")

    return {same(name): same(text) for name, text in shown.items()}


_CHILD = """
import json, os, sys
from pathlib import Path
sys.path[:0] = sys.argv[1].split(os.pathsep)
from test_determinism import every_digest, every_output
if len(sys.argv) > 3:
    print(json.dumps(every_output(Path(sys.argv[2]), Path(sys.argv[3]))))
else:
    print(json.dumps(every_digest(Path(sys.argv[2]))))
"""


VARIANTS = {
    "seed 1": {"PYTHONHASHSEED": "1", "WORLD_NATIVE": "1"},
    "seed 2": {"PYTHONHASHSEED": "2", "WORLD_NATIVE": "1"},
    "seed 2, pure Python": {"PYTHONHASHSEED": "2", "WORLD_NATIVE": "0"},
}
"""The first two differ in the hash seed only, the last two in the step path only."""


SEEDS = {f"seed {n}": {"PYTHONHASHSEED": str(n)} for n in (1, 2, 3)}
"""The outputs' variants: the hash seed only."""


def _in_children(tmp: Path, variants: dict[str, dict[str, str]], *args: str) -> dict[str, Any]:
    """What each variant's child printed (the digests, or with ``args`` the outputs), from
    children started together (they wait on fsync, mostly)."""
    children = {}
    for index, (variant, env) in enumerate(variants.items()):
        folder = tmp / str(index)
        folder.mkdir()
        children[variant] = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _CHILD,
                os.pathsep.join(p for p in sys.path if p.startswith(str(TESTS))),
                str(folder),
                *args,
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
    answers = _in_children(tmp_path, VARIANTS)
    first = answers["seed 1"]
    assert set(first) == {*SCENARIOS, "plan_fan_out"}
    for variant, digests in answers.items():
        differing = sorted(name for name in first if digests.get(name) != first[name])
        assert differing == [], f"{variant} differs from seed 1"


def test_what_upgrades_shadows_the_cluster_and_the_inspector_show_is_the_same_under_other_hash_seeds(
    tmp_path: Path, fixed_wasm: bytes
) -> None:
    fixed = tmp_path / "fixed.wasm"
    fixed.write_bytes(fixed_wasm)
    answers = _in_children(tmp_path, SEEDS, str(fixed))
    first = answers["seed 1"]
    assert len(first) > 20
    for variant, shown in answers.items():
        differing = sorted(name for name in first if shown.get(name) != first[name])
        assert differing == [], f"{variant} differs from seed 1"
        assert set(shown) == set(first)
