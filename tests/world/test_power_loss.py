"""Power loss at every kind of durable write: after the cut, the world opens, whole, with
everything acknowledged before it.

Each scenario runs the world's durable operations for real under the power-loss fake
(``powerloss.PowerLoss``), which at a chosen operation keeps only what the code had made durable
(fsyncs of files, fsyncs of directories, ``sync()``), POSIX-strict: the worst case drops every
change not synced; seeded cuts keep a random part of the unsynced window, as a disk may. After
each cut the image is opened as a user would (a writable open: recovery runs), and:

- every journal record acknowledged before the cut (a call that returned) is there, unchanged;
- derived state is whole: no "derived state damaged" rebuild (a checkpoint is atomic: the old
  one or the new one, never a damaged one);
- what the scenario acknowledged besides (an export, a migration, a repair, a fork) holds;
- a batch of inputs (a send of many events, an import) is there whole or not at all;
- an upgrade (``apply``, ``cell_upgrade``) leaves one era or the other, never a mix: the world
  is in the era its journal says, every cell wholly in one, and running the rest of it again
  finishes it (``upgrade_fault_child.one_era``, ``finish``).

Cut points: for a scenario of N operations, about 48 spread evenly plus every operation next
to a rename, a truncation or a ``sync()`` (the commit points), with the worst case; and, at up
to 8 points where a write waits for its sync, four seeded cuts, one for each way the unsynced
bytes may be torn. The number of cuts is fixed by the scenario, never by time.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
from powerloss import count_operations, run_with_cut
from upgrade_fault_child import (
    BATCH,
    COUNTER_2,
    V2_AIR,
    finish,
    make_world,
    one_era,
    records_of,
)
from world_fault_child import NO_FLUSH, no_flush

from air.errors import WorldError
from kernel.errors import JournalCorrupt
from kernel.journal import decode_record_fast
from world import World
from world import _fileio as fileio
from world._archive import archive_world
from world._repair import DAMAGE_MARK, check_world, repair_world
from world.cellstore import FileCellStore
from world.gov import apply, proposal_air, proposals, propose, upgrade_cells
from world.history import fork_world, verify_world
from world.journal import FileJournal
from world.moves import Trust, export_all, import_path, migrate_cells, read_tree

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT, add

COUNTER_V1_AIR = ROOT / "manifests" / "counter_v1"


@dataclass(frozen=True)
class Depth:
    """How many points of a scenario are cut."""

    spread: int
    """Cuts spread evenly over a scenario's operations."""
    moments: int
    """Renames, syncs and truncations cut just before and just after (``_cut_points``)."""
    seeded: int
    """Torn writes (a write then its fsync) cut four ways each (``tests/powerloss.py``)."""


DEPTHS = {"main": Depth(8, 4, 2), "long": Depth(32, 16, 6)}
"""The main suite cuts a few points of each scenario, one of each kind among them; the long
variants (``-m long``, run by ``.ci/run`` after the main suite) cut four times as many."""

Record = tuple[int, str, str, Any]


@dataclass
class Acked:
    """What the scenario was told is done: per world folder, its journal as committed."""

    records: dict[str, list[Record]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)


def _records(path: Path) -> list[Record]:
    with FileJournal.open(path / "journal", readonly=True) as journal:
        return [(r.seq, r.subject, r.kind, r.body) for r in journal.read(0)]


def _ack(acked: Acked, name: str, world: World) -> None:
    committed = world.journal.seq_next_committed
    acked.records[name] = _records(world.path)[:committed]


Step = Callable[[Path, Acked], None]
Check = Callable[[Path, Acked], None]


@dataclass(frozen=True)
class Scenario:
    """``setup`` builds the starting worlds (once, without the fake; copied for every cut),
    ``run`` is what the power is cut in, ``check`` what must hold in the image."""

    setup: Step | None
    run: Step
    check: Check


# --- scenarios --------------------------------------------------------------------------------


