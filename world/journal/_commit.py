"""The journal directory's files beyond the frames of one segment: preparing the directory at a
writable open (creating it durably, removing the temp files of a crashed roll), what one commit
changed on disk and how a failed commit is undone, and closing a segment's fd. Private to
``world.journal._file``, whose docstring gives the commit protocol these serve.

Failure. A commit is all or nothing under I/O errors. If any step fails (an ``ENOSPC`` on a
full disk, an ``EIO`` on ``fdatasync``, a short write), the journal truncates the segment it
wrote to back to its size before the commit (``ftruncate`` + ``fsync``; cutting frees space, so
this works on a full disk), removes the segment and the seal the commit's roll created, syncs
the directory, drops the pending records and raises ``JournalWriteFailed(rolled_back=True)`` with
the failing operation, path and errno: none of the batch is durable, the handle stays open, and
the next commit works once the cause is gone. Only if the rollback fails too is it
``rolled_back=False``: the handle then refuses writes until it is reopened, and what opening
finds is decided by the torn-tail rule (whole frames of the batch that reached the file stay).

Crash. After a crash, every commit that returned is whole. Of a batch whose ``commit`` had not
returned, reopening finds a *prefix*: none, some or all of its records from the first, each
whole (a torn last frame is dropped), never a later one without the earlier ones. Exactly:

    process crash between two ``world._fileio`` operations (what the crash tests inject): all of
        the batch if its ``write`` had completed (the page cache keeps it; ``fdatasync`` only
        matters for power loss), none of it otherwise;
    ``kill -9`` inside the ``write`` (Linux stops a multi-page write at a page boundary when a
        fatal signal arrives), or power loss before ``fdatasync`` returned: any prefix;
    power loss that kept a later page and lost an earlier one: reported as corruption, which
        ``repair`` cuts; nothing is guessed around.

None of these records was acknowledged. A prefix is fine for the ticks of a run (replay
re-derives the rest); for a batch of inputs it is not, so ``commit(atomic=True)`` makes such a
batch all or nothing under a crash too, with a marker written before it
(``world.journal._batch``, which also says why not a bit in every frame).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from world import _fileio as fileio
from world.errors import StorageError, storage_errors
from world.journal._segments import fsync_dir, truncate, unlink

__all__ = ["Commit", "close_fd", "prepare_directory", "roll_back"]

# Temp names of a segment, a seal or the batch marker being written: ours (``.<name>.new.tmp``) and those of
# ``world._fsutil.atomic_write``, which wrote them before.
_TEMP_NAME_RE: Final = re.compile(r"\.(\d{20}\.log(\.seal)?|batch\.pending)\..*\.tmp")


def prepare_directory(directory: Path) -> None:
    """Create the journal directory durably if needed and remove temp files of a crashed roll."""
    if not directory.is_dir():
        with storage_errors("mkdir", directory):
            fileio.mkdir(directory, parents=True)
        fsync_dir(directory.parent)
    with storage_errors("list", directory):
        names = [entry.name for entry in os.scandir(directory)]
    for name in names:
        if _TEMP_NAME_RE.fullmatch(name):
            unlink(directory / name)


def close_fd(fd: int) -> None:
    """Close a segment's fd. An error here is not worth raising: every byte that counts was
    synced by the commit that wrote it, and what was not is cut by the next open."""
    with contextlib.suppress(OSError):
        os.close(fd)


@dataclass(slots=True)
class Commit:
    """What one commit changed on disk so far, for its rollback."""

    written: tuple[Path, int] | None = None  # the segment written to, and its size before
    step: str = "commit"  # the operation under way on that segment (for the error)
    temps: list[Path] = field(default_factory=list)  # temp files made for a roll
    created: list[Path] = field(default_factory=list)  # a segment and a seal renamed into place
    fd: int | None = None  # of the segment a roll created


def roll_back(directory: Path, commit: Commit) -> None:
    """Undo ``commit``: cut the segment it wrote to, remove what its roll created, sync."""
    for temp in commit.temps:  # harmless if left: the next writable open removes them
        if os.path.lexists(temp):
            with contextlib.suppress(OSError, StorageError):
                fileio.unlink(temp, missing_ok=True)
    if commit.written is not None and commit.written[0] not in commit.created:
        path, size = commit.written
        with storage_errors("stat", path):
            grown = os.stat(path).st_size != size
        if grown:
            truncate(path, size)
    removed = [path for path in reversed(commit.created) if os.path.lexists(path)]
    for path in removed:
        unlink(path)
    if commit.created:
        fsync_dir(directory)
