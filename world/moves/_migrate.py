"""``world migrate cells``: turn a non-keyed (v1) reducer whose state is ``map<K, V>`` into a
keyed one with one cell per map entry (seed 001, "Migration Path").

What changes. The reducer's ``defmodule`` gets ``key_schema`` = K and its ABI state becomes V
(a new ``defschema`` ``<state name>Cell@<v>`` when V is written inline); every routing entry
to it gets ``key_field``. The wasm binary is unchanged: a reducer built on the SDK wrapper
serves both modes. Preconditions (each refusal is ``MigrationRefused(reducer, reason)``): the
reducer is not keyed; its state schema resolves to a map whose key type is a valid key type;
every event schema routed to it is a record with ``key_field`` of K's type; each key in the
state fits K; the world is quiet (no queued delivery, plan run or effect in flight: their
history would otherwise have to be re-targeted at cells).

The journal is rebased. The old journal's records cannot replay under the new manifest (its
steps ran the reducer in v1 mode on the whole map), so the migrated world's journal is new:
``world.created`` naming the new manifest, ``world.migrated {manifest_hash, reducer,
key_field, cells, migrated_from: {manifest_hash, journal_seq}}``, then one ``cell.imported``
per cell: the migrated reducer's map entries, and every other reducer's cells as they were.
Replay of the new world is exact by construction (``kernel._moves`` applies those records the
same way live and on replay). The old history is kept whole in ``<world>.bak-<N>``, which
``migrated_from`` names by manifest hash and last seq. Rejected: appending the migration to
the old journal, which would make replay need the old manifest for a prefix of the journal
(two eras of AIR in one world, for one tool). Lost in the rebase: dead letters, step counters
and the logical clock (the world is quiet, so nothing pending depends on them).

All or nothing. The new world is built beside the old one in ``.<name>.migrating``, checked
(it must replay from genesis exactly) and synced, then swapped in by renames
(``world._directory.swap_in``, whose docstring says what a kill at each point leaves and how
``World.open`` finishes a swap a crash interrupted).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air import AirSource, LoadedAir, cbor, load_air
from air.errors import ManifestError, UnknownName, ValueMismatch
from air.types import MAP_KEY_PRIMS, MapT, Prim, Record, Ref, TypeNode, resolve, type_to_obj
from air.values import normalise
from kernel import imported_record, migrated_record
from world import _fileio as fileio
from world._airfiles import inspect_wasm, read_world_sources
from world._cas import OBJECT_BYTES_MAX, FileCas
from world._directory import build_world, recover_swap, remove_tree, swap_in, swap_paths
from world._fsutil import atomic_write, sync_paths, write_unsynced
from world._world import World
from world.effects import KEY_DIR, KEY_FILE, KEY_FILE_BYTES_MAX
from world.errors import MigrationRefused, ReceiptKeyDamaged, storage_errors
from world.history import verify_world
from world.moves._cellfiles import journal_records

__all__ = [
    "MigrationPlan",
    "migrate_cells",
    "plan_migration",
]

Cell = tuple[str, bytes | None, bytes]


@dataclass
class MigrationPlan:
    """What a migration does (``summary`` is the ``--dry-run`` report)."""

    reducer: str
    key_field: str
    key_schema: Any
    state_from: str
    state_to: str
    added_schema: str | None
    routes: list[str]
    cells: list[tuple[bytes, bytes]]
    others: list[Cell]
    sources: list[AirSource]
    air: LoadedAir
    manifest_from: str
    journal_seq: int
    backup: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "reducer": self.reducer,
            "key_field": self.key_field,
            "key_schema": self.key_schema,
            "state_schema": {"from": self.state_from, "to": self.state_to},
            "added_schema": self.added_schema,
            "routes": self.routes,
            "cells": len(self.cells),
            "other_cells": len(self.others),
            "manifest_hash": {"from": self.manifest_from, "to": self.air.manifest_hash},
            "migrated_from_seq": self.journal_seq,
            "backup": self.backup or None,
        }


# --- planning -------------------------------------------------------------------------------


def _authored(node: TypeNode) -> Any:
    """A type as an author writes it: a name for a primitive or a ref, else its JSON object."""
    if isinstance(node, Prim | Ref):
        return node.name
    return type_to_obj(node)


def _check_routes(air: LoadedAir, reducer: str, key_field: str, key: TypeNode) -> list[str]:
    events = [r.event for r in air.manifest.routing.events if r.reducer == reducer]
    wanted = resolve(key, air.schemas)
    for event in events:
        node = resolve(Ref(event), air.schemas)
        fields = node.field_map() if isinstance(node, Record) else {}
        if key_field not in fields:
            raise MigrationRefused(reducer, f"event schema {event} has no field {key_field!r}")
        if resolve(fields[key_field], air.schemas) != wanted:
            raise MigrationRefused(
                reducer, f"field {key_field!r} of {event} is not of the map's key type"
            )
    return events


def _check_quiet(world: World, reducer: str) -> None:
    kernel = world.kernel
    if not kernel.idle() or kernel.runs() or kernel.live_intents():
        raise MigrationRefused(
            reducer, "the world has queued deliveries, plan runs or effects; run it until idle"
        )


def _map_cells(world: World, reducer: str, key: TypeNode) -> list[tuple[bytes, bytes]]:
    """The map's entries as (key_cbor, state_cbor), in key order; refuses keys that do not fit."""
    raw = world.kernel.state_of(reducer, None)
    if raw is None:
        return []
    state = cbor.loads(raw)
    if not isinstance(state, dict):
        raise MigrationRefused(reducer, "the state is not a map")
    cells = []
    for k, v in state.items():
        try:
            fits = normalise(key, k, world.air.schemas) == k
        except ValueMismatch:
            fits = False
        if not fits:
            raise MigrationRefused(reducer, f"map key {k!r} does not fit the key type")
        if v is not None:  # a null substate is an absent cell
            cells.append((cbor.dumps(k), cbor.dumps(v)))
    return sorted(cells)


