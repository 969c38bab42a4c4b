"""Every error the world layer (the I/O shell) raises on purpose, and the one translation of
``OSError``. The whole tree, every layer's classes, is drawn in ``air.errors``.

Families callers catch together:

- ``StorageError``: the OS failed a durable operation (``storage_error`` is the one place an
  ``OSError`` becomes one; ``storage_errors(operation)`` is the ``with`` form).
- ``DerivedStateError``: a derived file (checkpoint, index, shard, state, snapshot) is missing,
  damaged, ahead of the journal or replaced under a reader. The journal is the source of truth:
  the world rebuilds from it, or tells how (``CheckpointAhead``).
- ``Refused``: input the world would not take (a receipt, an exported cell, a migration, a
  batch of events), nothing of it stored.
- ``WorldUnavailable``: the world directory cannot be used for this now (not a world, not
  empty, locked, stale after an error, started by another manifest).
- ``ServeError``: a served world's protocol failed, or it answered with an error.
"""

from __future__ import annotations

import errno
import os
from types import TracebackType
from typing import Any, Literal

from air.errors import UsageError as _UsageError
from air.errors import WorldError

__all__ = [
    "ArchiveRefused",
    "BuildError",
    "CellFileRefused",
    "CheckpointAhead",
    "CheckpointMoved",
    "DerivedStateError",
    "EventRejected",
    "GenesisMismatch",
    "Interrupted",
    "JournalDamaged",
    "JournalReplaced",
    "JournalWriteFailed",
    "MigrationRefused",
    "NotACluster",
    "NotAWorld",
    "OutputExists",
    "ProtocolError",
    "ReceiptKeyDamaged",
    "ReceiptRefused",
    "RefusalReason",
    "Refused",
    "SeqPastEnd",
    "ServeError",
    "ServedError",
    "ServerBusy",
    "SignatureReason",
    "SocketNotTrusted",
    "StorageError",
    "StoreDamaged",
    "StoreFailed",
    "UpgradeRefused",
    "WorldExists",
    "WorldLocked",
    "WorldServed",
    "WorldStale",
    "WorldUnavailable",
    "storage_error",
    "storage_errors",
]


# --- storage -----------------------------------------------------------------------------------


class StorageError(WorldError):
    """The OS failed a durable operation (``errno_name`` e.g. ``ENOSPC``, ``EIO``, ``EROFS``)."""

    def __init__(self, path: str, operation: str, errno_name: str, detail: str) -> None:
        self.path = path
        self.operation = operation
        self.errno_name = errno_name
        self.detail = detail
        super().__init__(f"{operation} {path}: {detail} [{errno_name}]")


class JournalWriteFailed(StorageError):
    """A journal commit failed. ``rolled_back`` is True when every byte of the failed batch was
    cut again, so none of it is durable (a retry cannot duplicate it); False when the cut itself
    failed and the journal refuses further writes until it is reopened."""

    def __init__(
        self, path: str, operation: str, errno_name: str, detail: str, *, rolled_back: bool
    ) -> None:
        self.rolled_back = rolled_back
        super().__init__(path, operation, errno_name, detail)


def storage_error(
    exc: OSError, operation: str, path: str | os.PathLike[str] | None = None
) -> StorageError:
    """``exc`` as a ``StorageError``: ``path`` (or the error's own file name), ``operation``,
    the errno's name (``ENOSPC``, ``EIO``; ``EUNKNOWN`` without one) and the OS's text."""
    where = path if path is not None else exc.filename
    name = errno.errorcode.get(exc.errno or 0, "EUNKNOWN")
    return StorageError(os.fspath(where or "?"), operation, name, exc.strerror or str(exc))


class _AsStorageError:
    """The context manager ``storage_errors`` returns (a class: it is on the journal's paths)."""

    __slots__ = ("operation", "path")

    def __init__(self, operation: str, path: str | os.PathLike[str] | None) -> None:
        self.operation = operation
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, OSError):
            raise storage_error(exc, self.operation, self.path) from exc


