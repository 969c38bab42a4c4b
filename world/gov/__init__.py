"""How a world changes: proposals of a new AIR, journaled with what they change.

``world upgrade propose DIR --air PATH`` loads and validates the new AIR as a whole, then
against the world: ``air._diff.diff_air`` lists the defs added, removed and changed, the routes,
triggers, grants and policy, and per reducer family whether the wasm, the state schema and the
key schema stay the same (and which reducer succeeds which). An AIR that would change a key
schema or a state schema is refused with the reason, nothing journaled. Otherwise its sources
and wasm go into the CAS and one ``gov.proposed`` record is journaled (subject
``/world/gov/proposed``) with the base manifest hash, the new one, the AIR's address, the note
and the diff; the proposal's id is that record's seq. ``world upgrade ls|show`` read them back
from the journal. (Shadow runs, approval and apply build on these: not here yet.)

Parts: ``_proposals``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from world.gov._proposals import (
        PROPOSED,
        Proposal,
        proposal,
        proposal_air,
        proposal_cells,
        proposals,
        propose,
    )

__all__ = [
    "PROPOSED",
    "Proposal",
    "proposal",
    "proposal_air",
    "proposal_cells",
    "proposals",
    "propose",
]

_WHERE: dict[str, str] = dict.fromkeys(__all__, "world.gov._proposals")


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``world._face``)."""
    from world._face import export

    return export("world.gov", _WHERE, name, globals())
