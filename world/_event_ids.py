"""The index of every event id ever journaled, so that a retried batch of any size is exactly once.

A sender may give each event an id (``--id``, a JSON Lines ``"$id"``, ``ids=`` of ``send_many``);
an event whose id the journal already holds is not journaled again, and its seq is answered
instead (``World.send_many``). That needs every id the journal holds, not the last few: a retry
can come after any number of other sends, and one batch may hold up to ``STAGED_EVENTS_MAX``
(10,000,000) events. So this is an index of all of them, derived from the journal, and the
check happens here, in the world layer, before the kernel is asked to journal a batch (the
kernel holds no memory of ids; it reads no file).

Rejected: a window of the last N ids in the kernel (the design before this one, N = 100,000).
Its promise depends on how many ids other senders journaled between a try and its retry, and
one batch larger than N defeated it on its own: the third send of a 200,000-line batch
journaled 100,000 duplicates. A window that covers the largest batch times a bound of retries
would be 30,000,000 ids held in memory (several GB as a Python dict) and written into every
snapshot; bounding the batch to make it fit would refuse batches the CLI takes today.

Layout: ``<world>/cache/event_ids.sqlite`` (SQLite in WAL mode, with its ``-wal`` and ``-shm``
files while open), two tables::

    ids     (id TEXT PRIMARY KEY, seq INTEGER)   WITHOUT ROWID: one row per id journaled
    meta    (format, genesis, seq_to)             one row: the commit record

``seq_to``: every id journaled at a seq below it is a row; ``genesis``: the digest of the
journal's record 0 (``world.history.index.genesis_digest``), so an index from another journal
is not believed (two worlds of one AIR share their record 0: the read-back below tells them
apart, and at open the newest row is read back too). Rows and ``meta`` change in one SQLite transaction.

Invariants, by construction:
- A new event is never dropped. An id is answered as journaled only if it is in this session's
  memory (``_recent``: ids this process saw committed) or the index says so and the journal
  agrees: every seq the index answers is read back from the journal (in runs, by the segment
  index: ~0.6 s for 200,000) and must be an ``event.in`` under that id. A disagreement (a
  journal cut by ``repair``, a cache copied from another world) throws the index away and
  builds it again from the journal. Ids reach ``_recent`` only after the journal committed
  them (``add``), so a rolled-back batch leaves none.
- A journaled id is never missed. At first use in a session the index reads the journal from
  its ``seq_to`` on (``_catch_up``: what a crash kept from being written), and then every batch
  this writer commits adds its ids (``World.send_many`` is the one way an id is journaled).
  An index that is missing, damaged (SQLite's own error, or a ``meta`` that does not decode as
  one: a power loss, a truncated or garbage file), of another format or another journal, or
  ahead of the journal, is built again from the journal, and a notice says so. If it cannot be
  written at all (a full disk, EIO, a read-only cache), the ids are held in memory for the
  session, read from the whole journal, and a notice says so: slower, never wrong. (A folder
  in the index's place is not removed: each session holds its ids in memory, saying so.)

Durability. The index is derived: nothing is fsynced on the path of a send. ``_recent`` is
written to SQLite (``flush``) once it holds ``FLUSH_IDS`` ids, at a checkpoint and at close,
with ``synchronous=NORMAL``: in WAL mode a power loss may lose the last transactions whole,
never leave half of one (SQLite's documented guarantee), and a lost one only moves ``seq_to``
back, which the catch-up reads again. A kill loses at most ``_recent``, read again likewise.

Cost (``tools/bench/bench_send_ids.py``, BENCHMARKS.md): a send with ids is as fast as before
(the window's per-id eviction cost about what the lookup does); a lookup of a batch's ids is one
indexed query per ``_QUERY_IDS`` ids (0.34 s for 200,000) and the read-back of those answered;
a flush is one transaction. Memory: ``_recent`` (at most ``FLUSH_IDS`` ids plus one batch) and
SQLite's page cache (its default, ~2 MB); on disk 5.5 MB for 200,000 ids of 15 characters.

Not here: which events are new in a batch (``World.send_many``, which also treats an id twice in
one batch as a duplicate of the first).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Final

from world import _fileio as fileio
from world.errors import StorageError
from world.journal import FileJournal

__all__ = ["FILE", "FLUSH_IDS", "EventIds"]

FILE: Final = "event_ids.sqlite"
"""The index's file, under ``<world>/cache/``."""
FLUSH_IDS: Final = 65_536
"""Ids held in memory (~150 bytes each) before they are written to the index."""
CHECK_GAP: Final = 64
"""Seqs the read-back of answered ids reads through rather than seek past (one segment index
stride): answered seqs closer than this are read in one run."""

