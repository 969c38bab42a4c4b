"""``world cluster ...``: a partitioned world (``world.cluster``). Each command works on the
directories directly, in this process, while the cluster is not up (``run`` then drives every
partition here until idle), and through its Ray actors while it is (``up`` .. ``down``);
``init``, ``replay`` and ``info`` of a stopped cluster need no Ray at all."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import answers, console, emit_json, fail, handle_errors, signals_deferred
from cli.core import (
    ModuleOpt,
    _read_jsonl,
    _split_ids,
    answer_state,
    module_bindings,
    parse_json_arg,
    parse_key_arg,
)

if TYPE_CHECKING:
    from world.cluster import PartitionedHandle

__all__ = ["app"]

app = typer.Typer(
    help="A world partitioned by key across processes and machines (on Ray).",
    no_args_is_help=True,
)
cells_app = typer.Typer(help="The cells of every partition.", no_args_is_help=True)
app.add_typer(cells_app, name="cells")

DirArg = Annotated[Path, typer.Argument(help="The partitioned world's directory")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output")]


@contextmanager
def _asking(directory: Path, *, readonly: bool = False) -> Iterator[PartitionedHandle]:
    """The partitioned world's handle (``world.cluster.open_cluster``): its Ray actors while it
    is up, else every partition opened here; closed at the end."""
    from world.cluster import open_cluster

    handle = open_cluster(directory, readonly=readonly)
    try:
        yield handle
    finally:
        handle.close()


@app.command("init")
def init(
    directory: DirArg,
    air: Annotated[Path, typer.Option("--air", help="AIR file or folder")],
    partitions: Annotated[int, typer.Option("--partitions", help="How many (fixed)")],
    module: ModuleOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Create a partitioned world: PARTITIONS worlds of the same AIR in DIR/p0 .. p<N-1>."""
    from world.cluster import init_cluster

    with handle_errors(json_output), signals_deferred():
        layout = init_cluster(directory, air, partitions, module_bindings(module or []))
    if json_output:
        emit_json({"ok": True, "id": layout.id, "partitions": layout.count})
        return
    console.print(
        f"created partitioned world {directory}: {layout.count} partitions "
        f"(p0 .. p{layout.count - 1})"
    )


