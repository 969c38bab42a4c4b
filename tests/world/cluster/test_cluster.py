"""A partitioned world driven in one process (``world.cluster.LocalCluster``): the same cell
states as one world given the same events; a plan in one partition raising events to cells
of the three others, each arriving exactly once; forwarding that survives a crash between the
owner's commit and the source's record of it; every partition replaying exactly on its own.
The Ray actors over the same directories: ``test_cluster_ray.py``."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from air.errors import InvalidArgument, UsageError
from kernel import Outgoing, Partition, owner_of
from kernel.cells import key_hash
from world import World
from world.cluster import LocalCluster, forward, init_cluster, partition_dir
from world.errors import NotACluster

from worldkit import COUNTER, COUNTER_AIR, EVENT, add, counter_with_plans

FAN = "hello/Fan@1"


def owner(key: str, count: int = 4) -> int:
    from air import cbor

    return owner_of(key_hash(cbor.dumps(key)), count)


def keys_owned_by(count: int = 4) -> dict[int, str]:
    """One key owned by each partition."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < count:
        found.setdefault(owner(f"k{n}", count), f"k{n}")
        n += 1
    return found


def fan_air(folder: Path) -> Path:
    """The counter world with a plan started by ``hello/Fan@1`` (no keyed route: it lives in
    partition 0) that raises an ``Add`` to each of three cells named by the event."""
    steps = [
        {
            "id": f"to_{slot}",
            "op": "raise_event",
            "reducer": COUNTER,
            "key": {"ref": f"@plan.input.{slot}"},
            "event": {
                "record": {
                    "key": {"ref": f"@plan.input.{slot}"},
                    "op": {"variant": {"tag": "Add", "value": {"nat": 1}}},
                }
            },
        }
        for slot in ("a", "b", "c")
    ]
    plan = {
        "$kind": "defplan",
        "name": "hello/fan@1",
        "input": FAN,
        "steps": steps,
        "edges": [{"from": "to_a", "to": "to_b"}, {"from": "to_b", "to": "to_c"}],
    }
    fan = {"record": {"a": "text", "b": "text", "c": "text"}}
    return counter_with_plans(
        folder,
        [{"event": FAN, "plan": "hello/fan@1"}],
        [{"$kind": "defschema", "name": FAN, "type": fan}, plan],
    )


def workload(n: int, keys: int, seed: int = 7) -> list[tuple[str, Any]]:
    rng = random.Random(seed)
    return [(EVENT, add(f"u{rng.randrange(keys)}", rng.randrange(1, 9))) for _ in range(n)]


def one_world(folder: Path, air: Path, events: list[tuple[str, Any]]) -> dict[str, Any]:
    """The cells (key as JSON -> state) of one world of ``air`` given ``events``, run to idle:
    what a partitioned world given the same events must end with."""
    with World.create(folder, air) as one:
        one.send_many(events)
        one.run_until_idle()
        return {json.dumps(c.key): c.state for c in one.cells(COUNTER)}


def counter_air(tmp_path: Path) -> Path:
    return counter_with_plans(tmp_path / "air", [], [])


def test_ownership_is_the_documented_function_of_the_key_hash() -> None:
    # The function is part of the on-disk contract: pinned values, not the code's own output.
    assert [owner_of(bytes([b]) + bytes(31), 4) for b in (0x00, 0x3F, 0x40, 0x80, 0xFF)] == [
        0,
        0,
        1,
        2,
        3,
    ]
    assert owner_of(bytes(32), 1) == 0
    assert owner_of(b"\xff" * 32, 1024) == 1023
    part = Partition(2, 4)
    assert part.owner(None, b"\xff" * 32) == 0  # non-keyed: partition 0
    with pytest.raises(InvalidArgument, match="between 1 and 1024") as count:
        Partition(0, 0)
    assert (count.value.name, count.value.value) == ("partitions", 0)
    with pytest.raises(InvalidArgument, match="between 0 and 3") as index:
        Partition(4, 4)
    assert (index.value.name, index.value.value) == ("partition", 4)


