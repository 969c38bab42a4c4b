"""Journal throughput, run by hand: ``python tools/bench/bench_journal.py [--records N] [--dir D]``.

Measures, on small records shaped like the kernel's (an ``event.in`` and a cell ``step``, in
turn), with one commit per ``--batch`` records:

* file journal append + commit, records/s (the number the kernel's events/s budget depends on);
* the same without commit (encode + buffer only) and the memory journal, to split the cost;
* a plain Python append-only log (length prefix + crc32, same batch fdatasync, payloads already
  encoded) as the floor;
* reopen (scan of every frame), read-back (fast and strict decode), and ``verify``;
* the seconds to open an ``--open-records`` journal (2,000,000 by default; ``--open-only`` skips
  the rest) in ``--segment-bytes`` segments, as a world opens it (writable), with the seals its
  writer left and with them removed (every segment scanned, as before seals).

Each measurement runs ``--repeat`` times and prints the median and the best rate: the machine is
shared, and fsync latency varies. Not a test: nothing asserts; results go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import struct
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel.journal import MemoryJournal
from world.journal import SEGMENT_BYTES_MAX, FileJournal, verify

EVENT_SUBJECT = "/world/event/demo/CounterEvent@1"
STEP_SUBJECT = f"/world/cell/demo/Counter@1/{bytes(range(32)).hex()}/step"
Entry = tuple[str, str, Any]


def entry(n: int) -> Entry:
    if n % 2 == 0:
        value = b"\xa2ckeyforder-1bop\xa2d$tagcAddf$value\x01"
        return "event.in", EVENT_SUBJECT, {"schema": "demo/CounterEvent@1", "value": value}
    body = {"reducer": "demo/Counter@1", "key": b"gorder-1", "src": n - 1, "state": b"\xa1a\x01"}
    return "step", STEP_SUBJECT, body


def timed(label: str, count: int, run: Callable[[], object], repeat: int) -> None:
    rates = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        rates.append(count / (time.perf_counter() - start))
    print(f"{label:<42} {statistics.median(rates):>12,.0f} {max(rates):>12,.0f}")


def append_file(directory: Path, entries: list[Entry], batch: int) -> None:
    with FileJournal(directory) as journal:
        for index, (kind, subject, body) in enumerate(entries, 1):
            journal.append(kind, subject, body)
            if index % batch == 0:
                journal.commit()
        journal.commit()


def append_memory(entries: list[Entry], batch: int) -> None:
    journal = MemoryJournal()
    for index, (kind, subject, body) in enumerate(entries, 1):
        journal.append(kind, subject, body)
        if index % batch == 0:
            journal.commit()


def append_no_commit(directory: Path, entries: list[Entry]) -> None:
    journal = FileJournal(directory)
    for kind, subject, body in entries:
        journal.append(kind, subject, body)
    journal.close()


def plain_log(path: Path, payloads: list[bytes], batch: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    pack = struct.Struct("<II").pack
    try:
        for start in range(0, len(payloads), batch):
            chunk = payloads[start : start + batch]
            os.write(fd, b"".join(pack(len(p), zlib.crc32(p)) + p for p in chunk))
            os.fdatasync(fd)
    finally:
        os.close(fd)


def read_all(directory: Path, strict: bool) -> int:
    with FileJournal(directory, readonly=True, check_reads=strict) as journal:
        return sum(1 for _ in journal.read())


def reopen(directory: Path) -> None:
    FileJournal(directory, readonly=True).close()


def timed_seconds(label: str, run: Callable[[], object], repeat: int) -> None:
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    print(f"{label:<42} {statistics.median(seconds):>12.3f} {min(seconds):>12.3f}")


def write_big(directory: Path, count: int, batch: int, segment_bytes: int) -> None:
    """Append ``count`` records in commits of ``batch``, generating entries as it goes."""
    with FileJournal(directory, segment_bytes_max=segment_bytes) as journal:
        for start in range(0, count, batch):
            journal.append_many(entry(n) for n in range(start, min(count, start + batch)))
            journal.commit()


def remove_seals(directory: Path) -> None:
    for seal in directory.glob("*.seal"):
        seal.unlink()


def open_writable(directory: Path) -> None:
    FileJournal(directory).close()


def run_open(scratch: Path, count: int, batch: int, segment_bytes: int, repeat: int) -> None:
    directory = scratch / "big"
    start = time.perf_counter()
    write_big(directory, count, batch, segment_bytes)
    written = time.perf_counter() - start
    segments = sorted(directory.glob("*.log"))
    size = sum(file.stat().st_size for file in segments)
    print(f"open: {count:,} records, {len(segments)} segments of <= {segment_bytes:,} bytes")
    print(f"({size / 2**20:,.0f} MiB, written in {written:.1f} s), {repeat} runs, warm page cache")
    print(f"{'seconds':<42} {'median':>12} {'best':>12}")
    timed_seconds("open (seals as the writer left them)", lambda: open_writable(directory), repeat)
    remove_seals(directory)
    # Read-only, so that an open does not write the seals back for the next run.
    timed_seconds("open with no seals (scan every segment)", lambda: reopen(directory), repeat)
    shutil.rmtree(directory)


def run(scratch: Path, count: int, batch: int, repeat: int) -> None:
    entries = [entry(n) for n in range(count)]
    payloads = [bytes(64) for _ in range(count)]
    fresh = itertools.count()
    print(f"{count:,} records, one commit per {batch:,}, {repeat} runs, scratch {scratch}")
    print(f"{'records/s':<42} {'median':>12} {'best':>12}")

    def plain() -> None:
        plain_log(scratch / f"plain{next(fresh)}", payloads, batch)

    def no_commit() -> None:
        append_no_commit(scratch / f"nc{next(fresh)}", entries)

    def commit() -> None:
        append_file(scratch / f"j{next(fresh)}", entries, batch)

    timed("plain log (64-byte payloads, fdatasync)", count, plain, repeat)
    timed("memory journal append + commit", count, lambda: append_memory(entries, batch), repeat)
    timed("file journal append only (no commit)", count, no_commit, repeat)
    timed("file journal append + commit", count, commit, repeat)
    journal = scratch / "journal"
    append_file(journal, entries, batch)
    size = sum(file.stat().st_size for file in journal.iterdir())
    print(f"{'journal bytes per record':<42} {size / count:>12.1f}")
    timed("reopen (scan + check every frame)", count, lambda: reopen(journal), repeat)
    timed("read back, fast decode", count, lambda: read_all(journal, strict=False), repeat)
    timed("reopen + read back, both strict", count, lambda: read_all(journal, True), repeat)
    timed("verify (strict)", count, lambda: verify(journal), repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: tmp)")
    parser.add_argument("--open-records", type=int, default=2_000_000, help="0 skips the open runs")
    parser.add_argument("--segment-bytes", type=int, default=SEGMENT_BYTES_MAX)
    parser.add_argument("--open-only", action="store_true", help="only the --open-records runs")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-journal-", dir=args.dir))
    try:
        if not args.open_only:
            run(scratch, args.records, args.batch, args.repeat)
        if args.open_records:
            run_open(scratch, args.open_records, args.batch, args.segment_bytes, args.repeat)
    finally:
        shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
