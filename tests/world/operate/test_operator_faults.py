"""The operator's records under a failing disk: ``deadletter.retried``, ``deadletter.dropped``,
``run.cancelled`` and ``effect.approval``, each with an ``EIO`` and an ``ENOSPC`` at every
durable operation its call makes (``world._fileio``'s fault hook). A call that raised left
nothing of its act (the letter is still kept, the run still live, the intent still parked);
a call that returned is durable; either way the world reopens and replays exactly.

(The crash and power-loss matrices drive a counter world, which can neither refuse nor park;
these acts commit through the same ``World.commit`` as a send.)
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from plans_kit import await_receipt, chain, end, http_get, http_grant, plan, plan_world

from air.errors import WorldError
from world import World
from world import _fileio as fileio
from world.effects import decide_parked
from world.history import verify_world
from world.operate import cancel_run

from worldkit import ROOT

GO = "t/Go@1"
ACCOUNT_EVENT = "demo/AccountEvent@1"


def _account(folder: Path) -> Path:
    w = folder / "account"
    with World.create(w, ROOT / "manifests" / "account") as world:
        world.send(ACCOUNT_EVENT, {"key": "z", "op": {"$tag": "Withdraw", "$value": 1}})
        world.run_until_idle()
    return w


def _parked(folder: Path) -> Path:
    fetch = [
        http_get("fetch", {"ref": "@plan.input.url"}, "req"),
        await_receipt("wait", "req", "r"),
    ]
    air = plan_world(
        folder / "air",
        schemas={GO: {"record": {"url": "text"}}},
        plans=[plan("t/go@1", GO, [*fetch, end()], chain("fetch", "wait", "end"))],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=[http_grant(["127.0.0.1"])],
        rules=[{"when": {"effect_kind": "http.request"}, "decision": "require_approval"}],
    )
    w = folder / "plans"
    with World.create(w, air) as world:
        world.send(GO, {"url": "http://127.0.0.1:9/x"})
        world.run_until_idle()
    return w


def _letter_id(world: World) -> str:
    (letter,) = world.kernel.dead_letters.letters
    return letter.id


def _parked_hash(world: World) -> str:
    (intent,) = world.kernel.effects.parked()
    return intent.intent_hash.hex()


# (name, the world, the act, whether the act is in the reopened world)
ACTS: list[
    tuple[str, Callable[[Path], Path], Callable[[World], object], Callable[[World], bool]]
] = [
    (
        "retry",
        _account,
        lambda w: w.retry_dead_letter(_letter_id(w)),
        lambda w: not w.kernel.dead_letters.letters,
    ),
    (
        "drop",
        _account,
        lambda w: w.drop_dead_letter(_letter_id(w)),
        lambda w: not w.kernel.dead_letters.letters,
    ),
    (
        "cancel",
        _parked,
        lambda w: (cancel_run(w.kernel, "0"), w.commit()),
        lambda w: not w.kernel.plans.runs,
    ),
    (
        "approve",
        _parked,
        lambda w: decide_parked(w, _parked_hash(w), True),
        lambda w: not w.kernel.effects.parked(),
    ),
]


def _count_operations(base: Path, act: Callable[[World], object], tmp: Path) -> int:
    copy = tmp / "count"
    shutil.copytree(base, copy)
    seen = 0

    def hook(_op: str, _path: str) -> None:
        nonlocal seen
        seen += 1

    with World.open(copy) as world, fileio.fault_hook(hook):
        act(world)
    return seen


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
@pytest.mark.parametrize(("name", "make", "act", "done"), ACTS, ids=[a[0] for a in ACTS])
def test_a_failing_disk_at_every_operation_of_an_act_keeps_it_whole_or_not_at_all(
    name: str,
    make: Callable[[Path], Path],
    act: Callable[[World], object],
    done: Callable[[World], bool],
    code: int,
    tmp_path: Path,
) -> None:
    base = make(tmp_path)
    total = _count_operations(base, act, tmp_path)
    assert total >= 2  # at least the journal's write and its sync
    refused = 0
    for at in range(total):
        w = tmp_path / f"{name}-{at}"
        shutil.copytree(base, w)
        count = 0

        def hook(_op: str, path: str, at: int = at) -> None:
            nonlocal count
            count += 1
            if count - 1 == at:
                raise OSError(code, os.strerror(code), path)

        raised: Exception | None = None
        world = World.open(w)
        try:
            with fileio.fault_hook(hook):
                act(world)
        except WorldError as exc:
            raised = exc
        finally:
            with contextlib.suppress(WorldError):  # the close's checkpoint may meet it too
                world.close()
        with World.open(w, readonly=True) as reopened:
            happened = done(reopened)
        if raised is not None:
            refused += 1
            assert not happened, (name, at, raised)  # refused: nothing of it is kept
        else:
            assert happened, (name, at)  # acknowledged: durable
        report = verify_world(w)
        assert report.divergence is None, (name, at)
    assert refused > 0  # the faults reached the act's own writes
