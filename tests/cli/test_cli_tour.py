"""``world cells ls`` order and paging (local, served, and through a real subprocess), and the
``world demo`` tour."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from air import cbor
from cli.demo import KEY_ORDER, STAGES
from cli.main import app
from world import World
from world.serve import serve

from worldkit import COUNTER, COUNTER_AIR, EVENT

runner = CliRunner()
KEYS = [f"k{i}" for i in range(25)] + ["", "a", "zz", "é"]
WORLD_BIN = Path(sys.executable).parent / "world"


@pytest.fixture
def many(tmp_path: Path) -> Path:
    """A counter world with one cell per key in ``KEYS`` (sent in a shuffled order)."""
    w = tmp_path / "w"
    with World.create(w, COUNTER_AIR) as world:
        order = KEYS[7:] + KEYS[:7]
        world.send_many((EVENT, {"key": k, "op": {"$tag": "Add", "$value": 1}}) for k in order)
        world.run_until_idle()
    return w


def expected_order() -> list[str]:
    """Keys by their canonical CBOR bytes: shorter text first, then bytewise."""
    return sorted(KEYS, key=lambda k: cbor.dumps(k))


def pages(invoke: Any, w: Path, limit: int) -> list[dict[str, Any]]:
    out, after = [], None
    for _ in range(len(KEYS) + 2):
        args = ["cells", "ls", str(w), COUNTER, "--limit", str(limit), "--json"]
        if after is not None:
            args += ["--after", json.dumps(after)]
        page = invoke(args)
        out.append(page)
        if "next_after" not in page:
            return out
        after = page["next_after"]
    raise AssertionError("paging did not end")


def via_runner(args: list[str]) -> dict[str, Any]:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def check_pages(got: list[dict[str, Any]], limit: int) -> None:
    keys = [c["key"] for page in got for c in page["cells"]]
    assert keys == expected_order()  # every key once, in order
    assert [len(p["cells"]) for p in got[:-1]] == [limit] * (len(got) - 1)
    assert all(p["count"] == len(KEYS) and p["ok"] for p in got)
    assert all("next_after" in p for p in got[:-1])
    assert "next_after" not in got[-1]
    for page in got[:-1]:
        assert page["next_after"] == page["cells"][-1]["key"]


def test_cells_ls_pages_cover_every_key_once_in_order(many: Path) -> None:
    got = pages(via_runner, many, 10)
    assert len(got) == 3
    check_pages(got, 10)
    first = got[0]["cells"][0]
    assert set(first) == {"key", "key_hash", "state", "state_hash", "size", "last_active", "era"}
    assert first["state"] == {"count": 1, "events": 1}
    assert first["state_hash"].startswith("blake3:")
    order = expected_order()  # text: shorter first, then bytewise
    assert order[:3] == ["", "a", "k0"]
    assert order.index("é") < order.index("k10")
    one = via_runner(["cells", "ls", str(many), COUNTER, "--limit", "1000", "--json"])
    assert "next_after" not in one
    assert len(one["cells"]) == len(KEYS)
    # --after need not name an existing key; the default page is 100
    rest = via_runner(["cells", "ls", str(many), COUNTER, "--after", '"k3"', "--json"])
    assert [c["key"] for c in rest["cells"]] == expected_order()[expected_order().index("k3") + 1 :]
    table = runner.invoke(app, ["cells", "ls", str(many), COUNTER, "--limit", "5"])
    assert table.exit_code == 0
    assert "--after" in table.stdout
    assert "k1" in table.stdout


def test_cells_ls_bad_arguments_are_one_line(many: Path) -> None:
    for args in (["--limit", "0"], ["--after", "{"], ["--after", "3"]):
        result = runner.invoke(app, ["cells", "ls", str(many), COUNTER, *args])
        assert result.exit_code != 0


def test_cells_ls_through_a_subprocess(many: Path) -> None:
    def invoke(args: list[str]) -> dict[str, Any]:
        done = subprocess.run(
            [str(WORLD_BIN), *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        data: dict[str, Any] = json.loads(done.stdout)
        return data

    check_pages(pages(invoke, many, 10), 10)


def test_cells_ls_served_gives_the_same_pages(many: Path) -> None:
    local = pages(via_runner, many, 10)
    stop, ready, errors = threading.Event(), threading.Event(), []

    def run() -> None:
        try:
            serve(many, stop_event=stop, on_listening=lambda _p: ready.set())
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert ready.wait(20)
        assert errors == []
        assert pages(via_runner, many, 10) == local
    finally:
        stop.set()
        thread.join(20)
    assert errors == []
    assert not thread.is_alive()


def test_the_demo_tours_every_stage(tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--keep", str(tmp_path / "tour")])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for n, stage in enumerate(STAGES, start=1):
        assert f"{n}/{len(STAGES)} {stage}" in out
    for text in ("alice", "carol", "exported 1 cell", "migrated demo/Counter@1", "replay ok"):
        assert text in out
    assert "JSON output" in out
    assert (tmp_path / "tour" / "alice.cell.cbor").is_file()
    again = runner.invoke(app, ["demo", "--keep", str(tmp_path / "tour")])
    assert again.exit_code == 1  # --keep wants an absent or empty folder


def test_the_ladder_demo_runs_every_rung_to_its_end_and_replays_it(tmp_path: Path) -> None:
    from world.ladder import RUNGS, rung

    result = runner.invoke(app, ["demo", "--ladder", "--keep", str(tmp_path / "ladder")])
    assert result.exit_code == 0, result.output
    for n, name in enumerate(RUNGS, start=1):
        example = rung(name).example
        assert f"{n}/{len(RUNGS)} {example}" in result.stdout
        assert (tmp_path / "ladder" / example / "world").is_dir()
    assert result.stdout.count("replay ok") == len(RUNGS)
    assert f"{len(RUNGS)} rungs ran to their ends and replayed" in result.stdout


def test_a_rung_that_misses_its_end_fails_the_ladder_demo_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import world.ladder
    from world.ladder import Rung
    from world.ladder._kit import expect

    def short(path: Path, say: object) -> None:
        expect("the counter", {"pc": "Counting"}, {"pc": "Done"})

    monkeypatch.setattr(world.ladder, "rung", lambda name: Rung("agentos-00-counter", "t", short))
    result = runner.invoke(app, ["demo", "--ladder", "--keep", str(tmp_path / "ladder")])
    assert result.exit_code == 1
    assert "agentos-00-counter: the counter: got {'pc': 'Counting'}" in result.output


def test_the_demo_lists_the_cells_in_the_order_its_heading_names(tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--keep", str(tmp_path / "tour")])
    assert result.exit_code == 0, result.output
    heading = f"cells of {COUNTER}, {KEY_ORDER}:"
    assert heading in result.stdout
    listed = result.stdout.split(heading)[1].split("dave's cell")[0]
    keys = re.findall(r'│ "([a-z]+)" ', listed)
    assert keys == sorted(keys, key=cbor.dumps)  # the order cells ls pages in
    assert keys != sorted(keys)  # which is why the heading says which order it is
