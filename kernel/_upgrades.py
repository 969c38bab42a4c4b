"""Cell upgrades: a cell pinned to an older era moves to the current one (``cell.upgraded``).

``world cells upgrade DIR REDUCER (--key K | --all)`` journals one record per batch of cells of
one reducer::

    kind cell.upgraded   subject /world/reducer/<reducer>/upgraded
    body {reducer, to: <manifest hash>, cells: [[key, from, state_hash | null], ...],
          failed: [[key, from, reason], ...]}

(``key`` the cell's canonical key CBOR, hashes raw.) For each cell, by the state schema of its
era's module and of the current one:

* **the same schema** (the same structure, ``air.same_state_shape``): a re-pin. The state is not touched and
  ``state_hash`` is null; costs no step.
* **a changed schema**: the current module is stepped once with the built-in event
  ``sys/StateUpgrade@1 {from_module: text, from_schema: text, state: bytes}`` (the old wasm
  hash, the old state schema's name, the old state's bytes) on the old state, through the one
  reducer ABI (no new export; the C SDK's ``WORLD_CELL_REDUCER_UPGRADABLE`` hook). Its output
  must be a state of the new schema and nothing else (no events, no effects); ``state_hash``
  is the new state's. A reducer's own failure (a trap, a state that does not validate) is a
  ``failed`` line with its reason: that cell stays in its era. An environment failure (the
  engine, a missing module) is raised and nothing is journaled.

Replay re-executes the batch for the keys the record names and compares the record it would
have written with the journaled one (``ReplayDivergence`` at a difference), as for a step. A
cell already current or gone is left out of the record (so a batch retried after a crash is
harmless).

The built-in event schema is not an AIR def: adding a ``sys/`` def would change every
manifest's hash (the loader puts every built-in into every manifest). The kernel builds the
value itself, and the reducer matches the event by its name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from air import cbor, same_state_shape
from air.errors import WorldError
from kernel._eras import Era, Eras
from kernel._scheduler import Delivery, Entity
from kernel._steps import CellSteps
from kernel.cells import NULL_KEY_CBOR, CellEntry, CellStore, key_hash
from kernel.errors import StepRejected
from kernel.subjects import make_subject

__all__ = ["UPGRADED", "UPGRADE_EVENT", "UpgradeBatch", "upgrade_batch"]

UPGRADED: Final = "cell.upgraded"
UPGRADE_EVENT: Final = "sys/StateUpgrade@1"


@dataclass
class UpgradeBatch:
    """A batch computed: its record's body and the states to put (key hash -> entry, state)."""

    reducer: str
    body: dict[str, Any]
    puts: dict[bytes, tuple[CellEntry, bytes]] = field(default_factory=dict)

    @property
    def subject(self) -> str:
        return make_subject("world", "reducer", self.reducer, "upgraded")


def upgrade_batch(
    eras: Eras,
    cells: CellStore,
    steps_of: Callable[[Era], CellSteps],
    is_fault: Callable[[WorldError], bool],
    reducer: str,
    key_cbors: Sequence[bytes],
    seq: int,
) -> UpgradeBatch:
    """Compute the upgrade of ``reducer``'s cells ``key_cbors`` to the current era (see the
    module docstring); ``seq`` is the record's, the cells' ``last_active``."""
    now = eras.current
    space = now.spaces[reducer]
    module = now.air.modules[reducer]
    keyed = module.key_schema is not None
    steps = steps_of(now)
    batch = UpgradeBatch(
        reducer, {"reducer": reducer, "to": now.manifest_raw, "cells": [], "failed": []}
    )
    sources: dict[bytes, _Source | None] = {}  # per era, worked out once per batch
    for key_cbor in key_cbors:
        found = cells.get(space, key_hash(key_cbor))
        if found is None or found[0].manifest_hash == now.manifest_raw:
            continue  # gone, or current already
        entry, state = found
        era_raw = entry.manifest_hash
        if era_raw not in sources:
            sources[era_raw] = _source(eras, era_raw, space, now, reducer)
        source = sources[era_raw]
        if source is None:
            batch.body["failed"].append(
                [key_cbor, era_raw, {"code": "era.unknown", "detail": "no era"}]
            )
            continue
        if source.same:
            new_state, state_hash = state, None
        else:
            entity = Entity(reducer, key_cbor if keyed else None)
            value = {
                "from_module": source.module,
                "from_schema": source.schema,
                "state": state,
            }
            try:
                new_state = _step_upgrade(steps, entity, state, cbor.dumps(value))
            except WorldError as exc:
                if not is_fault(exc):
                    raise
                reason = steps.failure_body(entity, Delivery(seq, 0, UPGRADE_EVENT, b""), exc)
                batch.body["failed"].append([key_cbor, entry.manifest_hash, reason["reason"]])
                continue
            state_hash = cbor.digest(new_state)
        batch.body["cells"].append([key_cbor, entry.manifest_hash, state_hash])
        pinned = CellEntry(key_cbor, cbor.digest(new_state), len(new_state), seq, now.manifest_raw)
        batch.puts[key_hash(key_cbor)] = (pinned, new_state)
    return batch


@dataclass(frozen=True)
class _Source:
    """What a cell of one older era is upgraded from: that era's module and state schema,
    and whether the schema has the current one's structure (then it is a re-pin)."""

    module: str
    schema: str
    same: bool


def _source(eras: Eras, era_raw: bytes, space: str, now: Era, reducer: str) -> _Source | None:
    era = eras.by_manifest.get(era_raw)
    old_name = None if era is None else era.names.get(space)
    if era is None or old_name is None:
        return None
    return _Source(
        era.air.wasm_hashes[old_name],
        era.air.modules[old_name].abi.reducer.state,
        same_state_shape(era.air, old_name, now.air, reducer),
    )


def _step_upgrade(steps: CellSteps, entity: Entity, state: bytes, value_cbor: bytes) -> bytes:
    """The state the current module makes of ``state`` given the upgrade event."""
    delivery = Delivery(0, 0, UPGRADE_EVENT, value_cbor)
    current = (CellEntry(NULL_KEY_CBOR, cbor.digest(state), len(state), 0, bytes(32)), state)
    _kind, _body, out = steps.run(entity, delivery, current)
    if out.state_cbor is None:
        raise StepRejected(entity.reducer, "upgrade.state", "/state", "an upgrade deletes no cell")
    if out.domain_events or out.effects:
        raise StepRejected(
            entity.reducer, "upgrade.output", "/", "an upgrade emits no event and no effect"
        )
    return out.state_cbor