def storage_errors(operation: str, path: str | os.PathLike[str] | None = None) -> _AsStorageError:
    """``with storage_errors("checkpoint"):`` raises an ``OSError`` inside as ``StorageError``
    (naming ``path``, or the file the OS named)."""
    return _AsStorageError(operation, path)


# --- derived state ------------------------------------------------------------------------------


class DerivedStateError(WorldError):
    """Derived state (checkpoint, index, shards, cell states, snapshot) is not usable as it is.
    Nothing acknowledged is lost: the journal has it."""


class StoreDamaged(DerivedStateError):
    """A derived file (checkpoint, index, shard, cell state, snapshot) is missing or damaged.
    The journal is the source of truth, so the world rebuilds from it."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class CheckpointAhead(DerivedStateError):
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


class CheckpointMoved(DerivedStateError):
    """A reader found files missing because a live writer replaced the checkpoint at ``path``
    under it. Internal to a reader: ``World.read`` and ``World.open`` reopen in place and never
    let it out (``world._world``, "Readers survive checkpoints")."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path} was replaced by a live writer while this reader used it; retry")


class StoreFailed(DerivedStateError):
    """A flush of the store at ``path`` failed earlier; reopen the store to recover."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"a flush failed earlier; reopen the cell store at {path}")


# --- refusals ---------------------------------------------------------------------------------


class Refused(WorldError):
    """Input the world would not take; nothing of it was stored."""


RefusalReason = Literal["forged", "altered", "unknown_intent", "not_queued"]


class ReceiptRefused(Refused):
    """A receipt is refused: its signature does not hold (``forged``: not made with this
    world's key; ``altered``: made with it, over different content), or it answers no intent
    the world is waiting on (``unknown_intent``; ``not_queued``: parked or denied). ``intent_hash``
    is hex."""

    def __init__(self, intent_hash: str, reason: RefusalReason) -> None:
        self.intent_hash = intent_hash
        self.reason = reason
        super().__init__(f"receipt for intent {intent_hash} refused: {reason}")


SignatureReason = Literal["unsigned", "foreign_signer", "bad_signature"]
"""Why an exported cell's signature is refused (``world.moves._cellfiles``)."""

_SIGNATURE_HINTS: dict[str, str] = {
    "unsigned": "the file carries no signature; give --trust to import it anyway",
    "foreign_signer": "signed by another world's key {signer}; give --trust-key {signer} to "
    "accept that world's files (or --trust for any valid signature)",
    "bad_signature": "the signature does not verify: the file was changed after it was "
    "signed, or does not name the key that signed it; no trust option imports it",
}


class CellFileRefused(Refused):
    """An exported cell at ``path`` cannot be imported: ``reason`` says why (altered,
    truncated, another module, a state that does not fit the target's schema...). A refused
    signature has one of the ``SignatureReason`` codes as ``reason``, and ``signer`` is the
    key the file names (hex; None if it names none)."""

    def __init__(self, path: str, reason: str, signer: str | None = None) -> None:
        self.path = path
        self.reason = reason
        self.signer = signer
        hint = _SIGNATURE_HINTS.get(reason)
        shown = reason if hint is None else f"{reason}: {hint.format(signer=signer)}"
        super().__init__(f"{path}: {shown}")


class ArchiveRefused(Refused):
    """The archive at ``archive`` is not this world's (or not an archive at all): ``reason``
    says what differs. Nothing was copied into it (``world._archive``)."""

    def __init__(self, archive: str, reason: str) -> None:
        self.archive = archive
        self.reason = reason
        super().__init__(f"archive {archive} refused: {reason}")


class MigrationRefused(Refused):
    """``reducer`` cannot be migrated to cells: ``reason`` says why. Nothing was written."""

    def __init__(self, reducer: str, reason: str) -> None:
        self.reducer = reducer
        self.reason = reason
        super().__init__(f"cannot migrate {reducer} to cells: {reason}")


class UpgradeRefused(Refused):
    """The AIR at ``source`` cannot become a proposal for this world: ``problems`` say why
    (a key or state schema that changed, nothing changed). Nothing was stored."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__(f"{source}: not a proposal for this world: {'; '.join(self.problems)}")


class EventRejected(Refused):
    """Event ``index`` of a batch (``where``: e.g. ``events.jsonl:12``) failed normalisation;
    nothing of the batch was journaled. ``cause`` is the error it failed with."""

    def __init__(self, index: int, cause: WorldError, where: str = "") -> None:
        self.index = index
        self.cause = cause
        self.where = where or f"event {index}"
        self.code = getattr(cause, "code", None) or type(cause).__name__
        super().__init__(f"{self.where}: {cause}")


# --- the world directory ------------------------------------------------------------------------


class WorldUnavailable(WorldError):
    """The world directory cannot be used for this now; the message says what to do."""


class NotAWorld(WorldUnavailable):
    """``path`` holds no world; a partitioned world's directory (its ``cluster.json``) is named
    as one, with the commands that take it."""

    def __init__(self, path: str) -> None:
        self.path = path
        if os.path.isfile(os.path.join(path, "cluster.json")):
            super().__init__(
                f"{path} is a partitioned world, not one world: world cluster run|replay|info "
                f"{path}, or one partition's world, {path}/p<i>"
            )
            return
        super().__init__(f"{path} is not a world (no air/sources.json); create one with world init")


class NotACluster(WorldUnavailable):
    """A directory that is not a partitioned world (``world.cluster``), or a world that is not
    one of its partitions."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class WorldExists(WorldUnavailable):
    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path} already holds something; a new world needs an empty folder")


