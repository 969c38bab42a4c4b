"""A served world whose check finds its journal damaged takes no write until it is repaired:
every writer, on the socket and over HTTP, gets ``JournalDamaged`` naming the damage and the
repair command (HTTP 503); reads go on. ``journal verify --repair`` (the server stopped)
removes the mark, and the restarted server takes writes again."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import test_http_api
from test_http_api import TOKEN, WAIT_S

from cli.archive import verify_work
from world import World
from world._repair import DAMAGE_MARK, repair_world
from world.errors import ServedError
from world.journal import _file as file_journal
from world.serve import Client, socket_path

from worldkit import COUNTER, COUNTER_AIR, EVENT, add


class Served(test_http_api.Served):
    """A world served on a thread (``test_http_api``'s), asked on its socket and over HTTP."""

    def client(self) -> Client:
        return Client(socket_path(self.path), timeout_s=WAIT_S)

    def http(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=WAIT_S)


def _world(path: Path) -> Path:
    """A world whose journal has several sealed segments."""
    with World.create(path, COUNTER_AIR) as world:
        world.journal.close()
        world.journal = file_journal.FileJournal(path / "journal", segment_bytes_max=600)
        world.kernel.journal = world.journal
        world.kernel.recorder.journal = world.journal
        for n in range(24):
            world.send(EVENT, add(f"k{n % 3}", n + 1))
        world.run_until_idle()
    return path


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_served_world_whose_check_finds_damage_refuses_writes_and_answers_reads(
    tmp_path: Path,
) -> None:
    w = _world(tmp_path / "w")
    sealed = sorted((w / "journal").glob("*.log"))[1]
    server = Served(w)
    try:
        with server.client() as client:
            client.call("events.send", schema=EVENT, values=[add("k0", 1)])
        _flip(sealed, -5)  # bit rot in a segment the server never reads again
        said: list[str] = []
        verify_work(w, said.append)()  # one run of --verify-every's background check
        assert len(said) == 1
        assert "verify:" in said[0]
        assert (w / DAMAGE_MARK).exists()

        with server.client() as client:
            with pytest.raises(ServedError) as refused:
                client.call("events.send", schema=EVENT, values=[add("k0", 1)])
            assert refused.value.error_class == "JournalDamaged"
            assert refused.value.fields["repair"] == f"world journal verify {w} --repair"
            assert sealed.name in refused.value.fields["finding"]
            state = client.call("world.state", reducer=COUNTER, key="k0")
            assert state["state"] is not None
        with server.http() as http:
            sent = http.post(
                "/v1/ops/events.send", json={"schema": EVENT, "values": [add("k0", 1)]}
            )
            assert sent.status_code == 503, sent.text
            assert sent.json()["error"]["class"] == "JournalDamaged"
            read = http.post("/v1/ops/world.state", json={"reducer": COUNTER, "key": "k0"})
            assert read.status_code == 200, read.text
    finally:
        server.stop()

    fixed = repair_world(w, tmp_path / "backup")
    assert fixed.journal is None, "mended by the seal: nothing cut"
    assert not (w / DAMAGE_MARK).exists()
    server = Served(w)
    try:
        with server.client() as client:
            seqs = client.call("events.send", schema=EVENT, values=[add("k0", 1)])["seqs"]
            assert len(seqs) == 1
    finally:
        server.stop()


def test_a_world_open_in_process_when_a_check_finds_damage_refuses_writes_and_answers_reads(
    tmp_path: Path,
) -> None:
    """The mark is asked for by the operations layer, so an application's own handle (opened
    before the damage was found: a new one is refused at open by the journal's scan) is
    refused as a served world is; reads go on, and a repair lets it write again."""
    import world as world_face
    from world.errors import JournalDamaged

    w = _world(tmp_path / "w")
    with world_face.open(w) as handle:
        handle.send(EVENT, [add("k0", 1)][0])
        _flip(sorted((w / "journal").glob("*.log"))[1], -5)
        verify_work(w, [].append)()
        assert (w / DAMAGE_MARK).exists()
        before = {f.name: f.read_bytes() for f in (w / "journal").iterdir()}
        with pytest.raises(JournalDamaged) as refused:
            handle.send(EVENT, add("k0", 1))
        assert refused.value.repair == f"world journal verify {w} --repair"
        assert "--repair" in str(refused.value)
        assert handle.state(COUNTER, "k0") is not None
        assert {f.name: f.read_bytes() for f in (w / "journal").iterdir()} == before
    repair_world(w, tmp_path / "backup")
    with world_face.open(w) as handle:
        assert len(handle.send(EVENT, add("k0", 1)).seqs) == 1
