"""Fault injection (issue 7): an I/O error, a crash or an interrupt at any point of a workload
loses nothing acknowledged and applies nothing twice; and the issue's reproductions, one test each.

How. ``world_fault_child.SCRIPT`` (create; sends of 3, 1, 4, 1 and 2 events; step; run; snapshot;
close; reopen; more sends, a step and a run; close) is played once under a counting
``world._fileio`` hook: that gives its durable operations, each labelled with the script action
it belongs to (about 300; creating the world is about half of them). Then, for every one:

* ``EIO`` and ``ENOSPC`` at that operation, raised once, in this process;
* a crash at that operation: a child process ``os._exit(137)``s there (``world_fault_child``);

and the world is opened again with no hook (first repaired as ``world journal verify --repair``
does, if it refuses to open), run until idle, and checked: its journal holds exactly the events
of the acknowledged calls (after a crash, plus possibly the whole batch in flight, never part of
it), each delivered to its cell once, every cell's count and event total match its key's
events, and replay from genesis agrees. ``KeyboardInterrupt`` at five points of every tick and
``World.interrupt`` after every step are checked the same way.

Durability here is about process death, not power loss: the page cache survives ``os._exit``,
so what a crash can lose is exactly what had not been written yet.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from matrixkit import first_of_each_kind
from serverkit import LineServer
from typer.testing import CliRunner
from world_fault_child import CRASH_STATUS, NO_FLUSH, SCRIPT, no_flush, run_script, sent_by

from air import cbor
from air.errors import WorldError
from cli.main import app
from kernel.errors import JournalCorrupt
from world import CheckpointAhead, Engine, Interrupted, World, WorldExists
from world import _fileio as fileio
from world._world import COMMIT_EVERY_STEPS
from world.errors import JournalWriteFailed, StorageError, WorldLocked
from world.history import verify_world

from worldkit import (
    COUNTER,
    COUNTER_AIR,
    EVENT,
    add,
    const_wasm,
    manifest,
    module,
    output,
    schema,
    write_world_air,
)

HERE = Path(__file__).resolve().parents[1]
CHILD = HERE / "world_fault_child.py"
WORLD_BIN = Path(sys.executable).with_name("world")
cli_runner = CliRunner()

Pairs = list[tuple[str, int]]


@pytest.fixture(autouse=True)
def _no_disk_flushes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fsync``, ``fdatasync`` and ``sync`` do nothing here, as in the crash server (the fault
    hook still sees each). These tests fail calls and kill processes, they do not cut power:
    the page cache outlives both, so a real flush changes nothing they can observe, and with
    ~150 flushes per script run the suite spent most of its time waiting on the disk."""
    for name in NO_FLUSH:
        monkeypatch.setattr(os, name, no_flush)
    monkeypatch.setattr(fileio, "_sync_data", no_flush)  # bound to os.fdatasync at import


