"""One contract for every handle of ``world.ops``: the same script of operations run against
a world in process (``world.ops.open``) and against the same world served (``world serve``,
through ``world.serve.connect``: its socket, and its HTTP front) gives the same results and
the same errors, field by field (over HTTP, less the operations that name the server's files:
``server_files``).

Two worlds: the bundled counter (events, cells, the journal, history, exports, snapshots,
proposals) and a plan world whose one run's GET a policy parks for approval (runs, effects,
a denial, a cancel). A local handle runs no work when it reads (reading changes nothing), so
the script settles the world (``run_until_idle``) where a served world has run it already.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from plans_kit import await_receipt, chain, end, http_get, http_grant, plan, plan_world, ref

from world import World
from world.cluster import PartitionedHandle, init_cluster, open_cluster, partition_dir
from world.ops import REGISTRY, Handle, LocalHandle, RemoteHandle
from world.ops import open as open_world
from world.serve import HttpHandle, HttpSettings, connect, serve

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

WAIT_S = 30.0
GO = "t/Go@1"

Settle = Callable[[Handle], None]


TOKEN = "a-test-token-of-enough-length"


class _Served:
    """``world serve`` on a thread; with ``http``, on loopback HTTP too (``url``)."""

    def __init__(self, path: Path, *, http: bool = False) -> None:
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.errors: list[BaseException] = []
        self.url = ""
        self.http = HttpSettings("127.0.0.1", 0, TOKEN, "test") if http else None
        self.thread = threading.Thread(target=self._run, args=(path,), daemon=True)
        self.thread.start()
        assert self.ready.wait(WAIT_S)
        assert self.errors == []

    def _on_http(self, url: str) -> None:
        self.url = url

    def _run(self, path: Path) -> None:
        try:
            serve(
                path,
                stop_event=self.stop_event,
                on_listening=lambda _p: self.ready.set(),
                http=self.http,
                on_http=self._on_http,
            )
        except BaseException as exc:
            self.errors.append(exc)
            self.ready.set()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive()
        assert self.errors == []


def _settle(handle: Handle) -> None:
    if isinstance(handle, LocalHandle):
        handle.world.run_until_idle()
    elif isinstance(handle, PartitionedHandle) and handle.cluster is not None:
        handle.run_until_idle()


@pytest.fixture(params=["local", "socket", "http", "partitioned"])
def asked(request: pytest.FixtureRequest) -> Iterator[Callable[[Path], Handle]]:
    """Opens a world folder as one kind of handle; closed (and its server stopped) after.
    "partitioned": the folder is partition 0 of a partitioned world of one partition, asked
    through that world's handle (``world.cluster.open_cluster``)."""
    opened: list[Handle] = []
    servers: list[_Served] = []

    def ask(path: Path) -> Handle:
        if request.param == "partitioned":
            handle: Handle = open_cluster(path.parent)
        elif request.param == "socket":
            servers.append(_Served(path))
            handle = connect(path, timeout_s=WAIT_S)
        elif request.param == "http":
            servers.append(_Served(path, http=True))
            handle = connect(servers[-1].url, token=TOKEN, timeout_s=WAIT_S)
        else:
            handle = open_world(path)
        opened.append(handle)
        return handle

    yield ask
    for handle in opened:
        handle.close()
    for server in servers:
        server.stop()


def _counter(folder: Path, partitioned: bool = False) -> Path:
    """A counter world at ``folder``; ``partitioned``: partition 0 of a partitioned world of
    one partition, in ``folder``'s parent."""
    if partitioned:
        init_cluster(folder.parent, COUNTER_AIR, 1)
        return partition_dir(folder.parent, 0)
    with World.create(folder, COUNTER_AIR):
        pass
    return folder


def _unplaced(found: Any) -> Any:
    """``found`` without what only a partitioned world says: the ``partition`` of a listing's
    rows, ``partitions`` (where each event of a send went, each partition's figures) and a
    send's ``journaled`` span (one journal's: a partitioned world's seqs are each partition's)."""
    if isinstance(found, list):
        return [_unplaced(x) for x in found]
    if isinstance(found, dict):
        return {
            k: _unplaced(v)
            for k, v in found.items()
            if k not in ("partition", "partitions", "journaled")
        }
    return found


def _outcome(call: Callable[[], Any]) -> Any:
    """A call's result as plain JSON, or its error as (class, fields) without its message."""
    try:
        found = call()
    except Exception as exc:
        fields = {k: v for k, v in vars(exc).items() if not k.startswith("_")}
        return ["error", type(exc).__name__, json.loads(json.dumps(fields, default=str))]
    if hasattr(found, "model_dump"):
        found = found.model_dump(mode="json")
    return json.loads(json.dumps(found, default=str))


