"""Exporting cells to self-describing files and importing them back (``world cells export``,
``world cells import``; SPEC §7).

One exported cell is one canonical CBOR map (``format`` 2)::

    {format: 2, reducer, module_hash, key, state, state_hash, manifest_hash, journal_seq,
     signer, checksum, signature}

``module_hash``, ``state_hash``, ``manifest_hash`` (the manifest the cell pinned, from its index
entry) and ``checksum`` are raw 32-byte hashes; ``key`` and ``state`` are canonical CBOR bytes
(a non-keyed reducer's state is exported under ``NULL_KEY_CBOR``); ``journal_seq`` is the seq
of the last journal record the exported state reflects. ``checksum`` is blake3 over the
canonical CBOR of the map without it and ``signature``, so one altered byte anywhere, or a
truncated file, is refused before anything else is looked at.

Signed. ``signer`` is the exporting world's public key and ``signature`` its Ed25519
signature (``_signing.ExportKey``) over the canonical CBOR of the map without ``signature``:
every other field, ``checksum`` and ``signer`` included. The reader verifies it against the key
the file names: a file edited and re-checksummed, a signature or signer swapped, cut short or of
the wrong type is ``bad_signature``. A file without ``signature`` (``format`` 1, the format
before signing, still read; or a signature stripped) is unsigned. Whether a verified signer, or
none, is taken is the importer's ``Trust`` (``unsigned``, ``foreign_signer``). A world without a
key file (made before worlds had one) exports ``format`` 1.

A folder export is the seed's tree::

    FOLDER/state/reducers/<module_hash>/cells/<key_hash>.cbor   one file as above per cell
    FOLDER/state/reducers/<module_hash>/index.cbor              {key_hash: {key, last_active, size}}

Import checks, per cell and before journaling anything: the checksum, the state hash, the
signature and then its signer against the trust, the file name against the key (tree), the
index against the files (tree), the module hash against the target world's reducer of that
name, and the key and state against the target's schemas (``kernel._moves.check_cell``). Any
failure is ``CellFileRefused(path, reason)`` and nothing is journaled: one refused file of a
tree refuses the whole tree. Then one ``cell.imported`` record per cell goes through the writer in one commit
and is applied as it is appended, exactly as replay applies it: replay from genesis reproduces
the imported world.

The index is not signed: an import takes nothing from it (``last_active`` and ``size`` are
checked against the files or not used; the cells' keys and states come from the signed files).

Not here: the pinned manifest of an imported cell is the importing world's (the file's
``manifest_hash`` is informative: the cell was made under that manifest elsewhere).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from air import cbor
from air.errors import (
    CborError,
    InvalidArgument,
    KeyMismatch,
    UnknownName,
    ValueMismatch,
    WrongMode,
)
from kernel import check_cell, imported_record
from kernel.cells import NULL_KEY_CBOR, key_hash
from world import _fileio as fileio
from world._fsutil import atomic_write, mkdir_durable
from world._world import World
from world.errors import (
    CellFileRefused,
    OutputExists,
    StorageError,
    WorldStale,
    storage_error,
    storage_errors,
)
from world.moves._signing import (
    PUBLIC_KEY_BYTES,
    SIGNATURE_BYTES,
    ExportKey,
    Trust,
    signature_holds,
    world_signer,
)

__all__ = [
    "CELL_FILE_BYTES_MAX",
    "EXPORT_FORMAT",
    "CellFile",
    "check_export_target",
    "export_all",
    "export_cell",
    "import_path",
    "journal_cells",
    "journal_records",
    "read_cell_file",
    "read_tree",
]

EXPORT_FORMAT: Final = 2
UNSIGNED_FORMAT: Final = 1
"""The format before exports were signed: still read, as ``unsigned``."""
CELL_FILE_BYTES_MAX: Final = 1 << 30
"""The largest exported cell file an import reads (a cell's state and a few hashes)."""
_UNSIGNED_FIELDS: Final = frozenset(
    (
        "format",
        "reducer",
        "module_hash",
        "key",
        "state",
        "state_hash",
        "manifest_hash",
        "journal_seq",
        "checksum",
    )
)
_SIGNED_FIELDS: Final = _UNSIGNED_FIELDS | {"signer"}
"""Format 2's fields, and ``signature``: without it the file is read as unsigned."""
_INDEX_FIELDS: Final = frozenset(("key", "last_active", "size"))


@dataclass(frozen=True)
class CellFile:
    """One exported cell, as read and verified (``last_active`` comes from a tree's index).
    ``signer`` is the public key whose signature was verified; None for an unsigned file."""

    reducer: str
    module_hash: bytes
    key_cbor: bytes
    state_cbor: bytes
    manifest_hash: bytes
    journal_seq: int
    signer: bytes | None = None

    def to_bytes(self, key: ExportKey | None = None) -> bytes:
        """The file, signed with ``key`` (``format`` 2); without one, the unsigned ``format``
        1 (``signer`` is not written: a file names the key that signs it, not one it was read
        with)."""
        fields: dict[str, Any] = {
            "format": UNSIGNED_FORMAT if key is None else EXPORT_FORMAT,
            "reducer": self.reducer,
            "module_hash": self.module_hash,
            "key": self.key_cbor,
            "state": self.state_cbor,
            "state_hash": cbor.digest(self.state_cbor),
            "manifest_hash": self.manifest_hash,
            "journal_seq": self.journal_seq,
        }
        if key is not None:
            fields["signer"] = key.public
        fields["checksum"] = cbor.digest(cbor.dumps(fields))
        if key is None:
            return cbor.dumps(fields)
        return cbor.dumps({**fields, "signature": key.sign(cbor.dumps(fields))})


# --- export ---------------------------------------------------------------------------------


def _cell_files(world: World, reducer: str, key_cbor: bytes | None) -> list[CellFile]:
    """The reducer's cells as export records (all of them when ``key_cbor`` is None)."""
    space = world.kernel.cell_space(reducer)
    keyed = world.air.modules[reducer].key_schema is not None
    journal_seq = world.journal.seq_next - 1
    wanted = None if key_cbor is None else key_hash(key_cbor if keyed else NULL_KEY_CBOR)
    out = []
    for khash, entry in list(world.store.iter_entries(space)):
        if wanted is not None and khash != wanted:
            continue
        found = world.store.get(space, khash)
        if found is None:
            continue
        out.append(
            CellFile(
                reducer,
                _era_module(world, reducer, entry.manifest_hash),
                entry.key_cbor,
                found[1],
                entry.manifest_hash,
                journal_seq,
            )
        )
    return out


def _era_module(world: World, reducer: str, manifest_raw: bytes) -> bytes:
    """The wasm hash (raw) of the module a cell pinned to ``manifest_raw``'s era runs: the
    seed's export tree files a cell under the module of its era (``kernel._eras``)."""
    return bytes.fromhex(world.kernel.module_hash(reducer, manifest_raw))


def check_export_target(out: Path, *, folder: bool, force: bool) -> None:
    """Refuse an export that would write over something: ``OutputExists`` for a file at
    ``out`` (one cell) or a folder that is not empty (``folder``: every cell), unless
    ``force``; ``InvalidArgument`` for a folder where one cell's file goes, or anything but a
    folder where a tree goes (``force`` or not). A symlink is not followed: it is what is
    there."""
    out = Path(out)
    try:
        found = out.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise storage_error(exc, "export", out) from exc
    is_dir = stat.S_ISDIR(found.st_mode)
    if folder and not is_dir:
        raise InvalidArgument("out", str(out), "is not a folder; --all writes a folder")
    if not folder and is_dir:
        raise InvalidArgument("out", str(out), "is a folder; one cell is written to a file")
    if force:
        return
    if not is_dir:
        raise OutputExists(str(out), "file")
    with storage_errors("export", out), os.scandir(out) as entries:
        if next(entries, None) is not None:
            raise OutputExists(str(out), "folder")


def export_cell(
    world: World, reducer: str, key: Any, out: Path, *, force: bool = False
) -> CellFile:
    """Write the cell of ``key`` (sugar JSON) of ``reducer`` to the file ``out``, creating its
    folder if needed (as ``--all`` creates its tree). A file already at ``out`` is replaced
    only with ``force`` (``check_export_target``)."""
    check_export_target(out, folder=False, force=force)
    key_cbor = world.key_cbor(reducer, key)
    cells = _cell_files(world, reducer, key_cbor)
    if not cells:
        raise InvalidArgument("key", key, f"{reducer} has no cell for it")
    key_export = ExportKey.of_world(world.path)
    with storage_errors("export"):
        mkdir_durable(Path(out).parent)
        atomic_write(out, cells[0].to_bytes(key_export))
    return cells[0]


def export_all(world: World, reducer: str, folder: Path, *, force: bool = False) -> int:
    """Write every cell of ``reducer`` as the seed's tree under ``folder``; return the count.
    A folder that is not empty is written into only with ``force`` (``check_export_target``);
    then the cell files of ``reducer``'s tree there that this export did not write are
    removed, so the tree's index and files agree."""
    check_export_target(folder, folder=True, force=force)
    if reducer not in world.air.modules:
        raise UnknownName("reducer", reducer, sorted(world.air.modules))
    entries = dict(world.store.iter_entries(world.kernel.cell_space(reducer)))
    cells = _cell_files(world, reducer, None)
    by_module: dict[str, list[CellFile]] = {world.kernel.module_hash(reducer): []}
    for cell in cells:  # one folder per module: the current one, and older eras' if any
        by_module.setdefault(cell.module_hash.hex(), []).append(cell)
    key_export = ExportKey.of_world(world.path)
    with storage_errors("export"):
        for module_hex, filed in by_module.items():
            base = folder / "state" / "reducers" / module_hex
            mkdir_durable(base / "cells")
            index = {}
            for cell in filed:
                khash = key_hash(cell.key_cbor)
                atomic_write(base / "cells" / f"{khash.hex()}.cbor", cell.to_bytes(key_export))
                entry = entries[khash]
                index[khash] = {
                    "key": cell.key_cbor,
                    "last_active": entry.last_active,
                    "size": entry.size,
                }
            written = {f"{khash.hex()}.cbor" for khash in index}
            for stale in sorted((base / "cells").glob("*.cbor")):
                if stale.name not in written:
                    fileio.unlink(stale, missing_ok=True)
            atomic_write(base / "index.cbor", cbor.dumps(index))
    return len(cells)


# --- reading --------------------------------------------------------------------------------


def _read_bytes(path: Path) -> bytes:
    """An exported file's bytes; ``CellFileRefused`` if it is missing, unreadable, not a
    regular file (a FIFO, a device: never opened for reading) or over ``CELL_FILE_BYTES_MAX``."""
    try:
        data = fileio.read_regular(path, CELL_FILE_BYTES_MAX, damaged=CellFileRefused)
    except StorageError as exc:
        raise CellFileRefused(str(path), f"cannot read: {exc.detail}") from exc
    if data is None:
        raise CellFileRefused(str(path), "cannot read: no such file")
    return data


def read_cell_file(path: Path, data: bytes | None = None) -> CellFile:
    """Decode and verify one exported cell (format, fields, checksum, state hash, and the
    signature against the key the file names: ``bad_signature`` if it does not hold). Whose
    signature it is, and whether that is trusted, is the importer's question (``Trust``)."""
    data = _read_bytes(path) if data is None else data
    where = str(path)
    try:
        obj = cbor.loads(data)
    except CborError as exc:
        raise CellFileRefused(where, f"not canonical CBOR (altered or truncated): {exc}") from exc
    if not isinstance(obj, dict) or "format" not in obj:
        raise CellFileRefused(where, "not an exported cell (wrong fields)")
    expected = {EXPORT_FORMAT: _SIGNED_FIELDS, UNSIGNED_FORMAT: _UNSIGNED_FIELDS}
    fields_of = expected.get(obj["format"]) if type(obj["format"]) is int else None
    if fields_of is None:
        raise CellFileRefused(where, f"export format {obj['format']!r}, not {EXPORT_FORMAT}")
    if obj.keys() - {"signature"} != fields_of:
        raise CellFileRefused(where, "not an exported cell (wrong fields)")
    fields = {k: v for k, v in obj.items() if k not in ("checksum", "signature")}
    if cbor.digest(cbor.dumps(fields)) != obj["checksum"]:
        raise CellFileRefused(where, "checksum mismatch: the file was altered")
    typed = (
        isinstance(obj["reducer"], str)
        and all(isinstance(obj[k], bytes) for k in ("module_hash", "key", "state"))
        and isinstance(obj["manifest_hash"], bytes)
        and type(obj["journal_seq"]) is int
    )
    if not typed:
        raise CellFileRefused(where, "a field has the wrong type")
    if cbor.digest(obj["state"]) != obj["state_hash"]:
        raise CellFileRefused(where, "state hash mismatch: the state was altered")
    return CellFile(
        obj["reducer"],
        obj["module_hash"],
        obj["key"],
        obj["state"],
        obj["manifest_hash"],
        obj["journal_seq"],
        _verified_signer(where, obj),
    )


def _verified_signer(where: str, obj: dict[str, Any]) -> bytes | None:
    """The key whose signature ``obj`` carries, verified; None if it carries none."""
    if "signature" not in obj:
        return None
    signer, signature = obj.get("signer"), obj["signature"]
    named = signer.hex() if isinstance(signer, bytes) else None
    covered = cbor.dumps({k: v for k, v in obj.items() if k != "signature"})
    if not (
        isinstance(signer, bytes)
        and len(signer) == PUBLIC_KEY_BYTES
        and isinstance(signature, bytes)
        and len(signature) == SIGNATURE_BYTES
        and signature_holds(signer, signature, covered)
    ):
        raise CellFileRefused(where, "bad_signature", named)
    return signer


def read_tree(folder: Path) -> list[tuple[Path, CellFile]]:
    """Every cell of an exported tree, each checked against its file name and the index."""
    root = folder / "state" / "reducers"
    if not root.is_dir():
        raise CellFileRefused(str(folder), "not an exported cell tree (no state/reducers)")
    out = []
    for module_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        index_path = module_dir / "index.cbor"
        try:
            index = cbor.loads(_read_bytes(index_path))
        except CborError as exc:
            raise CellFileRefused(str(index_path), f"not canonical CBOR: {exc}") from exc
        if not isinstance(index, dict):
            raise CellFileRefused(str(index_path), "not a map of key hash to cell")
        files = sorted((module_dir / "cells").glob("*.cbor"))
        names = {p.stem for p in files}
        listed = {kh.hex() for kh in index if isinstance(kh, bytes)}
        if names != listed or len(listed) != len(index):
            missing = sorted(listed ^ names)[:1] or ["?"]
            raise CellFileRefused(str(index_path), f"index and cell files differ at {missing[0]}")
        for path in files:
            cell = read_cell_file(path)
            _check_in_tree(path, module_dir.name, cell, index[bytes.fromhex(path.stem)])
            out.append((path, cell))
    return out


def _check_in_tree(path: Path, module_hex: str, cell: CellFile, record: Any) -> None:
    if cell.module_hash.hex() != module_hex:
        raise CellFileRefused(str(path), f"module {cell.module_hash.hex()} in folder {module_hex}")
    if key_hash(cell.key_cbor).hex() != path.stem:
        raise CellFileRefused(str(path), "file name is not the hash of the cell's key")
    if not isinstance(record, dict) or record.keys() != _INDEX_FIELDS:
        raise CellFileRefused(str(path), "index entry has the wrong fields")
    if record["key"] != cell.key_cbor or record["size"] != len(cell.state_cbor):
        raise CellFileRefused(str(path), "index entry does not describe the file")


# --- import ---------------------------------------------------------------------------------


def _target_key(world: World, path: Path, cell: CellFile) -> bytes | None:
    """The key the ``cell.imported`` record carries; refuses a cell that does not fit."""
    module = world.air.modules.get(cell.reducer)
    if module is None:
        raise CellFileRefused(str(path), f"the world has no reducer {cell.reducer}")
    ours = world.kernel.module_hash(cell.reducer)
    if cell.module_hash.hex() != ours:
        raise CellFileRefused(
            str(path), f"module {cell.module_hash.hex()} of {cell.reducer}, the world has {ours}"
        )
    key = None if module.key_schema is None and cell.key_cbor == NULL_KEY_CBOR else cell.key_cbor
    try:
        check_cell(world.air, cell.reducer, key, cell.state_cbor)
    except (CborError, ValueMismatch, KeyMismatch) as exc:
        raise CellFileRefused(str(path), f"does not fit {cell.reducer}'s schemas: {exc}") from exc
    return key


def journal_cells(world: World, cells: Iterable[tuple[str, bytes | None, bytes]]) -> list[int]:
    """Journal and apply one ``cell.imported`` per ``(reducer, key_cbor, state_cbor)``, then
    commit; return the seqs. The cells must have passed ``check_cell`` (apply checks again:
    a failure there leaves the handle stale and nothing committed)."""
    if world.readonly:
        raise WrongMode("import cells", "open read-only")
    if world.stale is not None:
        raise WorldStale(world.stale)
    return journal_records(world, [imported_record(*cell) for cell in cells])


def journal_records(world: World, records: list[tuple[str, str, dict[str, Any]]]) -> list[int]:
    """Append and apply move records (``kernel._moves``) through ``world``'s writer as one
    atomic commit: every record is encoded before any is appended, and a crash or a power cut
    inside the commit leaves none of them (``FileJournal.commit(atomic=True)``). The kernel
    says whether its memory still equals the journal (``Kernel.consistent``: ``ingest_moves``
    brackets itself); this marks the handle stale when it does not."""
    before = world.journal.seq_next
    try:
        seqs = world.kernel.ingest_moves(records)
    except BaseException as exc:
        if world.journal.seq_next != before:  # appended, not all applied: memory is behind
            world.stale = f"an import failed after it was journaled: {type(exc).__name__}"
        raise
    world.commit(atomic=True)
    return seqs


def _check_no_rollback(
    world: World, path: Path, cell: CellFile, key: bytes | None, own: bytes | None
) -> None:
    """Refuse a file that would replace a cell whose state the file does not know: the
    world's cell stepped after the export (``last_active`` later than the file's
    ``journal_seq``, the file being this world's own), or the file comes from another world
    (another signer, or none) and the cell holds a state of its own. A cell the world lacks,
    or whose state is the file's, is taken. ``CellFileRefused`` names both sides."""
    found = world.kernel.cell_of(cell.reducer, key)
    if found is None or found[1] == cell.state_cbor:
        return
    entry = found[0]
    shown = cell.reducer if key is None else f"{cell.reducer} key {cbor.loads(key)!r}"
    if cell.signer is None or cell.signer != own:
        source = "an unsigned file" if cell.signer is None else f"world {cell.signer.hex()[:16]}"
        raise CellFileRefused(
            str(path),
            f"would replace {shown}, which has a state of its own (last active at seq "
            f"{entry.last_active}), with one of another lineage ({source}, exported at seq "
            f"{cell.journal_seq}); --force replaces it",
        )
    if entry.last_active > cell.journal_seq:
        raise CellFileRefused(
            str(path),
            f"would roll {shown} back: the world's state is newer (last active at seq "
            f"{entry.last_active}) than the file's (exported at seq {cell.journal_seq}); "
            "--force replaces it",
        )


def import_path(
    world: World, path: Path, trust: Trust | None = None, *, force: bool = False
) -> int:
    """Import one exported file or a tree into ``world``; return how many cells were imported.
    Everything is verified first, every file's signer included (``Trust``; by default only
    ``world``'s own signature is taken), and, unless ``force``, that no cell is rolled back or
    replaced by another lineage's (``_check_no_rollback``): one refused file refuses the whole
    import. Then all cells are journaled in one commit."""
    trust = Trust() if trust is None else trust
    found = read_tree(path) if path.is_dir() else [(path, read_cell_file(path))]
    own = world_signer(world.path)
    for p, cell in found:
        trust.check(p, cell.signer, own)
    cells = []
    for p, cell in found:
        key = _target_key(world, p, cell)
        if not force:
            _check_no_rollback(world, p, cell, key, own)
        cells.append((cell.reducer, key, cell.state_cbor))
    journal_cells(world, cells)
    return len(cells)
