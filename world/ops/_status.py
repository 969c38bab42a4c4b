"""The world as a whole: ``world.info`` (a summary), ``world.state`` (a reducer's state or one
cell's) and ``world.snapshot`` (a checkpoint now)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from world.ops._base import Args, Context, Result, operation

__all__ = ["Info", "NoArgs", "Snapshot", "State", "StateOf", "info", "snapshot", "state"]


class NoArgs(Args):
    """An operation that takes no argument."""


class Info(Result):
    """``world info``: the manifest, journal, reducers and cells, runs, effects, dead letters.
    The fields named here are always there; a partitioned world's partition adds
    ``partition``."""

    model_config = ConfigDict(frozen=True, extra="allow")
    path: str
    manifest_hash: str
    eras: list[dict[str, Any]]
    journal_seq_next: int
    steps_total: int
    pending_deliveries: int
    ready_entities: int
    reducers: dict[str, dict[str, Any]]
    dead_letters: list[dict[str, Any]] = Field(description="The last 20 kept, oldest first")
    dead_letters_total: int
    dead_letters_kept: int
    steps_failed: int
    runs: list[dict[str, Any]] = Field(description="The live runs")
    runs_started: int
    runs_failed: int
    effects: dict[str, int]
    effects_mode: dict[str, Any]
    logical_now_ns: int
    notices: list[str]


@operation("world.info")
def info(ctx: Context, args: NoArgs) -> Info:
    """Summarise the world: manifest, journal, reducers and cells, runs, effects, dead letters."""
    ctx.catch_up()
    return Info.model_validate(ctx.world.info())


class StateOf(Args):
    reducer: str = Field(description="The reducer (module) name")
    key: Any = Field(default=None, description="The cell's key (sugar JSON); none: non-keyed")


class State(Result):
    state: Any = Field(description="The state (sugar JSON); null: no such cell or state")
    state_cbor: str | None = Field(
        default=None,
        description="The state's canonical CBOR, hex, as cells.show gives it: where the sugar "
        "reads alike (bytes are base64 text), it tells a bytes state from a text one",
    )


@operation("world.state")
def state(ctx: Context, args: StateOf) -> State:
    """A reducer's state, or one cell's (``key``)."""
    ctx.catch_up()
    world = ctx.world
    value = world.state(args.reducer, args.key)  # the errors a wrong reducer or key gets
    key_cbor = None if args.key is None else world.key_cbor(args.reducer, args.key)
    found = None if value is None else world.kernel.cell_of(args.reducer, key_cbor)
    return State(state=value, state_cbor=None if found is None else found[1].hex())


class Snapshot(Result):
    snapshot: str = Field(description="The snapshot's address (blake3:...)")
    partitions: list[str] | None = Field(
        default=None, description="A partitioned world: each partition's (snapshot: p0's)"
    )


@operation("world.snapshot", writes=True)
def snapshot(ctx: Context, args: NoArgs) -> Snapshot:
    """Checkpoint cells, index and kernel state now."""
    return Snapshot(snapshot=ctx.world.snapshot())
