"""Issue 9's "Done when" for ``world migrate cells``, at the issue's scale and under kill -9.

1. A v1 (map-in-state) counter world of 10,000 keys, migrated through the installed ``world``
   command, gives 10,000 cells equal to the map's entries; the migrated world takes events for
   old and new keys, replays exactly from genesis, and the old history is kept whole.
2. A kill -9 at *every* durable write of a migration leaves a world that a writer opens as
   either the old world (its map intact) or the new one (every cell, and the old world kept
   as the backup), and which one it is follows from where the kill fell: the old world up to
   the rename that moves it aside, the new one after. A retried migration after a kill
   completes (checked at every 40th point), and a world of each kind takes events and
   replays exactly. This loop uses a 50-key world (the number of writes hardly depends on
   the keys: most are the new world's AIR and CAS objects and its history index) so that it
   stays quick.

What "every durable write" means here. A counting run records every call through
``world._fileio`` (about 700: the operation, its path, and whether the path existed). A kill
just before a ``write``, ``create``, ``mkdir``, ``replace``, ``truncate`` or an ``unlink`` of a
path that exists is run for real, at every one of them. A kill just before an ``fsync``,
``fdatasync``, ``fsync_dir`` or ``sync``, or before an ``unlink`` of a path that does not exist
(the history index clears its 256 shard names that way), leaves exactly the files a kill just
before the next operation leaves: a killed process's writes are in the page cache either way
(power loss is another matter, and not this test's). Those points are covered by the next
point's kill. An operation of a kind this rule does not know fails the test.

How the 10,000-key world is made. Its first 500 keys come from real v1 steps (each runs the
reducer on the whole map). A v1 step on a map of about 4,500 entries or more exhausts the
default ``fuel_per_step`` (10 M), so a v1 counter world cannot reach 10,000 keys by events
under the default limits (the reason to migrate it). The rest of the map is added with one
journaled ``cell.imported`` of the whole map (``world.moves._cellfiles.journal_cells``, the path of
``world cells import``), so the world's journal and checkpoint hold a true v1 state.

How the crash loop stays quick. Each kill needs a fresh process at the moment of the crash,
but starting an interpreter and importing the world per write would cost ~0.5 s each. So one
child ("zygote", ``ZYGOTE``) imports everything once, never opens a world itself (no wasmtime
engine, no threads), and forks a grandchild per crash point: the grandchild copies the
pristine world, installs a ``fileio`` fault hook that sends itself SIGKILL just before
operation number N, and migrates. The test asks for one point at a time over a pipe, checks
that world in this process, and deletes it. Every wait on the child is bounded.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from air import cbor
from world import World
from world.history import verify_world
from world.moves import journal_cells, migrate_cells

from worldkit import COUNTER, EVENT, ROOT, add

V1_AIR = ROOT / "manifests" / "counter_v1"
TESTS = Path(__file__).resolve().parents[2]
WORLD_BIN = Path(sys.executable).with_name("world")
KEYS = 10_000
KEYS_BY_EVENTS = 500
CRASH_KEYS = 50
WAIT_S = 120.0
RETRY_EVERY = 40  # a retried migration after a crash is checked at every 40th point
SYNCS = frozenset(("fsync", "fdatasync", "fsync_dir", "sync"))
KNOWN_OPS = SYNCS | {"write", "create", "mkdir", "replace", "truncate", "unlink"}

ZYGOTE = """
import json, os, shutil, signal, sys, traceback
from pathlib import Path

sys.path[:0] = [sys.argv[3], sys.argv[4]]
from world import _fileio as fileio
from world.moves import migrate_cells

pristine, work = Path(sys.argv[1]), Path(sys.argv[2])


def crash_at(at):
    case = work / f"at{at}"
    shutil.copytree(pristine, case / "w")
    ops = []

    def hook(op, path):
        if len(ops) == at:
            os.kill(os.getpid(), signal.SIGKILL)
        ops.append([op, os.path.relpath(path, case), os.path.lexists(path)])

    try:
        with fileio.fault_hook(hook):
            migrate_cells(case / "w", "demo/Counter@1", "key")
        (case / "ops.json").write_text(json.dumps(ops))
    except BaseException:
        traceback.print_exc()
        os._exit(3)
    os._exit(0)