# --- the script's durable operations ---------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """Durable operation ``index`` of the script: its name, the script action it belongs to, and
    its path relative to the folder that holds the world (``.`` for that folder itself)."""

    index: int
    action: int
    op: str
    path: str

    @property
    def action_name(self) -> str:
        return str(SCRIPT[self.action][0])

    @property
    def id(self) -> str:
        return f"{self.index}-{self.action_name}{self.action}-{self.op}"


@functools.cache
def script_ops() -> tuple[Op, ...]:
    """Play the script once under a counting hook (at collection: the ids name the operations)."""
    traced: list[tuple[str, str]] = []
    ends: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        with fileio.fault_hook(lambda op, path: traced.append((op, path))):
            failed = run_script(
                Path(tmp) / "w", COUNTER_AIR, lambda _i, _w: ends.append(len(traced))
            )
        assert failed is None, failed
        ops = []
        for index, (op, path) in enumerate(traced):
            action = next(a for a, end in enumerate(ends) if index < end)
            ops.append(Op(index, action, op, os.path.relpath(path, tmp)))
    return tuple(ops)


def _kind(op: Op) -> tuple[int, str]:
    """An operation's kind: its action and the operation. The main suite cuts at the first of
    each kind, the long variants at the rest (``matrixkit``). Not the file: the order of the
    files a checkpoint syncs differs from one process to the next (the workers must agree)."""
    return (op.action, op.op)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    wanted = {"fault": lambda op: True, "create_fault": lambda op: op.action == 0}
    for name, keep in wanted.items():
        if name not in metafunc.fixturenames:
            continue
        ops = [op for op in script_ops() if keep(op)]
        marks = first_of_each_kind(_kind(op) for op in ops)
        metafunc.parametrize(
            name, [pytest.param(op, id=op.id, marks=m) for op, m in zip(ops, marks, strict=True)]
        )


# --- checking a world after the fault --------------------------------------------------------


def _reopen(path: Path) -> World:
    """Open the world; if it refuses (corrupt journal, checkpoint ahead of it), repair it as
    ``world journal verify --repair`` does and open it again."""
    try:
        return World.open(path)
    except (JournalCorrupt, CheckpointAhead):
        result = cli_runner.invoke(app, ["journal", "verify", str(path), "--repair"])
        assert result.exit_code == 0, result.output
        return World.open(path)


def _totals(pairs: Pairs) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {}
    for key, n in pairs:
        cell = totals.setdefault(key, {"count": 0, "events": 0})
        cell["count"] += n
        cell["events"] += 1
    return totals


def check_world(path: Path, acked: Pairs, in_flight: Sequence[tuple[str, int]] = ()) -> None:
    """Reopen, run until idle; the journal holds exactly the ``acked`` events (then possibly all
    of ``in_flight``), each delivered once, every cell sums its events; replay agrees."""
    with _reopen(path) as world:
        world.run_until_idle()
        records = list(world.journal.read(0))
        cells = {view.key: view.state for view in world.cells(COUNTER)}
    events = [r for r in records if r.kind == "event.in"]
    sent = [
        (value["key"], value["op"]["$value"])
        for value in (cbor.loads(r.body["value"]) for r in events)
    ]
    assert sent in (acked, acked + list(in_flight)), "acknowledged events lost or doubled"
    deliveries = [(r.body["src"], r.body["idx"]) for r in records if r.kind.startswith("step")]
    assert sorted(deliveries) == [(r.seq, 0) for r in events], "a delivery ran twice or never"
    assert cells == _totals(sent)
    assert verify_world(path).ok


def check_script_outcome(path: Path, acked: list[int], in_flight: int | None) -> None:
    """``check_world`` for the script: ``acked`` are the actions that returned."""
    if 0 not in acked and not path.exists():
        return  # creation failed before the world existed: nothing was acknowledged
    events = [pair for index in acked for pair in sent_by(index)]
    check_world(path, events, sent_by(in_flight) if in_flight is not None else ())


# --- 1a. an I/O error at every durable operation ---------------------------------------------


def _play_with_error(
    world_dir: Path, at: int, code: int
) -> tuple[list[int], tuple[int, Exception] | None, dict[int, list[str]]]:
    """The script with ``OSError(code)`` raised once, at operation ``at``: the actions
    acknowledged, (index, exception) of the one that failed (None if none did), and the notices
    of each handle when its ``close`` returned."""
    count = 0

    def hook(_op: str, path: str) -> None:
        nonlocal count
        count += 1
        if count - 1 == at:
            raise OSError(code, os.strerror(code), path)

    acked: list[int] = []
    notices: dict[int, list[str]] = {}

    def on_ack(index: int, world: World | None) -> None:
        acked.append(index)
        if SCRIPT[index][0] == "close" and world is not None:
            notices[index] = list(world.notices)

    with fileio.fault_hook(hook):
        failed = run_script(world_dir, COUNTER_AIR, on_ack)
    return acked, failed, notices


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_an_io_error_at_every_durable_operation_loses_nothing_acknowledged(
    tmp_path: Path, fault: Op, code: int
) -> None:
    acked, failed, notices = _play_with_error(tmp_path / "w", fault.index, code)
    if fault.action_name == "close":
        assert failed is None, "a checkpoint that fails in close must not fail close"
        assert len(notices[fault.action]) == 1, "the failed checkpoint is said once, as a notice"
    elif failed is not None:
        index, exc = failed
        assert index == fault.action, "the call that performed the operation failed"
        if isinstance(exc, StorageError):
            assert (exc.operation, exc.errno_name) == (fault.op, errno.errorcode[code])
        if isinstance(exc, JournalWriteFailed):
            assert exc.rolled_back, "the fault came once, so the rollback had to work"
    check_script_outcome(tmp_path / "w", acked, None)


def _one_of_each_kind() -> list[Op]:
    """The first operation of each (action, operation, top folder) of the script: each code
    path that can fail a call, once (the error's type does not depend on which file it is)."""
    kinds: dict[tuple[int, str, str], Op] = {}
    for op in script_ops():
        parts = op.path.split("/")  # w/cas/..., .w.init-<random>/cas/... (staging), w or .
        kinds.setdefault((op.action, op.op, parts[1] if len(parts) > 1 else parts[0]), op)
    return list(kinds.values())


def test_an_io_error_surfaces_as_a_world_error_from_every_call(tmp_path: Path) -> None:
    """Not as a bare OSError: the CLI and callers handle ``WorldError`` (``StorageError``,
    ``JournalWriteFailed``), whose operation, path and errno are fields."""
    leaks = []
    for fault in _one_of_each_kind():
        _acked, failed, _notices = _play_with_error(
            tmp_path / str(fault.index), fault.index, errno.EIO
        )
        if failed is not None and not isinstance(failed[1], WorldError):
            leaks.append(f"{fault.id} {fault.path}: {type(failed[1]).__name__}")
    assert leaks == []


# --- 1b. a crash at every durable operation --------------------------------------------------


@pytest.fixture(scope="module")
def crash_server() -> Iterator[LineServer]:
    """``world_fault_child.py --serve``: one process per test module that forks a crash run."""
    server = LineServer(str(CHILD), "--serve")
    yield server
    server.close()


def _acked(lines: list[str]) -> list[int]:
    acked = [int(line.split()[1]) for line in lines if line.startswith("ack ")]
    assert acked == list(range(len(acked)))
    return acked


def test_the_fault_script_runs_whole_in_a_child_with_the_same_operations(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(tmp_path / "w"), str(COUNTER_AIR), "-1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = proc.stdout.splitlines()
    assert (proc.returncode, _acked(lines), lines[-1]) == (
        0,
        list(range(len(SCRIPT))),
        f"ops {len(script_ops())}",
    )
    check_script_outcome(tmp_path / "w", list(range(len(SCRIPT))), None)


def test_a_crash_at_every_durable_operation_loses_nothing_acknowledged(
    tmp_path: Path, fault: Op, crash_server: LineServer
) -> None:
    line = f"{fault.index} {tmp_path / 'w'} {COUNTER_AIR} {tmp_path / 'acks'}"
    status = int(crash_server.ask(line))
    assert status == CRASH_STATUS
    acked = _acked((tmp_path / "acks").read_text().splitlines())
    assert len(acked) == fault.action, "the crash came inside the action the trace says"
    check_script_outcome(tmp_path / "w", acked, fault.action)


# --- 1c. interrupts at every tick ------------------------------------------------------------

QUEUED: Pairs = [("a", 1), ("b", 2), ("c", 3), ("a", 4), ("b", 5), ("c", 6)]
TICK_POINTS = ("before_tick", "in_reducer", "after_append", "in_store", "after_tick")


def _queued_world(path: Path) -> None:
    """A closed world with ``QUEUED`` sent (acknowledged) and not yet run."""
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add(key, n)) for key, n in QUEUED])


