"""The partitioned world on a local Ray instance with 2 CPUs (``world.cluster.ray``): four
partition actors and a router over the same directories ``test_cluster.py`` drives in one
process. The cells end as one world's given the same events; a plan's events to three other
partitions arrive once each; SIGKILL of a partition's process in the middle of a run, and of
the router, loses nothing acknowledged and applies nothing twice, and every partition replays
exactly; a partition whose directory is damaged says what a single world says, and the others
go on."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cluster import (
    FAN,
    _verify,
    counter_air,
    fan_air,
    keys_owned_by,
    one_world,
    workload,
)

from air.errors import UsageError
from world import World
from world.cluster import init_cluster, partition_dir
from world.errors import StoreDamaged

from worldkit import COUNTER, EVENT, add

ray = pytest.importorskip("ray")
from world.cluster.ray import (  # noqa: E402
    NAMESPACE,
    RayCluster,
    disconnect,
    signal_handlers_kept,
    start_actors,
)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    with signal_handlers_kept():  # wasm traps in this process stay exceptions
        ray.init(
            address="local",  # a new instance, never one `world cluster up` started
            num_cpus=2,
            include_dashboard=False,
            namespace=NAMESPACE,
            object_store_memory=80 * 1024 * 1024,
            logging_level="ERROR",
            log_to_driver=False,
        )
    yield
    disconnect()


def up(root: Path) -> RayCluster:
    from world.cluster import Layout

    return RayCluster(root, start_actors(Layout.read(root), detached=False))


def cells_of(root: Path) -> dict[str, Any]:
    """Every partition's cells, read from disk after the actors closed."""
    found: dict[str, Any] = {}
    for index in range(4):
        with World.open(partition_dir(root, index), readonly=True) as world:
            found.update({json.dumps(c.key): c.state for c in world.cells(COUNTER)})
    return found


def test_four_partitions_on_ray_match_one_world_and_fan_out_exactly_once(
    local_ray: None, tmp_path: Path
) -> None:
    air = fan_air(tmp_path / "air")
    owned = keys_owned_by(4)
    fan = {"a": owned[1], "b": owned[2], "c": owned[3]}
    events = [*workload(400, 30), (FAN, fan), (FAN, fan)]
    expected = one_world(tmp_path / "one", air, events)
    root = tmp_path / "c"
    init_cluster(root, air, 4)
    cluster = up(root)
    try:
        placed = cluster.send_many(events[:200])  # through the router actor
        placed += cluster.send_many(events[200:], direct=True)  # routed by the client
        assert {p for p, _ in placed} == {0, 1, 2, 3}
        infos = cluster.wait_idle()
        assert all(i["ok"] for i in infos), infos
        assert len({i["pid"] for i in infos}) == 4  # a process each
        handle = cluster.handle()
        for index in (1, 2, 3):
            assert handle.state(COUNTER, owned[index]) == expected[json.dumps(owned[index])]
    finally:
        cluster.close_actors()
    assert cells_of(root) == expected
    for index in range(4):
        _verify(partition_dir(root, index))


@pytest.mark.long
def test_sigkill_of_a_partition_and_of_the_router_loses_nothing_and_repeats_nothing(
    local_ray: None, tmp_path: Path
) -> None:
    import random

    air = fan_air(tmp_path / "air")
    rng = random.Random(5)
    events = workload(6000, 200, seed=3)
    for at in range(0, 6000, 12):  # a plan in partition 0 raising to three cells anywhere
        fan = {slot: f"u{rng.randrange(200)}" for slot in ("a", "b", "c")}
        events.insert(at, (FAN, fan))
    expected = one_world(tmp_path / "one", air, events)
    root = tmp_path / "c"
    init_cluster(root, air, 4)
    cluster = up(root)
    try:
        pids = [ray.get(cluster.actor(what).pid.remote()) for what in ("p1", "router")]
        batches = [events[at : at + 250] for at in range(0, len(events), 250)]
        for number, batch in enumerate(batches):
            if number in (4, 14):  # while p1 runs the batches before, a send in flight
                victim = pids[0] if number == 4 else pids[1]
                threading.Timer(0.02, os.kill, (victim, signal.SIGKILL)).start()
            cluster.send_many(batch)  # acknowledged: durable in its partitions
        assert ray.get(cluster.actor("p1").pid.remote()) != pids[0]  # restarted by Ray
        assert ray.get(cluster.actor("router").pid.remote()) != pids[1]
        infos = cluster.wait_idle()
        assert all(i["ok"] for i in infos), infos
    finally:
        cluster.close_actors()
    assert cells_of(root) == expected
    for index in range(4):
        _verify(partition_dir(root, index))


def test_a_damaged_partition_says_what_a_single_world_says_and_the_others_go_on(
    local_ray: None, tmp_path: Path
) -> None:
    air = counter_air(tmp_path)
    owned = keys_owned_by(4)
    root = tmp_path / "c"
    init_cluster(root, air, 4)
    (partition_dir(root, 2) / "air" / "manifest.cbor").write_bytes(b"\x00garbage")
    with pytest.raises(StoreDamaged) as single:
        World.open(partition_dir(root, 2))
    cluster = up(root)
    try:
        info = ray.get(cluster.partition(2).info.remote())
        assert info["ok"] is False
        assert info["failure"] == str(single.value)
        cluster.send_many([(EVENT, add(owned[1], 2)), (EVENT, add(owned[3], 4))])
        with pytest.raises(ray.exceptions.RayTaskError, match="partition 2 stopped") as sent:
            cluster.send_many([(EVENT, add(owned[2], 1))])
        assert isinstance(sent.value.cause, UsageError)
        cluster.wait_idle()
        handle = cluster.handle()
        assert handle.state(COUNTER, owned[1]) == {"count": 2, "events": 1}
        assert handle.state(COUNTER, owned[3]) == {"count": 4, "events": 1}
        with pytest.raises(UsageError, match="partition 2 stopped"):  # the handle says it too
            handle.state(COUNTER, owned[2])
        rows = handle.info().partitions  # type: ignore[attr-defined]
        assert [r["ok"] for r in rows] == [True, True, False, True]
    finally:
        cluster.close_actors()


