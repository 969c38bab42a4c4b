"""The reads routed through a served world (``journal tail``, ``cells show``, ``cells tail``,
``cells export``) print through the socket exactly what they print run directly on the same
world once its server stopped, in one page or in many; the new ops answer bad requests with an
error and the server keeps serving. Every wait is bounded; nothing is timed."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from test_serve import WAIT_S, frame, raw_conn, read_reply
from typer.testing import CliRunner

from cli.main import app
from world import World
from world.errors import ServedError
from world.ops import _events as _served_events
from world.ops import _journal as _served_ops
from world.serve import PROTOCOL_VERSION, Client, ServeReport, serve, served, socket_path
from world.serve import _protocol as control

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT, add

runner = CliRunner()


class Served:
    """``serve`` on a thread, keeping its report."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.errors: list[BaseException] = []
        self.report: ServeReport | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.report = serve(
                self.path, stop_event=self.stop_event, on_listening=lambda _p: self.ready.set()
            )
        except BaseException as exc:
            self.errors.append(exc)
            self.ready.set()

    def start(self) -> Served:
        self.thread.start()
        assert self.ready.wait(WAIT_S)
        assert self.errors == []
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive()
        assert self.errors == []

    def client(self) -> Client:
        return Client(socket_path(self.path), timeout_s=WAIT_S)


def build(path: Path) -> None:
    """A counter world with history: cells made, changed and one deleted, then events still
    queued, which the server runs before it answers the first read."""
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add("a", 1)), (EVENT, add("b", 5)), (EVENT, add("c", 3))])
        world.run_until_idle()
        world.send_many([(EVENT, add("a", 2)), (EVENT, {"key": "c", "op": "Clear"})])
        world.run_until_idle()
        world.send_many([(EVENT, add("a", 4)), (EVENT, add("d", 7)), (EVENT, add("b", 1))])


@pytest.fixture
def world_dir(tmp_path: Path) -> Path:
    build(tmp_path / "w")
    return tmp_path / "w"


@pytest.fixture
def server(world_dir: Path) -> Iterator[Served]:
    s = Served(world_dir).start()
    yield s
    s.stop()