class WorldLocked(WorldUnavailable):
    """Someone holds ``path`` in a way that excludes ``mode`` (``read``, ``write`` or
    ``exclusive``): another writer, or a repair in progress."""

    def __init__(self, path: str, mode: str = "write") -> None:
        self.path = path
        self.mode = mode
        holder = "a repair or rewrite" if mode == "read" else "another process"
        super().__init__(f"world is in use by {holder}; cannot open it for {mode}: {path}")


class JournalDamaged(WorldUnavailable):
    """A check of the world at ``path`` found its journal damaged (``finding``: the segment,
    offset, seq and reason, as ``journal verify`` says), and the world takes no write until
    ``repair`` (the command) has run: a record acknowledged now could be cut by that repair.
    Reads go on."""

    def __init__(self, path: str, finding: str) -> None:
        self.path = path
        self.finding = finding
        self.repair = f"world journal verify {path} --repair"
        super().__init__(
            f"the journal is damaged ({finding}): this world takes no write until it is "
            f"repaired: run `{self.repair}` (a server of it stopped first, started again after)"
        )


class WorldServed(WorldLocked):
    """The world at ``path`` is held by ``world serve``, and the command asked for it does not
    go through the server's socket: the message says so and what to do."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.mode = "write"
        WorldUnavailable.__init__(
            self,
            f"{path} is served by `world serve` (socket {path}/control.sock), which holds it "
            "for writing and runs its work; this command does not go through the server: stop "
            f"the server (`world serve {path} --stop`, or Ctrl-C where it runs), run the "
            "command, then serve again",
        )


class JournalReplaced(WorldUnavailable):
    """The directory a writer locked at open is no longer at ``path`` (moved aside, deleted,
    or replaced by a copy): another writer may hold the new one, so this one writes nothing
    more. Reopen the world."""

    def __init__(self, path: str, how: str) -> None:
        self.path = path
        self.how = how
        super().__init__(
            f"{path} was replaced while this world was open ({how}); nothing more is written "
            "through this handle: open the world again"
        )


class WorldStale(WorldUnavailable):
    """This handle's memory may be ahead of the journal (``reason``); reopen the world."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"this world handle stopped after an error ({reason}); open it again")


