"""The injectable file layer: every durable operation of ``world/`` goes through these functions.

Why a layer: SQLite proves its recovery by failing every I/O call in turn (its "ioerr" tests).
We do the same. Each function here names one durable operation (``write``, ``fsync``,
``fdatasync``, ``replace``, ``truncate``, ``unlink``, ``mkdir``, ``sync``, ``create``) and calls
the active *fault hook* with that name and the path before doing it. Production has no hook.
A test installs one with ``fault_hook(fn)``: ``fn(op, path)`` may count the operation, raise
``OSError`` (``EIO``, ``ENOSPC``) to simulate a failing disk, or end the process
(``os._exit``) to simulate a crash at exactly that point.

Modes: files are created ``0600`` and directories ``0700`` whatever the umask (a world holds
its owner's data; ``umask 000`` must not make it world-writable).

Every ``OSError`` (from the OS or from the hook) leaves these functions as
``air.errors.StorageError(path, operation, errno_name, detail)``: callers and the CLI handle one
error type with fields, and ``operation`` names the OS operation that failed.

Reads do not go through the hook: a read that fails is reported where it happens, and the
durability argument is about writes. But every file the world reads is opened here
(``open_regular``, ``read_regular``), because a name in a world folder is not always a file: a
FIFO there blocks an ``open`` for reading until some writer comes, and a symlink to
``/dev/zero`` reads forever (``MemoryError``). So a read first ``stat``s the name (following a
symlink) and opens it only if it is a regular file of at most the caller's bound, then opens it
``O_NONBLOCK`` and checks the ``fstat`` of what it opened again (the name may have been swapped
in between); anything else there (a FIFO, a device, a socket, a folder, a file too large) is
the caller's damage error naming the file (``StoreDamaged`` unless it says otherwise). The
writes that open an existing name (``create``, ``open_append``, ``truncate``, ``fsync_file``)
open it ``O_NONBLOCK`` too, so a FIFO there fails (``ENXIO``) instead of blocking.

Not here: what the files mean (callers decide).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from typing import BinaryIO, Final, TypeAlias

from air.errors import WorldError
from world.errors import StorageError, StoreDamaged, storage_error

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "Damaged",
    "FaultHook",
    "StrPath",
    "create",
    "fault_hook",
    "fdatasync",
    "fsync",
    "fsync_dir",
    "fsync_file",
    "mkdir",
    "open_append",
    "open_regular",
    "read_regular",
    "replace",
    "sync",
    "truncate",
    "unlink",
    "write",
]

StrPath: TypeAlias = str | os.PathLike[str]
FaultHook: TypeAlias = Callable[[str, str], None]
Damaged: TypeAlias = Callable[[str, str], WorldError]
"""Makes the error for a name that is not a readable regular file: ``(path, reason)``."""

FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700

_hook: FaultHook | None = None


@contextlib.contextmanager
def fault_hook(hook: FaultHook) -> Iterator[None]:
    """Install ``hook`` for the duration of the block (tests only)."""
    global _hook
    previous, _hook = _hook, hook
    try:
        yield
    finally:
        _hook = previous


def _check(op: str, path: StrPath) -> None:
    if _hook is not None:
        _hook(op, os.fspath(path))


@contextlib.contextmanager
def _op(op: str, path: StrPath) -> Iterator[None]:
    """Run one durable operation: the hook first, then the body; an ``OSError`` from either
    leaves as ``StorageError(path, op, errno name, text)``."""
    try:
        _check(op, path)
        yield
    except OSError as exc:
        raise _failed(exc, op, path) from exc


def _failed(exc: OSError, op: str, path: StrPath) -> StorageError:
    """The ``StorageError`` of operation ``op`` on ``path`` (or the file the OS named)."""
    return storage_error(exc, op, path if exc.filename is None else None)


_sync_data = getattr(os, "fdatasync", os.fsync)


def create(path: StrPath, *, exclusive: bool = False) -> int:
    """Open ``path`` for writing, creating it ``0600`` and truncating it; return the fd."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    if exclusive:
        flags |= os.O_EXCL
    with _op("create", path):
        fd = _open_nonblocking(path, flags, FILE_MODE)
    return fd


def open_append(path: StrPath) -> int:
    """Open an existing file for appending; return the fd."""
    return _open_nonblocking(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)


