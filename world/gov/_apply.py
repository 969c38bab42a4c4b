"""Approving and applying a proposal: one journaled record each (``world.gov``).

``approve`` journals ``gov.approved`` ``{proposal, note}``: a person's word, kept with the
world; it changes nothing the world runs. ``apply`` journals ``gov.applied``::

    {"proposal": <id>, "base": <manifest hash it replaces>, "manifest_hash": <the new one>,
     "air": <address of its AIR document>, "successors": {<new reducer>: <old reducer>}}

(hashes raw), and the kernel starts the new era at it (``kernel._eras``): one record, so the
world is in one era or the other, never a mix; nothing else is written (no cell is touched:
apply costs the same on a world of any size). A proposal whose base is no longer the current
manifest is stale and refused, as is one already applied (its base is gone then too). A world
whose AIR says ``"governance": {"apply_requires": ["approval", "shadow"]}`` (either or both;
the current manifest's) refuses to apply a proposal without that first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from air import cbor
from air.errors import InvalidArgument
from kernel.subjects import make_subject
from world._world import World
from world.errors import UpgradeRefused
from world.gov._proposals import Proposal, journal_gov, proposal

__all__ = [
    "APPLIED",
    "APPROVED",
    "Applied",
    "applied",
    "apply",
    "approvals",
    "approve",
    "listing",
]

APPROVED: Final = "gov.approved"
APPLIED: Final = "gov.applied"
_APPROVED_SUBJECT: Final = make_subject("world", "gov", "approved")
APPLIED_SUBJECT: Final = make_subject("world", "gov", "applied")


@dataclass(frozen=True)
class Applied:
    """A journaled apply; ``seq`` is its record's, where the new era starts."""

    seq: int
    proposal: int
    base: str
    manifest_hash: str
    successors: dict[str, str]

    def as_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "proposal": self.proposal,
            "base": self.base,
            "manifest_hash": self.manifest_hash,
            "successors": self.successors,
        }


def approve(world: World, proposal_id: int, note: str | None = None) -> int:
    """Journal an approval of proposal ``proposal_id``; its seq. Refused for a stale one."""
    world._writable()
    if note is not None and not isinstance(note, str):
        raise InvalidArgument("note", note, "a note is text")
    found = proposal(world, proposal_id)
    not_stale(world, found.id, found.base)
    body = {"proposal": found.id, "note": note}
    return journal_gov(world, (APPROVED, _APPROVED_SUBJECT, body))


def approvals(world: World) -> dict[int, list[int]]:
    """Proposal id -> the seqs of its approvals."""
    found: dict[int, list[int]] = {}
    for record in world.journal.read(0, _APPROVED_SUBJECT):
        if record.kind == APPROVED:
            found.setdefault(record.body["proposal"], []).append(record.seq)
    return found


def apply(world: World, proposal_id: int) -> Applied:
    """Apply proposal ``proposal_id``: journal ``gov.applied`` and start its era (see the
    module docstring). ``UpgradeRefused`` (nothing journaled) if it is stale."""
    world._writable()
    found = proposal(world, proposal_id)
    not_stale(world, found.id, found.base)
    _required(world, found)
    body = applied_body(found)
    seq = journal_gov(world, (APPLIED, APPLIED_SUBJECT, body))
    return _applied(seq, body)


def applied_body(found: Proposal) -> dict[str, Any]:
    """The body of the ``gov.applied`` record that applies ``found``."""
    successors = {
        line["new"]: line["old"]
        for line in found.diff["reducers"]
        if line["change"] == "successor" and line["old"] and line["new"]
    }
    return {
        "proposal": found.id,
        "base": cbor.hash_to_raw(found.base),
        "manifest_hash": cbor.hash_to_raw(found.manifest_hash),
        "air": cbor.hash_to_raw(found.air),
        "successors": dict(sorted(successors.items())),
    }


def applied(world: World) -> list[Applied]:
    """Every apply journaled in ``world``, oldest first."""
    return [
        _applied(record.seq, record.body)
        for record in world.journal.read(0, APPLIED_SUBJECT)
        if record.kind == APPLIED
    ]


def listing(world: World) -> dict[str, Any]:
    """What ``world upgrade ls`` shows: every proposal (``Proposal.as_json``) with its
    approvals' and shadow runs' counts and the seq it was applied at (None), and the current
    manifest hash."""
    from world.gov._proposals import proposals, shadows

    counts = approvals(world)
    shadowed = shadows(world)
    done = {a.proposal: a.seq for a in applied(world)}
    return {
        "proposals": [
            {
                **p.as_json(),
                "approvals": len(counts.get(p.id, [])),
                "shadows": len(shadowed.get(p.id, [])),
                "applied": done.get(p.id),
            }
            for p in proposals(world)
        ],
        "current": world.air.manifest_hash,
    }


def _required(world: World, found: Proposal) -> None:
    """Refuse (``UpgradeRefused``) an apply that the world's AIR says needs an approval or a
    shadow run of the proposal first (``manifest.governance.apply_requires``)."""
    from world.gov._proposals import shadows

    governance = world.air.manifest.governance
    needs = set() if governance is None else set(governance.apply_requires)
    missing = []
    if "approval" in needs and not approvals(world).get(found.id):
        missing.append(f"an approval (world upgrade approve DIR {found.id})")
    if "shadow" in needs and not shadows(world).get(found.id):
        missing.append(f"a shadow run (world upgrade shadow DIR {found.id})")
    if missing:
        raise UpgradeRefused(
            f"proposal {found.id}",
            [f"the world's AIR requires {' and '.join(missing)} before an apply"],
        )


def not_stale(world: World, proposal_id: int, base: str) -> None:
    if base != world.air.manifest_hash:
        raise UpgradeRefused(
            f"proposal {proposal_id}",
            [
                f"stale: it was proposed against {base}, and the world now runs "
                f"{world.air.manifest_hash}; propose it again against the current AIR"
            ],
        )


def _applied(seq: int, body: dict[str, Any]) -> Applied:
    return Applied(
        seq,
        body["proposal"],
        cbor.raw_to_hash(body["base"]),
        cbor.raw_to_hash(body["manifest_hash"]),
        dict(body["successors"]),
    )