def _rooted(found: list[Any], root: Path) -> list[Any]:
    """``found`` with the folder it ran in named ``<root>``: two worlds, one script."""
    return list(json.loads(json.dumps(found).replace(str(root), "<root>")))


def counter_script(h: Handle, tmp: Path) -> list[Any]:
    out: list[Any] = []

    def step(found: Any) -> None:  # then the ready work, as a served world runs it at once
        out.append(found)
        _settle(h)

    step(_outcome(lambda: h.send(EVENT, add("a", 1), id="e-1")))
    step(_outcome(lambda: h.send_many(EVENT, [add("b", 2), add("a", 3)], ids=["e-2", None])))
    step(_outcome(lambda: h.send(EVENT, add("a", 1), id="e-1")))  # a duplicate: not journaled
    step(_outcome(lambda: h.send_many(EVENT, [add("c", 1), {"key": 5}])))  # one bad: none
    step(_outcome(lambda: h.send_many(EVENT, [])))
    step(_outcome(lambda: h.send("demo/Nope@1", {})))
    step(_outcome(lambda: h.state(COUNTER, "a")))
    step(_outcome(lambda: h.state(COUNTER, "zz")))
    step(_outcome(lambda: h.state("demo/Nope@1", "a")))
    step(_outcome(lambda: h.cells(COUNTER, limit=1)))
    step(_outcome(lambda: h.cells(COUNTER, limit=1, after="a")))
    step(_outcome(lambda: h.cells(COUNTER, limit=0)))
    step(_outcome(lambda: h.cell(COUNTER, "a")))
    step(_outcome(lambda: h.cell(COUNTER, "a", at=2)))  # after its first step
    step(_outcome(lambda: h.cell(COUNTER, "a", at=10**6)))
    step(_outcome(lambda: h.cell(COUNTER, ["not", "a", "key"])))
    step(_outcome(lambda: list(h.journal_tail())))
    step(_outcome(lambda: list(h.journal_tail(2, subject="/world/cell/**"))))
    step(_outcome(lambda: list(h.journal_tail(subject="not/a pattern["))))
    step(_outcome(lambda: list(h.cell_history(COUNTER, "a"))))
    step(_outcome(lambda: h.why(COUNTER, "a")))
    info = h.info().model_dump(mode="json")
    step({k: info[k] for k in ("journal_seq_next", "steps_total", "reducers", "runs", "effects")})
    step(_outcome(lambda: h.runs()))
    step(_outcome(lambda: h.dead_letters()))
    step(_outcome(lambda: h.dead_letter("nope")))
    step(_outcome(lambda: h.effects()))
    step(_outcome(lambda: h.proposals().model_dump(mode="json")["proposals"]))
    step(_outcome(lambda: h.propose(COUNTER_AIR)))  # the AIR it runs: nothing to propose
    step(_outcome(lambda: h.proposal(99)))
    step(_outcome(lambda: h.cells_upgrade(COUNTER, None)))
    step(_outcome(lambda: h.cells_export(COUNTER, tmp / "a.cbor", key="a")))
    step(_outcome(lambda: h.cells_export(COUNTER, tmp / "a.cbor", key="a")))  # exists
    step(_outcome(lambda: h.cells_import(tmp / "a.cbor")))
    step(_outcome(lambda: h.call("runs.ls", {"status": "bogus"})))
    step(_outcome(lambda: h.call("runs.ls", {"bogus": 1})))
    step(_outcome(lambda: h.call("no.such.op")))
    step(_outcome(lambda: h.snapshot().startswith("blake3:")))
    return out


