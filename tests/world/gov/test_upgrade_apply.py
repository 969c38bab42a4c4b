"""``world upgrade approve|apply`` (issue 21, item 4): one ``gov.applied`` record starts the
proposal's era. New cells take it at once; existing cells keep stepping with their era's module
until they are upgraded; a stale proposal is refused; replay, reopen and fork cross the apply
exactly. The fixed reducer is real C (``fixtures/counter_fix``: Add(0) no longer counts as an
event), built by the project's toolchain."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from air import cbor
from cli.main import app
from world import UpgradeRefused, World
from world.gov import applied, apply, approvals, approve, propose, shadow
from world.history import fork_world, verify_world
from world.serve import serve

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

runner = CliRunner()
COUNTER_WASM = (COUNTER_AIR / "../../reducers/counter/counter.wasm").resolve()
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def counter_air(tmp_path: Path, name: str, wasm: bytes | None = None, change: Any = None) -> Path:
    """A copy of the counter AIR in ``tmp_path/name`` with ``wasm`` as its binary;
    ``change(module, manifest, schemas)`` edits its documents."""
    folder = tmp_path / name
    folder.mkdir()
    module, manifest = json.loads((COUNTER_AIR / "counter.air.json").read_text())
    schemas = json.loads((COUNTER_AIR / "schemas.air.json").read_text())
    (folder / "counter.wasm").write_bytes(COUNTER_WASM.read_bytes() if wasm is None else wasm)
    module["wasm"] = "counter.wasm"
    if change is not None:
        change(module, manifest, schemas)
    (folder / "counter.air.json").write_text(json.dumps([module, manifest]))
    (folder / "schemas.air.json").write_text(json.dumps(schemas))
    return folder


def rebuilt() -> bytes:
    """The counter's binary with a custom section added: another binary, the same behaviour."""
    payload = b"\x03fix"
    return COUNTER_WASM.read_bytes() + bytes([0, len(payload)]) + payload


def events_of(world: World, key: str) -> int:
    return int(world.state(COUNTER, key)["events"])


@pytest.fixture
def upgraded(tmp_path: Path, fixed_wasm: bytes) -> tuple[Path, int, str, str]:
    """A counter world with cells a, b, the fix proposed and applied; (path, apply seq, old
    manifest, new manifest)."""
    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1")) as world:
        world.send_many([(EVENT, add("a", 1)), (EVENT, add("b", 2))])
        world.run_until_idle()
        old = world.air.manifest_hash
        made, _diff = propose(world, counter_air(tmp_path, "v2", fixed_wasm), "Add(0) fix")
        done = apply(world, made.id)
        assert world.air.manifest_hash == made.manifest_hash != old
    return path, done.seq, old, made.manifest_hash


def test_new_cells_take_the_new_era_and_old_cells_keep_theirs(
    upgraded: tuple[Path, int, str, str],
) -> None:
    path, _seq, old, new = upgraded
    with World.open(path) as world:
        assert world.air.manifest_hash == new  # the reopened world runs the applied era
        world.send_many([(EVENT, add(k, 0)) for k in ("a", "c")])
        world.send(EVENT, add("c", 5))
        world.run_until_idle()
        assert events_of(world, "a") == 2  # old era: Add(0) still counts
        assert world.state(COUNTER, "c") == {"count": 5, "events": 1}  # new era: the fix
        eras = {c.key: c.entry.manifest_hash for c in world.cells(COUNTER)}
    from air import cbor

    assert eras == {
        "a": cbor.hash_to_raw(old),
        "b": cbor.hash_to_raw(old),
        "c": cbor.hash_to_raw(new),
    }


def test_replay_and_reopen_cross_the_apply_exactly(upgraded: tuple[Path, int, str, str]) -> None:
    path, _seq, _old, new = upgraded
    with World.open(path) as world:
        world.send_many([(EVENT, add(k, 0)) for k in ("a", "b", "d")])
        world.run_until_idle()
        world.snapshot()  # a checkpoint after the apply: its eras come back from it
        world.send(EVENT, add("a", 0))
        world.run_until_idle()
        expected = {c.key: c.state for c in world.cells(COUNTER)}
    report = verify_world(path)
    assert report.ok, report
    with World.open(path, readonly=True) as world:
        assert world.air.manifest_hash == new
        assert {c.key: c.state for c in world.cells(COUNTER)} == expected
    assert expected["a"]["events"] == 3
    assert expected["d"]["events"] == 0


