"""The bundled ``agentos-*`` examples (issue 36, item 3): AgentOS's ladder rungs with their AIR
copied unchanged and our C reducers bound through the example's ``modules.json``
(``world.sdk.example_modules``). Each runs to the end its README states and replays exactly:
the rung drivers in ``world.ladder`` and their tests in ``tests/world/ladder``; here are what
every example keeps (AgentOS's AIR byte for byte, bound modules, the licence) and edge cases.

The byte-identity check reads AgentOS's ladder from ``../shared/agentos/examples`` beside the
repository (CI has it) and skips when it is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from world import Engine, World
from world.history import verify_world
from world.sdk import example_modules, example_names, example_path

from worldkit import ROOT

LADDER = ROOT.parent / "shared" / "agentos" / "examples"

EXAMPLES = {
    "agentos-00-counter": "00-counter",
    "agentos-01-hello-timer": "01-hello-timer",
    "agentos-02-blob-echo": "02-blob-echo",
    "agentos-03-fetch-notify": "03-fetch-notify",
    "agentos-04-aggregator": "04-aggregator",
    "agentos-05-chain-comp": "05-chain-comp",
    "agentos-06-safe-upgrade": "06-safe-upgrade",
    "agentos-07-llm-summarizer": "07-llm-summarizer",
    "agentos-08-retry-backoff": "08-retry-backoff",
    "agentos-09-workspaces": "09-workspaces",
}
"""Our bundled example -> its rung in AgentOS's ladder."""

AIR_DIRS = {"agentos-06-safe-upgrade": {"": "air.v1", "v2": "air.v2"}}
"""Where a rung keeps its AIR if not in ``air/``: our folder (relative) -> theirs."""

CHANGED = {
    ("agentos-07-llm-summarizer", "summarize_plan.air.json"): (
        b'"alias": { "text": "llm/api" }',
        b'"alias": { "text": "demo/llm_api_secret" }',
    ),
}
"""The one line a bundled rung changes, (theirs, ours): 07's plan names a secret its manifest
does not declare (the example's README says why)."""


def test_every_agentos_example_is_bundled_and_listed() -> None:
    assert [n for n in example_names() if n.startswith("agentos-")] == sorted(EXAMPLES)
    code = CliRunner().invoke(app, ["examples", "--json"])
    listed = {e["name"]: e for e in json.loads(code.output)["examples"]}
    for name in EXAMPLES:
        wasm = [m["wasm"] for m in listed[name]["modules"]]
        assert wasm, name
        assert all(str(w).endswith(".wasm") for w in wasm), name


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_air_is_agentos_own_byte_for_byte(name: str) -> None:
    if not LADDER.is_dir():
        pytest.skip(f"AgentOS's example ladder is not at {LADDER}")
    for folder, air in AIR_DIRS.get(name, {"": "air"}).items():
        ours = {p.name: p.read_bytes() for p in (example_path(name) / folder).glob("*.air.json")}
        theirs = {
            p.name: p.read_bytes() for p in (LADDER / EXAMPLES[name] / air).glob("*.air.json")
        }
        for file, (old, new) in [(f, c) for (n, f), c in CHANGED.items() if n == name]:
            assert theirs[file].count(old) == 1, (name, file)
            theirs[file] = theirs[file].replace(old, new)
        assert ours, (name, folder)
        assert ours == theirs, (name, folder)
    for notice in ("LICENSE", "NOTICE"):
        got = (example_path(name) / notice).read_bytes()
        assert got == (LADDER.parent / notice).read_bytes()


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_module_is_bound_to_a_committed_wasm(name: str) -> None:
    bound = example_modules(name)
    assert bound
    for wasm in bound.values():
        assert wasm.is_file()
        assert wasm.is_relative_to(ROOT / "reducers")


