"""One way to ask a world: ``Handle``, whose methods are every operation, and its
implementations: ``LocalHandle`` (the world open in this process: ``world.open``) and
``RemoteHandle`` (a served world, over its socket or HTTP: ``world.connect``).

Invariants:
- The methods are written once, here, on ``Handle``: each builds the operation's arguments
  model and hands it to ``call``. An implementation only says how a call reaches the
  operation (``_call``), so every handle has the same methods, returning the same result
  models.
- Same errors. A local call raises what the operation raised; a remote one raises the same
  class, rebuilt from the reply's class name and fields (``revive``), when it is one of the
  project's errors; else ``ServedError`` with the class's name.
- Paging is the caller's side of a pass (``journal_tail``, ``cells_tail``), and so is a send
  too big for one request (``RemoteHandle._send``: parts of one batch, a part halved when the
  transport says it is too big; the last part journals the batch whole). A send is retried
  by sending it again with the same ids: ids make it exactly once. A remote handle does so
  itself when the connection goes before the reply and every event has an id (the socket
  client connects again on the next request); without ids the error says to retry with them.
- A local handle opened read-only refuses an operation that writes (``WrongMode``) before it
  runs; reads run inside ``World.read`` (a checkpoint that moves under a reader is read
  again).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from air.errors import LimitExceeded, WorldError, WrongMode
from world.ops import (
    _cells,
    _deadletters,
    _effects,
    _events,
    _history,
    _journal,
    _moves,
    _runs,
    _status,
    _upgrades,
)
from world.ops._base import Args, Context, Operation, Result, lookup

__all__ = ["Handle", "LocalHandle", "RemoteHandle", "revive"]

R = TypeVar("R", bound=Result)

SEND_RETRIES: Final = 3
"""How often a remote send whose every event has an id is sent again, whole, after the
connection went before the reply (a part staged on a server that restarted is gone with it)."""

_NONE = _status.NoArgs()


class Handle(abc.ABC):
    """A world to ask: every operation as a method (see the module docstring)."""

    progress: Callable[[int, int], None] | None = None
    """Told ``(done, total)`` as a long send goes on (the CLI's bar): events taken in process,
    parts acknowledged by a remote world."""

    @abc.abstractmethod
    def _call(self, op: Operation, args: Args) -> Result:
        """Run ``op`` with ``args`` where this handle's world is; its result."""

    def call(self, name: str, args: Args | dict[str, Any] | None = None) -> Result:
        """Operation ``name`` with ``args`` (a model, or a plain map checked by it)."""
        op = lookup(name)
        return self._call(op, op.parse(args if args is not None else {}))

    def _ask(self, name: str, args: Args, result: type[R]) -> R:
        found = self._call(lookup(name), args)
        assert isinstance(found, result)
        return found

    def close(self) -> None:
        """Let the world go (a local handle closes it; a remote one its connection)."""
        return

    def interrupt(self) -> None:
        """Ask a long operation to stop at its next safe point (SIGINT in the CLI); a remote
        one cannot be stopped halfway: it is one request, carried out whole or not at all."""
        return

    @property
    def notices(self) -> list[str]:
        """What the world said while open (a damaged derived file rebuilt, ...)."""
        return []

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- events -----------------------------------------------------------------------------

    def send(self, schema: str, value: Any, *, id: str | None = None) -> _events.Sent:
        """Send one event (``id``: its idempotency key); durable on return."""
        return self.send_many(schema, [value], ids=None if id is None else [id])

    def send_many(
        self, schema: str, values: Sequence[Any], *, ids: Sequence[str | None] | None = None
    ) -> _events.Sent:
        """Send events of one schema as one durable batch, all or nothing."""
        return self._send(schema, list(values), None if ids is None else list(ids))

    def _send(self, schema: str, values: list[Any], ids: list[str | None] | None) -> _events.Sent:
        args = _events.Send(schema_=schema, values=values, ids=ids)
        return self._ask("events.send", args, _events.Sent)

    # --- the world --------------------------------------------------------------------------

    def info(self) -> _status.Info:
        return self._ask("world.info", _NONE, _status.Info)

    def state(self, reducer: str, key: Any = None) -> Any:
        """A reducer's state, or one cell's; None when there is none."""
        return self._ask(
            "world.state", _status.StateOf(reducer=reducer, key=key), _status.State
        ).state

    def snapshot(self) -> str:
        """Checkpoint now; the snapshot's address."""
        return self._ask("world.snapshot", _NONE, _status.Snapshot).snapshot

    # --- cells ------------------------------------------------------------------------------

    def cells(self, reducer: str, *, limit: int = 100, after: Any = None) -> _cells.CellsPage:
        """A page of a keyed reducer's cells, sorted by key."""
        args = _cells.CellsOf(reducer=reducer, limit=limit, after=after)
        return self._ask("cells.ls", args, _cells.CellsPage)

    def cell(self, reducer: str, key: Any, *, at: int | None = None) -> _cells.Cell:
        """One cell, now or right after journal position ``at``."""
        args = _cells.CellOf(reducer=reducer, key=key, at=at)
        return self._ask("cells.show", args, _cells.Cell)

    def cell_history(
        self, reducer: str, key: Any, *, from_seq: int = 0, raw: bool = False
    ) -> Iterator[dict[str, Any]]:
        """One cell's inputs and step outcomes from ``from_seq``, in journal order (one pass)."""
        args = _cells.CellTail(reducer=reducer, key=key, from_seq=from_seq, raw=raw)
        for page in self.pages("cells.tail", args):
            yield from page.entries  # type: ignore[attr-defined]

    def cells_upgrade(self, reducer: str, keys: Sequence[Any] | None) -> _cells.CellsUpgraded:
        """Move cells (``keys``; None: every one not current) to the current era."""
        args = _cells.CellsUpgrade(reducer=reducer, keys=None if keys is None else list(keys))
        return self._ask("cells.upgrade", args, _cells.CellsUpgraded)

    def cells_export(
        self,
        reducer: str,
        out: Path | str,
        *,
        key: Any = None,
        every: bool = False,
        force: bool = False,
    ) -> _moves.Exported:
        """Write one cell (``key``) or every cell (``every``) to ``out``, signed."""
        args = _moves.Export(
            reducer=reducer, out=str(Path(out).absolute()), key=key, all=every, force=force
        )
        return self._ask("cells.export", args, _moves.Exported)

    def cells_import(
        self,
        path: Path | str,
        *,
        trust: bool = False,
        trust_keys: Sequence[str] = (),
        force: bool = False,
    ) -> int:
        """Import exported cells; how many."""
        args = _moves.Import(
            path=str(Path(path).absolute()), trust=trust, trust_keys=list(trust_keys), force=force
        )
        return self._ask("cells.import", args, _moves.Imported).cells

    # --- the journal ------------------------------------------------------------------------

    def journal_tail(
        self, from_seq: int = 0, *, subject: str | None = None, raw: bool = False
    ) -> Iterator[dict[str, Any]]:
        """The committed records from ``from_seq`` (one pass: what was committed when it
        started), each as ``world journal tail`` prints it."""
        args = _journal.JournalTail(from_seq=from_seq, subject=subject, raw=raw)
        for page in self.pages("journal.tail", args):
            yield from page.records  # type: ignore[attr-defined]

    def pages(self, name: str, args: Args) -> Iterator[Result]:
        """The pages of one pass of a paged operation: the first fixes ``end``; each next one
        starts at the ``next`` of the one before, until ``next >= end``."""
        op = lookup(name)
        page = self._call(op, args)
        yield page
        end: int = page.end  # type: ignore[attr-defined]
        while page.next < end:  # type: ignore[attr-defined]
            cursor: int = page.next  # type: ignore[attr-defined]
            page = self._call(op, args.model_copy(update={"from_seq": cursor, "until_seq": end}))
            if page.next <= cursor:  # type: ignore[attr-defined]
                raise WorldError(f"{name}: a page that does not advance past {cursor}")
            yield page

    # --- runs, dead letters, effects --------------------------------------------------------

    def runs(self, *, status: str | None = None, plan: str | None = None) -> list[dict[str, Any]]:
        """Every plan run, live and ended, by id."""
        args = _runs.RunsOf.model_validate({"status": status, "plan": plan})
        return self._ask("runs.ls", args, _runs.RunsList).runs

    def run(self, run_id: int) -> _runs.RunDetail:
        return self._ask("runs.show", _runs.RunOf(run=run_id), _runs.RunDetail)

    def cancel_run(self, run_id: int) -> _runs.RunCancelled:
        return self._ask("runs.cancel", _runs.RunOf(run=run_id), _runs.RunCancelled)

    def dead_letters(self) -> _deadletters.DeadLetters:
        return self._ask("dead_letters.ls", _NONE, _deadletters.DeadLetters)

    def dead_letter(self, letter_id: str) -> dict[str, Any]:
        args = _deadletters.DeadLetterOf(id=letter_id)
        return self._ask("dead_letters.show", args, _deadletters.DeadLetter).letter

    def retry_dead_letter(self, letter_id: str) -> int:
        """Deliver it again (journaled); the record's seq."""
        args = _deadletters.DeadLetterOf(id=letter_id)
        return self._ask("dead_letters.retry", args, _deadletters.DeadLetterActed).seq

    def drop_dead_letter(self, letter_id: str) -> int:
        args = _deadletters.DeadLetterOf(id=letter_id)
        return self._ask("dead_letters.drop", args, _deadletters.DeadLetterActed).seq

    def effects(self) -> _effects.EffectsList:
        return self._ask("effects.ls", _NONE, _effects.EffectsList)

    def decide(self, intent: str, approved: bool) -> int:
        """Approve or deny a parked intent (its hash or a unique prefix); the record's seq."""
        name = "effects.approve" if approved else "effects.deny"
        return self._ask(name, _effects.IntentOf(intent=intent), _effects.Decided).seq

    # --- upgrades and history ---------------------------------------------------------------

    def propose(
        self,
        air: Path | str,
        *,
        note: str | None = None,
        modules: Mapping[str, Path | str] | None = None,
    ) -> _upgrades.ProposalShown:
        bound = {name: str(Path(file).absolute()) for name, file in (modules or {}).items()}
        args = _upgrades.Propose(air=str(Path(air).absolute()), note=note, modules=bound)
        return self._ask("upgrade.propose", args, _upgrades.ProposalShown)

    def proposals(self) -> _upgrades.Proposals:
        return self._ask("upgrade.ls", _NONE, _upgrades.Proposals)

    def proposal(self, proposal_id: int) -> _upgrades.ProposalShown:
        args = _upgrades.ProposalOf(id=proposal_id)
        return self._ask("upgrade.show", args, _upgrades.ProposalShown)

    def approve(self, proposal_id: int, note: str | None = None) -> int:
        args = _upgrades.ProposalApproval(id=proposal_id, note=note)
        return self._ask("upgrade.approve", args, _upgrades.Approved).seq

    def apply(self, proposal_id: int) -> _upgrades.Applied:
        args = _upgrades.ProposalOf(id=proposal_id)
        return self._ask("upgrade.apply", args, _upgrades.Applied)

    def shadow(
        self,
        proposal_id: int,
        *,
        from_seq: int | None = None,
        events: Sequence[tuple[str, Any]] = (),
    ) -> _upgrades.Shadowed:
        args = _upgrades.Shadow(
            id=proposal_id, from_seq=from_seq, events=[(s, v) for s, v in events]
        )
        return self._ask("upgrade.shadow", args, _upgrades.Shadowed)

    def why(self, reducer: str, key: Any, *, at: int | None = None) -> _history.Why:
        """Why a cell holds its state (now, or right after ``at``)."""
        return self._ask("why", _history.WhyOf(reducer=reducer, key=key, at=at), _history.Why)


class LocalHandle(Handle):
    """A world open in this process (``world.open``): the writer, or a reader beside one."""

    def __init__(self, world: Any) -> None:
        self.world = world
        self._ctx = Context(world)

    @property
    def readonly(self) -> bool:
        return bool(self.world.readonly)

    def _call(self, op: Operation, args: Args) -> Result:
        self._ctx.progress = self.progress
        if op.writes:
            if self.world.readonly:
                raise WrongMode(op.name, "open read-only")
            return op.run(self._ctx, args)
        return self.world.read(lambda: op.run(self._ctx, args))  # type: ignore[no-any-return]

    def close(self) -> None:
        self.world.close()

    def interrupt(self) -> None:
        self.world.interrupt()

    @property
    def notices(self) -> list[str]:
        return list(self.world.notices)


class RemoteHandle(Handle):
    """A served world, through a transport that carries an operation's plain arguments and
    brings back its reply or error (``_transport``)."""

    @abc.abstractmethod
    def _transport(self, name: str, args: dict[str, Any]) -> Any:
        """The reply to one request (raising ``ServedError`` for an error reply)."""

    def _call(self, op: Operation, args: Args) -> Result:
        from world.errors import ServedError

        try:
            return op.answer(self._transport(op.name, args.plain()))
        except ServedError as exc:
            raise revive(exc) from None

    def _send(self, schema: str, values: list[Any], ids: list[str | None] | None) -> _events.Sent:
        """One request if it fits, else parts of one batch that the server journals whole with
        its last part (``world.ops._events``); a part the transport finds too big is halved
        (nothing of it was sent)."""
        from world.errors import ProtocolError

        batch, start, size = None, 0, len(values)
        retries = 0
        while True:
            part = values[start : start + size]
            more = start + len(part) < len(values)
            args = _events.Send(
                schema_=schema,
                values=part,
                ids=None if ids is None else ids[start : start + size],
                batch=batch,
                more=more,
            )
            try:
                sent = self._ask("events.send", args, _events.Sent)
            except LimitExceeded:
                if size == 1:
                    raise
                size = max(1, size // 2)
                continue
            except ProtocolError as exc:
                named = ids is not None and None not in ids
                if exc.code != "closed" or not named or retries >= SEND_RETRIES:
                    raise
                retries += 1  # the connection went: send the whole batch again, by its ids
                batch, start = None, 0
                continue
            start += len(part)
            if self.progress is not None:
                self.progress(start, len(values))
            if not more:
                return sent
            batch = sent.batch


def revive(exc: Any) -> WorldError:
    """A served error as the class the server raised (its fields set as it had them, plain),
    when that is one of the project's errors with a message of its own; else ``exc``."""
    cls = error_class(exc.error_class)
    if cls is None:
        return exc  # type: ignore[no-any-return]
    if cls.__str__ is not BaseException.__str__ or cls.__name__ in ("ServedError", "WorldError"):
        return exc  # type: ignore[no-any-return]  # a message made from fields not carried
    revived = cls.__new__(cls)
    Exception.__init__(revived, exc.detail)
    vars(revived).update(exc.fields)
    return revived


def error_class(name: str) -> type[WorldError] | None:
    """The project's error class called ``name`` (``air``, ``kernel`` or ``world``'s), if any."""
    from air import errors as air_errors
    from kernel import errors as kernel_errors
    from world import errors as world_errors

    for module in (air_errors, kernel_errors, world_errors):
        cls = getattr(module, name, None)
        if isinstance(cls, type) and issubclass(cls, WorldError):
            return cls
    return None