def test_a_fork_before_the_apply_is_in_the_old_era(
    upgraded: tuple[Path, int, str, str], tmp_path: Path
) -> None:
    path, seq, old, new = upgraded
    fork_world(path, seq - 1, tmp_path / "before")  # everything before the apply record
    fork_world(path, seq, tmp_path / "after")
    for name, era, counted in (("before", old, 1), ("after", new, 0)):
        with World.open(tmp_path / name) as world:
            assert world.air.manifest_hash == era
            world.send(EVENT, add("z", 0))
            world.run_until_idle()
            assert events_of(world, "z") == counted, name


def test_a_stale_proposal_is_refused_and_nothing_is_journaled(
    tmp_path: Path, fixed_wasm: bytes
) -> None:
    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1")) as world:
        first, _ = propose(world, counter_air(tmp_path, "v2", fixed_wasm))
        second, _ = propose(world, counter_air(tmp_path, "v3", rebuilt()))
        apply(world, first.id)
        height = world.journal.seq_next
        with pytest.raises(UpgradeRefused, match="stale"):
            apply(world, second.id)  # made against the AIR the first replaced
        with pytest.raises(UpgradeRefused, match="stale"):
            apply(world, first.id)  # applied already: its base is gone
        with pytest.raises(UpgradeRefused, match="stale"):
            approve(world, first.id)
        assert world.journal.seq_next == height
    with World.open(path) as world:
        assert world.journal.seq_next == height
        assert [a.proposal for a in applied(world)] == [first.id]


def test_approvals_are_journaled_and_listed(tmp_path: Path, fixed_wasm: bytes) -> None:
    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1")) as world:
        made, _ = propose(world, counter_air(tmp_path, "v2", fixed_wasm))
        seq = approve(world, made.id, "looked at the diff")
        assert approvals(world) == {made.id: [seq]}
        assert world.air.manifest_hash == made.base  # an approval applies nothing


def test_a_successor_takes_over_its_predecessors_cells(tmp_path: Path) -> None:
    def rename(module: dict[str, Any], manifest: dict[str, Any], _schemas: Any) -> None:
        module["name"] = "demo/Counter@2"
        for route in manifest["routing"]["events"]:
            route["reducer"] = "demo/Counter@2"

    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1")) as world:
        world.send(EVENT, add("a", 4))
        world.run_until_idle()
        made, diff = propose(world, counter_air(tmp_path, "v2", change=rename))
        assert diff.successors() == {COUNTER: "demo/Counter@2"}
        world.send(EVENT, add("a", 1))  # queued under the old name across the apply
        done = apply(world, made.id)
        assert done.successors == {"demo/Counter@2": COUNTER}
        world.run_until_idle()
        assert world.state("demo/Counter@2", "a") == {"count": 5, "events": 2}
        assert world.cell_count("demo/Counter@2") == 1
    assert verify_world(path).ok


def test_the_cli_applies_and_lists(tmp_path: Path, fixed_wasm: bytes) -> None:
    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1")):
        pass
    made = runner.invoke(
        app,
        [
            "upgrade",
            "propose",
            str(path),
            "--air",
            str(counter_air(tmp_path, "v2", fixed_wasm)),
            "--json",
        ],
    )
    assert made.exit_code == 0, made.output
    proposal_id = json.loads(made.output)["id"]
    approved = runner.invoke(app, ["upgrade", "approve", str(path), str(proposal_id), "--json"])
    assert approved.exit_code == 0, approved.output
    done = runner.invoke(app, ["upgrade", "apply", str(path), str(proposal_id)])
    assert done.exit_code == 0, done.output
    assert "applied" in done.output
    again = runner.invoke(app, ["upgrade", "apply", str(path), str(proposal_id)])
    assert again.exit_code != 0
    assert "stale" in again.output
    listed = runner.invoke(app, ["upgrade", "ls", str(path), "--json"])
    (line,) = json.loads(listed.output)["proposals"]
    assert line["applied"] is not None
    assert line["approvals"] == 1


