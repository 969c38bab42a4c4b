"""Every ``world`` command through the installed script, in a real process (issue 9: "at least
one through a real subprocess").

``COVERED`` is the table: each command and subcommand, named as a user types it, with the test
below that runs it. ``test_every_command_in_the_help_is_in_the_table`` reads the commands from
``world --help`` (in a real process) and the groups' subcommands from the same app, so a
command added without a test here fails that test. Each test asserts what the command did (exit code, the
``--json`` shape and values, the files it wrote, what a later command sees), not its wording.
``test_an_error_in_each_group_is_one_line_on_stderr_and_exit_1`` runs one bad invocation per
group: exit 1, nothing on stdout, one line on stderr starting ``error:``, no traceback.

Cost. Each process costs ~0.3-0.5 s of start-up, so ``world`` (the helper) runs the script
through the ``world_bin`` fixture: a real process with its own argv, environment and stdio,
forked from a zygote that has imported what the script imports (``tests/zygote.py``; ~0.1 s).
``spawn`` and the inspector start the script itself: their tests signal or kill it. And one
counter world is built once per module through the CLI itself (``init``, ``send``, ``send
--file``, ``step``, ``run``: the tests of those commands read what the fixture recorded), and
the read commands run against it. Worlds a test changes are copies, or built in this process
with ``World`` when building them is not what the test is about. Heavier cases live elsewhere:
malformed input for every command in ``test_cli_malformed.py``, paging in ``test_cli_tour.py``,
hostile clients in ``test_serve.py``, time travel in ``test_timetravel.py``, migration in
``test_migrate.py`` and ``test_migrate_scale.py``.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import signal
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from plans_kit import await_receipt, chain, end, http_get, http_grant, plan, plan_world, ref
from uikit import Inspector

from world import World, sdk

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT, add

WORLD_BIN = Path(sys.executable).with_name("world")
RUN_BIN = WORLD_BIN
"""What ``world`` runs: the ``world_bin`` fixture's script once ``_through_the_zygote`` has run."""
V1_AIR = ROOT / "manifests" / "counter_v1"
WAIT_S = 60.0
# Wide enough that rich never wraps a command name in the help boxes; no colour codes.
ENV = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
ENV.pop("WORLD_DEBUG", None)  # it would turn the one-line errors into tracebacks

CLUSTER_TEST = "test_a_partitioned_world_from_init_to_replay_and_upgrade"
COVERED: dict[str, str] = {
    **{
        f"cluster {name}": CLUSTER_TEST
        for name in ("init", "send", "run", "state", "info", "cells", "replay", "upgrade")
    },
    "cluster up": "test_cluster_up_and_down_on_a_local_ray",
    "cluster down": "test_cluster_up_and_down_on_a_local_ray",
    "validate": "test_validate_reports_the_manifest_hash",
    "air normalize": "test_air_normalize_writes_air_that_validates_to_the_same_routes",
    "why": "test_why_names_the_step_and_the_event_it_consumed",
    "ui": "test_ui_serves_the_world_page_at_the_url_it_prints",
    "init": "test_init_creates_a_private_world_folder",
    "send": "test_send_prints_the_seqs_of_its_batch",
    "step": "test_step_runs_one_tick_and_reports_what_is_pending",
    "run": "test_run_until_idle_runs_the_rest",
    "state": "test_state_shows_the_counted_value_and_null_for_no_cell",
    "info": "test_info_summarises_the_world",
    "snapshot": "test_snapshot_checkpoints_a_copy",
    "replay": "test_replay_verifies_the_whole_journal",
    "demo": "test_demo_tours_and_keeps_its_worlds",
    "fork": "test_fork_keeps_a_prefix_and_leaves_the_original_alone",
    "serve": "test_serve_takes_cli_commands_through_its_socket_and_stops",
    "cells ls": "test_cells_ls_lists_every_cell_with_its_state",
    "cells show": "test_cells_show_now_and_at_a_past_position",
    "cells tail": "test_cells_tail_lists_a_cells_inputs_and_steps",
    "cells export": "test_cells_export_and_import_round_trip",
    "cells import": "test_cells_export_and_import_round_trip",
    "cells key": "test_cells_export_and_import_round_trip",
    "journal tail": "test_journal_tail_filters_by_subject_and_position",
    "journal verify": "test_journal_verify_finds_a_clean_journal",
    "archive": "test_archive_copies_what_restoring_needs_then_only_what_is_new",
    "effects ls": "test_effects_ls_approve_and_deny",
    "effects approve": "test_effects_ls_approve_and_deny",
    "effects deny": "test_effects_ls_approve_and_deny",
    "runs ls": "test_runs_ls_show_and_cancel",
    "runs show": "test_runs_ls_show_and_cancel",
    "runs cancel": "test_runs_ls_show_and_cancel",
    "dead-letters ls": "test_dead_letters_ls_show_retry_and_drop",
    "dead-letters show": "test_dead_letters_ls_show_retry_and_drop",
    "dead-letters retry": "test_dead_letters_ls_show_retry_and_drop",
    "dead-letters drop": "test_dead_letters_ls_show_retry_and_drop",
    "migrate cells": "test_migrate_cells_dry_run_then_for_real",
    "examples": "test_examples_lists_and_copies_a_bundled_world",
    "examples copy": "test_examples_lists_and_copies_a_bundled_world",
    "reducer new": "test_reducer_new_build_and_check",
    "reducer build": "test_reducer_new_build_and_check",
    "reducer check": "test_reducer_new_build_and_check",
    "sdk include": "test_sdk_include_names_the_folder_of_the_header",
    "upgrade propose": "test_upgrade_propose_ls_and_show",
    "upgrade ls": "test_upgrade_propose_ls_and_show",
    "upgrade show": "test_upgrade_propose_ls_and_show",
    "upgrade shadow": "test_upgrade_shadow_approve_apply_and_cells_upgrade",
    "upgrade approve": "test_upgrade_shadow_approve_apply_and_cells_upgrade",
    "upgrade apply": "test_upgrade_shadow_approve_apply_and_cells_upgrade",
    "cells upgrade": "test_upgrade_shadow_approve_apply_and_cells_upgrade",
}


