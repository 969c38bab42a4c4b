"""Simulated power loss: a fake under ``world._fileio`` that records what the code made durable,
and at a chosen operation "cuts the power", leaving on disk only what a crash of the machine
(not just the process) would leave (after SQLite's crash simulation, ``test6.c``).

How. ``PowerLoss(root)`` replaces the ``os`` that ``world._fileio`` calls (and its
``fdatasync``) with a recording proxy, so what is recorded is what the code really asked the
operating system for (a ``truncate`` that forgot its ``fsync`` is seen as such), and wraps
``fileio.write``/``fsync``/``fdatasync`` only to learn which file a descriptor opened outside the
layer names (``tempfile.mkstemp``). Everything still happens for real; beside it, a model of the
tree under ``root`` keeps, per directory, its *live* entries and its *durable* entries (as of its
last ``fsync``), and per file its durable content (as of its last ``fsync``/``fdatasync``).
Semantics are POSIX-strict, per directory: a file's ``fsync`` makes its bytes durable, never its
name; a directory's ``fsync`` makes its entries (creations, renames, unlinks) durable; ``sync()``
makes everything durable. The tree under ``root`` at the start is durable.

The cut. At durable operation number ``cut_at`` (counted from 0: opening a file to create or
truncate it, a write, a sync, a truncate, a rename, an unlink, a mkdir), before doing it, the
fake writes the image of what survives into ``image`` and raises ``PowerCut``; every operation
after that raises ``PowerCut`` too, so nothing the program does next (cleanup, unlocks) can
change what survived. ``seed=None`` drops every change not made durable: the worst case, which
catches every missing ``fsync``. With a seed, each pending directory change survives or not
(a rename whole, never half; drawn from the seed), and every file not synced since its last
change keeps, by ``seed % 4``: its durable bytes, all its new bytes, a prefix of them (its
length drawn), or its new length with the sectors after some sector as they were (zeros where
the file grew: those sectors were never written): each of the four in any four consecutive
seeds. Within one file, bytes persist in order (as ext4's ordered data mode gives): a later page that survived
an earlier lost one is bit rot to the journal, which reports it and ``repair`` cuts it, by
design (``world.journal._frames``, "Opening").

Not modelled: anything written without going through ``world._fileio`` (it is not in the model,
so it does not survive the cut), extended attributes and modes (the image's files are 0600, its
folders 0700), and hard links.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from world import _fileio as fileio

__all__ = ["PowerCut", "PowerLoss", "count_operations", "run_with_cut"]

SECTOR = 512
"""A disk writes a sector whole or not at all."""


class PowerCut(BaseException):
    """The power went at the fake's chosen operation."""


@dataclass(eq=False)
class _Node:
    is_dir: bool
    parent: _Node | None = None
    name: str = ""
    durable: bytes = b""  # a file's bytes as of its last sync
    dirty: bool = False  # changed since
    last_live: bytes | None = None  # its bytes when it lost its last live name
    live: dict[str, _Node] = field(default_factory=dict)  # a directory's entries now
    synced: dict[str, _Node] = field(default_factory=dict)  # as of its last fsync
    pending: list[tuple[int, str, _Node | None]] = field(default_factory=list)


