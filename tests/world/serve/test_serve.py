"""A served world (``world serve``): concurrent clients, hostile frames, the CLI over the socket,
and a stop that drains and checkpoints. Every wait is bounded."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import typer
from typer.testing import CliRunner

from cli import core
from cli.main import app
from cli.serve import serve as serve_command
from world import World
from world.errors import ServedError, WorldLocked
from world.serve import PROTOCOL_VERSION, REQUEST_BYTES_MAX, Client, serve, served, socket_path

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT, add

WAIT_S = 20.0
runner = CliRunner()
# `serve` is registered in cli.main by the lead; until then it runs from a local app.
local = typer.Typer()
local.command("serve")(serve_command)
local.command("info")(core.info)


class Served:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            serve(self.path, stop_event=self.stop_event, on_listening=lambda _p: self.ready.set())
        except BaseException as exc:
            self.errors.append(exc)
            self.ready.set()

    def client(self) -> Client:
        return Client(socket_path(self.path), timeout_s=WAIT_S)

    def join(self) -> None:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive()
        assert self.errors == []


@pytest.fixture
def world_dir(tmp_path: Path) -> Path:
    w = tmp_path / "w"
    World.create(w, COUNTER_AIR).close()
    return w


@pytest.fixture
def server(world_dir: Path) -> Iterator[Served]:
    s = Served(world_dir)
    s.thread.start()
    assert s.ready.wait(WAIT_S)
    assert s.errors == []
    yield s
    s.stop_event.set()
    s.join()


def events_in(w: Path) -> int:
    with World.open(w, readonly=True) as world:
        return sum(1 for r in world.journal.read(0) if r.kind == "event.in")


def raw_conn(w: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(WAIT_S)
    sock.connect(str(socket_path(w)))
    return sock


def read_reply(sock: socket.socket) -> dict[str, object]:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before a whole reply"
        data += chunk
    reply: dict[str, object] = msgpack.unpackb(data[4:], raw=False)
    return reply


def frame(obj: object) -> bytes:
    body = msgpack.packb(obj)
    return struct.pack(">I", len(body)) + body


def test_a_served_world_takes_1000_sends_from_4_clients_with_nothing_lost(
    server: Served,
) -> None:
    seqs: list[list[int]] = [[] for _ in range(4)]
    failures: list[BaseException] = []

    def client_sends(n: int) -> None:
        try:
            with server.client() as client:
                for i in range(250):
                    seqs[n] += client.call("events.send", schema=EVENT, values=[add(f"c{n}", i)])[
                        "seqs"
                    ]
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=client_sends, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert failures == []
    assert not any(t.is_alive() for t in threads)
    every = [s for per_client in seqs for s in per_client]
    assert len(every) == len(set(every)) == 1000
    with server.client() as client:
        for n in range(4):
            state = client.call("world.state", reducer=COUNTER, key=f"c{n}")["state"]
            assert state == {"count": sum(range(250)), "events": 250}
        assert client.call("stop")["journal_seq_next"] > max(every)
    server.join()
    assert events_in(server.path) == 1000


def test_garbage_oversized_unknown_and_torn_requests_leave_it_serving(server: Served) -> None:
    with raw_conn(server.path) as sock:  # a body that is not msgpack: the framing survives
        sock.sendall(struct.pack(">I", 3) + b"\xc1\xc1\xc1")
        assert read_reply(sock)["error"]["code"] == "malformed"  # type: ignore[index]
        sock.sendall(frame({"v": 99, "op": "world.info", "args": {}}))
        assert read_reply(sock)["error"]["code"] == "version"  # type: ignore[index]
        sock.sendall(frame([1, 2, 3]))
        assert read_reply(sock)["error"]["code"] == "malformed"  # type: ignore[index]
        sock.sendall(frame({"v": PROTOCOL_VERSION, "op": "world.info", "args": {}}))
        assert read_reply(sock)["ok"] is True
    with raw_conn(server.path) as sock:  # plain text: its first bytes read as a huge length
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        reply = read_reply(sock)
        assert reply["error"]["code"] == "too_large"  # type: ignore[index]
        assert sock.recv(10) == b""  # and the connection is closed
    with raw_conn(server.path) as sock:
        sock.sendall(struct.pack(">I", REQUEST_BYTES_MAX + 1))
        assert read_reply(sock)["error"]["code"] == "too_large"  # type: ignore[index]
    with raw_conn(server.path) as sock:  # gone mid-frame
        sock.sendall(struct.pack(">I", 1000) + b"\x85" + b"x" * 100)
    with raw_conn(server.path) as sock:  # gone before reading its reply
        sock.sendall(
            frame(
                {
                    "v": PROTOCOL_VERSION,
                    "op": "events.send",
                    "args": {"schema": EVENT, "values": [add("a", 5)]},
                }
            )
        )
    with server.client() as client:
        with pytest.raises(ServedError) as unknown:
            client.call("launch")
        assert (unknown.value.error_class, unknown.value.fields["name"]) == (
            "UnknownName",
            "launch",
        )
        with pytest.raises(ServedError) as bad_args:
            client.call("events.send", schema=EVENT, values="nope")
        assert bad_args.value.error_class == "InvalidArgument"
        with pytest.raises(ServedError) as bad_event:
            client.call("events.send", schema=EVENT, values=[add("a", 1), {"key": 1}])
        assert (bad_event.value.error_class, bad_event.value.fields["index"]) == (
            "EventRejected",
            1,
        )
        client.call("events.send", schema=EVENT, values=[add("a", 2)])
        assert client.call("world.state", reducer=COUNTER, key="a")["state"] == {
            "count": 7,
            "events": 2,
        }
    assert served(server.path)


def test_the_cli_talks_to_a_served_world_through_its_socket(server: Served) -> None:
    w = str(server.path)
    result = runner.invoke(app, ["send", w, EVENT, json.dumps(add("k", 4)), "--json"])
    assert (result.exit_code, json.loads(result.stdout)) == (
        0,
        {"ok": True, "seqs": [1], "duplicates": 0, "journaled": [1, 1]},
    )
    lines = server.path.parent / "events.jsonl"
    lines.write_text(json.dumps(add("k", 1)) + "\n" + json.dumps({"key": "k"}) + "\n")
    result = runner.invoke(app, ["send", w, EVENT, "--file", str(lines)])
    assert result.exit_code == 1
    assert f"{lines}:2:" in result.stderr  # named by file and line, as without a server
    result = runner.invoke(app, ["state", w, COUNTER, "--key", "k", "--json"])
    answer = json.loads(result.stdout)
    assert (answer["ok"], answer["state"]) == (True, {"count": 4, "events": 1})
    assert answer["state_cbor"] == "a265636f756e7404666576656e747301"  # as the kernel holds it
    result = runner.invoke(app, ["state", w, COUNTER, "--key", "k"])
    assert (result.exit_code, json.loads(result.stdout)) == (0, {"count": 4, "events": 1})
    info = json.loads(runner.invoke(app, ["info", w, "--json"]).stdout)
    assert (info["path"], info["journal_seq_next"], info["reducers"][COUNTER]["cells"]) == (w, 3, 1)
    assert runner.invoke(app, ["info", w]).exit_code == 0
    listing = json.loads(runner.invoke(app, ["cells", "ls", w, COUNTER, "--json"]).stdout)
    assert [(c["key"], c["state"]) for c in listing["cells"]] == [("k", {"count": 4, "events": 1})]
    assert runner.invoke(app, ["cells", "ls", w, COUNTER]).exit_code == 0
    snap = json.loads(runner.invoke(app, ["snapshot", w, "--json"]).stdout)["snapshot"]
    assert (server.path / "snapshots" / "latest").read_text() == snap
    result = runner.invoke(app, ["state", w, "demo/Nope@1", "--json"])
    assert (result.exit_code, json.loads(result.stdout)["code"]) == (1, "UnknownName")
    assert runner.invoke(app, ["step", w]).exit_code == 1  # not routed: the lock is held


def test_stop_drains_checkpoints_and_removes_the_0600_socket(server: Served) -> None:
    sock_file = socket_path(server.path)
    assert stat.S_IMODE(sock_file.stat().st_mode) == 0o600
    with server.client() as client:
        client.call("events.send", schema=EVENT, values=[add(f"k{i}", 1) for i in range(500)])
    result = runner.invoke(local, ["serve", str(server.path), "--stop", "--json"])
    assert result.exit_code == 0
    stopped = json.loads(result.stdout)
    server.join()
    assert not os.path.lexists(sock_file)
    assert not served(server.path)
    assert (server.path / "snapshots" / "latest").read_text() == stopped["snapshot"]
    with World.open(server.path, readonly=True) as world:
        assert world.cell_count(COUNTER) == 500
        assert world.kernel.idle()
        assert world.journal.seq_next == stopped["journal_seq_next"]
    result = runner.invoke(local, ["serve", str(server.path), "--stop"])
    assert result.exit_code == 1  # nothing to stop now: one line, exit 1
    assert "no server" in result.stderr


def test_a_stale_socket_is_replaced_and_a_live_one_is_not(world_dir: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(socket_path(world_dir)))  # closed without unlinking: a crashed server
    assert not served(world_dir)
    s = Served(world_dir)
    s.thread.start()
    assert s.ready.wait(WAIT_S)
    assert served(world_dir)
    with pytest.raises(WorldLocked):  # a second server: the world's write lock keeps it out
        serve(world_dir, stop_event=threading.Event())
    assert served(world_dir)
    s.stop_event.set()
    s.join()


def test_serve_in_a_subprocess_stops_on_sigterm_with_a_checkpoint(world_dir: Path) -> None:
    code = (
        "import sys, typer; from cli.serve import serve; a = typer.Typer(); "
        "a.command('serve')(serve); a.command('x')(lambda: None); a()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", str(world_dir)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            assert sel.select(WAIT_S), "no 'serving' line"
        assert proc.stdout.readline().startswith(f"serving {world_dir}")
        with Client(socket_path(world_dir), timeout_s=WAIT_S) as client:
            client.call("events.send", schema=EVENT, values=[add("s", 3)])
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, err
    assert "stopped after" in out
    assert not os.path.lexists(socket_path(world_dir))
    with World.open(world_dir, readonly=True) as world:
        assert world.state(COUNTER, "s") == {"count": 3, "events": 1}


def test_a_stop_right_behind_a_send_runs_that_send_first(server: Served) -> None:
    values = [add(f"k{i}", 1) for i in range(300)]
    send = {"v": PROTOCOL_VERSION, "op": "events.send", "args": {"schema": EVENT, "values": values}}
    with raw_conn(server.path) as sock:  # both frames in one write: no tick runs between them
        sock.sendall(frame(send) + frame({"v": PROTOCOL_VERSION, "op": "stop", "args": {}}))
        assert read_reply(sock)["ok"] is True
        stopped = read_reply(sock)
    server.join()
    assert stopped["ok"] is True
    assert stopped["result"]["steps"] > 0  # type: ignore[index]
    with World.open(server.path, readonly=True) as world:
        assert (world.cell_count(COUNTER), world.kernel.idle()) == (300, True)


def test_a_served_export_writes_over_a_file_only_with_force(
    server: Served, world_dir: Path, tmp_path: Path
) -> None:
    from world.errors import OutputExists

    out = tmp_path / "a.cbor"
    out.write_bytes(b"keep me")
    with server.client() as client:
        client.call("events.send", schema=EVENT, values=[add("a", 3)])
        args = {"reducer": COUNTER, "out": str(out), "all": False, "key": "a"}
        with pytest.raises(ServedError) as refused:
            client.call("cells.export", **args)
        assert refused.value.error_class == OutputExists.__name__
        assert out.read_bytes() == b"keep me"
        assert client.call("cells.export", **args, force=True)["cells"] == 1
    assert out.read_bytes() != b"keep me"
