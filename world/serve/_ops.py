"""What a served world answers (``world.serve._server``): each op's arguments, checks and result.

    op            args                                        result
    send          schema, values, ids?, batch?, more?         {seqs} | {batch, staged}
    state         reducer, key?                               {state}
    info          -                                           World.info()
    snapshot      -                                           {snapshot}
    cells_ls      reducer, limit, after?                      {reducer, count, cells, next_after?}
    cells_show    reducer, key, at?                           {state, state_cbor, at?, through?}
    cells_export  reducer, out, all, key?                     {cells, notices}
    cells_import  path, trust?, trust_keys?                   {cells}
    upgrade_propose  air, note?, modules?                     Proposal.as_json() + {cells}
    upgrade_ls    -                                           {proposals, current}
    upgrade_show  id                                          Proposal.as_json() + {cells}
    upgrade_approve id, note?                                 {seq}
    cells_upgrade reducer, keys (list or nil: all)            CellsUpgraded.as_json()
    upgrade_apply id                                          Applied.as_json()
    upgrade_shadow id, from_seq?, events [[schema, value]]    Shadowed.as_json()
    effects_decide  intent (hash or prefix), approved          {seq}
    runs_cancel   run                                         {seq, run_id, plan, intents}
    dead_letter   id, action (retry | drop)                   {seq}
    journal_tail  from_seq, until_seq?, subject?, raw, limit? a page: {records, next, end}
    cells_tail    reducer, key, from_seq, until_seq?, raw, limit?  a page: {entries, next, end}

A ``send`` too big for one request (``REQUEST_BYTES_MAX``) is sent in parts: each part but the
last has ``more: true`` and gets back a ``batch`` token that the next part names; the server only
keeps the values of a batch (at most ``STAGED_EVENTS_MAX`` events, ``STAGED_BATCHES_MAX`` batches
at a time, the oldest dropped) and the last part sends them all as one durable batch, normalised
together, so a bad value anywhere rejects the whole file by its index, as a direct ``send --file``
does, and a client that goes away leaves nothing journaled.

Values are sugar JSON, as the CLI prints them (``state_cbor`` is canonical CBOR hex, for
``--raw``); ``records`` and ``entries`` are the objects ``world journal tail`` and ``world
cells tail --json`` print, one per line. An argument of the wrong type is ``InvalidArgument``.
Reads see what was sent before them: they first run the ready work (``catch_up``).

Paging. ``journal_tail`` and ``cells_tail`` answer one page of a pass over the committed
journal. A call without ``until_seq`` starts a pass: it catches up and fixes ``end`` (the
committed ``seq_next`` then); the client sends ``next`` back as ``from_seq`` with ``until_seq =
end`` until ``next >= end`` (``Client.pages``), which is what a direct reader sees: the journal
as committed when it opened. A page ends after ``PAGE_ITEMS_MAX`` items, ``PAGE_BYTES_MAX``
bytes of items (as msgpack; a page holds at least one item) or ``SCAN_RECORDS_MAX`` records
read, whichever comes first, so no request holds the loop for long and no reply comes near
``REPLY_BYTES_MAX`` (the largest record, 16 MiB, shown as hex, is far below it).

Off the loop. ``cells_show`` with ``at`` replays the journal, and ``cells_export`` reads every
cell and writes (and syncs) a file per cell: they return a ``Deferred``, which the server runs
on a worker thread with a read-only handle of its own (what a reader process would open),
never the server's ``World``, and answers when it finishes. Rejected: running them in slices
on the server's world between turns: the world moves on between slices, so an export would mix
states of several journal positions, while a read-only handle stays at one. ``cells_export``
writes where ``out`` (an absolute path) says, as the socket's owner: the socket is 0600.
``cells_import`` is the other way: it journals, so it runs on the loop with the server's
``World`` (the writer), reading ``path`` (absolute) and taking what ``trust`` (``--trust``) and
``trust_keys`` (``--trust-key``, hex) say, as ``world.moves.import_path`` does.

Checkpoints. The ops on the loop read the server's own ``World``, the writer, whose checkpoints
cannot move under it. The deferred ones read beside it, and the server may checkpoint while they
run: ``cells_show --at`` reads only the journal once open (``world.history.cell_at``), and an
export is one ``World.read``, so a checkpoint that collects what the export's handle was
reading makes it reopen and export again, whole, from the new view: each file is replaced
atomically and the index (``--all``) written last, so what the index names is one journal
position's cells.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from air import cbor
from air.errors import InvalidArgument, LimitExceeded
from kernel.journal import JournalRecord
from kernel.subjects import SubjectPattern
from world._airstore import load_stored_air
from world._views import JournalView, cells_page
from world._world import World
from world.serve._protocol import encode

if TYPE_CHECKING:
    from world.journal import FileJournal

__all__ = [
    "PAGE_BYTES_MAX",
    "PAGE_ITEMS_MAX",
    "SCAN_RECORDS_MAX",
    "STAGED_BATCHES_MAX",
    "STAGED_EVENTS_MAX",
    "Deferred",
    "Ops",
    "arg",
    "plain_fields",
]

STAGED_EVENTS_MAX: Final = 10_000_000
"""Events one ``send`` batch may stage before its last part."""
STAGED_BATCHES_MAX: Final = 8
"""Batches staged at a time; a ninth drops the oldest (a client that went away)."""
PAGE_ITEMS_MAX: Final = 1000
"""Items (records, history entries) in one page."""
PAGE_BYTES_MAX: Final = 4 * 1024 * 1024
"""A page ends once its items take this many bytes (msgpack)."""
SCAN_RECORDS_MAX: Final = 20_000
"""Journal records one page request reads at most (a filter may match few of them)."""


@dataclass(frozen=True)
class Deferred:
    """A result too slow for the loop: ``run`` is called on a worker thread, and must not
    touch the server's ``World`` (it opens its own read-only handle)."""

    run: Callable[[], Any]


