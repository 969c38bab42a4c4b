"""The file cell store: the cells' states, checkpointed from the journal, packed into index
shards that are content-addressed in the world's CAS.

Invariants:
- Derived state: the journal is the truth; the store is its materialisation at the last
  checkpoint, and a damaged or missing file in it is ``StoreDamaged``, which the world rebuilds
  from the journal. ``put`` and ``delete`` touch memory only.
- A checkpoint is atomic: new objects are written and synced first, then one atomic write of
  ``checkpoint.cbor`` commits them with the kernel's snapshot address, then the garbage is
  collected. A crash at any point opens at the old or the new checkpoint, whole; a
  ``flush-plan.cbor`` left behind says what to finish or undo.
- Objects are immutable and named by content; every read is verified against its name. The
  collector deletes only objects it can prove are the store's own and unreached (a leak is
  possible, a loss is not).
- Memory follows the cells touched, not the world: bounded caches of groups, states and keys.

The C splice. ``kernel.native.shard_splice`` merges a packed shard with its dirty cells in C.
Its contract: for the input it accepts it returns exactly what the Python ``merge`` builds
(the same fields, the same logical shard bytes); for any input it does not expect it returns
None (it declines) and Python merges; it never answers differently. ``tests/test_native_shard``
(hypothesis, mutated shards, every malformed input) and ``tests/test_cellstore_merge`` hold it
to ``merge``, also under AddressSanitizer.

Parts: ``_store`` (``FileCellStore``: layout, the flush protocol, recovery), ``_shards``
(packed shards, the shard group and index objects: what a lookup reads), ``_checkpoint`` (the
checkpoint and flush-plan records: what a flush commits and recovery reads first), ``_flush``
(planning one flush: merges, groups, garbage), ``_disk`` (the files and every durable operation
on them), ``_legacy`` (the format before index shards, read as it is and converted by the next
flush).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from world.cellstore._checkpoint import FORMAT
    from world.cellstore._disk import CHECKPOINT_NAME, PLAN_NAME, REDUCERS_DIR
    from world.cellstore._shards import GROUP_BYTES_TARGET
    from world.cellstore._store import FileCellStore, StoreStats

__all__ = [
    "CHECKPOINT_NAME",
    "FORMAT",
    "GROUP_BYTES_TARGET",
    "PLAN_NAME",
    "REDUCERS_DIR",
    "FileCellStore",
    "StoreStats",
]

_WHERE: dict[str, str] = {
    name: module
    for module, names in (
        (
            "world.cellstore._store",
            (
                "FileCellStore",
                "StoreStats",
            ),
        ),
        ("world.cellstore._checkpoint", ("FORMAT",)),
        ("world.cellstore._shards", ("GROUP_BYTES_TARGET",)),
        (
            "world.cellstore._disk",
            (
                "CHECKPOINT_NAME",
                "PLAN_NAME",
                "REDUCERS_DIR",
            ),
        ),
    )
    for name in names
}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``world._face``)."""
    from world._face import export

    return export("world.cellstore", _WHERE, name, globals())