def _on_call(obj: Any, name: str, k: int, action: Callable[[], None], *, after: bool) -> None:
    """Make ``obj.name``'s ``k``-th call (1-based) do ``action`` before (or after) the real one."""
    real = getattr(obj, name)
    calls = 0

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == k and not after:
            action()
        result = real(*args, **kwargs)
        if calls == k and after:
            action()
        return result

    setattr(obj, name, wrapped)


def _ctrl_c() -> None:
    raise KeyboardInterrupt


def _interrupt_at(world: World, point: str, k: int, action: Callable[[], None]) -> None:
    """``action`` at ``point`` of tick ``k``: before the tick starts, while the reducer runs
    (before the step record), right after the record is appended, while the new state is stored
    (after the record), or after the tick returned."""
    kernel = world.kernel
    targets = {
        "before_tick": (kernel, "tick", False),
        "in_reducer": (kernel.steps.runner, "run", False),
        "after_append": (world.journal, "append", True),
        "in_store": (kernel.cells, "put", False),
        "after_tick": (kernel, "tick", True),
    }
    obj, name, after = targets[point]
    _on_call(obj, name, k, action, after=after)


@pytest.mark.parametrize("k", range(1, len(QUEUED) + 1))
@pytest.mark.parametrize(
    "point",
    TICK_POINTS,
)
def test_ctrl_c_at_every_point_of_every_tick_loses_nothing(
    tmp_path: Path, point: str, k: int
) -> None:
    _queued_world(tmp_path / "w")
    world = World.open(tmp_path / "w")
    _interrupt_at(world, point, k, _ctrl_c)
    with pytest.raises(KeyboardInterrupt), world:
        world.run_until_idle()
    check_world(tmp_path / "w", QUEUED)


