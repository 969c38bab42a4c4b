"""Journal records that move cell states into a world: ``cell.imported`` and ``world.migrated``.

    kind            subject                                       body
    cell.imported   /world/cell/<reducer>/<key hash>/imported     {reducer, key, state}
                    /world/reducer/<reducer>/imported             (key null: a non-keyed reducer)
    world.migrated  /world/manifest/migrated                      {manifest_hash, reducer,
                                                                   key_field, cells, migrated_from}

This is the pure half of ``world cells import`` and ``world migrate cells`` (``world.moves``):
it builds those records and says what applying one means (``moved_cell``); ``Kernel`` applies
them (``ingest_moves`` live, ``apply`` on replay) the same way, so a world that imported cells
replays from genesis to the same store: ``cell.imported`` puts ``state`` into the kernel's cell
store as the cell of ``key`` (``last_active`` = the record's seq, pinned manifest = the
kernel's manifest), replacing a cell that was there; ``world.migrated`` holds no state and only
checks that it names the manifest the kernel runs (a migrated world's journal is a rebase: see
``world.moves``).

Invariant, checked again at every apply (a journal is input too): the key is the canonical
CBOR of a key of the reducer's key schema (absent for a non-keyed reducer), and the state
decodes canonically and checks against the reducer's state schema. A record that fails is a
``ValueMismatch``/``KeyMismatch``/``CborError`` naming the record, never a silent store.

Not here: reading or writing files, verifying export checksums, deciding what to migrate.
"""

from __future__ import annotations

from typing import Any, Final

from air import LoadedAir, cbor
from air.errors import KeyMismatch, UnknownName, ValueMismatch
from air.types import Ref
from air.values import normalise
from kernel.cells import key_hash
from kernel.errors import ReplayDivergence
from kernel.journal import JournalRecord
from kernel.subjects import make_subject

__all__ = [
    "CELL_IMPORTED",
    "MOVE_KINDS",
    "WORLD_MIGRATED",
    "Cell",
    "check_cell",
    "imported_record",
    "migrated_record",
    "moved_cell",
]

CELL_IMPORTED: Final = "cell.imported"
WORLD_MIGRATED: Final = "world.migrated"
MOVE_KINDS: Final = frozenset((CELL_IMPORTED, WORLD_MIGRATED))
"""The record kinds that move cells (``Kernel.apply`` applies them through ``moved_cell``)."""

Record = tuple[str, str, dict[str, Any]]
Cell = tuple[str, bytes | None, bytes]
"""``(reducer, key_cbor, state_cbor)``: ``key_cbor`` None for a non-keyed reducer."""


def imported_record(reducer: str, key_cbor: bytes | None, state_cbor: bytes) -> Record:
    """The ``cell.imported`` record putting ``state_cbor`` into the cell ``key_cbor``."""
    if key_cbor is None:
        subject = make_subject("world", "reducer", reducer, "imported")
    else:
        subject = make_subject("world", "cell", reducer, key_hash(key_cbor).hex(), "imported")
    return CELL_IMPORTED, subject, {"reducer": reducer, "key": key_cbor, "state": state_cbor}


def migrated_record(
    manifest_hash: bytes,
    reducer: str,
    key_field: str,
    cells: int,
    migrated_from: dict[str, Any],
) -> Record:
    """The ``world.migrated`` record: ``manifest_hash`` (raw) is the new manifest;
    ``migrated_from`` is ``{manifest_hash, journal_seq}`` of the world it was rebased from."""
    body = {
        "manifest_hash": manifest_hash,
        "reducer": reducer,
        "key_field": key_field,
        "cells": cells,
        "migrated_from": migrated_from,
    }
    return WORLD_MIGRATED, make_subject("world", "manifest", "migrated"), body


def check_cell(air: LoadedAir, reducer: str, key_cbor: bytes | None, state_cbor: bytes) -> None:
    """Refuse a cell the reducer could not hold: an unknown reducer, a key (or none) against
    its keyed-ness, a key not canonical for the key schema, a state not of the state schema."""
    module = air.modules.get(reducer)
    if module is None:
        raise UnknownName("reducer", reducer, sorted(air.modules))
    keyed = module.key_schema is not None
    if keyed != (key_cbor is not None):
        raise KeyMismatch(reducer, keyed=keyed)
    if key_cbor is not None:
        key = cbor.loads(key_cbor)
        if cbor.dumps(normalise(air.key_types[reducer], key, air.schemas)) != key_cbor:
            raise ValueMismatch("/key", "key.not_canonical", "key is not in its schema's form")
    state_schema = module.abi.reducer.state
    state = normalise(Ref(state_schema), cbor.loads(state_cbor), air.schemas, "/state")
    if cbor.dumps(state) != state_cbor:
        raise ValueMismatch("/state", "state.not_canonical", "state is not in its schema's form")


def moved_cell(air: LoadedAir, record: JournalRecord) -> Cell | None:
    """What applying a ``cell.imported`` or ``world.migrated`` record puts in the cell store:
    the checked ``(reducer, key_cbor, state_cbor)`` of an import (``check_cell``), None for a
    migration, after checking that it names the manifest of ``air`` (``ReplayDivergence``)."""
    body = record.body
    if record.kind == WORLD_MIGRATED:
        wanted = cbor.hash_to_raw(air.manifest_hash)
        if body.get("manifest_hash") != wanted:
            found = body.get("manifest_hash")
            shown = cbor.raw_to_hash(found) if isinstance(found, bytes) else repr(found)
            raise ReplayDivergence(
                record.seq, record.subject, shown, air.manifest_hash, "manifest_hash"
            )
        return None
    reducer, key_cbor, state_cbor = body["reducer"], body["key"], body["state"]
    check_cell(air, reducer, key_cbor, state_cbor)
    return reducer, key_cbor, state_cbor
