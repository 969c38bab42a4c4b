"""Eras: the manifests a world has run, and which one each cell and plan run is pinned to.

A world starts in the era of its genesis manifest. Each applied upgrade (a ``gov.applied``
record, ``world.gov``) starts a new era, the *current* one: its routes, triggers, plans,
capabilities and policy are what the kernel uses from then on. What an era pins:

* **Cells.** A cell entry keeps the manifest hash of the era it was created in
  (``CellEntry.manifest_hash``) and steps with that era's module and schemas until it is
  upgraded (``cell.upgraded``), whatever the current manifest says; new cells start in the
  current era.
* **Plan runs.** A run keeps its era's manifest hash (``Run.manifest_hash``) and finishes on
  that era's plan; new runs use the current plans. Capabilities and policy are always the
  current era's: a revoked grant stops an old run's effects too.

Cells belong to a reducer through their *space* (``kernel.cells.cell_space``): the reducer's
name hashed, at the reducer's first era. A successor (``X@2`` replacing ``X@1`` in one
upgrade, ``air._diff``) takes its predecessor's space, so the cells follow it; the record of
the apply names the successions, so replay never re-derives them. ``names`` maps a space back
to the reducer that owns it in an era: how the kernel finds an old-era cell's module.

The kernel reads no file: an era's AIR is loaded by a function the world gives
(``load(address)``, address of the stored AIR document, content-addressed), and checked
against the manifest hash the record names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from air import LoadedAir, cbor
from air.errors import UsageError
from kernel.cells import cell_space
from kernel.errors import ReplayDivergence

__all__ = ["Era", "Eras", "LoadAir"]

LoadAir = Callable[[bytes], LoadedAir]
"""The AIR stored at a CAS address (raw 32 bytes): the world's loader of an era's AIR."""


@dataclass
class Era:
    air: LoadedAir
    manifest_raw: bytes
    address: bytes | None
    """The stored AIR document's address (raw; None for the genesis era, stored in ``air/``)."""
    since: int
    """The seq of the record that started it (0: genesis)."""
    spaces: dict[str, str] = field(default_factory=dict)
    """Reducer name -> cell space (hex)."""
    names: dict[str, str] = field(default_factory=dict)
    """Cell space -> reducer name (the inverse of ``spaces``)."""

    def __post_init__(self) -> None:
        self.names = {space: name for name, space in self.spaces.items()}
        self._accepts: dict[str, frozenset[str]] = {}

    def accepts(self, name: str, schema: str) -> bool:
        """Whether this era's reducer ``name`` takes events of ``schema``: its ABI event, an
        event this era routes to it, or a receipt event of an effect it may emit."""
        taken = self._accepts.get(name)
        if taken is None:
            air = self.air
            reducer = air.modules[name].abi.reducer
            receipts = {
                air.effects[k].receipt_event for k in reducer.effects_emitted if k in air.effects
            }
            receipts.discard(None)
            routed = {r.event for r in air.manifest.routing.events if r.reducer == name}
            taken = self._accepts[name] = frozenset(
                {reducer.event, *routed, *(r for r in receipts if r)}
            )
        return schema in taken


