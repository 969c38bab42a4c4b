"""The ``world`` CLI as a user drives it: exit codes, --json output, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from air import cbor
from cli.main import app

from worldkit import COUNTER, COUNTER_AIR, EVENT, ROOT

runner = CliRunner()


def world_cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def test_validate_json_reports_the_manifest_hash() -> None:
    code, out, _ = world_cli("validate", ROOT / "manifests" / "order", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["manifest_hash"].startswith("blake3:")
    assert data["plans"] == ["demo/fetch_flow@1"]


def test_validate_prints_every_diagnostic_and_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.air.json"
    bad.write_text(json.dumps([{"$kind": "defschema", "name": "a/b@1", "type": "float"}]))
    code, out, _ = world_cli("validate", bad, "--json")
    assert code == 1
    codes = {d["code"] for d in json.loads(out)["diagnostics"]}
    assert codes == {"air.type.invalid", "air.manifest.missing"}


def test_the_core_loop_through_the_cli(tmp_path: Path) -> None:
    w = tmp_path / "w"
    assert world_cli("init", w, "--air", COUNTER_AIR)[0] == 0
    event = json.dumps({"key": "order-1", "op": {"$tag": "Add", "$value": 3}})
    assert world_cli("send", w, EVENT, event)[0] == 0
    lines = tmp_path / "events.jsonl"
    lines.write_text(
        '{"key": "order-2", "op": {"$tag": "Add", "$value": 1}}\n\n{"key": "order-1", "op": "Clear"}\n'
    )
    code, out, _ = world_cli("send", w, EVENT, "--file", lines, "--json")
    assert (code, json.loads(out)["seqs"]) == (0, [2, 3])
    code, out, _ = world_cli("step", w, "--json")
    stepped = json.loads(
        out
    )  # and what runs did and the world waits for (tests/world/operate/test_runs_cli.py)
    assert {k: stepped[k] for k in ("ok", "steps", "pending", "steps_failed")} == {
        "ok": True,
        "steps": 1,
        "pending": 2,
        "steps_failed": 0,
    }
    assert json.loads(world_cli("run", w, "--until-idle", "--json")[1])["steps"] == 2
    code, out, _ = world_cli("state", w, COUNTER, "--key", "order-2", "--json")
    assert json.loads(out)["state"] == {"count": 1, "events": 1}
    cells = json.loads(world_cli("cells", "ls", w, COUNTER, "--json")[1])
    assert (cells["count"], [c["key"] for c in cells["cells"]]) == (1, ["order-2"])
    assert (
        json.loads(world_cli("cells", "show", w, COUNTER, '"order-2"', "--json")[1])["state"][
            "count"
        ]
        == 1
    )
    info = json.loads(world_cli("info", w, "--json")[1])
    assert info["reducers"][COUNTER] == {"keyed": True, "cells": 1}
    assert json.loads(world_cli("replay", w, "--verify", "--json")[1])["ok"] is True
    assert json.loads(world_cli("journal", "verify", w, "--json")[1])["records"] == 7
    tail = world_cli("journal", "tail", w, "--subject", "/world/event/**")[1].splitlines()
    assert [json.loads(line)["seq"] for line in tail] == [1, 2, 3]
    assert world_cli("snapshot", w, "--json")[0] == 0


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["state", "{w}", COUNTER, "--key", "nobody"], id="absent-cell"),
        pytest.param(["send", "{w}", EVENT, '{"key": "a"}'], id="bad-value"),
        pytest.param(["send", "{w}", "demo/Nope@1", "{}"], id="unknown-schema"),
        pytest.param(["state", "{w}", "demo/Nope@1"], id="unknown-reducer"),
        pytest.param(["info", "{w}/missing"], id="not-a-world"),
    ],
)
def test_errors_are_one_line_and_exit_1(tmp_path: Path, args: list[str]) -> None:
    w = tmp_path / "w"
    world_cli("init", w, "--air", COUNTER_AIR)
    code, _, err = world_cli(*[a.replace("{w}", str(w)) for a in args])
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("error:")


def test_journal_verify_reports_corruption_and_repair_keeps_a_backup(tmp_path: Path) -> None:
    w = tmp_path / "w"
    world_cli("init", w, "--air", COUNTER_AIR)
    for n in range(3):
        world_cli("send", w, EVENT, json.dumps({"key": "k", "op": {"$tag": "Add", "$value": n}}))
    (segment,) = (w / "journal").glob("*.log")
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    code, out, _ = world_cli("journal", "verify", w, "--json")
    report = json.loads(out)
    assert code == 1
    assert report["problem"]["segment"] == segment.name
    code, out, _ = world_cli("journal", "verify", w, "--repair", "--json")
    repaired = json.loads(out)["repaired"]
    assert repaired["backup_files"]
    assert all(Path(f).exists() for f in repaired["backup_files"])
    assert world_cli("journal", "verify", w, "--json")[0] == 0


def test_demo_runs_and_shows_the_cells(tmp_path: Path) -> None:
    code, out, _ = world_cli("demo", "--keep", tmp_path / "demo")
    assert code == 0
    assert "alice" in out
    assert "carol" in out
    assert "dave" not in out.split("cells of")[1].split("dave's")[0]


def test_a_schema_error_in_a_jsonl_batch_names_its_line_and_sends_nothing(
    tmp_path: Path,
) -> None:
    w = tmp_path / "w"
    world_cli("init", w, "--air", COUNTER_AIR)
    good = json.dumps({"key": "k", "op": {"$tag": "Add", "$value": 1}})
    bad = json.dumps({"key": "k", "op": {"$tag": "Add", "$value": -1}})
    batch = tmp_path / "events.jsonl"
    batch.write_text(f"{good}\n\n{bad}\n{good}\n")
    code, _, err = world_cli("send", w, EVENT, "--file", batch)
    assert code == 1
    assert f"{batch}:3" in err
    code, out, _ = world_cli("send", w, EVENT, "--file", batch, "--json")
    error = json.loads(out)
    assert (error["error"], error["fields"]["index"], error["fields"]["where"]) == (
        "EventRejected",
        1,
        f"{batch}:3",
    )
    assert json.loads(world_cli("info", w, "--json")[1])["journal_seq_next"] == 1


def test_journal_tail_shows_values_and_keys_through_their_schemas(tmp_path: Path) -> None:
    w = tmp_path / "w"
    world_cli("init", w, "--air", COUNTER_AIR)
    world_cli("send", w, EVENT, json.dumps({"key": "k1", "op": {"$tag": "Add", "$value": 2}}))
    world_cli("run", w, "--until-idle")
    lines = world_cli("journal", "tail", w, "--from", "1")[1].splitlines()
    sent, stepped = (json.loads(line) for line in lines)
    assert sent["body"]["value"] == {"key": "k1", "op": {"$tag": "Add", "$value": 2}}
    assert (stepped["kind"], stepped["body"]["key"]) == ("step", "k1")
    raw = json.loads(world_cli("journal", "tail", w, "--from", "1", "--raw")[1].splitlines()[0])
    assert raw["body"]["value"] == cbor.dumps(sent["body"]["value"]).hex()


def test_cells_ls_pages_in_key_order_and_reads_states_for_the_page_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from world import World
    from world.cellstore import FileCellStore

    from worldkit import add

    w = tmp_path / "w"
    keys = [f"k{n:02d}" for n in range(25)]
    with World.create(w, COUNTER_AIR) as world:
        world.send_many((EVENT, add(k, 1)) for k in reversed(keys))
        world.run_until_idle()
    reads: list[bytes] = []
    get = FileCellStore.get

    def counted(store: FileCellStore, module: str, khash: bytes) -> object:
        reads.append(khash)
        return get(store, module, khash)

    monkeypatch.setattr(FileCellStore, "get", counted)
    seen, after = [], None
    while True:
        args = ["cells", "ls", w, COUNTER, "--limit", "10", "--json"]
        reads.clear()
        page = json.loads(world_cli(*args, *(["--after", json.dumps(after)] if after else []))[1])
        assert page["count"] == 25
        assert len(reads) == len(page["cells"]) <= 10
        seen += [c["key"] for c in page["cells"]]
        if "next_after" not in page:
            break
        after = page["next_after"]
        assert after == page["cells"][-1]["key"]
    assert seen == keys  # text keys: canonical CBOR order is length, then bytes