class PowerLoss:
    def __init__(self, root: Path, *, cut_at: int | None = None, seed: int | None = None):
        self.root_path = Path(root).absolute()
        self.cut_at = cut_at
        self.seed = seed
        self.image: Path | None = None
        self.operations = 0
        self.cut = False
        self.kinds: list[str] = []
        self._lock = threading.RLock()
        self._fds: dict[int, _Node] = {}
        self._op_ids = itertools.count()
        self.root = _Node(is_dir=True)
        self._load(self.root, self.root_path)

    # --- the initial, durable tree ---------------------------------------------------------

    def _load(self, node: _Node, path: Path) -> None:
        for child_path in sorted(path.iterdir()):
            if child_path.is_symlink():
                continue
            child = _Node(is_dir=child_path.is_dir(), parent=node, name=child_path.name)
            if child.is_dir:
                self._load(child, child_path)
            elif child_path.is_file():
                child.durable = child_path.read_bytes()
            else:
                continue
            node.live[child.name] = node.synced[child.name] = child

    # --- paths and nodes -------------------------------------------------------------------

    def _path_of(self, node: _Node) -> Path | None:
        parts = []
        while node is not self.root:
            parent = node.parent
            if parent is None or parent.live.get(node.name) is not node:
                return None
            parts.append(node.name)
            node = parent
        return self.root_path.joinpath(*reversed(parts))

    def _split(self, path: Any) -> list[str] | None:
        absolute = Path(os.path.abspath(os.fspath(path)))
        try:
            return list(absolute.relative_to(self.root_path).parts)
        except ValueError:
            return None  # outside the modelled tree

    def _node(self, path: Any) -> _Node | None:
        """The live node at ``path``, adopting what the program made outside the layer (a
        folder from ``tempfile.mkdtemp``): it is new, so its name is not durable."""
        parts = self._split(path)
        if parts is None:
            return None
        node = self.root
        here = self.root_path
        for name in parts:
            here = here / name
            child = node.live.get(name)
            if child is None:
                if not here.exists():
                    return None
                child = _Node(is_dir=here.is_dir(), parent=node, name=name, dirty=True)
                self._link(node, name, child)
            node = child
        return node

    def _link(self, parent: _Node, name: str, node: _Node | None, op: int | None = None) -> int:
        """Change ``parent``'s live entry ``name`` (to ``node``, or remove it) as a pending
        change; returns the change's id (one id for both halves of a rename)."""
        op = next(self._op_ids) if op is None else op
        old = parent.live.get(name)
        if old is not None and old is not node and not old.is_dir:
            path = self._path_of(old)
            if path is not None and path.is_file():
                old.last_live = path.read_bytes()
        if node is None:
            parent.live.pop(name, None)
        else:
            parent.live[name] = node
            node.parent, node.name = parent, name
        parent.pending.append((op, name, node))
        return op

    def _content(self, node: _Node) -> bytes:
        path = self._path_of(node)
        if path is not None and path.is_file():
            return path.read_bytes()
        return node.last_live if node.last_live is not None else node.durable

    def _sync_node(self, node: _Node) -> None:
        if node.is_dir:
            node.synced = dict(node.live)
            node.pending.clear()
        else:
            node.durable = self._content(node)
            node.dirty = False

    def _sync_all(self, node: _Node) -> None:
        self._sync_node(node)
        for child in node.live.values():
            self._sync_all(child)

    # --- the operations --------------------------------------------------------------------

    def _step(self, kind: str) -> None:
        """Count one durable operation; at ``cut_at``, write the image and cut."""
        if self.cut:
            raise PowerCut
        if self.operations == self.cut_at:
            self.cut = True
            self.image = self.root_path.parent / f".{self.root_path.name}.image-{self.cut_at}"
            self._write_image(self.image)
            raise PowerCut
        self.operations += 1
        self.kinds.append(kind)

    def _proxy(self) -> Any:
        real = os
        loss = self

        class FakeOs:
            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

            @staticmethod
            def open(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
                with loss._lock:
                    creating = bool(flags & (os.O_CREAT | os.O_TRUNC))
                    if creating:
                        loss._step("open")
                    existed = os.path.lexists(path)
                    fd = real.open(path, flags, mode, **kw)
                    node = loss._node(path) if existed else None
                    if node is None and not existed:
                        parts = loss._split(path)
                        if parts is not None:
                            parent = loss._node(Path(os.path.abspath(os.fspath(path))).parent)
                            if parent is not None:
                                node = _Node(is_dir=False, dirty=True)
                                loss._link(parent, parts[-1], node)
                    if node is not None:
                        if flags & os.O_TRUNC:
                            node.dirty = True
                        loss._fds[fd] = node
                    return fd

            @staticmethod
            def write(fd: int, data: Any) -> int:
                with loss._lock:
                    loss._step("write")
                    node = loss._fds.get(fd)
                    if node is not None:
                        node.dirty = True
                    return int(real.write(fd, data))

            @staticmethod
            def fsync(fd: int) -> None:
                with loss._lock:
                    loss._step("fsync")
                    real.fsync(fd)
                    node = loss._fds.get(fd)
                    if node is not None:
                        loss._sync_node(node)

            @staticmethod
            def fdatasync(fd: int) -> None:
                FakeOs.fsync(fd)

            @staticmethod
            def ftruncate(fd: int, size: int) -> None:
                with loss._lock:
                    loss._step("ftruncate")
                    real.ftruncate(fd, size)
                    node = loss._fds.get(fd)
                    if node is not None:
                        node.dirty = True

            @staticmethod
            def close(fd: int) -> None:
                with loss._lock:
                    loss._fds.pop(fd, None)
                    real.close(fd)

            @staticmethod
            def replace(source: Any, target: Any) -> None:
                with loss._lock:
                    loss._step("replace")
                    node = loss._node(source)
                    real.replace(source, target)
                    src_parts, dst_parts = loss._split(source), loss._split(target)
                    if node is None or src_parts is None or dst_parts is None:
                        return
                    src_parent = node.parent
                    dst_parent = loss._node(Path(os.path.abspath(os.fspath(target))).parent)
                    if src_parent is None or dst_parent is None:
                        return
                    op = loss._link(src_parent, src_parts[-1], None)
                    loss._link(dst_parent, dst_parts[-1], node, op)

            @staticmethod
            def unlink(path: Any) -> None:
                with loss._lock:
                    loss._step("unlink")
                    node = loss._node(path)
                    real.unlink(path)
                    if node is not None and node.parent is not None:
                        loss._link(node.parent, node.name, None)

            @staticmethod
            def mkdir(path: Any, mode: int = 0o777) -> None:
                with loss._lock:
                    loss._step("mkdir")
                    real.mkdir(path, mode)
                    parts = loss._split(path)
                    parent = loss._node(Path(os.path.abspath(os.fspath(path))).parent)
                    if parts is not None and parent is not None:
                        loss._link(parent, parts[-1], _Node(is_dir=True))

            @staticmethod
            def sync() -> None:
                with loss._lock:
                    loss._step("sync")
                    real.sync()
                    loss._sync_all(loss.root)

        return FakeOs()

    @contextmanager
    def installed(self) -> Iterator[PowerLoss]:
        """Put the fake under ``world._fileio`` for the block."""
        fake = self._proxy()
        saved = {name: getattr(fileio, name) for name in ("os", "_sync_data", "write", "fsync")}
        saved["fdatasync"] = fileio.fdatasync
        real_write, real_fsync, real_fdatasync = fileio.write, fileio.fsync, fileio.fdatasync

        def learn(fd: int, path: Any) -> None:
            # The caller's path names the file now: descriptors are reused, and ones opened or
            # closed outside the layer (tempfile.mkstemp, a plain os.close) are not seen.
            with self._lock:
                node = self._node(path)
                if node is not None:
                    self._fds[fd] = node

        def write(fd: int, data: bytes, path: Any) -> None:
            learn(fd, path)
            real_write(fd, data, path)

        def fsync(fd: int, path: Any) -> None:
            learn(fd, path)
            real_fsync(fd, path)

        def fdatasync(fd: int, path: Any) -> None:
            learn(fd, path)
            real_fdatasync(fd, path)

        fileio.os = fake  # type: ignore[attr-defined]
        fileio._sync_data = fake.fdatasync  # type: ignore[attr-defined]
        fileio.write = write  # type: ignore[assignment]
        fileio.fsync = fsync  # type: ignore[assignment]
        fileio.fdatasync = fdatasync  # type: ignore[assignment]
        try:
            yield self
        finally:
            for name, value in saved.items():
                setattr(fileio, name, value)

    # --- what survives ---------------------------------------------------------------------

    def _write_image(self, target: Path) -> None:
        rng = None if self.seed is None else random.Random(self.seed)
        decided: dict[int, bool] = {}
        target.mkdir(mode=0o700)
        self._write_dir(self.root, target, rng, decided, set())

    def _entries(
        self, node: _Node, rng: random.Random | None, decided: dict[int, bool]
    ) -> dict[str, _Node]:
        entries = dict(node.synced)
        if rng is None:
            return entries
        for op, name, child in node.pending:
            if op not in decided:
                decided[op] = rng.random() < 0.5
            if decided[op]:
                if child is None:
                    entries.pop(name, None)
                else:
                    entries[name] = child
        return entries

    def _bytes(self, node: _Node, rng: random.Random | None) -> bytes:
        if rng is None or not node.dirty:
            return node.durable
        live = self._content(node)
        choice = (self.seed or 0) % 4  # each seed one way to tear: all four in four seeds
        if choice == 0:
            return node.durable
        if choice == 1:
            return live
        common = 0
        for common, (a, b) in enumerate(zip(node.durable, live, strict=False)):  # noqa: B007
            if a != b:
                break
        else:
            common = min(len(node.durable), len(live))
        if choice == 2:
            return live[: rng.randint(common, len(live))]
        # at its new size, its sectors written in order up to one; each sector after it holds
        # what it held (a sector is written whole or not at all, so bytes made durable before
        # stay), and zeros where the file has grown (those sectors were never written)
        written = min(len(live), rng.randint(common // SECTOR, len(live) // SECTOR + 1) * SECTOR)
        before = node.durable[: len(live)].ljust(len(live), b"\0")
        return live[:written] + before[written:]

    def _write_dir(
        self,
        node: _Node,
        target: Path,
        rng: random.Random | None,
        decided: dict[int, bool],
        seen: set[int],
    ) -> None:
        seen.add(id(node))
        for name, child in sorted(self._entries(node, rng, decided).items()):
            if child.is_dir:
                if id(child) in seen:
                    continue
                (target / name).mkdir(mode=0o700)
                self._write_dir(child, target / name, rng, decided, seen)
            else:
                fd = os.open(target / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    os.write(fd, self._bytes(child, rng))
                finally:
                    os.close(fd)


def count_operations(root: Path, scenario: Callable[[], None]) -> list[str]:
    """Run ``scenario`` under the fake without a cut; the kinds of its durable operations."""
    loss = PowerLoss(root)
    with loss.installed():
        scenario()
    return loss.kinds


def run_with_cut(root: Path, scenario: Callable[[], None], cut_at: int, seed: int | None) -> Path:
    """Run ``scenario`` and cut the power at operation ``cut_at``; the image that survived."""
    loss = PowerLoss(root, cut_at=cut_at, seed=seed)
    with loss.installed(), suppress(PowerCut):
        scenario()
    if loss.image is None:
        raise AssertionError(f"the scenario ended before operation {cut_at}")
    return loss.image
