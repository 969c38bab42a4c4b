"""The archive: a second copy of a world's sealed journal, from which ``world journal verify
--repair`` restores a damaged sealed segment instead of cutting every record after it.

Why. One flipped byte in an old sealed segment used to cost everything after it: ``--repair``
could only cut the journal at the damage, acknowledged records included, as there was no other
copy. A sealed segment never changes again and its seal holds the blake3 of its bytes, so a
copy is easy to check: a copy whose blake3 is the seal's is the segment as it was sealed.

Layout. The archive folder mirrors the world's, so that it is itself a world's folder (minus
the segment still being written, and minus derived state)::

    <archive>/archive.json            {"format": 1, "world": {"genesis": "blake3:<hex>",
                                        "receipt_key_id": <hex> | null}}
    <archive>/journal/<seq>.log       every sealed segment, byte for byte
    <archive>/journal/<seq>.log.seal  and its seal
    <archive>/air/sources.json        the world's AIR, as the world stores it
    <archive>/air/manifest.cbor
    <archive>/cas/<2 hex>/<62 hex>    the CAS objects the AIR needs (wasm, manifest, AIR nodes)
    <archive>/keys/receipt.key        the receipt key (0600): receipts cannot be checked without it
    <archive>/verified.json           the stamps of the copies verified (``world.journal._verified``)

What names a world: the blake3 of its record 0 (``world.created``, naming its manifest) and
its receipt key's id (random, made at ``init``). Two worlds made from one manifest share a
genesis record but not a key; a fork shares both, and is told apart segment by segment: a
copy in the archive that agrees with the archive's own seal but not with the world's is
another history (a fork, or this world before a cut) and is never replaced. So ``archive``
refuses (``ArchiveRefused``, nothing copied) an archive of another world, a folder that is
not empty and not an archive, and an archive whose history differs from the world's.

Not archived, by choice: the last segment (still being written: it is archived once it is
sealed), a segment without a seal (a writable open seals it), and the checkpoint. The
checkpoint is derived state (``world.cellstore``): rebuilt from the journal, spread over many
CAS objects that its collector deletes when the next one commits, and always ahead of the
archived journal (it covers the unsealed last segment too), so a restore from the archive
alone would discard it anyway. Restoring state costs a replay, not a loss.

Incremental. A run copies what the archive lacks. A copy already there is kept if its blake3
is its seal's: checked by reading it, or, when its file stamp (size, mtime, ctime, inode) is
the one recorded in ``verified.json`` after it was last verified, without reading
(``full=True`` reads every copy). A copy that is wrong (damaged, truncated, of a seal it does
not match) is replaced. A world segment whose bytes do not have its seal's blake3 is damaged:
it is not archived, and the report names it.

Durable. Every file goes through ``world._fsutil.atomic_write`` (temp file, fsync, rename,
fsync dir), the segment before its seal; so a crash or a power cut leaves a file whole or
absent, and a copy without its seal is taken as it is (its blake3 checked against the world's
seal). The archive's bytes are verified before they are written: the world's segment is read
and its blake3 compared with its seal's, and those very bytes are written.

Concurrency. ``archive_world`` holds the world's shared lock (it is a reader: it works beside a
live writer, whose sealed segments no longer change) and the archive folder's own lock
(``lock_folder``: two archivers never write one archive at once; the second gets
``WorldLocked``). ``remember`` writes ``<world>/archive-to.json`` naming the archive, which
``journal verify --repair`` uses when not given ``--archive``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from air import cbor
from air.errors import HashMismatch, WorldError
from kernel.errors import JournalCorrupt, ObjectMissing
from world import _fileio as fileio
from world._cas import FileCas
from world._directory import load_world_air
from world._fsutil import TMP_SUFFIX, atomic_write, lock_folder, lock_world, mkdir_durable
from world.effects import ReceiptKey
from world.errors import ArchiveRefused, NotAWorld, StorageError, StoreDamaged
from world.journal import (
    FileStamp,
    SealInfo,
    VerifiedEntry,
    digest_bytes,
    list_segments,
    load_verified,
    read_genesis,
    read_seal_info,
    save_verified,
    seal_name,
)

__all__ = [
    "ARCHIVE_MANIFEST",
    "REMEMBERED",
    "ArchiveReport",
    "archive_world",
    "archived_segment",
    "remembered_archive",
]

ARCHIVE_MANIFEST: Final = "archive.json"
REMEMBERED: Final = "archive-to.json"
"""In the world folder: the archive ``run``/``serve``/``archive`` last wrote to."""
_FORMAT: Final = 1
_SMALL_FILE_BYTES_MAX: Final = 256 << 20  # AIR files, a key, a manifest
_WORLD_FILES: Final = ("air/sources.json", "air/manifest.cbor", "keys/receipt.key")


@dataclass
class ArchiveReport:
    """What one archive run did. ``copied``/``replaced``/``skipped`` are paths relative to the
    archive; ``damaged`` names world files whose bytes did not match their seal or address
    (not archived: run ``world journal verify --repair``)."""

    archive: str
    world: str
    copied: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.damaged

    def describe(self) -> str:
        parts = [
            f"archived {self.world} to {self.archive}: {len(self.copied)} file(s) copied, "
            f"{len(self.replaced)} bad copy(ies) replaced, {len(self.skipped)} already there"
        ]
        parts += [f"copied {name}" for name in self.copied]
        parts += [f"replaced {name} (the archive's copy was wrong)" for name in self.replaced]
        parts += [f"damaged in the world, not archived: {name}" for name in self.damaged]
        return "\n".join(parts)

    def as_json(self) -> dict[str, Any]:
        """``{ok, archive, world, copied, replaced, skipped, damaged}`` (lists of paths)."""
        return {
            "ok": self.ok,
            "archive": self.archive,
            "world": self.world,
            "copied": self.copied,
            "replaced": self.replaced,
            "skipped": self.skipped,
            "damaged": self.damaged,
        }


# --- the world's identity ------------------------------------------------------------------


def _identity(world: Path) -> dict[str, Any]:
    """``{"genesis": "blake3:<hex>", "receipt_key_id": hex | null}`` of the world."""
    genesis = read_genesis(world / "journal")
    if genesis is None:
        raise NotAWorld(str(world))
    key = ReceiptKey.load(world)
    return {
        "genesis": cbor.content_hash(cbor.dumps(genesis.as_map())),
        "receipt_key_id": None if key is None else key.key_id.hex(),
    }


def _foreign(archive: Path, mine: dict[str, Any]) -> str | None:
    """Why the archive at ``archive`` is not the world's (None: it is, or it is new)."""
    try:
        data = fileio.read_regular(archive / ARCHIVE_MANIFEST, _SMALL_FILE_BYTES_MAX)
    except WorldError as exc:
        return f"its {ARCHIVE_MANIFEST} cannot be read: {exc}"
    if data is None:
        if any(not _is_temp(entry.name) for entry in archive.iterdir()):
            return f"the folder is not empty and holds no {ARCHIVE_MANIFEST}: not an archive"
        return None
    try:
        theirs = json.loads(data)["world"]
        genesis, key_id = theirs["genesis"], theirs["receipt_key_id"]
    except (ValueError, KeyError, TypeError):
        return f"its {ARCHIVE_MANIFEST} is damaged"
    if genesis != mine["genesis"]:
        return f"it holds the world whose genesis record is {genesis}, not {mine['genesis']}"
    if key_id is not None and mine["receipt_key_id"] not in (None, key_id):
        return f"it holds the world whose receipt key is {key_id}, not {mine['receipt_key_id']}"
    return None


