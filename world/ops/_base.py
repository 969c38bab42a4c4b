"""What an operation is: a name, a function ``fn(ctx, args) -> result``, and the two models of
its arguments and result; and the registry every front end reads.

Invariants:
- An operation is defined once (``@operation``) and every handle and transport runs that one
  definition: ``world.ops.LocalHandle`` calls it in process, the served world's socket and HTTP
  dispatchers call it on the server's loop. Nothing else implements what one can ask a world.
- Arguments are checked before the function runs, by the model: an unknown field, a missing
  one or one of the wrong type is one ``InvalidArgument`` naming the field (its dotted path)
  and what it must be. The function may check more (a path that must be absolute, two fields
  that exclude each other) and raises the same error.
- Results are models with a JSON form (``model_dump(mode="json")``), which is what every
  transport carries; a remote handle validates the reply into the same model, so the caller
  gets the same object whichever handle answered.

An operation *writes* (journals: it needs the world's writer, and a read-only handle refuses it
with ``WrongMode`` before it runs) or reads. A read runs inside ``World.read`` on a reader (a
checkpoint that moves under it makes it run again, whole), and on a served world after the
ready work (``Context.catch_up``), so a client that sent and then reads sees its events
processed. A read that is slow (a replay to a past position, an export that writes a file per
cell) says so with ``off_loop``: a served world runs it on a worker thread with a read-only
handle of its own, never on its loop.

Rejected: frozen dataclasses for the send path's arguments. Validating 10,000 sugar-JSON event
values (``list[Any]``: the values themselves are checked by the kernel against their schema,
not here) costs ~0.3 ms, under 1% of journaling them (BENCHMARKS.md, "The operations layer").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError

from air.errors import InvalidArgument, UnknownName

if TYPE_CHECKING:
    from world._views import JournalView
    from world._world import World

__all__ = [
    "REGISTRY",
    "Args",
    "Context",
    "Operation",
    "Result",
    "lookup",
    "operation",
]


class Args(BaseModel):
    """The arguments of one operation: frozen, and no field it does not declare."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)

    def __init__(self, **data: Any) -> None:
        """Arguments built in Python (a handle's methods) fail as a transport's do: one
        ``InvalidArgument`` naming the field, never pydantic's own error."""
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _invalid(type(self).__name__, exc) from None

    def plain(self) -> dict[str, Any]:
        """The arguments as a transport carries them (JSON form, fields by their wire names)."""
        return self.model_dump(mode="json", by_alias=True)


class Result(BaseModel):
    """The result of one operation, as every handle returns it."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Context:
    """Where an operation runs: the world it reads or writes, and what the place offers.

    ``catch_up`` runs the world's ready work first (a served world's loop; a no-op in process,
    where reading changes nothing); ``staged`` holds the parts of a send made in parts (a
    remote client's big batch, journaled whole with its last part); ``progress`` is told how
    far a long operation got (``done, total``: a send counts the events as it takes them);
    ``served`` says the caller
    is on the other side of a transport (paths it names must be absolute: the server's working
    folder is not the caller's)."""

    def __init__(
        self,
        world: World,
        catch_up: Callable[[], None] | None = None,
        *,
        served: bool = False,
    ) -> None:
        self.world = world
        self.catch_up: Callable[[], None] = catch_up or _nothing
        self.served = served
        self.staged: dict[int, tuple[str, list[Any], list[str | None]]] = {}
        self.progress: Callable[[int, int], None] | None = None  # a caller's bar (a send's)
        self.tokens = 0
        self._view: JournalView | None = None

    @property
    def view(self) -> JournalView:
        """How records read to people (``world journal tail``), the world's eras followed."""
        from world._airstore import load_stored_air
        from world._views import JournalView

        if self._view is None:
            world = self.world
            self._view = JournalView(world.genesis_air, lambda a: load_stored_air(world.cas, a))
        self._view.follow(self.world)
        return self._view


def _nothing() -> None:
    return None


def _never(_args: Any) -> bool:
    return False


@dataclass(frozen=True)
class Operation:
    """One operation: ``name`` (``family.verb``), its function, its models, and how it runs."""

    name: str
    fn: Callable[[Context, Any], Result]
    args: type[Args]
    result: type[Result]
    writes: bool
    off_loop: Callable[[Any], bool] = field(default=_never)
    server_files: bool = False
    """It names files on the server's machine (reads or writes them): not offered over HTTP,
    whose callers need not share the server's file system or user."""

    @property
    def summary(self) -> str:
        doc = inspect.getdoc(self.fn) or ""
        return " ".join(doc.split("\n\n", 1)[0].split())

    def parse(self, raw: Mapping[str, Any] | Args) -> Args:
        """``raw`` (a transport's plain map) as this operation's arguments, or
        ``InvalidArgument`` naming the first field that is wrong."""
        if isinstance(raw, self.args):
            return raw
        if not isinstance(raw, Mapping):
            raise InvalidArgument("args", repr(raw)[:80], "must be a map of argument names")
        try:
            return self.args.model_validate(dict(raw))
        except ValidationError as exc:
            raise _invalid(self.name, exc) from None

    def run(self, ctx: Context, args: Args) -> Result:
        """The operation on ``ctx``'s world; one that writes is refused (``JournalDamaged``)
        while a check's damage mark is in the world (``world._repair.DAMAGE_MARK``: one
        ``stat`` while there is none), whichever front end asks."""
        if self.writes:
            from world._repair import refuse_if_damaged

            refuse_if_damaged(ctx.world.path)
        return self.fn(ctx, args)

    def reply(self, result: Result) -> dict[str, Any]:
        """The result's JSON form, as transports carry it."""
        return result.model_dump(mode="json", by_alias=True)

    def answer(self, raw: Any) -> Result:
        """A transport's reply as this operation's result."""
        return self.result.model_validate(raw)


REGISTRY: Final[dict[str, Operation]] = {}
"""Every operation by name, filled as the family modules (``world.ops._*``) are imported."""


def operation(
    name: str,
    *,
    writes: bool = False,
    off_loop: Callable[[Any], bool] | None = None,
    server_files: bool = False,
) -> Callable[[Callable[[Context, Any], Any]], Callable[[Context, Any], Any]]:
    """Register ``fn(ctx, args: SomeArgs) -> SomeResult`` as operation ``name``; the models
    are read from its annotations."""

    def register(fn: Callable[[Context, Any], Any]) -> Callable[[Context, Any], Any]:
        hints = get_type_hints(fn)
        args_type, result_type = hints["args"], hints["return"]
        if name in REGISTRY:
            raise ValueError(f"operation {name} is defined twice")
        REGISTRY[name] = Operation(
            name,
            fn,
            args_type,
            result_type,
            writes,
            off_loop or _never,
            server_files,
        )
        return fn

    return register


def lookup(name: Any) -> Operation:
    """The operation called ``name``, or ``UnknownName`` listing them all (the registry is
    filled when ``world.ops`` is imported)."""
    found = REGISTRY.get(name) if isinstance(name, str) else None
    if found is None:
        raise UnknownName("operation", str(name), sorted(REGISTRY))
    return found


def _invalid(op: str, exc: ValidationError) -> InvalidArgument:
    """Pydantic's first complaint as ``InvalidArgument(field, value, reason)``."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "args"
    value = first.get("input")
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        reason = f"{op} takes no argument {where}"
    elif kind == "missing":
        reason = f"{op} needs it"
    else:
        reason = str(first.get("msg", "is not valid"))
    shown = "<missing>" if kind == "missing" else repr(value)[:80]
    return InvalidArgument(where, shown, reason)