def journal_and_checkpoint(root: Path, acked: Acked) -> None:
    with World.create(root / "w", COUNTER_AIR) as world:
        _ack(acked, "w", world)
        world.send(EVENT, add("a", 1))
        _ack(acked, "w", world)
        world.send_many([(EVENT, add(f"k{i}", i)) for i in range(5)])
        _ack(acked, "w", world)
        world.run_until_idle()
        _ack(acked, "w", world)
        world.snapshot()
        _ack(acked, "w", world)
        world.send(EVENT, add("b", 2))
        world.step()
        _ack(acked, "w", world)
    with World.open(root / "w") as world:
        world.send(EVENT, add("a", 5))
        world.run_until_idle()
        _ack(acked, "w", world)


@pytest.fixture
def no_real_flushes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real ``fsync``, ``fdatasync`` and ``sync`` do nothing (as in the crash tests,
    ``world_fault_child.no_flush``): what survives a cut is the fake's model, written from what
    the code asked for, so a real flush changes nothing the checks see; and each one, a
    machine-wide ``sync()`` above all, waits on the disk, which was most of a scenario's time."""
    for name in NO_FLUSH:
        monkeypatch.setattr(os, name, no_flush)
    monkeypatch.setattr(fileio, "_sync_data", no_flush)


@pytest.fixture
def small_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counter states go out of line (one CAS object each), so a checkpoint writes many."""
    defaults = dict(FileCellStore.__init__.__kwdefaults__ or {})
    monkeypatch.setattr(
        FileCellStore.__init__, "__kwdefaults__", {**defaults, "cell_inline_bytes_max": 17}
    )


def counter_world(cells: int) -> Step:
    def setup(root: Path, acked: Acked) -> None:
        with World.create(root / "w", COUNTER_AIR) as world:
            world.send_many([(EVENT, add(f"k{i}", 1000 + i)) for i in range(cells)])
            world.run_until_idle()
        with World.open(root / "w", readonly=True) as world:
            _ack(acked, "w", world)
        acked.facts["before"] = len(acked.records["w"])

    return setup


def many_objects(root: Path, acked: Acked) -> None:
    with World.open(root / "w") as world:
        world.snapshot()  # 40 out-of-line states: written from threads, then one sync()
        _ack(acked, "w", world)
        world.send_many([(EVENT, add(f"k{i}", 7)) for i in range(0, 40, 2)])
        world.run_until_idle()
        world.snapshot()  # half of them replaced: the old ones collected
        _ack(acked, "w", world)


def export_and_import(root: Path, acked: Acked) -> None:
    with World.open(root / "w") as world:
        export_all(world, COUNTER, root / "export")
        acked.facts["exported"] = 5
    with World.create(root / "copy", COUNTER_AIR) as world:
        _ack(acked, "copy", world)
        import_path(world, root / "export", Trust(any_signer=True))  # another world's
        _ack(acked, "copy", world)


def batch(size: int) -> Scenario:
    """A send of ``size`` events in one atomic batch: 300 (many frames, many pages), and the
    smallest ones, 2 (a batch whose only partial state is its first record alone) and 1 (no
    marker: one frame is whole or torn by itself)."""

    def run(root: Path, acked: Acked) -> None:
        with World.open(root / "w") as world:
            world.send_many([(EVENT, add(f"b{i % 7}", i + 1)) for i in range(size)])
            _ack(acked, "w", world)

    def check(image: Path, acked: Acked) -> None:
        """The batch is all there or not at all, acknowledged or not (a torn write of it,
        which the seeded cuts make, leaves no prefix of it)."""
        check_worlds(image, acked)
        records = _records(image / "w")
        assert len(records) - acked.facts["before"] in (0, size)

    return Scenario(counter_world(3), run, check)


def _batch_with_ids(prefix: str, count: int) -> tuple[list[tuple[str, Any]], list[str | None]]:
    return [(EVENT, add(f"b{i % 5}", 1)) for i in range(count)], [
        f"{prefix}-{i}" for i in range(count)
    ]


def ids_sent(root: Path, acked: Acked) -> None:
    """A world whose index (``world._event_ids``) holds a batch's ids."""
    counter_world(3)(root, acked)
    with World.open(root / "w") as world:
        events, ids = _batch_with_ids("a", 40)
        world.send_many(events, ids=ids)
        _ack(acked, "w", world)