@pytest.fixture
def ops_called(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ops the CLI sends (each ``Client.call``)."""
    called: list[str] = []
    original = Client.call

    def call(self: Client, op: str, **args: Any) -> Any:
        called.append(op)
        return original(self, op, **args)

    monkeypatch.setattr(Client, "call", call)
    return called


# (name, arguments after the world directory, the op it must send when served)
COMMANDS: list[tuple[str, list[str], str]] = [
    ("journal tail", ["journal", "tail"], "journal.tail"),
    ("journal tail --subject", ["journal", "tail", "--subject", "/world/cell/**"], "journal.tail"),
    ("journal tail --from --raw", ["journal", "tail", "--from", "4", "--raw"], "journal.tail"),
    (
        "journal tail --subject --from",
        ["journal", "tail", "--subject", "/world/event/**", "--from", "3"],
        "journal.tail",
    ),
    ("journal tail past the end", ["journal", "tail", "--from", "100000"], "journal.tail"),
    ("cells show", ["cells", "show", "*", COUNTER, "a"], "cells.show"),
    (
        "cells show --json --raw",
        ["cells", "show", "*", COUNTER, "a", "--json", "--raw"],
        "cells.show",
    ),
    ("cells show a deleted cell", ["cells", "show", "*", COUNTER, "c"], "cells.show"),
    ("cells show --json deleted", ["cells", "show", "*", COUNTER, "c", "--json"], "cells.show"),
    ("cells show --at", ["cells", "show", "*", COUNTER, "a", "--at", "4"], "cells.show"),
    (
        "cells show --at --json --raw",
        ["cells", "show", "*", COUNTER, "c", "--at", "6", "--json", "--raw"],
        "cells.show",
    ),
    (
        "cells show --at before it",
        ["cells", "show", "*", COUNTER, "d", "--at", "2", "--json"],
        "cells.show",
    ),
    (
        "cells show --at past the end",
        ["cells", "show", "*", COUNTER, "a", "--at", "9999", "--json"],
        "cells.show",
    ),
    (
        "cells show unknown reducer",
        ["cells", "show", "*", "demo/Nope@1", "a", "--json"],
        "cells.show",
    ),
    ("cells tail", ["cells", "tail", "*", COUNTER, "a"], "cells.tail"),
    ("cells tail --json", ["cells", "tail", "*", COUNTER, "a", "--json"], "cells.tail"),
    (
        "cells tail --json --raw",
        ["cells", "tail", "*", COUNTER, "c", "--json", "--raw"],
        "cells.tail",
    ),
    ("cells tail never seen", ["cells", "tail", "*", COUNTER, "zz", "--json"], "cells.tail"),
    ("cells export", ["cells", "export", "*", COUNTER, "a", "-o", "out/a.cbor"], "cells.export"),
    (
        "cells export --json",
        ["cells", "export", "*", COUNTER, "b", "-o", "out/b.cbor", "--json"],
        "cells.export",
    ),
    (
        "cells export --all",
        ["cells", "export", "*", COUNTER, "--all", "-o", "out/all"],
        "cells.export",
    ),
    (
        "cells export a deleted cell",
        ["cells", "export", "*", COUNTER, "c", "-o", "out/c.cbor", "--json"],
        "cells.export",
    ),
]


def run_all(world: Path) -> dict[str, tuple[int, str, str]]:
    """Every command of COMMANDS on ``world`` (``*`` and the word after ``tail``: the folder)."""
    results = {}
    for name, args, _op in COMMANDS:
        argv = [str(world) if a == "*" else a for a in args]
        if args[:2] == ["journal", "tail"]:
            argv.insert(2, str(world))
        result = runner.invoke(app, argv)
        results[name] = (result.exit_code, result.stdout, result.stderr)
    return results


def read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "connection closed before a whole reply"
        data += chunk
    return data


def next_reply(sock: socket.socket) -> dict[str, Any]:
    """One reply, reading no byte of the next (``read_reply`` may read past its frame)."""
    (length,) = struct.unpack(">I", read_exact(sock, 4))
    reply: dict[str, Any] = msgpack.unpackb(read_exact(sock, length), raw=False)
    return reply


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("pages", ["one page", "pages of 2 items, 3 records read"])
def test_each_routed_command_prints_through_the_server_what_it_prints_directly(
    world_dir: Path,
    tmp_path: Path,
    pages: str,
    ops_called: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if pages != "one page":
        monkeypatch.setattr(_served_ops, "PAGE_ITEMS_MAX", 2)
        monkeypatch.setattr(_served_ops, "SCAN_RECORDS_MAX", 3)
    monkeypatch.chdir(tmp_path)  # `-o out/...` is relative: the server must write it here
    (tmp_path / "out").mkdir()
    server = Served(world_dir).start()
    try:
        through_server = run_all(world_dir)
    finally:
        server.stop()
    assert server.report is not None
    assert server.report.requests >= len(COMMANDS)
    assert {op for _n, _a, op in COMMANDS} <= set(ops_called)
    exported = files_under(tmp_path / "out")
    (tmp_path / "out").rename(tmp_path / "out-served")
    (tmp_path / "out").mkdir()
    assert not served(world_dir)
    ops_called.clear()
    directly = run_all(world_dir)
    assert ops_called == []
    for name, _args, _op in COMMANDS:
        assert through_server[name] == directly[name], name
    assert exported == files_under(tmp_path / "out")
    assert {"a.cbor", "b.cbor"} <= set(exported)
    assert any(name.endswith("index.cbor") for name in exported)
    # the comparison covers the interesting cases: each kind of answer occurs
    assert directly["cells show a deleted cell"][0] == 1
    assert json.loads(directly["cells show --at past the end"][1])["error"] == "SeqPastEnd"
    assert json.loads(directly["cells show --at --json --raw"][1])["state"] is not None
    assert len(directly["journal tail"][1].splitlines()) == 17
    assert json.loads(directly["cells export --json"][1])["cells"] == 1


def test_a_pass_in_pages_is_the_pass_in_one_page(server: Served) -> None:
    with server.client() as client:
        for op, items, args in (
            ("journal.tail", "records", {"raw": False}),
            ("journal.tail", "records", {"raw": True, "subject": "/world/cell/**"}),
            ("cells.tail", "entries", {"raw": False, "reducer": COUNTER, "key": "a"}),
        ):
            (whole,) = list(client.pages(op, from_seq=0, **args))
            paged = list(client.pages(op, from_seq=0, limit=2, **args))
            assert len(paged) > 1
            assert [i for page in paged for i in page[items]] == whole[items]
            assert [page["next"] for page in paged] == sorted({page["next"] for page in paged})
            assert paged[-1]["next"] == whole["next"] == whole["end"]


class Lines:
    """JSON lines from a pipe, each waited for at most WAIT_S (the bytes are buffered here,
    so a select never waits for a line that was already read)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def next(self) -> dict[str, Any]:
        with selectors.DefaultSelector() as sel:
            sel.register(self.fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                assert sel.select(WAIT_S), "no line from journal tail --follow"
                chunk = os.read(self.fd, 1 << 16)
                assert chunk, "journal tail --follow ended"
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        shown: dict[str, Any] = json.loads(line)
        return shown


def test_a_follow_through_the_server_shows_new_records_and_ctrl_c_exits_130(
    server: Served,
) -> None:
    code = "from cli.main import main; main()"
    argv = ["journal", "tail", str(server.path), "--subject", "/world/event/**", "--follow"]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = Lines(proc.stdout.fileno())
        seen = [lines.next() for _ in range(8)]  # the 8 events sent so far
        assert [s["body"]["value"]["key"] for s in seen] == list("abcacadb")
        with server.client() as client:
            (seq,) = client.call("events.send", schema=EVENT, values=[add("e", 9)])["seqs"]
        new = lines.next()
        assert (new["seq"], new["body"]["value"]) == (seq, add("e", 9))
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 130, err
    assert "Traceback" not in err


BAD_REQUESTS: list[tuple[str, dict[str, Any], str]] = [
    ("journal.tail", {"from_seq": "0", "raw": False}, "InvalidArgument"),
    ("journal.tail", {"from_seq": -1, "raw": False}, "InvalidArgument"),
    ("journal.tail", {"from_seq": 0, "raw": "yes"}, "InvalidArgument"),
    ("journal.tail", {"from_seq": 0, "rows": 5}, "InvalidArgument"),
    ("journal.tail", {"from_seq": 0, "raw": False, "subject": 5}, "InvalidArgument"),
    ("journal.tail", {"from_seq": 0, "raw": False, "subject": "world/x"}, "UsageError"),
    ("journal.tail", {"from_seq": 0, "raw": False, "limit": 0}, "InvalidArgument"),
    ("journal.tail", {"from_seq": 0, "raw": False, "until_seq": "end"}, "InvalidArgument"),
    ("cells.tail", {"from_seq": 0, "reducer": "demo/Nope@1", "key": "a"}, "UnknownName"),
    ("cells.tail", {"from_seq": 0, "raw": False, "reducer": "demo/Nope@1"}, "InvalidArgument"),
    ("cells.tail", {"from_seq": 0, "raw": False, "reducer": COUNTER, "key": 5}, "ValueMismatch"),
    (
        "cells.tail",
        {"from_seq": None, "raw": False, "reducer": COUNTER, "key": "a"},
        "InvalidArgument",
    ),
    ("cells.show", {"reducer": 7, "key": "a"}, "InvalidArgument"),
    ("cells.show", {"reducer": COUNTER, "key": "a", "at": -1}, "InvalidArgument"),
    ("cells.show", {"reducer": COUNTER, "key": "a", "at": True}, "InvalidArgument"),
    ("cells.show", {"reducer": COUNTER, "key": "a", "at": 10**6}, "SeqPastEnd"),  # deferred
    ("cells.show", {"reducer": COUNTER, "key": ["a"], "at": 1}, "ValueMismatch"),  # deferred
    ("cells.show", {"reducer": COUNTER}, "InvalidArgument"),
    ("cells.show", {"reducer": COUNTER, "key": None}, "ValueMismatch"),
    ("cells.export", {"reducer": COUNTER, "out": "relative/a", "all": True}, "InvalidArgument"),
    (
        "cells.export",
        {"reducer": COUNTER, "out": "/tmp/x", "all": True, "key": "a"},
        "InvalidArgument",
    ),
    ("cells.export", {"reducer": COUNTER, "out": "/tmp/x", "all": False}, "InvalidArgument"),
    ("cells.export", {"reducer": COUNTER, "out": "/tmp/x"}, "InvalidArgument"),
    ("cells.export", {"reducer": "demo/Nope@1", "out": "/tmp/x", "all": True}, "UnknownName"),
    (
        "cells.export",
        {"reducer": COUNTER, "out": "/tmp/x", "all": False, "key": "zz"},
        "InvalidArgument",
    ),
    ("cells_list", {}, "UnknownName"),
]


@pytest.mark.parametrize(("op", "args", "error"), BAD_REQUESTS, ids=lambda v: str(v)[:40])
def test_a_bad_request_for_a_routed_op_gets_an_error_reply_and_the_server_serves_on(
    server: Served, op: str, args: dict[str, Any], error: str
) -> None:
    with server.client() as client:
        with pytest.raises(ServedError) as refused:
            client.call(op, **args)
        assert refused.value.error_class == error
        assert client.call("world.state", reducer=COUNTER, key="a")["state"] == {
            "count": 7,
            "events": 3,
        }
    assert served(server.path)


def test_malformed_frames_and_torn_deferred_requests_leave_it_serving(
    server: Served, tmp_path: Path
) -> None:
    with raw_conn(server.path) as sock:  # args that are not a map
        sock.sendall(frame({"v": PROTOCOL_VERSION, "op": "journal.tail", "args": [0]}))
        assert read_reply(sock)["error"]["code"] == "malformed"  # type: ignore[index]
    for op, args in (
        ("cells.export", {"reducer": COUNTER, "out": str(tmp_path / "gone"), "all": True}),
        ("cells.show", {"reducer": COUNTER, "key": "a", "at": 3}),
    ):
        with raw_conn(server.path) as sock:  # gone before its deferred reply
            sock.sendall(frame({"v": PROTOCOL_VERSION, "op": op, "args": args}))
    with raw_conn(server.path) as sock:  # gone mid-frame
        sock.sendall(frame({"v": PROTOCOL_VERSION, "op": "cells.tail", "args": {}})[:9])
    with server.client() as client:
        assert client.call("world.info")["journal_seq_next"] == 17
    assert served(server.path)


def test_replies_keep_request_order_behind_a_deferred_one(server: Served) -> None:
    def request(op: str, **args: Any) -> bytes:
        return frame({"v": PROTOCOL_VERSION, "op": op, "args": args})

    with raw_conn(server.path) as sock:  # three frames in one write
        sock.sendall(
            request("cells.show", reducer=COUNTER, key="a", at=4)
            + request("world.info")
            + request("journal.tail", from_seq=16, raw=False)
        )
        first, second, third = (next_reply(sock)["result"] for _ in range(3))
    assert first == {
        "reducer": COUNTER,
        "key": "a",
        "state": {"count": 1, "events": 1},
        "state_cbor": first["state_cbor"],
        "at": 4,
        "through": 4,
        "era": first["era"],
        "current_era": None,
    }
    assert second["journal_seq_next"] == 17
    assert [r["seq"] for r in third["records"]] == [16]


def test_a_stop_answers_the_deferred_requests_first(world_dir: Path, tmp_path: Path) -> None:
    s = Served(world_dir).start()
    out = tmp_path / "tree"
    with raw_conn(world_dir) as sock:
        sock.sendall(
            frame(
                {
                    "v": PROTOCOL_VERSION,
                    "op": "cells.export",
                    "args": {"reducer": COUNTER, "out": str(out), "all": True},
                }
            )
            + frame({"v": PROTOCOL_VERSION, "op": "stop", "args": {}})
        )
        exported = next_reply(sock)
        stopped = next_reply(sock)
    s.thread.join(WAIT_S)
    assert not s.thread.is_alive()
    assert s.errors == []
    assert exported == {"v": PROTOCOL_VERSION, "ok": True, "result": {"cells": 3, "notices": []}}
    assert stopped["ok"] is True
    assert (out / "state" / "reducers").is_dir()
    assert not os.path.lexists(socket_path(world_dir))


def test_a_client_never_builds_a_pass_from_pages_that_do_not_advance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replies = iter([{"next": 2, "end": 5}, {"next": 2, "end": 5}])
    monkeypatch.setattr(control.Client, "call", lambda self, op, **args: next(replies))
    client = control.Client("/nonexistent")
    with pytest.raises(control.ProtocolError) as stuck:
        list(client.pages("journal.tail", from_seq=0))
    assert stuck.value.code == "malformed"


def test_an_error_the_server_replied_with_names_its_class_in_text_mode_too(
    server: Served,
) -> None:
    result = runner.invoke(app, ["cells", "show", str(server.path), "demo/Nope@1", "a"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: UnknownName: unknown reducer demo/Nope@1")


def _events_file(path: Path, count: int, bad_at: int | None = None) -> Path:
    lines = [
        json.dumps({"key": "bad", "op": {"$tag": "Nope"}})
        if n == bad_at
        else json.dumps(add("z", 1))
        for n in range(count)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_send_too_big_for_one_request_goes_in_parts_and_is_journaled_whole(
    server: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "REQUEST_BYTES_MAX", 4096)  # ~100 events a request
    calls: list[dict[str, Any]] = []
    call = Client.call

    def counted(client: Client, op: str, **args: Any) -> Any:
        calls.append({"op": op, "values": len(args.get("values", ())), "more": args.get("more")})
        return call(client, op, **args)

    monkeypatch.setattr(Client, "call", counted)
    events = _events_file(tmp_path / "events.jsonl", 2000)
    result = runner.invoke(app, ["send", str(server.path), EVENT, "--file", str(events), "--json"])
    assert result.exit_code == 0, result.stderr
    seqs = json.loads(result.stdout)["seqs"]
    assert seqs == list(range(seqs[0], seqs[0] + 2000))  # one batch, in order
    sends = [c for c in calls if c["op"] == "events.send"]
    assert len(sends) > 10
    assert sum(c["values"] for c in sends) >= 2000  # a part refused locally is sent again smaller
    assert [c["more"] for c in sends][-1] is False
    with server.client() as client:
        assert client.call("world.state", reducer=COUNTER, key="z")["state"]["events"] == 2000


def test_a_bad_value_in_a_later_part_rejects_the_whole_file_by_its_line(
    server: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "REQUEST_BYTES_MAX", 4096)
    with server.client() as client:
        before = client.call("world.info")["journal_seq_next"]
    events = _events_file(tmp_path / "events.jsonl", 1000, bad_at=900)
    result = runner.invoke(app, ["send", str(server.path), EVENT, "--file", str(events)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: EventRejected: {events}:901: ")
    with server.client() as client:
        assert client.call("world.info")["journal_seq_next"] == before  # nothing journaled
        assert client.call("world.state", reducer=COUNTER, key="z")["state"] is None


def test_a_staged_batch_is_named_by_its_token_and_the_oldest_is_dropped(server: Served) -> None:
    with server.client() as client:
        first = client.call("events.send", schema=EVENT, values=[add("y", 1)], more=True)["batch"]
        later = [
            client.call("events.send", schema=EVENT, values=[add("y", 1)], more=True)["batch"]
            for _ in range(_served_events.STAGED_BATCHES_MAX)
        ]
        with pytest.raises(ServedError) as dropped:
            client.call("events.send", schema=EVENT, values=[add("y", 1)], batch=first)
        assert dropped.value.error_class == "InvalidArgument"
        with pytest.raises(ServedError) as other_schema:
            client.call("events.send", schema="demo/Other@1", values=[1], batch=later[0])
        assert other_schema.value.error_class == "InvalidArgument"
        done = client.call("events.send", schema=EVENT, values=[add("y", 1)], batch=later[1])
        assert len(done["seqs"]) == 2
        assert client.call("world.state", reducer=COUNTER, key="y")["state"]["events"] == 2
