"""Dead letters: deliveries that will never be handled, kept with the reason why, and what an
operator does about them.

A delivery becomes a dead letter when the step that took it failed (``step.failed``: a trap,
fuel, bad output, a module the host cannot run (its start function traps or loops, it is off
the ABI or over a limit: every delivery to it), or the reducer refused it with a reason, code
``refused``), when a step
emitted an event nothing takes (``no_route``), when an effect ended in error
(``effect_failed``) or was denied by an approver (``effect_denied``), or when it reached a plan
run that had ended (``run_ended``) or was cancelled (``run_cancelled``). Nothing vanishes:
each is counted in ``total``, and the most recent ``kept`` are held
(``KernelLimits.dead_letters_kept``) with the seq of the record that made them dead. ``steps_failed`` counts the failed steps among them. All of it
goes into the kernel's snapshot.

Ids. A letter's id is the seq of the record that made it dead, as text (``"17"``); when one
record made several (a step that emitted two events nothing takes), the second and later are
``"17.1"``, ``"17.2"`` (``n``, kept in the letter). Ids never change and are never reused.

Operator records, journaled from outside like an approval, applied here and replayed exactly:

    kind                 subject                            body
    deadletter.retried   /world/deadletter/<id>/retried     {id, reducer, key, schema}
    deadletter.dropped   /world/deadletter/<id>/dropped     {id}

Both take the letter off the kept list (``total`` is unchanged: it counts what died). A retry
delivers the letter's event again to the same target, ``(reducer, key)``, as the delivery
``(seq of the retried record, 0)``; the tick runs it in the reducer's current era (a reducer
renamed by an upgrade under its new name), and if it fails again it is a new dead letter. Only
letters a reducer step failed on can be retried (``retryable``): an unrouted emitted event, a
failed or denied effect and an event for an ended or cancelled run have no step to run again;
drop them.
Replay re-applies both records and diverges if the letter they name is not there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from air.errors import UnknownName, UsageError
from kernel._scheduler import Delivery
from kernel.errors import ReplayDivergence
from kernel.journal import JournalRecord
from kernel.subjects import make_subject

__all__ = [
    "DEAD_LETTER_KINDS",
    "DROPPED",
    "RETRIED",
    "UNRETRYABLE_CODES",
    "DeadLetter",
    "DeadLetters",
]

RETRIED: Final = "deadletter.retried"
DROPPED: Final = "deadletter.dropped"
DEAD_LETTER_KINDS: Final = frozenset((RETRIED, DROPPED))
"""The operator's records on dead letters (the module docstring)."""
UNRETRYABLE_CODES: Final = frozenset(
    ("no_route", "effect_failed", "effect_denied", "run_ended", "run_cancelled")
)
"""Codes of letters no reducer step failed on: nothing to run again."""


@dataclass(frozen=True)
class DeadLetter:
    seq: int
    reducer: str
    key_cbor: bytes | None
    schema: str
    value_cbor: bytes
    code: str
    detail: str
    n: int = 0  # among the letters record ``seq`` made (the module docstring, "Ids")

    @property
    def id(self) -> str:
        return str(self.seq) if self.n == 0 else f"{self.seq}.{self.n}"

    @property
    def retryable(self) -> bool:
        return self.code not in UNRETRYABLE_CODES

    def to_obj(self) -> list[Any]:
        obj = [
            self.seq,
            self.reducer,
            self.key_cbor,
            self.schema,
            self.value_cbor,
            self.code,
            self.detail,
        ]
        if self.n:  # absent when 0: older snapshots' shape
            obj.append(self.n)
        return obj


