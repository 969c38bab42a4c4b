"""The world directory and its API: create, open, send, step, run, inspect, snapshot, close.

Layout (SPEC §7)::

    <world>/LOCK                    flock held while a process has the world open for writing
    <world>/air/sources.json        the AIR documents as authored (file name + text), and
                                    the wasm path -> hash map; the binaries live in the CAS
    <world>/air/manifest.cbor       the canonical manifest (its hash is in the genesis record)
    <world>/cas/                    content-addressed store (wasm, AIR defs, snapshots)
    <world>/journal/                the journal segments: the source of truth
    <world>/state/reducers/...      cell files and index: a checkpoint of the journal
    <world>/snapshots/latest        the hash of the newest snapshot object in the CAS
    <world>/cache/                  compiled modules, keyed by wasm hash and engine fingerprint

Durability: every public call that changes the world commits the journal before returning
(one group commit per call). Cell files and the index are written only at a snapshot, together
with the snapshot object (the kernel's scheduler, mailboxes and dead letters) in one atomic
checkpoint; the store is never ahead of the durable journal, because the journal is committed
first. Opening = load the checkpoint, then re-execute the journal records after it, checking
every step against what the journal says it produced.

Opening never rewrites history: a torn tail record (a crash mid-append) is dropped by the
journal; any other damage refuses to open and points at ``world journal verify``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from air import cbor
from air.errors import LimitExceeded, UsageError, WorldError
from air.loader import AirSource, LoadedAir, load_air, resolve_relative
from air.types import Ref
from air.values import normalise, to_sugar
from kernel.cells import CellEntry
from kernel.core import Kernel, KernelLimits
from kernel.journal import JournalRecord, make_subject
from world.airfiles import air_sources, builtin_sources, inspect_wasm
from world.airfiles import read_file as _read_file
from world.cas import FileCas
from world.cellstore import FileCellStore
from world.fsutil import WorldLock, atomic_write, lock_world
from world.journal import FileJournal
from world.runner import HostRunner

__all__ = ["SNAPSHOT_DIRTY_MAX", "CellView", "CheckpointAhead", "World", "WorldExists"]

SNAPSHOT_DIRTY_MAX: Final = 200_000
"""Checkpoint automatically once this many cells are dirty (bounds memory and replay time)."""
COMMIT_EVERY_STEPS: Final = 4096
FORMAT: Final = 1


class WorldExists(WorldError):
    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path} already holds something; a new world needs an empty folder")


class CheckpointAhead(WorldError):
    """The cell checkpoint covers journal records that are no longer there (the journal lost
    committed records after the checkpoint was written). Never guessed around."""

    def __init__(self, checkpoint_seq_next: int, journal_seq_next: int) -> None:
        self.checkpoint_seq_next = checkpoint_seq_next
        self.journal_seq_next = journal_seq_next
        super().__init__(
            f"the state checkpoint reaches seq {checkpoint_seq_next} but the journal ends at "
            f"{journal_seq_next}; run `world journal verify` and restore the journal"
        )


@dataclass(frozen=True)
class CellView:
    key: Any
    key_hash: str
    state: Any
    entry: CellEntry


class World:
    """An open world. Not thread-safe: one thread drives it (see ``world.engine`` for threads)."""

    def __init__(self, path: Path, air: LoadedAir, lock: WorldLock, limits: KernelLimits) -> None:
        self.path = path
        self.air = air
        self._lock = lock
        self.cas = FileCas(path)
        self.journal = FileJournal.open(path / "journal")
        self.store = FileCellStore(path)
        runner = HostRunner(air, path / "cache")
        self.kernel = Kernel(air, self.journal, self.store, runner, limits)
        self._closed = False

    # --- lifecycle --------------------------------------------------------------------------

    @classmethod
    def create(cls, path: Path, air_path: Path, limits: KernelLimits | None = None) -> World:
        """Create a world at ``path`` (absent or empty) from the AIR at ``air_path``."""
        sources = builtin_sources() + air_sources(Path(air_path))
        return cls._create(Path(path), sources, _read_file, limits)

    @classmethod
    def _create(
        cls,
        path: Path,
        sources: list[AirSource],
        read_wasm: Callable[[str], bytes | None],
        limits: KernelLimits | None,
    ) -> World:
        if path.exists() and any(path.iterdir()):
            raise WorldExists(str(path))
        air = load_air(sources, read_wasm, inspect_wasm)
        missing = sorted(name for name in air.modules if name not in air.wasm_bytes)
        if missing:
            raise UsageError(f"modules without a wasm binary cannot run: {', '.join(missing)}")
        path.mkdir(parents=True, exist_ok=True)
        lock = lock_world(path)
        cas = FileCas(path)
        wasm_map = {}
        for name, data in air.wasm_bytes.items():
            wasm_map[resolve_relative(air.defs[name].file, air.defs[name].model.wasm)] = cas.put(
                data
            )
        for data in [air.manifest_cbor, *air.def_cbor.values()]:
            cas.put(data)  # every AIR node, content-addressed (SPEC §7)
        (path / "air").mkdir(exist_ok=True)
        doc = {
            "format": FORMAT,
            "sources": [{"file": s.file, "text": s.text, "builtin": s.builtin} for s in sources],
            "wasm": wasm_map,
        }
        atomic_write(path / "air" / "sources.json", json.dumps(doc, indent=1).encode())
        atomic_write(path / "air" / "manifest.cbor", air.manifest_cbor)
        world = cls(path, air, lock, limits or KernelLimits())
        world.journal.append(
            "world.created",
            make_subject("world", "manifest"),
            {"manifest_hash": cbor.hash_to_raw(air.manifest_hash)},
        )
        world.journal.commit()
        return world

    @classmethod
    def create_from_world_air(
        cls, path: Path, air_dir: Path, limits: KernelLimits | None = None
    ) -> World:
        """Create a world from another world's ``air/`` folder (same sources, same wasm)."""
        doc = json.loads((air_dir / "sources.json").read_text(encoding="utf-8"))
        source_cas = FileCas(air_dir.parent)
        return cls._create(
            Path(path),
            [AirSource(s["file"], s["text"], s["builtin"]) for s in doc["sources"]],
            {p: source_cas.get(h) for p, h in doc["wasm"].items()}.get,
            limits,
        )

    @classmethod
    def open(cls, path: Path, limits: KernelLimits | None = None) -> World:
        """Open an existing world: checkpoint, then re-execute the journal after it."""
        path = Path(path)
        if not (path / "air" / "sources.json").is_file():
            raise UsageError(
                f"{path} is not a world (no air/sources.json); create one with world init"
            )
        lock = lock_world(path)
        try:
            air = _load_world_air(path)
            world = cls(path, air, lock, limits or KernelLimits())
            world._recover()
        except BaseException:
            lock.release()
            raise
        return world

    def _recover(self) -> None:
        checkpoint = self.store.last_checkpoint()
        seq_from = 0
        if checkpoint:
            address = cbor.raw_to_hash(cbor.loads(checkpoint)["snapshot"])
            snap = cbor.loads(self.cas.get(address))
            seq_from = snap["seq_next"]
            if seq_from > self.journal.seq_next:
                raise CheckpointAhead(seq_from, self.journal.seq_next)
            self.kernel.restore(snap)
        for record in self.journal.read(seq_from):
            self._check_genesis(record)
            self.kernel.apply(record)

    def _check_genesis(self, record: JournalRecord) -> None:
        if record.kind == "world.created" and record.body["manifest_hash"] != cbor.hash_to_raw(
            self.air.manifest_hash
        ):
            raise UsageError("the world's AIR does not match the manifest hash in its journal")

    def close(self) -> None:
        """Snapshot, then release the lock. Safe to call twice."""
        if self._closed:
            return
        try:
            self.snapshot()
            self.journal.close()
        finally:
            self._closed = True
            self._lock.release()

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ----------------------------------------------------------------------------

    def send(self, schema: str, value: Any) -> int:
        """Normalise, journal and route one event from outside; durable on return."""
        return self.send_many([(schema, value)])[0]

    def send_many(self, events: Iterable[tuple[str, Any]]) -> list[int]:
        """All events are normalised first (nothing is journaled if one is bad), then one commit."""
        encoded = [
            (schema, *self.kernel.normalise_event(schema, value)) for schema, value in events
        ]
        seqs = [self.kernel.ingest(schema, value_cbor, obj) for schema, value_cbor, obj in encoded]
        self.journal.commit()
        return seqs

    def step(self, ticks: int = 1) -> int:
        """Run up to ``ticks`` ticks; return how many ran. Durable on return."""
        ran = 0
        while ran < ticks and self.kernel.tick():
            ran += 1
        self._after_steps()
        return ran

    def run_until_idle(self, max_steps: int | None = None) -> int:
        """Tick until nothing is ready. Past ``steps_per_run_max`` it stops with LimitExceeded,
        after committing: the world stays consistent and can be opened and run again."""
        limit = max_steps if max_steps is not None else self.kernel.limits.steps_per_run_max
        ran = 0
        while self.kernel.tick():
            ran += 1
            if ran % COMMIT_EVERY_STEPS == 0:
                self._after_steps()
            if ran >= limit and not self.kernel.idle():
                self._after_steps()
                raise LimitExceeded(
                    "steps_per_run_max",
                    limit,
                    f"{self.kernel.scheduler.pending} deliveries still queued",
                )
        self._after_steps()
        return ran

    def _after_steps(self) -> None:
        self.journal.commit()
        if self.store.dirty_count() >= SNAPSHOT_DIRTY_MAX:
            self.snapshot()

    def snapshot(self) -> str:
        """Checkpoint: commit the journal, put the kernel's state (scheduler, mailboxes, dead
        letters) in the CAS, then commit cells and index together with that snapshot's address.
        The journal is committed first, so the checkpoint is never ahead of it."""
        seq_next = self.journal.commit()
        address = self.cas.put(cbor.dumps(self.kernel.snapshot_obj(seq_next)))
        self.store.flush(cbor.dumps({"snapshot": cbor.hash_to_raw(address)}))
        (self.path / "snapshots").mkdir(exist_ok=True)
        atomic_write(self.path / "snapshots" / "latest", address.encode())
        return address

    # --- reading ----------------------------------------------------------------------------

    def key_cbor(self, reducer: str, key: Any) -> bytes:
        key_type = self.air.key_types.get(reducer)
        if key_type is None:
            raise UsageError(f"{reducer} is not keyed")
        return cbor.dumps(normalise(key_type, key, self.air.schemas))

    def _module(self, reducer: str) -> Any:
        module = self.air.modules.get(reducer)
        if module is None:
            raise UsageError(
                f"unknown reducer {reducer}; this world has {', '.join(sorted(self.air.modules))}"
            )
        return module

    def state(self, reducer: str, key: Any = None) -> Any:
        """A reducer's state as sugar JSON (a cell's, given ``key``); None if absent."""
        module = self._module(reducer)
        keyed = module.key_schema is not None
        if keyed and key is None:
            raise UsageError(f"{reducer} is keyed: give a key")
        key_cbor = self.key_cbor(reducer, key) if keyed else None
        raw = self.kernel.state_of(reducer, key_cbor)
        if raw is None:
            return None
        return to_sugar(Ref(module.abi.reducer.state), cbor.loads(raw), self.air.schemas)

    def cells(self, reducer: str) -> Iterator[CellView]:
        """Every cell of a keyed reducer, in key-hash order."""
        module = self._module(reducer)
        module_hash = self.kernel.module_hash(reducer)
        key_type = self.air.key_types.get(reducer)
        for khash, entry in self.store.iter_entries(module_hash):
            found = self.store.get(module_hash, khash)
            assert found is not None
            state = to_sugar(Ref(module.abi.reducer.state), cbor.loads(found[1]), self.air.schemas)
            key = (
                None
                if key_type is None
                else to_sugar(key_type, cbor.loads(entry.key_cbor), self.air.schemas)
            )
            yield CellView(key, khash.hex(), state, entry)

    def cell_count(self, reducer: str) -> int:
        return self.store.count(self.kernel.module_hash(reducer))

    def info(self) -> dict[str, Any]:
        reducers = {}
        for name, module in sorted(self.air.modules.items()):
            count = self.cell_count(name)
            reducers[name] = {
                "keyed": module.key_schema is not None,
                "cells" if module.key_schema else "has_state": count
                if module.key_schema
                else count > 0,
            }
        return {
            "path": str(self.path),
            "manifest_hash": self.air.manifest_hash,
            "journal_seq_next": self.journal.seq_next,
            "steps_total": self.kernel.steps_total,
            "pending_deliveries": self.kernel.scheduler.pending,
            "ready_entities": self.kernel.scheduler.ready_count(),
            "reducers": reducers,
            "dead_letters": [
                {
                    "seq": d.seq,
                    "reducer": d.reducer,
                    "schema": d.schema,
                    "code": d.code,
                    "detail": d.detail,
                }
                for d in self.kernel.dead_letters[-20:]
            ],
            "dead_letters_total": self.kernel.dead_letters_total,
        }


def _load_world_air(path: Path) -> LoadedAir:
    doc = json.loads((path / "air" / "sources.json").read_text(encoding="utf-8"))
    cas = FileCas(path)
    wasm_map: dict[str, str] = doc["wasm"]
    sources = [AirSource(s["file"], s["text"], s["builtin"]) for s in doc["sources"]]

    def read_wasm(p: str) -> bytes | None:
        return cas.get(wasm_map[p]) if p in wasm_map else None

    air = load_air(sources, read_wasm)
    stored = (path / "air" / "manifest.cbor").read_bytes()
    if stored != air.manifest_cbor:
        raise UsageError(
            "air/manifest.cbor does not match the AIR sources; the world directory was altered"
        )
    return air