def test_a_served_world_is_upgraded_through_its_socket(tmp_path: Path, fixed_wasm: bytes) -> None:
    """Propose, shadow, approve, apply and cells upgrade through ``world serve``; the served
    world runs the new era from its next tick, and its own journal says so after it stops."""
    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1")) as world:
        world.send_many([(EVENT, add("a", 0)), (EVENT, add("b", 1))])
        world.run_until_idle()
    stop, ready, errors = threading.Event(), threading.Event(), []

    def run() -> None:
        try:
            serve(path, stop_event=stop, on_listening=lambda _p: ready.set())
        except BaseException as exc:  # reported below
            errors.append(exc)
            ready.set()

    def cli(*args: str) -> dict[str, Any]:
        done = runner.invoke(app, [*args, "--json"])
        assert done.exit_code == 0, done.output
        return dict(json.loads(done.stdout))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(20)
    try:
        air = counter_air(tmp_path, "v2", fixed_wasm)
        made = cli("upgrade", "propose", str(path), "--air", str(air))
        shadowed = cli("upgrade", "shadow", str(path), str(made["id"]))
        assert shadowed["cells"]["differ"] == 1
        cli("upgrade", "approve", str(path), str(made["id"]))
        applied_now = cli("upgrade", "apply", str(path), str(made["id"]))
        assert applied_now["manifest_hash"] == made["manifest_hash"]
        cli("send", str(path), EVENT, json.dumps(add("c", 0)))
        shown = cli("cells", "show", str(path), COUNTER, "a")
        assert shown["era"] == made["base"]
        upgraded = cli("cells", "upgrade", str(path), COUNTER, "--all")
        assert upgraded["upgraded"] == 2
        listed = cli("upgrade", "ls", str(path))
        (line,) = listed["proposals"]
        assert (line["approvals"], line["shadows"], line["applied"]) == (1, 1, applied_now["seq"])
    finally:
        stop.set()
        thread.join(20)
    assert errors == []
    with World.open(path, readonly=True) as world:
        assert world.air.manifest_hash == made["manifest_hash"]
        assert world.state(COUNTER, "c") == {"count": 0, "events": 0}  # new era: the fix
        assert {c.entry.manifest_hash for c in world.cells(COUNTER)} == {
            cbor.hash_to_raw(made["manifest_hash"])
        }
    assert verify_world(path).ok


def test_an_air_that_requires_approval_and_shadow_refuses_an_apply_without_them(
    tmp_path: Path, fixed_wasm: bytes
) -> None:
    def strict(_module: Any, manifest: dict[str, Any], _schemas: Any) -> None:
        manifest["governance"] = {"apply_requires": ["shadow", "approval"]}

    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1", change=strict)) as world:
        made, diff = propose(world, counter_air(tmp_path, "v2", fixed_wasm, change=strict))
        assert "governance" not in diff.manifest  # the same requirement on both sides
        with pytest.raises(UpgradeRefused, match=r"an approval .* and a shadow run"):
            apply(world, made.id)
        approve(world, made.id)
        with pytest.raises(UpgradeRefused, match="a shadow run"):
            apply(world, made.id)
        shadow(world, made.id)
        apply(world, made.id)
        assert world.air.manifest_hash == made.manifest_hash
        _relaxed, diff = propose(world, counter_air(tmp_path, "v3"))
        assert diff.manifest["governance"] == ["apply requires ['approval', 'shadow'] → []"]
    assert verify_world(path).ok


def test_an_approval_or_shadow_of_another_proposal_does_not_satisfy_apply_requires(
    tmp_path: Path, fixed_wasm: bytes
) -> None:
    """An approval names its proposal (the id, the seq of its ``gov.proposed`` record, which
    no later record can change): one of a sibling proposal against the same base counts for
    that sibling only."""

    def strict(_module: Any, manifest: dict[str, Any], _schemas: Any) -> None:
        manifest["governance"] = {"apply_requires": ["approval", "shadow"]}

    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1", change=strict)) as world:
        wanted, _ = propose(world, counter_air(tmp_path, "v2", fixed_wasm, change=strict))
        other, _ = propose(world, counter_air(tmp_path, "v3", rebuilt(), change=strict), "other")
        approve(world, other.id)
        shadow(world, other.id)
        height = world.journal.seq_next
        with pytest.raises(UpgradeRefused, match=rf"an approval \(.* {wanted.id}\) and a shadow"):
            apply(world, wanted.id)
        approve(world, wanted.id)
        with pytest.raises(UpgradeRefused, match=rf"a shadow run \(.* {wanted.id}\)"):
            apply(world, wanted.id)
        assert world.journal.seq_next == height + 1  # the approval; no apply
        assert approvals(world) == {other.id: [height - 2], wanted.id: [height]}
        shadow(world, wanted.id)
        assert apply(world, wanted.id).proposal == wanted.id