def _is_temp(name: str) -> bool:
    """A temp file ``atomic_write`` left behind (a crash between its write and its rename)."""
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


def _remove_temps(archive: Path) -> None:
    """Remove what crashed runs left half-written: garbage, never a file the archive holds."""
    for folder, _dirs, files in os.walk(archive):
        for name in files:
            if _is_temp(name):
                fileio.unlink(Path(folder) / name, missing_ok=True)


# --- one sealed segment ------------------------------------------------------------------


def _read(path: Path, bytes_max: int = _SMALL_FILE_BYTES_MAX) -> bytes | None:
    """The file's bytes; None if missing, not readable as a regular file, or larger than
    ``bytes_max`` (for a segment: the size its seal names, so a copy too long is wrong)."""
    try:
        return fileio.read_regular(path, bytes_max)
    except WorldError:
        return None


def _copy_good(target: Path, info: SealInfo, cache: dict[str, VerifiedEntry], full: bool) -> bool:
    """Whether the archive's copy at ``target`` is the segment ``info`` describes."""
    stamp = FileStamp.of(target)
    if stamp is None or stamp.size != info.size_bytes:
        return False
    if not full and cache.get(info.name) == VerifiedEntry(info.blake3, stamp):
        return True
    data = _read(target, info.size_bytes)
    good = data is not None and digest_bytes(data) == info.blake3
    if good:
        cache[info.name] = VerifiedEntry(info.blake3, stamp)
    return good