@pytest.mark.parametrize("k", range(1, len(QUEUED) + 1))
def test_interrupt_inside_step_k_stops_at_the_next_tick_boundary_with_all_committed(
    tmp_path: Path, k: int
) -> None:
    _queued_world(tmp_path / "w")
    with World.open(tmp_path / "w") as world:
        _interrupt_at(world, "in_reducer", k, world.interrupt)
        with pytest.raises(Interrupted) as info:
            world.run_until_idle()
        assert info.value.seq_next == world.journal.seq_next_committed == 1 + len(QUEUED) + k
    check_world(tmp_path / "w", QUEUED)


@pytest.mark.parametrize("k", range(1, len(QUEUED) + 1))
def test_after_interrupted_the_same_handle_runs_on_to_idle(tmp_path: Path, k: int) -> None:
    _queued_world(tmp_path / "w")
    with World.open(tmp_path / "w") as world:
        _interrupt_at(world, "in_reducer", k, world.interrupt)
        with pytest.raises(Interrupted):
            world.run_until_idle()
        assert world.run_until_idle() == len(QUEUED) - k
        assert world.kernel.idle()
    check_world(tmp_path / "w", QUEUED)


# --- 2. reproductions from the issue ---------------------------------------------------------


def _journal_bytes(path: Path) -> int:
    """The size of the journal's segments (a segment or seal being written may vanish
    between the listing and the stat: it is not counted)."""
    total = 0
    for segment in (path / "journal").glob("*.log"):
        with contextlib.suppress(FileNotFoundError):
            total += segment.stat().st_size
    return total


def test_ctrl_c_during_world_run_exits_130_and_loses_nothing(tmp_path: Path) -> None:
    """The issue sent ~3,000 events; a run commits every ``COMMIT_EVERY_STEPS`` steps, so this
    sends three times that: the journal then grows while the run is under way, which is what
    the test waits for (polling, bounded) before it sends SIGINT."""
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    pairs = [(f"k{i % 50}", 1 + i % 7) for i in range(3 * COMMIT_EVERY_STEPS)]
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(add(key, n)) + "\n" for key, n in pairs))
    assert cli_runner.invoke(app, ["send", str(w), EVENT, "--file", str(events)]).exit_code == 0
    sent_bytes = _journal_bytes(w)
    proc = subprocess.Popen(
        [str(WORLD_BIN), "run", str(w)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while _journal_bytes(w) == sent_bytes and proc.poll() is None:
        assert time.monotonic() < deadline, "the run never committed"
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "interrupted after seq" in err
    check_world(w, pairs)


def _checkpointed_world(path: Path) -> None:
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add(key, n)) for key, n in QUEUED])
        world.run_until_idle()


def _module_hash(path: Path) -> str:
    """The hex hash of the one reducer the checkpoint holds cells of."""
    data = (path / "state" / "reducers" / "checkpoint.cbor").read_bytes()
    (found,) = cbor.loads(data)["modules"]
    return str(found)


def _object(path: Path, raw: bytes) -> Path:
    return path / "cas" / raw.hex()[:2] / raw.hex()[2:]


def _store_objects(path: Path, key_hash: str) -> tuple[Path, Path]:
    """The reducer's index object and the packed shard holding ``key_hash`` (in the CAS)."""
    data = (path / "state" / "reducers" / "checkpoint.cbor").read_bytes()
    index = _object(path, cbor.loads(data)["modules"][_module_hash(path)])
    prefix = int(key_hash[:3], 16)  # the top 12 bits of the key hash
    shard = _object(path, cbor.loads(index.read_bytes())["shards"][prefix][2])
    return index, shard


def _checkpoint_offset(path: Path, field: str) -> int:
    """A byte inside ``field`` of ``state/reducers/checkpoint.cbor``: its CBOR header, the
    module hash naming the module's entry, that module's index root, or the snapshot address
    (found by value, so the offsets follow the format)."""
    data = (path / "state" / "reducers" / "checkpoint.cbor").read_bytes()
    if field == "header":
        return 0
    module_hash = _module_hash(path)
    if field == "module_name":
        return data.index(module_hash.encode()) + len(module_hash) // 2
    if field == "index_root":
        (root,) = _values_under(cbor.loads(data), module_hash)
        return data.index(root) + len(root) // 2
    address = (path / "snapshots" / "latest").read_text().removeprefix("blake3:")
    return data.index(bytes.fromhex(address)) + 16