def test_every_handle_answers_the_counter_script_alike(
    asked: Callable[[Path], Handle], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    partitioned = request.node.callspec.params["asked"] == "partitioned"
    with open_world(_counter(tmp_path / "a" / "w", partitioned)) as local:
        expected = _rooted(counter_script(local, tmp_path / "a" / "out"), tmp_path / "a")
    handle = asked(_counter(tmp_path / "b" / "w", partitioned))
    answered = _rooted(counter_script(handle, tmp_path / "b" / "out"), tmp_path / "b")
    files = {27, 30, 31, 32}  # propose, export, import name the server's files: not over HTTP
    for number, (got, want) in enumerate(zip(answered, expected, strict=True)):
        if isinstance(handle, HttpHandle) and number in files:
            assert got[:2] == ["error", "InvalidArgument"], number
            assert got[2]["name"] == "op", number
        elif isinstance(handle, PartitionedHandle) and number == 27:  # world cluster upgrade
            assert got[:2] == ["error", "WrongMode"], number
            assert "world cluster upgrade" in got[2]["mode"]
        elif isinstance(handle, PartitionedHandle):
            assert _unplaced(got) == _unplaced(want), number
        else:
            assert got == want, number
    # what the script checks, so that two equally wrong handles cannot pass
    sent, batch, again, bad, empty, unknown = expected[:6]
    assert (sent["seqs"], sent["journaled"]) == ([1], [1, 1])
    assert again == {**sent, "duplicates": 1, "journaled": []}
    assert batch["seqs"] == [3, 4]  # after the first event's step (seq 2)
    assert bad[:2] == ["error", "EventRejected"]
    assert bad[2]["index"] == 1
    assert empty[:2] == ["error", "InvalidArgument"]
    assert unknown[:2] == ["error", "EventRejected"]
    assert "demo/Nope@1" in unknown[2]["cause"]
    assert expected[6] == {"count": 4, "events": 2}
    assert expected[7] is None
    assert [c["key"] for c in expected[9]["cells"]] == ["a"]
    assert expected[9]["next_after"] == "a"
    assert expected[9]["count"] == 2
    assert expected[11][:2] == ["error", "InvalidArgument"]
    assert expected[13]["state"] == {"count": 1, "events": 1}
    assert expected[14][:2] == ["error", "SeqPastEnd"]
    assert [r["seq"] for r in expected[16]] == list(range(len(expected[16])))
    assert expected[20]["chain"]
    assert expected[20]["state"] == {"count": 4, "events": 2}
    assert expected[27][:2] == ["error", "UpgradeRefused"]
    assert expected[31][:2] == ["error", "OutputExists"]
    assert expected[33][1:] == ["InvalidArgument", expected[33][2]]
    assert expected[33][2]["name"] == "status"
    assert expected[34][2]["name"] == "bogus"
    assert expected[35][:2] == ["error", "UnknownName"]
    assert expected[36] is True


def _approval_world(folder: Path, partitioned: bool = False) -> Path:
    """Two runs whose GETs a policy parks for approval (``partitioned``: in partition 0 of a
    partitioned world of one)."""
    fetch = [http_get("fetch", ref("@plan.input.url"), "req"), await_receipt("wait", "req", "r")]
    air = plan_world(
        folder / "air",
        schemas={GO: {"record": {"url": "text"}}},
        plans=[plan("t/go@1", GO, [*fetch, end()], chain("fetch", "wait", "end"))],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=[http_grant(["127.0.0.1"])],
        rules=[{"when": {"effect_kind": "http.request"}, "decision": "require_approval"}],
    )
    if partitioned:
        init_cluster(folder / "c", air, 1)
        return partition_dir(folder / "c", 0)
    with World.create(folder / "w", air):
        pass
    return folder / "w"


def approval_script(h: Handle) -> list[Any]:
    out: list[Any] = []
    step = out.append
    h.send_many(GO, [{"url": "http://127.0.0.1:9/a"}, {"url": "http://127.0.0.1:9/b"}])
    _settle(h)
    listed = h.effects().intents
    step([(i["kind"], i["status"], i["what"], i["decision"]) for i in listed])
    step(_outcome(lambda: h.runs()))
    step(_outcome(lambda: h.runs(status="waiting")))
    step(_outcome(lambda: h.run(0)))
    step(_outcome(lambda: h.run(7)))
    first = next(i["intent_hash"] for i in listed if i["what"].endswith("/a"))
    step(_outcome(lambda: h.decide(first, False)))
    step(_outcome(lambda: h.decide(first, False)))  # no longer parked
    step(_outcome(lambda: h.decide("zzzz", True)))
    _settle(h)
    step(_outcome(lambda: h.cancel_run(1)))
    step(_outcome(lambda: h.cancel_run(1)))  # ended: refused
    step(_outcome(lambda: h.runs()))
    return out


def test_every_handle_answers_the_approval_script_alike(
    asked: Callable[[Path], Handle], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    partitioned = request.node.callspec.params["asked"] == "partitioned"
    with open_world(_approval_world(tmp_path / "a", partitioned)) as local:
        expected = _rooted(approval_script(local), tmp_path / "a")
    handle = asked(_approval_world(tmp_path / "b", partitioned))
    answered = _rooted(approval_script(handle), tmp_path / "b")
    for number, (got, want) in enumerate(zip(answered, expected, strict=True)):
        if partitioned:
            assert _unplaced(got) == _unplaced(want), number
        else:
            assert got == want, number
    assert {(kind, status) for kind, status, *_ in expected[0]} == {("http.request", "parked")}
    assert [r["status"] for r in expected[1]] == ["waiting", "waiting"]
    assert expected[3]["locals"] is not None
    assert expected[3]["effects"]
    assert expected[4][:2] == ["error", "UnknownName"]
    assert isinstance(expected[5], int)
    assert expected[6][:2] == ["error", "UnknownName"]
    assert expected[8]["run_id"] == 1
    assert len(expected[8]["intents"]) == 1
    assert expected[9][:2] == ["error", "InvalidArgument"]
    assert [r["status"] for r in expected[10]] == ["error", "cancelled"]


def test_every_operation_is_in_the_contract_scripts() -> None:
    """A new operation must be added to a script above (or say here why it is not)."""
    import inspect

    scripts = inspect.getsource(counter_script) + inspect.getsource(approval_script)
    called = {
        "events.send": "h.send",
        "world.state": "h.state(",
        "world.info": "h.info(",
        "world.snapshot": "h.snapshot(",
        "cells.ls": "h.cells(",
        "cells.show": "h.cell(",
        "cells.tail": "h.cell_history(",
        "cells.upgrade": "h.cells_upgrade(",
        "cells.export": "h.cells_export(",
        "cells.import": "h.cells_import(",
        "journal.tail": "h.journal_tail(",
        "runs.ls": "h.runs(",
        "runs.show": "h.run(",
        "runs.cancel": "h.cancel_run(",
        "dead_letters.ls": "h.dead_letters(",
        "dead_letters.show": "h.dead_letter(",
        "effects.ls": "h.effects(",
        "effects.deny": "h.decide(",
        "upgrade.ls": "h.proposals(",
        "upgrade.show": "h.proposal(",
        "upgrade.propose": "h.propose(",
        "why": "h.why(",
    }
    not_yet = {
        "dead_letters.retry": "needs a world with a dead letter: tests/world/operate/test_dead_letters_cli.py",
        "dead_letters.drop": "the same",
        "effects.approve": "an approved GET needs a live server: tests/world/operate/test_runs_cli.py",
        "upgrade.approve": "needs a second AIR: tests/world/gov/test_upgrade_apply.py",
        "upgrade.apply": "the same",
        "upgrade.shadow": "the same: tests/world/gov/test_upgrade_shadow.py",
    }
    assert set(called) | set(not_yet) == set(REGISTRY)
    for name, text in called.items():
        assert text in scripts, name


class _LosesReplies(RemoteHandle):
    """A remote handle whose connection goes after the server carried out a request, before
    its reply, at the calls numbered in ``lost`` (a server killed between commit and reply)."""

    def __init__(self, world: World, lost: set[int]) -> None:
        from world.serve import Dispatcher

        self.dispatcher = Dispatcher(world, world.run_until_idle)
        self.lost, self.calls = lost, 0

    def _transport(self, name: str, args: dict[str, Any]) -> Any:
        from world.errors import ProtocolError

        answer = self.dispatcher.answer(name, args)
        self.calls += 1
        if self.calls in self.lost:
            raise ProtocolError("closed", "the connection went before the reply")
        return answer


def test_a_remote_send_with_ids_is_sent_again_whole_when_the_reply_is_lost(
    tmp_path: Path,
) -> None:
    from world.errors import ProtocolError

    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        flaky = _LosesReplies(world, lost={1})
        sent = flaky.send_many(EVENT, [add("a", 1), add("b", 2)], ids=["x-1", "x-2"])
        assert (sent.seqs, sent.duplicates) == ([1, 2], 2)  # journaled once, then found by id
        flaky = _LosesReplies(world, lost={1, 2, 3, 4})
        with pytest.raises(ProtocolError):  # SEND_RETRIES, then the error
            flaky.send_many(EVENT, [add("c", 1)], ids=["x-3"])
        assert flaky.calls == 4
        flaky = _LosesReplies(world, lost={1})
        with pytest.raises(ProtocolError):  # no ids: never sent again (it would duplicate)
            flaky.send_many(EVENT, [add("d", 1)])
        assert flaky.calls == 1
        world.run_until_idle()
        for key in "acd":  # each once, though c was sent four times (by its id)
            assert world.state(COUNTER, key) == {"count": 1, "events": 1}, key
