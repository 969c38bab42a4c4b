"""A tick's records: appended to the journal live, compared with the journal on replay.

``Recorder.append(records, expected)`` is the one place a tick's records meet the journal.
Live (``expected`` None) it appends them all. Replaying, the journal already holds them:
the first is compared with ``expected`` (the record replay is at) and the others are *owed*,
compared one by one as ``Kernel.apply`` reaches them (``settle``). Either way it returns the
first record's seq.

``consistent`` says whether the kernel's memory equals the journal's records (committed or
pending). It is False from a tick's append until the tick has been applied to memory (the
tick sets it True again), and stays False if an error escapes in between: a caller that sees
an exception with ``consistent`` False knows memory may be ahead of the journal and must not
checkpoint it. An append that fails with no record in keeps it True: the delivery is still
queued, as if the tick had not started.

``owed`` can also outlive the journal: a crash inside a commit can keep a tick's first records
and lose the rest (a commit is durable as a prefix). Replay re-derives them; ``take_owed``
hands them to the world layer, which appends them so the journal is whole again.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from kernel import native
from kernel._divergence import first_difference
from kernel.errors import ReplayDivergence
from kernel.journal import Journal, JournalRecord

__all__ = ["Record", "Recorder"]

Record = tuple[str, str, dict[str, Any]]
"""``(kind, subject, body)`` of a record a tick writes."""


class Recorder:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.consistent = True
        self._owed: deque[Record] = deque()

    def append(self, records: list[Record], expected: JournalRecord | None) -> int:
        """Journal a tick's records (or, replaying, check the first against ``expected`` and
        owe the rest to the records that follow it); return the first one's seq. Leaves
        ``consistent`` False: the caller applies the tick to memory, then sets it True."""
        appended_before = self.journal.seq_next
        self.consistent = False
        try:
            kind, subject, body = records[0]
            seq = self.record(kind, subject, body, expected)
            for kind, subject, body in records[1:]:
                if expected is None:
                    self.journal.append(kind, subject, body)
                else:
                    self._owed.append((kind, subject, body))
        except BaseException:
            # Trusted again only if no record got in; otherwise the journal holds a step whose
            # delivery is still queued, and memory must not be checkpointed.
            self.consistent = self.journal.seq_next == appended_before
            raise
        return seq

    def record(
        self, kind: str, subject: str, body: dict[str, Any], expected: JournalRecord | None
    ) -> int:
        """Append one record, or compare it with ``expected`` (``ReplayDivergence`` at the
        first differing field); its seq."""
        if expected is None:
            return self.journal.append(kind, subject, body)
        actual = native.dumps({"kind": kind, "subject": subject, "body": body})
        wanted = native.dumps(
            {"kind": expected.kind, "subject": expected.subject, "body": expected.body}
        )
        if actual != wanted:
            name, was, now = first_difference(
                {"kind": expected.kind, "subject": expected.subject, "body": expected.body},
                {"kind": kind, "subject": subject, "body": body},
            )
            raise ReplayDivergence(expected.seq, subject, was, now, name)
        return expected.seq

    def settle(self, record: JournalRecord) -> bool:
        """If a record is owed, compare ``record`` with it and return True; else False."""
        if not self._owed:
            return False
        kind, subject, body = self._owed.popleft()
        self.record(kind, subject, body, record)
        return True

    def take_owed(self) -> list[Record]:
        """Records the last replayed tick produced that the journal does not hold (it was cut
        inside a tick's commit): the caller appends them to complete the tick."""
        owed = list(self._owed)
        self._owed.clear()
        return owed