def retried_batch(root: Path, acked: Acked) -> None:
    """The batch sent again with a new one, that one again, a checkpoint, another session."""
    with World.open(root / "w") as world:
        events, ids = _batch_with_ids("a", 40)
        more_events, more_ids = _batch_with_ids("b", 30)
        world.send_many(events + more_events, ids=ids + more_ids)
        _ack(acked, "w", world)
        world.send_many(more_events, ids=more_ids)
        world.snapshot()
        _ack(acked, "w", world)
    with World.open(root / "w") as world:
        world.send_many(events + more_events, ids=ids + more_ids)
        _ack(acked, "w", world)


def check_retried_batch(image: Path, acked: Acked) -> None:
    """No id is journaled twice, and the retry of both batches after the cut journals only
    what is not there yet (the index is SQLite's, written outside the fake: the image holds
    it as it was before the run, behind the journal)."""
    check_worlds(image, acked)
    events, ids = _batch_with_ids("a", 40)
    more_events, more_ids = _batch_with_ids("b", 30)
    with World.open(image / "w") as world:
        world.send_many(events + more_events, ids=ids + more_ids)
        journaled = [r.body["id"] for r in world.journal.read(0) if "id" in r.body]
    assert sorted(journaled) == sorted(ids + more_ids)


def v1_world(root: Path, acked: Acked) -> None:
    with World.create(root / "v1", COUNTER_V1_AIR) as world:
        world.send_many([(EVENT, add(["a", "b", "c"][i % 3], i)) for i in range(6)])
        world.run_until_idle()
        _ack(acked, "v1", world)
    acked.facts["old"] = acked.records["v1"]


def migration(root: Path, acked: Acked) -> None:
    migrate_cells(root / "v1", COUNTER, "key")
    acked.facts["migrated"] = True
    acked.records["v1"] = _records(root / "v1")


def damaged_world(root: Path, acked: Acked) -> None:
    with World.create(root / "w", COUNTER_AIR) as world:
        for i in range(6):
            world.send(EVENT, add("a", i + 1))
    _damage(sorted((root / "w" / "journal").glob("*.log"))[-1])


def repair(root: Path, acked: Acked) -> None:
    repair_world(root / "w", root / "backup")
    acked.facts["repaired"] = True
    with World.open(root / "w") as world:
        _ack(acked, "w", world)
        world.send(EVENT, add("b", 1))
        _ack(acked, "w", world)


def air_v2(root: Path, acked: Acked) -> None:
    """A counter world, and beside it a second AIR for it: the same with a rebuilt wasm. Every
    run proposes the AIR at this one path (the proposal document names its source files, so
    another path is another object, in another CAS folder: another count of operations)."""
    counter_world(3)(root, acked)
    air = root / "v2"
    shutil.copytree(COUNTER_AIR, air)
    wasm = (COUNTER_AIR / "../../reducers/counter/counter.wasm").resolve().read_bytes()
    (air / "counter.wasm").write_bytes(wasm + bytes([0, 4, 3]) + b"fix")
    module, manifest = json.loads((air / "counter.air.json").read_text())
    module["wasm"] = "counter.wasm"
    (air / "counter.air.json").write_text(json.dumps([module, manifest]))
    acked.facts["air"] = str(air)


def proposal(root: Path, acked: Acked) -> None:
    """A proposal: its AIR's objects into the CAS, then one journaled record."""
    with World.open(root / "w") as world:
        made, _diff = propose(world, Path(acked.facts["air"]))
        acked.facts["proposal"] = made.id
        _ack(acked, "w", world)


def check_proposal(image: Path, acked: Acked) -> None:
    """Nothing acknowledged is lost; a proposal journaled is whole: its AIR loads again from
    the CAS (the objects were durable before the record was written)."""
    check_worlds(image, acked)
    with World.open(image / "w", readonly=True) as world:
        for found in proposals(world):
            assert proposal_air(world, found).manifest_hash == found.manifest_hash
        if "proposal" in acked.facts:
            assert [p.id for p in proposals(world)] == [acked.facts["proposal"]]


