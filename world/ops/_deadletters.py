"""Dead letters: ``dead_letters.ls`` (the kept ones, oldest first), ``dead_letters.show`` (one,
with its event's value), ``dead_letters.retry`` and ``dead_letters.drop`` (each journaled)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from world.ops._base import Args, Context, Result, operation
from world.ops._status import NoArgs

__all__ = [
    "DeadLetter",
    "DeadLetterActed",
    "DeadLetterOf",
    "DeadLetters",
    "dead_letters_drop",
    "dead_letters_ls",
    "dead_letters_retry",
    "dead_letters_show",
]


class DeadLetters(Result):
    total: int = Field(description="Dead letters in all, dropped ones too")
    kept: int
    steps_failed: int
    letters: list[dict[str, Any]] = Field(
        description="{id, seq, reducer, key, schema, code, detail, retryable} each"
    )


@operation("dead_letters.ls")
def dead_letters_ls(ctx: Context, args: NoArgs) -> DeadLetters:
    """The kept dead letters, oldest first, and how many there were in all."""
    from world.operate import dead_letters

    ctx.catch_up()
    return DeadLetters.model_validate(dead_letters(ctx.world))


class DeadLetterOf(Args):
    id: str = Field(description="The dead letter's id (from dead_letters.ls)")


class DeadLetter(Result):
    letter: dict[str, Any] = Field(description="As in dead_letters.ls, with the event's value")


@operation("dead_letters.show")
def dead_letters_show(ctx: Context, args: DeadLetterOf) -> DeadLetter:
    """One dead letter: its target, event, code and the whole reason."""
    from world.operate import dead_letter

    ctx.catch_up()
    return DeadLetter(letter=dead_letter(ctx.world, args.id))


class DeadLetterActed(Result):
    seq: int = Field(description="The seq of the journaled record")
    id: str


@operation("dead_letters.retry", writes=True)
def dead_letters_retry(ctx: Context, args: DeadLetterOf) -> DeadLetterActed:
    """Deliver a dead letter's event again to the same reducer and key (at the next tick)."""
    ctx.catch_up()
    return DeadLetterActed(seq=ctx.world.retry_dead_letter(args.id), id=args.id)


@operation("dead_letters.drop", writes=True)
def dead_letters_drop(ctx: Context, args: DeadLetterOf) -> DeadLetterActed:
    """Take a dead letter off the kept list (it still counts in the total)."""
    ctx.catch_up()
    return DeadLetterActed(seq=ctx.world.drop_dead_letter(args.id), id=args.id)
