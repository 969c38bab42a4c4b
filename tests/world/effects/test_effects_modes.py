"""Effects that are not live (issue 21 item 6): ``world run|serve --effects live|replay|stub|deny``
and a fork's ``stub`` default, against a loopback HTTP server that counts every request, so
"nothing reached the outside world" is a count of zero, not an assumption.

The world is the bundled order world: its reducer asks for a fetch, a plan GETs the order's URL
and branches on the HTTP status. The parent runs live once (one request), then forks of it
re-derive the same intent (same run, same step, same hash) and answer it in each mode.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from httpkit import Answer, Loopback, loopback_fixture
from plans_kit import ORDER, ORDER_AIR, ORDER_PLACED, lines, of_kind, records
from typer.testing import CliRunner

from air import cbor
from cli.core import EFFECTS_CHOICES
from cli.main import app
from world import Engine, World
from world.effects import (
    EFFECTS_MODES,
    MODE_FILE,
    STUB_STATUS,
    ModeFile,
    choose_mode,
    read_mode_file,
    write_mode_file,
)
from world.history import fork_world, verify_world
from world.serve import Client, serve, socket_path

runner = CliRunner()
WAIT_S = 30.0


def world_cli(*args: Any) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


server = loopback_fixture({"/ok": Answer(200), "/other": Answer(200)})


@pytest.fixture
def parent(tmp_path: Path, server: Loopback) -> Path:
    """An order world that placed one order and fetched it live: one request."""
    w = tmp_path / "parent"
    with World.create(w, ORDER_AIR) as world:
        world.send(ORDER_PLACED, {"order_id": "o-1", "url": server.url("/ok")})
        with Engine(world) as loop:
            loop.run()
        assert world.state(ORDER, "o-1")["status"] == {"$tag": "Fetched", "$value": 200}
    assert server.total == 1
    return w


def fork(parent: Path, target: Path) -> Path:
    """A fork of ``parent`` just after the order was placed (seq 1; before the plan ran)."""
    return fork_world(parent, 1, target).path


def receipts(w: Path) -> list[dict[str, Any]]:
    return [dict(r.body) for r in of_kind(records(w), "receipt")]


def journal_bytes(w: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((w / "journal").glob("*.log")))


def order_status(w: Path) -> Any:
    with World.open(w, readonly=True) as world:
        return world.state(ORDER, "o-1")["status"]


# --- a fork is stubbed by default ------------------------------------------------------------


def test_a_fork_runs_stubbed_by_default_and_no_request_reaches_the_server(
    parent: Path, tmp_path: Path, server: Loopback
) -> None:
    f = fork(parent, tmp_path / "fork")
    written = read_mode_file(f)
    assert written is not None
    assert (written.mode, written.parent, written.parent_seq) == ("stub", str(parent), 1)
    assert written.reason == f"fork of {parent} at seq 1"

    code, out, err = world_cli("run", f, "--json")
    assert code == 0, out + err
    assert server.total == 1  # the parent's request only
    shown = json.loads(out)
    assert (shown["effects"], shown["effects_not_live"], shown["receipts"]) == ("stub", 1, 1)
    assert "effects stub by default (fork of" in err
    [receipt] = receipts(f)
    assert (receipt["status"], receipt["adapter_id"]) == (STUB_STATUS, "effects.stub")
    assert cbor.loads(receipt["payload"])["status"] == 0
    assert order_status(f) == {"$tag": "Failed", "$value": 0}  # the plan's "no answer" branch

    code, out, _ = world_cli("effects", "ls", f, "--json")
    assert code == 0
    [intent] = json.loads(out)["intents"]
    assert (intent["status"], intent["receipt_status"]) == ("done", "stub")
    code, out, _ = world_cli("journal", "tail", f)
    assert code == 0
    [tailed] = [r for r in lines(out) if r["kind"] == "receipt"]
    assert (tailed["body"]["status"], tailed["body"]["adapter_id"]) == ("stub", "effects.stub")

    code, out, _ = world_cli("replay", f, "--verify", "--json")
    assert code == 0, out
    assert json.loads(out)["receipts_checked"] == 1
    code, out, _ = world_cli("journal", "verify", f, "--json")
    assert code == 0, out
    assert json.loads(out)["bad_receipt"] is None
    assert server.total == 1


def test_effects_live_given_once_makes_a_fork_live_for_good(
    parent: Path, tmp_path: Path, server: Loopback
) -> None:
    f = fork(parent, tmp_path / "fork")
    code, out, err = world_cli("run", f, "--effects", "live", "--json")
    assert code == 0, out + err
    assert json.loads(out)["effects"] == "live"
    assert "notice" not in err
    assert server.hits["/ok"] == 2
    assert order_status(f) == {"$tag": "Fetched", "$value": 200}
    written = read_mode_file(f)
    assert written is not None
    assert (written.mode, written.parent) == ("live", str(parent))  # the parent is kept

    placed = json.dumps({"order_id": "o-2", "url": server.url("/other")})
    assert world_cli("send", f, ORDER_PLACED, placed)[0] == 0
    code, out, err = world_cli("run", f, "--json")
    assert code == 0, out + err
    assert json.loads(out)["effects"] == "live"
    assert server.hits["/other"] == 1
    assert [r["adapter_id"] for r in receipts(f)] == ["http", "http"]


def test_effects_replay_answers_a_fork_from_its_parents_journal(
    parent: Path, tmp_path: Path, server: Loopback
) -> None:
    f = fork(parent, tmp_path / "fork")
    code, out, err = world_cli("run", f, "--effects", "replay", "--json")
    assert code == 0, out + err
    assert server.total == 1
    [theirs] = receipts(parent)
    [ours] = receipts(f)
    assert ours["intent_hash"] == theirs["intent_hash"]
    assert (ours["status"], ours["payload"]) == (theirs["status"], theirs["payload"])
    assert ours["adapter_id"] == "effects.replay"
    assert order_status(f) == {"$tag": "Fetched", "$value": 200}  # as its parent saw it
    assert verify_world(f).ok
    written = read_mode_file(f)
    assert written is not None
    assert written.mode == "stub"  # replay is for that run only


def test_effects_replay_denies_an_intent_no_journal_answered(
    parent: Path, tmp_path: Path, server: Loopback
) -> None:
    f = fork(parent, tmp_path / "fork")
    placed = json.dumps({"order_id": "o-2", "url": server.url("/other")})
    assert world_cli("send", f, ORDER_PLACED, placed)[0] == 0
    code, out, err = world_cli("run", f, "--effects", "replay", "--json")
    assert code == 0, out + err
    assert server.total == 1
    by_adapter = {r["adapter_id"]: r for r in receipts(f)}
    assert sorted(by_adapter) == ["effects.deny", "effects.replay"]
    denied = by_adapter["effects.deny"]
    assert denied["status"] == "error"
    assert "no journaled receipt" in cbor.loads(denied["payload"])["body_preview"]
    assert verify_world(f).ok


def test_effects_deny_journals_error_receipts_and_sends_nothing(
    parent: Path, tmp_path: Path, server: Loopback
) -> None:
    f = fork(parent, tmp_path / "fork")
    code, out, err = world_cli("run", f, "--effects", "deny", "--json")
    assert code == 0, out + err
    assert server.total == 1
    [receipt] = receipts(f)
    assert (receipt["status"], receipt["adapter_id"]) == ("error", "effects.deny")
    assert "denied" in cbor.loads(receipt["payload"])["body_preview"]
    with World.open(f, readonly=True) as world:
        [letter] = world.info()["dead_letters"]
    assert letter["code"] == "effect_failed"
    assert verify_world(f).ok
    assert read_mode_file(f) is not None


def test_two_stubbed_runs_of_the_same_fork_write_the_same_journal_bytes(
    parent: Path, tmp_path: Path, server: Loopback
) -> None:
    one, two = fork(parent, tmp_path / "one"), fork(parent, tmp_path / "two")
    for f in (one, two):
        assert world_cli("run", f)[0] == 0
    assert journal_bytes(one) == journal_bytes(two)
    assert len(receipts(one)) == 1
    assert server.total == 1


def test_a_parent_with_its_own_mode_file_does_not_pass_it_to_its_fork(
    parent: Path, tmp_path: Path
) -> None:
    write_mode_file(parent, ModeFile("live", "--effects live"))
    f = fork(parent, tmp_path / "fork")
    written = read_mode_file(f)
    assert written is not None
    assert written.mode == "stub"


# --- --sim and worlds that are not forks ------------------------------------------------------


def _order_world(path: Path, server: Loopback) -> Path:
    with World.create(path, ORDER_AIR) as world:
        world.send(ORDER_PLACED, {"order_id": "o-1", "url": server.url("/ok")})
    return path


def test_run_sim_stubs_http_unless_effects_live_is_given(tmp_path: Path, server: Loopback) -> None:
    stubbed = _order_world(tmp_path / "a", server)
    code, out, err = world_cli("run", stubbed, "--sim", "--json")
    assert code == 0, out + err
    assert json.loads(out)["effects"] == "stub"
    assert "simulated time" in err
    assert server.total == 0
    assert read_mode_file(stubbed) is None  # a --sim default is not written down

    live = _order_world(tmp_path / "b", server)
    code, out, err = world_cli("run", live, "--sim", "--effects", "live", "--json")
    assert code == 0, out + err
    assert server.total == 1


def test_a_world_that_is_not_a_fork_runs_live_without_a_notice(
    tmp_path: Path, server: Loopback
) -> None:
    w = _order_world(tmp_path / "w", server)
    code, out, err = world_cli("run", w, "--json")
    assert code == 0, out + err
    assert json.loads(out)["effects"] == "live"
    assert err == ""
    assert server.total == 1
    assert not (w / MODE_FILE).exists()


def test_effects_stub_on_a_world_that_is_not_a_fork_is_for_that_run_only(
    tmp_path: Path, server: Loopback
) -> None:
    w = _order_world(tmp_path / "w", server)
    assert world_cli("run", w, "--effects", "stub")[0] == 0
    assert server.total == 0
    assert read_mode_file(w) is None


def test_timers_and_blobs_stay_with_their_adapters_when_effects_are_stubbed(
    tmp_path: Path,
) -> None:
    w = tmp_path / "timer"
    with World.create(w, ORDER_AIR.parent / "timer") as world:
        world.send("demo/TimerEvent@1", {"key": "t", "deliver_at_ns": 5_000})
    f = fork_world(w, 1, tmp_path / "fork").path
    code, out, err = world_cli("run", f, "--sim", "--json")
    assert code == 0, out + err
    assert json.loads(out)["effects_not_live"] == 0
    [receipt] = receipts(f)
    assert (receipt["status"], receipt["adapter_id"]) == ("ok", "timer.sim")
    with World.open(f, readonly=True) as world:
        assert world.state("demo/Timer@1", "t")["last_fired_ns"] == 5_000


def test_a_simulated_timer_world_that_stubs_nothing_says_nothing_about_effects(
    tmp_path: Path,
) -> None:
    w = tmp_path / "timer"
    with World.create(w, ORDER_AIR.parent / "timer") as world:
        world.send("demo/TimerEvent@1", {"key": "t", "deliver_at_ns": 5_000})
    code, out, err = world_cli("run", w, "--sim", "--json")
    assert code == 0, out + err
    assert (json.loads(out)["effects"], json.loads(out)["receipts"]) == ("stub", 1)
    assert err == ""


# --- the mode file ------------------------------------------------------------------------------


def test_a_damaged_mode_file_fails_closed_to_stub(tmp_path: Path) -> None:
    (tmp_path / MODE_FILE).write_bytes(b"{not json")
    chosen = choose_mode(tmp_path, None)
    assert chosen.mode == "stub"
    assert chosen.notice is not None
    assert choose_mode(tmp_path, "live").mode == "live"
    written = read_mode_file(tmp_path)
    assert written is not None
    assert written.mode == "live"  # --effects live rewrote it


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param([], id="not-an-object"),
        pytest.param({"mode": "replay", "reason": "x"}, id="mode-not-stored"),
        pytest.param({"mode": "stub"}, id="no-reason"),
        pytest.param({"mode": "stub", "reason": "x", "parent": 3}, id="parent-not-text"),
        pytest.param({"mode": "stub", "reason": "x", "parent_seq": -1}, id="negative-seq"),
    ],
)
def test_a_mode_file_that_is_not_one_counts_as_stub(tmp_path: Path, doc: Any) -> None:
    (tmp_path / MODE_FILE).write_text(json.dumps(doc))
    written = read_mode_file(tmp_path)
    assert written is not None
    assert written.mode == "stub"
    assert MODE_FILE in written.reason


def test_the_cli_offers_exactly_the_modes_the_world_knows() -> None:
    assert EFFECTS_CHOICES == EFFECTS_MODES


# --- a served world ---------------------------------------------------------------------------


def _serve_and_place(w: Path, server: Loopback, **options: Any) -> list[str]:
    """Serve ``w`` in a thread, send one order through its socket, stop (which drains: runs
    until idle, effects included); return the notices ``serve`` gave."""
    stop, ready = threading.Event(), threading.Event()
    notices: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            serve(
                w,
                stop_event=stop,
                on_listening=lambda _p: ready.set(),
                on_notice=notices.append,
                **options,
            )
        except BaseException as exc:
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(WAIT_S)
    assert errors == []
    with Client(socket_path(w), timeout_s=WAIT_S) as client:
        placed = {"order_id": "o-2", "url": server.url("/other")}
        client.call(
            "events.send", schema=ORDER_PLACED, values=[placed], ids=[None], batch=None, more=False
        )
    stop.set()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert errors == []
    return notices


def test_a_served_world_with_effects_stub_sends_nothing(tmp_path: Path, server: Loopback) -> None:
    w = tmp_path / "w"
    World.create(w, ORDER_AIR).close()
    assert _serve_and_place(w, server, effects="stub") == []
    assert server.total == 0
    [receipt] = receipts(w)
    assert (receipt["status"], receipt["adapter_id"]) == (STUB_STATUS, "effects.stub")
    assert verify_world(w).ok


def test_a_served_fork_is_stubbed_by_default_with_a_notice(
    parent: Path, tmp_path: Path, server: Loopback
) -> None:
    f = fork(parent, tmp_path / "fork")
    [notice] = _serve_and_place(f, server)
    assert "effects stub by default (fork of" in notice
    assert server.total == 1  # the parent's
    assert {r["adapter_id"] for r in receipts(f)} == {"effects.stub"}
    assert len(receipts(f)) == 2  # o-1 re-derived, o-2 sent through the server
    assert verify_world(f).ok


def test_an_intent_in_flight_at_the_fork_point_is_replayed_from_the_parent(
    parent: Path, tmp_path: Path, server: Loopback
) -> None:
    [decided] = of_kind(records(parent), "policy.decision")
    f = fork_world(parent, decided.seq, tmp_path / "fork").path
    with World.open(f, readonly=True) as world:
        assert len(world.kernel.effects.queued()) == 1  # queued in the fork, answered after it
    code, out, err = world_cli("run", f, "--effects", "replay", "--json")
    assert code == 0, out + err
    assert server.total == 1
    [ours] = receipts(f)
    assert (ours["status"], ours["adapter_id"]) == ("ok", "effects.replay")
    assert order_status(f) == {"$tag": "Fetched", "$value": 200}
    assert verify_world(f).ok


# --- `world serve --effects` through the command ----------------------------------------------

WORLD_BIN = Path(sys.executable).parent / "world"


def world_bin(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WORLD_BIN), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_world_serve_detach_with_effects_stub_sends_nothing(
    tmp_path: Path, server: Loopback
) -> None:
    w = tmp_path / "w"
    World.create(w, ORDER_AIR).close()
    started = world_bin("serve", w, "--detach", "--effects", "stub")
    try:
        assert started.returncode == 0, started.stderr
        placed = json.dumps({"order_id": "o-1", "url": server.url("/ok")})
        sent = world_bin("send", w, ORDER_PLACED, placed)
        assert sent.returncode == 0, sent.stderr
    finally:
        stopped = world_bin("serve", w, "--stop")
    assert stopped.returncode == 0, stopped.stderr
    assert server.total == 0
    [receipt] = receipts(w)
    assert (receipt["status"], receipt["adapter_id"]) == (STUB_STATUS, "effects.stub")
    assert verify_world(w).ok


def test_world_fork_says_the_fork_starts_stubbed(parent: Path, tmp_path: Path) -> None:
    shown = runner.invoke(app, ["fork", str(parent), str(tmp_path / "f"), "--at", "1"])
    assert shown.exit_code == 0, shown.output
    assert "its effects are stubbed (nothing leaves it) until: world run" in shown.output
    made = runner.invoke(app, ["fork", str(parent), str(tmp_path / "g"), "--at", "1", "--json"])
    assert json.loads(made.stdout)["effects"] == "stub"


def test_world_info_says_who_answers_effects(parent: Path, tmp_path: Path) -> None:
    shown = json.loads(runner.invoke(app, ["info", str(parent), "--json"]).stdout)
    assert shown["effects_mode"] == {"mode": "live", "reason": "the default"}
    fork(parent, tmp_path / "f")
    shown = json.loads(runner.invoke(app, ["info", str(tmp_path / "f"), "--json"]).stdout)
    assert shown["effects_mode"] == {"mode": "stub", "reason": f"fork of {parent} at seq 1"}
    text = runner.invoke(app, ["info", str(tmp_path / "f")]).output
    assert "effects mode" in text
    assert "stub (fork of" in text