def upgrade_world(root: Path, acked: Acked) -> None:
    """The crash matrix's world (``upgrade_fault_child.make_world``: cells k0..k5 and ``big``,
    which counter_v2 cannot carry) with counter_v2 (a state schema change) proposed."""
    make_world(root / "w")
    with World.open(root / "w") as world:
        acked.facts["proposal"] = propose(world, V2_AIR)[0].id
        acked.facts["old"] = world.air.manifest_hash
        acked.facts["old_wasm"] = world.air.wasm_hashes[COUNTER]
        acked.facts["new"] = proposals(world)[0].manifest_hash
        _ack(acked, "w", world)


def applied_world(root: Path, acked: Acked) -> None:
    """``upgrade_world`` with the proposal applied (no cell upgraded yet)."""
    upgrade_world(root, acked)
    with World.open(root / "w") as world:
        apply(world, acked.facts["proposal"])
        _ack(acked, "w", world)


def apply_run(root: Path, acked: Acked) -> None:
    """An apply: one journaled record."""
    with World.open(root / "w") as world:
        apply(world, acked.facts["proposal"])
        acked.facts["applied"] = True
        _ack(acked, "w", world)


def cell_upgrade(root: Path, acked: Acked) -> None:
    """``upgrade_cells --all`` in 4 batches of 2, each committed alone (one with ``big``'s
    failure line). (A checkpoint of cells in two eras is cut in ``test_upgrade_crashes``.)"""
    with World.open(root / "w") as world:

        def batch_done(_done: int, _total: int) -> None:
            _ack(acked, "w", world)

        upgrade_cells(world, COUNTER_2, batch=BATCH, progress=batch_done)


def check_upgrade(image: Path, acked: Acked) -> None:
    """The world opens whole with every acknowledged record (as ``check_worlds``), in one era
    with every cell wholly in one (``upgrade_fault_child.one_era``); replay agrees; and
    running the rest again (apply, upgrade) finishes the job."""
    era = (acked.facts["old"], acked.facts["new"], acked.facts["old_wasm"])
    with World.open(image / "w") as world:
        assert [n for n in world.notices if "damaged" in n] == []
        records = records_of(world)
        assert records[: len(acked.records["w"])] == acked.records["w"]
        if acked.facts.get("applied"):
            assert any(r[2] == "gov.applied" for r in records)
        one_era(world, records, *era)
        assert verify_world(image / "w").ok
        finish(world)
        one_era(world, records_of(world), *era)


def _damage(segment: Path) -> None:
    """Flip a byte inside the last record (corrupt, not a torn tail), as bit rot would."""
    data = bytearray(segment.read_bytes())
    data[len(data) - 60] ^= 0xFF
    segment.write_bytes(bytes(data))


def sealed_world(root: Path, acked: Acked) -> None:
    """A world whose journal rolls every ~600 bytes: several sealed segments to archive."""
    with World.create(root / "w", COUNTER_AIR) as world:
        world.journal.close()
        world.journal = FileJournal(root / "w" / "journal", segment_bytes_max=600)
        world.kernel.journal = world.kernel.recorder.journal = world.journal
        for i in range(16):
            world.send(EVENT, add(f"k{i % 3}", i + 1))
    with World.open(root / "w", readonly=True) as world:
        _ack(acked, "w", world)


def damaged_sealed_world(root: Path, acked: Acked) -> None:
    """A world of stepped events in ~600-byte segments, with one flipped byte in a sealed
    segment (mended by its seal) and eight zeroed bytes in a step of another (re-derived)."""
    with World.create(root / "w", COUNTER_AIR) as world:
        world.journal.close()
        world.journal = FileJournal(root / "w" / "journal", segment_bytes_max=600)
        world.kernel.journal = world.kernel.recorder.journal = world.journal
        for i in range(16):
            world.send(EVENT, add(f"k{i % 3}", i + 1))
            world.step(1)
    acked.facts["records"] = _records(root / "w")
    sealed = sorted((root / "w" / "journal").glob("*.log"))[:-1]
    _damage(sealed[1])
    step = next(found for found in map(_step_frame, sealed[2:]) if found is not None)
    data = bytearray(step[0].read_bytes())
    data[step[1] + 20 : step[1] + 28] = bytes(8)
    step[0].write_bytes(bytes(data))