class Eras:
    """Every era of a world, the current one last."""

    def __init__(self, genesis: LoadedAir, load: LoadAir | None = None) -> None:
        self.load = load
        self._loaded: dict[bytes, LoadedAir] = {}
        raw = cbor.hash_to_raw(genesis.manifest_hash)
        first = Era(genesis, raw, None, 0, {name: cell_space(name) for name in genesis.modules})
        self.history: list[Era] = [first]
        self.by_manifest: dict[bytes, Era] = {raw: first}

    @property
    def current(self) -> Era:
        return self.history[-1]

    def of(self, manifest_raw: bytes) -> Era:
        """The era of a manifest hash (raw) this world has run."""
        era = self.by_manifest.get(manifest_raw)
        if era is None:
            raise ReplayDivergence(
                -1, "", "an era of this world", f"manifest {cbor.raw_to_hash(manifest_raw)}"
            )
        return era

    def check(self, body: dict[str, Any]) -> None:
        """Refuse (``UsageError``) a ``gov.applied`` body that cannot start an era now: its
        base is not the current manifest, or its AIR does not load to its manifest hash."""
        if body["base"] != self.current.manifest_raw:
            raise UsageError(
                f"the upgrade's base {cbor.raw_to_hash(body['base'])} is not the current "
                f"manifest {cbor.raw_to_hash(self.current.manifest_raw)}"
            )
        self._load(body["air"], body["manifest_hash"], -1)

    def apply(self, seq: int, body: dict[str, Any]) -> Era:
        """Start the era a ``gov.applied`` record (``seq``, ``body``) names; return it.
        ``body``: ``{base, manifest_hash, air, successors: {new: old}}`` (hashes raw)."""
        now = self.current
        if body["base"] != now.manifest_raw:
            raise ReplayDivergence(
                seq, "", cbor.raw_to_hash(now.manifest_raw), cbor.raw_to_hash(body["base"]), "base"
            )
        air = self._load(body["air"], body["manifest_hash"], seq)
        successors: dict[str, str] = body.get("successors", {})
        spaces: dict[str, str] = {}
        for name in air.modules:
            before = successors.get(name, name)
            spaces[name] = now.spaces.get(before) or self._space_ever(name)
        era = Era(air, body["manifest_hash"], body["air"], seq, spaces)
        self.history.append(era)
        self.by_manifest.setdefault(era.manifest_raw, era)
        return era

    def _space_ever(self, name: str) -> str:
        """The space a reducer named ``name`` had in the latest era that had it (a reducer
        removed and added back finds its cells again), else its own."""
        for era in reversed(self.history):
            if name in era.spaces:
                return era.spaces[name]
        return cell_space(name)

    def _load(self, address: bytes, manifest_raw: bytes, seq: int) -> LoadedAir:
        air = self._loaded.get(address)
        if air is None:
            if self.load is None:
                raise UsageError("this kernel was made without a loader of stored AIR")
            air = self._loaded[address] = self.load(address)
        if cbor.hash_to_raw(air.manifest_hash) != manifest_raw:
            raise ReplayDivergence(
                seq, "", cbor.raw_to_hash(manifest_raw), air.manifest_hash, "manifest_hash"
            )
        return air

    def every_space(self) -> set[str]:
        """Every cell space any era had."""
        return {space for era in self.history for space in era.spaces.values()}

    def name_now(self, name: str) -> str | None:
        """The current era's reducer holding the cells that ``name`` held in the latest era
        that had a reducer of that name (None: its cells belong to no reducer now)."""
        for era in reversed(self.history):
            if name in era.spaces:
                return self.current.names.get(era.spaces[name])
        return None

    # --- snapshots ---------------------------------------------------------------------------

    def to_obj(self) -> list[Any]:
        """The eras after genesis: ``[[seq, manifest_hash, address, successors], ...]``
        replayed on restore as their records were."""
        return [
            [era.since, era.manifest_raw, era.address, self._successions(i)]
            for i, era in enumerate(self.history)
            if i > 0
        ]

    def _successions(self, index: int) -> dict[str, str]:
        before, era = self.history[index - 1], self.history[index]
        return {
            name: before.names[space]
            for name, space in era.spaces.items()
            if space in before.names and before.names[space] != name
        }

    def restore(self, obj: list[Any]) -> None:
        del self.history[1:]
        self.by_manifest = {self.history[0].manifest_raw: self.history[0]}
        for since, manifest_raw, address, successors in obj:
            body = {
                "base": self.current.manifest_raw,
                "manifest_hash": manifest_raw,
                "air": address,
                "successors": successors,
            }
            self.apply(since, body)