def _other_cells(world: World, reducer: str) -> list[Cell]:
    out: list[Cell] = []
    for name in sorted(world.air.modules):
        if name == reducer:
            continue
        space = world.kernel.cell_space(name)
        keyed = world.air.modules[name].key_schema is not None
        for khash, entry in list(world.store.iter_entries(space)):
            found = world.store.get(space, khash)
            if found is not None:
                out.append((name, entry.key_cbor if keyed else None, found[1]))
    return out


def _cell_schema_name(state_name: str, taken: dict[str, Any]) -> str:
    base, _, version = state_name.partition("@")
    candidate = f"{base}Cell@{version or 1}"
    n = 2
    while candidate in taken:
        candidate, n = f"{base}Cell{n}@{version or 1}", n + 1
    return candidate


def _rewrite(
    sources: list[AirSource], reducer: str, key_field: str, edits: dict[str, Any]
) -> list[AirSource]:
    """The AIR sources with the module, its routes (and an added value schema) changed."""
    out = []
    for source in sources:
        if source.builtin:
            out.append(source)
            continue
        doc = json.loads(source.text)
        items = doc if isinstance(doc, list) else [doc]
        touched = False
        for item in list(items):
            if item.get("$kind") == "defmodule" and item.get("name") == reducer:
                item["key_schema"] = edits["key_schema"]
                item["abi"]["reducer"]["state"] = edits["state"]
                if edits["added"] is not None:
                    items.append(edits["added"])
                touched = True
            elif item.get("$kind") == "manifest":
                for route in item.get("routing", {}).get("events", []):
                    if route.get("reducer") == reducer:
                        route["key_field"] = key_field
                        touched = True
        if not touched:
            out.append(source)
            continue
        shaped = items if isinstance(doc, list) or len(items) > 1 else doc
        out.append(AirSource(source.file, json.dumps(shaped, indent=2) + "\n", source.builtin))
    return out


def plan_migration(world: World, reducer: str, key_field: str) -> MigrationPlan:
    """Check every precondition and compute the new AIR and the cells; write nothing."""
    air = world.air
    module = air.modules.get(reducer)
    if module is None:
        raise UnknownName("reducer", reducer, sorted(air.modules))
    if module.key_schema is not None:
        raise MigrationRefused(reducer, "it is keyed already")
    if world.kernel.partition is not None:
        # A migrated world is a new journal from a new genesis: it would stop being a
        # partition, and every key would land in it whoever owns it (``kernel._partition``).
        raise MigrationRefused(
            reducer,
            "the world is a partition of a partitioned world; migrate the world before "
            "partitioning it",
        )
    state_name = module.abi.reducer.state
    state_type = resolve(Ref(state_name), air.schemas)
    if not isinstance(state_type, MapT):
        raise MigrationRefused(reducer, f"its state schema {state_name} is not a map")
    key, value = state_type.key, state_type.value
    resolved_key = resolve(key, air.schemas)
    if not (isinstance(resolved_key, Prim) and resolved_key.name in MAP_KEY_PRIMS):
        raise MigrationRefused(reducer, f"the map's key type is not one of {sorted(MAP_KEY_PRIMS)}")
    routes = _check_routes(air, reducer, key_field, key)
    _check_quiet(world, reducer)
    cells = _map_cells(world, reducer, key)
    added = None
    state_to = value.name if isinstance(value, Ref) else _cell_schema_name(state_name, air.schemas)
    if not isinstance(value, Ref):
        added = {"$kind": "defschema", "name": state_to, "type": type_to_obj(value)}
    edits = {"key_schema": _authored(key), "state": state_to, "added": added}
    sources, wasm_map = read_world_sources(world.path / "air" / "sources.json")
    new_sources = _rewrite(sources, reducer, key_field, edits)
    cas = FileCas(world.path, readonly=True)
    try:
        new_air = load_air(
            new_sources, lambda p: cas.get(wasm_map[p]) if p in wasm_map else None, inspect_wasm
        )
    except ManifestError as exc:
        raise MigrationRefused(reducer, f"the new AIR does not load: {exc}") from exc
    return MigrationPlan(
        reducer,
        key_field,
        edits["key_schema"],
        state_name,
        state_to,
        state_to if added else None,
        routes,
        cells,
        _other_cells(world, reducer),
        new_sources,
        new_air,
        air.manifest_hash,
        world.journal.seq_next - 1,
    )