def _step_frame(segment: Path) -> tuple[Path, int] | None:
    """A step record's frame in ``segment``: its offset (None: it holds none)."""
    data, offset = segment.read_bytes(), 16
    while offset + 12 <= len(data):
        length = int.from_bytes(data[offset : offset + 4], "little")
        if decode_record_fast(data[offset + 12 : offset + 12 + length]).kind == "step":
            return segment, offset
        offset += 12 + length
    return None


def salvage(root: Path, acked: Acked) -> None:
    """What ``--verify-every`` and ``journal verify --repair`` write: the damage mark, then the
    segments put back in place."""
    check_world(root / "w", cache=True)
    fixed = repair_world(root / "w", root / "backup")
    assert [put_back.source.split(" ")[0] for put_back in fixed.mended] == ["its", "re-execution"]
    acked.facts["repaired"] = True


def archive(root: Path, acked: Acked) -> None:
    archive_world(root / "w", root / "arch")
    acked.facts["archived"] = True


def fork(root: Path, acked: Acked) -> None:
    forked = fork_world(root / "w", 5, root / "fork")
    acked.facts["forked_through"] = forked.seq_through


def owed_partitions(root: Path, acked: Acked) -> None:
    """A partitioned counter world of two partitions; partition 0 journaled events for keys
    of both (those of partition 1 are owed to it, not yet forwarded)."""
    from test_cluster import keys_owned_by

    from world.cluster import init_cluster

    init_cluster(root / "c", COUNTER_AIR, 2)
    owned = keys_owned_by(2)
    sent = [(owned[i % 2], i + 1) for i in range(8)]
    with World.open(root / "c" / "p0") as p0:
        p0.send_many([(EVENT, add(key, n)) for key, n in sent])
        _ack(acked, "c/p0", p0)
    with World.open(root / "c" / "p1", readonly=True) as p1:
        _ack(acked, "c/p1", p1)
    totals: dict[str, int] = {}
    for key, n in sent:
        totals[key] = totals.get(key, 0) + n
    acked.facts["totals"] = totals


def forwarding(root: Path, acked: Acked) -> None:
    """Both partitions run and partition 0 forwards what it owes: partition 1 journals the
    events (one commit), then partition 0 journals that it has them (another)."""
    from world.cluster import LocalCluster

    with LocalCluster(root / "c") as cluster:
        cluster.run_until_idle()
        for node in cluster.nodes:
            _ack(acked, f"c/p{node.index}", node.world)


def check_forwarding(image: Path, acked: Acked) -> None:
    """Both partitions open whole with what they acknowledged, and, run to the end, every
    cell holds its events' sum: none lost, none taken twice, whichever commit the cut fell
    between."""
    from world.cluster import LocalCluster

    check_worlds(image, acked)
    with LocalCluster(image / "c") as cluster:
        cluster.run_until_idle()
        for key, total in acked.facts["totals"].items():
            assert (cluster.state(COUNTER, key) or {}).get("count") == total, key
    for index in range(2):
        assert verify_world(image / "c" / f"p{index}").ok


def cluster_init(root: Path, acked: Acked) -> None:
    from world.cluster import init_cluster

    init_cluster(root / "c", COUNTER_AIR, 3)
    acked.facts["inited"] = True


def check_cluster_init(image: Path, acked: Acked) -> None:
    """A cluster whose ``cluster.json`` is there is whole: every partition opens, as the
    partition its genesis record says; an acknowledged init left one."""
    from world.cluster import Layout

    if not (image / "c" / "cluster.json").exists():
        assert not acked.facts.get("inited")
        return
    layout = Layout.read(image / "c")
    for index, path in enumerate(layout.partitions()):
        with World.open(path) as world:
            assert [n for n in world.notices if "damaged" in n] == []
            assert world.kernel.partition is not None
            assert (world.kernel.partition.index, world.kernel.partition.count) == (index, 3)


