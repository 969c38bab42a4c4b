"""``world._fileio``: each durable operation, failing, is a ``StorageError`` naming that
operation, the path it was given and the errno; and the flags each one opens with matter.

Written for the mutants of ``_fileio`` that survived the crash and power-loss matrices
(TESTING.md): those matrices check that nothing acknowledged is lost, not which operation an
error names, whether ``unlink`` of a missing file is an error by default, or whether
``create`` is exclusive only when asked.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from world import _fileio as fileio
from world.errors import StorageError, StoreDamaged

EIO = OSError(errno.EIO, "Input/output error")


def _fail(op_wanted: str) -> Callable[[str, str], None]:
    def hook(op: str, _path: str) -> None:
        if op == op_wanted:
            raise EIO

    return hook


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    return path


OPERATIONS: list[tuple[str, Callable[[Path], object]]] = [
    ("create", lambda p: os.close(fileio.create(p / "new"))),
    ("write", lambda p: fileio.write(os.open(_file(p), os.O_WRONLY), b"y", _file(p))),
    ("fsync", lambda p: fileio.fsync(os.open(_file(p), os.O_RDONLY), _file(p))),
    ("fdatasync", lambda p: fileio.fdatasync(os.open(_file(p), os.O_RDONLY), _file(p))),
    ("fsync", lambda p: fileio.fsync_file(_file(p))),
    ("fsync_dir", lambda p: fileio.fsync_dir(p)),
    ("replace", lambda p: fileio.replace(_file(p), p / "g")),
    ("truncate", lambda p: fileio.truncate(_file(p), 0)),
    ("unlink", lambda p: fileio.unlink(_file(p))),
    ("mkdir", lambda p: fileio.mkdir(p / "d")),
    ("sync", lambda _p: fileio.sync()),
]


@pytest.mark.parametrize(
    ("op", "call"), OPERATIONS, ids=[f"{o}-{i}" for i, (o, _) in enumerate(OPERATIONS)]
)
def test_a_failing_operation_names_itself_its_path_and_the_errno(
    op: str, call: Callable[[Path], object], tmp_path: Path
) -> None:
    with fileio.fault_hook(_fail(op)), pytest.raises(StorageError) as caught:
        call(tmp_path)
    error = caught.value
    assert (error.operation, error.errno_name) == (op, "EIO")
    expected = {
        "create": tmp_path / "new",
        "replace": tmp_path / "g",
        "fsync_dir": tmp_path,
        "mkdir": tmp_path / "d",
        "sync": Path("/"),
    }.get(op, tmp_path / "f")
    assert Path(error.path) == expected


def test_an_error_the_os_raises_names_the_file_the_os_named() -> None:
    named = OSError(errno.ENOENT, "No such file or directory", "/the/os/named/this")
    error = fileio._failed(named, "replace", "/what/we/gave")
    assert (error.path, error.operation, error.errno_name) == (
        "/the/os/named/this",
        "replace",
        "ENOENT",
    )
    unnamed = OSError(errno.ENOSPC, "No space left on device")
    error = fileio._failed(unnamed, "write", "/what/we/gave")
    assert (error.path, error.operation, error.errno_name) == ("/what/we/gave", "write", "ENOSPC")


def test_a_real_os_failure_is_a_storage_error_naming_the_operation(tmp_path: Path) -> None:
    with pytest.raises(StorageError) as caught:
        fileio.fsync_dir(_file(tmp_path))  # a file, not a folder: O_DIRECTORY refuses it
    assert (caught.value.operation, caught.value.errno_name) == ("fsync_dir", "ENOTDIR")
    with pytest.raises(StorageError) as caught:
        fileio.unlink(tmp_path / "absent")  # missing is an error unless asked otherwise
    assert (caught.value.operation, caught.value.errno_name) == ("unlink", "ENOENT")
    fileio.unlink(tmp_path / "absent", missing_ok=True)
    with pytest.raises(StorageError) as caught:
        fileio.fsync_file(tmp_path / "absent")
    assert (caught.value.operation, caught.value.errno_name) == ("fsync", "ENOENT")


def test_create_truncates_an_existing_file_unless_exclusive(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old contents")
    os.close(fileio.create(path))  # not exclusive by default: the file is truncated
    assert path.read_bytes() == b""
    with pytest.raises(StorageError) as caught:
        fileio.create(path, exclusive=True)
    assert (caught.value.operation, caught.value.errno_name) == ("create", "EEXIST")
    os.close(fileio.create(tmp_path / "new", exclusive=True))
    assert oct(os.stat(tmp_path / "new").st_mode & 0o777) == oct(fileio.FILE_MODE)


def test_the_hook_sees_every_operation_with_its_path(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []
    with fileio.fault_hook(lambda op, path: seen.append((op, path))):
        fd = fileio.create(tmp_path / "f")
        fileio.write(fd, b"abc", tmp_path / "f")
        fileio.fsync(fd, tmp_path / "f")
        os.close(fd)
        fileio.fsync_dir(tmp_path)
        fileio.unlink(tmp_path / "f")
    assert seen == [
        ("create", str(tmp_path / "f")),
        ("write", str(tmp_path / "f")),
        ("fsync", str(tmp_path / "f")),
        ("fsync_dir", str(tmp_path)),
        ("unlink", str(tmp_path / "f")),
    ]


def test_a_file_opened_for_writing_blocks_as_a_plain_open_would(tmp_path: Path) -> None:
    """Opened with ``O_NONBLOCK`` (a FIFO cannot stall the open), then made blocking again."""
    created = fileio.create(tmp_path / "f")
    try:
        assert os.get_blocking(created)
    finally:
        os.close(created)
    appending = fileio.open_append(tmp_path / "f")
    try:
        assert os.get_blocking(appending)
    finally:
        os.close(appending)


def test_mkdir_makes_parents_only_when_asked_each_0700(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    with pytest.raises(StorageError) as caught:
        fileio.mkdir(deep)
    assert (caught.value.operation, caught.value.errno_name) == ("mkdir", "ENOENT")
    assert not (tmp_path / "a").exists()
    fileio.mkdir(deep, parents=True)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", deep):
        assert folder.stat().st_mode & 0o777 == 0o700, folder


def test_mkdir_of_an_existing_folder_fails_unless_exist_ok(tmp_path: Path) -> None:
    fileio.mkdir(tmp_path / "d")
    with pytest.raises(StorageError) as caught:
        fileio.mkdir(tmp_path / "d")
    assert caught.value.errno_name == "EEXIST"
    fileio.mkdir(tmp_path / "d", exist_ok=True)
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(StorageError):
        fileio.mkdir(tmp_path / "f", exist_ok=True)  # a file there is not a folder


def test_mkdir_takes_a_parent_made_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread can make a parent between ``mkdir``'s look and its own mkdir."""
    parent = tmp_path / "p"
    parent.mkdir()
    isdir, looked = os.path.isdir, []

    def not_there_at_the_first_look(path: str) -> bool:
        if path == os.fspath(parent) and not looked:
            looked.append(path)
            return False
        return isdir(path)

    monkeypatch.setattr(os.path, "isdir", not_there_at_the_first_look)
    fileio.mkdir(parent / "child", parents=True)
    assert looked == [os.fspath(parent)]
    assert (parent / "child").is_dir()


