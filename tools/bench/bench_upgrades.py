"""World upgrades (issue 21's targets): ``apply`` on worlds of growing size, ``cells upgrade
--all`` of same-schema cells (a re-pin), and of cells whose state schema changes (one step of
the upgrade hook each) against ordinary steps of the same cells.

Run by hand (not in CI)::

    python tools/bench/bench_upgrades.py                               # apply + re-pin, 10k and 100k
    python tools/bench/bench_upgrades.py --cells 10000 100000 1000000  # ... and 1,000,000
    python tools/bench/bench_upgrades.py --cells --hook-cells 100000   # the hook case only

Workloads (each size in its own process, so one run's memory and caches do not help the next;
one JSON line per run):

* ``same`` (``--cells N ...``): a keyed counter world (a copy of ``manifests/counter``,
  ``demo/Counter@1``) of N cells, one ``Add 1`` each (``World.send_many`` in batches of B,
  ``run_until_idle`` after each, a checkpoint, close). Reopened, it is proposed the same AIR
  with a "fixed" wasm (the counter's binary with a custom section appended: another module,
  the same state schema) ``--applies`` times in a row, each proposal applied at once; each
  apply is timed, and the journal's growth and the cell store's dirty count around it are
  recorded. Then ``upgrade_cells(world, "demo/Counter@1")`` (what ``world cells upgrade
  --all`` runs) is timed (the automatic checkpoints every ``SNAPSHOT_DIRTY_MAX`` dirty cells
  fall inside it), then a checkpoint of the cells left dirty, then the next open. ``--cli``
  runs the upgrade as ``world cells upgrade DIR R --all`` instead (a whole process: imports,
  open, upgrade, close), which is what the target names.
* ``hook`` (``--hook-cells N``): the same world of N cells (``manifests/counter``); then N
  ordinary steps of the same cells (one ``Add 1`` each, sent and run as above, then a
  checkpoint); then ``tests/fixtures/counter_v2_air`` (``demo/Counter@2``, state schema
  ``demo/CounterState@2``, the C SDK's upgrade hook) proposed and applied, and
  ``upgrade_cells(world, "demo/Counter@2")`` + a checkpoint timed (every cell stepped once with
  ``sys/StateUpgrade@1``); then N ordinary steps again, in the new era. The ratio is the
  upgrade's time over the steps' (both with their checkpoint).

* ``shadow`` (``--shadow-inputs N``): a counter world sent N ``Add 1`` events over
  ``min(N, 1000)`` keys (run, checkpointed, closed). Reopened, the "fixed" AIR is proposed and
  ``world upgrade shadow`` (``world.gov.shadow``, default ``--from``: the newest 10,000 inputs)
  is timed against ``replay --verify`` of the same world (``world.history.verify_world``:
  every record re-executed from genesis), the replay the shadow is measured against.

``--profile FILE`` writes a cProfile of the upgrade phase (pstats format; ``--profile-top K``
prints the top K by cumulative time to stderr). The process runs the collector as the
``world`` CLI does (``cli.main.COLLECTOR_THRESHOLDS``).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cli.main import COLLECTOR_THRESHOLDS  # noqa: E402 - the repo root goes on sys.path first

EVENT = "demo/CounterEvent@1"
COUNTER = "demo/Counter@1"
COUNTER_2 = "demo/Counter@2"
COUNTER_AIR = ROOT / "manifests" / "counter"
COUNTER_WASM = ROOT / "reducers" / "counter" / "counter.wasm"
V2_AIR = ROOT / "tests" / "fixtures" / "counter_v2_air"


def counter_air(folder: Path, wasm: bytes) -> Path:
    """A copy of the counter AIR in ``folder`` with ``wasm`` as its binary."""
    folder.mkdir()
    module, manifest = json.loads((COUNTER_AIR / "counter.air.json").read_text())
    (folder / "counter.wasm").write_bytes(wasm)
    module["wasm"] = "counter.wasm"
    (folder / "counter.air.json").write_text(json.dumps([module, manifest]))
    shutil.copy(COUNTER_AIR / "schemas.air.json", folder / "schemas.air.json")
    return folder


def fixed_wasm(n: int) -> bytes:
    """The counter's wasm with custom section ``fix<n>`` appended: another binary, the same
    behaviour and state schema (a rebuilt fix, as far as the world can tell)."""
    name = b"fix"
    payload = bytes([len(name)]) + name + f"v{n}".encode()
    return COUNTER_WASM.read_bytes() + bytes([0, len(payload)]) + payload


def send_all(world: Any, cells: int, batch: int) -> float:
    """One ``Add 1`` to each of keys ``k0..k<cells-1>``, sent in batches and run; seconds
    spent in ``run_until_idle`` (the rest is sending)."""
    running = 0.0
    for i in range(0, cells, batch):
        world.send_many(
            (EVENT, {"key": f"k{n}", "op": {"$tag": "Add", "$value": 1}})
            for n in range(i, min(cells, i + batch))
        )
        t0 = time.perf_counter()
        world.run_until_idle()
        running += time.perf_counter() - t0
    return running


def build(path: Path, air: Path, cells: int, batch: int) -> float:
    from world import World

    t0 = time.perf_counter()
    world = World.create(path, air)
    send_all(world, cells, batch)
    world.snapshot()
    world.close()
    return time.perf_counter() - t0


def profiled(profile: Path | None, top: int, fn: Any, *args: Any) -> Any:
    if profile is None:
        return fn(*args)
    prof = cProfile.Profile()
    try:
        return prof.runcall(fn, *args)
    finally:
        prof.dump_stats(profile)
        if top:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
            print(out.getvalue(), file=sys.stderr)


def world_binary() -> list[str]:
    script = Path(sys.executable).with_name("world")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from cli.main import main; main()"]


def run_same(cells: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from world import World
    from world.gov import apply, propose, upgrade_cells

    path = folder / f"w-{cells}"
    out: dict[str, Any] = {"workload": "same", "cells": cells}
    out["build_s"] = build(
        path, counter_air(folder / "v0", COUNTER_WASM.read_bytes()), cells, args.batch
    )
    world = World.open(path)
    applies, proposes = [], []
    for n in range(1, args.applies + 1):
        t0 = time.perf_counter()
        made, _diff = propose(world, counter_air(folder / f"v{n}", fixed_wasm(n)), f"fix {n}")
        proposes.append(time.perf_counter() - t0)
        seq, dirty = world.journal.seq_next, world.store.dirty_count()
        t0 = time.perf_counter()
        done = apply(world, made.id)
        applies.append(time.perf_counter() - t0)
        grew = world.journal.seq_next - seq
        dirty_after = world.store.dirty_count()
        assert world.air.manifest_hash == made.manifest_hash
        assert (grew, dirty_after) == (1, dirty), (grew, dirty, dirty_after)
        assert done.seq == seq
    out["apply_s"] = [round(s, 4) for s in applies]
    out["apply_median_s"] = statistics.median(applies)
    out["propose_median_s"] = statistics.median(proposes)
    out["apply_journal_growth"] = 1
    out["apply_dirty_before_after"] = [dirty, dirty_after]
    if args.cli:
        world.close()
        argv = [*world_binary(), "cells", "upgrade", str(path), COUNTER, "--all", "--json"]
        t0 = time.perf_counter()
        ran = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=True)
        out["upgrade_cli_s"] = time.perf_counter() - t0
        reply = json.loads(ran.stdout)
        upgraded = reply["upgraded"]
        assert not reply["failed"], reply["failed"]
    else:
        t0 = time.perf_counter()
        done_cells = profiled(args.profile, args.profile_top, upgrade_cells, world, COUNTER)
        out["upgrade_s"] = time.perf_counter() - t0
        out["upgrade_records"] = len(done_cells.records)
        upgraded = done_cells.upgraded
        assert not done_cells.failed, done_cells.failed[:3]
        # The checkpoint of what is left dirty, explicitly: ``upgrade_cells`` leaves
        # ``kernel.consistent`` False after a batch it journaled, so ``close`` skips it.
        t0 = time.perf_counter()
        world.snapshot()
        out["checkpoint_s"] = time.perf_counter() - t0
        world.close()
        out["upgrade_and_checkpoint_s"] = out["upgrade_s"] + out["checkpoint_s"]
    assert upgraded == cells, (upgraded, cells)
    t0 = time.perf_counter()
    World.open(path).close()
    out["open_after_s"] = time.perf_counter() - t0
    total = out["upgrade_cli_s"] if args.cli else out["upgrade_and_checkpoint_s"]
    out["upgrade_cells_per_s"] = cells / total
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    shutil.rmtree(path)
    return out


def steps_phase(world: Any, cells: int, batch: int) -> tuple[float, float]:
    """N ordinary steps (one ``Add 1`` per cell) and a checkpoint: (total s, run s)."""
    t0 = time.perf_counter()
    running = send_all(world, cells, batch)
    world.snapshot()
    return time.perf_counter() - t0, running


def run_hook(cells: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from world import World
    from world.gov import apply, propose, upgrade_cells

    path = folder / f"h-{cells}"
    out: dict[str, Any] = {"workload": "hook", "cells": cells}
    out["build_s"] = build(path, COUNTER_AIR, cells, args.batch)
    world = World.open(path)
    out["steps_v1_s"], out["steps_v1_run_s"] = steps_phase(world, cells, args.batch)
    made, _diff = propose(world, V2_AIR, "state schema 2")
    seq = world.journal.seq_next
    t0 = time.perf_counter()
    apply(world, made.id)
    out["apply_s"] = time.perf_counter() - t0
    assert world.journal.seq_next == seq + 1

    def upgrade() -> Any:
        done = upgrade_cells(world, COUNTER_2)
        t1 = time.perf_counter()
        world.snapshot()
        return done, time.perf_counter() - t1

    t0 = time.perf_counter()
    done, checkpoint_s = profiled(args.profile, args.profile_top, upgrade)
    out["upgrade_s"] = time.perf_counter() - t0
    out["upgrade_checkpoint_s"] = checkpoint_s
    out["upgrade_records"] = len(done.records)
    assert done.upgraded == cells, done.upgraded
    assert not done.failed, done.failed[:3]
    state = world.state(COUNTER_2, "k0")
    assert state["count"] == 2, state
    assert state["upgraded_from"], state
    out["steps_v2_s"], out["steps_v2_run_s"] = steps_phase(world, cells, args.batch)
    assert world.state(COUNTER_2, "k0")["count"] == 3
    world.close()
    out["ratio_upgrade_to_steps_v1"] = out["upgrade_s"] / out["steps_v1_s"]
    out["ratio_upgrade_to_steps_v2"] = out["upgrade_s"] / out["steps_v2_s"]
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    shutil.rmtree(path)
    return out


def run_shadow(inputs: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from world import World
    from world.gov import propose, shadow
    from world.history import verify_world

    path = folder / f"shadow-{inputs}"
    keys = min(inputs, 1000)
    t0 = time.perf_counter()
    with World.create(
        path, counter_air(folder / f"air-shadow-{inputs}", COUNTER_WASM.read_bytes())
    ) as world:
        for i in range(0, inputs, args.batch):
            world.send_many(
                (EVENT, {"key": f"k{n % keys}", "op": {"$tag": "Add", "$value": 1}})
                for n in range(i, min(inputs, i + args.batch))
            )
            world.run_until_idle()
        world.snapshot()
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = verify_world(path)
    replay_s = time.perf_counter() - t0
    assert report.ok, report
    with World.open(path) as world:
        made, _ = propose(world, counter_air(folder / f"air-fix-{inputs}", fixed_wasm(1)))
        t0 = time.perf_counter()
        done = profiled(args.profile, args.profile_top, lambda: shadow(world, made.id))
        shadow_s = time.perf_counter() - t0
    return {
        "workload": "shadow",
        "inputs": inputs,
        "inputs_refed": done.report["inputs"],
        "cells_differ": done.report["cells"]["differ"],
        "build_s": build_s,
        "replay_s": replay_s,
        "shadow_s": shadow_s,
        "ratio_shadow_to_replay": shadow_s / replay_s,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--hook-cells", type=int, nargs="*", default=[])
    parser.add_argument("--shadow-inputs", type=int, nargs="*", default=[])
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--applies", type=int, default=3, help="proposals applied in a row")
    parser.add_argument("--cli", action="store_true", help="upgrade with the `world` command")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile the upgrade here")
    parser.add_argument("--profile-top", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=None, help="parent folder (default: temp)")
    parser.add_argument("--one", choices=("same", "hook", "shadow"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-upgrades-", dir=args.dir))
    try:
        if args.one:
            gc.set_threshold(*COLLECTOR_THRESHOLDS)
            sizes = {"same": args.cells, "hook": args.hook_cells, "shadow": args.shadow_inputs}
            (cells,) = sizes[args.one]
            run = {"same": run_same, "hook": run_hook, "shadow": run_shadow}[args.one]
            result = run(cells, args, folder)
            print(
                json.dumps(
                    {k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}
                )
            )
            return
        runs = [("same", n) for n in args.cells] + [("hook", n) for n in args.hook_cells]
        runs += [("shadow", n) for n in args.shadow_inputs]
        flags = {"same": "--cells", "hook": "--hook-cells", "shadow": "--shadow-inputs"}
        for kind, cells in runs:
            flag = flags[kind]
            command = [sys.executable, __file__, "--one", kind, flag, str(cells)]
            command += ["--batch", str(args.batch), "--applies", str(args.applies)]
            command += ["--dir", str(folder)] + (["--cli"] if args.cli else [])
            if args.profile is not None:
                command += ["--profile", f"{args.profile}.{kind}-{cells}"]
                command += ["--profile-top", str(args.profile_top)]
            done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
            print(done.stdout.strip(), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
