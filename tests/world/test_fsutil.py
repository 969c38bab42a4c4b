"""Atomic writes, batched durability, and the world lock (checked from another process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from air.errors import WorldError
from world import _fileio as fileio
from world import _fsutil as fsutil
from world._fsutil import atomic_write, lock_world, sync_paths, write_many_unsynced, write_unsynced
from world.errors import StorageError, WorldLocked

ROOT = Path(__file__).resolve().parents[2]

TRY_LOCK = """
import json, sys
from world.errors import WorldLocked
from world._fsutil import lock_world
try:
    lock_world(sys.argv[1], sys.argv[2])
except WorldLocked as exc:
    print(json.dumps({"error": type(exc).__name__, "path": exc.path}))
else:
    print(json.dumps({"error": None}))
"""


def try_lock_in_another_process(world: Path, mode: str = "write") -> dict[str, str | None]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    (world / "journal").mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", TRY_LOCK, str(world), mode],
        capture_output=True,
        check=True,
        env=env,
        timeout=60,
    )
    result: dict[str, str | None] = json.loads(done.stdout)
    return result


def test_atomic_write_replaces_the_content_completely(tmp_path: Path) -> None:
    path = tmp_path / "file.cbor"
    atomic_write(path, b"a much longer first version of the content")
    atomic_write(path, b"short")
    assert path.read_bytes() == b"short"
    assert [p.name for p in tmp_path.iterdir()] == ["file.cbor"]


def test_a_failed_atomic_write_keeps_the_old_content_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "file.cbor"
    atomic_write(path, b"old")

    def failing_fsync(_fd: int) -> None:
        raise OSError(5, "simulated I/O error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StorageError):
        atomic_write(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.cbor"]


def test_atomic_write_accepts_a_bare_file_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    atomic_write("here.bin", b"x")
    assert (tmp_path / "here.bin").read_bytes() == b"x"


def test_sync_paths_fsyncs_a_few_paths_one_by_one_and_syncs_many_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [tmp_path / f"{n}.bin" for n in range(3)]
    for path in paths:
        write_unsynced(path, b"data")
    calls = {"fsync": 0, "sync": 0}
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls["fsync"] += 1
        real_fsync(fd)

    def counting_sync() -> None:
        calls["sync"] += 1

    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(os, "sync", counting_sync)
    sync_paths(paths, [tmp_path])
    assert calls == {"fsync": 4, "sync": 0}
    sync_paths(paths * fsutil.SYNC_EACH_MAX, [tmp_path])
    assert calls == {"fsync": 4, "sync": 1}


@pytest.mark.parametrize("count", [3, fsutil.SYNC_EACH_MAX + 1, 200])
def test_write_many_unsynced_writes_every_file_whole(tmp_path: Path, count: int) -> None:
    """A few files in order, a batch past ``SYNC_EACH_MAX`` from the writer threads."""
    writers: set[str] = set()

    def note_thread(op: str, _path: str) -> None:
        if op == "write":
            writers.add(threading.current_thread().name)

    files = [(tmp_path / f"{n}.bin", bytes([n % 256]) * (n * 97 % 5000)) for n in range(count)]
    with fileio.fault_hook(note_thread):
        written = write_many_unsynced(files)
    assert written == [path for path, _ in files]
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == {
        path.name: data for path, data in files
    }
    threaded = count > fsutil.SYNC_EACH_MAX
    assert (threading.current_thread().name in writers) is not threaded
    assert all(name.startswith("world-writer") for name in writers) is threaded


class Boom(BaseException):
    """Stands for a crash inside one writer thread."""


def test_a_failure_in_a_writer_thread_is_raised_and_stops_the_writes_not_started(
    tmp_path: Path,
) -> None:
    started: list[str] = []
    lock = threading.Lock()

    def fail_the_tenth(op: str, path: str) -> None:
        if op != "create":
            return
        with lock:
            started.append(path)
            if len(started) == 10:
                raise Boom(path)

    files = [(tmp_path / f"{n}.bin", b"x" * 1000) for n in range(500)]
    with pytest.raises(Boom), fileio.fault_hook(fail_the_tenth):
        write_many_unsynced(files)
    # each other writer may finish the file it had begun, and none starts another
    assert 10 <= len(started) <= 10 + fsutil.WRITER_THREADS - 1
    assert len(list(tmp_path.iterdir())) < len(started)


def test_the_lock_refuses_a_second_writer_in_another_process(tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    lock = lock_world(tmp_path)
    try:
        result = try_lock_in_another_process(tmp_path)
    finally:
        lock.release()
    assert result == {"error": "WorldLocked", "path": str((tmp_path / "journal").resolve())}


def test_a_released_lock_can_be_taken_by_another_process(tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    with lock_world(tmp_path):
        assert try_lock_in_another_process(tmp_path)["error"] == "WorldLocked"
    assert try_lock_in_another_process(tmp_path) == {"error": None}


def test_a_second_writer_in_the_same_process_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    with lock_world(tmp_path), pytest.raises(WorldLocked) as caught:
        lock_world(tmp_path)
    assert (caught.value.path, caught.value.mode) == (
        str((tmp_path / "journal").resolve()),
        "write",
    )
    lock_world(tmp_path).release()


def test_readers_and_the_writer_never_block_each_other(tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    with lock_world(tmp_path, "read"), lock_world(tmp_path, "write"):
        assert try_lock_in_another_process(tmp_path, "read") == {"error": None}
        assert try_lock_in_another_process(tmp_path, "write")["error"] == "WorldLocked"


def test_an_exclusive_lock_excludes_readers_and_writers_and_waits_for_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "journal").mkdir()
    with lock_world(tmp_path, "exclusive"):
        assert try_lock_in_another_process(tmp_path, "read")["error"] == "WorldLocked"
        assert try_lock_in_another_process(tmp_path, "write")["error"] == "WorldLocked"
    with lock_world(tmp_path, "read"), pytest.raises(WorldLocked):
        lock_world(tmp_path, "exclusive")


# Which hold a second one meets (in this process: flock holds belong to open files, so the
# matrix is the same across processes): True where both may be held at once, else the path
# the refusal names (the world folder, or its journal) and the mode refused.
LOCK_MATRIX = {
    ("read", "read"): True,
    ("read", "write"): True,
    ("read", "exclusive"): ".",
    ("write", "read"): True,
    ("write", "write"): "journal",
    ("write", "exclusive"): ".",
    ("exclusive", "read"): ".",
    ("exclusive", "write"): ".",
    ("exclusive", "exclusive"): ".",
}


@pytest.mark.parametrize(("held", "asked"), list(LOCK_MATRIX), ids="-then-".join)
def test_each_mode_meets_each_other_as_the_table_says(
    tmp_path: Path, held: fsutil.LockMode, asked: fsutil.LockMode
) -> None:
    (tmp_path / "journal").mkdir()
    expected = LOCK_MATRIX[held, asked]
    with lock_world(tmp_path, held):
        if expected is True:
            lock_world(tmp_path, asked).release()
        else:
            with pytest.raises(WorldLocked) as caught:
                lock_world(tmp_path, asked)
            where = (tmp_path / expected).resolve()
            assert (caught.value.path, caught.value.mode) == (str(where), asked)
    lock_world(tmp_path, asked).release()  # a refused hold left nothing held behind it


def test_deleting_files_in_the_world_cannot_let_a_second_writer_in(tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    (tmp_path / "LOCK").write_text("1\n")  # what older versions locked
    with lock_world(tmp_path):
        (tmp_path / "LOCK").unlink()
        assert try_lock_in_another_process(tmp_path)["error"] == "WorldLocked"


def test_world_locked_is_a_world_error() -> None:
    assert issubclass(WorldLocked, WorldError)
    assert WorldLocked("/w", "read").path == "/w"


# --- a hold notices its directories replaced (the world's JournalReplaced) --------------------


@pytest.mark.parametrize("mode", ["write", "exclusive"])
def test_a_hold_checks_the_world_and_its_journal_and_names_what_changed(
    tmp_path: Path, mode: fsutil.LockMode
) -> None:
    from world.errors import JournalReplaced

    world = tmp_path / "w"
    (world / "journal").mkdir(parents=True)
    with lock_world(world, mode) as lock:
        lock.check()  # nothing moved
        (world / "journal").rename(world / "journal-moved")
        with pytest.raises(JournalReplaced) as gone:
            lock.check()
        assert (gone.value.path, gone.value.how) == (str(world / "journal"), "it is gone")
        (world / "journal").mkdir()  # a copy in its place: another inode
        with pytest.raises(JournalReplaced) as copied:
            lock.check()
        assert (copied.value.path, copied.value.how) == (
            str(world / "journal"),
            "another directory now has its name",
        )


def test_a_read_hold_checks_the_world_folder_alone(tmp_path: Path) -> None:
    from world.errors import JournalReplaced

    world = tmp_path / "w"
    (world / "journal").mkdir(parents=True)
    lock = lock_world(world, "read")
    (world / "journal").rename(world / "elsewhere")
    lock.check()  # a reader holds the world folder only
    world.rename(tmp_path / "moved")
    with pytest.raises(JournalReplaced) as gone:
        lock.check()
    assert (gone.value.path, gone.value.how) == (str(world), "it is gone")
    lock.release()
    lock.release()  # twice is harmless: it holds nothing any more


def test_lock_folder_holds_a_folder_alone_until_released(tmp_path: Path) -> None:
    held = fsutil.lock_folder(tmp_path)
    with pytest.raises(WorldLocked) as taken:
        fsutil.lock_folder(tmp_path)
    assert taken.value.mode == "exclusive"
    held.release()
    fsutil.lock_folder(tmp_path).release()


def test_a_temp_file_is_named_as_leftover_cleanups_and_archives_know_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed write leaves its temp file: ``.<name>.<random>.tmp`` beside the target (or in
    ``tmp_dir``), the shape the cell store's cleanup and ``world archive`` pass over."""
    seen: list[str] = []

    def stop(source: str, _target: object) -> None:
        seen.append(source)
        raise KeyboardInterrupt  # as a kill between the write and the rename

    monkeypatch.setattr(fileio, "replace", stop)
    for where in (None, tmp_path / "scratch"):
        if where is not None:
            where.mkdir()
        with pytest.raises(KeyboardInterrupt):
            atomic_write(tmp_path / "state.cbor", b"new", tmp_dir=where)
    for name, folder in zip(seen, (tmp_path, tmp_path / "scratch"), strict=True):
        path = Path(name)
        assert path.parent == folder
        assert path.name.startswith(".state.cbor.")
        assert path.name.endswith(fsutil.TMP_SUFFIX)
        assert not path.exists()  # removed on the way out
    assert not (tmp_path / "state.cbor").exists()
