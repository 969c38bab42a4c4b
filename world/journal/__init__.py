"""The file journal: the world's source of truth, as segments of checksummed frames under
``<world>/journal/``.

Invariants:
- Append-only, with a global sequence number and no gaps; every record is the canonical CBOR
  of ``kernel.journal``'s record map, in a frame with a CRC of its header and of its payload.
- A commit is one batch: one write and one ``fdatasync`` into one segment (a batch never spans
  two). Under an I/O error it is all or nothing (undone, ``JournalWriteFailed``); after a
  crash every commit that returned is whole, and of the one in flight a prefix of whole records
  survives, or, for an atomic commit (a batch of inputs: ``commit(atomic=True)``), all of it or
  none.
- A torn tail (an incomplete last write) is dropped on open; any other damage is reported with
  its segment, offset and seq (``JournalCorrupt``), never guessed around. ``repair`` cuts only
  after the last good record, backing up what it cuts; a damaged sealed segment can first be
  put back whole (``restore_segment``: a copy, a mend, re-derived records), only when the
  seal's blake3 proves the bytes.
- Opening trusts a full segment's seal only if it agrees with the file; every read checks both
  CRCs and the seq of every frame again.
- A reader (``readonly=True``) writes nothing and sees what a live writer committed
  (``refresh``).

Parts: ``_file`` (``FileJournal``: writing, opening, reading, refreshing; ``verify`` and
``repair``), ``_frames`` (the frame format, the scan of one segment's bytes, the torn-tail rule:
pure), ``_segments`` (the segment files: listing, opening, reading with every check, temp files,
syncs), ``_seals`` (the seal of a full segment), ``_commit`` (a commit's files and its undo;
preparing the directory), ``_batch`` (the marker that makes a batch all or nothing), ``_repair``
(the reports, the cut, ``salvage``), ``_mend`` (a damaged sealed segment put back as it was
sealed: from a copy, by its seal, or re-framed from re-derived records), ``_verified`` (the
verify cache: sealed segments verified before and unchanged since). Each module's docstring gives
its formats and rules in full.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from world.journal._file import (
        FRAME_HEADER_BYTES,
        SEAL_SUFFIX,
        SEGMENT_BYTES_MAX,
        SEGMENT_HEADER_BYTES,
        SEGMENT_MAGIC,
        SEGMENT_VERSION,
        TORN_REASONS,
        FileJournal,
        RepairReport,
        TornTail,
        VerifyReport,
        repair,
        salvage,
        seal_name,
        segment_name,
        verify,
    )
    from world.journal._mend import (
        DamagedStretch,
        RestoredSegment,
        damaged_kind,
        damaged_stretch,
        mend_segment,
        records_before,
        reframe,
        restore_segment,
    )
    from world.journal._seals import SealInfo, digest_bytes, read_seal_info
    from world.journal._segments import list_segments, read_genesis
    from world.journal._verified import (
        FileStamp,
        VerifiedEntry,
        load_verified,
        save_verified,
        stamp_sealed,
        trusted_segments,
    )

__all__ = [
    "FRAME_HEADER_BYTES",
    "SEAL_SUFFIX",
    "SEGMENT_BYTES_MAX",
    "SEGMENT_HEADER_BYTES",
    "SEGMENT_MAGIC",
    "SEGMENT_VERSION",
    "TORN_REASONS",
    "DamagedStretch",
    "FileJournal",
    "FileStamp",
    "RepairReport",
    "RestoredSegment",
    "SealInfo",
    "TornTail",
    "VerifiedEntry",
    "VerifyReport",
    "damaged_kind",
    "damaged_stretch",
    "digest_bytes",
    "list_segments",
    "load_verified",
    "mend_segment",
    "read_genesis",
    "read_seal_info",
    "records_before",
    "reframe",
    "repair",
    "restore_segment",
    "salvage",
    "save_verified",
    "seal_name",
    "segment_name",
    "stamp_sealed",
    "trusted_segments",
    "verify",
]

_WHERE: dict[str, str] = {
    name: module
    for module, names in (
        (
            "world.journal._file",
            (
                "FileJournal",
                "verify",
                "repair",
                "salvage",
                "VerifyReport",
                "RepairReport",
                "TornTail",
                "segment_name",
                "seal_name",
                "SEGMENT_BYTES_MAX",
                "SEGMENT_HEADER_BYTES",
                "SEGMENT_MAGIC",
                "SEGMENT_VERSION",
                "FRAME_HEADER_BYTES",
                "SEAL_SUFFIX",
                "TORN_REASONS",
            ),
        ),
        (
            "world.journal._mend",
            (
                "DamagedStretch",
                "RestoredSegment",
                "damaged_kind",
                "damaged_stretch",
                "mend_segment",
                "records_before",
                "reframe",
                "restore_segment",
            ),
        ),
        ("world.journal._seals", ("SealInfo", "digest_bytes", "read_seal_info")),
        ("world.journal._segments", ("list_segments", "read_genesis")),
        (
            "world.journal._verified",
            (
                "FileStamp",
                "VerifiedEntry",
                "load_verified",
                "save_verified",
                "stamp_sealed",
                "trusted_segments",
            ),
        ),
    )
    for name in names
}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``world._face``)."""
    from world._face import export

    return export("world.journal", _WHERE, name, globals())
