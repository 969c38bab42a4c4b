"""Re-deriving a damaged journal record: re-executing the journal up to it, for ``journal verify
--repair`` when neither an archive's copy nor a one-byte mend puts a sealed segment back.

Determinism is the product: a record the kernel writes (a ``step``, ``step.failed``, a
``plan.*`` record, and the ``effect.queued`` / ``policy.decision`` records a tick owes) is a
function of the records before it, which is what replay checks. So the records of a damaged
stretch can be computed again: a kernel over a memory journal and store (as replay's) applies
every record before the stretch, appends what its last tick still owes, and then ticks until
it has written as many records as the stretch held. ``rederive`` returns their payloads; the
caller frames them and keeps them only if the segment then has its seal's blake3
(``world.journal.reframe``): the seal proves the re-derived bytes are the ones sealed, so
nothing is guessed.

Inputs cannot be re-derived: ``event.in`` (an outside event), ``receipt`` (an adapter's
answer), ``effect.approval``, the ``gov.*`` records, ``world.created``, and every operator act
(a cell move, a cancelled run, a dead letter retried or discarded, an outbox delivery). A
stretch that held one gives other records, or fewer, and the seal refuses them: that input is
lost, and the repair stops there (``world._repair``).
"""

from __future__ import annotations

from pathlib import Path

from air import LoadedAir
from kernel import Kernel, KernelLimits
from kernel.cells import MemoryCellStore
from kernel.journal import MemoryJournal, encode_record
from world._airstore import air_loader
from world._cas import FileCas
from world._directory import load_world_air
from world._runner import HostRunner
from world.journal import records_before

__all__ = ["rederive"]


def rederive(path: Path, seq_first: int, count: int) -> list[bytes] | None:
    """The payloads of the ``count`` records from ``seq_first`` on that re-executing the journal
    of the world at ``path`` up to ``seq_first`` writes; None if it writes fewer, or the
    records before cannot be re-executed (read-only: nothing of the world is written)."""
    try:
        air = load_world_air(path)
        cas = FileCas(path, readonly=True)
        journal = MemoryJournal(first_seq=seq_first)
        kernel = _kernel(path, air, cas, journal)
        applied = 0
        for record in records_before(path / "journal", seq_first):
            kernel.apply(record)
            applied += 1
        if applied != seq_first:
            return None
        for kind, subject, body in kernel.owed_records():
            journal.append(kind, subject, body)
        while journal.seq_next < seq_first + count and kernel.tick():
            pass
    except Exception:  # re-deriving is an attempt: any failure leaves the cut to the repair
        return None
    records = list(journal.read(seq_first))[:count]
    if len(records) < count:
        return None
    return [encode_record(r.seq, r.subject, r.kind, r.body) for r in records]


def _kernel(path: Path, air: LoadedAir, cas: FileCas, journal: MemoryJournal) -> Kernel:
    """A kernel of the world's genesis AIR over ``journal`` and a memory store, as replay's."""
    runner = HostRunner(air, path / "cache", readonly=True, wasm_of=cas.get)
    return Kernel(air, journal, MemoryCellStore(), runner, KernelLimits(), air_loader(cas))