def _other_history(archive_journal: Path, info: SealInfo) -> bool:
    """Whether the archive holds, under ``info.name``, a whole sealed segment other than the
    world's: its copy agrees with the archive's own seal, whose digest is not the world's."""
    theirs = read_seal_info(archive_journal, info.name)
    if theirs is None or theirs.blake3 == info.blake3:
        return False
    data = _read(archive_journal / info.name, theirs.size_bytes)
    return data is not None and digest_bytes(data) == theirs.blake3


def _plan(
    world_journal: Path, archive_journal: Path, cache: dict[str, VerifiedEntry], full: bool
) -> list[tuple[SealInfo, bool, bool]]:
    """``(seal info, copy good, copy present)`` of each sealed segment of the world (all but
    the last, each with a seal that decodes). Raises ``ArchiveRefused`` if the archive holds
    another history under one of their names, before anything is written."""
    plan = []
    for _, name in list_segments(world_journal)[:-1]:
        info = read_seal_info(world_journal, name)
        if info is None:
            continue  # not sealed yet: a writable open seals it, and the next run archives it
        good = _copy_good(archive_journal / name, info, cache, full)
        present = (archive_journal / name).exists()
        if not good and present and _other_history(archive_journal, info):
            raise ArchiveRefused(
                str(archive_journal.parent),
                f"its {name} holds other records than this world's (another world's or a "
                "fork's history, or records this world cut): it is kept, nothing is copied",
            )
        plan.append((info, good, present))
    return plan


def _archive_segments(world: Path, archive: Path, report: ArchiveReport, full: bool) -> None:
    world_journal, archive_journal = world / "journal", archive / "journal"
    mkdir_durable(archive_journal)
    cache_path = archive / "verified.json"
    cache = load_verified(cache_path, "archive")
    for info, good, present in _plan(world_journal, archive_journal, cache, full):
        name, seal = info.name, seal_name(info.name)
        seal_bytes = _read(world_journal / seal)
        if seal_bytes is None:  # removed since the plan read it (a repair): next run
            continue
        if good:
            report.skipped.append(f"journal/{name}")
        else:
            data = _read(world_journal / name, info.size_bytes)
            if data is None or len(data) != info.size_bytes or digest_bytes(data) != info.blake3:
                report.damaged.append(f"journal/{name}")
                continue
            atomic_write(archive_journal / name, data)
            stamp = FileStamp.of(archive_journal / name)
            if stamp is not None:
                cache[name] = VerifiedEntry(info.blake3, stamp)
            (report.replaced if present else report.copied).append(f"journal/{name}")
        _copy_file(seal_bytes, archive_journal / seal, f"journal/{seal}", report)
    save_verified(cache_path, "archive", cache)


def _copy_file(data: bytes, target: Path, shown: str, report: ArchiveReport) -> None:
    """Write ``data`` at ``target`` unless it holds exactly that already."""
    there = _read(target)
    if there == data:
        report.skipped.append(shown)
        return
    mkdir_durable(target.parent)
    atomic_write(target, data)
    (report.copied if there is None else report.replaced).append(shown)


# --- the world's own files ---------------------------------------------------------------


def _archive_world_files(world: Path, archive: Path, report: ArchiveReport) -> None:
    """The AIR files, the receipt key and the CAS objects the AIR needs, each verified."""
    for name in _WORLD_FILES:
        data = _read(world / name)
        if data is not None:
            _copy_file(data, archive / name, name, report)
    try:
        air = load_world_air(world)
    except (WorldError, OSError):
        report.damaged.append("air/ (the world's AIR does not load: run `world journal verify`)")
        return
    needed = {cbor.content_hash(air.manifest_cbor)}
    needed |= {cbor.content_hash(data) for data in air.def_cbor.values()}
    needed |= {cbor.content_hash(data) for data in air.wasm_bytes.values()}
    mine, theirs = FileCas(world, readonly=True), FileCas(archive, readonly=True)
    for address in sorted(needed):
        shown = os.path.relpath(theirs.path_of(address), archive)
        if _object_good(theirs, address):
            report.skipped.append(shown)
            continue
        present = theirs.path_of(address).exists()
        try:
            data = mine.get(address)  # verified against its address
        except (ObjectMissing, HashMismatch, StoreDamaged, StorageError):
            report.damaged.append(os.path.relpath(mine.path_of(address), world))
            continue
        mkdir_durable(theirs.path_of(address).parent)
        atomic_write(theirs.path_of(address), data)
        (report.replaced if present else report.copied).append(shown)