class Ops:
    """The op table of one served world; ``catch_up`` runs its ready work (see the module
    docstring). Every handler runs on the server's thread."""

    def __init__(self, world: World, catch_up: Callable[[], None]) -> None:
        self.world = world
        self.catch_up = catch_up
        self.view = JournalView(world.genesis_air, lambda a: load_stored_air(world.cas, a))
        # batch token -> (schema, values, ids)
        self._staged: dict[int, tuple[str, list[Any], list[str | None]]] = {}
        self._tokens = 0

    def table(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {
            "send": self.send,
            "state": self.state,
            "info": self.info,
            "snapshot": self.snapshot,
            "cells_ls": self.cells_ls,
            "cells_show": self.cells_show,
            "cells_export": self.cells_export,
            "cells_import": self.cells_import,
            "upgrade_propose": self.upgrade_propose,
            "upgrade_ls": self.upgrade_ls,
            "upgrade_show": self.upgrade_show,
            "upgrade_approve": self.upgrade_approve,
            "cells_upgrade": self.cells_upgrade,
            "upgrade_apply": self.upgrade_apply,
            "upgrade_shadow": self.upgrade_shadow,
            "effects_decide": self.effects_decide,
            "runs_cancel": self.runs_cancel,
            "dead_letter": self.dead_letter,
            "journal_tail": self.journal_tail,
            "cells_tail": self.cells_tail,
        }

    # --- the first ops ------------------------------------------------------------------------

    def send(self, args: dict[str, Any]) -> Any:
        schema = arg(args, "schema", str)
        values = arg(args, "values", list)
        ids = _ids(args, len(values))
        more = args.get("more", False)
        if not values:
            raise InvalidArgument("values", 0, "send at least one event")
        if type(more) is not bool:
            raise InvalidArgument("more", repr(more), "must be bool")
        events, event_ids = values, ids
        if args.get("batch") is not None:
            token = arg(args, "batch", int)
            staged = self._staged.pop(token, None)
            if staged is None:
                raise InvalidArgument("batch", token, "no batch by that token is being staged")
            if staged[0] != schema:
                raise InvalidArgument("schema", schema, f"batch {token} is of {staged[0]}")
            events, event_ids = staged[1], staged[2]
            events.extend(values)
            event_ids.extend(ids)
        if len(events) > STAGED_EVENTS_MAX:
            raise LimitExceeded("STAGED_EVENTS_MAX", STAGED_EVENTS_MAX, f"{len(events)} events")
        if more:
            self._tokens += 1
            self._staged[self._tokens] = (schema, events, event_ids)
            while len(self._staged) > STAGED_BATCHES_MAX:
                self._staged.pop(next(iter(self._staged)))
            return {"batch": self._tokens, "staged": len(events)}
        return {"seqs": self.world.send_many([(schema, v) for v in events], ids=event_ids)}

    def state(self, args: dict[str, Any]) -> Any:
        reducer = arg(args, "reducer", str)
        self.catch_up()
        return {"state": self.world.state(reducer, args.get("key"))}

    def info(self, _args: dict[str, Any]) -> Any:
        self.catch_up()
        return self.world.info()

    def snapshot(self, _args: dict[str, Any]) -> Any:
        return {"snapshot": self.world.snapshot()}

    def cells_ls(self, args: dict[str, Any]) -> Any:
        reducer = arg(args, "reducer", str)
        limit = arg(args, "limit", int)
        self.catch_up()
        return cells_page(self.world, reducer, args.get("after"), limit)

    # --- one cell -----------------------------------------------------------------------------

    def cells_show(self, args: dict[str, Any]) -> Any:
        """The cell now, or (``at``) right after that journal position, as ``world cells
        show`` finds it."""
        from world.history import cell_key

        reducer = arg(args, "reducer", str)
        at = _seq_or_none(args, "at")
        key = args.get("key")
        self.catch_up()
        if at is not None:
            path = self.world.path
            return Deferred(lambda: _cell_at(path, reducer, key, at))
        cell_key(self.world.air, reducer, key)  # the errors a wrong key gets
        view = self.world.cell(reducer, key)
        found = self.world.kernel.cell_of(reducer, self.world.key_cbor(reducer, key))
        return {
            "state": None if view is None else view.state,
            "state_cbor": None if found is None else found[1].hex(),
            "era": None if view is None else cbor.raw_to_hash(view.entry.manifest_hash),
            "current_era": self.world.air.manifest_hash,
        }

    def cells_export(self, args: dict[str, Any]) -> Any:
        reducer = arg(args, "reducer", str)
        out = Path(arg(args, "out", str))
        all_cells = arg(args, "all", bool)
        key = args.get("key")
        force = args.get("force") is True
        if not out.is_absolute():
            raise InvalidArgument("out", str(out), "must be an absolute path")
        if all_cells == (key is not None):
            raise InvalidArgument("key", repr(key), "give exactly one of key or all")
        self.catch_up()
        path = self.world.path
        return Deferred(lambda: _export(path, reducer, key, out, force))

    def cells_import(self, args: dict[str, Any]) -> Any:
        from world.moves import Trust, import_path

        path = Path(arg(args, "path", str))
        keys_hex = args.get("trust_keys") or []
        if not isinstance(keys_hex, list) or not all(isinstance(k, str) for k in keys_hex):
            raise InvalidArgument("trust_keys", repr(keys_hex), "must be a list of hex keys")
        trust = Trust.of(any_signer=args.get("trust") is True, keys_hex=keys_hex)
        if not path.is_absolute():
            raise InvalidArgument("path", str(path), "must be an absolute path")
        self.catch_up()
        force = args.get("force") is True
        return {"cells": import_path(self.world, path, trust, force=force)}

    # --- proposals (world.gov) -------------------------------------------------------------

    def upgrade_propose(self, args: dict[str, Any]) -> Any:
        """Journals: on the loop, with the server's ``World``; ``air`` is absolute."""
        from world.gov import proposal_cells, propose

        air = Path(arg(args, "air", str))
        if not air.is_absolute():
            raise InvalidArgument("air", str(air), "must be an absolute path")
        note = args.get("note")
        if note is not None and not isinstance(note, str):
            raise InvalidArgument("note", repr(note), "must be str or nil")
        modules = args.get("modules") or {}
        if not isinstance(modules, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and Path(v).is_absolute()
            for k, v in modules.items()
        ):
            raise InvalidArgument("modules", repr(modules)[:80], "must map names to absolute paths")
        self.catch_up()
        made, _diff = propose(self.world, air, note, modules=modules)
        return {**made.as_json(), "cells": proposal_cells(self.world, made.diff)}

    def upgrade_ls(self, args: dict[str, Any]) -> Any:
        from world.gov import listing

        return listing(self.world)

    def upgrade_approve(self, args: dict[str, Any]) -> Any:
        """Journals: on the loop."""
        from world.gov import approve

        note = args.get("note")
        if note is not None and not isinstance(note, str):
            raise InvalidArgument("note", repr(note), "must be str or nil")
        self.catch_up()
        return {"seq": approve(self.world, arg(args, "id", int), note)}

    def upgrade_apply(self, args: dict[str, Any]) -> Any:
        """Journals: on the loop; the served world runs the new era from the next tick."""
        from world.gov import apply

        self.catch_up()
        return apply(self.world, arg(args, "id", int)).as_json()

    def upgrade_show(self, args: dict[str, Any]) -> Any:
        from world.gov import proposal, proposal_cells

        made = proposal(self.world, arg(args, "id", int))
        return {**made.as_json(), "cells": proposal_cells(self.world, made.diff)}

    def upgrade_shadow(self, args: dict[str, Any]) -> Any:
        """Journals (one record) after running the shadow on the loop: the served world waits
        for it, as for a cells import."""
        from world.gov import shadow

        events = args.get("events") or []
        if not isinstance(events, list) or not all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) for e in events
        ):
            raise InvalidArgument("events", repr(events)[:80], "must be a list of [schema, value]")
        self.catch_up()
        found = shadow(
            self.world,
            arg(args, "id", int),
            from_seq=_seq_or_none(args, "from_seq"),
            events=[(schema, value) for schema, value in events],
        )
        return found.as_json()

    def cells_upgrade(self, args: dict[str, Any]) -> Any:
        """Journals: on the loop, batch by batch."""
        from world.gov import upgrade_cells

        keys = args.get("keys")
        if keys is not None and not isinstance(keys, list):
            raise InvalidArgument("keys", repr(keys), "must be a list of keys or nil")
        self.catch_up()
        return upgrade_cells(self.world, arg(args, "reducer", str), keys).as_json()

    # --- pages of the journal -----------------------------------------------------------------

    # --- an operator's acts (world.operate): journaled, on the loop ---------------------------

    def effects_decide(self, args: dict[str, Any]) -> Any:
        from world.effects import decide_parked

        approved = arg(args, "approved", bool)
        self.catch_up()
        return {"seq": decide_parked(self.world, arg(args, "intent", str), approved)}

    def runs_cancel(self, args: dict[str, Any]) -> Any:
        from world.operate import cancel_run

        self.catch_up()
        seq, body = cancel_run(self.world.kernel, arg(args, "run", str))
        self.world.commit()
        intents = [cbor.raw_to_hash(h) for h in body["intents"]]
        return {"seq": seq, "run_id": body["run_id"], "plan": body["plan"], "intents": intents}

    def dead_letter(self, args: dict[str, Any]) -> Any:
        action, letter_id = arg(args, "action", str), arg(args, "id", str)
        if action not in ("retry", "drop"):
            raise InvalidArgument("action", action, "retry or drop")
        self.catch_up()
        act = self.world.retry_dead_letter if action == "retry" else self.world.drop_dead_letter
        return {"seq": act(letter_id)}

    def journal_tail(self, args: dict[str, Any]) -> Any:
        """A page of the records ``world journal tail`` prints, rendered as it renders them."""
        from_seq = _seq(args, "from_seq")
        raw = arg(args, "raw", bool)
        subject = args.get("subject")
        if subject is not None and not isinstance(subject, str):
            raise InvalidArgument("subject", repr(subject), "must be str or nil")
        pattern = SubjectPattern.compile(subject) if subject else None
        page = _Page(args)
        end = self._pass_end(args)
        window = _Window(self.world.journal, min(end, from_seq + SCAN_RECORDS_MAX))
        next_seq = max(from_seq, window.stop)
        self.view.follow(self.world)  # the eras applied so far, from the kernel
        for record in window.read(from_seq):
            if pattern is None or pattern.matches(record.subject):
                page.add(self.view.render(record, raw=raw))
                if page.full():
                    next_seq = record.seq + 1
                    break
        return {"records": page.items, "next": next_seq, "end": end}

    def cells_tail(self, args: dict[str, Any]) -> Any:
        """A page of one cell's history, each entry as ``world cells tail --json`` prints it."""
        from world.history import CellHistory, cell_key

        reducer = arg(args, "reducer", str)
        from_seq = _seq(args, "from_seq")
        raw = arg(args, "raw", bool)
        history = CellHistory(self.world.air, cell_key(self.world.air, reducer, args.get("key")))
        page = _Page(args)
        end = self._pass_end(args)
        window = _Window(self.world.journal, min(end, from_seq + SCAN_RECORDS_MAX))
        next_seq = max(from_seq, window.stop)
        # CellHistory reads only ``read`` (entries, and each step's source by its seq).
        for entry in history.read(cast("FileJournal", window), from_seq):
            shown = {"role": entry.role, **self.view.render(entry.record, raw=raw)}
            if entry.role == "step":
                source = entry.source
                shown["source"] = None if source is None else self.view.render(source, raw=raw)
            page.add(shown)
            if page.full():
                next_seq = entry.record.seq + 1
                break
        return {"entries": page.items, "next": next_seq, "end": end}

    def _pass_end(self, args: dict[str, Any]) -> int:
        """Where this pass over the journal ends: fixed by its first call (after catching up),
        then passed back; never past what is committed."""
        committed = self.world.journal.seq_next_committed
        until = _seq_or_none(args, "until_seq")
        if until is not None:
            return min(until, committed)
        self.catch_up()
        return self.world.journal.seq_next_committed


