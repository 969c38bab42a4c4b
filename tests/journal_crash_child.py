"""Crash helper for tests/test_journal_file.py: append to a file journal, then die by SIGKILL.

    python tests/journal_crash_child.py DIR --commits N --group G --segment-bytes S
        --die-at K --mode {after-commit,mid-write,at-roll}

Commit ``i`` (0-based) appends ``G`` records whose bodies are ``crash_body(seq)`` and commits
them; once ``commit`` has returned, the last seq of the group is printed and flushed: that line
is the acknowledgement. The process kills itself with SIGKILL:

    after-commit  right after commit K returns, before acknowledging it;
    mid-write     during commit K, after writing half of that commit's bytes to the segment;
    at-roll       at the first segment creation from commit K on, just before the rename (the
                  temp file with the new segment's header exists, the segment does not).

The parent reopens the journal and checks that every acknowledged record survived intact.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import world.journal
from world.journal import FileJournal

SUBJECT = "/world/event/test/Crash@1"
KIND = "event.in"


def crash_body(seq: int) -> dict[str, Any]:
    return {"n": seq, "pad": bytes([seq % 251]) * (seq % 17 + 8), "text": f"record {seq}"}


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _half_then_die(write_all: Callable[[int, bytes], None]) -> Callable[[int, bytes], None]:
    def write_half(fd: int, data: bytes) -> None:
        write_all(fd, data[: len(data) // 2])
        _die()

    return write_half


def _die_on_replace(src: Any, dst: Any) -> None:
    _die()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--commits", type=int, required=True)
    parser.add_argument("--group", type=int, default=1)
    parser.add_argument("--segment-bytes", type=int, required=True)
    parser.add_argument("--die-at", type=int, required=True)
    parser.add_argument("--mode", choices=["after-commit", "mid-write", "at-roll"], required=True)
    args = parser.parse_args(argv)
    journal = FileJournal(args.directory, segment_bytes_max=args.segment_bytes)
    for commit_index in range(args.commits):
        for _ in range(args.group):
            journal.append(KIND, SUBJECT, crash_body(journal.seq_next))
        if commit_index == args.die_at and args.mode == "mid-write":
            world.journal._write_all = _half_then_die(world.journal._write_all)  # type: ignore[assignment]
        if commit_index == args.die_at and args.mode == "at-roll":
            os.replace = _die_on_replace  # type: ignore[assignment]
        journal.commit()
        if commit_index == args.die_at and args.mode == "after-commit":
            _die()
        print(journal.seq_next_committed - 1, flush=True)
    journal.close()


if __name__ == "__main__":
    main(sys.argv[1:])
