"""The errors of the world directory layer (``world._world``, ``world._repair``).

Each has structured fields; the tree they belong to is drawn in ``air.errors``.
"""

from __future__ import annotations

from air.errors import WorldError

__all__ = [
    "CheckpointAhead",
    "CheckpointMoved",
    "EventRejected",
    "GenesisMismatch",
    "Interrupted",
    "NotAWorld",
    "WorldExists",
    "WorldStale",
]


class WorldExists(WorldError):
    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path} already holds something; a new world needs an empty folder")


class NotAWorld(WorldError):
    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path} is not a world (no air/sources.json); create one with world init")


class GenesisMismatch(WorldError):
    """The journal's genesis record names another manifest than the world's AIR."""

    def __init__(self, expected: str, actual: str) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"the journal was started by manifest {expected} but the world's AIR is {actual}"
        )


class CheckpointAhead(WorldError):
    """The cell checkpoint covers journal records that are no longer there (the journal lost
    committed records after the checkpoint was written). Never guessed around: repair the
    journal (which discards such a checkpoint) or restore it."""

    def __init__(self, checkpoint_seq_next: int, journal_seq_next: int) -> None:
        self.checkpoint_seq_next = checkpoint_seq_next
        self.journal_seq_next = journal_seq_next
        super().__init__(
            f"the state checkpoint reaches seq {checkpoint_seq_next} but the journal ends at "
            f"{journal_seq_next}: committed records were lost; run `world journal verify DIR` "
            "to see what, then `world journal verify DIR --repair`"
        )


class Interrupted(WorldError):
    """A loop stopped at a tick boundary because ``interrupt()`` was called; everything up to
    ``seq_next`` is committed and nothing queued was lost."""

    def __init__(self, seq_next: int) -> None:
        self.seq_next = seq_next
        super().__init__(f"interrupted after seq {seq_next - 1}; nothing lost; run again to go on")


class WorldStale(WorldError):
    """This handle's memory may be ahead of the journal (``reason``); reopen the world."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"this world handle stopped after an error ({reason}); open it again")


class EventRejected(WorldError):
    """Event ``index`` of a batch (``where``: e.g. ``events.jsonl:12``) failed normalisation;
    nothing of the batch was journaled. ``cause`` is the error it failed with."""

    def __init__(self, index: int, cause: WorldError, where: str = "") -> None:
        self.index = index
        self.cause = cause
        self.where = where or f"event {index}"
        self.code = getattr(cause, "code", None) or type(cause).__name__
        super().__init__(f"{self.where}: {cause}")


class CheckpointMoved(WorldError):
    """A reader found files missing because a live writer replaced the checkpoint: retry."""
