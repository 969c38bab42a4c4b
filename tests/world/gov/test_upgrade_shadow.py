"""``world upgrade shadow`` (issue 21, item 3): a proposal run aside against what really
happened. A bug fix reports exactly the cells whose state it changes; the "safe upgrade" plan
v2 reports its new follow-up effect and sends nothing; the world itself is untouched but for
one ``gov.shadowed`` record, and replays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from httpkit import Answer, Loopback, loopback_fixture
from plans_kit import records
from test_upgrade_apply import counter_air, rebuilt
from test_upgrade_runs import GO, drive, fetch_air
from typer.testing import CliRunner

from air import cbor
from cli.main import app
from world import UpgradeRefused, World
from world.gov import apply, field_diff, propose, shadow, shadows
from world.history import verify_world
from world.operate import cancel_run

from worldkit import COUNTER, EVENT, add

runner = CliRunner()


server = loopback_fixture({"/a": Answer(200), "/b": Answer(200)})


def test_a_bug_fix_shadow_reports_exactly_the_cells_it_changes(
    tmp_path: Path, fixed_wasm: bytes
) -> None:
    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1")) as world:
        world.send_many([(EVENT, add(k, 2)) for k in ("a", "b", "c", "d")])
        world.send_many([(EVENT, add("a", 0)), (EVENT, add("c", 0)), (EVENT, add("b", 1))])
        world.run_until_idle()
        made, _ = propose(world, counter_air(tmp_path, "v2", fixed_wasm))
        before = {v.key: v.state for v in world.cells(COUNTER)}
        height = world.journal.seq_next
        done = shadow(world, made.id)
        assert world.journal.seq_next == height + 1  # one gov.shadowed record, nothing else
        assert {v.key: v.state for v in world.cells(COUNTER)} == before
        assert world.air.manifest_hash == made.base  # nothing applied
    report = done.report
    assert report["inputs"] == 7
    assert report["cells"]["differ"] == 2
    shown = {line["key"]: line for line in report["cells"]["shown"]}
    assert sorted(shown) == ["a", "c"]
    assert shown["a"]["fields"] == [{"path": "/events", "real": 2, "shadow": 1}]
    assert report["steps_failed"] == {"new": [], "gone": []}
    assert report["effects"]["new"] == report["effects"]["gone"] == []
    with World.open(path, readonly=True) as world:
        (line,) = shadows(world)[made.id]
        assert line["summary"]["cells_differ"] == 2
        assert cbor.loads(world.cas.get(line["report"]))["cells"]["differ"] == 2
    assert verify_world(path).ok


def test_shadow_from_a_position_replays_the_rest_and_re_feeds_only_after_it(
    tmp_path: Path, fixed_wasm: bytes
) -> None:
    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1")) as world:
        world.send(EVENT, add("a", 0))  # before --from: the shadow's a is upgraded, not re-run
        world.run_until_idle()
        start = world.journal.seq_next
        world.send(EVENT, add("b", 0))
        world.run_until_idle()
        made, _ = propose(world, counter_air(tmp_path, "v2", fixed_wasm))
        report = shadow(world, made.id, from_seq=start, events=[(EVENT, add("e", 0))]).report
    assert (report["from"], report["inputs"], report["extra_events"]) == (start, 1, 1)
    assert sorted(line["key"] for line in report["cells"]["shown"]) == ["b", "e"]


def test_the_safe_upgrade_shadow_predicts_the_new_effect_and_sends_nothing(
    tmp_path: Path, server: Loopback
) -> None:
    w = tmp_path / "w"
    with World.create(w, fetch_air(tmp_path / "v1", server, follow_up=False)) as world:
        world.send(GO, 1)
        drive(world)
        assert server.total == 1
        made, _ = propose(world, fetch_air(tmp_path / "v2", server, follow_up=True))
        report = shadow(world, made.id).report
    assert server.total == 1  # the shadow called no adapter
    (new,) = report["effects"]["new"]
    assert new["kind"] == "http.request"
    assert new["params"]["url"].endswith("/b")
    assert new["cap"] == "http_b"
    assert report["effects"]["reused"] == 1  # /a's real receipt
    assert [s["params"]["url"][-2:] for s in report["effects"]["stubbed"]] == ["/b"]
    assert report["effects"]["gone"] == []
    assert [r.kind for r in records(w)][-1] == "gov.shadowed"


def test_a_cancelled_run_is_cancelled_in_the_shadow_too(tmp_path: Path, server: Loopback) -> None:
    """``run.cancelled`` is re-fed: the shadow's run ends as the real one did (cancelled), so
    it is not reported as a run that differs, and its intent is neither stubbed nor new."""
    w = tmp_path / "w"
    with World.create(w, fetch_air(tmp_path / "v1", server, follow_up=False)) as world:
        world.send(GO, 1)
        world.run_until_idle()  # run 0 waits for /a's receipt; nothing sent
        cancel_run(world.kernel, "0")
        world.commit()
        made, _ = propose(world, fetch_air(tmp_path / "v2", server, follow_up=True))
        report = shadow(world, made.id, from_seq=0).report
    assert server.total == 0
    assert report["runs"] == {"differ": [], "differ_count": 0}
    assert report["effects"]["stubbed"] == []
    assert report["skipped"] == {}


def test_the_cli_shadows_and_lists(tmp_path: Path, fixed_wasm: bytes) -> None:
    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1")) as world:
        world.send_many([(EVENT, add("a", 0)), (EVENT, add("b", 1))])
        world.run_until_idle()
        made, _ = propose(world, counter_air(tmp_path, "v2", fixed_wasm))
    shown = runner.invoke(app, ["upgrade", "shadow", str(path), str(made.id), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["cells"]["differ"] == 1
    text = runner.invoke(app, ["upgrade", "shadow", str(path), str(made.id)])
    assert text.exit_code == 0, text.output
    assert "1 cell(s) would differ" in text.output
    assert '"a"' in text.output
    assert "/events: 1 → 0" in text.output
    listed = json.loads(runner.invoke(app, ["upgrade", "ls", str(path), "--json"]).stdout)
    assert listed["proposals"][0]["shadows"] == 2


def test_field_diff_names_each_differing_field() -> None:
    assert field_diff({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}}) == [
        {"path": "/b/c", "real": 2, "shadow": 3}
    ]
    assert field_diff(None, {"a": 1}) == [{"path": "/", "real": None, "shadow": {"a": 1}}]
    assert field_diff([1], [1]) == []


def test_a_stale_proposal_is_not_shadowed_and_nothing_is_journaled(
    tmp_path: Path, fixed_wasm: bytes
) -> None:
    """Stale is ``world.gov._apply``'s word: a proposal whose base is no longer the manifest
    the world runs (another was applied since, or this one was). Its shadow would run an
    upgrade from an AIR the world has left, so it is refused, by the API and the CLI alike."""
    path = tmp_path / "w"
    with World.create(path, counter_air(tmp_path, "v1")) as world:
        world.send_many([(EVENT, add(k, 0)) for k in ("a", "b")])
        world.run_until_idle()
        first, _ = propose(world, counter_air(tmp_path, "v2", fixed_wasm))
        second, _ = propose(world, counter_air(tmp_path, "v3", rebuilt()), "another")
        apply(world, first.id)
        height = world.journal.seq_next
        for stale in (second, first):  # made against the AIR the apply replaced; applied
            with pytest.raises(UpgradeRefused, match="stale"):
                shadow(world, stale.id)
        assert world.journal.seq_next == height
    said = runner.invoke(app, ["upgrade", "shadow", str(path), str(second.id)])
    assert said.exit_code != 0
    assert "stale" in said.output
    with World.open(path, readonly=True) as world:
        assert world.journal.seq_next == height
        assert shadows(world) == {}
