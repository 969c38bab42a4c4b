"""``world cells upgrade`` (issue 21, item 5): cells move to the current era, journaled as
``cell.upgraded`` and replayed exactly. A bug fix with the same state schema is a re-pin (old
cells keep the old behaviour until then); a state schema change steps each cell once through
the new module's upgrade hook (``reducers/counter_v2``, real C), and a cell whose upgrade fails
keeps its era with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_upgrade_apply import counter_air
from typer.testing import CliRunner

from air import cbor
from cli.main import app
from world import World
from world.gov import apply, propose, upgrade_cells
from world.history import cell_at, fork_world, verify_world

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

runner = CliRunner()
V2_AIR = Path(__file__).resolve().parents[2] / "fixtures" / "counter_v2_air"
COUNTER_2 = "demo/Counter@2"
TOO_BIG = 2**53  # counter_v2 refuses to carry a count above 2^53 - 1


def era_of(world: World, reducer: str, key: str) -> str:
    view = world.cell(reducer, key)
    assert view is not None
    return cbor.raw_to_hash(view.entry.manifest_hash)


def test_a_bug_fix_reaches_old_cells_only_when_they_are_upgraded(
    tmp_path: Path, fixed_wasm: bytes
) -> None:
    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1")) as world:
        world.send_many([(EVENT, add(k, 1)) for k in ("a", "b", "c")])
        world.run_until_idle()
        made, _ = propose(world, counter_air(tmp_path, "v2", fixed_wasm))
        apply(world, made.id)
        world.send(EVENT, add("a", 0))
        world.run_until_idle()
        assert world.state(COUNTER, "a")["events"] == 2  # the old behaviour, in the old era
        done = upgrade_cells(world, COUNTER, ["a", "b"], batch=1)
        assert (done.upgraded, done.failed, len(done.records)) == (2, [], 2)
        assert world.state(COUNTER, "a") == {"count": 1, "events": 2}  # a re-pin: untouched
        assert era_of(world, COUNTER, "a") == made.manifest_hash
        assert era_of(world, COUNTER, "c") == made.base
        world.send_many([(EVENT, add("a", 0)), (EVENT, add("c", 0))])
        world.run_until_idle()
        assert world.state(COUNTER, "a")["events"] == 2  # upgraded: the fix
        assert world.state(COUNTER, "c")["events"] == 2  # not upgraded: the old behaviour
        rest = upgrade_cells(world, COUNTER)  # --all: what is left
        assert (rest.upgraded, rest.current) == (1, 2)
        assert upgrade_cells(world, COUNTER).upgraded == 0  # nothing left: nothing journaled
    assert verify_world(path).ok


@pytest.fixture
def v2_world(tmp_path: Path) -> tuple[Path, str]:
    """A counter world with cells a, b and one too big to carry, and counter_v2 applied."""
    path = tmp_path / "w"
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add("a", 3)), (EVENT, add("b", 5)), (EVENT, add("big", TOO_BIG))])
        world.run_until_idle()
        made, diff = propose(world, V2_AIR)
        (line,) = diff.reducers
        assert (line.change, line.state_same, line.wasm_same) == ("successor", False, False)
        apply(world, made.id)
    return path, made.base


def test_a_state_schema_change_upgrades_every_cell_through_the_hook(
    v2_world: tuple[Path, str],
) -> None:
    path, old = v2_world
    with World.open(path) as world:
        old_wasm = world.genesis_air.wasm_hashes[COUNTER]
        world.send_many([(EVENT, add("a", 1)), (EVENT, add("c", 2))])
        world.run_until_idle()
        # a is stepped by its era's module and read through its era's schema
        assert world.state(COUNTER_2, "a") == {"count": 4, "events": 2}
        assert world.state(COUNTER_2, "c") == {"count": 2, "events": 1, "upgraded_from": None}
        done = upgrade_cells(world, COUNTER_2)
        assert done.upgraded == 2
        assert done.current == 1  # c was born in the new era
        ((key, reason),) = done.failed
        assert key == "big"
        assert reason["code"] == "trap"
        assert world.state(COUNTER_2, "a") == {"count": 4, "events": 2, "upgraded_from": old_wasm}
        assert world.state(COUNTER_2, "b")["count"] == 5
        assert era_of(world, COUNTER_2, "big") == old  # stays where it was
        assert world.state(COUNTER_2, "big") == {"count": TOO_BIG, "events": 1}
        world.send(EVENT, add("a", 1))
        world.run_until_idle()
        assert world.state(COUNTER_2, "a")["count"] == 5  # the new module steps it now
        expected = {v.key: v.state for v in world.cells(COUNTER_2)}
    assert verify_world(path).ok
    with World.open(path, readonly=True) as world:  # recovered from the journal: the same
        assert {v.key: v.state for v in world.cells(COUNTER_2)} == expected


def test_the_cli_upgrades_and_shows_eras(v2_world: tuple[Path, str]) -> None:
    path, old = v2_world
    shown = runner.invoke(app, ["cells", "show", str(path), COUNTER_2, "a", "--json"])
    assert json.loads(shown.stdout)["era"] == old
    text = runner.invoke(app, ["cells", "show", str(path), COUNTER_2, "a"])
    assert "world cells upgrade" in text.output
    refused = runner.invoke(app, ["cells", "upgrade", str(path), COUNTER_2])
    assert refused.exit_code != 0  # neither --key nor --all
    one = runner.invoke(app, ["cells", "upgrade", str(path), COUNTER_2, "--key", "a", "--json"])
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout)["upgraded"] == 1
    rest = runner.invoke(app, ["cells", "upgrade", str(path), COUNTER_2, "--all"])
    assert rest.exit_code == 1  # big could not be carried: said, and the exit code says so
    assert "1 cell(s) upgraded, 1 failed" in rest.output
    assert '"big": trap' in rest.output
    tail = runner.invoke(app, ["journal", "tail", str(path)])
    upgrades = [json.loads(line) for line in tail.stdout.splitlines() if "cell.upgraded" in line]
    assert [[c[0] for c in r["body"]["cells"]] for r in upgrades] == [["a"], ["b"]]
    assert [f[0] for f in upgrades[1]["body"]["failed"]] == ["big"]
    listed = runner.invoke(app, ["cells", "ls", str(path), COUNTER_2, "--json"])
    eras = {c["key"]: c["era"] for c in json.loads(listed.stdout)["cells"]}
    current = json.loads(listed.stdout)["current_era"]
    assert eras == {"a": current, "b": current, "big": old}


def test_replay_crosses_three_applies_and_two_upgrades_exactly(
    tmp_path: Path, fixed_wasm: bytes
) -> None:
    path = tmp_path / "w"
    payload = b"\x03fix"
    rebuilt = V2_AIR / "../../../reducers/counter_v2/counter_v2.wasm"
    v3 = tmp_path / "v3"
    v3.mkdir()
    for name in ("counter_v2.air.json", "schemas.air.json"):
        (v3 / name).write_text(
            (V2_AIR / name).read_text().replace("../../../reducers/counter_v2/", "")
        )
    (v3 / "counter_v2.wasm").write_bytes(rebuilt.read_bytes() + bytes([0, len(payload)]) + payload)
    applied = []
    with World.create(path, counter_air(tmp_path, "v1")) as world:
        world.send_many([(EVENT, add(k, 1)) for k in ("a", "b")])
        world.run_until_idle()
        for air, reducer in (
            (counter_air(tmp_path, "fix", fixed_wasm), COUNTER),
            (V2_AIR, COUNTER_2),
            (v3, None),
        ):
            made, _ = propose(world, air)
            applied.append(apply(world, made.id).seq)
            world.send_many([(EVENT, add("a", 0)), (EVENT, add(f"n{len(applied)}", 1))])
            world.run_until_idle()
            if reducer is not None:
                assert upgrade_cells(world, reducer).failed == []
            world.send(EVENT, add("b", 2))
            world.run_until_idle()
            if len(applied) == 2:
                world.snapshot()
        final = {v.key: v.state for v in world.cells(COUNTER_2)}
    report = verify_world(path)
    assert report.ok, report
    with World.open(path) as world:
        assert {v.key: v.state for v in world.cells(COUNTER_2)} == final
    fork_world(path, applied[1] - 1, tmp_path / "fork")  # before counter_v2 was applied
    with World.open(tmp_path / "fork") as forked:
        assert COUNTER in forked.air.modules
        assert COUNTER_2 not in forked.air.modules
        forked.send(EVENT, add("z", 0))
        forked.run_until_idle()
        assert forked.state(COUNTER, "z") == {"count": 0, "events": 0}  # the fix's era


def test_time_travel_reads_a_cell_in_the_era_it_was_in(v2_world: tuple[Path, str]) -> None:
    """Before the apply the cells belonged to demo/Counter@1; asked by their reducer's name
    now, the past state comes back read through the schema of its era then."""
    path, old = v2_world
    with World.open(path) as world:
        before = world.journal.seq_next - 1
        upgrade_cells(world, COUNTER_2, ["a"])
        after = world.journal.seq_next - 1
    was = cell_at(path, COUNTER_2, "a", before)
    now = cell_at(path, COUNTER_2, "a", after)
    assert (was.state, was.era) == ({"count": 3, "events": 1}, old)
    assert now.state["upgraded_from"] is not None
    assert now.era != old
    shown = runner.invoke(
        app, ["cells", "show", str(path), COUNTER_2, "a", "--at", str(before), "--json"]
    )
    assert json.loads(shown.stdout)["era"] == old


def test_an_export_files_each_cell_under_the_module_of_its_era(
    v2_world: tuple[Path, str], tmp_path: Path
) -> None:
    """The seed's tree: ``state/reducers/<module of the cell's era>/``. An old-era cell goes
    under the old module, and a world running only the new one refuses to import it, saying
    which module it has."""
    path, _old = v2_world
    with World.open(path) as world:
        upgrade_cells(world, COUNTER_2, ["a"])
        old_wasm = world.genesis_air.wasm_hashes[COUNTER].removeprefix("blake3:")
        new_wasm = world.air.wasm_hashes[COUNTER_2].removeprefix("blake3:")
    out = tmp_path / "export"
    done = runner.invoke(app, ["cells", "export", str(path), COUNTER_2, "--all", "--out", str(out)])
    assert done.exit_code == 0, done.output
    reducers = out / "state" / "reducers"
    assert sorted(p.name for p in reducers.iterdir()) == sorted([old_wasm, new_wasm])
    assert len(list((reducers / new_wasm / "cells").glob("*.cbor"))) == 1  # a
    assert len(list((reducers / old_wasm / "cells").glob("*.cbor"))) == 2  # b, big
    fresh = tmp_path / "fresh"
    with World.create(fresh, V2_AIR):
        pass
    old_cell = next((reducers / old_wasm / "cells").glob("*.cbor"))
    refused = runner.invoke(app, ["cells", "import", str(fresh), str(old_cell), "--trust"])
    assert refused.exit_code == 1
    assert f"module {old_wasm} of {COUNTER_2}" in refused.output
    new_cell = next((reducers / new_wasm / "cells").glob("*.cbor"))
    taken = runner.invoke(app, ["cells", "import", str(fresh), str(new_cell), "--trust"])
    assert taken.exit_code == 0, taken.output
    with World.open(fresh, readonly=True) as world:
        assert world.state(COUNTER_2, "a")["count"] == 3


def test_a_view_made_before_an_upgrade_follows_the_eras_its_world_applies(tmp_path: Path) -> None:
    """A served world's journal pages render each record through its era's AIR; the view
    learns the eras from the kernel (``RecordView.follow``), not by reading the journal."""
    from world._views import JournalView

    path = tmp_path / "w"
    with World.create(path, COUNTER_AIR) as world:
        view = JournalView(world.genesis_air)
        view.follow(world)
        assert [since for since, _air in view._eras] == [0]
        made, _diff = propose(
            world, Path(__file__).resolve().parents[2] / "fixtures" / "counter_v2_air"
        )
        apply(world, made.id)
        view.follow(world)
        view.follow(world)  # again: nothing new, nothing twice
        starts = [since for since, _air in view._eras]
        assert starts == [era.since for era in world.kernel.eras.history]
        assert len(starts) == 2
        assert starts[1] > 0
        assert view._eras[1][1].manifest_hash == world.air.manifest_hash
