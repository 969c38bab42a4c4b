"""A fork of a world at a past position (``world fork DIR --at SEQ NEW``).

``fork_world`` writes a new world whose journal is the source's records ``0..seq`` (extended to
the end of a tick group, as ``world.history._timetravel.through`` reads it), with the same AIR,
content store and receipt key, and no checkpoint: its first open rebuilds its state from the
journal. It is built in a hidden sibling folder, ``.<name>.fork-<random>``, and renamed into
place, so a failed fork leaves nothing. The source is only read (shared lock).

A fork that is killed (``kill -9``, a power cut) cannot remove its hidden folder. The next fork
to the same target name removes such leftovers before it starts: every ``.<name>.fork-*``
folder beside the target that no live fork holds (each fork holds its folder with an
exclusive ``flock`` while it builds it, ``world._fsutil.lock_folder``, and the hold dies with
its process). A fork started in the instant between another's ``mkdtemp`` and its hold could
remove that one's folder: the other then fails with a ``StorageError``; nothing is ever
half-placed.

A fork's effects are not live: it is written with ``<fork>/effects-mode.json`` saying ``stub``,
with the reason ``fork of <source> at seq N`` (``world.effects._modes``), so running it re-derives
its parent's intents without sending them again, until ``world run --effects live`` is given
once for it. The source's own mode file is not copied: the fork's is written fresh.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from world import _fileio as fileio
from world._cas import OBJECT_BYTES_MAX
from world._directory import remove_leftovers as remove_build_leftovers
from world._directory import remove_tree
from world._fsutil import lock_folder, mkdir_durable, sync_paths, sync_tree, write_unsynced
from world._world import World
from world.effects import fork_mode, write_mode_file
from world.errors import WorldExists, storage_errors
from world.history._timetravel import check_seq, through
from world.journal import FileJournal

__all__ = ["FORK_INFIX", "Forked", "fork_world", "remove_leftovers"]

FORK_INFIX: Final = ".fork-"
"""A fork to ``<name>`` is built in ``.<name>.fork-<random>`` beside it."""

_COMMIT_EVERY = 10_000
"""A fork commits its journal in batches of this many records (bounded memory)."""


@dataclass(frozen=True)
class Forked:
    """A fork written at ``path``: records ``0..seq_through`` of the source (``seq`` asked)."""

    path: Path
    seq: int
    seq_through: int

    @property
    def extended(self) -> bool:
        return self.seq_through != self.seq


def fork_world(source: Path, seq: int, target: Path) -> Forked:
    """Write a new world at ``target`` (absent or empty) from ``source``'s records ``0..seq``."""
    source, target = Path(source), Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise WorldExists(str(target))
    with World.open(source, readonly=True) as world:
        check_seq(seq, world.journal.seq_next)
        parent = target.absolute().parent
        with storage_errors("fork"):
            mkdir_durable(parent)
            remove_leftovers(parent, target.name)
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}{FORK_INFIX}", dir=parent))
            hold = lock_folder(staging)
            try:
                last = _write_fork(world, source, staging, seq)
                sync_tree(staging)
                if target.exists():
                    target.rmdir()  # empty (checked above); rename cannot replace it otherwise
                fileio.replace(staging, target)
                fileio.fsync_dir(parent)
            except BaseException:
                remove_tree(staging)
                raise
            finally:
                hold.release()
    return Forked(target, seq, last)


def remove_leftovers(parent: Path, name: str) -> list[Path]:
    """Remove the hidden folders that killed forks to ``name`` left in ``parent`` (see the
    module docstring); return them. A folder a live fork holds, or a symlink, stays."""
    return remove_build_leftovers(parent, name, FORK_INFIX)


def _write_fork(world: World, source: Path, staging: Path, seq: int) -> int:
    for folder in ("air", "keys", "cas"):
        if (source / folder).is_dir():
            _copy_tree(source / folder, staging / folder)
    fileio.mkdir(staging / "journal")
    last = seq
    with FileJournal.open(staging / "journal") as journal:
        for record in through(world.journal.read(0), seq):
            journal.append(record.kind, record.subject, record.body)
            last = record.seq
            if journal.seq_next % _COMMIT_EVERY == 0:
                journal.commit()
        journal.commit()
    write_mode_file(staging, fork_mode(source, last))
    return last


def _copy_tree(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` (a new folder) and make it durable; skip temp folders.
    A file that is not a regular one (a FIFO, a device) or is over ``OBJECT_BYTES_MAX`` is
    ``StoreDamaged`` naming it, never read (``world._fileio.read_regular``)."""
    files: list[Path] = []
    dirs: list[Path] = []
    for root, names, file_names in os.walk(source):
        names[:] = [n for n in names if not n.startswith(".")]
        here = target / Path(root).relative_to(source)
        fileio.mkdir(here, exist_ok=True)
        dirs.append(here)
        for name in file_names:
            data = fileio.read_regular(Path(root) / name, OBJECT_BYTES_MAX)
            if data is None:  # gone since the walk: a temp file of a live put
                continue
            write_unsynced(here / name, data)
            files.append(here / name)
    sync_paths(files, dirs)