# --- checks -----------------------------------------------------------------------------------


def _opens_whole_with(image: Path, name: str, acked: list[Record]) -> list[Record]:
    """The world ``name`` of the image opens without rebuilding derived state and holds every
    acknowledged record; its records."""
    with World.open(image / name) as world:
        damaged = [n for n in world.notices if "damaged" in n]
    assert damaged == [], damaged
    records = _records(image / name)
    assert records[: len(acked)] == acked
    return records


def check_worlds(image: Path, acked: Acked) -> None:
    for name, records in acked.records.items():
        _opens_whole_with(image, name, records)


def check_export_and_import(image: Path, acked: Acked) -> None:
    check_worlds(image, acked)
    if acked.facts.get("exported"):
        assert len(read_tree(image / "export")) == acked.facts["exported"]
    if (image / "copy" / "journal").is_dir() and "copy" in acked.records:
        imported = len(_records(image / "copy")) - 1  # after the genesis record
        assert imported in (0, 5)  # an import is one atomic batch


def check_migration(image: Path, acked: Acked) -> None:
    if "old" not in acked.facts:
        check_worlds(image, acked)  # not yet at the migration
        return
    if acked.facts.get("migrated"):
        check_worlds(image, acked)
        return
    with World.open(image / "v1") as world:
        migrated = COUNTER in world.air.key_types
        damaged = [n for n in world.notices if "damaged" in n]
    assert damaged == []
    if migrated:  # the swap had begun: the new world is whole, and replays
        assert verify_world(image / "v1").ok
    else:
        assert _records(image / "v1")[: len(acked.facts.get("old", []))] == acked.facts.get(
            "old", []
        )


def check_repair(image: Path, acked: Acked) -> None:
    if not acked.facts.get("repaired"):
        try:
            with World.open(image / "w"):
                pass
        except JournalCorrupt:
            pass  # the damage the repair was cutting is still there: nothing was promised
        return
    check_worlds(image, acked)  # a writable open: a torn tail of an unacknowledged send goes
    assert check_world(image / "w").journal.clean


def check_archive(image: Path, acked: Acked) -> None:
    """An archive cut anywhere holds each file whole or not at all; what it holds is never
    taken on trust: the next run mends it, and a restore from it loses nothing."""
    check_worlds(image, acked)
    sealed = sorted((image / "w" / "journal").glob("*.log"))[:-1]
    copies = image / "arch" / "journal"
    if acked.facts.get("archived"):
        assert all((copies / p.name).read_bytes() == p.read_bytes() for p in sealed)
    archive_world(image / "w", image / "arch")
    assert all((copies / p.name).read_bytes() == p.read_bytes() for p in sealed)
    records = _records(image / "w")
    _damage(sealed[1])
    fixed = repair_world(image / "w", image / "backup", image / "arch")
    assert [r.segment for r in fixed.restored] == [sealed[1].name]
    assert fixed.journal is None
    assert _records(image / "w") == records


def check_salvage(image: Path, acked: Acked) -> None:
    """A repair cut anywhere loses nothing that was intact: the next one puts back the rest,
    and the world holds every record it had before the damage, the mark gone."""
    fixed = repair_world(image / "w", image / "backup-again")
    assert fixed.journal is None, "nothing was cut"
    assert _records(image / "w") == acked.facts["records"]
    assert check_world(image / "w").clean
    assert not (image / "w" / DAMAGE_MARK).exists()


def check_fork(image: Path, acked: Acked) -> None:
    check_worlds(image, acked)
    through = acked.facts.get("forked_through")
    if through is not None:
        records = _opens_whole_with(image, "fork", [])
        assert records[: through + 1] == acked.records["w"][: through + 1]