class _Page:
    def __init__(self, args: dict[str, Any]) -> None:
        limit = args.get("limit")
        if limit is not None and (type(limit) is not int or limit < 1):
            raise InvalidArgument("limit", repr(limit), "a count, 1 or more")
        self.limit = min(limit or PAGE_ITEMS_MAX, PAGE_ITEMS_MAX)
        self.items: list[Any] = []
        self.size = 0

    def add(self, item: dict[str, Any]) -> None:
        self.size += len(encode(item))  # ProtocolError for what msgpack cannot carry
        self.items.append(item)

    def full(self) -> bool:
        return len(self.items) >= self.limit or self.size >= PAGE_BYTES_MAX


class _Window:
    """The committed records of ``journal`` below ``stop``, read like a journal."""

    def __init__(self, journal: FileJournal, stop: int) -> None:
        self.journal = journal
        self.stop = stop

    def read(self, from_seq: int = 0) -> Iterator[JournalRecord]:
        for record in self.journal.read(from_seq, committed_only=True):
            if record.seq >= self.stop:
                return
            yield record


# --- the deferred ones (worker threads, read-only handles) ------------------------------------


def _cell_at(path: Path, reducer: str, key: Any, at: int) -> dict[str, Any]:
    from world.history import cell_at

    found = cell_at(path, reducer, key, at)
    state_hex = None if found.state_cbor is None else found.state_cbor.hex()
    return {
        "state": found.state,
        "state_cbor": state_hex,
        "at": found.seq,
        "through": found.seq_through,
        "era": found.era,
    }


