"""``world upgrade propose|ls|show`` (issue 21, item 2): a new AIR checked against a world,
kept whole in its CAS and journaled with its diff, or refused with the reason and nothing
stored. Nothing the world runs changes: its manifest, its cells and its replay stay as they
were."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from world import UpgradeRefused, World
from world.gov import proposal, proposal_air, proposals, propose
from world.serve import serve

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

runner = CliRunner()
COUNTER_WASM = (COUNTER_AIR / "../../reducers/counter/counter.wasm").resolve()


def _air(tmp_path: Path, name: str, change: Any = None, *, wasm: bytes | None = None) -> Path:
    """A copy of the counter AIR in ``tmp_path/name``; ``change(module, manifest, schemas)``
    edits its documents; ``wasm`` replaces the reducer's binary."""
    folder = tmp_path / name
    folder.mkdir()
    module, manifest = json.loads((COUNTER_AIR / "counter.air.json").read_text())
    schemas = json.loads((COUNTER_AIR / "schemas.air.json").read_text())
    target = folder / "counter.wasm"
    target.write_bytes(COUNTER_WASM.read_bytes() if wasm is None else wasm)
    module["wasm"] = "counter.wasm"
    if change is not None:
        change(module, manifest, schemas)
    (folder / "counter.air.json").write_text(json.dumps([module, manifest]))
    (folder / "schemas.air.json").write_text(json.dumps(schemas))
    return folder


def _fixed_wasm() -> bytes:
    """The counter's wasm with one custom section more: another binary, the same behaviour
    (a rebuild of a fixed reducer, as far as the world can tell)."""
    name = b"fix"
    payload = bytes([len(name)]) + name + b"v2"
    return COUNTER_WASM.read_bytes() + bytes([0, len(payload)]) + payload


