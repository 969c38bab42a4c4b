"""Plan runs across an apply (issue 21, item 4), AgentOS's "safe upgrade" in our shapes: a
plan v1 making one HTTP call is replaced by a v2 that adds a follow-up call under a new grant
and policy rule. A run started before the apply finishes on v1; a new trigger runs v2; and
capabilities are always the current era's: a grant the upgrade removes stops an old run's
next effect. Against a loopback server, so what was sent is counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from httpkit import Answer, Loopback, loopback_fixture
from plans_kit import (
    await_receipt,
    chain,
    end,
    ended,
    http_get,
    http_grant,
    of_kind,
    plan,
    plan_world,
    records,
)

from air import cbor
from world import Engine, World
from world.gov import apply, propose
from world.history import verify_world

GO = "t/Go@1"
REPLY = "t/Reply@1"
PLAN = "t/fetch@1"


server = loopback_fixture({"/a": Answer(200), "/b": Answer(200)})


def fetch_air(folder: Path, server: Loopback, *, follow_up: bool) -> Path:
    """v1: GET /a. v2 (``follow_up``): GET /a, then GET /b under a grant of its own."""
    steps: list[dict[str, Any]] = [
        http_get("a", {"lit": server.url("/a")}, "ea"),
        await_receipt("ra", "ea", "got_a"),
    ]
    ids = ["a", "ra"]
    grants = [http_grant(["127.0.0.1"])]
    rules: list[dict[str, Any]] = [{"when": {"cap_name": "http"}, "decision": "allow"}]
    if follow_up:
        steps += [
            http_get("b", {"lit": server.url("/b")}, "eb", cap="http_b"),
            await_receipt("rb", "eb", "got_b"),
        ]
        ids += ["b", "rb"]
        grants.append(http_grant(["127.0.0.1"], name="http_b"))
        rules.append({"when": {"cap_name": "http_b"}, "decision": "allow"})
    return plan_world(
        folder,
        schemas={GO: "int"},
        plans=[plan(PLAN, GO, [*steps, end()], chain(*ids, "end"))],
        triggers=[{"event": GO, "plan": PLAN}],
        grants=grants,
        rules=rules,
    )


def drive(world: World) -> None:
    with Engine(world) as loop:
        loop.run()


def test_a_run_started_before_apply_finishes_on_v1_and_a_new_one_runs_v2(
    tmp_path: Path, server: Loopback
) -> None:
    w = tmp_path / "w"
    with World.create(w, fetch_air(tmp_path / "v1", server, follow_up=False)) as world:
        v1 = world.air.manifest_hash
        world.send(GO, 1)
        world.run_until_idle()  # run 0 started and waits for /a's receipt; nothing sent yet
        assert server.total == 0
        made, diff = propose(world, fetch_air(tmp_path / "v2", server, follow_up=True))
        assert diff.changed == {"plan": [PLAN], "policy": ["t/policy@1"]}
        apply(world, made.id)
        world.send(GO, 2)  # run 1: the new era's plan
        drive(world)
    assert (server.hits["/a"], server.hits["/b"]) == (2, 1)
    recs = records(w)
    runs = {
        r.body["run_id"]: cbor.raw_to_hash(r.body["manifest_hash"])
        for r in of_kind(recs, "plan.started")
    }
    assert runs == {0: v1, 1: made.manifest_hash}
    assert {i: b["status"] for i, b in ended(recs).items()} == {0: "ok", 1: "ok"}
    assert verify_world(w).ok


def _waiting_air(folder: Path, server: Loopback, *, grant: str) -> Path:
    """A plan that waits for a reply, then GETs /a under grant ``grant``."""
    wait = {"id": "wait", "op": "await_event", "event": REPLY, "bind": {"as": "reply"}}
    steps = [wait, http_get("a", {"lit": server.url("/a")}, "ea", cap=grant)]
    steps.append(await_receipt("ra", "ea", "got"))
    return plan_world(
        folder,
        schemas={GO: "int", REPLY: "int"},
        plans=[plan(PLAN, GO, [*steps, end()], chain("wait", "a", "ra", "end"))],
        triggers=[{"event": GO, "plan": PLAN}],
        grants=[http_grant(["127.0.0.1"], name=grant)],
        rules=[{"when": {}, "decision": "allow"}],
        sink_events=[REPLY],
    )


def test_a_grant_the_upgrade_removes_stops_an_old_runs_next_effect(
    tmp_path: Path, server: Loopback
) -> None:
    w = tmp_path / "w"
    with World.create(w, _waiting_air(tmp_path / "v1", server, grant="http")) as world:
        world.send(GO, 1)
        world.run_until_idle()  # run 0 waits for a reply, on v1's plan (grant "http")
        made, _ = propose(world, _waiting_air(tmp_path / "v2", server, grant="http_new"))
        apply(world, made.id)  # v2 grants only "http_new"
        world.send(REPLY, 7)
        drive(world)
    assert server.total == 0  # the old run's GET was never sent
    (run,) = ended(records(w)).values()
    assert run["status"] == "error"
    assert "http" in str(run.get("error", run))
    assert verify_world(w).ok
