"""How a world changes: proposals of a new AIR, journaled with what they change.

``world upgrade propose DIR --air PATH`` loads and validates the new AIR as a whole, then
against the world: ``air._diff.diff_air`` lists the defs added, removed and changed, the routes,
triggers, grants and policy, and per reducer family whether the wasm, the state schema and the
key schema stay the same (and which reducer succeeds which). An AIR that would change a key
schema or a state schema is refused with the reason, nothing journaled. Otherwise its sources
and wasm go into the CAS and one ``gov.proposed`` record is journaled (subject
``/world/gov/proposed``) with the base manifest hash, the new one, the AIR's address, the note
and the diff; the proposal's id is that record's seq. ``world upgrade ls|show`` read them back
from the journal.

``world upgrade approve|apply DIR ID`` (``_apply``): an approval is a journaled word; an
apply is one ``gov.applied`` record at which the kernel starts the proposal's era
(``kernel._eras``): new cells and runs take it, existing cells and runs stay pinned to theirs,
capabilities and policy are the new era's for all. A stale proposal (its base is no longer the
current manifest) is refused.

``world cells upgrade DIR REDUCER (--key K | --all)`` (``_cells``) moves cells to the current
era in journaled batches (``kernel._upgrades``).

``world upgrade shadow DIR ID`` (``_shadow``) runs a proposal aside against what really
happened and reports, cell by cell, what would differ; journaled as ``gov.shadowed``.

Parts: ``_proposals`` (propose, list, show), ``_apply`` (approve, apply), ``_cells`` (cell
upgrades), ``_shadow`` (shadow runs), ``_shadow_report`` (a shadow compared with the world: the
report).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from world.gov._apply import (
        APPLIED,
        APPROVED,
        Applied,
        applied,
        apply,
        approvals,
        approve,
        listing,
    )
    from world.gov._cells import UPGRADE_BATCH_CELLS, CellsUpgraded, upgrade_cells
    from world.gov._proposals import (
        PROPOSED,
        SHADOWED,
        Proposal,
        proposal,
        proposal_air,
        proposal_cells,
        proposals,
        propose,
        shadows,
    )
    from world.gov._shadow import Shadowed, shadow
    from world.gov._shadow_report import field_diff

__all__ = [
    "APPLIED",
    "APPROVED",
    "PROPOSED",
    "SHADOWED",
    "UPGRADE_BATCH_CELLS",
    "Applied",
    "CellsUpgraded",
    "Proposal",
    "Shadowed",
    "applied",
    "apply",
    "approvals",
    "approve",
    "field_diff",
    "listing",
    "proposal",
    "proposal_air",
    "proposal_cells",
    "proposals",
    "propose",
    "shadow",
    "shadows",
    "upgrade_cells",
]

_APPLY = ("APPLIED", "APPROVED", "Applied", "applied", "apply", "approvals", "approve", "listing")
_CELLS = ("UPGRADE_BATCH_CELLS", "CellsUpgraded", "upgrade_cells")
_SHADOW = ("Shadowed", "shadow")
_WHERE: dict[str, str] = {
    name: "world.gov._apply"
    if name in _APPLY
    else "world.gov._cells"
    if name in _CELLS
    else "world.gov._shadow"
    if name in _SHADOW
    else "world.gov._shadow_report"
    if name == "field_diff"
    else "world.gov._proposals"
    for name in __all__
}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``world._face``)."""
    from world._face import export

    return export("world.gov", _WHERE, name, globals())
