"""Dead letters: deliveries that will never be handled, kept with the reason why.

A delivery becomes a dead letter when the step that took it failed (``step.failed``: a trap,
fuel, bad output), when a step emitted an event nothing takes (``no_route``), when an effect
ended in error (``effect_failed``) or was denied by an approver (``effect_denied``), or when it
reached a plan run that had already ended (``run_ended``). Nothing vanishes: each is counted in
``total``, and the most recent ``kept`` are held (``KernelLimits.dead_letters_kept``) with the
seq of the record that made them dead. Both go into the kernel's snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernel._scheduler import Delivery

__all__ = ["DeadLetter", "DeadLetters"]


@dataclass(frozen=True)
class DeadLetter:
    seq: int
    reducer: str
    key_cbor: bytes | None
    schema: str
    value_cbor: bytes
    code: str
    detail: str

    def to_obj(self) -> list[Any]:
        return [
            self.seq,
            self.reducer,
            self.key_cbor,
            self.schema,
            self.value_cbor,
            self.code,
            self.detail,
        ]


class DeadLetters:
    """The most recent ``kept`` dead letters (oldest first) and how many there were."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self.letters: list[DeadLetter] = []
        self.total = 0

    def add(
        self,
        seq: int,
        reducer: str,
        key_cbor: bytes | None,
        delivery: Delivery,
        reason: dict[str, Any],
    ) -> None:
        """``delivery`` to ``reducer`` (a cell's key, or None) is dead since record ``seq``;
        ``reason`` is ``{code, detail}``."""
        letter = DeadLetter(
            seq,
            reducer,
            key_cbor,
            delivery.schema,
            delivery.value_cbor,
            reason["code"],
            reason["detail"],
        )
        self.letters.append(letter)
        self.total += 1
        excess = len(self.letters) - self.kept
        if excess > 0:
            del self.letters[:excess]

    def restore(self, letters: list[Any], total: int) -> None:
        self.letters = [DeadLetter(*d) for d in letters]
        self.total = total