class GenesisMismatch(WorldUnavailable):
    """The journal's genesis record names another manifest than the world's AIR."""

    def __init__(self, expected: str, actual: str) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"the journal was started by manifest {expected} but the world's AIR is {actual}"
        )


# --- serving ------------------------------------------------------------------------------------


class ServeError(WorldError):
    """A served world's control protocol failed, or the world answered with an error."""


class ProtocolError(ServeError):
    """A frame that is not a request or reply of this protocol (``code``: ``malformed``,
    ``too_large``, ``version``, ``closed``); ``detail`` says what was wrong."""

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        self.detail = detail
        super().__init__(f"control protocol: {detail} [{code}]")


class SocketNotTrusted(ServeError):
    """The control socket at ``path`` is not this world's server's, so nothing was sent on it:
    ``reason`` says why (a symlink, not a socket, another user's, or a server of another world
    folder answered)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: not this world's control socket ({reason}); nothing was sent")


class ServerBusy(ServeError):
    """The served world already has ``clients_max`` connections: it answered this one with
    this error and closed it. Idle connections are closed after a while; try again."""

    def __init__(self, clients_max: int) -> None:
        self.clients_max = clients_max
        super().__init__(
            f"the served world is busy: {clients_max} connections are open (its limit); try again"
        )


class ServedError(ServeError):
    """The served world answered a request with an error: ``error_class`` is the class of the
    error it raised, ``code`` its code, ``detail`` its message, ``fields`` its fields."""

    def __init__(
        self, error_class: str, code: str, detail: str, fields: dict[str, Any] | None = None
    ) -> None:
        self.error_class = error_class
        self.code = code
        self.detail = detail
        self.fields = dict(fields or {})
        super().__init__(detail)


# --- usage --------------------------------------------------------------------------------------


class OutputExists(_UsageError):
    """An export would write over what is at ``path`` (``kind``: a ``file``, or a ``folder``
    that is not empty); nothing was written. ``force`` (``--force``) writes over it."""

    def __init__(self, path: str, kind: str) -> None:
        self.path = path
        self.kind = kind
        super().__init__(f"{path}: a {kind} is there already; give --force to write over it")


# --- the rest -----------------------------------------------------------------------------------


class Interrupted(WorldError):
    """A loop stopped at a tick boundary because ``interrupt()`` was called; everything up to
    ``seq_next`` is committed and nothing queued was lost."""

    def __init__(self, seq_next: int) -> None:
        self.seq_next = seq_next
        super().__init__(f"interrupted after seq {seq_next - 1}; nothing lost; run again to go on")


class SeqPastEnd(WorldError):
    """Journal position ``seq`` was asked for, but the journal's last record is ``seq_last``."""

    def __init__(self, seq: int, seq_last: int) -> None:
        self.seq = seq
        self.seq_last = seq_last
        super().__init__(
            f"seq {seq} is past the end of the journal (its last record is {seq_last})"
        )


class ReceiptKeyDamaged(WorldError):
    """The key file at ``path`` exists but cannot be the key (``reason``: its size). It is not
    replaced: a new key would refuse every receipt signed with the old one."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class BuildError(WorldError):
    """A reducer failed to build, or a module does not satisfy the reducer ABI.

    ``code`` is one of ``toolchain`` (ziglang missing or not the pinned version), ``source``
    (no such source, or not exactly one .c file in a reducer folder), ``compile``, ``invalid``
    (not a wasm module wasmtime can compile), ``imports``, ``exports`` (wrong set or kind of
    exports) and ``signature`` (an export's function type). ``detail`` is the reason; for
    ``compile`` it is the compiler's whole output.
    """

    def __init__(self, reducer: str, code: str, detail: str) -> None:
        super().__init__(f"{reducer}: {detail}")
        self.reducer = reducer
        self.code = code
        self.detail = detail