def _open_nonblocking(path: StrPath, flags: int, mode: int = 0o777) -> int:
    """``os.open`` that cannot block on a FIFO or a device (``O_NONBLOCK``: a FIFO nobody
    reads fails with ``ENXIO``); the fd is made blocking again, so a regular file behaves as
    opened without the flag."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY, mode)
    try:
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write(fd: int, data: bytes, path: StrPath) -> None:
    """Write all of ``data`` to ``fd`` (``path`` names it for the hook and for errors)."""
    view = memoryview(data)
    try:  # a plain try, not _op: this and fdatasync are on the journal's commit path
        _check("write", path)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise _failed(exc, "write", path) from exc


def fsync(fd: int, path: StrPath) -> None:
    with _op("fsync", path):
        os.fsync(fd)


def fdatasync(fd: int, path: StrPath) -> None:
    """``fdatasync`` where the OS has it (it covers the file size), else ``fsync``."""
    try:
        _check("fdatasync", path)
        _sync_data(fd)
    except OSError as exc:
        raise _failed(exc, "fdatasync", path) from exc


def fsync_file(path: StrPath) -> None:
    """Make the bytes of the file at ``path`` durable (one ``fsync`` operation)."""
    with _op("fsync", path):
        fd = _open_nonblocking(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_dir(path: StrPath) -> None:
    """Make the directory entries of ``path`` (creations, renames, unlinks) durable."""
    with _op("fsync_dir", path):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def replace(source: StrPath, target: StrPath) -> None:
    with _op("replace", target):
        os.replace(source, target)


def truncate(path: StrPath, size: int) -> None:
    """Cut ``path`` to ``size`` bytes and make that durable."""
    with _op("truncate", path):
        fd = _open_nonblocking(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)


def unlink(path: StrPath, *, missing_ok: bool = False) -> None:
    with _op("unlink", path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            if not missing_ok:
                raise


def mkdir(path: StrPath, *, parents: bool = False, exist_ok: bool = False) -> None:
    """Create a ``0700`` directory (and its parents, also ``0700``, with ``parents``)."""
    target = os.fspath(path)
    head = os.path.dirname(target)
    if parents and head and not os.path.isdir(head):
        # Not os.makedirs: it creates the intermediate folders with the umask's mode.
        mkdir(head, parents=True, exist_ok=True)
    with _op("mkdir", path):
        try:
            os.mkdir(target, DIR_MODE)
        except FileExistsError:
            if not (exist_ok and os.path.isdir(target)):
                raise


def sync() -> None:
    """``sync()``: flush every file system (cheaper than many fsyncs; see ``world._fsutil``)."""
    with _op("sync", "/"):
        os.sync()


# --- reads ---------------------------------------------------------------------------------


_KINDS: Final = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _unfit(status: os.stat_result, bytes_max: int | None) -> str | None:
    """Why a file of ``status`` may not be read (not regular, or over ``bytes_max``), or None."""
    if not stat.S_ISREG(status.st_mode):
        kind = next((name for test, name in _KINDS if test(status.st_mode)), "something else")
        return f"{kind}, not a regular file"
    if bytes_max is not None and status.st_size > bytes_max:
        return f"{status.st_size} bytes, more than the {bytes_max} such a file may hold"
    return None


def check_regular(path: StrPath, *, damaged: Damaged = StoreDamaged) -> None:
    """Raise ``damaged(path, reason)`` if what is at ``path`` (a symlink followed) is not a
    regular file: a ``stat``, nothing opened, so a FIFO there never blocks. A missing name
    raises ``FileNotFoundError``, other OS failures ``OSError``, as ``os.stat`` does."""
    where = os.fspath(path)
    problem = _unfit(os.stat(where), None)
    if problem is not None:
        raise damaged(where, problem)


def open_regular(
    path: StrPath,
    *,
    bytes_max: int | None = None,
    damaged: Damaged = StoreDamaged,
    buffering: int = -1,
) -> BinaryIO:
    """Open the regular file at ``path`` for reading (a symlink to one is followed); its size
    is at most ``bytes_max`` if given. Anything else at ``path`` raises ``damaged(path,
    reason)`` without being opened for reading (see the module docstring); a missing file and
    other OS failures raise ``OSError`` as ``open`` does. The caller closes the file."""
    where = os.fspath(path)
    problem = _unfit(os.stat(where), bytes_max)
    if problem is None:
        fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            problem = _unfit(os.fstat(fd), bytes_max)  # swapped since the stat?
            if problem is None:
                os.set_blocking(fd, True)
                return os.fdopen(fd, "rb", buffering=buffering)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise damaged(where, problem)


def read_regular(
    path: StrPath, bytes_max: int, *, damaged: Damaged = StoreDamaged, operation: str = "read"
) -> bytes | None:
    """The bytes of the regular file at ``path`` (at most ``bytes_max`` of them), or None if
    there is no file: ``open_regular`` and a read, with any other ``OSError`` as
    ``StorageError(path, operation, ...)``."""
    try:
        with open_regular(path, bytes_max=bytes_max, damaged=damaged) as file:
            data = file.read(bytes_max + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise storage_error(exc, operation, path) from exc
    if len(data) > bytes_max:  # it grew after the fstat
        raise damaged(os.fspath(path), f"more than the {bytes_max} bytes such a file may hold")
    return data
