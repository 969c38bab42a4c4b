"""The upgrade fault script (issue 21), and a fork server that crashes it at durable operation K.

``SCRIPT`` runs on a counter world with cells ``k0``..``k5`` (counts 1..6) and ``big`` (a count
counter_v2 refuses to carry), made by ``make_world``: open; propose ``counter_v2_air`` (a state
schema change); apply it; send ``AFTER_APPLY`` and run it; ``upgrade_cells(--all)`` in batches of ``BATCH`` (4 batches, one of
them with ``big``'s failure line); a snapshot (a checkpoint of cells in both eras: ``big``
stays in the old one); close. ``run_script`` plays it and calls ``on_ack(index, world, done)`` after each action that returned and after
each upgrade batch that was committed (``done``: cells of the upgrade taken so far; None for a
whole action). It stops at the first action that raises and returns that action's index and
exception, after closing the handle it used (as a ``with`` block would).

As a child, ``upgrade_fault_child.py --serve`` is ``world_fault_child.py --serve`` for this
script (the same reasons, the same protocol): it imports once, makes ``fsync`` and its kin
no-ops (``world_fault_child.no_flush``: a killed process keeps the page cache; and the
journal's ``fileio._sync_data``, which holds ``os.fdatasync`` as imported), then for each
request ``K WORLD OUT`` forks a process that plays the script on ``WORLD`` and ``os._exit(137)``s
at durable operation K (0-based; ``-1`` never), writing to the file ``OUT`` one line
``ack INDEX SEQ`` per acknowledgement (``SEQ``: the journal's committed ``seq_next`` then;
``INDEX`` is ``batch`` for an upgrade batch) and, at the end, ``ops N``; and answers with the
forked process's exit status.

Also here, for ``test_upgrade_crashes`` and the power-loss scenarios ``apply`` and
``cell_upgrade`` (``test_power_loss``): the checks of a world the script was cut short in
(``one_era``) and running the rest of it again (``finish``).
"""

from __future__ import annotations

import os
import shutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from world_fault_child import CRASH_STATUS, NO_FLUSH, no_flush

from air import cbor
from world import World
from world import _fileio as fileio
from world.gov import apply, proposals, propose, upgrade_cells

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

V2_AIR: Final = Path(__file__).resolve().parent / "fixtures" / "counter_v2_air"
COUNTER_2: Final = "demo/Counter@2"
TOO_BIG: Final = 2**53  # counter_v2's upgrade hook refuses a count above 2^53 - 1
CELLS: Final = {**{f"k{i}": i + 1 for i in range(6)}, "big": TOO_BIG}
BATCH: Final = 2
AFTER_APPLY: Final = (("k0", 10), ("n", 5))
"""Sent and run between the apply and the upgrade: ``k0`` steps in its old era, with the old
module; ``n`` is born in the new one."""
SCRIPT: Final = ("open", "propose", "apply", "send", "run", "upgrade", "snapshot", "close")

OnAck = Callable[[int, World, "int | None"], None]


def make_world(world_dir: Path) -> None:
    """The starting world: ``CELLS`` stepped and checkpointed (so an open recovers the
    script's records as a journal tail after a checkpoint), closed; with the script's compiled
    modules already in its module cache (``<world>/cache``: derived, keyed by wasm hash), so
    that no crash run, and no check after one, spends ~0.1 s compiling counter_v2 again. (A
    crash while that cache is written is ``test_world_faults``' matter.)"""
    with World.create(world_dir, COUNTER_AIR) as world:
        world.send_many([(EVENT, add(key, n)) for key, n in CELLS.items()])
        world.run_until_idle()
        world.snapshot()
    warm = world_dir.with_name(world_dir.name + ".warm")
    shutil.copytree(world_dir, warm)
    failed = run_script(warm, lambda _index, _world, _done: None)
    assert failed is None, failed
    for compiled in (warm / "cache").iterdir():
        if compiled.is_file():
            shutil.copy2(compiled, world_dir / "cache" / compiled.name)
    shutil.rmtree(warm)


def run_script(world_dir: Path, on_ack: OnAck) -> tuple[int, Exception] | None:
    """Play ``SCRIPT`` (see the module docstring)."""
    world: World | None = None
    proposal = -1
    for index, action in enumerate(SCRIPT):
        used = world
        try:
            if action == "open":
                world = used = World.open(world_dir)
            elif world is None:
                raise AssertionError(f"{action} without a world")
            elif action == "propose":
                proposal = propose(world, V2_AIR, "crash matrix")[0].id
            elif action == "apply":
                apply(world, proposal)
            elif action == "send":
                for key, n in AFTER_APPLY:
                    world.send(EVENT, add(key, n))
            elif action == "run":
                world.run_until_idle()
            elif action == "upgrade":
                upgrade_cells(world, COUNTER_2, batch=BATCH, progress=_acks(on_ack, index, world))
            elif action == "snapshot":
                world.snapshot()
            elif action == "close":
                world.close()
                world = None
        except Exception as exc:
            if world is not None:
                world.close()
            return index, exc
        assert used is not None
        on_ack(index, used, None)
    return None


