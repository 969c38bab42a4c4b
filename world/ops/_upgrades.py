"""Changing a world (``world.gov``): ``upgrade.propose`` (journal an AIR as a proposal with its
diff), ``upgrade.ls``, ``upgrade.show``, ``upgrade.shadow`` (run it aside against what really
happened), ``upgrade.approve`` and ``upgrade.apply`` (the new era from the next tick). Each
that journals runs on a served world's loop with its writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from air.errors import InvalidArgument
from world.ops._base import Args, Context, Result, operation
from world.ops._status import NoArgs

__all__ = [
    "Applied",
    "Approved",
    "ProposalApproval",
    "ProposalOf",
    "ProposalShown",
    "Proposals",
    "Propose",
    "Shadow",
    "Shadowed",
    "upgrade_apply",
    "upgrade_approve",
    "upgrade_ls",
    "upgrade_propose",
    "upgrade_shadow",
    "upgrade_show",
]


class Propose(Args):
    air: str = Field(description="The AIR file or folder (an absolute path on the world's host)")
    note: str | None = Field(default=None, description="Why: kept with the proposal")
    modules: dict[str, str] = Field(
        default_factory=dict, description="NAME -> FILE.wasm (absolute) for modules naming none"
    )


class ProposalShown(Result):
    """A proposal (its id is its record's seq) and how many cells its diff touches."""

    id: int
    base: str = Field(description="The manifest hash the world ran when it was proposed")
    manifest_hash: str
    air: str = Field(description="The proposal document's address")
    note: str | None
    diff: dict[str, Any]
    cells: dict[str, int] = Field(description="Cells per reducer the change touches")


def _absolute(name: str, path: str) -> Path:
    if not Path(path).is_absolute():
        raise InvalidArgument(name, path, "must be an absolute path")
    return Path(path)


@operation("upgrade.propose", writes=True, server_files=True)
def upgrade_propose(ctx: Context, args: Propose) -> ProposalShown:
    """Validate an AIR against the world and journal it as a proposal with its diff."""
    from world.gov import proposal_cells, propose

    air = _absolute("air", args.air)
    for name, file in args.modules.items():
        _absolute(f"modules.{name}", file)
    ctx.catch_up()
    made, _diff = propose(ctx.world, air, args.note, modules=dict(args.modules))
    return ProposalShown(**made.as_json(), cells=proposal_cells(ctx.world, made.diff))


class Proposals(Result):
    proposals: list[dict[str, Any]] = Field(
        description="Each proposal with its approvals', shadows' counts and applied (seq|null)"
    )
    current: str = Field(description="The manifest hash the world runs")


@operation("upgrade.ls")
def upgrade_ls(ctx: Context, args: NoArgs) -> Proposals:
    """Every proposal, oldest first, with its approvals and whether it was applied."""
    from world.gov import listing

    return Proposals.model_validate(listing(ctx.world))


class ProposalOf(Args):
    id: int = Field(ge=0, description="The proposal's id (its record's seq)")


@operation("upgrade.show")
def upgrade_show(ctx: Context, args: ProposalOf) -> ProposalShown:
    """One proposal and what it changes."""
    from world.gov import proposal, proposal_cells

    made = proposal(ctx.world, args.id)
    return ProposalShown(**made.as_json(), cells=proposal_cells(ctx.world, made.diff))


class ProposalApproval(Args):
    id: int = Field(ge=0, description="The proposal's id")
    note: str | None = Field(default=None, description="Why: kept with the approval")


class Approved(Result):
    seq: int = Field(description="The seq of the journaled approval")


@operation("upgrade.approve", writes=True)
def upgrade_approve(ctx: Context, args: ProposalApproval) -> Approved:
    """Journal an approval of a proposal (it applies nothing)."""
    from world.gov import approve

    ctx.catch_up()
    return Approved(seq=approve(ctx.world, args.id, args.note))


class Applied(Result):
    seq: int = Field(description="The apply's record: where the new era starts")
    proposal: int
    base: str
    manifest_hash: str
    successors: dict[str, str] = Field(
        description="New reducer -> the old one whose cells it takes"
    )


@operation("upgrade.apply", writes=True)
def upgrade_apply(ctx: Context, args: ProposalOf) -> Applied:
    """Apply a proposal: new cells and runs take its AIR from the next tick."""
    from world.gov import apply

    ctx.catch_up()
    return Applied.model_validate(apply(ctx.world, args.id).as_json())


class Shadow(Args):
    id: int = Field(ge=0, description="The proposal's id")
    from_seq: int | None = Field(default=None, ge=1, description="Re-feed from this seq on")
    events: list[tuple[str, Any]] = Field(
        default_factory=list, description="More events to feed after: [schema, value] each"
    )


class Shadowed(Result):
    """A shadow run's report (kept in the CAS at ``address``, journaled at ``seq``)."""

    model_config = Result.model_config | {"extra": "allow"}
    seq: int
    address: str


@operation("upgrade.shadow", writes=True)
def upgrade_shadow(ctx: Context, args: Shadow) -> Shadowed:
    """Run a proposal aside against what really happened, and say what would differ."""
    from world.gov import shadow

    ctx.catch_up()
    found = shadow(ctx.world, args.id, from_seq=args.from_seq, events=list(args.events))
    return Shadowed.model_validate(found.as_json())
