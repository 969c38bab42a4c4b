"""The verify cache: which sealed segments were verified whole, so that a routine
``world journal verify`` reads only the segments that are new (or changed) since.

A sealed segment never changes: the writer only appends to the last segment, and a full one
is sealed with the blake3 of its bytes (``world.journal._seals``). So once ``verify`` has
checked every frame of a sealed segment strictly and compared its bytes with its seal's
digest, checking it again finds the same, unless the file was changed. The cache remembers,
per segment, the seal's digest and the file's *stamp* as it was before that verify read it::

    {"format": 1, "context": <text>, "segments": {<segment name>: {
        "blake3": <64 hex>, "size": n, "mtime_ns": n, "ctime_ns": n, "inode": n, "device": n}}}

A later verify takes a segment from the cache (its seal checked against the file's size,
header and last frame, as opening does: ``trusted_seal``) only if its seal still holds that
digest and the file's stamp is exactly the one recorded; anything else (another size, mtime,
ctime, inode or device: a write, a ``touch``, a copy or a rename over it, a restore from an
archive) makes it read and check the segment again. ``ctime`` is in the stamp because no
user call can set it back: ``os.utime`` restores an mtime but moves the ctime. The stamp is
taken *before* the segment is read, so a change during the verify leaves a stamp that no
longer matches. ``context`` voids the whole cache when it changes (the world's receipt key
id: receipts in cached segments are not checked again). ``--full`` ignores the cache.

What it does not catch: bit rot under an unchanged stamp (the media, not a write, altered the
bytes). That is what ``--full`` (and every read, which checks each frame's CRCs) is for. A
missing, unreadable or damaged cache file is an empty cache: it only costs time.

Writing: the caller's file (``<world>/cache/verified.json``), temp, fsync, rename, fsync dir
(``world._fsutil.atomic_write``). The archive keeps the same kind of file for its copies
(``world._archive``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from air.errors import WorldError
from world import _fileio as fileio
from world._fsutil import atomic_write, mkdir_durable
from world.journal._seals import read_seal_info
from world.journal._segments import list_segments

__all__ = [
    "CACHE_BYTES_MAX",
    "FileStamp",
    "VerifiedEntry",
    "load_verified",
    "save_verified",
    "stamp_sealed",
    "trusted_segments",
]

_FORMAT: Final = 1
CACHE_BYTES_MAX: Final = 16 * 1024 * 1024
"""A cache file larger than this is not read (an empty cache): ~150 bytes per segment."""
_STAMP_FIELDS: Final = ("size", "mtime_ns", "ctime_ns", "inode", "device")


@dataclass(frozen=True, slots=True)
class FileStamp:
    """What ``stat`` says of a file that any change to it moves."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    device: int

    @classmethod
    def of(cls, path: Path) -> FileStamp | None:
        """The stamp of the file at ``path`` now; None if there is none (or it is no file)."""
        try:
            status = os.stat(path)
        except OSError:
            return None
        return cls(
            status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino, status.st_dev
        )

    def as_json(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _STAMP_FIELDS}


@dataclass(frozen=True, slots=True)
class VerifiedEntry:
    """A segment verified whole: its seal's digest, and its file's stamp before it was read."""

    blake3: bytes
    stamp: FileStamp

    def as_json(self) -> dict[str, Any]:
        return {"blake3": self.blake3.hex(), **self.stamp.as_json()}


def _entry(value: Any) -> VerifiedEntry | None:
    if type(value) is not dict or set(value) != {"blake3", *_STAMP_FIELDS}:
        return None
    if any(type(value[name]) is not int for name in _STAMP_FIELDS):
        return None
    try:
        digest = bytes.fromhex(value["blake3"])
    except (TypeError, ValueError):
        return None
    if len(digest) != 32:
        return None
    return VerifiedEntry(digest, FileStamp(*(value[name] for name in _STAMP_FIELDS)))


def load_verified(path: Path, context: str) -> dict[str, VerifiedEntry]:
    """The entries of the cache file at ``path`` if it was written for ``context``; empty if
    there is none or it cannot be read (a cache only saves time)."""
    try:
        data = fileio.read_regular(path, CACHE_BYTES_MAX)
        doc = json.loads(data) if data is not None else None
    except (WorldError, ValueError):
        return {}
    if type(doc) is not dict or doc.get("format") != _FORMAT or doc.get("context") != context:
        return {}
    segments = doc.get("segments")
    if type(segments) is not dict:
        return {}
    found = {name: _entry(value) for name, value in segments.items()}
    return {name: entry for name, entry in found.items() if entry is not None}


def save_verified(path: Path, context: str, entries: dict[str, VerifiedEntry]) -> None:
    """Write the cache file at ``path`` durably (its folder made if missing)."""
    mkdir_durable(path.parent)
    doc = {
        "format": _FORMAT,
        "context": context,
        "segments": {name: entry.as_json() for name, entry in sorted(entries.items())},
    }
    atomic_write(path, json.dumps(doc, indent=1).encode())


def stamp_sealed(directory: Path) -> dict[str, VerifiedEntry]:
    """Each earlier segment in the journal ``directory`` with a seal that decodes: its seal's
    digest and its file's stamp now (take them before verifying)."""
    entries = {}
    for _, name in list_segments(directory)[:-1]:
        info = read_seal_info(directory, name)
        stamp = FileStamp.of(directory / name)
        if info is not None and stamp is not None and stamp.size == info.size_bytes:
            entries[name] = VerifiedEntry(info.blake3, stamp)
    return entries


def trusted_segments(directory: Path, entries: dict[str, VerifiedEntry]) -> frozenset[str]:
    """The earlier segments in ``directory`` whose seal's digest and file stamp are exactly
    what ``entries`` (a loaded cache) recorded."""
    if not entries:
        return frozenset()
    now = stamp_sealed(directory)
    return frozenset(name for name, entry in now.items() if entries.get(name) == entry)