def _export(path: Path, reducer: str, key: Any, out: Path, force: bool) -> dict[str, Any]:
    from world.moves import export_all, export_cell

    def export() -> int:
        if key is None:
            return export_all(world, reducer, out, force=force)
        export_cell(world, reducer, key, out, force=force)
        return 1

    with World.open(path, readonly=True) as world:
        count = world.read(export)
    return {"cells": count, "notices": list(world.notices)}


# --- arguments and results --------------------------------------------------------------------


def arg(args: dict[str, Any], name: str, kind: type) -> Any:
    value = args.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidArgument(name, repr(value), f"must be {kind.__name__}")
    return value


def _ids(args: dict[str, Any], count: int) -> list[str | None]:
    """The events' idempotency keys (``ids``: one per value, text or nil; absent: none)."""
    ids = args.get("ids")
    if ids is None:
        return [None] * count
    if not isinstance(ids, list) or len(ids) != count:
        raise InvalidArgument("ids", repr(ids), f"must be a list of {count} ids (text or nil)")
    if not all(i is None or isinstance(i, str) for i in ids):
        raise InvalidArgument("ids", repr(ids), "each id is text or nil")
    return list(ids)


def _seq(args: dict[str, Any], name: str) -> int:
    value = args.get(name)
    if type(value) is not int or value < 0:
        raise InvalidArgument(name, repr(value), "must be a journal position (an int, 0 or more)")
    return value


def _seq_or_none(args: dict[str, Any], name: str) -> int | None:
    return None if args.get(name) is None else _seq(args, name)


def plain_fields(exc: BaseException) -> dict[str, Any]:
    """An error's public fields, as plain values msgpack can carry."""
    out: dict[str, Any] = {}
    for name, value in vars(exc).items():
        if not name.startswith("_"):
            out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value if not isinstance(value, int) or abs(value) < 2**63 else str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)