for line in iter(sys.stdin.readline, ""):
    at = int(line)
    pid = os.fork()
    if pid == 0:
        crash_at(at)
    _, status = os.waitpid(pid, 0)
    killed = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    print(json.dumps({"at": at, "signal": killed, "exit": code}), flush=True)
"""


# --- helpers ---------------------------------------------------------------------------------


def v1_world_by_events(path: Path, keys: int) -> dict[str, Any]:
    """A v1 counter world whose map has ``keys`` entries, each made by real v1 steps; key
    ``k1`` twice. Returns the map."""
    with World.create(path, V1_AIR) as world:
        world.send_many([(EVENT, add(f"k{i}", i)) for i in range(keys)])
        world.send_many([(EVENT, add("k1", 100))])
        world.run_until_idle()
        state = world.state(COUNTER)
        assert world.kernel.dead_letters.letters == []
    assert isinstance(state, dict)
    assert len(state) == keys
    return state


def v1_world_of_10000_keys(path: Path) -> dict[str, Any]:
    """The module docstring's 10,000-key v1 world: 500 keys by v1 steps, then the whole map
    (those 500 and 9,500 more) as one journaled import. Returns the map."""
    stepped = v1_world_by_events(path, KEYS_BY_EVENTS)
    seeded = {f"k{i}": {"count": i * 7, "events": 1 + i % 5} for i in range(KEYS_BY_EVENTS, KEYS)}
    whole = {**stepped, **seeded}
    with World.open(path) as world:
        journal_cells(world, [(COUNTER, None, cbor.dumps(whole))])
        state = world.state(COUNTER)
        assert world.air.modules[COUNTER].key_schema is None
    assert state == whole
    assert len(state) == KEYS
    return whole


def cells_of(path: Path) -> dict[Any, Any]:
    with World.open(path, readonly=True) as world:
        return {view.key: view.state for view in world.cells(COUNTER)}


def world_json(*args: object) -> dict[str, Any]:
    done = subprocess.run(
        [str(WORLD_BIN), *(str(a) for a in args)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A folder on tmpfs where there is one (else ``tmp_path``): the crash loop makes some 400
    worlds, and their fsyncs, which a kill -9 test does not need (the page cache survives a
    killed process), cost a minute on a disk; the 10,000-key world's, a few seconds."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="wk-migrate-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- 1. 10,000 keys --------------------------------------------------------------------------


def test_a_v1_counter_world_of_10000_keys_migrates_to_10000_equal_cells(scratch: Path) -> None:
    path = scratch / "w"
    before = v1_world_of_10000_keys(path)
    with World.open(path, readonly=True) as old:
        old_manifest = old.air.manifest_hash

    summary = world_json("migrate", "cells", path, COUNTER, "--key-field", "key", "--json")
    assert summary["ok"] is True
    assert summary["cells"] == KEYS
    assert summary["manifest_hash"]["from"] == old_manifest
    assert summary["key_schema"] == "text"

    cells = cells_of(path)
    assert len(cells) == KEYS
    assert cells == before
    listed = world_json("cells", "ls", path, COUNTER, "--limit", "3", "--json")
    assert listed["count"] == KEYS
    assert [c["key"] for c in listed["cells"]] == ["k0", "k1", "k2"]  # shorter keys first
    assert [c["state"] for c in listed["cells"]] == [before["k0"], before["k1"], before["k2"]]

    with World.open(path) as world:
        assert world.air.manifest_hash == summary["manifest_hash"]["to"]
        world.send_many(
            [
                (EVENT, add("k7", 1)),  # made by a v1 step
                (EVENT, add("k9999", 2)),  # made by the import
                (EVENT, add("k1", 3)),
                (EVENT, add("fresh", 4)),  # a new key
            ]
        )
        world.run_until_idle()
        assert world.kernel.dead_letters.letters == []
        assert world.state(COUNTER, "k7") == {"count": 8, "events": 2}
        assert world.state(COUNTER, "k9999") == {
            "count": before["k9999"]["count"] + 2,
            "events": before["k9999"]["events"] + 1,
        }
        assert world.state(COUNTER, "k1") == {"count": 104, "events": 3}
        assert world.state(COUNTER, "fresh") == {"count": 4, "events": 1}
    assert len(cells_of(path)) == KEYS + 1

    report = verify_world(path)  # replay from genesis: the migration records, then the steps
    assert report.ok, (report.divergence, report.mismatches, report.damaged)
    # world.created, world.migrated, one cell.imported per cell, then 4 events and 4 steps
    assert report.records == 2 + KEYS + 4 + 4
    assert report.steps == 4

    with World.open(Path(summary["backup"]), readonly=True) as old:  # the old history, whole
        assert old.air.manifest_hash == old_manifest
        assert old.state(COUNTER) == before


# --- 2. kill -9 at every durable write -------------------------------------------------------


class Zygote:
    """The forking child of the module docstring: ``crash(at)`` runs one migration that is
    killed just before ``world._fileio`` operation number ``at`` (-1: not killed) and returns
    how it ended. Its stderr (and its grandchildren's) goes to a file, so that no pipe fills."""

    def __init__(self, pristine: Path, work: Path) -> None:
        self.stderr_path = work.parent / "zygote.stderr"
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", ZYGOTE, str(pristine), str(work), str(ROOT), str(TESTS)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self.selector = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def crash(self, at: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(f"{at}\n")
        self.proc.stdin.flush()
        assert self.selector.select(WAIT_S), f"no answer for point {at}: {self.stderr()}"
        line = self.proc.stdout.readline()
        assert line, f"the zygote died: {self.stderr()}"
        answer: dict[str, Any] = json.loads(line)
        assert answer["at"] == at
        return answer

    def close(self) -> None:
        self.selector.close()
        try:  # communicate closes stdin: the zygote's loop ends
            self.proc.communicate(timeout=WAIT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.communicate(timeout=WAIT_S)
        assert self.proc.returncode == 0, self.stderr()


@pytest.fixture
def zygote(scratch: Path) -> Iterator[tuple[Zygote, dict[str, Any]]]:
    pristine = scratch / "pristine" / "w"
    before = v1_world_by_events(pristine, CRASH_KEYS)
    (scratch / "work").mkdir()
    child = Zygote(pristine, scratch / "work")
    try:
        yield child, before
    finally:
        child.close()


def outcome_of(world_dir: Path, before: dict[str, Any]) -> tuple[str, str]:
    """Open the world as a writer does (which finishes a swap a kill interrupted) and say
    which world it is, ``old`` or ``new``, after checking its content; and its manifest."""
    with World.open(world_dir) as world:
        keyed = world.air.modules[COUNTER].key_schema is not None
        manifest = world.air.manifest_hash
        if keyed:
            assert {view.key: view.state for view in world.cells(COUNTER)} == before
        else:
            assert world.state(COUNTER) == before
    return ("new" if keyed else "old"), manifest


def changes_files(op: str, existed: bool) -> bool:
    """Whether a kill just before this operation can leave other files than a kill just
    before the next one (see the module docstring)."""
    if op in SYNCS:
        return False
    if op == "unlink":
        return existed
    if op == "mkdir":
        return not existed
    return True


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=pytest.mark.long)])
def test_a_kill_at_every_durable_write_leaves_the_old_or_the_new_world(
    zygote: tuple[Zygote, dict[str, Any]], scratch: Path, tmp_path: Path, every: bool
) -> None:
    """The long variant kills at every write that changes files; the main suite at the first
    of each kind of operation on each side of the point of no return, and around it."""
    child, before = zygote
    work = scratch / "work"
    whole = child.crash(-1)
    assert (whole["signal"], whole["exit"]) == (None, 0)
    ops = [tuple(op) for op in json.loads((work / "at-1" / "ops.json").read_text())]
    _, new_manifest = outcome_of(work / "at-1" / "w", before)
    with World.open(scratch / "pristine" / "w", readonly=True) as pristine:
        old_manifest = pristine.air.manifest_hash
    shutil.rmtree(work / "at-1")
    assert {op for op, _path, _existed in ops} <= KNOWN_OPS  # a new kind needs a look here
    points = [at for at, (op, _path, existed) in enumerate(ops) if changes_files(op, existed)]
    assert len(points) > 100
    # The point of no return: the rename of the old world to its backup. A kill before it
    # leaves the old world; a kill after it, the new one (finished by the next writer's open).
    names = [(op, path) for op, path, _existed in ops]
    aside = names.index(("replace", "w.bak-1"))
    assert names[aside + 1 :].count(("replace", "w")) == 1
    first_new = min(at for at in points if at > aside)
    if not every:
        kinds = {(names[at][0], at > aside): at for at in reversed(points)}
        points = sorted({*kinds.values(), aside, first_new, points[0], points[-1]})

    outcomes = []
    for n, at in enumerate(points):
        case = work / f"at{at}"
        ended = child.crash(at)
        assert (ended["signal"], ended["exit"]) == (signal.SIGKILL, None), (at, ops[at], ended)
        which, manifest = outcome_of(case / "w", before)
        assert which == ("old" if at <= aside else "new"), (at, ops[at])
        assert manifest == (old_manifest if which == "old" else new_manifest), (at, ops[at])
        if which == "new":  # the old world is the backup, whole
            with World.open(case / "w.bak-1", readonly=True) as old:
                assert old.state(COUNTER) == before, (at, ops[at])
            assert not (case / ".w.ready").exists()
            assert not (case / ".w.migrating").exists()
        if at in (aside, first_new):  # one of each: it takes events and replays exactly
            shutil.copytree(case, tmp_path / f"kept-{which}")
        if which == "old" and (n % RETRY_EVERY == 0 or at == aside):  # a retry completes
            migrate_cells(case / "w", COUNTER, "key")
            assert outcome_of(case / "w", before) == ("new", new_manifest), (at, ops[at])
            assert not (case / ".w.migrating").exists()
            assert not (case / ".w.ready").exists()
        outcomes.append(which)
        shutil.rmtree(case)
    olds = sum(at <= aside for at in points)
    assert outcomes == ["old"] * olds + ["new"] * (len(points) - olds)

    for which in ("old", "new"):
        world_dir = tmp_path / f"kept-{which}" / "w"
        with World.open(world_dir) as world:
            world.send_many([(EVENT, add("k3", 5)), (EVENT, add("fresh", 1))])
            world.run_until_idle()
            assert world.kernel.dead_letters.letters == []
            if which == "new":
                assert world.state(COUNTER, "k3") == {"count": 8, "events": 2}
                assert world.state(COUNTER, "fresh") == {"count": 1, "events": 1}
            else:
                state = world.state(COUNTER)
                assert state["k3"] == {"count": 8, "events": 2}
                assert state["fresh"] == {"count": 1, "events": 1}
        report = verify_world(world_dir)
        assert report.ok, (which, report.divergence, report.mismatches, report.damaged)


def test_a_reader_opens_the_world_a_kill_between_the_swap_renames_left(
    zygote: tuple[Zygote, dict[str, Any]], scratch: Path
) -> None:
    child, before = zygote
    work = scratch / "work"
    child.crash(-1)
    ops = [
        (op, path) for op, path, _existed in json.loads((work / "at-1" / "ops.json").read_text())
    ]
    at = ops.index(("replace", "w.bak-1")) + 1  # the old world is aside, the new not yet in
    ended = child.crash(at)
    assert ended["signal"] == signal.SIGKILL
    with World.open(work / f"at{at}" / "w", readonly=True) as world:
        assert {view.key: view.state for view in world.cells(COUNTER)} == before
