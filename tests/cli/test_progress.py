"""Progress bars for long work: the world-level callbacks count up to their totals; a terminal
(a pseudo-terminal on stderr, or ``WORLD_PROGRESS=1``) shows a bar; anywhere else every
command prints byte for byte what it printed before the bars existed."""

from __future__ import annotations

import io
import json
import os
import pty
import selectors
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cli import _progress
from world import World
from world.history import verify_world
from world.moves import migrate_cells

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT, add

V1_AIR = ROOT / "manifests" / "counter_v1"
WAIT_S = 60.0
CLI = [sys.executable, "-c", "from cli.main import main; main()"]


class Calls(list[tuple[int, int]]):
    def __call__(self, done: int, total: int) -> None:
        self.append((done, total))

    def assert_count_up_to_the_total(self) -> None:
        assert self, "never called"
        dones = [d for d, _t in self]
        assert dones == sorted(dones)
        assert len({t for _d, t in self}) == 1
        assert self[-1][0] == self[-1][1]


def events_file(folder: Path, n: int) -> Path:
    path = folder / "events.jsonl"
    path.write_text("".join(json.dumps(add(f"k{i % 7}", i)) + "\n" for i in range(n)))
    return path


def v1_world(path: Path, keys: int) -> None:
    with World.create(path, V1_AIR) as world:
        world.send_many([(EVENT, add(f"k{i}", i)) for i in range(keys)])
        world.run_until_idle()


# --- the callbacks ------------------------------------------------------------------------------


def test_replay_counts_its_records_up_to_the_journal_length(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        world.send_many([(EVENT, add(f"k{i % 5}", 1)) for i in range(1200)])
        world.run_until_idle()
        records = world.journal.seq_next
    calls = Calls()
    assert verify_world(tmp_path / "w", calls).ok
    calls.assert_count_up_to_the_total()
    assert calls == [(1000, records), (2000, records), (records, records)]


def test_a_migration_counts_journaling_replay_and_swap_up_to_its_total(tmp_path: Path) -> None:
    v1_world(tmp_path / "v1", 50)
    calls = Calls()
    migrate_cells(tmp_path / "v1", COUNTER, "key", dry_run=True, progress=calls)
    assert calls == []  # a dry run only plans
    plan = migrate_cells(tmp_path / "v1", COUNTER, "key", progress=calls)
    calls.assert_count_up_to_the_total()
    records = 1 + len(plan.cells)  # world.migrated, then one cell.imported per cell
    assert calls[0] == (0, 2 * records + 1)
    assert (records, 2 * records + 1) in calls


def test_a_send_counts_its_events_as_they_are_taken(tmp_path: Path) -> None:
    from world.ops import open as open_world

    World.create(tmp_path / "w", COUNTER_AIR).close()
    calls = Calls()
    with open_world(tmp_path / "w") as handle:
        handle.progress = calls
        seqs = handle.send_many(EVENT, [add("k", n) for n in range(1, 251)]).seqs
    assert seqs == list(range(1, 251))
    calls.assert_count_up_to_the_total()
    assert calls[-1] == (250, 250)
    assert len(calls) <= 125  # about 100 updates, not one per event


# --- when a bar is drawn ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("forced", "json_output", "drawn"),
    [
        (None, False, False),  # stderr is not a terminal here
        ("0", False, False),
        ("1", False, True),
        ("1", True, False),  # --json always wins
    ],
)
def test_bars_are_drawn_only_on_a_terminal_and_never_with_json(
    monkeypatch: pytest.MonkeyPatch, forced: str | None, json_output: bool, drawn: bool
) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    if forced is None:
        monkeypatch.delenv(_progress.ENV, raising=False)
    else:
        monkeypatch.setenv(_progress.ENV, forced)
    assert _progress.enabled(json_output) is drawn
    with _progress.bar("working", json_output=json_output) as progress:
        assert (progress is not None) is drawn
        if progress is not None:
            progress(1, 2)
            progress(2, 2)
    with _progress.counter("working", lambda: 3, total=4, json_output=json_output):
        pass
    assert bool(sys.stderr.getvalue()) is drawn


# --- what a user sees ---------------------------------------------------------------------------