_FORMAT: Final = 1
_QUERY_IDS: Final = 500  # ids per lookup query (SQLite allows 32,766 parameters)
_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS ids (id TEXT PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS meta (format INTEGER, genesis BLOB, seq_to INTEGER)",
)


class _Wrong(Exception):
    """The index does not describe this journal (or is damaged): build it again."""


class EventIds:
    """The id index of one writable world session (see the module docstring)."""

    def __init__(self, world: Path, journal: FileJournal, notice: Callable[[str], None]) -> None:
        """Nothing is opened or read until the first ``known``: a session that sends no id
        pays nothing."""
        self._path = world / "cache" / FILE
        self._journal = journal
        self._notice = notice
        self._db: sqlite3.Connection | None = None
        self._recent: dict[str, int] = {}
        """Ids journaled (committed) that the index does not hold yet, with their seqs; in
        memory-only mode, every id."""
        self._ready = False
        self._genesis_digest: bytes | None = None

    # --- asking -------------------------------------------------------------------------------

    def known(self, ids: Iterable[str]) -> dict[str, int]:
        """The seq of each of ``ids`` the journal holds; the others are not in the answer."""
        self._open()
        wanted = list(dict.fromkeys(ids))
        try:
            return self._lookup(wanted, check=True)
        except (_Wrong, sqlite3.Error) as exc:
            self._rebuild(f"{exc}")  # built from the journal now: its answers need no check
        try:
            return self._lookup(wanted, check=False)
        except sqlite3.Error as exc:
            self._memory_only(f"{exc}")
            return self._lookup(wanted, check=False)

    def _lookup(self, wanted: list[str], *, check: bool) -> dict[str, int]:
        recent = self._recent
        found = {i: recent[i] for i in wanted if i in recent}
        if self._db is None or len(found) == len(wanted):
            return found
        stored = self._select(self._db, [i for i in wanted if i not in found])
        if check:
            self._check(stored)
        return found | stored

    def add(self, ids: dict[str, int]) -> None:
        """``ids`` were journaled at these seqs, and committed."""
        self._recent.update(ids)
        if self._db is not None and len(self._recent) >= FLUSH_IDS:
            self.flush()

    def flush(self) -> None:
        """Write the ids held in memory to the index, and its new ``seq_to`` (the journal's
        committed end): derived, so a failure is a notice and the ids stay in memory."""
        if not self._ready or self._db is None:
            return
        try:
            self._write(self._db, self._recent, self._journal.seq_next_committed)
        except sqlite3.Error as exc:
            self._memory_only(f"{exc}")
            return
        self._recent = {}

    def close(self) -> None:
        """Flush, and let the file go."""
        self.flush()
        if self._db is not None:
            with suppress(sqlite3.Error):
                self._db.close()
            self._db = None

    # --- opening ------------------------------------------------------------------------------

    def _open(self) -> None:
        if self._ready:
            return
        self._ready = True
        try:
            self._db = self._connect()
            seq_to = self._committed(self._db)
        except (_Wrong, sqlite3.Error, StorageError, OSError) as exc:
            self._rebuild(f"{exc}")
            return
        self._catch_up(seq_to)

    def _connect(self) -> sqlite3.Connection:
        fileio.mkdir(self._path.parent, parents=True, exist_ok=True)
        if self._path.exists() and not self._path.is_file():
            raise _Wrong(f"{self._path} is not a file")
        db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            for statement in _SCHEMA:
                db.execute(statement)
        except BaseException:
            db.close()
            raise
        return db

    def _committed(self, db: sqlite3.Connection) -> int:
        """The index's ``seq_to``, after checking it describes this journal (``_Wrong`` if
        not); a new index's is 0."""
        rows = db.execute("SELECT format, genesis, seq_to FROM meta").fetchall()
        if not rows:
            self._write(db, {}, 0)
            return 0
        if len(rows) != 1:
            raise _Wrong(f"{FILE}: {len(rows)} commit records")
        fmt, genesis, seq_to = rows[0]
        if fmt != _FORMAT or genesis != self._genesis() or type(seq_to) is not int:
            raise _Wrong(f"{FILE}: of another format or another journal")
        if not 0 <= seq_to <= self._journal.seq_next_committed:
            raise _Wrong(f"{FILE}: covers seq {seq_to}, past the journal's end")
        last = db.execute("SELECT id, seq FROM ids ORDER BY seq DESC LIMIT 1").fetchall()
        if any(type(event_id) is not str or type(seq) is not int for event_id, seq in last):
            raise _Wrong(f"{FILE}: a row that is not an id and a seq")
        self._check(dict(last))  # the newest row is what the journal holds there
        return seq_to

    def _genesis(self) -> bytes:
        """The digest of the journal's record 0 (read once)."""
        if self._genesis_digest is None:
            from world.history.index import genesis_digest

            first = next(iter(self._journal.read(0, committed_only=True)), None)
            self._genesis_digest = b"" if first is None else genesis_digest(first)
        return self._genesis_digest

    def _catch_up(self, seq_from: int) -> None:
        """Take the ids journaled from ``seq_from`` on (the index does not hold them), writing
        them to the index every ``FLUSH_IDS``."""
        for event_id, seq in _journaled(self._journal, seq_from):
            self._recent.setdefault(event_id, seq)
            if self._db is not None and len(self._recent) >= FLUSH_IDS:
                try:
                    self._write(self._db, self._recent, seq + 1)
                except sqlite3.Error as exc:
                    self._memory_only(f"{exc}")
                    return
                self._recent = {}

    def _rebuild(self, why: str) -> None:
        """Throw the index away and build it again from the whole journal."""
        self._close_quietly()
        self._recent = {}
        try:
            for suffix in ("", "-wal", "-shm"):
                fileio.unlink(self._path.with_name(FILE + suffix), missing_ok=True)
            self._db = self._connect()
            self._write(self._db, {}, 0)
        except (sqlite3.Error, StorageError, OSError) as exc:
            self._memory_only(f"{why}; then {exc}")
            return
        self._notice(f"event id index {self._path}: {why}; rebuilt from the journal")
        self._catch_up(0)

    def _memory_only(self, why: str) -> None:
        """Hold every id in memory for this session, read from the whole journal."""
        self._close_quietly()
        self._notice(
            f"event id index {self._path} not written ({why}); this session holds every "
            "event id in memory"
        )
        self._recent = {}
        for event_id, seq in _journaled(self._journal, 0):
            self._recent.setdefault(event_id, seq)

    def _close_quietly(self) -> None:
        if self._db is not None:
            with suppress(sqlite3.Error):
                self._db.close()
            self._db = None

    # --- the file -----------------------------------------------------------------------------

    def _write(self, db: sqlite3.Connection, ids: dict[str, int], seq_to: int) -> None:
        """Add ``ids`` and set ``seq_to``, in one transaction."""
        db.execute("BEGIN")
        try:
            db.executemany("INSERT OR IGNORE INTO ids VALUES (?, ?)", ids.items())
            db.execute("DELETE FROM meta")
            db.execute("INSERT INTO meta VALUES (?, ?, ?)", (_FORMAT, self._genesis(), seq_to))
        except BaseException:
            with suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    @staticmethod
    def _select(db: sqlite3.Connection, ids: list[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for start in range(0, len(ids), _QUERY_IDS):
            part = ids[start : start + _QUERY_IDS]
            marks = ",".join("?" * len(part))
            query = f"SELECT id, seq FROM ids WHERE id IN ({marks})"  # marks only
            for event_id, seq in db.execute(query, part):
                if type(event_id) is not str or type(seq) is not int:
                    raise _Wrong(f"{FILE}: a row that is not an id and a seq")
                found[event_id] = seq
        return found

    def _check(self, answered: dict[str, int]) -> None:
        """Every ``id -> seq`` the index answered is the journal's ``event.in`` under that id at
        that seq (``_Wrong`` if one is not), read back in runs of close seqs."""
        by_seq = {seq: event_id for event_id, seq in answered.items()}
        if len(by_seq) != len(answered):
            raise _Wrong(f"{FILE}: two ids at one seq")
        end = self._journal.seq_next_committed
        for low, high in _runs(sorted(by_seq)):
            if high >= end:
                raise _Wrong(f"{FILE}: an id at seq {high}, past the journal's end")
            for record in self._journal.read(low, committed_only=True):
                if record.seq > high:
                    break
                wanted = by_seq.get(record.seq)
                if wanted is None:
                    continue
                body = record.body
                if record.kind != "event.in" or type(body) is not dict or body.get("id") != wanted:
                    raise _Wrong(f"{FILE}: seq {record.seq} is not the event {wanted!r}")


def _runs(seqs: list[int]) -> Iterator[tuple[int, int]]:
    """``(low, high)`` of each run of sorted ``seqs`` no two of which are ``CHECK_GAP`` apart."""
    if not seqs:
        return
    low = high = seqs[0]
    for seq in seqs[1:]:
        if seq - high > CHECK_GAP:
            yield low, high
            low = seq
        high = seq
    yield low, high


def _journaled(journal: FileJournal, seq_from: int) -> Iterator[tuple[str, int]]:
    """``(id, seq)`` of each ``event.in`` with an id, committed, from ``seq_from`` on."""
    for record in journal.read(seq_from, committed_only=True):
        if record.kind == "event.in":
            body = record.body
            event_id = body.get("id") if type(body) is dict else None
            if type(event_id) is str:
                yield event_id, record.seq
