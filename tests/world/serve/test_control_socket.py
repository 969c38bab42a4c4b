"""The control socket of a served world (issue 20, item 3): a client talks only to its own
world's server; a full server says it is busy instead of resetting the connection, and idle
connections are let go; a failing disk costs the request that met it, not the service.

Every wait is bounded (``WAIT_S``) and none is an assertion: the idle clock is the server's
own, moved by the test, not the wall clock.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from typer.testing import CliRunner

from cli.main import app
from world import World
from world import _fileio as fileio
from world.errors import ProtocolError, ServedError, SocketNotTrusted
from world.serve import Client, ServeReport, _server, serve, served, socket_path
from world.serve._protocol import PROTOCOL_VERSION

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

WAIT_S = 20.0
runner = CliRunner()


class Served:
    """``serve`` on a thread, with its report kept."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.errors: list[BaseException] = []
        self.report: ServeReport | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(WAIT_S)
        assert self.errors == []

    def _run(self) -> None:
        try:
            self.report = serve(
                self.path, stop_event=self.stop_event, on_listening=lambda _p: self.ready.set()
            )
        except BaseException as exc:
            self.errors.append(exc)
            self.ready.set()

    def client(self) -> Client:
        return Client(socket_path(self.path), timeout_s=WAIT_S)

    def stop(self) -> ServeReport:
        self.stop_event.set()
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive()
        assert self.errors == []
        assert self.report is not None
        return self.report


def _world(path: Path) -> Path:
    World.create(path, COUNTER_AIR).close()
    return path


@pytest.fixture
def served_world(tmp_path: Path) -> Iterator[Served]:
    server = Served(_world(tmp_path / "w"))
    yield server
    if server.thread.is_alive():
        server.stop()


def events_in(world: Path) -> int:
    with World.open(world, readonly=True) as opened:
        return sum(1 for r in opened.journal.read(0) if r.kind == "event.in")


def _send_argv(world: Path, key: str = "k") -> list[str]:
    return ["send", str(world), EVENT, json.dumps(add(key, 1))]


# --- (a) only this world's server -------------------------------------------------------------


def _symlink(a: Path, b: Path) -> None:
    socket_path(a).symlink_to(socket_path(b))


def _hard_link(a: Path, b: Path) -> None:
    os.link(socket_path(b), socket_path(a))


WAYS: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "a symlink to another world's socket": (_symlink, "symlink"),
    "a hard link to another world's socket": (_hard_link, "serves"),
}


@pytest.mark.parametrize("way", list(WAYS))
def test_a_socket_that_is_another_worlds_is_refused_and_nothing_is_delivered(
    served_world: Served, tmp_path: Path, way: str
) -> None:
    plant, why = WAYS[way]
    a = _world(tmp_path / "a")
    plant(a, served_world.path)
    with pytest.raises(SocketNotTrusted) as caught, Client(socket_path(a), timeout_s=WAIT_S) as c:
        c.call("events.send", schema=EVENT, values=[add("k", 1)])
    assert caught.value.path == str(socket_path(a))
    assert why in caught.value.reason
    result = runner.invoke(app, _send_argv(a))
    assert result.exit_code == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: SocketNotTrusted: ")
    assert str(socket_path(a)) in line
    served_world.stop()
    assert events_in(served_world.path) == 0  # nothing went to B
    assert events_in(a) == 0  # nor, behind the user's back, to A