class DeadLetters:
    """The most recent ``kept`` dead letters (oldest first) and how many there were."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self.letters: list[DeadLetter] = []
        self.total = 0
        self.steps_failed = 0
        self._last = (-1, -1)  # (seq, n) of the last letter made

    def add(
        self,
        seq: int,
        reducer: str,
        key_cbor: bytes | None,
        delivery: Delivery,
        reason: dict[str, Any],
        *,
        failed_step: bool = False,
    ) -> None:
        """``delivery`` to ``reducer`` (a cell's key, or None) is dead since record ``seq``;
        ``reason`` is ``{code, detail}``; ``failed_step``: a reducer step failed on it."""
        last_seq, last_n = self._last
        n = last_n + 1 if last_seq == seq else 0
        self._last = (seq, n)
        letter = DeadLetter(
            seq,
            reducer,
            key_cbor,
            delivery.schema,
            delivery.value_cbor,
            reason["code"],
            reason["detail"],
            n,
        )
        self.letters.append(letter)
        self.total += 1
        self.steps_failed += failed_step
        excess = len(self.letters) - self.kept
        if excess > 0:
            del self.letters[:excess]

    def find(self, letter_id: str) -> DeadLetter | None:
        return next((d for d in self.letters if d.id == letter_id), None)

    def get(self, letter_id: str) -> DeadLetter:
        """The kept letter ``letter_id`` (exact: ids are seqs, not hashes), or ``UnknownName``."""
        letter = self.find(letter_id)
        if letter is None:
            raise UnknownName("dead letter", letter_id, [d.id for d in self.letters])
        return letter

    def record(self, kind: str, letter_id: str) -> tuple[str, str, dict[str, Any]]:
        """The operator record ``kind`` (``RETRIED`` or ``DROPPED``) on letter ``letter_id``:
        ``(kind, subject, body)``, checked (``UnknownName``, ``UsageError``), not applied."""
        if kind not in DEAD_LETTER_KINDS:
            raise UsageError(f"not a dead-letter record: {kind}")
        letter = self.get(letter_id)
        subject = make_subject("world", "deadletter", letter.id, kind.removeprefix("deadletter."))
        if kind == DROPPED:
            return kind, subject, {"id": letter.id}
        if not letter.retryable:
            raise UsageError(
                f"dead letter {letter.id} ({letter.code}) has no step to run again; drop it"
            )
        body = {
            "id": letter.id,
            "reducer": letter.reducer,
            "key": letter.key_cbor,
            "schema": letter.schema,
        }
        return kind, subject, body

    def apply(self, record: JournalRecord) -> tuple[str, bytes | None, Delivery] | None:
        """Apply an operator record: take its letter off the list; for a retry, the target
        ``(reducer, key)`` and the delivery to give it. ``ReplayDivergence`` if the record does
        not fit the letters (a journal this kernel did not write)."""
        body = record.body
        letter = self.find(str(body.get("id")))
        if letter is None:
            raise ReplayDivergence(
                record.seq, record.subject, f"dead letter {body.get('id')}", "no such letter"
            )
        if record.kind == RETRIED:
            wanted = [letter.reducer, letter.key_cbor, letter.schema, letter.retryable]
            given = [body.get("reducer"), body.get("key"), body.get("schema"), True]
            if wanted != given:
                raise ReplayDivergence(
                    record.seq, record.subject, f"the retry of {letter.id}", "another letter"
                )
        self.letters.remove(letter)
        if record.kind != RETRIED:
            return None
        return (
            letter.reducer,
            letter.key_cbor,
            Delivery(record.seq, 0, letter.schema, letter.value_cbor),
        )

    def counts(self) -> dict[str, int]:
        """What ``world info`` shows beside ``dead_letters_total``: the letters kept now and
        the failed steps (each made one of the letters)."""
        return {"dead_letters_kept": len(self.letters), "steps_failed": self.steps_failed}

    def extra_obj(self) -> dict[str, Any]:
        """Snapshot fields beside ``dead_letters`` and ``dead_letters_total``: absent when
        zero (older snapshots' shape)."""
        return {"steps_failed": self.steps_failed} if self.steps_failed else {}

    def restore(self, letters: list[Any], total: int, steps_failed: int = 0) -> None:
        self.letters = [DeadLetter(*d) for d in letters]
        self.total = total
        self.steps_failed = steps_failed
        self._last = (self.letters[-1].seq, self.letters[-1].n) if self.letters else (-1, -1)