def test_a_keyed_workload_gives_the_same_cells_as_one_world(tmp_path: Path) -> None:
    air = counter_air(tmp_path)
    events = workload(600, 40)
    expected = one_world(tmp_path / "one", air, events)
    init_cluster(tmp_path / "c", air, 4)
    with LocalCluster(tmp_path / "c") as cluster:
        placed = cluster.send_many(events)
        assert {p for p, _seq in placed} == {0, 1, 2, 3}
        cluster.run_until_idle()
        got = {json.dumps(c.key): c.state for c in cluster.cells(COUNTER)}
        assert got == expected
        assert cluster.state(COUNTER, "u3") == expected['"u3"']
        for node in cluster.nodes:  # each holds only its own keys
            for cell in node.world.cells(COUNTER):
                assert owner(cell.key) == node.index


def test_a_plan_in_one_partition_raises_to_three_others_exactly_once(tmp_path: Path) -> None:
    owned = keys_owned_by(4)
    init_cluster(tmp_path / "c", fan_air(tmp_path / "air"), 4)
    with LocalCluster(tmp_path / "c") as cluster:
        fan = {"a": owned[1], "b": owned[2], "c": owned[3]}
        assert cluster.send_many([(FAN, fan), (FAN, fan)]) == [(0, 1), (0, 2)]
        cluster.run_until_idle()
        for index in (1, 2, 3):
            assert cluster.state(COUNTER, owned[index]) == {"count": 2, "events": 2}
        infos = cluster.info()
        assert [i["outbox_backlog"] for i in infos] == [0, 0, 0, 0]
        assert [sorted(i["cursors"]) for i in infos] == [[], ["0"], ["0"], ["0"]]
        # Each owner journaled two forwarded events, each naming its origin in partition 0.
        for index in (1, 2, 3):
            forwarded = [
                r.body["origin"]
                for r in cluster.nodes[index].world.journal.read(0)
                if r.kind == "event.in"
            ]
            assert len(forwarded) == 2
            assert all(o[0] == 0 for o in forwarded)
            assert forwarded[0] < forwarded[1]
    for index in range(4):  # each partition replays exactly on its own
        _verify(partition_dir(tmp_path / "c", index))


def test_a_plan_runs_once_where_its_trigger_was_first_journaled(tmp_path: Path) -> None:
    """Every counter event starts the relay plan (apples -> one more pear): in the partition
    the event was sent to, never again where it was forwarded; the cells end as in one
    world."""
    from test_why import RELAY

    air = counter_with_plans(tmp_path / "air", [{"event": EVENT, "plan": RELAY["name"]}], [RELAY])
    events = [(EVENT, add(k, 1)) for k in ("apples", "figs", "apples", "kiwis", "apples")]
    expected = one_world(tmp_path / "one", air, events)
    init_cluster(tmp_path / "c", air, 4)
    with LocalCluster(tmp_path / "c") as cluster:
        for index, event in enumerate(events):  # each to a partition, owner or not
            cluster.nodes[index % 4].send([event], [None])
        cluster.run_until_idle()
        assert {json.dumps(c.key): c.state for c in cluster.cells(COUNTER)} == expected
        started = sum(n.world.kernel.plans.started for n in cluster.nodes)
        assert started == len(events) + 3  # and pears' three adds, each from a run's raise
    for index in range(4):
        _verify(partition_dir(tmp_path / "c", index))


def test_an_event_sent_to_a_partition_that_does_not_own_its_key_is_forwarded(
    tmp_path: Path,
) -> None:
    owned = keys_owned_by(2)
    init_cluster(tmp_path / "c", counter_air(tmp_path), 2)
    with World.open(partition_dir(tmp_path / "c", 0)) as p0:  # as `world send c/p0` would
        p0.send(EVENT, add(owned[1], 5))
        p0.run_until_idle()
        assert p0.kernel.partition is not None
        assert p0.kernel.partition.backlog() == {1: 1}
        assert p0.state(COUNTER, owned[1]) is None
    with LocalCluster(tmp_path / "c") as cluster:
        cluster.run_until_idle()
        assert cluster.state(COUNTER, owned[1]) == {"count": 5, "events": 1}
        assert cluster.nodes[0].partition.backlog() == {}


