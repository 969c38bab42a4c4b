"""The one durable write of ``world serve --http``: the generated ``<world>/http.token``
(``world.serve._http.server_token``), in the crash matrix. At every durable operation it makes,
an ``EIO`` or an ``ENOSPC`` fails the start with a ``StorageError`` naming the file, and leaves
no temp file and no token, or (a failure after the rename: the folder's fsync) the whole token; a power cut leaves no token or the whole token, never a
part of one; a kill (a process that dies at any point) is a power cut that loses nothing the
kernel had, so it leaves no more than the cut does. Either way the next start serves, with a
token that reads whole, at mode 0600."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from powerloss import count_operations, run_with_cut

from world import _fileio as fileio
from world._fsutil import TMP_SUFFIX
from world.errors import StorageError
from world.serve import TOKEN_FILE, server_token


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_TOKEN", raising=False)


def _generate(folder: Path) -> None:
    server_token(folder, None)


def _operations(tmp_path: Path) -> list[str]:
    folder = tmp_path / "count"
    folder.mkdir()
    return count_operations(folder, lambda: _generate(folder))


def _served_after(folder: Path) -> str:
    """What the next start does: it reads the token there, or generates one; 0600 either way."""
    token, where = server_token(folder, None)
    path = folder / TOKEN_FILE
    assert where == str(path)
    assert path.read_text() == token + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return token


def test_the_token_is_generated_once_durably_and_kept(tmp_path: Path) -> None:
    kinds = _operations(tmp_path)
    assert "fsync" in kinds  # the file's bytes, then its name (the folder's fsync)
    assert kinds.count("fsync_dir") + kinds.count("fsync") >= 2
    first = _served_after(tmp_path)
    assert _served_after(tmp_path) == first


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_a_failing_disk_at_every_operation_leaves_no_token_or_a_whole_one(
    tmp_path: Path, code: int
) -> None:
    total = len(_operations(tmp_path))
    for at in range(total):
        folder = tmp_path / f"{code}-{at}"
        folder.mkdir()
        seen = 0

        def hook(_op: str, _path: str, at: int = at) -> None:
            nonlocal seen
            seen += 1
            if seen - 1 == at:
                raise OSError(code, os.strerror(code))

        with fileio.fault_hook(hook), pytest.raises(StorageError) as failed:
            _generate(folder)  # the start fails, naming the operation and the file
        assert failed.value.errno_name == errno.errorcode[code]
        assert failed.value.path.startswith(str(folder))  # the temp, the token or its folder
        left = sorted(p.name for p in folder.iterdir())
        assert left in ([], [TOKEN_FILE]), (at, left)  # no temp file left behind
        if left:
            assert len((folder / TOKEN_FILE).read_text().strip()) >= 32
        _served_after(folder)


@pytest.mark.parametrize("seed", [None, 0, 1, 2, 3])
def test_a_power_cut_at_every_operation_leaves_no_token_or_a_whole_one(
    tmp_path: Path, seed: int | None
) -> None:
    total = len(_operations(tmp_path))
    for at in range(total):
        folder = tmp_path / f"{seed}-{at}"
        folder.mkdir()
        image = run_with_cut(folder, lambda f=folder: _generate(f), at, seed)
        token = image / TOKEN_FILE
        names = [p.name for p in image.iterdir() if not p.name.endswith(TMP_SUFFIX)]
        assert names in ([], [TOKEN_FILE]), (at, names)
        if token.exists():  # its bytes were synced before its name was given
            text = token.read_text()
            assert text.endswith("\n"), (at, text)
            assert len(text.strip()) >= 32, (at, text)
        for stray in image.iterdir():  # what a cut may leave: the temp, which a start ignores
            if stray.name != TOKEN_FILE:
                stray.unlink()
        _served_after(image)
