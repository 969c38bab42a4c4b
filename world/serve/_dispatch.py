"""What a served world answers: every operation of ``world.ops``, by name, through one
dispatcher; the transports (the socket, HTTP) only carry names, plain arguments and replies.

    request  {"op": "runs.ls", "args": {"status": "error"}}   (the socket adds "v")
    reply    the operation's result in its JSON form, or an error reply naming its class

A request names an operation of the registry (``UnknownName`` lists them otherwise) and its
arguments are checked by the operation's model before anything runs (one ``InvalidArgument``
naming the field). Reads first run the ready work (``catch_up``), so a client that sent and
then reads sees its events processed; a write runs on the loop with the server's ``World``, the
writer. An operation that says ``off_loop`` (a replay to a past position, an export, ``why``)
becomes a ``Deferred``: the server runs it on a worker thread with a read-only handle of its
own (what a reader process would open), never the server's ``World``, and answers when it
finishes. Rejected: running those in slices between turns: the world moves on between slices,
so an export would mix states of several journal positions, while a read-only handle stays at
one.

A write is refused (by ``world.ops``, as from every front end) with ``JournalDamaged`` (naming the damage and the repair command) while a
check has left the world's damage mark (``world._repair.DAMAGE_MARK``: the background check of
``--verify-every``, or ``journal verify``): a record acknowledged then could be cut by the
repair. Reads go on. ``journal verify --repair`` (with the server stopped: it takes the world
exclusively) removes the mark, and the restarted server takes writes again.

``hello`` is answered here too: the world folder served (device and inode: a client checks it
talks to its own world), the protocol version and the operations' names.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from world.ops import Args, Context, Operation, lookup

if TYPE_CHECKING:
    from world._world import World

__all__ = ["Deferred", "Dispatcher", "plain_fields"]


@dataclass(frozen=True)
class Deferred:
    """A result too slow for the loop: ``run`` is called on a worker thread, and must not
    touch the server's ``World`` (it opens its own read-only handle)."""

    run: Callable[[], Any]


class Dispatcher:
    """The operations of one served world; every call runs on the server's thread."""

    def __init__(self, world: World, catch_up: Callable[[], None]) -> None:
        self.world = world
        self.ctx = Context(world, catch_up, served=True)

    def answer(self, name: Any, raw_args: Any, *, http: bool = False) -> Any:
        """The JSON form of operation ``name``'s result, or a ``Deferred`` for one off the
        loop; ``http``: a caller that need not share the server's files (``server_files``
        operations are refused to it)."""
        op = lookup(name)
        if http and op.server_files:
            from air.errors import InvalidArgument

            raise InvalidArgument(
                "op", op.name, "names files on the world's host: not offered over HTTP"
            )
        args = op.parse(raw_args)
        if op.off_loop(args):
            self.ctx.catch_up()
            path = self.world.path
            return Deferred(lambda: _off_loop(path, op, args))
        return op.reply(op.run(self.ctx, args))

    def reply(self, name: Any, raw_args: Any, lock: AbstractContextManager[Any]) -> dict[str, Any]:
        """The reply to one request answered in the calling thread (a partition's Ray actor:
        ``world.cluster.ray``): the operation under ``lock`` (the one its world's loop holds),
        one that runs off the loop after it, on a read-only handle of its own; an error as its
        error reply."""
        from world.serve._protocol import ok_reply

        try:
            with lock:
                answer = self.answer(name, raw_args)
            return ok_reply(answer.run() if isinstance(answer, Deferred) else answer)
        except Exception as exc:
            return self.refusal(exc)

    @staticmethod
    def refusal(exc: BaseException) -> dict[str, Any]:
        """The error reply ``exc`` is answered with (its class, code, message and fields)."""
        from world.serve._protocol import error_reply

        return error_reply(exc, plain_fields(exc))


def _off_loop(path: Path, op: Operation, args: Args) -> dict[str, Any]:
    from world._world import World

    with World.open(path, readonly=True) as world:
        ctx = Context(world, served=True)
        return op.reply(world.read(lambda: op.run(ctx, args)))


def plain_fields(exc: BaseException) -> dict[str, Any]:
    """An error's public fields, as plain values msgpack and JSON can carry."""
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