def test_a_second_delivery_of_the_same_origin_is_not_journaled_again(tmp_path: Path) -> None:
    """The crash between the owner's commit and the source's ``outbox.delivered``: the
    source still owes the entry, sends it again, and the owner takes nothing twice."""
    owned = keys_owned_by(2)
    init_cluster(tmp_path / "c", counter_air(tmp_path), 2)
    root = tmp_path / "c"
    with World.open(partition_dir(root, 0)) as p0, World.open(partition_dir(root, 1)) as p1:
        p0.send_many([(EVENT, add(owned[1], 1)), (EVENT, add(owned[1], 2))])
        assert p0.kernel.partition is not None
        entries = p0.kernel.partition.pending(1, 10)
        assert [e.seq for e in entries] == [1, 2]
        assert p1.take_forwarded(0, entries[:1]) == (1, 0)
        height = p1.journal.seq_next
        assert p1.take_forwarded(0, entries) == (2, 0)  # the first again, and the second
        assert p1.journal.seq_next == height + 1
        assert p1.take_forwarded(0, entries) == (2, 0)  # all of it again: nothing
        assert p1.journal.seq_next == height + 1
        p1.run_until_idle()
        assert p1.state(COUNTER, owned[1]) == {"count": 3, "events": 2}
        # p0 never journaled that p1 has them (the crash): it still owes both.
        assert p0.kernel.partition.backlog() == {1: 2}
    with LocalCluster(root) as cluster:  # opening asks p1's cursor first: nothing resent
        assert cluster.nodes[0].partition.backlog() == {}
        before = cluster.nodes[1].world.journal.seq_next
        cluster.run_until_idle()
        assert cluster.nodes[1].world.journal.seq_next == before
        assert cluster.state(COUNTER, owned[1]) == {"count": 3, "events": 2}
    for index in range(2):
        _verify(partition_dir(root, index))


def test_an_entry_for_another_partition_is_refused(tmp_path: Path) -> None:
    init_cluster(tmp_path / "c", counter_air(tmp_path), 2)
    with World.open(partition_dir(tmp_path / "c", 1)) as p1:
        stray = Outgoing(0, 1, 0, EVENT, b"\xa0")
        with pytest.raises(UsageError, match="an entry for partition 0 sent to 1"):
            p1.take_forwarded(0, [stray])


def test_outbox_and_cursors_survive_a_checkpoint_and_a_reopen(tmp_path: Path) -> None:
    owned = keys_owned_by(2)
    init_cluster(tmp_path / "c", counter_air(tmp_path), 2)
    root = tmp_path / "c"
    with World.open(partition_dir(root, 0)) as p0:
        p0.send_many([(EVENT, add(owned[1], n)) for n in (1, 2, 3)])
        p0.snapshot()
        assert p0.kernel.partition is not None
        p0.outbox_delivered(1, (1, 0))  # after the checkpoint: replayed at open
    with World.open(partition_dir(root, 0)) as p0:
        assert p0.kernel.partition is not None
        assert [e.seq for e in p0.kernel.partition.pending(1, 9)] == [2, 3]
    with LocalCluster(root) as cluster:
        cluster.run_until_idle()
        assert cluster.state(COUNTER, owned[1]) == {"count": 5, "events": 2}
    for index in range(2):
        _verify(partition_dir(root, index))


def test_forwarding_goes_in_batches_and_keeps_the_source_order(tmp_path: Path) -> None:
    owned = keys_owned_by(2)
    init_cluster(tmp_path / "c", counter_air(tmp_path), 2)
    with LocalCluster(tmp_path / "c") as cluster:
        cluster.nodes[0].send([(EVENT, add(owned[1], n)) for n in range(1, 8)], [None] * 7)
        assert forward(cluster.nodes[0], cluster.node, limit=3) == 3
        assert cluster.nodes[0].partition.backlog() == {1: 4}
        cluster.run_until_idle()
        values = [
            r.body["origin"][1]
            for r in cluster.nodes[1].world.journal.read(0)
            if r.kind == "event.in"
        ]
        assert values == sorted(values)
        assert len(values) == 7
        assert cluster.state(COUNTER, owned[1]) == {"count": 28, "events": 7}