def _values_under(doc: Any, key: str) -> list[Any]:
    if isinstance(doc, dict):
        found = [v for k, v in doc.items() if k == key]
        return found + [x for v in doc.values() for x in _values_under(v, key)]
    return []


def _damage(path: Path, what: str) -> Path:
    """Damage one derived file of a checkpointed world; return the damaged path."""
    with World.open(path, readonly=True) as world:
        key_hash = next(v.key_hash for v in world.cells(COUNTER) if v.key == "a")
    index, shard = _store_objects(path, key_hash)
    if what in ("shard_object", "index_object"):
        target = shard if what == "shard_object" else index
        target.unlink()
    elif what == "shard_object_byte":
        target = shard
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x40
        target.write_bytes(bytes(data))
    else:
        target = path / "state" / "reducers" / "checkpoint.cbor"
        offset = _checkpoint_offset(path, what.removeprefix("checkpoint_"))
        data = bytearray(target.read_bytes())
        data[offset] ^= 0x40
        target.write_bytes(bytes(data))
    return target


DAMAGE = [
    "shard_object",
    "shard_object_byte",
    "index_object",
    "checkpoint_header",
    "checkpoint_module_name",
    "checkpoint_index_root",
    "checkpoint_snapshot_address",
]


@pytest.mark.parametrize("what", DAMAGE)
def test_damaged_derived_state_is_rebuilt_with_one_notice_naming_it(
    tmp_path: Path, what: str
) -> None:
    w = tmp_path / "w"
    _checkpointed_world(w)
    damaged = _damage(w, what)
    with World.open(w) as world:
        world.send(EVENT, add("a", 10))
        world.run_until_idle()
        notices = list(world.notices)
    assert len(notices) == 1
    assert str(damaged) in notices[0]
    check_world(w, [*QUEUED, ("a", 10)])


@pytest.mark.parametrize("what", DAMAGE)
def test_damaged_derived_state_gives_one_cli_notice_naming_it(tmp_path: Path, what: str) -> None:
    w = tmp_path / "w"
    _checkpointed_world(w)
    damaged = _damage(w, what)
    sent = cli_runner.invoke(app, ["send", str(w), EVENT, json.dumps(add("a", 10))])
    ran = cli_runner.invoke(app, ["run", str(w)])
    assert (sent.exit_code, ran.exit_code) == (0, 0)
    notices = [
        line for line in (sent.stderr + ran.stderr).splitlines() if line.startswith("notice:")
    ]
    assert len(notices) == 1
    assert str(damaged) in notices[0]
    check_world(w, [*QUEUED, ("a", 10)])


def test_deleting_files_under_a_live_writer_does_not_let_a_second_writer_in(
    tmp_path: Path,
) -> None:
    w = tmp_path / "w"
    _checkpointed_world(w)
    with World.open(w) as writer:
        for name in ("state", "snapshots", "cache"):
            shutil.rmtree(w / name)
        for leftover in (w / "LOCK", w / "journal" / "LOCK"):
            leftover.unlink(missing_ok=True)
        with pytest.raises(WorldLocked):
            World.open(w)
        writer.send(EVENT, add("a", 10))
        writer.run_until_idle()
    check_world(w, [*QUEUED, ("a", 10)])


def _cli_json(*args: str) -> Any:
    result = cli_runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_readers_work_beside_a_live_writer_and_see_what_it_committed(tmp_path: Path) -> None:
    w = tmp_path / "w"
    _checkpointed_world(w)
    with World.open(w) as writer:
        writer.send_many([(EVENT, add("a", 10)), (EVENT, add("d", 1))])
        writer.run_until_idle()  # committed, not checkpointed
        with World.open(w, readonly=True) as reader:
            assert reader.state(COUNTER, "a") == {"count": 15, "events": 3}
            assert reader.info()["journal_seq_next"] == writer.journal.seq_next
            assert {v.key for v in reader.cells(COUNTER)} == {"a", "b", "c", "d"}
        assert _cli_json("state", str(w), COUNTER, "--key", "d")["state"] == {
            "count": 1,
            "events": 1,
        }
        assert _cli_json("info", str(w))["reducers"][COUNTER]["cells"] == 4
        assert _cli_json("cells", "ls", str(w), COUNTER)["count"] == 4