# --- checks shared with the power-loss scenarios (``test_power_loss``) -------------------------

Record = tuple[int, str, str, Any]
"""A journal record as the checks compare them: (seq, subject, kind, body)."""


def upgraded_keys(records: list[Record]) -> list[Any]:
    """The keys of the cells the journaled ``cell.upgraded`` records moved, in order."""
    return [
        cbor.loads(line[0])
        for _seq, _subject, kind, body in records
        if kind == "cell.upgraded"
        for line in body["cells"]
    ]


def one_era(world: World, records: list[Record], old: str, new: str, old_wasm: str) -> None:
    """``world`` is in the era its journal says (manifest ``new`` if and only if a
    ``gov.applied`` is journaled, else ``old``), and each of its cells wholly in one era, with
    the state its journal says: its stepped events summed; in ``new`` with ``upgraded_from``
    the old module if a ``cell.upgraded`` record names it (once), in ``new`` with
    ``upgraded_from`` None if it was born after the apply, else in ``old`` (old schema)."""
    applied = [r[0] for r in records if r[2] == "gov.applied"]
    assert len(applied) <= 1, "applied twice"
    assert world.air.manifest_hash == (new if applied else old), "the era is not the journal's"
    upgraded = upgraded_keys(records)
    assert len(set(upgraded)) == len(upgraded), "a cell upgraded twice"
    sent: dict[int, tuple[str, int]] = {}
    expected: dict[str, dict[str, Any]] = {}
    born: dict[str, int] = {}
    for seq, _subject, kind, body in records:
        if kind == "event.in":
            value = cbor.loads(body["value"])
            sent[seq] = (value["key"], value["op"]["$value"])
        elif kind.startswith("step"):
            key, n = sent[body["src"]]
            cell = expected.setdefault(key, {"count": 0, "events": 0})
            cell["count"] += n
            cell["events"] += 1
            born.setdefault(key, seq)
    found = {}
    for view in world.cells(COUNTER_2 if applied else COUNTER):
        era, state = cbor.raw_to_hash(view.entry.manifest_hash), view.state
        if view.key in upgraded:
            want = (new, {**expected[view.key], "upgraded_from": old_wasm})
        elif applied and born[view.key] > applied[0]:
            want = (new, {**expected[view.key], "upgraded_from": None})
        else:
            want = (old, expected[view.key])
        assert (era, state) == want, view.key
        found[view.key] = state
    assert set(found) == set(expected)


def finish(world: World) -> None:
    """Run again what a crash cut short (propose if no proposal is journaled, apply if the
    world is not in its era, run what is queued, upgrade what is left): every cell but ``big``
    ends in the new era."""
    found = proposals(world)
    if not found:
        found = [propose(world, V2_AIR, "again")[0]]
    if world.air.manifest_hash != found[0].manifest_hash:
        apply(world, found[0].id)
    world.run_until_idle()
    done = upgrade_cells(world, COUNTER_2, batch=BATCH)
    assert [key for key, _reason in done.failed] == ["big"]
    assert sorted(upgraded_keys(records_of(world))) == sorted(k for k in CELLS if k != "big")


def records_of(world: World) -> list[Record]:
    return [(r.seq, r.subject, r.kind, r.body) for r in world.journal.read(0)]


def _acks(on_ack: OnAck, index: int, world: World) -> Callable[[int, int], None]:
    """The upgrade's ``progress``: an acknowledgement per committed batch."""
    return lambda done, _total: on_ack(index, world, done)


def crash_run(world_dir: Path, crash_at: int, out_fd: int) -> None:
    """Play the script, dying with status 137 at durable operation ``crash_at``."""
    ops = 0

    def hook(_op: str, _path: str) -> None:
        nonlocal ops
        if ops == crash_at:
            os._exit(CRASH_STATUS)
        ops += 1

    def ack(index: int, world: World, done: int | None) -> None:
        label = "batch" if done is not None else str(index)
        os.write(out_fd, f"ack {label} {world.journal.seq_next_committed}\n".encode())

    with fileio.fault_hook(hook):
        failed = run_script(world_dir, ack)
    if failed is not None:
        os.write(out_fd, f"failed {failed[0]} {type(failed[1]).__name__}\n".encode())
    os.write(out_fd, f"ops {ops}\n".encode())


def serve() -> None:
    """Answer ``K WORLD OUT`` lines with the exit status of a forked ``crash_run``."""
    for name in NO_FLUSH:
        setattr(os, name, no_flush)
    fileio._sync_data = no_flush  # os.fdatasync, as imported
    for line in sys.stdin:
        crash_at, world_dir, out = line.split()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                crash_run(Path(world_dir), int(crash_at), fd)
                status = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(status)  # never return into the server's loop
        _, wait_status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(wait_status), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] != ["--serve"]:
        raise SystemExit("usage: upgrade_fault_child.py --serve")
    serve()
