"""Plan runs: ``runs.ls`` (every run, live and ended), ``runs.show`` (one run's path, locals,
waits, effects and error) and ``runs.cancel`` (journaled ``run.cancelled``).

The rows are built by ``world.operate`` from the kernel (live runs) and one scan of the
journal (ended ones); what each row holds is there."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from air import cbor
from world.ops._base import Args, Context, Result, operation

__all__ = [
    "RunCancelled",
    "RunDetail",
    "RunOf",
    "RunsList",
    "RunsOf",
    "runs_cancel",
    "runs_ls",
    "runs_show",
]

RunStatus = Literal["running", "waiting", "ok", "error", "cancelled"]


class RunsOf(Args):
    status: RunStatus | None = Field(default=None, description="Only runs with this status")
    plan: str | None = Field(default=None, description="Only runs of this plan")


class RunsList(Result):
    runs: list[dict[str, Any]] = Field(
        description="{run_id, plan, status, started_seq, ended_seq, steps, waiting, waits, "
        "error_code?} each, by run id"
    )


@operation("runs.ls")
def runs_ls(ctx: Context, args: RunsOf) -> RunsList:
    """Every plan run, live (running, waiting) and ended (ok, error, cancelled)."""
    from world.operate import runs_list

    ctx.catch_up()
    world = ctx.world
    return RunsList(runs=runs_list(world.kernel, world.journal, args.status, args.plan))


class RunOf(Args):
    run: int = Field(ge=0, description="The run id")


class RunDetail(Result):
    """One run: its row (as ``runs.ls``) with its path, locals, waits, effects and error."""

    model_config = Result.model_config | {"extra": "allow"}
    run_id: int
    plan: str
    status: RunStatus
    path: list[dict[str, Any]]
    effects: list[dict[str, Any]]
    locals: Any = None
    waits: list[dict[str, Any]] | None = None


@operation("runs.show")
def runs_show(ctx: Context, args: RunOf) -> RunDetail:
    """One run: its path through the plan, locals (live), waits, effects, and error."""
    from world.operate import run_detail

    ctx.catch_up()
    world = ctx.world
    return RunDetail.model_validate(run_detail(world.kernel, world.journal, str(args.run)))


class RunCancelled(Result):
    seq: int = Field(description="The seq of the journaled run.cancelled")
    run_id: int
    plan: str
    intents: list[str] = Field(description="The intents cancelled with it")


@operation("runs.cancel", writes=True)
def runs_cancel(ctx: Context, args: RunOf) -> RunCancelled:
    """Cancel a live run: it ends cancelled, its parked and in-flight intents with it."""
    from world.operate import cancel_run

    ctx.catch_up()
    seq, body = cancel_run(ctx.world.kernel, str(args.run))
    ctx.world.commit()
    intents = [cbor.raw_to_hash(h) for h in body["intents"]]
    return RunCancelled(seq=seq, run_id=body["run_id"], plan=body["plan"], intents=intents)