def test_not_a_cluster_and_not_a_partition_are_named(tmp_path: Path) -> None:
    with pytest.raises(NotACluster, match="not a partitioned world"):
        LocalCluster(tmp_path)
    air = counter_air(tmp_path)
    World.create(tmp_path / "plain", air).close()
    from world.cluster import PartitionNode

    with pytest.raises(NotACluster, match="not a partition"):
        PartitionNode(tmp_path / "plain")
    with pytest.raises(InvalidArgument, match="between 1 and 1024"):
        init_cluster(tmp_path / "c", air, 0)


def _verify(path: Path) -> None:
    """``world replay --verify`` of one partition: from genesis, every record compared."""
    from typer.testing import CliRunner

    from cli.main import app

    result = CliRunner().invoke(app, ["replay", str(path), "--verify"])
    assert result.exit_code == 0, result.output


assert COUNTER_AIR.exists()


def test_the_rounds_limit_stops_a_busy_cluster(tmp_path: Path) -> None:
    from air.errors import LimitExceeded

    init_cluster(tmp_path / "c", counter_air(tmp_path), 2)
    with LocalCluster(tmp_path / "c") as cluster:
        cluster.send_many(workload(20, 5))
        with pytest.raises(LimitExceeded, match="rounds"):
            cluster.run_until_idle(max_rounds=1)
        cluster.run_until_idle()  # and goes on from there
        assert sum(1 for _ in cluster.cells(COUNTER)) == 5


HOSTILE_ENTRIES = [
    # (what a peer sends, what the owner says); nothing of the batch is journaled
    (Outgoing(1, 5, 0, "no/Such@1", b"\xa0"), "unknown schema no/Such@1"),
    (Outgoing(1, 5, 0, EVENT, b"\xff\xff"), "break code"),
    (Outgoing(1, 5, 0, EVENT, b"\x19\x00\x05"), "canonical|shortest"),  # 5 in 2 bytes
    (Outgoing(1, 5, 0, EVENT, b"\xa1akaq"), "unknown field 'k'"),  # not a CounterEvent
    (Outgoing(1, 5, 0, EVENT, b"", ("no/Reducer@1", None)), "premature end"),
    (Outgoing(0, 5, 0, EVENT, b"\xa0"), "an entry for partition 0 sent to 1"),
]


@pytest.mark.parametrize(("entry", "said"), HOSTILE_ENTRIES)
def test_a_hostile_entry_is_refused_and_nothing_of_its_batch_is_journaled(
    tmp_path: Path, entry: Outgoing, said: str
) -> None:
    from air import cbor

    owned = keys_owned_by(2)
    init_cluster(tmp_path / "c", counter_air(tmp_path), 2)
    good = Outgoing(1, 4, 0, EVENT, cbor.dumps(add(owned[1], 1)))
    with World.open(partition_dir(tmp_path / "c", 1)) as p1:
        height = p1.journal.seq_next
        with pytest.raises(UsageError, match=f"(?i){said}") as refused:
            p1.take_forwarded(0, [good, entry])
        if entry.to == 1:  # the error names the entry
            assert isinstance(refused.value, InvalidArgument)
            assert refused.value.name == "entry"
            assert refused.value.value == "from partition 0, its seq 5 index 0"
        assert p1.journal.seq_next == height
        assert p1.stale is None  # refused before anything was appended
        assert p1.take_forwarded(0, [good]) == (4, 0)


def test_a_target_naming_no_reducer_is_refused(tmp_path: Path) -> None:
    from air import cbor

    owned = keys_owned_by(2)
    init_cluster(tmp_path / "c", counter_air(tmp_path), 2)
    value = cbor.dumps(add(owned[1], 1))
    with World.open(partition_dir(tmp_path / "c", 1)) as p1:
        with pytest.raises(InvalidArgument, match="no/Reducer@1"):
            p1.take_forwarded(0, [Outgoing(1, 4, 0, EVENT, value, ("no/Reducer@1", None))])
        with pytest.raises(InvalidArgument, match="another partition of 2"):
            p1.take_forwarded(1, [Outgoing(1, 4, 0, EVENT, value)])  # from itself