def _object_good(cas: FileCas, address: str) -> bool:
    try:
        cas.get(address)
    except (ObjectMissing, HashMismatch, StoreDamaged, StorageError):
        return False
    return True


# --- the entry points --------------------------------------------------------------------


def archive_world(
    world: Path, archive: Path, *, full: bool = False, remember: bool = True
) -> ArchiveReport:
    """Copy what the world at ``world`` needs restoring into ``archive`` (the module docstring
    says what, and how each copy is verified); return what was copied, replaced, skipped.
    ``full``: read every copy already there, whatever its stamp. ``remember``: note the archive
    in the world (``remembered_archive``). Raises ``ArchiveRefused`` for another world's archive."""
    world, archive = Path(world).resolve(), Path(archive).resolve()
    if not (world / "journal").is_dir():
        raise NotAWorld(str(world))
    if archive == world or archive.is_relative_to(world) or world.is_relative_to(archive):
        raise ArchiveRefused(str(archive), "an archive and its world may not hold one another")
    report = ArchiveReport(str(archive), str(world))
    with lock_world(world, "read"):
        mine = _identity(world)
        mkdir_durable(archive)
        with lock_folder(archive):
            reason = _foreign(archive, mine)
            if reason is not None:
                raise ArchiveRefused(str(archive), reason)
            _remove_temps(archive)
            manifest = json.dumps({"format": _FORMAT, "world": mine}, indent=1).encode()
            if _read(archive / ARCHIVE_MANIFEST) != manifest:
                atomic_write(archive / ARCHIVE_MANIFEST, manifest)
            _archive_segments(world, archive, report, full)
            _archive_world_files(world, archive, report)
        if remember and remembered_archive(world) != archive:
            doc = {"format": _FORMAT, "archive": str(archive)}
            atomic_write(world / REMEMBERED, json.dumps(doc).encode())
    return report


def remembered_archive(world: Path) -> Path | None:
    """The archive last written for the world at ``world`` (None: none, or unreadable)."""
    data = _read(Path(world) / REMEMBERED)
    try:
        found = json.loads(data)["archive"] if data is not None else None
    except (ValueError, KeyError, TypeError):
        return None
    return Path(found) if isinstance(found, str) else None


def archived_segment(
    world: Path, archive: Path, name: str
) -> tuple[SealInfo, bytes, bytes | None] | str:
    """A copy in ``archive`` of the world's sealed segment ``name`` that can replace it:
    ``(what its seal says, its bytes, the archive's seal to put back or None)``; or why there
    is none. The copy's blake3 must be the world's seal's, or, if the world's seal is missing
    or damaged, the archive's seal's (the archive being this world's).

    The world's own seal vouches for a copy by itself: whatever archive holds bytes of that
    blake3 holds the segment as it was sealed. So the archive's identity is asked only when
    the archive's seal must be trusted instead; this is what lets the genesis segment be
    restored, whose damage leaves the world's identity (its record 0) unreadable."""
    world_journal, archive_journal = Path(world) / "journal", Path(archive) / "journal"
    if not archive_journal.is_dir():
        return f"no archive at {archive}"
    info, seal = read_seal_info(world_journal, name), None
    if info is None:
        reason = _not_mine(Path(world), Path(archive))
        if reason is not None:
            return reason
        info = read_seal_info(archive_journal, name)
        seal = _read(archive_journal / seal_name(name))
        if info is None or seal is None:
            return f"{name} has no seal, in the world or the archive, to check a copy against"
    data = _read(archive_journal / name, info.size_bytes)
    if data is None:
        return f"the archive has no copy of {name}"
    if len(data) != info.size_bytes or digest_bytes(data) != info.blake3:
        return f"the archive's copy of {name} does not have its seal's blake3"
    return info, data, seal


def _not_mine(world: Path, archive: Path) -> str | None:
    """Why ``archive`` cannot vouch for a copy of this world's segments (None: it can)."""
    try:
        reason = _foreign(archive, _identity(world))
    except (WorldError, JournalCorrupt) as exc:
        reason = f"the world's identity cannot be read: {exc}"
    return None if reason is None else f"the archive {archive} cannot be used: {reason}"
