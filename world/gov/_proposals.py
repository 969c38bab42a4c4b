"""Proposals: a new AIR checked against a world, stored and journaled (``world.gov``).

The proposal's AIR is kept whole in the CAS (``world._airstore``), so that it can be shown,
shadowed and applied later from the world alone; the address of its AIR document is in the
``gov.proposed`` record. The record's body::

    {"base": <manifest hash the world ran>, "manifest_hash": <the proposal's>,
     "air": <address of the proposal document>, "note": text | null, "diff": {...}}

All hashes raw (32 bytes). ``diff`` is ``AirDiff.as_json()``. Writing: the CAS objects are
made durable first (``FileCas.put``), then the record is journaled and committed, so a crash
leaves either no proposal or a whole one (an object no record names is only garbage).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from air import AirDiff, LoadedAir, cbor, diff_air, load_air
from air.errors import InvalidArgument, UnknownName
from kernel.subjects import make_subject
from world._airfiles import (
    air_sources,
    bind_module_wasm,
    builtin_sources,
    inspect_wasm,
    read_file,
)
from world._airstore import load_stored_air, store_air
from world._runner import check_modules
from world._world import World
from world.errors import UpgradeRefused

__all__ = [
    "PROPOSED",
    "SHADOWED",
    "SHADOWED_SUBJECT",
    "Proposal",
    "proposal",
    "proposal_air",
    "proposal_cells",
    "proposals",
    "propose",
    "shadows",
]

PROPOSED: Final = "gov.proposed"
SHADOWED: Final = "gov.shadowed"
SHADOWED_SUBJECT: Final = make_subject("world", "gov", "shadowed")
_SUBJECT: Final = make_subject("world", "gov", "proposed")


@dataclass(frozen=True)
class Proposal:
    """A journaled proposal; ``id`` is its record's seq."""

    id: int
    base: str  # the manifest hash the world ran when it was proposed
    manifest_hash: str
    air: str  # the proposal document's address
    note: str | None
    diff: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "base": self.base,
            "manifest_hash": self.manifest_hash,
            "air": self.air,
            "note": self.note,
            "diff": self.diff,
        }


def propose(
    world: World,
    air_path: Path,
    note: str | None = None,
    *,
    modules: Mapping[str, str | os.PathLike[str]] | None = None,
) -> tuple[Proposal, AirDiff]:
    """Check the AIR at ``air_path`` against ``world`` and journal it as a proposal (see the
    module docstring); ``ManifestError`` if it does not validate or the reducer check refuses
    one of its modules (``world._runner.check_modules``, as ``world init`` does), ``UpgradeRefused`` (nothing
    stored) if it changes nothing or what it changes cannot carry the cells over. ``modules``
    binds modules that name no wasm, as ``world init --module`` does."""
    world._writable()
    if note is not None and not isinstance(note, str):
        raise InvalidArgument("note", note, "a note is text")
    sources = builtin_sources() + air_sources(Path(air_path))
    if modules:
        sources = bind_module_wasm(sources, modules)
    new = load_air(sources, read_file, inspect_wasm)
    check_modules(new)
    diff = diff_air(world.air, new)
    if diff.empty:
        raise UpgradeRefused(str(air_path), ["it changes nothing: the world runs this AIR"])
    if diff.problems:
        raise UpgradeRefused(str(air_path), diff.problems)
    for earlier in proposals(world):
        if (earlier.base, earlier.manifest_hash) == (world.air.manifest_hash, new.manifest_hash):
            raise UpgradeRefused(str(air_path), [f"already proposed, as proposal {earlier.id}"])
    address = store_air(world.cas, new, sources)
    body = {
        "base": cbor.hash_to_raw(world.air.manifest_hash),
        "manifest_hash": cbor.hash_to_raw(new.manifest_hash),
        "air": cbor.hash_to_raw(address),
        "note": note,
        "diff": diff.as_json(),
    }
    seq = journal_gov(world, (PROPOSED, _SUBJECT, body))
    return _proposal(seq, body), diff


def journal_gov(world: World, record: tuple[str, str, dict[str, Any]]) -> int:
    """Journal one governance record through the kernel and commit it, alone; its seq."""
    (seq,) = world.kernel.ingest_gov([record])
    world.commit(atomic=True)
    return seq


def proposals(world: World) -> list[Proposal]:
    """Every proposal journaled in ``world``, oldest first."""
    return [
        _proposal(record.seq, record.body)
        for record in world.journal.read(0, _SUBJECT)
        if record.kind == PROPOSED
    ]


def proposal(world: World, proposal_id: int) -> Proposal:
    """The proposal ``proposal_id`` (its record's seq); ``UnknownName`` if there is none. Reads
    the one record (a world of a million cells is no slower to apply to than an empty one)."""
    if 0 <= proposal_id < world.journal.seq_next:
        record = next(iter(world.journal.read(proposal_id)), None)
        if record is not None and record.seq == proposal_id and record.kind == PROPOSED:
            return _proposal(record.seq, record.body)
    known = [str(p.id) for p in proposals(world)]  # only to say which there are
    raise UnknownName("proposal", str(proposal_id), known)


def proposal_air(world: World, found: Proposal) -> LoadedAir:
    """The proposal's AIR, loaded again from the world's CAS (checked against its hash)."""
    air = load_stored_air(world.cas, found.air)
    if air.manifest_hash != found.manifest_hash:
        raise UpgradeRefused(found.air, ["the stored proposal does not load to its manifest"])
    return air


def proposal_cells(world: World, diff: dict[str, Any]) -> dict[str, int]:
    """The cells each kept, succeeded or removed reducer of a proposal (its ``diff``, as
    journaled) has now: what would follow it."""
    return {
        line["old"]: world.cell_count(line["old"])
        for line in diff["reducers"]
        if line["old"] is not None and line["old"] in world.air.modules
    }


def _proposal(seq: int, body: dict[str, Any]) -> Proposal:
    return Proposal(
        seq,
        cbor.raw_to_hash(body["base"]),
        cbor.raw_to_hash(body["manifest_hash"]),
        cbor.raw_to_hash(body["air"]),
        body.get("note"),
        body["diff"],
    )


def shadows(world: World) -> dict[int, list[dict[str, Any]]]:
    """Proposal id -> its shadow runs (``{seq, report, from, head, summary}``), oldest first."""
    found: dict[int, list[dict[str, Any]]] = {}
    for record in world.journal.read(0, SHADOWED_SUBJECT):
        if record.kind == SHADOWED:
            body = record.body
            line = {
                "seq": record.seq,
                "report": cbor.raw_to_hash(body["report"]),
                "from": body["from"],
                "head": body["head"],
                "summary": body["summary"],
            }
            found.setdefault(body["proposal"], []).append(line)
    return found