# --- building and swapping ------------------------------------------------------------------


def _backup_path(path: Path) -> Path:
    parent = path.absolute().parent
    taken = [p.name.rpartition("-")[2] for p in parent.glob(f"{path.name}.bak-*")]
    n = 1 + max((int(t) for t in taken if t.isdigit()), default=0)
    return parent / f"{path.name}.bak-{n}"


def _cas_files(path: Path) -> Iterator[Path]:
    root = path / "cas"
    if root.is_dir():
        yield from (p for p in sorted(root.glob("*/*")) if p.is_file())


def _build(old: World, plan: MigrationPlan, staging: Path, progress: Callable[[int], None]) -> None:
    """Write the whole new world into ``staging`` and check that it replays exactly;
    ``progress(n)``: n of the 2 x records units done (journaled, then replayed)."""
    fileio.mkdir(staging)
    build_world(staging, plan.air, plan.sources).release()
    for source in _cas_files(old.path):
        target = staging / "cas" / source.parent.name / source.name
        if not target.exists():  # CAS objects are immutable: blobs the states refer to
            fileio.mkdir(target.parent, exist_ok=True)
            data = fileio.read_regular(source, OBJECT_BYTES_MAX, operation="read object")
            if data is not None:
                write_unsynced(target, data)
    key_file = old.path / KEY_DIR / KEY_FILE
    key = fileio.read_regular(
        key_file, KEY_FILE_BYTES_MAX, damaged=ReceiptKeyDamaged, operation="read receipt key"
    )
    if key is not None:  # receipts the cells hold stay verifiable
        atomic_write(staging / KEY_DIR / KEY_FILE, key)
    moved_from = {
        "manifest_hash": cbor.hash_to_raw(plan.manifest_from),
        "journal_seq": plan.journal_seq,
    }
    records = [
        migrated_record(
            cbor.hash_to_raw(plan.air.manifest_hash),
            plan.reducer,
            plan.key_field,
            len(plan.cells),
            moved_from,
        ),
        *(imported_record(plan.reducer, k, s) for k, s in plan.cells),
        *(imported_record(*cell) for cell in plan.others),
    ]
    with World.open(staging) as new:
        journal_records(new, records)
        progress(len(records))
        new.snapshot()
    report = verify_world(
        staging, lambda done, total: progress(len(records) + done * len(records) // total)
    )
    if report.divergence is not None or report.mismatches:
        raise MigrationRefused(plan.reducer, f"the migrated world does not replay: {report}")
    sync_paths([], [], force=True)  # the copies above were written unsynced


def migrate_cells(
    path: Path,
    reducer: str,
    key_field: str,
    *,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> MigrationPlan:
    """Migrate ``reducer`` of the world at ``path`` to cells (see the module docstring);
    ``dry_run`` only plans. Returns the plan (its ``backup`` names the old world's folder).

    ``progress(done, total)`` (not for a dry run) counts in records of the new journal:
    ``total`` is twice their number plus one, for journaling them, replaying them, and the
    swap; the counts grow and the last call, after the swap, has ``done == total``."""
    path = Path(path)
    recover_swap(path)
    staging, ready = swap_paths(path)
    with World.open(path, readonly=True) as old:  # the shared lock keeps writers out
        plan = plan_migration(old, reducer, key_field)
        if dry_run:
            return plan
        total = 2 * (1 + len(plan.cells) + len(plan.others)) + 1

        def report(done: int) -> None:
            if progress is not None:
                progress(done, total)

        report(0)
        with storage_errors("migrate"):
            remove_tree(staging)
            remove_tree(ready)
            try:
                _build(old, plan, staging, report)
            except BaseException:
                remove_tree(staging)
                raise
            backup = _backup_path(path)
            swap_in(path, backup)
    report(total)
    plan.backup = str(backup)
    return plan
