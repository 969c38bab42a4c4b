"""The journal read a page at a time: ``journal.tail``, the records ``world journal tail``
prints, rendered as it renders them.

Paging. A call without ``until_seq`` starts a pass: it runs the ready work and fixes ``end``
(the committed ``seq_next`` then); the caller sends ``next`` back as ``from_seq`` with
``until_seq = end`` until ``next >= end`` (``world.ops.Handle.journal_tail`` does), which is what
a reader that opened the journal then sees. A page ends after ``PAGE_ITEMS_MAX`` items,
``PAGE_BYTES_MAX`` bytes of items or ``SCAN_RECORDS_MAX`` records read, whichever comes first,
so no request holds a served world's loop for long and no reply comes near a transport's
limit (the largest record, 16 MiB, shown as hex, is far below it). ``cells.tail`` pages the
same way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

import msgpack
from pydantic import Field

from world.errors import ProtocolError
from world.ops._base import Args, Context, Result, operation

if TYPE_CHECKING:
    from kernel.journal import JournalRecord
    from world.journal import FileJournal

__all__ = [
    "BACK_RECORDS",
    "PAGE_BYTES_MAX",
    "PAGE_ITEMS_MAX",
    "SCAN_RECORDS_MAX",
    "JournalPage",
    "JournalTail",
    "Page",
    "Window",
    "journal_tail",
    "last_start",
    "pass_end",
]

PAGE_ITEMS_MAX: Final = 1000
"""Items (records, history entries) in one page."""
PAGE_BYTES_MAX: Final = 4 * 1024 * 1024
"""A page ends once its items take this many bytes (as msgpack)."""
SCAN_RECORDS_MAX: Final = 20_000
"""Journal records one page reads at most (a filter may match few of them)."""


class JournalTail(Args):
    from_seq: int = Field(default=0, ge=0, description="Where this page starts")
    until_seq: int | None = Field(
        default=None, ge=0, description="Where the pass ends (a page's end); none: a new pass"
    )
    subject: str | None = Field(default=None, description="Only records whose subject matches")
    raw: bool = Field(default=False, description="Values and keys as canonical CBOR hex")
    limit: int | None = Field(default=None, ge=1, description="Records in the page at most")
    last: int | None = Field(
        default=None,
        ge=0,
        description="A new pass (no until_seq): only the last N records from from_seq (of "
        "those subject takes); the pass starts at the first of them",
    )


class JournalPage(Result):
    records: list[dict[str, Any]] = Field(description="Each as `world journal tail` prints it")
    next: int = Field(description="Where the next page starts")
    end: int = Field(description="Where the pass ends")


@operation("journal.tail")
def journal_tail(ctx: Context, args: JournalTail) -> JournalPage:
    """A page of journal records, values and keys read through their schemas."""
    from kernel.subjects import SubjectPattern

    pattern = SubjectPattern.compile(args.subject) if args.subject else None
    page = Page(args.limit)
    end = pass_end(ctx, args.until_seq)
    from_seq = args.from_seq
    if args.last is not None and args.until_seq is None:
        from_seq = last_start(ctx.world.journal, args.subject, from_seq, end, args.last)
    window = Window(ctx.world.journal, min(end, from_seq + SCAN_RECORDS_MAX))
    next_seq = max(from_seq, window.stop)
    view = ctx.view  # the eras applied so far, from the kernel
    for record in window.read(from_seq):
        if pattern is None or pattern.matches(record.subject):
            page.add(view.render(record, raw=args.raw))
            if page.full():
                next_seq = record.seq + 1
                break
    return JournalPage(records=page.items, next=next_seq, end=end)


BACK_RECORDS: Final = 16_384
"""``last_start`` with a subject looks for its records this many at a time, back from the end."""


def last_start(
    journal: FileJournal, subject: str | None, from_seq: int, end: int, last: int
) -> int:
    """Where the last ``last`` records of ``[from_seq, end)`` that ``subject`` takes begin
    (``end`` if none): without a subject, ``last`` back from ``end``; with one, found stretch
    by stretch (``BACK_RECORDS``) back from ``end``, each stretch read forward from where the
    segment index puts it, so a subject that matches often reads the last few stretches, not
    the journal (``world journal tail -n``, direct or served)."""
    end = min(end, journal.seq_next)
    if subject is None:
        return max(from_seq, end - last)
    if last == 0:
        return end
    found: list[int] = []  # the matching seqs of the stretches read, ascending
    high = end
    while high > from_seq and len(found) < last:
        low = max(from_seq, high - BACK_RECORDS)
        stretch: deque[int] = deque(maxlen=last)
        for record in journal.read(low, subject):
            if record.seq >= high:
                break
            stretch.append(record.seq)
        found = [*stretch, *found]
        high = low
    if len(found) >= last:
        return found[-last]
    return found[0] if found else end


def pass_end(ctx: Context, until_seq: int | None) -> int:
    """Where this pass over the journal ends: fixed by its first call (after the ready work),
    then passed back; never past what is committed."""
    journal = ctx.world.journal
    if until_seq is not None:
        return min(until_seq, journal.seq_next_committed)
    ctx.catch_up()
    return journal.seq_next_committed


class Page:
    """The items of one page, and whether it is full."""

    def __init__(self, limit: int | None) -> None:
        self.limit = min(limit or PAGE_ITEMS_MAX, PAGE_ITEMS_MAX)
        self.items: list[Any] = []
        self.size = 0

    def add(self, item: dict[str, Any]) -> None:
        try:
            self.size += len(msgpack.packb(item, use_bin_type=True))
        except (TypeError, ValueError, OverflowError) as exc:  # e.g. an int past 64 bits
            raise ProtocolError("malformed", f"cannot carry a page item: {exc}") from exc
        self.items.append(item)

    def full(self) -> bool:
        return len(self.items) >= self.limit or self.size >= PAGE_BYTES_MAX


class Window:
    """The committed records of ``journal`` below ``stop``, read like a journal."""

    def __init__(self, journal: FileJournal, stop: int) -> None:
        self.journal = journal
        self.stop = stop

    def read(self, from_seq: int = 0, subject: str | None = None) -> Iterator[JournalRecord]:
        for record in self.journal.read(from_seq, subject, committed_only=True):
            if record.seq >= self.stop:
                return
            yield record