def test_a_cell_another_partition_owns_is_not_imported(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    owned = keys_owned_by(2)
    root = tmp_path / "c"
    init_cluster(root, counter_air(tmp_path), 2)
    with LocalCluster(root) as cluster:
        cluster.send_many([(EVENT, add(owned[0], 2)), (EVENT, add(owned[1], 3))])
        cluster.run_until_idle()
    runner = CliRunner()
    out = tmp_path / "p1.cells"
    key = json.dumps(owned[1])
    done = runner.invoke(app, ["cells", "export", str(root / "p1"), COUNTER, key, "-o", str(out)])
    assert done.exit_code == 0, done.output
    refused = runner.invoke(app, ["cells", "import", str(root / "p0"), str(out), "--trust"])
    assert refused.exit_code == 1
    assert "partition 1 of 2 owns it, not this one (0)" in refused.output
    with World.open(root / "p0", readonly=True) as p0:
        assert p0.state(COUNTER, owned[1]) is None
    again = runner.invoke(app, ["cells", "import", str(root / "p1"), str(out), "--force"])
    assert again.exit_code == 0, again.output


def test_an_upgrade_is_proposed_to_every_partition_then_applied_in_each(
    tmp_path: Path, fixed_wasm: bytes
) -> None:
    from test_upgrade_apply import counter_air as versioned
    from typer.testing import CliRunner

    from cli.main import app
    from world.cluster import upgrade_cluster
    from world.gov import applied, proposals

    owned = keys_owned_by(4)
    root = tmp_path / "c"
    init_cluster(root, versioned(tmp_path, "v1"), 4)
    with LocalCluster(root) as cluster:
        cluster.send_many([(EVENT, add(owned[i], 1)) for i in range(4)])
        cluster.run_until_idle()
    v2 = versioned(tmp_path, "v2", fixed_wasm)
    # A partition that fails its apply half-way (here: its proposal applied by hand first
    # in p0 only, as if the upgrade had stopped after p0).
    with World.open(partition_dir(root, 0)) as p0:
        from world.gov import apply, propose

        made, _ = propose(p0, v2, "fix")
        apply(p0, made.id)
    info = CliRunner().invoke(app, ["cluster", "info", str(root)])
    assert "the partitions run 2 AIRs" in info.output
    rows = upgrade_cluster(root, v2, "fix")
    assert rows[0] == {"partition": 0, "skipped": True}
    assert all("applied" in row for row in rows[1:])
    hashes = set()
    for index in range(4):
        with World.open(partition_dir(root, index), readonly=True) as world:
            hashes.add(world.air.manifest_hash)
            assert len(applied(world)) == 1  # one apply record per partition
            assert len(proposals(world)) == 1
    assert len(hashes) == 1
    again = upgrade_cluster(root, v2, "fix")  # run again: every partition runs it already
    assert all(row.get("skipped") for row in again)
    with LocalCluster(root) as cluster:  # new steps run the fixed module; the world goes on
        cluster.send_many([(EVENT, add(owned[i], 0)) for i in range(4)])
        cluster.run_until_idle()
    for index in range(4):
        _verify(partition_dir(root, index))


def fanning_reducer_air(folder: Path, keys: list[str]) -> Path:
    """The counter world and a non-keyed reducer (hostile in volume: the most events a step
    may emit) whose every step emits an ``Add`` of 1 to each of ``keys``."""
    from worldkit import const_wasm, output

    counter_with_plans(folder, [], [])
    emitted = [(EVENT, add(key, 1)) for key in keys]
    (folder / "fan.wasm").write_bytes(const_wasm(output({}, emitted)))
    module_doc, manifest_doc = json.loads((folder / "counter.air.json").read_text())
    manifest_doc["routing"]["events"].append({"event": "t/Go@1", "reducer": "t/Fan@1"})
    (folder / "counter.air.json").write_text(json.dumps([module_doc, manifest_doc]))
    docs = [
        {"$kind": "defschema", "name": "t/Go@1", "type": {"record": {"n": "nat"}}},
        {"$kind": "defschema", "name": "t/FanState@1", "type": {"record": {}}},
        {
            "$kind": "defmodule",
            "name": "t/Fan@1",
            "module_kind": "reducer",
            "wasm": "fan.wasm",
            "abi": {"reducer": {"state": "t/FanState@1", "event": "t/Go@1"}},
        },
    ]
    (folder / "plans.air.json").write_text(json.dumps(docs))
    return folder


def test_a_step_emitting_the_most_events_a_step_may_to_every_partition_is_forwarded_once(
    tmp_path: Path,
) -> None:
    from kernel._core import EVENTS_PER_STEP_MAX

    keys = [f"h{i}" for i in range(EVENTS_PER_STEP_MAX)]
    air = fanning_reducer_air(tmp_path / "air", keys)
    init_cluster(tmp_path / "c", air, 4)
    with LocalCluster(tmp_path / "c") as cluster:
        cluster.send_many([("t/Go@1", {"n": 1}), ("t/Go@1", {"n": 2})])
        cluster.run_until_idle()
        assert {owner(k) for k in keys} == {0, 1, 2, 3}
        for key in keys:
            assert cluster.state(COUNTER, key) == {"count": 2, "events": 2}, key
        step = next(
            r for r in cluster.nodes[0].world.journal.read(0) if r.body.get("reducer") == "t/Fan@1"
        )
        assert len(step.body["events"]) == EVENTS_PER_STEP_MAX  # the step's record holds them
    for index in range(4):
        _verify(partition_dir(tmp_path / "c", index))


def test_why_ends_at_a_forwarded_event_naming_the_partition_it_came_from(tmp_path: Path) -> None:
    from world.history import why

    owned = keys_owned_by(4)
    init_cluster(tmp_path / "c", fan_air(tmp_path / "air"), 4)
    with LocalCluster(tmp_path / "c") as cluster:
        [(_p, fan_seq)] = cluster.send_many([(FAN, {"a": owned[1], "b": owned[2], "c": owned[3]})])
        cluster.run_until_idle()
    answer = why(partition_dir(tmp_path / "c", 2), COUNTER, owned[2])
    assert [c.kind for c in answer.chain] == ["step", "event.in"]
    assert answer.ends.startswith("forwarded from partition 0 (its record ")
    # ... and in partition 0 that record is the plan's step that raised it, from the fan event.
    seq = int(answer.ends.split("its record ")[1].split(",")[0])
    with World.open(partition_dir(tmp_path / "c", 0), readonly=True) as p0:
        raised = next(iter(p0.journal.read(seq)))
        assert raised.kind == "plan.step"
        started = next(r for r in p0.journal.read(0) if r.kind == "plan.started")
        assert started.body["src"] == fan_seq


def test_a_partition_is_not_migrated_to_cells(tmp_path: Path) -> None:
    """A migration writes a new genesis: the partition would stop being one."""
    from world.errors import MigrationRefused
    from world.moves import migrate_cells

    from worldkit import ROOT

    init_cluster(tmp_path / "c", ROOT / "manifests" / "counter_v1", 2)
    with pytest.raises(MigrationRefused, match="a partition of a partitioned world"):
        migrate_cells(partition_dir(tmp_path / "c", 0), COUNTER, "key")
    assert (partition_dir(tmp_path / "c", 0) / "journal").is_dir()  # untouched


def test_world_info_of_a_partition_says_which_it_is_and_what_it_owes(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    owned = keys_owned_by(2)
    init_cluster(tmp_path / "c", counter_air(tmp_path), 2)
    with World.open(partition_dir(tmp_path / "c", 0)) as p0:
        p0.send(EVENT, add(owned[1], 5))
    runner = CliRunner()
    done = runner.invoke(app, ["info", str(tmp_path / "c" / "p0"), "--json"])
    assert json.loads(done.stdout)["partition"] == {
        "index": 0,
        "count": 2,
        "outbox": {"1": 1},
        "cursors": {},
    }
    shown = runner.invoke(app, ["info", str(tmp_path / "c" / "p0")]).stdout
    assert "0 of 2; owes 1 event(s) to others" in shown
    plain = tmp_path / "plain"
    World.create(plain, counter_air(tmp_path / "x")).close()
    assert "partition" not in json.loads(runner.invoke(app, ["info", str(plain), "--json"]).stdout)