SCENARIOS: dict[str, Scenario] = {
    "journal_and_checkpoint": Scenario(None, journal_and_checkpoint, check_worlds),
    "many_objects": Scenario(counter_world(40), many_objects, check_worlds),
    "export_and_import": Scenario(counter_world(5), export_and_import, check_export_and_import),
    "big_batch": batch(300),
    "batch_of_2": batch(2),
    "batch_of_1": batch(1),
    "retried_batch": Scenario(ids_sent, retried_batch, check_retried_batch),
    "migration": Scenario(v1_world, migration, check_migration),
    "repair": Scenario(damaged_world, repair, check_repair),
    "salvage": Scenario(damaged_sealed_world, salvage, check_salvage),
    "fork": Scenario(counter_world(4), fork, check_fork),
    "archive": Scenario(sealed_world, archive, check_archive),
    "proposal": Scenario(air_v2, proposal, check_proposal),
    "apply": Scenario(upgrade_world, apply_run, check_upgrade),
    "cell_upgrade": Scenario(applied_world, cell_upgrade, check_upgrade),
    "forwarding": Scenario(owed_partitions, forwarding, check_forwarding),
    "cluster_init": Scenario(None, cluster_init, check_cluster_init),
}


EVERY_POINT: Final = os.environ.get("WORLD_POWERLOSS_EVERY") == "1"
"""Cut at every operation of every scenario instead (by hand: ``TESTING.md``)."""


def _cut_points(kinds: list[str], depth: Depth) -> list[int]:
    """``spread`` points spread over the run, and just before and after ``moments`` of the
    renames, syncs and truncations (the first, the last, and evenly between: a scenario that
    renames 40 cell files into place renames each the same way), and the first operation of
    each kind. With ``EVERY_POINT``: all."""
    n = len(kinds)
    if EVERY_POINT:
        return list(range(n))
    points = set(range(0, n, max(1, n // depth.spread)))
    moments = [i for i, kind in enumerate(kinds) if kind in ("replace", "sync", "ftruncate")]
    if len(moments) > depth.moments:
        step = (len(moments) - 1) / (depth.moments - 1)
        moments = [moments[round(k * step)] for k in range(depth.moments)]
    for i in moments:
        points |= {i, i + 1}
    points |= {kinds.index(kind) for kind in set(kinds)}  # each kind of operation, once at least
    return sorted(p for p in points if p < n)


def _run(base: Path, base_acked: Acked, scenario: Scenario, cut: int, seed: int | None) -> Path:
    """Copy the starting worlds, run the scenario under the fake, cut; the image."""
    root = base.parent / f"run-{cut}-{seed}"
    shutil.copytree(base, root)
    acked = copy.deepcopy(base_acked)
    image = run_with_cut(root, lambda: scenario.run(root, acked), cut, seed)
    try:
        scenario.check(image, acked)
    except (AssertionError, WorldError) as exc:
        raise AssertionError(f"cut at operation {cut}, seed {seed}") from exc
    shutil.rmtree(image)
    shutil.rmtree(root)
    return image


@pytest.mark.usefixtures("small_inline", "no_real_flushes")
@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize(
    "depth",
    [
        pytest.param(DEPTHS["main"], id="main"),
        pytest.param(DEPTHS["long"], id="long", marks=pytest.mark.long),
    ],
)
def test_after_a_power_cut_at_any_durable_operation_nothing_acknowledged_is_lost(
    tmp_path: Path, name: str, depth: Depth
) -> None:
    scenario = SCENARIOS[name]
    base, base_acked = tmp_path / "base", Acked()
    base.mkdir()
    if scenario.setup is not None:
        scenario.setup(base, base_acked)
    probe = tmp_path / "probe"
    shutil.copytree(base, probe)
    kinds = count_operations(probe, lambda: scenario.run(probe, copy.deepcopy(base_acked)))
    points = _cut_points(kinds, depth)
    torn = [i for i in range(1, len(kinds)) if kinds[i] == "fsync" and kinds[i - 1] == "write"]
    seeded = [
        (p, 4 * p + way) for p in torn[:: max(1, len(torn) // depth.seeded)] for way in range(4)
    ]
    for cut, seed in [*((p, None) for p in points), *seeded]:
        _run(base, base_acked, scenario, cut, seed)