def run_cli(args: list[str], *, tty: bool = False, **env: str) -> tuple[int, str, str]:
    """The CLI in a process: stdout a pipe; stderr a pipe, or with ``tty`` a pseudo-terminal
    (read as it is written, so the child never blocks on it)."""
    environ = {k: v for k, v in os.environ.items() if k != _progress.ENV}
    environ |= {"TERM": "xterm-256color", "COLUMNS": "200", **env}
    master = slave = -1
    if tty:
        master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, *args],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=slave if tty else subprocess.PIPE,
    )
    if not tty:
        out, err = proc.communicate(timeout=WAIT_S)
        return proc.returncode, out.decode(), err.decode()
    os.close(slave)
    shown = b""
    with selectors.DefaultSelector() as sel:
        sel.register(master, selectors.EVENT_READ)
        while sel.select(WAIT_S):
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: the child closed the terminal's last descriptor
                break
            if not chunk:
                break
            shown += chunk
    os.close(master)
    out, _ = proc.communicate(timeout=WAIT_S)
    return proc.returncode, out.decode(), shown.decode(errors="replace")


def golden(path: Path, backup: Path) -> dict[str, str]:
    """What these commands printed before progress bars existed (captured from that code)."""
    return {
        "send": "sent 1500 event(s), journal seq 1..1500\n",
        "step": "ran 700 step(s); 800 deliveries pending\n",
        "run": "ran 800 step(s); the world is idle\n",
        "replay": "replay ok: 3001 records, 1500 steps re-executed, identical outputs and state\n",
        "migrate": 'migrated demo/Counter@1: 7 cell(s), key_schema "text", state '
        "demo/CounterMap@1 -> demo/CounterState@1, key_field 'key' on demo/CounterEvent@1\n"
        f"the old world is kept at {backup}\n",
    }


def commands(w: Path, v1: Path, events: Path) -> dict[str, list[str]]:
    return {
        "send": ["send", str(w), EVENT, "--file", str(events)],
        "step": ["step", str(w), "--ticks", "700"],
        "run": ["run", str(w)],
        "replay": ["replay", str(w)],
        "migrate": ["migrate", "cells", str(v1), COUNTER, "--key-field", "key"],
    }


def test_off_a_terminal_every_command_prints_what_it_printed_before(tmp_path: Path) -> None:
    World.create(tmp_path / "w", COUNTER_AIR).close()
    v1_world(tmp_path / "v1", 7)
    expected = golden(tmp_path / "w", tmp_path / "v1.bak-1")
    for name, args in commands(
        tmp_path / "w", tmp_path / "v1", events_file(tmp_path, 1500)
    ).items():
        assert run_cli(args) == (0, expected[name], ""), name
    code, out, err = run_cli(["replay", str(tmp_path / "w"), "--json"], WORLD_PROGRESS="1")
    assert (code, json.loads(out)["records"], err) == (0, 3001, "")  # --json: never a bar


def test_on_a_terminal_each_long_command_shows_a_bar_on_stderr(tmp_path: Path) -> None:
    World.create(tmp_path / "w", COUNTER_AIR).close()
    v1_world(tmp_path / "v1", 7)
    expected = golden(tmp_path / "w", tmp_path / "v1.bak-1")
    bars: dict[str, Any] = {
        "send": ("sending", "1500/1500"),
        "step": ("stepping", "700 steps of 700"),
        "run": ("running", "800 steps"),
        "replay": ("replaying", "3001/3001"),
        "migrate": ("migrating", "17/17"),  # 2 x (1 + 7 records) + 1
    }
    for name, args in commands(
        tmp_path / "w", tmp_path / "v1", events_file(tmp_path, 1500)
    ).items():
        code, out, shown = run_cli(args, tty=True)
        assert (code, out) == (0, expected[name]), name
        label, count = bars[name]
        assert label in shown, (name, shown)
        assert count in shown, (name, shown)
        assert "\x1b[" in shown  # drawn with terminal control sequences, then erased


def test_world_progress_1_draws_the_bar_where_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", COUNTER_AIR) as world:
        world.send_many([(EVENT, add("k", 1))])
        world.run_until_idle()
    code, out, err = run_cli(["replay", str(tmp_path / "w")], WORLD_PROGRESS="1")
    assert (code, out) == (
        0,
        "replay ok: 3 records, 1 steps re-executed, identical outputs and state\n",
    )
    assert "replaying" in err
    assert "3/3" in err