def _script(h: Any, settle: Any, tmp: Path) -> list[Any]:
    """What the partitioned handle answers, as plain JSON (errors as class and fields)."""
    from test_ops_contract import _outcome

    owned = keys_owned_by(2)
    out: list[Any] = []
    sent = h.send_many(EVENT, [add(k, i + 1) for i, k in enumerate(sorted(owned.values()) * 3)])
    out.append(sorted(set(sent.partitions)))
    settle()
    out.append(_outcome(lambda: h.send_many(EVENT, [add(owned[0], 1), {"key": 5}])))
    for key in owned.values():
        out.append(_outcome(lambda k=key: h.state(COUNTER, k)))
        out.append(_outcome(lambda k=key: h.cell(COUNTER, k, at=1)))
        out.append(_outcome(lambda k=key: h.why(COUNTER, k).state))
        out.append(_outcome(lambda k=key: [e.get("kind") for e in h.cell_history(COUNTER, k)]))
    out.append(_outcome(lambda: h.cells(COUNTER, limit=1)))
    out.append(_outcome(lambda: h.state("demo/Nope@1", "a")))
    out.append(_outcome(lambda: h.runs()))
    out.append(_outcome(lambda: h.dead_letters()))
    out.append(_outcome(lambda: h.dead_letter("nope")))
    out.append(_outcome(lambda: h.effects()))
    out.append(_outcome(lambda: list(h.journal_tail())))
    out.append(_outcome(lambda: h.cells_upgrade(COUNTER, None)))
    out.append(_outcome(lambda: h.cells_export(COUNTER, tmp / "one.cbor", key=owned[1])))
    out.append(h.info().reducers)
    return out


def test_the_handle_of_partitions_on_ray_answers_as_the_partitions_open_here(
    local_ray: None, tmp_path: Path
) -> None:
    from world.cluster import open_cluster

    air = counter_air(tmp_path)
    init_cluster(tmp_path / "here", air, 2)
    with open_cluster(tmp_path / "here") as here:
        expected = _script(here, here.run_until_idle, tmp_path / "a")
    init_cluster(tmp_path / "ray", air, 2)
    cluster = up(tmp_path / "ray")
    try:
        answered = _script(cluster.handle(), cluster.wait_idle, tmp_path / "b")
    finally:
        cluster.close_actors()
    for number, (got, want) in enumerate(zip(answered, expected, strict=True)):
        assert got == want, number
    assert expected[0] == [0, 1]
    assert expected[1][:2] == ["error", "EventRejected"]
    assert {expected[2]["count"], expected[6]["count"]} == {1 + 3 + 5, 2 + 4 + 6}
    assert expected[-4][:2] == ["error", "WrongMode"]  # journal.tail of two partitions
    assert (tmp_path / "b" / "one.cbor").is_file()


def test_a_trapping_reducer_is_a_dead_letter_on_ray_and_in_this_process_after_it(
    local_ray: None, tmp_path: Path
) -> None:
    """A reducer's ``unreachable`` is a ``step.failed`` in a partition actor (Ray's crash
    handlers are there before the actor's wasm engine, whose handlers go over them), and in
    this process after Ray started here (the order that killed a process: the next test)."""
    from worldkit import body_wasm, manifest, module, schema, write_world_air

    air = write_world_air(
        tmp_path / "air",
        {"t/Trap@1": body_wasm("unreachable")},
        [
            schema("t/E@1", {"record": {"k": "text"}}),
            schema("t/S@1", {"record": {}}),
            module("t/Trap@1", "t/S@1", "t/E@1", "text"),
            manifest([{"event": "t/E@1", "reducer": "t/Trap@1", "key_field": "k"}]),
        ],
    )
    root = tmp_path / "c"
    init_cluster(root, air, 2)
    cluster = up(root)
    try:
        cluster.send_many([("t/E@1", {"k": f"k{i}"}) for i in range(6)])
        infos = cluster.wait_idle()
        assert all(i["ok"] for i in infos), infos
        assert sum(i["steps_failed"] for i in infos) == 6
    finally:
        cluster.close_actors()
    with World.create(tmp_path / "one", air) as one:  # here, after ray.init in this process
        one.send("t/E@1", {"k": "a"})
        one.run_until_idle()
        assert one.info()["steps_failed"] == 1


TRAPS_AROUND_RAY = """
import sys, wasmtime
from world.cluster.ray import disconnect, signal_handlers_kept
import ray

wasm = wasmtime.wat2wasm('(module (func (export "f") unreachable))')
engine = wasmtime.Engine()  # wasmtime's fault handlers are installed now, before Ray's


def trap(when):
    store = wasmtime.Store(engine)
    instance = wasmtime.Instance(store, wasmtime.Module(engine, wasm), [])
    try:
        instance.exports(store)["f"](store)
    except wasmtime.Trap:
        print("trap " + when, flush=True)


trap("before")
with signal_handlers_kept():
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
trap("after init")
disconnect()
trap("after shutdown")
"""


def test_a_wasm_trap_stays_an_exception_in_a_process_that_started_ray() -> None:
    """In a fresh process, a wasm engine first, then Ray: without ``signal_handlers_kept``
    the trap after ``ray.init`` was a SIGILL that killed the process (a CI worker died so)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", TRAPS_AROUND_RAY], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == ["trap before", "trap after init", "trap after shutdown"]
