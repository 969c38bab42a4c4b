"""A partitioned world asked as one world is (``world.cluster.PartitionedHandle``): with three
partitions, every answer is what one world given the same events answers (cells paged in key
order across partitions, states, a cell's history and why, info's figures), a send is split
by owner and a retry of it is a duplicate in each partition, a bad batch journals nothing in
any partition, a run id held by two partitions is refused naming them, what only one
partition can answer is refused naming why; and the single-world commands (``world runs``,
``cells``, ``why``, ``state``, ``send``, ``dead-letters``, ``effects``) work on its directory.
The one-partition case runs the whole contract suite (``test_ops_contract.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from plans_kit import await_receipt, chain, end, http_get, http_grant, plan, plan_world, ref
from test_cluster import keys_owned_by
from typer.testing import CliRunner

from air.errors import InvalidArgument, UnknownName, WrongMode
from cli.main import app
from world import World, attach
from world.cluster import ROUTES, PartitionedHandle, init_cluster, open_cluster, partition_dir
from world.errors import EventRejected
from world.ops import REGISTRY, Snapshot
from world.ops import open as open_world

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

KEYS = [f"k{i}" for i in range(24)]
GO = "t/Go@1"


def _events() -> list[dict[str, Any]]:
    return [add(key, i + 1) for i, key in enumerate(KEYS)] + [add(k, 5) for k in KEYS[::3]]


@pytest.fixture
def pair(tmp_path: Path) -> Any:
    """A three-partition counter world and one world, given the same events, both settled."""
    init_cluster(tmp_path / "c", COUNTER_AIR, 3)
    with World.create(tmp_path / "one", COUNTER_AIR) as one:
        one.send_many([(EVENT, v) for v in _events()])
        one.run_until_idle()
    cluster = open_cluster(tmp_path / "c")
    one_handle = open_world(tmp_path / "one")
    yield cluster, one_handle
    cluster.close()
    one_handle.close()


def test_every_operation_has_a_route() -> None:
    assert set(ROUTES) == set(REGISTRY)


def test_three_partitions_answer_as_one_world_holding_every_cell(pair: Any) -> None:
    cluster, one = pair
    sent = cluster.send_many(EVENT, _events(), ids=[f"e{i}" for i in range(len(_events()))])
    assert sorted(set(sent.partitions)) == [0, 1, 2]
    by_partition: dict[int, list[int]] = {}
    for part, seq in zip(sent.partitions, sent.seqs, strict=True):
        by_partition.setdefault(part, []).append(seq)
    for seqs in by_partition.values():  # one batch per partition, in the order given
        assert seqs == sorted(seqs)
    cluster.run_until_idle()

    again = cluster.send_many(EVENT, _events(), ids=[f"e{i}" for i in range(len(_events()))])
    assert (again.seqs, again.duplicates) == (sent.seqs, len(_events()))

    for key in KEYS:
        assert cluster.state(COUNTER, key) == one.state(COUNTER, key), key
        assert cluster.cell(COUNTER, key).state == one.cell(COUNTER, key).state
        assert cluster.why(COUNTER, key).state == one.why(COUNTER, key).state
        history = [e.get("kind") for e in cluster.cell_history(COUNTER, key)]
        assert history == [e.get("kind") for e in one.cell_history(COUNTER, key)]

    def walk(handle: Any) -> list[tuple[Any, Any]]:
        found, after = [], None
        while True:
            page = handle.cells(COUNTER, limit=5, after=after)
            assert page.count == len(KEYS)
            found += [(c["key"], c["state"], c["state_hash"]) for c in page.cells]
            if page.next_after is None:
                return found
            after = page.next_after

    assert walk(cluster) == walk(one)
    assert {c["partition"] for c in cluster.cells(COUNTER, limit=100).cells} == {0, 1, 2}

    info, single = cluster.info(), one.info()
    assert info.reducers == single.reducers
    assert info.steps_total == single.steps_total
    assert [p["partition"] for p in info.partitions] == [0, 1, 2]  # type: ignore[attr-defined]
    upgraded = cluster.cells_upgrade(COUNTER, None)
    assert upgraded.already_current == len(KEYS)
    snap = cluster.call("world.snapshot")
    assert isinstance(snap, Snapshot)
    assert snap.partitions is not None
    assert len(set(snap.partitions)) == 3
    assert snap.snapshot == snap.partitions[0]


def test_a_bad_value_journals_nothing_in_any_partition(pair: Any) -> None:
    cluster, _one = pair
    before = cluster.info().journal_seq_next
    owned = keys_owned_by(3)
    with pytest.raises(EventRejected) as caught:
        cluster.send_many(EVENT, [add(owned[1], 1), add(owned[2], 1), {"key": 5}])
    assert caught.value.index == 2
    assert cluster.info().journal_seq_next == before


def test_what_one_partition_answers_is_refused_naming_why(pair: Any, tmp_path: Path) -> None:
    cluster, _one = pair
    with pytest.raises(WrongMode, match="a journal per partition"):
        list(cluster.journal_tail())
    with pytest.raises(WrongMode, match="world cluster upgrade"):
        cluster.propose(COUNTER_AIR)
    with pytest.raises(WrongMode, match="partition owning its key"):
        cluster.cells_import(tmp_path / "x.cbor")
    with pytest.raises(WrongMode):
        cluster.cells_export(COUNTER, tmp_path / "all", every=True)
    cluster.send(EVENT, add("k1", 1))
    cluster.run_until_idle()
    assert cluster.cells_export(COUNTER, tmp_path / "k1.cbor", key="k1").cells == 1
    assert (tmp_path / "k1.cbor").is_file()


def _approval_air(folder: Path) -> Path:
    fetch = [http_get("fetch", ref("@plan.input.url"), "req"), await_receipt("wait", "req", "r")]
    return plan_world(
        folder,
        schemas={GO: {"record": {"url": "text"}}},
        plans=[plan("t/go@1", GO, [*fetch, end()], chain("fetch", "wait", "end"))],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=[http_grant(["127.0.0.1"])],
        rules=[{"when": {"effect_kind": "http.request"}, "decision": "require_approval"}],
    )


def test_runs_and_intents_are_found_in_the_partition_holding_them(tmp_path: Path) -> None:
    root = tmp_path / "c"
    init_cluster(root, _approval_air(tmp_path / "air"), 3)
    with open_cluster(root) as cluster:
        assert isinstance(cluster, PartitionedHandle)
        cluster.send(GO, {"url": "http://127.0.0.1:9/a"})  # unkeyed: partition 0
        cluster.run_until_idle()
        runs = cluster.runs()
        assert [(r["run_id"], r["partition"], r["status"]) for r in runs] == [(0, 0, "waiting")]
        assert cluster.run(0).status == "waiting"
        intent = cluster.effects().intents[0]
        assert intent["partition"] == 0
        assert cluster.decide(intent["intent_hash"][:12], False) > 0
        with pytest.raises(UnknownName):
            cluster.run(7)
        with pytest.raises(UnknownName):
            cluster.dead_letter("nope")
    with World.open(partition_dir(root, 1)) as p1:  # any partition takes an event
        p1.send_many([(GO, {"url": "http://127.0.0.1:9/b"})])
        p1.run_until_idle()
    with open_cluster(root, readonly=True) as cluster:
        assert [(r["run_id"], r["partition"]) for r in cluster.runs()] == [(0, 0), (0, 1)]
        with pytest.raises(InvalidArgument, match="p0, p1"):
            cluster.run(0)
        with pytest.raises(WrongMode):
            cluster.cancel_run(0)  # read-only: refused before anything is asked


def test_attach_gives_a_clusters_directory_its_handle(tmp_path: Path) -> None:
    init_cluster(tmp_path / "c", COUNTER_AIR, 2)
    with attach(tmp_path / "c", readonly=True) as handle:
        assert isinstance(handle, PartitionedHandle)
        assert handle.count == 2


runner = CliRunner()


def cli(*args: object, code: int = 0) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result.output


def test_the_single_world_commands_work_on_a_partitioned_world(tmp_path: Path) -> None:
    root = tmp_path / "c"
    init_cluster(root, COUNTER_AIR, 3)
    owned = keys_owned_by(3)
    for key in owned.values():
        cli("send", root, EVENT, json.dumps(add(key, 2)))
    assert "every partition is idle" in cli("cluster", "run", root)
    listed = json.loads(cli("cells", "ls", root, COUNTER, "--json"))
    assert sorted(c["key"] for c in listed["cells"]) == sorted(owned.values())
    state = json.loads(cli("state", root, COUNTER, "--key", json.dumps(owned[2]), "--json"))
    assert state["state"] == {"count": 2, "events": 1}
    why = json.loads(cli("why", root, COUNTER, json.dumps(owned[1]), "--json"))
    assert why["state"] == {"count": 2, "events": 1}
    assert json.loads(cli("runs", "ls", root, "--json"))["runs"] == []
    assert json.loads(cli("dead-letters", "ls", root, "--json"))["letters"] == []
    assert json.loads(cli("effects", "ls", root, "--json"))["intents"] == []
    tail = cli("cells", "tail", root, COUNTER, json.dumps(owned[2]), "--json")
    assert [json.loads(line)["kind"] for line in tail.splitlines()] == ["event.in", "step"]
    sent = json.loads(cli("send", root, EVENT, json.dumps(add(owned[1], 1)), "--json"))
    assert sent["partitions"] == [1]
    assert "to partitions p1" in cli("send", root, EVENT, json.dumps(add(owned[1], 1)))
    assert "a journal per partition" in cli("journal", "tail", root, code=1)
    assert "is a partitioned world" in cli("run", root, code=1)  # world cluster run
    shown = cli("cluster", "cells", "ls", root, COUNTER)
    assert [line.split()[1] for line in shown.splitlines()] == sorted(
        json.dumps(k) for k in owned.values()
    )
