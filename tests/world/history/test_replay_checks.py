"""Replay checks everything it can (issue 7, item 8): each forged record field, a different
reducer binary of the same ABI, the final state, pending deliveries and dead letters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from air import cbor
from kernel import Kernel
from kernel._core import ReplayDivergence
from kernel.cells import CellEntry, MemoryCellStore
from kernel.journal import JournalRecord, MemoryJournal
from world import World
from world._runner import HostRunner
from world.history import verify_world

from worldkit import (
    COUNTER,
    COUNTER_AIR,
    EVENT,
    add,
    body_wasm,
    const_wasm,
    manifest,
    module,
    output,
    schema,
    write_world_air,
)

STATE = "t/State@1"
PING = "t/Ping@1"


def _emitting_air(folder: Path, n: int) -> Path:
    """A reducer A that answers t/Start@1 with state {n} and emits one Ping to B."""
    s = {"record": {"n": "nat"}}
    return write_world_air(
        folder,
        {
            "t/A@1": const_wasm(output({"n": n}, [(PING, {"n": 7})])),
            "t/B@1": const_wasm(output({"n": 2})),
        },
        [
            schema(STATE, s),
            schema("t/Start@1", s),
            schema(PING, s),
            module("t/A@1", STATE, "t/Start@1"),
            module("t/B@1", STATE, PING),
            manifest(
                [
                    {"event": "t/Start@1", "reducer": "t/A@1"},
                    {"event": PING, "reducer": "t/B@1"},
                ]
            ),
        ],
    )


def _records(world_dir: Path) -> tuple[World, list[JournalRecord]]:
    world = World.open(world_dir, readonly=True)
    return world, list(world.journal.read(0))


def _replay(world: World, records: list[JournalRecord]) -> None:
    kernel = Kernel(
        world.air, MemoryJournal(), MemoryCellStore(), HostRunner(world.air, world.path / "cache")
    )
    for record in records:
        kernel.apply(record)


def _forged(record: JournalRecord, **body: Any) -> JournalRecord:
    return JournalRecord(record.seq, record.subject, record.kind, {**record.body, **body})


@pytest.fixture
def emitted_world(tmp_path: Path) -> Path:
    with World.create(tmp_path / "w", _emitting_air(tmp_path / "air", 1)) as world:
        world.send("t/Start@1", {"n": 0})
        world.run_until_idle()
    return tmp_path / "w"


@pytest.mark.parametrize(
    ("field", "forged"),
    [
        pytest.param("body.state_hash", bytes(32), id="state_hash"),
        pytest.param("body.src", 999, id="src"),
        pytest.param("body.events", [[PING, cbor.dumps({"n": 8})]], id="emitted events"),
    ],
)
def test_a_forged_step_field_diverges_naming_that_field_with_both_values(
    emitted_world: Path, field: str, forged: Any
) -> None:
    world, records = _records(emitted_world)
    with world:
        first_step = next(i for i, r in enumerate(records) if r.kind == "step")
        name = field.removeprefix("body.")
        original = records[first_step].body[name]
        records[first_step] = _forged(records[first_step], **{name: forged})
        with pytest.raises(ReplayDivergence) as caught:
            _replay(world, records)
    divergence = caught.value
    assert divergence.seq == records[first_step].seq
    assert divergence.field.startswith(field)
    assert divergence.expected != divergence.actual
    if name == "state_hash":
        assert divergence.actual == cbor.raw_to_hash(original)
    if name == "src":
        assert (divergence.expected, divergence.actual) == ("999", repr(original))


def test_a_different_reducer_binary_of_the_same_abi_diverges_at_its_first_step(
    emitted_world: Path, tmp_path: Path
) -> None:
    with World.create(tmp_path / "other", _emitting_air(tmp_path / "air2", 5)) as other:
        world, records = _records(emitted_world)
        with world:
            kernel = Kernel(
                other.air,
                MemoryJournal(),
                MemoryCellStore(),
                HostRunner(other.air, tmp_path / "cache"),
            )
            genesis, *rest = records

            def replay_rest() -> None:
                for record in rest:
                    kernel.apply(record)

            with pytest.raises(ReplayDivergence) as caught:
                replay_rest()
    assert caught.value.seq == next(r.seq for r in rest if r.kind == "step")
    assert caught.value.field == "body.out_hash"
    assert genesis.kind == "world.created"


def test_verify_passes_on_a_world_that_ran_and_checkpointed(emitted_world: Path) -> None:
    with World.open(emitted_world) as world:
        world.send("t/Start@1", {"n": 1})  # one pending delivery across the checkpoint
        world.snapshot()
    report = verify_world(emitted_world)
    assert report.ok, report
    assert (report.mismatches, report.damaged) == ([], [])


def test_verify_catches_a_stored_state_that_differs_from_the_journal(tmp_path: Path) -> None:
    """The planted bug 'replay without the final state comparison' fails here."""
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        world.send(EVENT, add("a", 3))
        world.run_until_idle()
        module_hash = world.kernel.cell_space(COUNTER)
        key_cbor = world.key_cbor(COUNTER, "a")
        kh = cbor.digest(key_cbor)
        entry, _state = world.store.get(module_hash, kh) or (None, b"")
        assert entry is not None
        forged = cbor.dumps({"count": 4, "key": "a"})
        world.store.put(
            module_hash,
            kh,
            CellEntry.of(
                key_cbor, forged, last_active=entry.last_active, manifest_hash=entry.manifest_hash
            ),
            forged,
        )
    report = verify_world(tmp_path / "w")
    assert not report.ok
    assert report.state_mismatches == [COUNTER]
    assert report.divergence is None


def test_verify_catches_a_pending_delivery_lost_from_the_checkpoint(tmp_path: Path) -> None:
    """The planted bug 'replay blind to a lost pending delivery' fails here."""
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        world.send_many([(EVENT, add("a", 1)), (EVENT, add("b", 2))])
        world.kernel.scheduler.consume()  # lose one delivery without journaling a step
        world.snapshot()
    report = verify_world(tmp_path / "w")
    assert not report.ok
    fields = [m.field for m in report.mismatches]
    assert fields[0].startswith("scheduler")
    assert report.mismatches[0].expected != report.mismatches[0].actual


def test_verify_catches_a_dead_letter_missing_from_the_checkpoint(tmp_path: Path) -> None:
    air = write_world_air(
        tmp_path / "air",
        {"t/T@1": body_wasm("(unreachable)")},
        [
            schema(STATE, {"record": {"n": "nat"}}),
            schema("t/Start@1", {"record": {"n": "nat"}}),
            module("t/T@1", STATE, "t/Start@1"),
            manifest([{"event": "t/Start@1", "reducer": "t/T@1"}]),
        ],
    )
    with World.create(tmp_path / "w", air) as world:
        world.send("t/Start@1", {"n": 0})
        world.run_until_idle()
        assert [d.code for d in world.kernel.dead_letters.letters] == ["trap"]
        world.kernel.dead_letters.letters.clear()
        world.snapshot()
    report = verify_world(tmp_path / "w")
    assert [m.field.split(".")[0] for m in report.mismatches] == ["dead_letters"]


def test_verify_reports_a_missing_cell_state_instead_of_identical(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        world.send(EVENT, add("a", 3))
        world.run_until_idle()
    # The state is small, so it lives in its shard: the one shard object of the store.
    checkpoint = cbor.loads(
        (tmp_path / "w" / "state" / "reducers" / "checkpoint.cbor").read_bytes()
    )
    (index_raw,) = checkpoint["modules"].values()
    index = cbor.loads(
        (tmp_path / "w" / "cas" / index_raw.hex()[:2] / index_raw.hex()[2:]).read_bytes()
    )
    ((_root, _count, shard_raw),) = index["shards"].values()
    cell_file = tmp_path / "w" / "cas" / shard_raw.hex()[:2] / shard_raw.hex()[2:]
    cell_file.unlink()
    report = verify_world(tmp_path / "w")
    assert not report.ok
    assert any(str(cell_file) in d for d in report.damaged)
