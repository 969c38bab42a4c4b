"""``world cluster``: the commands on a stopped cluster (every partition opened in the process).
``up`` .. ``down`` on a local Ray, in real processes: ``test_cli_subprocess.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from test_cluster import FAN, fan_air, keys_owned_by
from typer.testing import CliRunner

from cli.main import app

from worldkit import COUNTER, EVENT, add

runner = CliRunner()
WORLD = str(Path(sys.executable).parent / "world")


def cli(*args: object, code: int = 0) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result.output


def cli_json(*args: object, code: int = 0) -> Any:
    return json.loads(cli(*args, "--json", code=code))


def test_init_send_run_state_info_cells_and_replay_of_a_stopped_cluster(tmp_path: Path) -> None:
    owned = keys_owned_by(4)
    root = tmp_path / "c"
    made = cli_json("cluster", "init", root, "--air", fan_air(tmp_path / "air"), "--partitions", 4)
    assert made["partitions"] == 4
    assert sorted(p.name for p in root.iterdir()) == ["cluster.json", "p0", "p1", "p2", "p3"]
    sent = cli_json("cluster", "send", root, EVENT, json.dumps(add(owned[2], 3)))
    assert sent["sent"] == [{"partition": 2, "seq": 1}]
    lines = tmp_path / "e.jsonl"
    fan = {"a": owned[1], "b": owned[2], "c": owned[3]}
    lines.write_text(
        "\n".join(json.dumps(v) for v in [{**fan, "$id": "fan-1"}, {**fan, "$id": "fan-1"}])
    )
    again = cli_json("cluster", "send", root, FAN, "--file", lines)
    assert again["sent"] == [{"partition": 0, "seq": 1}, {"partition": 0, "seq": 1}]  # one id
    assert "every partition is idle" in cli("cluster", "run", root)
    state = cli_json("cluster", "state", root, COUNTER, "--key", json.dumps(owned[2]))
    assert state["state"] == {"count": 4, "events": 2}
    assert json.loads(cli("cluster", "state", root, COUNTER, "--key", json.dumps(owned[3]))) == {
        "count": 1,
        "events": 1,
    }
    cli("cluster", "state", root, COUNTER, "--key", '"nobody"', code=1)
    info = cli_json("cluster", "info", root)
    assert [p["cells"] for p in info["partitions"]] == [0, 1, 1, 1]
    assert all(p["outbox_backlog"] == 0 for p in info["partitions"])
    shown = cli("cluster", "info", root)
    assert "outbox" in shown
    assert "ok" in shown
    cells = cli_json("cluster", "cells", "ls", root, COUNTER)["cells"]
    assert sorted((c["partition"], c["key"]) for c in cells) == [(i, owned[i]) for i in (1, 2, 3)]
    replayed = cli_json("cluster", "replay", root)
    assert replayed["ok"] is True
    assert len(replayed["partitions"]) == 4
    # And one partition is a world like any other.
    assert "replay ok" in cli("replay", root / "p2", "--verify")


def test_a_directory_that_is_not_a_cluster_is_named(tmp_path: Path) -> None:
    out = cli("cluster", "info", tmp_path, code=1)
    assert "not a partitioned world" in out
    out = cli("cluster", "init", tmp_path / "c", "--air", tmp_path, "--partitions", 0, code=1)
    assert "between 1 and 1024" in out


def test_a_damaged_partition_is_named_by_replay(tmp_path: Path) -> None:
    owned = keys_owned_by(2)
    root = tmp_path / "c"
    cli("cluster", "init", root, "--air", fan_air(tmp_path / "air"), "--partitions", 2)
    cli("cluster", "send", root, EVENT, json.dumps(add(owned[1], 3)))
    cli("cluster", "run", root)
    segment = sorted((root / "p1" / "journal").iterdir())[-1]
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0xFF  # inside the last record
    segment.write_bytes(bytes(data))
    out = cli("cluster", "replay", root, code=1)
    assert "p0: 1 records, 0 steps, ok" in out
    assert "p1: journal corrupt: " in out
    assert "1 partition(s) did not replay exactly" in out
