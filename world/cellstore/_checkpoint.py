"""The file cell store's commit records (format 2): the checkpoint record, the one mutable file
and the commit point, and the flush plan a running flush leaves behind. Pure: bytes in, values
out; ``world.cellstore._disk`` writes and reads them. They are the store's only files that are
ever replaced, each carrying its own digest, and what recovery reads first; the immutable
objects they commit (shard groups, index objects) are ``world.cellstore._shards``.

Checkpoint record, ``state/reducers/checkpoint.cbor``, the one mutable file and the commit
point: ``{"format": 2, "checkpoint": <the kernel's bytes>, "modules": {module hex: index object
hash}, "shared": {state hash: references}, "digest"}``. ``shared`` counts the references to the
out-of-line states that more than one cell uses (or that existed before a cell used them; see
``world.cellstore._flush``). ``digest`` is blake3 over the record without it, so a damaged byte
anywhere is found on open. Format 1 (one file per cell, before issue 11) is read by
``world.cellstore._legacy``; the record says which format the store is (``FORMAT``).

Flush plan, ``state/reducers/flush-plan.cbor``, present while a flush runs or after one died:
``{"format": 2, "prev": <digest of the checkpoint before>, "next": <digest of the one being
written>, "created": <raw hashes>, "garbage": <raw hashes>, "digest"}``.

Rejected: one index per reducer as the commit point (a crash between two reducers' commits
would split the checkpoint).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import cbor2

from air import cbor
from air.errors import CborError
from kernel.cells import HASH_BYTES

__all__ = [
    "EMPTY_CHECKPOINT",
    "FORMAT",
    "LEGACY_FORMAT",
    "Checkpoint",
    "FlushPlan",
    "decode_checkpoint",
    "decode_plan",
    "encode_checkpoint",
    "encode_plan",
    "snapshot_of",
]

FORMAT: Final = 2
LEGACY_FORMAT: Final = 1


# -- the checkpoint record -----------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """A decoded ``checkpoint.cbor``. ``roots`` maps module hex to its index object hash
    (format 2) or to the root of its ``index.cbor`` (format 1)."""

    data: bytes
    meta: bytes
    roots: dict[str, bytes]
    shared: dict[bytes, int] = field(default_factory=dict)
    format: int = FORMAT


EMPTY_CHECKPOINT: Final = Checkpoint(b"", b"", {})


def _digest(
    fmt: int, meta: bytes, roots: Mapping[str, bytes], shared: Mapping[bytes, int]
) -> bytes:
    body: dict[str, Any] = {"format": fmt, "checkpoint": meta, "modules": dict(roots)}
    if fmt == FORMAT:
        body["shared"] = dict(shared)
    return cbor.digest(cbor.dumps(body))


def encode_checkpoint(
    meta: bytes, roots: Mapping[str, bytes], shared: Mapping[bytes, int]
) -> bytes:
    return cbor.dumps(
        {
            "format": FORMAT,
            "checkpoint": meta,
            "modules": dict(roots),
            "shared": dict(shared),
            "digest": _digest(FORMAT, meta, roots, shared),
        }
    )


def decode_checkpoint(data: bytes) -> Checkpoint:
    """Format 2, or format 1 (read for conversion); ``CborError`` for anything else."""
    obj = cbor.loads(data)
    fmt = obj.get("format") if isinstance(obj, dict) else None
    fields = {"format", "checkpoint", "modules", "digest"} | (
        {"shared"} if fmt == FORMAT else set()
    )
    if (
        fmt not in (FORMAT, LEGACY_FORMAT)
        or not isinstance(obj.get("checkpoint"), bytes)
        or not isinstance(obj.get("modules"), dict)
        or not obj.keys() <= fields
        or (fmt == FORMAT and obj.keys() != fields)
    ):
        raise CborError("/", "checkpoint.format", "not a format-1 or format-2 cell checkpoint")
    for module, root in obj["modules"].items():
        if not isinstance(module, str) or not isinstance(root, bytes) or len(root) != HASH_BYTES:
            raise CborError(f"/modules/{module}", "checkpoint.format", "bad module root")
    shared = obj.get("shared", {})
    if not isinstance(shared, dict) or not all(
        type(h) is bytes and len(h) == HASH_BYTES and type(n) is int and n > 0
        for h, n in shared.items()
    ):
        raise CborError("/shared", "checkpoint.format", "bad shared-state counts")
    # Format-1 checkpoints written before the digest existed have none; every other one does.
    if "digest" in obj and obj["digest"] != _digest(fmt, obj["checkpoint"], obj["modules"], shared):
        raise CborError("/digest", "checkpoint.digest", "checkpoint does not match its digest")
    return Checkpoint(data, obj["checkpoint"], dict(obj["modules"]), dict(shared), fmt)


def snapshot_of(meta: bytes) -> bytes | None:
    """The snapshot object a world's checkpoint bytes name (``{"snapshot": <hash>}``, written by
    ``world.World.snapshot``), if they name one: it belongs to the checkpoint and is collected
    with it."""
    try:
        obj = cbor2.loads(meta)
    except (ValueError, cbor2.CBORDecodeError):
        return None
    found = obj.get("snapshot") if isinstance(obj, dict) else None
    return found if type(found) is bytes and len(found) == HASH_BYTES else None


# -- the flush plan ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlushPlan:
    prev: bytes
    next: bytes
    created: list[bytes]
    garbage: list[bytes]


def encode_plan(plan: FlushPlan) -> bytes:
    body = {
        "format": FORMAT,
        "prev": plan.prev,
        "next": plan.next,
        "created": b"".join(plan.created),
        "garbage": b"".join(plan.garbage),
    }
    return cbor.dumps({**body, "digest": cbor.digest(cbor.dumps(body))})


def _hashes(data: Any) -> list[bytes]:
    if type(data) is not bytes or len(data) % HASH_BYTES:
        raise CborError("/", "plan.format", "not a list of raw hashes")
    return [data[at : at + HASH_BYTES] for at in range(0, len(data), HASH_BYTES)]


def decode_plan(data: bytes) -> FlushPlan:
    """``CborError`` if the bytes are not a whole plan (a torn write, after a power cut)."""
    obj = cbor.loads(data)
    if not isinstance(obj, dict) or obj.get("format") != FORMAT or "digest" not in obj:
        raise CborError("/", "plan.format", "not a format-2 flush plan")
    body = {k: v for k, v in obj.items() if k != "digest"}
    if obj["digest"] != cbor.digest(cbor.dumps(body)) or body.keys() != {
        "format",
        "prev",
        "next",
        "created",
        "garbage",
    }:
        raise CborError("/digest", "plan.format", "flush plan does not match its digest")
    return FlushPlan(obj["prev"], obj["next"], _hashes(obj["created"]), _hashes(obj["garbage"]))
