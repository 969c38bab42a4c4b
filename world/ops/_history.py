"""A world's past: ``why`` (the chain of causes back from the record that wrote a cell's
state). It reads the journal from the world's folder, so a served world runs it off its loop.
(``cells.show`` with ``at``, a cell's state at a past position, is a cells operation.)"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from world.ops._base import Args, Context, Result, operation

__all__ = ["Why", "WhyOf", "why"]


class WhyOf(Args):
    reducer: str = Field(description="The keyed reducer")
    key: Any = Field(description="The cell's key (sugar JSON)")
    at: int | None = Field(default=None, ge=0, description="Right after this position; none: now")


class Why(Result):
    reducer: str
    key: Any
    at: int = Field(description="The position asked about")
    state: Any = Field(description="The cell's state then; null: it did not exist")
    chain: list[dict[str, Any]] = Field(
        description="Newest first: {seq, kind, link, says, record, beside: [...]} each"
    )
    ends: str = Field(description="How the chain ends")


@operation("why", off_loop=lambda _args: True)
def why(ctx: Context, args: WhyOf) -> Why:
    """Why a cell holds its state: the step that wrote it, back to what caused it."""
    from world.history import why as find_why

    return Why.model_validate(find_why(ctx.world.path, args.reducer, args.key, args.at).to_json())
