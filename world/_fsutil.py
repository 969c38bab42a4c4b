"""File-system primitives for the world directory: atomic writes, batched durability, the lock.

* ``atomic_write`` is the litestream idiom: write a temp file in the target's file system, fsync
  it, rename it over the target, fsync the directory. A reader sees the old bytes or the new
  bytes, never a mix, and once it returns the new bytes survive power loss.
* ``write_unsynced`` + ``sync_paths`` are for bulk writes of files that nothing references yet
  (immutable, content-named cell and shard files): write them all, then make them durable in one
  go before the commit record that references them is written. ``sync_paths`` fsyncs each file
  and directory when there are few, and calls ``os.sync()`` once when there are many: measured on
  ext4 here, one fsync costs 70-200 µs, so 50,000 files take 3-7 s one by one (3.4 s even from 32
  threads) against 0.05-0.35 s for one ``sync()``. The price of ``sync()`` is that it also
  flushes other processes' dirty pages; ``syncfs(2)`` would scope it to one file system but is
  not in ``os`` and was not worth a ctypes binding yet. ``write_many_unsynced`` writes a big
  batch from ``WRITER_THREADS`` threads: creating a file costs 0.3-1 ms of kernel CPU here
  (ext4; not I/O wait: CPU time equals wall time), which the threads spread over the cores
  (2,000 files of 100 KB: 1.5-1.9 s from one thread, 0.83-0.91 s from two, 0.85-0.93 from four).
* ``lock_world`` takes OS locks (``flock``) on directories, never on a lock file that a
  ``rm`` could take away from under a running writer. Three modes, as SQLite's readers and
  writer in WAL mode:

      mode        <world>/ (the directory)     <world>/journal/
      read        shared                       -
      write       shared                       exclusive   (one writer at a time)
      exclusive   exclusive                    exclusive   (repair, rewrites: no one else)

  Readers never block the writer and are never blocked by it; a second writer, or anyone while
  a repair runs, gets ``WorldLocked(path, mode)`` at once (non-blocking). Each ``lock_world``
  opens its own descriptors, so two handles in one process exclude each other like two
  processes. The locks die with the process, so a crash never leaves a stale lock, and a
  directory cannot be deleted while the world is in it. A ``LOCK`` file left by older versions
  is ignored.

  A lock is on a directory's inode, not on its name: if ``journal/`` is moved aside and a copy
  put in its place while a writer runs, a second writer can lock the copy. So a writer checks,
  before each write, that the names still lead to the inodes it locked (``WorldLock.check``:
  one ``stat`` per name, about a microsecond) and stops with ``JournalReplaced`` if not: of
  the two, the one that finds its directory replaced is the one that writes no more.

Not here: what the files mean. Callers decide which writes need which guarantee.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final, Literal, TypeAlias, TypeVar

from world import _fileio as fileio
from world._fileio import StrPath
from world.errors import JournalReplaced, WorldLocked

__all__ = [
    "SYNC_EACH_MAX",
    "WRITER_THREADS",
    "LockMode",
    "StrPath",
    "WorldLock",
    "atomic_write",
    "in_threads",
    "lock_folder",
    "lock_world",
    "mkdir_durable",
    "sync_paths",
    "sync_tree",
    "write_many_unsynced",
    "write_unsynced",
]

_T = TypeVar("_T")

# Above this many files, one os.sync() is cheaper than an fsync per file and directory.
SYNC_EACH_MAX: Final = 32
# Threads that write a batch of more than SYNC_EACH_MAX files (the module docstring says why).
WRITER_THREADS: Final = 2
TMP_SUFFIX: Final = ".tmp"


def atomic_write(path: StrPath, data: bytes, *, tmp_dir: StrPath | None = None) -> None:
    """Replace ``path`` with ``data`` atomically and durably (temp, fsync, rename, fsync dir).

    ``tmp_dir`` (same file system) holds the temp file; by default the target's directory. On
    any failure the temp file is removed and the old content of ``path`` is untouched.
    """
    parent, name = os.path.split(os.fspath(path))
    parent = parent or "."
    fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=TMP_SUFFIX, dir=tmp_dir or parent)
    try:
        try:
            fileio.write(fd, data, tmp_name)
            fileio.fsync(fd, tmp_name)
        finally:
            os.close(fd)
        fileio.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    fileio.fsync_dir(parent)


def mkdir_durable(path: StrPath) -> None:
    """Create the folder ``path`` and its missing parents (``0700``) and make every new name
    durable (each new folder's parent fsynced): a folder that exists when this returns exists
    after a power loss too. Nothing is synced when nothing was created."""
    missing: list[str] = []
    here = os.path.abspath(os.fspath(path))
    while not os.path.isdir(here):
        missing.append(here)
        here = os.path.dirname(here)
    for folder in reversed(missing):
        fileio.mkdir(folder, exist_ok=True)
    for parent in dict.fromkeys(os.path.dirname(folder) for folder in missing):
        fileio.fsync_dir(parent)


def sync_tree(root: StrPath) -> None:
    """Make every directory entry under ``root`` durable: each folder fsynced, deepest first.

    For a tree built aside and about to be renamed into place: the rename (with its parent's
    fsync) makes only the top folder's name durable, not the entries inside it, and a folder's
    entries are durable only once that folder itself is fsynced (POSIX; the power-loss tests
    hold the code to it). Files' bytes are the writer's to sync."""
    folders = [path for path, _names, _files in os.walk(root)]
    for path in reversed(folders):
        fileio.fsync_dir(path)


def write_unsynced(path: StrPath, data: bytes) -> None:
    """Create or truncate ``path`` and write ``data``, without fsync (see ``sync_paths``)."""
    fd = fileio.create(path)
    try:
        fileio.write(fd, data, path)
    finally:
        os.close(fd)


def in_threads(work: Callable[[_T], None], paths: Sequence[_T]) -> None:
    """``work(path)`` for each path: in order, or from ``WRITER_THREADS`` threads when there
    are more than ``SYNC_EACH_MAX``. After the first exception (any ``BaseException``, as a
    fault hook's simulated crash) no call starts; it is raised once the running ones end (at
    most one per other thread), so which of the others ran is unknown, as after a crash."""
    if len(paths) <= SYNC_EACH_MAX:
        for path in paths:
            work(path)
        return
    failed = threading.Event()

    def guarded(path: _T) -> None:
        if failed.is_set():
            return
        try:
            work(path)
        except BaseException:
            failed.set()
            raise

    with ThreadPoolExecutor(WRITER_THREADS, thread_name_prefix="world-writer") as pool:
        futures = [pool.submit(guarded, path) for path in paths]
        for future in futures:
            future.result()


def write_many_unsynced(files: Iterable[tuple[StrPath, bytes]]) -> list[StrPath]:
    """``write_unsynced`` for each (path, data), from threads for a big batch (``in_threads``);
    returns the paths. The parents must exist."""
    contents = dict(files)
    in_threads(lambda path: write_unsynced(path, contents[path]), list(contents))
    return list(contents)


def sync_paths(
    files: Collection[StrPath], dirs: Collection[StrPath], *, force: bool = False
) -> None:
    """Make ``files`` and the entries of ``dirs`` durable: one by one if few, else ``sync()``.

    ``force`` always calls ``sync()``: for callers that changed more than they tracked.
    """
    if force or len(files) + len(dirs) > SYNC_EACH_MAX:
        fileio.sync()
        return
    for path in files:
        fileio.fsync_file(path)
    for path in dirs:
        fileio.fsync_dir(path)


LockMode: TypeAlias = Literal["read", "write", "exclusive"]


class WorldLock:
    """A hold on a world directory; released by ``release`` or process exit."""

    def __init__(self, path: Path, mode: LockMode, fds: list[int]) -> None:
        self.path = path
        self.mode = mode
        self._fds = fds

    def check(self) -> None:
        """Raise ``JournalReplaced`` if the world directory or (for ``write`` and ``exclusive``)
        its ``journal/`` is no longer the directory this hold locked: moved, deleted, or
        replaced by a copy (see the module docstring)."""
        names = [self.path, self.path / "journal"][: len(self._fds)]
        for name, fd in zip(names, self._fds, strict=True):
            held = os.fstat(fd)
            try:
                now = os.stat(name)
            except OSError:
                raise JournalReplaced(str(name), "it is gone") from None
            if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                raise JournalReplaced(str(name), "another directory now has its name")

    def release(self) -> None:
        for fd in self._fds:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._fds = []

    def __enter__(self) -> WorldLock:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


def _flock_dir(path: Path, operation: int, mode: LockMode, fds: list[int]) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if isinstance(exc, BlockingIOError):
            raise WorldLocked(str(path), mode) from exc
        raise
    fds.append(fd)


def lock_folder(path: StrPath) -> WorldLock:
    """Hold the folder ``path`` alone: an exclusive ``flock`` on it, non-blocking
    (``WorldLocked`` if someone holds it). For a folder being built aside (a fork's staging
    folder), so that whoever removes the leftovers of killed builds can tell them from a live
    one: the hold dies with its process."""
    folder = Path(path)
    fds: list[int] = []
    _flock_dir(folder, fcntl.LOCK_EX, "exclusive", fds)
    return WorldLock(folder, "exclusive", fds)


def lock_world(world_dir: StrPath, mode: LockMode = "write") -> WorldLock:
    """Hold ``world_dir`` in ``mode`` (see the module docstring); raise ``WorldLocked`` if that
    conflicts with a holder. ``write`` and ``exclusive`` need ``<world_dir>/journal/``."""
    path = Path(world_dir).resolve()
    fds: list[int] = []
    try:
        _flock_dir(path, fcntl.LOCK_EX if mode == "exclusive" else fcntl.LOCK_SH, mode, fds)
        if mode != "read":
            _flock_dir(path / "journal", fcntl.LOCK_EX, mode, fds)
    except BaseException:
        WorldLock(path, mode, fds).release()
        raise
    return WorldLock(path, mode, fds)
