"""The kernel core through the world API, on real files: routing, cells, fairness, tick
visibility, failures, limits, locking, and the decomposed engine loop."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from air import cbor
from air.errors import LimitExceeded, UsageError, ValueMismatch
from kernel import KernelLimits
from world import Engine, EventRejected, World, WorldExists
from world.errors import WorldLocked
from world.history import verify_world

from worldkit import (
    COUNTER,
    COUNTER_AIR,
    EVENT,
    ROOT,
    add,
    body_wasm,
    const_wasm,
    manifest,
    module,
    output,
    schema,
    write_world_air,
)

PING = "t/Ping@1"
UNIT_STATE = "t/S@1"


def _steps(world: World) -> list[tuple[str, str]]:
    return [(r.kind, r.subject) for r in world.journal.read(0) if r.kind.startswith("step")]


def test_keyed_routing_creates_a_cell_per_key_and_clear_deletes_it(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        world.send_many([(EVENT, add("a", 2)), (EVENT, add("b", 5)), (EVENT, add("a", 3))])
        assert world.run_until_idle() == 3
        assert world.state(COUNTER, "a") == {"count": 5, "events": 2}
        assert world.cell_count(COUNTER) == 2
        world.send(EVENT, {"key": "a", "op": "Clear"})
        world.run_until_idle()
        assert world.state(COUNTER, "a") is None
        assert [v.key for v in world.cells(COUNTER)] == ["b"]
    with World.open(tmp_path / "w") as world:
        assert world.state(COUNTER, "b") == {"count": 5, "events": 1}
        assert world.cell_count(COUNTER) == 1


def test_a_cell_pins_the_manifest_hash_at_creation(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        world.send(EVENT, add("a", 1))
        world.run_until_idle()
        (view,) = world.cells(COUNTER)
        assert "blake3:" + view.entry.manifest_hash.hex() == world.air.manifest_hash
        assert view.entry.last_active == world.journal.seq_next - 1


def test_a_hot_key_does_not_starve_a_cold_one(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        world.send_many([(EVENT, add("hot", 1))] * 10_000)
        world.send(EVENT, add("cold", 1))
        assert world.step(2) == 2
        assert world.state(COUNTER, "cold") == {"count": 1, "events": 1}
        assert world.state(COUNTER, "hot") == {"count": 1, "events": 1}


def test_v1_world_gives_the_same_per_key_results_as_cells(tmp_path: Path) -> None:
    events = [(EVENT, add(k, n)) for n, k in enumerate(["x", "y", "x", "z", "y", "x"], start=1)]
    events.append((EVENT, {"key": "z", "op": "Clear"}))
    with (
        World.create(tmp_path / "cells", COUNTER_AIR) as keyed,
        World.create(tmp_path / "v1", ROOT / "manifests" / "counter_v1") as v1,
    ):
        keyed.send_many(events)
        v1.send_many(events)
        keyed.run_until_idle()
        v1.run_until_idle()
        whole = v1.state(COUNTER)
        assert whole == {v.key: v.state for v in keyed.cells(COUNTER)}
        assert set(whole) == {"x", "y"}


def _emitter_world(tmp_path: Path) -> Path:
    s = {"record": {"n": "nat"}}
    return write_world_air(
        tmp_path / "air",
        {
            "t/A@1": const_wasm(output({"n": 1}, [(PING, {"n": 7})])),
            "t/B@1": const_wasm(output({"n": 2})),
            "t/C@1": const_wasm(output({"n": 3})),
        },
        [
            schema(UNIT_STATE, s),
            schema("t/Start@1", s),
            schema(PING, s),
            schema("t/Other@1", s),
            module("t/A@1", UNIT_STATE, "t/Start@1"),
            module("t/B@1", UNIT_STATE, PING),
            module("t/C@1", UNIT_STATE, "t/Other@1"),
            manifest(
                [
                    {"event": "t/Start@1", "reducer": "t/A@1"},
                    {"event": PING, "reducer": "t/B@1"},
                    {"event": "t/Other@1", "reducer": "t/C@1"},
                ]
            ),
        ],
    )


def test_events_a_step_emits_run_no_earlier_than_the_next_tick(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", _emitter_world(tmp_path)) as world:
        world.send_many([("t/Start@1", {"n": 0}), ("t/Other@1", {"n": 0})])
        world.step(1)
        assert world.state("t/B@1") is None
        assert world.kernel.scheduler.pending == 2
        world.step(1)
        assert world.state("t/C@1") == {"n": 3}
        assert world.state("t/B@1") is None, "B was queued behind C, which was ready first"
        world.step(1)
        assert world.state("t/B@1") == {"n": 2}
        subjects = [s for _, s in _steps(world)]
        assert subjects == [
            "/world/reducer/t/A@1/step",
            "/world/reducer/t/C@1/step",
            "/world/reducer/t/B@1/step",
        ]


def test_events_per_step_limit_fails_the_step_not_the_world(tmp_path: Path) -> None:
    limits = KernelLimits(events_per_step_max=0)
    with World.create(tmp_path / "w", _emitter_world(tmp_path), limits) as world:
        world.send("t/Start@1", {"n": 0})
        world.run_until_idle()
        (letter,) = world.kernel.dead_letters.letters
        assert letter.code == "events_per_step_max"
        assert world.state("t/A@1") is None


def _storm_world(tmp_path: Path) -> Path:
    s = {"record": {"n": "nat"}}
    return write_world_air(
        tmp_path / "air",
        {"t/Loop@1": const_wasm(output({"n": 1}, [(PING, {"n": 1}), (PING, {"n": 2})]))},
        [
            schema(UNIT_STATE, s),
            schema(PING, s),
            module("t/Loop@1", UNIT_STATE, PING),
            manifest([{"event": PING, "reducer": "t/Loop@1"}]),
        ],
    )


def test_an_event_storm_stops_at_the_step_limit_and_the_world_reopens(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", _storm_world(tmp_path)) as world:
        world.send(PING, {"n": 0})
        with pytest.raises(LimitExceeded) as info:
            world.run_until_idle(max_steps=50)
        assert info.value.limit == "steps_per_run_max"
        seq_next = world.journal.seq_next
    with World.open(tmp_path / "w") as world:
        assert world.journal.seq_next == seq_next
        assert world.kernel.scheduler.pending == 51
        assert world.step(3) == 3


@pytest.mark.parametrize(
    ("wasm", "code"),
    [
        pytest.param(body_wasm("unreachable"), "trap", id="trap"),
        pytest.param(
            body_wasm("(loop (br 0)) (i32.const 0) (i32.const 0)"),
            "fuel_exhausted",
            id="infinite-loop",
        ),
        pytest.param(const_wasm(b"\xff\x00"), "output_not_cbor", id="not-cbor"),
        pytest.param(
            body_wasm(
                "(loop (br_if 0 (i32.ne (memory.grow (i32.const 1)) (i32.const -1)))) unreachable"
            ),
            "memory_limit",
            id="memory-bomb",
        ),
        pytest.param(
            body_wasm("(drop (memory.grow (i32.const 40))) (i32.const 0) (i32.const 2000000)"),
            "output_too_large",
            id="output-too-large",
        ),
        pytest.param(
            const_wasm(output({"n": "text"})), "schema_mismatch", id="state-schema-mismatch"
        ),
        pytest.param(
            const_wasm(cbor.dumps({"state": cbor.dumps({"n": {"$tag": [1], "$value": None}})})),
            "schema_mismatch",
            id="state-of-the-wrong-shape",
        ),
        pytest.param(
            const_wasm(output({"n": 1}, [("t/Nope@1", {})])),
            "schema_mismatch",
            id="unknown-event-schema",
        ),
    ],
)
def test_a_hostile_reducer_fails_its_step_cleanly_and_the_world_keeps_running(
    tmp_path: Path, wasm: bytes, code: str
) -> None:
    s = {"record": {"n": "nat"}}
    air = write_world_air(
        tmp_path / "air",
        {"t/Bad@1": wasm, "t/Good@1": const_wasm(output({"n": 9}))},
        [
            schema(UNIT_STATE, s),
            schema(PING, s),
            schema("t/Other@1", s),
            module("t/Bad@1", UNIT_STATE, PING),
            module("t/Good@1", UNIT_STATE, "t/Other@1"),
            manifest(
                [
                    {"event": PING, "reducer": "t/Bad@1"},
                    {"event": "t/Other@1", "reducer": "t/Good@1"},
                ]
            ),
        ],
    )
    with World.create(tmp_path / "w", air) as world:
        world.send_many([(PING, {"n": 1}), ("t/Other@1", {"n": 1})])
        assert world.run_until_idle() == 2
        assert world.state("t/Bad@1") is None
        assert world.state("t/Good@1") == {"n": 9}
        (letter,) = world.kernel.dead_letters.letters
        assert code in letter.code
        assert world.info()["dead_letters_total"] == 1
        assert [k for k, _ in _steps(world)] == ["step.failed", "step"]
    with World.open(tmp_path / "w") as world:
        assert len(world.kernel.dead_letters.letters) == 1
        world.send(PING, {"n": 2})
        world.run_until_idle()
        assert len(world.kernel.dead_letters.letters) == 2
    assert verify_world(tmp_path / "w").ok, "step.failed records replay to the same failure"


def test_dead_letters_kept_is_a_bounded_window_but_the_total_counts_all(tmp_path: Path) -> None:
    s = {"record": {"n": "nat"}}
    air = write_world_air(
        tmp_path / "air",
        {"t/Bad@1": body_wasm("unreachable")},
        [
            schema(UNIT_STATE, s),
            schema(PING, s),
            module("t/Bad@1", UNIT_STATE, PING),
            manifest([{"event": PING, "reducer": "t/Bad@1"}]),
        ],
    )
    with World.create(tmp_path / "w", air, KernelLimits(dead_letters_kept=2)) as world:
        world.send_many([(PING, {"n": n}) for n in range(5)])
        world.run_until_idle()
        assert [letter.seq for letter in world.kernel.dead_letters.letters] == [9, 10]
        assert world.info()["dead_letters_total"] == 5


def test_a_second_writer_is_refused_with_a_lock_error(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", COUNTER_AIR), pytest.raises(WorldLocked):
        World.open(tmp_path / "w")
    World.open(tmp_path / "w").close()


def test_creating_over_an_existing_world_is_refused(tmp_path: Path) -> None:
    World.create(tmp_path / "w", COUNTER_AIR).close()
    with pytest.raises(WorldExists):
        World.create(tmp_path / "w", COUNTER_AIR)


def test_a_bad_event_in_a_batch_journals_nothing(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        before = world.journal.seq_next
        with pytest.raises(EventRejected) as caught:
            world.send_many(
                [(EVENT, add("a", 1)), (EVENT, {"key": "a", "op": {"$tag": "Add", "$value": -1}})]
            )
        assert caught.value.index == 1
        assert isinstance(caught.value.cause, ValueMismatch)
        assert world.journal.seq_next == before
        with pytest.raises(UsageError):
            world.send("demo/Nope@1", {})


def test_engine_cycles_ingest_pushes_from_other_threads(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        engine = Engine(world)
        engine.start()
        threads = [
            threading.Thread(
                target=lambda i=i: [engine.push(EVENT, add(f"k{i}", 1)) for _ in range(50)]
            )
            for i in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        import select

        assert select.select([engine.wakeup_fd], [], [], 0)[0] == [engine.wakeup_fd]
        steps = engine.process_one_cycle(max_wait=0.0)
        assert steps == 200
        assert engine.process_one_cycle(max_wait=0.0) == 0
        engine.push(EVENT, add("late", 2))
        assert engine.finish() == 1
        assert {v.key: v.state["count"] for v in world.cells(COUNTER)} == {
            "k0": 50,
            "k1": 50,
            "k2": 50,
            "k3": 50,
            "late": 2,
        }


def test_a_reducer_effect_is_journaled_with_its_step(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", ROOT / "manifests" / "timer") as world:
        world.send("demo/TimerEvent@1", {"key": "t1", "deliver_at_ns": 5_000})
        world.run_until_idle()
        assert world.state("demo/Timer@1", "t1") == {"armed": 1, "fired": 0, "last_fired_ns": None}
        (step,) = [r for r in world.journal.read(0) if r.kind == "step"]
        ((kind, params_cbor, _slot),) = step.body["effects"]
        assert kind == "timer.set"
        assert cbor.loads(params_cbor) == {"deliver_at_ns": 5_000, "key": "t1"}