def test_read_regular_refuses_a_file_over_its_bound_naming_both_sizes(tmp_path: Path) -> None:
    path = _file(tmp_path)
    path.write_bytes(b"12345")
    assert fileio.read_regular(path, 5) == b"12345"
    with pytest.raises(StoreDamaged) as caught:
        fileio.read_regular(path, 4)
    assert (caught.value.path, caught.value.reason) == (
        str(path),
        "5 bytes, more than the 4 such a file may hold",
    )
    assert fileio.read_regular(tmp_path / "missing", 4) is None


def test_read_regular_refuses_a_file_that_grew_after_its_size_was_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(tmp_path)
    path.write_bytes(b"12345")
    unbounded = fileio.open_regular
    monkeypatch.setattr(
        fileio,
        "open_regular",
        lambda where, *, bytes_max, damaged: unbounded(where, damaged=damaged),
    )
    with pytest.raises(StoreDamaged) as caught:
        fileio.read_regular(path, 4)
    assert (caught.value.path, caught.value.reason) == (
        str(path),
        "more than the 4 bytes such a file may hold",
    )


@pytest.mark.parametrize("operation", [None, "read checkpoint"])
def test_read_regular_fails_as_a_storage_error_naming_its_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operation: str | None
) -> None:
    def failing(*_args: object, **_kwargs: object) -> None:
        raise EIO

    monkeypatch.setattr(fileio, "open_regular", failing)
    path = tmp_path / "f"
    given = {} if operation is None else {"operation": operation}
    with pytest.raises(StorageError) as caught:
        fileio.read_regular(path, 4, **given)
    assert (caught.value.path, caught.value.operation, caught.value.errno_name) == (
        str(path),
        operation or "read",
        "EIO",
    )


def test_a_file_of_no_kind_known_is_something_else() -> None:
    status = os.stat_result((0,) * 10)  # a mode of no file type
    assert fileio._unfit(status, None) == "something else, not a regular file"


def test_a_file_swapped_for_a_fifo_after_the_look_is_refused_and_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size and kind are checked again on the opened file (``fstat``): what was swapped in
    between the ``stat`` and the ``open`` is refused, and the descriptor does not leak."""
    path = _file(tmp_path)
    fifo = os.stat_result((0o010600, *os.stat(path)[1:]))
    fds = set(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "fstat", lambda _fd: fifo)
    with pytest.raises(StoreDamaged) as caught:
        fileio.open_regular(path)
    monkeypatch.undo()
    assert caught.value.reason == "a FIFO, not a regular file"
    assert set(os.listdir("/proc/self/fd")) == fds