def test_00_counter_counts_to_done_through_the_cli(tmp_path: Path) -> None:
    cli = CliRunner()
    w = str(tmp_path / "w")

    def ok(*args: str) -> str:
        result = cli.invoke(app, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    ok("init", w, "--example", "agentos-00-counter")
    ok("send", w, "demo/CounterEvent@1", '{"Start": {"target": 3}}')
    ok("run", w, "--until-idle")
    assert json.loads(ok("state", w, "demo/CounterSM@1")) == {"pc": "Counting", "remaining": 3}
    for _ in range(3):
        ok("send", w, "demo/CounterEvent@1", '{"Tick": null}')
    ok("run", w, "--until-idle")
    assert json.loads(ok("state", w, "demo/CounterSM@1")) == {"pc": "Done", "remaining": 0}
    assert "identical outputs and state" in ok("replay", w, "--verify")


def test_00_counter_start_zero_is_done_and_a_tick_when_done_changes_nothing(
    tmp_path: Path,
) -> None:
    name = "agentos-00-counter"
    with World.create(tmp_path / "w", example_path(name), modules=example_modules(name)) as w:
        w.send("demo/CounterEvent@1", {"Start": {"target": 0}})
        w.send("demo/CounterEvent@1", "Tick")
        with Engine(w) as loop:
            assert loop.run().steps == 2
        assert w.state("demo/CounterSM@1") == {"pc": "Done", "remaining": 0}
    assert verify_world(tmp_path / "w").ok


def test_01_hello_timer_deadline_zero_is_done_without_a_timer(tmp_path: Path) -> None:
    name = "agentos-01-hello-timer"
    path = tmp_path / "w"
    with World.create(path, example_path(name), modules=example_modules(name)) as world:
        world.send("demo/TimerEvent@1", {"Start": {"deliver_at_ns": 0, "key": None}})
        with Engine(world, sim=True) as loop:
            assert loop.run().receipts == 0
        assert world.state("demo/TimerSM@1") == {
            "pc": "Done",
            "key": None,
            "deadline_ns": 0,
            "fired_key": None,
        }
    assert verify_world(path).ok


def test_a_copy_carries_the_binding_and_the_licence(tmp_path: Path) -> None:
    cli = CliRunner()
    dest = tmp_path / "c"
    copied = cli.invoke(app, ["examples", "copy", "agentos-00-counter", str(dest)])
    assert copied.exit_code == 0, copied.output
    bound = json.loads((dest / "modules.json").read_text())
    assert bound == {"demo/CounterSM@1": "reducers/agentos_counter/agentos_counter.wasm"}
    assert (dest / bound["demo/CounterSM@1"]).is_file()
    assert (dest / "LICENSE").is_file()
    assert (dest / "NOTICE").is_file()
    wasm = dest / bound["demo/CounterSM@1"]
    made = cli.invoke(
        app,
        ["init", str(tmp_path / "w"), "--air", str(dest), "--module", f"demo/CounterSM@1={wasm}"],
    )
    assert made.exit_code == 0, made.output


def test_a_module_given_with_the_example_is_bound_instead_of_the_example_s(
    tmp_path: Path,
) -> None:
    from blake3 import blake3

    other = ROOT / "reducers" / "static_counter" / "static_counter.wasm"
    made = CliRunner().invoke(
        app,
        [
            "init",
            str(tmp_path / "w"),
            "--example",
            "agentos-00-counter",
            "--module",
            f"demo/CounterSM@1={other}",
            "--json",
        ],
    )
    assert made.exit_code == 0, made.output
    with World.open(tmp_path / "w") as world:
        bound = world.air.wasm_hashes["demo/CounterSM@1"]
    assert bound == "blake3:" + blake3(other.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("{not json", "not JSON", id="not-json"),
        pytest.param('{"demo/X@1": 3}', 'expected {"<module>"', id="not-a-path"),
    ],
)
def test_a_bad_modules_json_is_refused_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, reason: str
) -> None:
    from air.errors import InputFileError
    from world import sdk

    folder = tmp_path / "manifests" / "x"
    folder.mkdir(parents=True)
    (folder / "a.air.json").write_text("[]")
    (folder / "modules.json").write_text(text)
    monkeypatch.setattr(sdk, "bundle_root", lambda: tmp_path)
    with pytest.raises(InputFileError) as info:
        sdk.example_modules("x")
    assert str(folder / "modules.json") in str(info.value)
    assert reason in str(info.value)


def _readme_block(name: str) -> list[list[str]]:
    """The commands of the example README's block, comments dropped."""
    import shlex

    text = (example_path(name) / "README.md").read_text()
    block = text.split("```\n", 2)[1]
    return [shlex.split(line.split("  #")[0])[1:] for line in block.splitlines() if line]


def test_06_safe_upgrade_readme_block_runs_as_written(tmp_path: Path) -> None:
    """The README's commands in order (``W``, ``ex`` and ``ID`` filled in; ``example.com``
    pointed at a loopback HTTPS server in ``W/local.json``): the upgrade lands, the cell
    reports the new plan's result and stays pinned to air.v1's era until cells upgrade."""
    from world.ladder._kit import FakeHttp, resolve, self_signed

    cli = CliRunner()
    w, ex, pem = tmp_path / "W", tmp_path / "ex", tmp_path / "ca.pem"
    ran: list[str] = []
    proposal = ""
    with FakeHttp(lambda seen: (200, {}, b"{}"), tls=self_signed(("example.com",), pem)) as fake:
        for args in _readme_block("agentos-06-safe-upgrade"):
            args = [a.replace("ex/", f"{ex}/") for a in args]
            args = [str(w) if a == "W" else str(ex) if a == "ex" else a for a in args]
            args = [proposal if a == "ID" else a for a in args]
            extra = ["--json"] if args[:2] in (["upgrade", "propose"], ["cells", "show"]) else []
            result = cli.invoke(app, args + extra)
            assert result.exit_code == 0, (args, result.output)
            ran.append(result.output)
            if args[0] == "init":
                resolve(w, {"example.com": fake.address}, ca_file=pem)
            if args[:2] == ["upgrade", "propose"]:
                proposal = str(json.loads(result.output)["id"])
    state = json.loads(ran[-3])
    assert (state["follow_status"], state["requests_observed"]) == (202, 2)
    shown = json.loads(ran[-2])
    assert shown["era"] != shown["current_era"]
    assert [s.path for s in fake.seen] == ["/data.json", "/data.json", "/follow.json"]