@pytest.fixture
def world_path(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    with World.create(path, _air(tmp_path, "v1")) as world:
        world.send_many([(EVENT, add(k, 2)) for k in ("a", "b", "c")])
        world.run_until_idle()
    return path


def test_a_rebuilt_reducer_is_proposed_with_its_diff_and_nothing_else_changes(
    world_path: Path, tmp_path: Path
) -> None:
    fixed = _air(tmp_path, "v2", wasm=_fixed_wasm())
    with World.open(world_path) as world:
        base = world.air.manifest_hash
        seq_before = world.journal.seq_next
        made, diff = propose(world, fixed, "threshold fix")
        assert made.id == seq_before  # the proposal is its record's seq
        assert made.base == base
        assert made.manifest_hash != base
        assert world.air.manifest_hash == base  # proposing applies nothing
        (line,) = diff.reducers
        assert (line.change, line.old, line.new) == ("kept", COUNTER, COUNTER)
        assert (line.wasm_same, line.state_same, line.key_same) == (False, True, True)
        assert diff.changed == {"module": [COUNTER]}
        world.send(EVENT, add("a", 1))
        world.run_until_idle()
        assert world.state(COUNTER, "a")["count"] == 3
    shutil.rmtree(fixed)  # the proposal is whole without the folder it came from
    with World.open(world_path, readonly=True) as world:
        (found,) = proposals(world)
        assert found == made
        assert proposal_air(world, found).manifest_hash == made.manifest_hash
    verified = runner.invoke(app, ["replay", str(world_path), "--verify"])
    assert verified.exit_code == 0, verified.output
    tail = runner.invoke(app, ["journal", "tail", str(world_path), "--subject", "/world/gov/**"])
    assert "gov.proposed" in tail.output


def test_the_cli_proposes_lists_and_shows(world_path: Path, tmp_path: Path) -> None:
    def successor(module: dict[str, Any], manifest: dict[str, Any], _schemas: Any) -> None:
        module["name"] = "demo/Counter@2"
        manifest["routing"]["events"][0]["reducer"] = "demo/Counter@2"

    air = _air(tmp_path, "v2", successor)
    proposed = runner.invoke(
        app, ["upgrade", "propose", str(world_path), "--air", str(air), "--note", "rename"]
    )
    assert proposed.exit_code == 0, proposed.output
    assert "demo/Counter@1 → demo/Counter@2: 3 cells follow" in proposed.output
    assert "same wasm, state schema same, key schema same" in proposed.output
    assert "routes: + demo/CounterEvent@1 → demo/Counter@2 by key" in proposed.output
    listed = json.loads(runner.invoke(app, ["upgrade", "ls", str(world_path), "--json"]).stdout)
    (one,) = listed["proposals"]
    assert one["note"] == "rename"
    assert one["base"] == listed["current"]
    assert one["diff"]["reducers"][0]["change"] == "successor"
    shown = runner.invoke(app, ["upgrade", "show", str(world_path), str(one["id"]), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["cells"] == {COUNTER: 3}
    text = runner.invoke(app, ["upgrade", "ls", str(world_path)])
    assert f"{one['id']}  " in text.output
    assert "rename" in text.output
    missing = runner.invoke(app, ["upgrade", "show", str(world_path), "999"])
    assert missing.exit_code == 1
    assert "UnknownName" in missing.output


def _key_nat(module: dict[str, Any], _manifest: Any, schemas: list[dict[str, Any]]) -> None:
    module["key_schema"] = "nat"
    event = next(s for s in schemas if s["name"] == "demo/CounterEvent@1")
    event["type"]["record"]["key"] = "nat"  # so that the route still validates


def _state_field(_module: Any, _manifest: Any, schemas: list[dict[str, Any]]) -> None:
    state = next(s for s in schemas if s["name"] == "demo/CounterState@1")
    state["type"]["record"]["last"] = "nat"


def _nothing(_module: Any, _manifest: Any, _schemas: Any) -> None:
    pass


@pytest.mark.parametrize(
    ("change", "said"),
    [
        pytest.param(_key_nat, "`world migrate`", id="key-schema"),
        pytest.param(_state_field, "its wasm did not", id="state-schema"),
        pytest.param(_nothing, "changes nothing", id="no-change"),
    ],
)
def test_what_cannot_carry_the_cells_over_is_refused_and_nothing_is_stored(
    world_path: Path, tmp_path: Path, change: Any, said: str
) -> None:
    air = _air(tmp_path, "v2", change)
    with World.open(world_path) as world:
        seq_before = world.journal.seq_next
        objects_before = sorted((world_path / "cas").rglob("*"))
        with pytest.raises(UpgradeRefused) as caught:
            propose(world, air)
        assert said in str(caught.value)
        assert world.journal.seq_next == seq_before
        assert sorted((world_path / "cas").rglob("*")) == objects_before
    shown = runner.invoke(app, ["upgrade", "propose", str(world_path), "--air", str(air)])
    assert shown.exit_code == 1
    assert "UpgradeRefused" in shown.output


def test_an_air_that_does_not_validate_shows_its_diagnostics(
    world_path: Path, tmp_path: Path
) -> None:
    def broken(module: dict[str, Any], _manifest: Any, _schemas: Any) -> None:
        module["abi"]["reducer"]["state"] = "demo/Nowhere@1"

    air = _air(tmp_path, "bad", broken)
    shown = runner.invoke(app, ["upgrade", "propose", str(world_path), "--air", str(air)])
    assert shown.exit_code == 1
    assert "demo/Nowhere@1" in shown.output
    with World.open(world_path, readonly=True) as world:
        assert proposals(world) == []


def test_two_proposals_and_a_stale_one(world_path: Path, tmp_path: Path) -> None:
    with World.open(world_path) as world:
        first, _ = propose(world, _air(tmp_path, "v2", wasm=_fixed_wasm()))
        second, _ = propose(world, _air(tmp_path, "v3", wasm=_fixed_wasm() + b"\x00\x01\x00"))
        assert first.id < second.id
        assert proposal(world, second.id) == second
    listed = runner.invoke(app, ["upgrade", "ls", str(world_path)])
    assert listed.exit_code == 0
    assert "stale" not in listed.output  # both were made against the AIR the world runs


def test_a_served_world_is_not_proposed_to_behind_its_back(world_path: Path) -> None:
    """The proposal needs the writer's lock: a world in use says so (no half proposal)."""
    with World.open(world_path):
        shown = runner.invoke(
            app, ["upgrade", "propose", str(world_path), "--air", str(COUNTER_AIR)]
        )
    assert shown.exit_code == 1
    assert "in use" in shown.output


def test_a_served_world_takes_proposals_through_its_socket(
    world_path: Path, tmp_path: Path
) -> None:
    stop, ready, errors = threading.Event(), threading.Event(), []

    def run() -> None:
        try:
            serve(world_path, stop_event=stop, on_listening=lambda _p: ready.set())
        except BaseException as exc:  # reported below
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(20)
    try:
        air = _air(tmp_path, "v2", wasm=_fixed_wasm())
        made = runner.invoke(
            app, ["upgrade", "propose", str(world_path), "--air", str(air), "--json"]
        )
        assert made.exit_code == 0, made.output
        reply = json.loads(made.stdout)
        assert reply["cells"] == {COUNTER: 3}
        listed = json.loads(runner.invoke(app, ["upgrade", "ls", str(world_path), "--json"]).stdout)
        assert [p["id"] for p in listed["proposals"]] == [reply["id"]]
        shown = runner.invoke(app, ["upgrade", "show", str(world_path), str(reply["id"])])
        assert "new wasm, state schema same" in shown.output
        refused = runner.invoke(
            app, ["upgrade", "propose", str(world_path), "--air", str(air), "--json"]
        )
        assert refused.exit_code == 1  # the same AIR again: the server's answer, as local
        assert json.loads(refused.stdout)["error"] == "UpgradeRefused"
        assert f"already proposed, as proposal {reply['id']}" in refused.stdout
    finally:
        stop.set()
        thread.join(20)
    assert errors == []
    with World.open(world_path, readonly=True) as world:
        assert [p.id for p in proposals(world)] == [reply["id"]]


def test_the_same_air_proposed_from_two_folders_is_one_document_naming_no_folder(
    tmp_path: Path,
) -> None:
    """A proposal's AIR document names the author's files relative to their folder and a
    bound module's wasm relative to its file: the same AIR (and wasm) laid out alike under two
    folders is the same document, at the same address, with no absolute path in it."""
    from world.sdk import example_modules, example_path

    name = "agentos-06-safe-upgrade"
    [(module, wasm)] = example_modules(name).items()
    addresses, documents = [], []
    for folder in ("one", "two/deeper"):
        copy = tmp_path / folder
        shutil.copytree(example_path(name) / "v2", copy / "air" / "v2")
        (copy / "wasm").mkdir()
        shutil.copy(wasm, copy / "wasm" / "r.wasm")
        with World.create(tmp_path / folder / "w", example_path(name),
                          modules=example_modules(name)) as world:  # fmt: skip
            made, _diff = propose(
                world, copy / "air" / "v2", modules={module: copy / "wasm" / "r.wasm"}
            )
            addresses.append(made.air)
            documents.append(world.cas.get(made.air))
    assert addresses[0] == addresses[1]
    assert str(tmp_path).encode() not in documents[0]