def test_a_read_only_open_performs_no_durable_operation(tmp_path: Path) -> None:
    w = tmp_path / "w"
    _checkpointed_world(w)
    with World.open(w) as writer:
        writer.send(EVENT, add("a", 10))
        writer.run_until_idle()  # a journal tail after the checkpoint, to re-execute
        shutil.rmtree(w / "cache")  # so the reader compiles the reducer, and must not cache it
        ops: list[tuple[str, str]] = []

        def read_only_disk(op: str, path: str) -> None:
            ops.append((op, path))  # recorded too: a caller might swallow the error
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)

        with fileio.fault_hook(read_only_disk), World.open(w, readonly=True) as reader:
            assert reader.state(COUNTER, "a") == {"count": 15, "events": 3}
            reader.info()
            list(reader.cells(COUNTER))
    assert ops == []


def test_init_of_a_folder_that_holds_something_refuses(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "notes.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    for target in (tmp_path / "w", tmp_path / "file"):
        with pytest.raises(WorldExists) as info:
            World.create(target, COUNTER_AIR)
        assert info.value.path == str(target)
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["notes.txt"]


def test_a_failed_init_leaves_no_world_and_no_partial_folder(
    tmp_path: Path, create_fault: Op
) -> None:
    count = 0

    def hook(_op: str, path: str) -> None:
        nonlocal count
        count += 1
        if count - 1 == create_fault.index:
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)

    with fileio.fault_hook(hook), pytest.raises((WorldError, OSError)):
        World.create(tmp_path / "w", COUNTER_AIR)
    assert list(tmp_path.iterdir()) == []
    World.create(tmp_path / "w", COUNTER_AIR).close()


def test_world_folders_are_0700_and_files_0600_under_umask_000(tmp_path: Path) -> None:
    w = tmp_path / "w"
    old = os.umask(0)
    try:
        with World.create(w, COUNTER_AIR) as world:
            world.send_many([(EVENT, add(key, n)) for key, n in QUEUED])
            world.step(2)
            world.snapshot()
        with World.open(w) as world:
            world.run_until_idle()
    finally:
        os.umask(old)
    modes = {
        str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in [w, *w.rglob("*")]
    }
    wrong = {
        name: oct(mode)
        for name, mode in modes.items()
        if mode != (0o700 if (tmp_path / name).is_dir() else 0o600)
    }
    assert wrong == {}


def test_an_emitted_event_with_no_route_becomes_a_no_route_dead_letter(tmp_path: Path) -> None:
    state, start, ping = "t/S@1", "t/Start@1", "t/Ping@1"
    record = {"record": {"n": "nat"}}
    air = write_world_air(
        tmp_path / "air",
        {"t/A@1": const_wasm(output({"n": 1}, [(ping, {"n": 7})]))},
        [
            schema(state, record),
            schema(start, record),
            schema(ping, record),
            module("t/A@1", state, start),
            manifest([{"event": start, "reducer": "t/A@1"}]),
        ],
    )
    with World.create(tmp_path / "w", air) as world:
        world.send(start, {"n": 0})
        world.run_until_idle()
        assert world.state("t/A@1") == {"n": 1}
    with World.open(tmp_path / "w") as world:
        letters = [(d.code, d.schema, d.reducer) for d in world.kernel.dead_letters.letters]
    assert letters == [("no_route", ping, "t/A@1")]
    assert verify_world(tmp_path / "w").ok


def test_one_bad_event_pushed_among_good_ones_is_rejected_alone(tmp_path: Path) -> None:
    bad = {"key": "b"}
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        engine = Engine(world)
        engine.start()
        for schema_name, value in [(EVENT, add("a", 1)), (EVENT, bad), (EVENT, add("b", 2))]:
            engine.push(schema_name, value)
        engine.finish()
        cells = {v.key: v.state for v in world.cells(COUNTER)}
        rejected = [(s, v, type(e)) for s, v, e in engine.rejected]
    assert cells == _totals([("a", 1), ("b", 2)])
    assert len(rejected) == 1
    assert rejected[0][:2] == (EVENT, bad)
    assert issubclass(rejected[0][2], WorldError)