@app.command("up")
def up(
    directory: DirArg,
    address: Annotated[
        str | None,
        typer.Option("--address", help="A Ray cluster's address (default: start a local one)"),
    ] = None,
    cpus: Annotated[int | None, typer.Option("--cpus", help="CPUs of a local Ray")] = None,
    shared: Annotated[
        bool,
        typer.Option(
            "--shared",
            help="DIR is on storage every node mounts: partitions are not pinned to a node, "
            "and one whose node dies restarts on another",
        ),
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Start a Ray actor per partition and a router (detached: they run until `down`). By
    default partition i is pinned to the i-th node, whose own disk holds DIR/p<i>."""
    from world.cluster.ray import RayCluster, cluster_up

    with handle_errors(json_output):
        started = cluster_up(directory, address, cpus, "shared" if shared else "local")
        infos = RayCluster(directory).info()
    failed = [i for i in infos if not i["ok"]]
    if json_output:
        emit_json({"ok": not failed, **started, "partitions": infos})
        return
    console.print(f"up on Ray at {started['address']}: {len(infos)} partitions")
    for info in infos:
        said = "runs" if info["ok"] else f"stopped: {info['failure']}"
        console.print(f"p{info['partition']} {said} on node {info['node']} (pid {info['pid']})")


@app.command("down")
def down(directory: DirArg, json_output: JsonOpt = False) -> None:
    """Stop the actors (each closes its world: a checkpoint) and the local Ray `up` started."""
    from world.cluster.ray import cluster_down

    with handle_errors(json_output):
        cluster_down(directory)
    if json_output:
        emit_json({"ok": True})
        return
    console.print(f"{directory} is down")


@app.command("send")
def send(
    directory: DirArg,
    schema: Annotated[str, typer.Argument(help="Event schema")],
    value: Annotated[str | None, typer.Argument(help="The event value as JSON")] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", help='JSON Lines, one value per line ("$id": its id); - stdin'),
    ] = None,
    event_id: Annotated[str | None, typer.Option("--id", help="Idempotency key of VALUE")] = None,
    json_output: JsonOpt = False,
) -> None:
    """Send events, each to the partition owning its key (one durable batch per partition)."""
    if (value is None) == (file is None):
        fail("give exactly one of VALUE or --file")
    with handle_errors(json_output), signals_deferred():
        lines = _read_jsonl(file) if file is not None else [(0, parse_json_arg(value or ""))]
        lines, ids = _split_ids(lines, event_id)
        with _asking(directory) as cluster:
            sent = cluster.send_many(schema, [v for _n, v in lines], ids=ids)
    placed = list(zip(sent.partitions or [], sent.seqs, strict=True))
    if json_output:
        emit_json({"ok": True, "sent": [{"partition": p, "seq": s} for p, s in placed]})
        return
    if len(placed) == 1:
        console.print(f"sent to partition {placed[0][0]} at seq {placed[0][1]}")
    else:
        used = sorted({p for p, _ in placed})
        console.print(f"sent {len(placed)} events to partitions {', '.join(map(str, used))}")


@app.command("run")
def run(directory: DirArg, json_output: JsonOpt = False) -> None:
    """Drive every partition in this process until all are idle and nothing is owed (the
    cluster must not be up: its actors run it then)."""
    from world.cluster import Layout

    with handle_errors(json_output), signals_deferred():
        if Layout.read(directory).up() is not None:
            fail(f"{directory} is up on Ray: its partitions run there (world cluster down)")
        with _asking(directory) as cluster:
            steps = cluster.run_until_idle()
    if json_output:
        emit_json({"ok": True, "steps": steps})
        return
    console.print(f"ran {steps} step(s); every partition is idle, nothing owed")


@app.command("state")
@answers
def state(
    directory: DirArg,
    reducer: Annotated[str, typer.Argument(help="Reducer name")],
    key: Annotated[
        str | None, typer.Option("--key", help="The cell key, JSON read through the key schema")
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """A reducer's state, or one cell's with --key, read in the partition owning the key
    (exit 1 when there is none, as `world state`)."""
    from world.ops import State, StateOf

    with handle_errors(json_output):
        key_value = None if key is None else parse_key_arg(key)
        with _asking(directory, readonly=True) as cluster:
            found = cluster.call("world.state", StateOf(reducer=reducer, key=key_value))
    assert isinstance(found, State)
    answer_state(found.state, reducer, key_value, json_output, found.state_cbor)


@app.command("info")
@answers
def info(directory: DirArg, json_output: JsonOpt = False) -> None:
    """Per partition: journal height, cells, records/s (while up), outbox backlog, status."""
    with handle_errors(json_output), _asking(directory, readonly=True) as cluster:
        infos = cluster.info().model_extra["partitions"]  # type: ignore[index]
    rows = [_row(i) for i in infos]
    if json_output:
        emit_json({"ok": all(r["ok"] for r in rows), "partitions": rows})
        return
    from rich.table import Table

    table = Table("partition", "height", "cells", "records/s", "outbox", "status")
    for row in rows:
        table.add_row(
            str(row["partition"]),
            str(row.get("height", "-")),
            str(row.get("cells", "-")),
            str(row.get("records_per_s", "-")),
            str(row.get("outbox_backlog", "-")),
            "ok" if row["ok"] else f"stopped: {row.get('failure')}",
        )
    console.print(table)
    eras = {row["manifest_hash"] for row in rows if "manifest_hash" in row}
    if len(eras) > 1:
        console.print(
            f"the partitions run {len(eras)} AIRs: an upgrade stopped half-way "
            "(world cluster upgrade again finishes it)"
        )


def _row(info: dict[str, Any]) -> dict[str, Any]:
    """The figures ``info`` shows of one partition (and ``ok``)."""
    row = {"partition": info["partition"], "ok": info.get("ok", True)}
    if "journal_seq_next" in info:
        row["height"] = info["journal_seq_next"]
    if "reducers" in info:
        row["cells"] = sum(r.get("cells", 0) for r in info["reducers"].values())
    for field in (
        "manifest_hash",
        "records_per_s",
        "outbox_backlog",
        "outbox",
        "cursors",
        "failure",
    ):
        if field in info:
            row[field] = info[field]
    return row


@app.command("upgrade")
def upgrade(
    directory: DirArg,
    air: Annotated[Path, typer.Option("--air", help="The new AIR: a folder or one file")],
    note: Annotated[str | None, typer.Option("--note", help="Why: kept with it")] = None,
    module: ModuleOpt = None,
    approve: Annotated[
        bool, typer.Option("--approve", help="Journal an approval in each partition first")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Propose the AIR to every partition, then apply it in each (one era for the whole world;
    the cluster must be down). Run again, it finishes an upgrade that stopped half-way."""
    from world.cluster import upgrade_cluster

    with handle_errors(json_output), signals_deferred():
        bindings = {n: str(Path(f).absolute()) for n, f in module_bindings(module or []).items()}
        rows = upgrade_cluster(directory, air, note, modules=bindings, approve=approve)
    if json_output:
        emit_json({"ok": True, "partitions": rows})
        return
    for row in rows:
        if row.get("skipped"):
            console.print(f"p{row['partition']}: runs this AIR already")
        else:
            console.print(
                f"p{row['partition']}: proposal {row['proposal']} applied at seq {row['applied']}"
            )


@cells_app.command("ls")
@answers
def cells_ls(
    directory: DirArg,
    reducer: Annotated[str, typer.Argument(help="Reducer name")],
    limit: Annotated[int, typer.Option("--limit", help="At most this many")] = 100,
    json_output: JsonOpt = False,
) -> None:
    """The first LIMIT cells of REDUCER, sorted by key (as one world's), each with its
    partition."""
    import json

    with handle_errors(json_output), _asking(directory, readonly=True) as cluster:
        page = cluster.cells(reducer, limit=limit)
    rows = [{"partition": c["partition"], "key": c["key"], "state": c["state"]} for c in page.cells]
    if json_output:
        emit_json({"ok": True, "cells": rows})
        return
    for row in rows:
        console.print(
            f"p{row['partition']}  {json.dumps(row['key'])}  {json.dumps(row['state'])}",
            markup=False,
            highlight=False,
        )


@app.command("replay")
def replay(directory: DirArg, json_output: JsonOpt = False) -> None:
    """`world replay --verify` of every partition (each replays exactly on its own); a
    partition that cannot be replayed is named with the error a single world gives, and the
    others are replayed still."""
    from air.errors import WorldError
    from world.cluster import Layout
    from world.history import verify_world

    rows: list[dict[str, Any]] = []
    with handle_errors(json_output):
        layout = Layout.read(directory)
        for index, path in enumerate(layout.partitions()):
            try:
                report = verify_world(path, None)
            except WorldError as exc:
                rows.append({"partition": index, "ok": False, "error": str(exc)})
                continue
            rows.append(
                {
                    "partition": index,
                    "ok": report.ok,
                    "records": report.records,
                    "steps": report.steps,
                }
            )
    ok = all(r["ok"] for r in rows)
    if json_output:
        emit_json({"ok": ok, "partitions": rows})
        if not ok:
            raise typer.Exit(1)
        return
    for row in rows:
        if "error" in row:
            said = row["error"]
        else:
            verdict = "ok" if row["ok"] else "DIFFERS (world replay --verify DIR/p<i> says where)"
            said = f"{row['records']} records, {row['steps']} steps, {verdict}"
        console.print(f"p{row['partition']}: {said}", markup=False, highlight=False)
    if not ok:
        fail(f"{sum(not r['ok'] for r in rows)} partition(s) did not replay exactly")