def test_a_socket_of_another_user_is_refused(
    served_world: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = os.stat(socket_path(served_world.path)).st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    with pytest.raises(SocketNotTrusted) as caught:
        served(served_world.path)
    assert caught.value.reason == f"owned by uid {owner}, not {owner + 1}"
    with pytest.raises(SocketNotTrusted), served_world.client() as client:
        client.call("world.info")


def test_a_server_of_another_user_is_refused_by_its_peer_credentials(
    served_world: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    from world.serve import _protocol

    if getattr(socket, "SO_PEERCRED", None) is None:
        pytest.skip("no peer credentials on this OS")
    owner = os.getuid()
    monkeypatch.setattr(_protocol, "_check_socket_file", lambda _path: None)
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    with pytest.raises(SocketNotTrusted) as caught, served_world.client() as client:
        client.call("world.info")
    assert caught.value.reason == f"its server runs as uid {owner}, not {owner + 1}"


def test_a_world_named_through_a_symlinked_folder_is_still_its_own(
    served_world: Served, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(served_world.path)
    result = runner.invoke(app, [*_send_argv(link), "--json"])
    assert (result.exit_code, json.loads(result.stdout)) == (
        0,
        {"ok": True, "seqs": [1], "duplicates": 0, "journaled": [1, 1]},
    )


def test_hello_names_the_folder_served_the_version_and_every_operation(
    served_world: Served,
) -> None:
    from world.ops import REGISTRY

    with served_world.client() as client:
        hello = client.call("hello")
    found = os.stat(served_world.path)
    assert hello == {
        "world": [found.st_dev, found.st_ino],
        "path": str(served_world.path),
        "version": PROTOCOL_VERSION,
        "ops": sorted(REGISTRY),
    }
    assert {"events.send", "runs.ls", "cells.show", "journal.tail"} <= set(hello["ops"])


def test_a_symlink_in_place_of_the_socket_is_not_served_on(tmp_path: Path) -> None:
    from air.errors import InvalidArgument

    a = _world(tmp_path / "a")
    socket_path(a).symlink_to(tmp_path / "nowhere")
    with pytest.raises(InvalidArgument):
        serve(a, stop_event=threading.Event())
    with pytest.raises(SocketNotTrusted):
        served(a)


# --- (b) a bounded number of connections, none idle for ever ---------------------------------


class Clock:
    """The server's idle clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def small_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Served, Clock]]:
    clock = Clock()
    monkeypatch.setattr(_server, "CLIENTS_MAX", 3)
    monkeypatch.setattr(_server, "_now", clock)
    server = Served(_world(tmp_path / "w"))
    yield server, clock
    if server.thread.is_alive():
        server.stop()


def _idle(world: Path, count: int) -> list[socket.socket]:
    """``count`` connections that never send a byte (half-open, as far as the server knows)."""
    conns = []
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(socket_path(world)))  # blocking: waits for room in the queue
        sock.settimeout(WAIT_S)
        conns.append(sock)
    return conns


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "closed before a whole reply"
        data += chunk
    return data


def _read_reply(sock: socket.socket) -> dict[str, Any]:
    """One reply frame, exactly (a following one stays unread)."""
    (length,) = struct.unpack(">I", _read_exact(sock, 4))
    reply: dict[str, Any] = msgpack.unpackb(_read_exact(sock, length), raw=False)
    return reply


def test_a_full_server_answers_busy_instead_of_resetting_the_connection(
    small_server: tuple[Served, Clock],
) -> None:
    server, _clock = small_server
    idle = _idle(server.path, 3 + 20)  # 3 kept, 20 more answered busy and closed
    try:
        for turned_away in idle[3:]:
            reply = _read_reply(turned_away)
            assert (reply["ok"], reply["error"]["class"]) == (False, "ServerBusy")
            assert turned_away.recv(1) == b""  # then closed
        with pytest.raises(ServedError) as caught, server.client() as client:
            client.call("events.send", schema=EVENT, values=[add("k", 1)])
        assert (caught.value.error_class, caught.value.fields) == ("ServerBusy", {"clients_max": 3})
        result = runner.invoke(app, _send_argv(server.path))
        assert result.exit_code == 1
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("error: ServerBusy: ")
        assert "reset" not in line
    finally:
        for sock in idle:
            sock.close()
    server.stop()
    assert events_in(server.path) == 0


def test_idle_connections_are_closed_after_idle_s_and_the_next_client_is_served(
    small_server: tuple[Served, Clock],
) -> None:
    server, clock = small_server
    kept = server.client()
    kept.call("world.info")  # a client that keeps its connection, then falls silent
    idle = _idle(server.path, 2)
    try:
        with pytest.raises(ServedError), server.client() as client:
            client.call("world.info")  # full: the kept one and the two idle ones
        clock.now += _server.IDLE_S + 1
        for sock in idle:
            assert sock.recv(1) == b""  # closed by the server (recv waits for it, bounded)
        assert kept.call("world.info")["journal_seq_next"] == 1  # a new connection, transparently
        result = runner.invoke(app, [*_send_argv(server.path), "--json"])
        assert (result.exit_code, json.loads(result.stdout)) == (
            0,
            {"ok": True, "seqs": [1], "duplicates": 0, "journaled": [1, 1]},
        )
    finally:
        kept.close()
        for sock in idle:
            sock.close()


def test_a_connection_that_talks_is_not_idle(small_server: tuple[Served, Clock]) -> None:
    server, clock = small_server
    with server.client() as client:
        for n in range(3):
            clock.now += _server.IDLE_S / 2  # never IDLE_S without a byte moving
            assert client.call("events.send", schema=EVENT, values=[add("k", n)])["seqs"]


def test_slow_requests_are_closed_frame_s_after_their_first_byte_however_often_bytes_come(
    small_server: tuple[Served, Clock],
) -> None:
    """Two connections that send a request a byte at a time, one byte every FRAME_S / 2 (so
    never idle), hold two of the three slots; the third, a normal client, is answered
    meanwhile; FRAME_S after their first byte they are told and closed, and new clients get
    their slots."""
    server, clock = small_server
    kept = server.client()
    slow = _idle(server.path, 2)
    frame = struct.pack(">I", 40) + b"\x80" * 40  # a whole request would be 44 bytes
    try:
        for sock in slow:
            sock.sendall(frame[:1])
        for step in range(1, 3):
            kept.call("world.info")  # twice: the loop has read what was sent before
            assert kept.call("world.info")["journal_seq_next"] == 1  # answered while held
            clock.now += _server.FRAME_S / 2 - 1
            for sock in slow:
                sock.sendall(frame[step : step + 1])  # a byte: never IDLE_S without one
        with pytest.raises(ServedError) as busy, server.client() as client:
            client.call("world.info")  # full: the kept one and the two slow ones
        assert busy.value.error_class == "ServerBusy"
        kept.call("world.info")
        kept.call("world.info")
        clock.now += 3  # past FRAME_S from their first byte (two bytes later)
        for sock in slow:
            reply = _read_reply(sock)
            assert (reply["ok"], reply["error"]["class"]) == (False, "ProtocolError")
            assert reply["error"]["code"] == "too_slow"
            assert sock.recv(1) == b""  # then closed
        result = runner.invoke(app, [*_send_argv(server.path), "--json"])
        assert (result.exit_code, json.loads(result.stdout)["seqs"]) == (0, [1])
    finally:
        kept.close()
        for sock in slow:
            sock.close()


# --- (c) a failing disk costs the request, not the server -----------------------------------


class FailOnce:
    """A fault hook: the ``nth`` journal ``fdatasync`` from now on fails with ``code``."""

    def __init__(self, world: Path, nth: int, code: int = errno.ENOSPC) -> None:
        self.journal = str(world / "journal")
        self.left = nth
        self.code = code
        self.failed = threading.Event()

    def __call__(self, op: str, path: str) -> None:
        if op != "fdatasync" or not path.startswith(self.journal) or self.failed.is_set():
            return
        self.left -= 1
        if self.left == 0:
            self.failed.set()
            raise OSError(self.code, os.strerror(self.code), path)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_a_send_whose_commit_fails_is_answered_with_the_error_and_the_world_serves_on(
    served_world: Served, code: int
) -> None:
    hook = FailOnce(served_world.path, 1, code)
    with served_world.client() as client, fileio.fault_hook(hook):
        with pytest.raises(ServedError) as caught:
            client.call("events.send", schema=EVENT, values=[add("lost", 5)])
        assert caught.value.error_class == "JournalWriteFailed"
        assert caught.value.fields["errno_name"] == errno.errorcode[code]
        assert client.call("events.send", schema=EVENT, values=[add("kept", 2)])["seqs"] == [1]
        assert client.call("world.state", reducer=COUNTER, key="kept")["state"] == {
            "count": 2,
            "events": 1,
        }
        assert client.call("world.state", reducer=COUNTER, key="lost")["state"] is None
    assert served_world.thread.is_alive()
    report = served_world.stop()
    assert any("reopened the world" in notice for notice in report.notices)
    assert events_in(served_world.path) == 1


def test_a_cycle_whose_commit_fails_is_noted_and_its_work_done_after_a_reopen(
    served_world: Served,
) -> None:
    hook = FailOnce(served_world.path, 2)  # the send's commit passes, its steps' commit fails
    with served_world.client() as client, fileio.fault_hook(hook):
        assert client.call("events.send", schema=EVENT, values=[add("k", 4)])["seqs"] == [1]
        assert hook.failed.wait(WAIT_S)
        assert client.call("world.state", reducer=COUNTER, key="k")["state"] == {
            "count": 4,
            "events": 1,
        }
    report = served_world.stop()
    assert any("the world's loop failed" in notice for notice in report.notices)
    assert any("reopened the world" in notice for notice in report.notices)
    with World.open(served_world.path, readonly=True) as world:
        assert world.state(COUNTER, "k") == {"count": 4, "events": 1}


def test_a_request_right_behind_a_failed_one_is_answered_by_the_reopened_world(
    served_world: Served,
) -> None:
    def send(key: str) -> bytes:
        body = msgpack.packb(
            {
                "v": PROTOCOL_VERSION,
                "op": "events.send",
                "args": {"schema": EVENT, "values": [add(key, 1)]},
            }
        )
        return struct.pack(">I", len(body)) + body

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(WAIT_S)
    sock.connect(str(socket_path(served_world.path)))
    with sock, fileio.fault_hook(FailOnce(served_world.path, 1)):
        sock.sendall(send("lost") + send("kept"))  # both frames in one write: one turn
        failed, answered = _read_reply(sock), _read_reply(sock)
    assert (failed["ok"], failed["error"]["class"]) == (False, "JournalWriteFailed")
    assert (answered["ok"], answered["result"]) == (
        True,
        {
            "seqs": [1],
            "duplicates": 0,
            "journaled": [1, 1],
            "batch": None,
            "staged": 0,
            "partitions": None,
        },
    )
    served_world.stop()
    assert events_in(served_world.path) == 1


def test_an_export_through_a_served_world_refuses_to_write_over_a_file_too(
    served_world: Served, tmp_path: Path
) -> None:
    import cli.moves  # noqa: F401  (registers cells export)

    out = tmp_path / "a.cbor"
    out.write_bytes(b"precious")
    argv = ["cells", "export", str(served_world.path), COUNTER, "a", "-o", str(out)]
    result = runner.invoke(app, argv)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: OutputExists: ")
    assert out.read_bytes() == b"precious"


# --- a server that goes away mid-request ----------------------------------------------------


def _greets_then_drops(world: Path, listener: socket.socket) -> None:
    """Answer ``hello`` as the world's server would, then close on the next request unread."""
    from world.serve._protocol import folder_id

    conn, _ = listener.accept()
    with conn:
        _read_exact(conn, struct.unpack(">I", _read_exact(conn, 4))[0])
        hello = {"world": folder_id(world), "path": ""}
        body = msgpack.packb({"v": PROTOCOL_VERSION, "ok": True, "result": hello})
        conn.sendall(struct.pack(">I", len(body)) + body)
        _read_exact(conn, struct.unpack(">I", _read_exact(conn, 4))[0])  # the send: dropped


@pytest.mark.parametrize(
    ("op", "advice"), [("events.send", True), ("cells.ls", False)], ids=["send", "other"]
)
def test_a_server_gone_after_the_request_says_it_may_have_been_carried_out(
    tmp_path: Path, op: str, advice: bool
) -> None:
    world = _world(tmp_path / "w")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(socket_path(world)))
    listener.listen(1)
    server = threading.Thread(target=_greets_then_drops, args=(world, listener), daemon=True)
    server.start()
    try:
        with (
            Client(socket_path(world), timeout_s=WAIT_S) as client,
            pytest.raises(ProtocolError) as info,
        ):
            client.call(op, schema=EVENT, values=[add("k", 1)])
    finally:
        server.join(WAIT_S)
        listener.close()
    assert info.value.code == "closed"
    assert f"before replying to {op!r}, which it may or may not have carried out" in str(info.value)
    assert ("same event ids" in str(info.value)) is advice