# --- running the script ----------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _through_the_zygote(world_bin: Path) -> None:
    global RUN_BIN
    RUN_BIN = world_bin / "world"


def world(
    *args: object, code: int = 0, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``world`` script (through the zygote: ``RUN_BIN``); check its exit
    code and that it printed no traceback."""
    done = subprocess.run(
        [str(RUN_BIN), *(str(a) for a in args)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
        env=ENV,
        cwd=cwd,
    )
    assert done.returncode == code, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def spawn(*args: object) -> subprocess.Popen[str]:
    """The installed ``world`` script running in the background, its output piped as text."""
    return subprocess.Popen(
        [str(WORLD_BIN), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def world_json(*args: object, code: int = 0) -> dict[str, Any]:
    """``world ARGS --json``: its one JSON object."""
    data: dict[str, Any] = json.loads(world(*args, "--json", code=code).stdout)
    return data


def pick(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The documented keys of a ``--json`` object (README "JSON output": new keys may be
    added, these stay), so that a test compares exactly those."""
    return {k: obj[k] for k in keys}


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def one_line_error(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error:"), done.stderr


# --- the module's counter world, built through the CLI ---------------------------------------


@dataclass
class Built:
    """The counter world every read test shares, and what each building command printed."""

    path: Path
    folder: Path
    out: dict[str, Any] = field(default_factory=dict)


FIRST = add("a", 3)
BATCH = [add("a", 4), add("b", 5), add("c", 1)]
FINAL = {
    "a": {"count": 7, "events": 2},
    "b": {"count": 5, "events": 1},
    "c": {"count": 1, "events": 1},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    folder = tmp_path_factory.mktemp("cli")
    b = Built(folder / "w", folder)
    world("init", b.path, "--air", COUNTER_AIR)
    b.out["send"] = world_json("send", b.path, EVENT, json.dumps(FIRST))
    events = folder / "events.jsonl"
    events.write_text("".join(json.dumps(v) + "\n" for v in BATCH))
    b.out["send_file"] = world_json("send", b.path, EVENT, "--file", events)
    b.out["step"] = world_json("step", b.path, "--ticks", "1")
    b.out["run"] = world_json("run", b.path, "--until-idle")
    return b


def copy_of(b: Built, name: str) -> Path:
    target = b.folder / name
    shutil.copytree(b.path, target)
    return target


# --- coverage --------------------------------------------------------------------------------


def help_commands(*group: str) -> list[str]:
    """The command names listed under ``Commands:`` in ``world [GROUP] --help`` (each at the
    section's indent; a summary's further lines are indented past it)."""
    text = world(*group, "--help").stdout
    names, inside = [], False
    for line in text.splitlines():
        if line == "Commands:":
            inside = True
        elif inside and not line.strip():
            inside = False
        elif inside and (found := re.match(r"  ([a-z][a-z0-9_-]*)( |$)", line)):
            names.append(found.group(1))
    return names


def test_every_command_in_the_help_is_in_the_table() -> None:
    """The top level as ``world --help`` prints it; each group's subcommands from the same
    click app (what ``world GROUP --help`` prints, without a process per group)."""
    from cli.main import app

    top = help_commands()
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert sorted(top) == sorted(commands)
    assert sorted(help_commands("cells")) == sorted(commands["cells"].commands)
    listed = []
    for name in top:
        sub = getattr(commands[name], "commands", None)
        if sub is None or getattr(commands[name], "invoke_without_command", False):
            listed.append(name)  # a command; `world examples` alone lists the examples
        listed += [f"{name} {s}" for s in sub or ()]
    assert sorted(listed) == sorted(COVERED)
    assert all(callable(globals().get(test)) for test in COVERED.values())


def test_why_names_the_step_and_the_event_it_consumed(built: Built) -> None:
    """(Chains through plans, timers and receipts: ``tests/world/history/test_why.py``.)"""
    answer = world_json("why", built.path, COUNTER, "a")
    kinds = [cause["kind"] for cause in answer["chain"]]
    assert kinds[0] == "step"
    assert kinds[-1] == "event.in"
    assert answer["ends"] == "sent from outside"
    assert answer["state"] == world_json("state", built.path, COUNTER, "--key", "a")["state"]


def test_ui_serves_the_world_page_at_the_url_it_prints(built: Built) -> None:
    """(The inspector's pages, token and approvals: ``tests/cli/ui/test_ui.py`` and, in Chromium,
    ``tests/cli/ui/test_ui_browser.py``.)"""
    inspector = Inspector(WORLD_BIN, built.path)
    try:
        page = httpx.get(inspector.url, timeout=30)
        assert page.status_code == 200
        assert "demo/Counter@1" in page.text
    finally:
        err = inspector.close()
    assert inspector.child.returncode == 0, err
    assert "Traceback" not in err


def test_version_names_the_package() -> None:
    assert world("--version").stdout.split()[0] == "world-kernel"


# --- the core loop ---------------------------------------------------------------------------


def test_validate_reports_the_manifest_hash(built: Built) -> None:
    report = world_json("validate", COUNTER_AIR)
    with World.open(built.path, readonly=True) as opened:
        assert report["manifest_hash"] == opened.air.manifest_hash


def test_air_normalize_writes_air_that_validates_to_the_same_routes(tmp_path: Path) -> None:
    """The strict form (AgentOS's spelling) of the counter's AIR is AIR we load again: the
    same modules and routes; the inline key type it has no form for is lifted into a
    defschema, and reported as rewritten."""
    done = world_json("air", "normalize", COUNTER_AIR, "-o", tmp_path / "strict")
    assert sorted(Path(f).name for f in done["files"]) == [
        "manifest.air.json",
        "modules.air.json",
        "schemas.air.json",
    ]
    assert done["kept"] == []
    assert [(k["name"], k["pointer"]) for k in done["rewritten"]] == [
        ("demo/Counter@1", "/key_schema")
    ]
    before, after = world_json("validate", COUNTER_AIR), world_json("validate", tmp_path / "strict")
    assert after["routes"] == before["routes"]
    assert sorted(after["modules"]) == sorted(before["modules"])


def test_init_creates_a_private_world_folder(built: Built) -> None:
    assert (built.path / "air" / "sources.json").is_file()
    assert (built.path / "journal").is_dir()
    assert stat.S_IMODE(built.path.stat().st_mode) == 0o700


def test_send_prints_the_seqs_of_its_batch(built: Built) -> None:
    assert pick(built.out["send"], "ok", "seqs") == {"ok": True, "seqs": [1]}
    assert pick(built.out["send_file"], "ok", "seqs") == {"ok": True, "seqs": [2, 3, 4]}


def test_step_runs_one_tick_and_reports_what_is_pending(built: Built) -> None:
    assert pick(built.out["step"], "ok", "steps", "pending") == {
        "ok": True,
        "steps": 1,
        "pending": 3,
    }


def test_run_until_idle_runs_the_rest(built: Built) -> None:
    run = pick(built.out["run"], "ok", "steps", "effects_dispatched", "receipts")
    assert run == {"ok": True, "steps": 3, "effects_dispatched": 0, "receipts": 0}


def test_state_shows_the_counted_value_and_null_for_no_cell(built: Built) -> None:
    shown = world_json("state", built.path, COUNTER, "--key", "a")  # a text key, written bare
    assert pick(shown, "ok", "state") == {"ok": True, "state": FINAL["a"]}
    absent = world_json("state", built.path, COUNTER, "--key", '"zz"', code=1)  # or as JSON
    assert pick(absent, "ok", "state") == {"ok": False, "state": None}


def test_info_summarises_the_world(built: Built) -> None:
    info = world_json("info", built.path)
    assert info["journal_seq_next"] == 9  # created, 4 events, 4 steps
    assert info["steps_total"] == 4
    assert info["pending_deliveries"] == 0
    assert list(info["reducers"]) == [COUNTER]
    assert pick(info["reducers"][COUNTER], "keyed", "cells") == {"keyed": True, "cells": 3}
    assert info["dead_letters"] == []
    effects = pick(info["effects"], "parked", "queued", "done", "denied")
    assert effects == {"parked": 0, "queued": 0, "done": 0, "denied": 0}


def test_snapshot_checkpoints_a_copy(built: Built) -> None:
    w = copy_of(built, "snap")
    out = world_json("snapshot", w)
    assert out["ok"] is True
    assert out["snapshot"].startswith("blake3:")
    with World.open(w, readonly=True) as opened:
        assert {v.key: v.state for v in opened.cells(COUNTER)} == FINAL


def test_upgrade_propose_ls_and_show(built: Built, tmp_path: Path) -> None:
    w = copy_of(built, "upgrade")
    air = tmp_path / "v2"
    shutil.copytree(COUNTER_AIR, air)
    wasm = (COUNTER_AIR / "../../reducers/counter/counter.wasm").resolve()
    (air / "counter.wasm").write_bytes(wasm.read_bytes() + bytes([0, 4, 3]) + b"fix")
    module, manifest = json.loads((air / "counter.air.json").read_text())
    module["wasm"] = "counter.wasm"
    (air / "counter.air.json").write_text(json.dumps([module, manifest]))
    made = world_json("upgrade", "propose", w, "--air", air, "--note", "a fix")
    assert pick(made, "ok", "note") == {"ok": True, "note": "a fix"}
    assert made["diff"]["reducers"][0]["wasm_same"] is False
    listed = world_json("upgrade", "ls", w)
    assert [p["id"] for p in listed["proposals"]] == [made["id"]]
    shown = world("upgrade", "show", w, made["id"]).stdout
    assert f"proposal {made['id']}" in shown
    assert "new wasm, state schema same, key schema same" in shown


def test_upgrade_shadow_approve_apply_and_cells_upgrade(built: Built, tmp_path: Path) -> None:
    w = copy_of(built, "upgrade-apply")
    air = tmp_path / "v2"
    shutil.copytree(COUNTER_AIR, air)
    wasm = (COUNTER_AIR / "../../reducers/counter/counter.wasm").resolve()
    (air / "counter.wasm").write_bytes(wasm.read_bytes() + bytes([0, 4, 3]) + b"fix")
    module, manifest = json.loads((air / "counter.air.json").read_text())
    module["wasm"] = "counter.wasm"
    (air / "counter.air.json").write_text(json.dumps([module, manifest]))
    made = world_json("upgrade", "propose", w, "--air", air)
    shadowed = world_json("upgrade", "shadow", w, made["id"])
    assert shadowed["cells"]["differ"] == 0  # the same behaviour: nothing would differ
    assert "0 cell(s) would differ" in world("upgrade", "shadow", w, made["id"]).stdout
    assert world_json("upgrade", "approve", w, made["id"])["ok"] is True
    applied = world_json("upgrade", "apply", w, made["id"])
    assert applied["manifest_hash"] == made["manifest_hash"]
    assert "stale" in world("upgrade", "apply", w, made["id"], code=1).stderr
    before = world_json("cells", "show", w, COUNTER, "a")
    assert before["era"] == made["base"]
    upgraded = world_json("cells", "upgrade", w, COUNTER, "--all")
    assert (upgraded["ok"], upgraded["failed"]) == (True, [])
    after = world_json("cells", "show", w, COUNTER, "a")
    assert (after["era"], after["state"]) == (made["manifest_hash"], before["state"])
    assert world_json("info", w)["eras"][-1]["since"] == applied["seq"]


def test_replay_verifies_the_whole_journal(built: Built) -> None:
    report = world_json("replay", built.path)
    assert report["ok"] is True
    assert (report["records"], report["steps"]) == (9, 4)
    assert report["divergence"] is None
    assert report["mismatches"] == report["state_mismatches"] == report["damaged"] == []


def test_demo_tours_and_keeps_its_worlds(tmp_path: Path) -> None:
    world("demo", "--keep", tmp_path / "tour")
    assert (tmp_path / "tour" / "alice.cell.cbor").is_file()
    with World.open(tmp_path / "tour" / "counter", readonly=True) as tour:
        assert tour.state(COUNTER, "alice") is not None
    with World.open(tmp_path / "tour" / "counter_v1", readonly=True) as migrated:
        assert migrated.air.modules[COUNTER].key_schema is not None  # the tour migrated it


# --- history: cells, journal, fork -----------------------------------------------------------


def test_cells_ls_lists_every_cell_with_its_state(built: Built) -> None:
    listed = world_json("cells", "ls", built.path, COUNTER)
    assert (listed["ok"], listed["reducer"], listed["count"]) == (True, COUNTER, 3)
    assert [c["key"] for c in listed["cells"]] == ["a", "b", "c"]
    assert {c["key"]: c["state"] for c in listed["cells"]} == FINAL
    assert all(c["state_hash"].startswith("blake3:") for c in listed["cells"])
    assert "next_after" not in listed


def test_cells_show_now_and_at_a_past_position(built: Built) -> None:
    now = world_json("cells", "show", built.path, COUNTER, "a")
    assert (now["ok"], now["key"], now["state"]) == (True, "a", FINAL["a"])
    past = world_json("cells", "show", built.path, COUNTER, "a", "--at", "5")
    assert past["state"] == {"count": 3, "events": 1}  # after a's first step, before its second
    assert past["at"] == 5


def test_cells_tail_lists_a_cells_inputs_and_steps(built: Built) -> None:
    lines = json_lines(world("cells", "tail", built.path, COUNTER, "a", "--json").stdout)
    # journal order: both of a's events (seqs 1, 2) came in before either of its steps
    assert [(r["role"], r["kind"], r["seq"]) for r in lines] == [
        ("input", "event.in", 1),
        ("input", "event.in", 2),
        ("step", "step", 5),
        ("step", "step", 8),
    ]
    inputs = [r["body"]["value"] for r in lines if r["role"] == "input"]
    assert inputs == [FIRST, BATCH[0]]
    assert [r["source"]["seq"] for r in lines if r["role"] == "step"] == [1, 2]


def test_cells_export_and_import_round_trip(built: Built) -> None:
    one = built.folder / "a.cbor"
    out = world_json("cells", "export", built.path, COUNTER, "a", "-o", one)
    assert (out["ok"], out["cells"], out["reducer"]) == (True, 1, COUNTER)
    signer = world_json("cells", "key", built.path)["signer"]
    assert out["signer"] == signer
    tree = built.folder / "tree"
    assert world_json("cells", "export", built.path, COUNTER, "--all", "-o", tree)["cells"] == 3
    assert len(list(tree.glob("state/reducers/*/cells/*.cbor"))) == 3
    target = built.folder / "imported"
    World.create(target, COUNTER_AIR).close()
    assert pick(
        world_json("cells", "import", target, one, "--trust-key", signer), "ok", "cells"
    ) == {
        "ok": True,
        "cells": 1,
    }
    with World.open(target, readonly=True) as opened:
        assert {v.key: v.state for v in opened.cells(COUNTER)} == {"a": FINAL["a"]}
    assert pick(world_json("cells", "import", target, tree, "--trust"), "ok", "cells") == {
        "ok": True,
        "cells": 3,
    }
    with World.open(target, readonly=True) as opened:
        assert {v.key: v.state for v in opened.cells(COUNTER)} == FINAL


def test_journal_tail_filters_by_subject_and_position(built: Built) -> None:
    done = world("journal", "tail", built.path, "--subject", "/world/cell/**", "--from", "6")
    records = json_lines(done.stdout)
    assert [r["seq"] for r in records] == [6, 7, 8]
    assert {r["kind"] for r in records} == {"step"}
    # keys as sugar JSON, not CBOR hex; fair ticks: a's second event waited for b and c
    assert [r["body"]["key"] for r in records] == ["b", "c", "a"]


def test_journal_tail_follow_prints_records_as_they_arrive(built: Built) -> None:
    w = copy_of(built, "follow")
    proc = spawn("journal", "tail", str(w), "--from", "8", "--follow")
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            assert sel.select(WAIT_S), "no first record"
            assert json.loads(proc.stdout.readline())["seq"] == 8
            world("send", w, EVENT, json.dumps(add("late", 1)))
            assert sel.select(WAIT_S), "the new record did not arrive"
            late = json.loads(proc.stdout.readline())
        assert (late["seq"], late["body"]["value"]) == (9, add("late", 1))
        proc.send_signal(signal.SIGINT)  # Ctrl-C ends a follow as it ends a run: 130
        _out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 130, err
    assert "Traceback" not in err


def test_archive_copies_what_restoring_needs_then_only_what_is_new(built: Built) -> None:
    target = built.folder / "archive"
    first = world_json("archive", built.path, "--to", target)
    assert first["ok"]
    assert {"air/sources.json", "air/manifest.cbor", "keys/receipt.key"} <= set(first["copied"])
    again = world_json("archive", built.path, "--to", target)
    assert (again["copied"], again["replaced"], again["damaged"]) == ([], [], [])


def test_journal_verify_finds_a_clean_journal(built: Built) -> None:
    report = world_json("journal", "verify", built.path)
    assert (report["ok"], report["clean"], report["records"]) == (True, True, 9)
    assert (report["seq_last_good"], report["problem"], report["torn_tail"]) == (8, None, None)


def test_fork_keeps_a_prefix_and_leaves_the_original_alone(built: Built) -> None:
    fork = built.folder / "fork"
    out = world_json("fork", built.path, fork, "--at", "5")
    assert (out["ok"], out["seq"], out["records"]) == (True, 5, 6)
    with World.open(fork) as forked:  # the fork runs on from seq 5, with other inputs
        assert forked.state(COUNTER, "a") == {"count": 3, "events": 1}
        forked.send(EVENT, add("a", 100))
        forked.run_until_idle()
        assert {v.key: v.state for v in forked.cells(COUNTER)} == {
            "a": {"count": 107, "events": 3},
            "b": FINAL["b"],
            "c": FINAL["c"],
        }
    with World.open(built.path, readonly=True) as original:
        assert original.journal.seq_next == 9
        assert original.state(COUNTER, "a") == FINAL["a"]


# --- moves, effects, serving -----------------------------------------------------------------


def test_migrate_cells_dry_run_then_for_real(tmp_path: Path) -> None:
    w = tmp_path / "v1"
    with World.create(w, V1_AIR) as v1:
        v1.send_many([(EVENT, add("x", 2)), (EVENT, add("y", 3)), (EVENT, add("x", 1))])
        v1.run_until_idle()
    listing = sorted(p.name for p in tmp_path.iterdir())
    dry = world_json("migrate", "cells", w, COUNTER, "--key-field", "key", "--dry-run")
    assert (dry["ok"], dry["dry_run"], dry["cells"], dry["key_schema"]) == (True, True, 2, "text")
    assert sorted(p.name for p in tmp_path.iterdir()) == listing  # nothing written
    done = world_json("migrate", "cells", w, COUNTER, "--key-field", "key")
    assert (done["ok"], done["dry_run"], done["cells"]) == (True, False, 2)
    assert Path(done["backup"]).is_dir()
    with World.open(w) as migrated:  # one cell per key; the same binary steps them
        migrated.send(EVENT, add("x", 10))
        migrated.run_until_idle()
        assert {v.key: v.state for v in migrated.cells(COUNTER)} == {
            "x": {"count": 13, "events": 3},
            "y": {"count": 3, "events": 1},
        }


GO = "t/Go@1"


def approval_world(folder: Path) -> Path:
    """Two plan runs whose GETs a policy parks with ``require_approval`` (nothing is sent:
    the URLs point at a closed port, and no test here runs the world after approving)."""
    fetch = [http_get("fetch", ref("@plan.input.url"), "req"), await_receipt("wait", "req", "r")]
    air = plan_world(
        folder / "air",
        schemas={GO: {"record": {"url": "text"}}},
        plans=[plan("t/go@1", GO, [*fetch, end()], chain("fetch", "wait", "end"))],
        triggers=[{"event": GO, "plan": "t/go@1"}],
        grants=[http_grant(["127.0.0.1"])],
        rules=[{"when": {"effect_kind": "http.request"}, "decision": "require_approval"}],
    )
    w = folder / "w"
    with World.create(w, air) as opened:
        opened.send_many(
            [(GO, {"url": "http://127.0.0.1:9/a"}), (GO, {"url": "http://127.0.0.1:9/b"})]
        )
        opened.run_until_idle()
    return w


def test_effects_ls_approve_and_deny(tmp_path: Path) -> None:
    w = approval_world(tmp_path)
    listed = world_json("effects", "ls", w)
    assert listed["ok"] is True
    assert [(i["status"], i["decision"], i["kind"]) for i in listed["intents"]] == [
        ("parked", "require_approval", "http.request")
    ] * 2
    by_what = {i["what"]: i for i in listed["intents"]}
    assert sorted(by_what) == ["GET http://127.0.0.1:9/a", "GET http://127.0.0.1:9/b"]
    first, second = (by_what[f"GET http://127.0.0.1:9/{p}"]["intent_hash"] for p in "ab")
    assert {(i["origin"]["kind"], i["origin"]["name"], i["cap"]) for i in by_what.values()} == {
        ("plan", "t/go@1", "http")
    }
    queued = {i["queued_seq"] for i in by_what.values()}  # when each was asked for, and since
    height = world_json("info", w)["journal_seq_next"]
    assert {i["age_records"] for i in by_what.values()} == {height - 1 - s for s in queued}
    with World.open(w, readonly=True) as opened:
        kinds = {r.kind for r in opened.journal.read(0) if r.seq in queued}
    assert kinds == {"effect.queued"}
    assert "record(s) ago" in world("effects", "ls", w).stdout
    table = world("effects", "ls", w).stdout  # what is approved, where from, and a usable prefix
    for intent in (first, second):
        assert intent.removeprefix("blake3:")[:16] in table
    assert "GET http://127.0.0.1:9/a" in table
    assert "plan t/go@1 run 0 step fetch" in table
    # An 8-character prefix (git-style) names the intent; the answer and the journal say which.
    assert world_json("effects", "approve", w, first[7:15])["decision"] == "approved"
    assert world_json("effects", "deny", w, second)["decision"] == "denied"
    status = {i["intent_hash"]: i["status"] for i in world_json("effects", "ls", w)["intents"]}
    assert status == {first: "queued", second: "denied"}


def test_dead_letters_ls_show_retry_and_drop(tmp_path: Path) -> None:
    w, event = tmp_path / "bank", "demo/AccountEvent@1"
    world("init", w, "--example", "account")
    for key, n in (("a", 2), ("b", 3)):
        world("send", w, event, json.dumps({"key": key, "op": {"$tag": "Withdraw", "$value": n}}))
    world("run", w, "--until-idle")
    listed = world_json("dead-letters", "ls", w)
    letters = {row["key"]: row for row in listed["letters"]}
    assert (listed["ok"], sorted(letters)) == (True, ["a", "b"])
    shown = world_json("dead-letters", "show", w, letters["a"]["id"])["letter"]
    assert shown["detail"] == "overdraft: balance 0, asked 2"
    world("send", w, event, json.dumps({"key": "a", "op": {"$tag": "Deposit", "$value": 2}}))
    assert world_json("dead-letters", "retry", w, letters["a"]["id"])["ok"] is True
    assert world_json("dead-letters", "drop", w, letters["b"]["id"])["ok"] is True
    world("run", w, "--until-idle")
    assert world_json("dead-letters", "ls", w)["letters"] == []
    assert world_json("state", w, "demo/Account@1", "--key", "a")["state"] == {"balance": 0}


def test_runs_ls_show_and_cancel(tmp_path: Path) -> None:
    w = approval_world(tmp_path)
    rows = world_json("runs", "ls", w)["runs"]
    assert [(r["run_id"], r["status"], r["waiting"]["for"]) for r in rows] == [
        (0, "waiting", "approval"),
        (1, "waiting", "approval"),
    ]
    assert world_json("runs", "show", w, "1")["effects"][0]["status"] == "parked"
    assert world_json("runs", "cancel", w, "1")["run_id"] == 1
    assert [r["status"] for r in world_json("runs", "ls", w)["runs"]] == ["waiting", "cancelled"]


def test_serve_takes_cli_commands_through_its_socket_and_stops(built: Built) -> None:
    w = copy_of(built, "served")
    proc = spawn("serve", str(w))
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            for _ in range(10):  # notices may come first; "serving ..." once it listens
                assert sel.select(WAIT_S), "the server never said it was listening"
                if proc.stdout.readline().startswith("serving"):
                    break
            else:
                pytest.fail("no 'serving' line")
        sock = w / "control.sock"
        assert stat.S_IMODE(sock.lstat().st_mode) == 0o600
        sent = world_json("send", w, EVENT, json.dumps(add("served", 6)))  # not refused on the lock
        assert pick(sent, "ok", "seqs") == {"ok": True, "seqs": [9]}
        assert world_json("state", w, COUNTER, "--key", "served")["state"] == {
            "count": 6,
            "events": 1,
        }
        stopped = world_json("serve", w, "--stop")  # drains, checkpoints, and waits for it
        assert (stopped["ok"], stopped["steps"]) == (True, 0)  # the send's step ran already
        assert stopped["snapshot"].startswith("blake3:")
        _out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, err
    assert not sock.exists()
    with World.open(w, readonly=True) as opened:  # the world is free again, and kept the send
        assert opened.state(COUNTER, "served") == {"count": 6, "events": 1}


def test_an_operator_acts_on_a_served_world_through_its_socket(tmp_path: Path) -> None:
    """Approvals, a run's cancel and dead letters go through the server (the world's lock is
    the server's); a command with no path through it (``run``) says the world is served and
    what to do, instead of a bare lock error."""
    w = approval_world(tmp_path)
    world("serve", w, "--detach")
    try:
        intents = {i["what"]: i["intent_hash"] for i in world_json("effects", "ls", w)["intents"]}
        approved = world_json("effects", "approve", w, intents["GET http://127.0.0.1:9/a"][7:17])
        assert approved["decision"] == "approved"
        waiting = [r["run_id"] for r in world_json("runs", "ls", w, "--status", "waiting")["runs"]]
        cancelled = world_json("runs", "cancel", w, str(waiting[-1]))
        assert (cancelled["run_id"], len(cancelled["intents"])) == (waiting[-1], 1)
        refused = world("run", w, "--until-idle", code=1).stderr
        assert "is served by `world serve`" in refused
        assert "stop the server" in refused
    finally:
        world("serve", w, "--stop")
    statuses = {r["run_id"]: r["status"] for r in world_json("runs", "ls", w)["runs"]}
    assert statuses[waiting[-1]] == "cancelled"

    bank, event = tmp_path / "bank", "demo/AccountEvent@1"
    world("init", bank, "--example", "account")
    world("serve", bank, "--detach")
    try:
        for key in ("a", "b"):
            value = {"key": key, "op": {"$tag": "Withdraw", "$value": 1}}
            world("send", bank, event, json.dumps(value))
        world("state", bank, "demo/Account@1", "--key", "b", code=1)  # refused: no cell
        letters = {r["key"]: r["id"] for r in world_json("dead-letters", "ls", bank)["letters"]}
        world("send", bank, event, json.dumps({"key": "a", "op": {"$tag": "Deposit", "$value": 1}}))
        assert world_json("dead-letters", "retry", bank, letters["a"])["ok"] is True
        assert world_json("dead-letters", "drop", bank, letters["b"])["ok"] is True
        assert world_json("state", bank, "demo/Account@1", "--key", "a")["state"] == {"balance": 0}
    finally:
        world("serve", bank, "--stop")
    assert world_json("dead-letters", "ls", bank)["letters"] == []


# --- the SDK and the bundled examples --------------------------------------------------------


def test_examples_lists_and_copies_a_bundled_world(tmp_path: Path) -> None:
    listed = world_json("examples")
    names = [e["name"] for e in listed["examples"]]
    assert {"counter", "counter_v1", "order"} <= set(names)
    world("examples", "copy", "counter", tmp_path / "c")
    assert (tmp_path / "c" / "reducers" / "counter" / "counter.wasm").is_file()
    assert sorted(p.name for p in (tmp_path / "c").glob("*.air.json")) == sorted(
        p.name for p in COUNTER_AIR.glob("*.air.json")
    )


def test_sdk_include_names_the_folder_of_the_header() -> None:
    folder = Path(world("sdk", "include").stdout.strip())
    assert (folder / "world.h").is_file()


@pytest.mark.skipif(sdk._ziglang_version() is None, reason="the reducer toolchain is not installed")
def test_reducer_new_build_and_check(tmp_path: Path) -> None:
    world("reducer", "new", "tally", cwd=tmp_path)
    assert sorted(p.name for p in (tmp_path / "tally").iterdir()) == ["tally.air.json", "tally.c"]
    built = world_json("reducer", "build", tmp_path / "tally" / "tally.c")
    assert Path(built["wasm"]) == tmp_path / "tally" / "tally.wasm"
    checked = world_json("reducer", "check", built["wasm"])
    assert (checked["ok"], checked["wasm_hash"]) == (True, built["wasm_hash"])


# --- errors ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def not_a_cell(built: Built) -> Path:
    bad = built.folder / "not-a-cell.cbor"
    bad.write_bytes(b"\xa1")
    return bad


ERRORS = [
    pytest.param(["state", "{w}", "demo/Nope@1"], id="core-state-unknown-reducer"),
    pytest.param(["serve", "{w}", "--stop"], id="serve-stop-without-a-server"),
    pytest.param(["cells", "show", "{w}", COUNTER, "zz"], id="cells-show-no-such-cell"),
    pytest.param(["journal", "tail", "{w}", "--subject", "["], id="journal-tail-bad-pattern"),
    pytest.param(["effects", "approve", "{w}", "blake3:" + "0" * 64], id="effects-no-such-intent"),
    pytest.param(["migrate", "cells", "{w}", COUNTER, "--key-field", "key"], id="migrate-keyed"),
    pytest.param(["examples", "copy", "nope", "{folder}/nope"], id="examples-unknown"),
    pytest.param(["reducer", "check", "{bad}"], id="reducer-check-not-wasm"),
    pytest.param(["sdk", "include", "extra"], id="sdk-extra-argument"),
]


@pytest.mark.parametrize("args", ERRORS)
def test_an_error_in_each_group_is_one_line_on_stderr_and_exit_1(
    built: Built, not_a_cell: Path, args: list[str]
) -> None:
    fill = {"{w}": str(built.path), "{folder}": str(built.folder), "{bad}": str(not_a_cell)}
    argv = []
    for arg in args:
        for name, value in fill.items():
            arg = arg.replace(name, value)
        argv.append(arg)
    one_line_error(world(*argv, code=1))


def test_an_error_with_json_is_one_object_on_stdout(built: Built) -> None:
    error = world_json("state", built.path, "demo/Nope@1", code=1)
    assert (error["ok"], error["error"], error["code"]) == (False, "UnknownName", "UnknownName")
    assert error["fields"]["name"] == "demo/Nope@1"
    assert COUNTER in error["fields"]["known"]


def test_a_partitioned_world_from_init_to_replay_and_upgrade(tmp_path: Path) -> None:
    """(Forwarding, ownership, crashes and Ray: ``test_cluster.py``, ``test_cluster_ray.py``.)"""
    root = tmp_path / "c"
    assert world_json("cluster", "init", root, "--air", COUNTER_AIR, "--partitions", 3)["ok"]
    events = tmp_path / "e.jsonl"
    events.write_text("\n".join(json.dumps(add(k, 2)) for k in ("a", "b", "c", "d", "a")))
    sent = world_json("cluster", "send", root, EVENT, "--file", events)["sent"]
    assert len(sent) == 5
    assert sent[0]["partition"] == sent[4]["partition"]  # one key, one partition
    assert world_json("cluster", "run", root)["steps"] == 5
    assert world_json("cluster", "state", root, COUNTER, "--key", "a")["state"] == {
        "count": 4,
        "events": 2,
    }
    info = world_json("cluster", "info", root)["partitions"]
    assert sum(p["cells"] for p in info) == 4
    cells = world_json("cluster", "cells", "ls", root, COUNTER)["cells"]
    assert sorted(c["key"] for c in cells) == ["a", "b", "c", "d"]
    from worldkit import counter_with_plans

    extra = {"$kind": "defschema", "name": "demo/Note@1", "type": {"record": {"text": "text"}}}
    v2 = counter_with_plans(tmp_path / "v2", [], [extra])  # one schema more
    upgraded = world_json("cluster", "upgrade", root, "--air", v2)["partitions"]
    assert [row["partition"] for row in upgraded] == [0, 1, 2]
    assert all("applied" in row for row in upgraded)
    replayed = world_json("cluster", "replay", root)
    assert replayed["ok"] is True
    assert len(replayed["partitions"]) == 3


@pytest.mark.long
def test_cluster_up_and_down_on_a_local_ray(tmp_path: Path) -> None:
    """``up`` starts a Ray instance of its own (a process group ``down`` stops) and an actor
    per partition; the commands go through them while it is up."""
    pytest.importorskip("ray")
    root = tmp_path / "c"
    world("cluster", "init", root, "--air", COUNTER_AIR, "--partitions", 4)
    up = world_json("cluster", "up", root, "--cpus", 2)
    try:
        assert up["ok"] is True
        assert len({p["pid"] for p in up["partitions"]}) == 4
        assert (root / "up.json").exists()
        world_json("cluster", "send", root, EVENT, json.dumps(add("k", 3)))
        for _ in range(600):  # until the owner has stepped it (its loop runs on its own)
            if sum(p["cells"] for p in world_json("cluster", "info", root)["partitions"]):
                break
        assert world_json("cluster", "state", root, COUNTER, "--key", "k")["state"] == {
            "count": 3,
            "events": 1,
        }
        refused = world("cluster", "run", root, code=1)
        assert "is up on Ray" in refused.stderr
        # the single-world commands ask the actors too
        assert world_json("cells", "ls", root, COUNTER)["count"] == 1
        assert world_json("why", root, COUNTER, '"k"')["state"] == {"count": 3, "events": 1}
        assert world_json("runs", "ls", root)["runs"] == []
    finally:
        world_json("cluster", "down", root)
    assert not (root / "up.json").exists()
    head = up["head_pid"]
    with pytest.raises(ProcessLookupError):
        os.killpg(head, 0)  # the Ray it started is gone
    assert world_json("cluster", "state", root, COUNTER, "--key", "k")["state"]["count"] == 3
