"""Side by side on one machine: our kernel (native and pure), its peers and the plain-Python floor.

    .venv/bin/python tools/bench/compare.py [--cells 100,1000,10000] [--events 50000]
        [--peer-venv ~/.cache/world-kernel-compare] [--out docs/bench] [--date 2026-11-26]

One process tree: this script runs each system in a child process, one after another, on the
same keyed counter workload (``--events`` events spread over ``--cells`` keys, one ``Add 1`` each,
durable with group commit where the system has it), then draws the charts. Systems:

- ``kernel-native`` / ``kernel-pure``: ``World.send_many`` in batches of 10,000, then
  ``run_until_idle`` (one commit per 4,096 steps), the final checkpoint, then ``world replay
  --verify`` (``verify_world``); ``WORLD_NATIVE`` 1 / 0. Every step is a fresh WASM instance of
  the C counter, strict output decoding and schema validation.
- ``eventsourcing-per-event`` / ``eventsourcing-batched``: eventsourcing 9.5.6 on SQLite, one
  aggregate per key, one ``save`` per event, or one per 1,000 events (the closest thing to
  group commit); replay = ``repository.get`` of every aggregate from a fresh application.
- ``dbos`` (where it installs): one DBOS workflow per event on a SQLite system database; no replay
  figure (completed workflows are not re-executed).
- ``floor``: plain Python, no sandbox and no validation: a dict of counters, two CBOR records per
  event (input and new state) framed with length and CRC32, ``fdatasync`` per 1,000 events;
  replay = read, check and decode every frame and re-apply the inputs.

The peers and matplotlib are not project dependencies: they are installed into ``--peer-venv``
(created on first use). Step latency is one event's processing without the group commit (a
tick for the kernel; the command for eventsourcing-batched; command + save for per-event; the
workflow call for DBOS; update + encode + buffer for the floor): median and 99th percentile.
Results go to ``--out``/compare.json and the charts next to it, each titled with machine and date.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EVENT = "demo/CounterEvent@1"
PEERS = ("eventsourcing==9.5.6", "dbos", "matplotlib")
SYSTEMS = (
    "floor",
    "kernel-native",
    "kernel-pure",
    "eventsourcing-batched",
    "eventsourcing-per-event",
    "dbos",
)
PEER_SYSTEMS = {"eventsourcing-batched", "eventsourcing-per-event", "dbos"}


def _latency(samples_ns: list[int]) -> tuple[float, float]:
    samples_ns.sort()
    if not samples_ns:
        return 0.0, 0.0
    p99 = samples_ns[min(len(samples_ns) - 1, int(len(samples_ns) * 0.99))]
    return statistics.median(samples_ns) / 1000, p99 / 1000


# --- workers (each runs in its own child process) ----------------------------------------------


def worker_kernel(cells: int, events: int, folder: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from world import World
    from world.history import verify_world

    path = folder / "world"
    world = World.create(path, ROOT / "manifests" / "counter")
    samples: list[int] = []
    tick, clock = world.kernel.tick, time.perf_counter_ns

    def timed_tick() -> bool:
        start = clock()
        ran = tick()
        samples.append(clock() - start)
        return ran

    world.kernel.tick = timed_tick  # type: ignore[method-assign]
    values = [{"key": f"k{i % cells}", "op": {"$tag": "Add", "$value": 1}} for i in range(events)]
    start = time.perf_counter()
    for i in range(0, events, 10_000):
        world.send_many((EVENT, v) for v in values[i : i + 10_000])
        world.run_until_idle()
    world.snapshot()
    elapsed = time.perf_counter() - start
    world.close()
    start = time.perf_counter()
    report = verify_world(path)
    replay = time.perf_counter() - start
    assert report.ok, report
    p50, p99 = _latency(samples[:-1] if samples else samples)
    return {
        "events_per_s": events / elapsed,
        "replay_events_per_s": events / replay,
        "p50_us": p50,
        "p99_us": p99,
    }


def worker_floor(cells: int, events: int, folder: Path) -> dict[str, Any]:
    import cbor2

    log = folder / "floor.log"
    counts: dict[str, int] = {}
    samples: list[int] = []
    clock = time.perf_counter_ns
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    pending: list[bytes] = []
    start = time.perf_counter()
    for i in range(events):
        t0 = clock()
        key = f"k{i % cells}"
        counts[key] = counts.get(key, 0) + 1
        for record in ({"key": key, "add": 1}, {"key": key, "count": counts[key]}):
            payload = cbor2.dumps(record)
            pending.append(
                len(payload).to_bytes(4, "little")
                + zlib.crc32(payload).to_bytes(4, "little")
                + payload
            )
        samples.append(clock() - t0)
        if len(pending) >= 2_000:
            os.write(fd, b"".join(pending))
            os.fdatasync(fd)
            pending.clear()
    os.write(fd, b"".join(pending))
    os.fdatasync(fd)
    os.close(fd)
    elapsed = time.perf_counter() - start
    start = time.perf_counter()
    data, offset, replayed = log.read_bytes(), 0, {}
    while offset < len(data):
        size = int.from_bytes(data[offset : offset + 4], "little")
        payload = data[offset + 8 : offset + 8 + size]
        assert zlib.crc32(payload) == int.from_bytes(data[offset + 4 : offset + 8], "little")
        record = cbor2.loads(payload)
        if "add" in record:
            replayed[record["key"]] = replayed.get(record["key"], 0) + record["add"]
        offset += 8 + size
    replay = time.perf_counter() - start
    assert replayed == counts
    p50, p99 = _latency(samples)
    return {
        "events_per_s": events / elapsed,
        "replay_events_per_s": events / replay,
        "p50_us": p50,
        "p99_us": p99,
    }


def worker_eventsourcing(cells: int, events: int, folder: Path, batch: int) -> dict[str, Any]:
    from uuid import NAMESPACE_URL, uuid5

    os.environ["PERSISTENCE_MODULE"] = "eventsourcing.sqlite"
    os.environ["SQLITE_DBNAME"] = str(folder / "es.sqlite")
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    class Counter(Aggregate):
        @event("Created")
        def __init__(self, key: str) -> None:
            self.key = key
            self.count = 0

        @staticmethod
        def create_id(key: str) -> Any:
            return uuid5(NAMESPACE_URL, f"/counter/{key}")

        @event("Added")
        def add(self, n: int) -> None:
            self.count += n

    app = Application()
    live: dict[str, Counter] = {}
    pending: list[Counter] = []
    samples: list[int] = []
    clock = time.perf_counter_ns
    start = time.perf_counter()
    for i in range(events):
        t0 = clock()
        key = f"k{i % cells}"
        agg = live.get(key)
        if agg is None:
            agg = live[key] = Counter(key)
        agg.add(1)
        pending.append(agg)
        if batch == 1:
            app.save(agg)
            pending.clear()
        samples.append(clock() - t0)
        if len(pending) >= batch:
            app.save(*{id(a): a for a in pending}.values())
            pending.clear()
    if pending:
        app.save(*{id(a): a for a in pending}.values())
    elapsed = time.perf_counter() - start
    fresh = Application()
    start = time.perf_counter()
    total = sum(fresh.repository.get(agg.id).count for agg in live.values())
    replay = time.perf_counter() - start
    assert total == events
    p50, p99 = _latency(samples)
    return {
        "events_per_s": events / elapsed,
        "replay_events_per_s": events / replay,
        "p50_us": p50,
        "p99_us": p99,
    }


def worker_dbos(cells: int, events: int, folder: Path) -> dict[str, Any]:
    from dbos import DBOS

    DBOS(
        config={
            "name": "compare",
            "system_database_url": f"sqlite:///{folder}/dbos.sqlite",
            "run_admin_server": False,
        }
    )
    counts: dict[str, int] = {}

    @DBOS.step()
    def add(key: str, n: int) -> int:
        counts[key] = counts.get(key, 0) + n
        return counts[key]

    @DBOS.workflow()
    def counter_event(key: str, n: int) -> int:
        return add(key, n)

    DBOS.launch()
    samples: list[int] = []
    clock = time.perf_counter_ns
    start = time.perf_counter()
    for i in range(events):
        t0 = clock()
        counter_event(f"k{i % cells}", 1)
        samples.append(clock() - t0)
    elapsed = time.perf_counter() - start
    DBOS.destroy()
    p50, p99 = _latency(samples)
    return {
        "events_per_s": events / elapsed,
        "replay_events_per_s": None,
        "p50_us": p50,
        "p99_us": p99,
    }


def run_worker(system: str, cells: int, events: int) -> dict[str, Any]:
    workers: dict[str, Callable[[int, int, Path], dict[str, Any]]] = {
        "kernel-native": worker_kernel,
        "kernel-pure": worker_kernel,
        "floor": worker_floor,
        "eventsourcing-per-event": lambda c, e, f: worker_eventsourcing(c, e, f, 1),
        "eventsourcing-batched": lambda c, e, f: worker_eventsourcing(c, e, f, 1_000),
        "dbos": worker_dbos,
    }
    with tempfile.TemporaryDirectory(prefix="compare-") as folder:
        result = workers[system](cells, events, Path(folder))
    return {"system": system, "cells": cells, "events": events, **result}


# --- plotting (runs in the peer venv, where matplotlib is) -------------------------------------


def plot(results: list[dict[str, Any]], out: Path, caption: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [s for s in SYSTEMS if any(r["system"] == s for r in results)]
    written = []

    def save(fig: Any, name: str, title: str) -> None:
        fig.suptitle(title, fontsize=11)
        fig.text(0.01, 0.01, caption, fontsize=7, color="#555")
        fig.tight_layout(rect=(0, 0.04, 1, 0.95))
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for system in systems:
        rows = sorted((r for r in results if r["system"] == system), key=lambda r: r["cells"])
        ax.plot(
            [r["cells"] for r in rows], [r["events_per_s"] for r in rows], marker="o", label=system
        )
    ax.set(xscale="log", yscale="log", xlabel="cells (distinct keys)", ylabel="events/s, durable")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, "throughput_vs_cells.png", "Throughput vs cells (keyed counter, end to end)")

    cells = max(r["cells"] for r in results)
    at = {r["system"]: r for r in results if r["cells"] == cells}
    replayed = [s for s in systems if s in at and at[s]["replay_events_per_s"]]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    bars = ax.bar(replayed, [at[s]["replay_events_per_s"] for s in replayed], color="#4878a8")
    ax.bar_label(bars, fmt="{:,.0f}", fontsize=8)
    ax.set(yscale="log", ylabel="events/s replayed")
    ax.tick_params(axis="x", labelsize=8, rotation=15)
    save(fig, "replay.png", f"Replay from the durable log ({cells:,} cells)")

    lat = [s for s in systems if s in at]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    xs = range(len(lat))
    p50 = ax.bar([x - 0.2 for x in xs], [at[s]["p50_us"] for s in lat], 0.4, label="p50")
    p99 = ax.bar([x + 0.2 for x in xs], [at[s]["p99_us"] for s in lat], 0.4, label="p99")
    ax.bar_label(p50, fmt="{:,.1f}", fontsize=7)
    ax.bar_label(p99, fmt="{:,.1f}", fontsize=7)
    ax.set_xticks(list(xs), lat, fontsize=8, rotation=15)
    ax.set(yscale="log", ylabel="µs per event (without the group commit)")
    ax.legend(fontsize=8)
    save(fig, "step_latency.png", f"Step latency p50 / p99 ({cells:,} cells)")
    return written


# --- orchestration -------------------------------------------------------------------------------


def machine() -> str:
    model = ""
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = os.getloadavg()[0]
    return (
        f"{model}, nproc {os.cpu_count()}, Linux {platform.release()}, "
        f"Python {platform.python_version()}, load {load:.1f} at start"
    )


def peer_python(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    for requirement in PEERS:  # each on its own: one that does not install is left out
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", requirement],
            check=False,
        )
    return python


def child(python: Path, system: str, cells: int, events: int) -> dict[str, Any] | str:
    env = {**os.environ, "WORLD_NATIVE": "0" if system == "kernel-pure" else "1"}
    cmd = [
        str(python),
        __file__,
        "--worker",
        system,
        "--cells",
        str(cells),
        "--events",
        str(events),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return (done.stderr.strip().splitlines() or ["no output"])[-1]
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def events_for(system: str, events: int) -> int:
    if system == "dbos":
        return min(events, 300)
    if system == "eventsourcing-per-event":
        return min(events, 5_000)
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="100,1000,10000")
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument(
        "--peer-venv", type=Path, default=Path.home() / ".cache" / "world-kernel-compare"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench")
    parser.add_argument("--date", default=time.strftime("%Y-%m-%d"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--plot", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--caption", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_worker(args.worker, int(args.cells), args.events)))
        return
    if args.plot:
        results = json.loads(args.plot.read_text())["results"]
        for path in plot(results, args.out, args.caption):
            print(f"chart {path}")
        return
    systems = [s for s in args.systems.split(",") if s]
    peers = peer_python(args.peer_venv) if PEER_SYSTEMS & set(systems) else None
    caption = f"{args.date}; {machine()}"
    results, skipped = [], {}
    for cells in [int(c) for c in args.cells.split(",")]:
        for system in systems:
            python = peers if system in PEER_SYSTEMS else Path(sys.executable)
            if python is None:
                continue
            found = child(python, system, cells, events_for(system, args.events))
            if isinstance(found, str):
                skipped[system] = found
                print(f"{system:<24} cells={cells:>7,}: not run ({found})", flush=True)
                continue
            results.append(found)
            replay = found["replay_events_per_s"]
            print(
                f"{system:<24} cells={cells:>7,} events={found['events']:>7,}: "
                f"{found['events_per_s']:>9,.0f} events/s, replay "
                f"{'-' if replay is None else f'{replay:,.0f}'}/s, "
                f"step p50 {found['p50_us']:.1f} µs p99 {found['p99_us']:.1f} µs",
                flush=True,
            )
    args.out.mkdir(parents=True, exist_ok=True)
    data = {"date": args.date, "machine": caption, "results": results, "skipped": skipped}
    (args.out / "compare.json").write_text(json.dumps(data, indent=1) + "\n")
    if peers is not None and results:
        subprocess.run(
            [
                str(peers),
                __file__,
                "--plot",
                str(args.out / "compare.json"),
                "--out",
                str(args.out),
                "--caption",
                caption,
            ],
            check=False,
        )


if __name__ == "__main__":
    main()
