"""``world air normalize`` writes the strict files and says what it kept of ours and what it
rewrote;
``world validate --agentos-schemas`` answers, per object, whether AgentOS's schemas take it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app

from worldkit import ROOT

runner = CliRunner()
SCHEMAS = ROOT.parent / "shared" / "agentos" / "spec" / "schemas"


def test_air_normalize_writes_one_file_per_kind_and_lists_what_it_kept(tmp_path: Path) -> None:
    out = tmp_path / "strict"
    result = runner.invoke(
        app, ["air", "normalize", str(ROOT / "manifests" / "order"), "-o", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert sorted(Path(f).name for f in answer["files"]) == [
        "manifest.air.json",
        "modules.air.json",
        "plans.air.json",
        "policies.air.json",
        "schemas.air.json",
    ]
    assert answer["kept"] == []
    assert {(k["name"], k["pointer"]) for k in answer["rewritten"]} == {
        ("demo/Order@1", "/key_schema"),
        ("demo/fetch_flow@1", "/steps/2"),
        ("demo/fetch_flow@1", "/steps/5"),
        ("demo/fetch_flow@1", "/steps/6"),
        ("demo/order_policy@1", "/rules/0/when/method"),
    }
    manifest = json.loads((out / "manifest.air.json").read_text())
    assert {e["name"] for e in manifest["schemas"]} >= {"demo/OrderPlaced@1", "demo/FetchDone@1"}
    assert "sys/HttpRequestParams@1" in {e["name"] for e in manifest["schemas"]}  # a built-in used
    assert [e["name"] for e in manifest["effects"]] == ["sys/http.request@1"]
    assert all(e["hash"].startswith("sha256:") for e in manifest["schemas"])
    again = runner.invoke(app, ["validate", str(out), "--json"])
    assert again.exit_code == 0, again.output


def test_air_normalize_of_invalid_air_prints_its_diagnostics(tmp_path: Path) -> None:
    (tmp_path / "bad.air.json").write_text('{"$kind": "manifest", "routing": 3}')
    result = runner.invoke(
        app, ["air", "normalize", str(tmp_path), "-o", str(tmp_path / "o"), "--json"]
    )
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"] == "ManifestError"
    assert not (tmp_path / "o").exists()


def test_validate_agentos_schemas_answers_per_object(tmp_path: Path) -> None:
    if not SCHEMAS.is_dir():
        pytest.skip(f"AgentOS's schemas are not at {SCHEMAS} (../shared beside the repository)")
    out = tmp_path / "strict"
    runner.invoke(app, ["air", "normalize", str(ROOT / "manifests" / "counter"), "-o", str(out)])
    for folder, valid in ((ROOT / "manifests" / "counter", 0), (out, None)):
        result = runner.invoke(
            app, ["validate", str(folder), "--json", "--agentos-schemas", str(SCHEMAS)]
        )
        assert result.exit_code == 0, result.output
        objects = json.loads(result.stdout)["objects"]
        wanted = len(objects) if valid is None else valid  # normalized: every object
        assert sum(o["agentos"]["valid"] for o in objects) == wanted, objects
        assert all(o["agentos"]["errors"] for o in objects if not o["agentos"]["valid"])


def test_validate_agentos_schemas_refuses_a_folder_without_them(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "validate",
            str(ROOT / "manifests" / "counter"),
            "--json",
            "--agentos-schemas",
            str(tmp_path),
        ],
    )
    assert result.exit_code != 0
    assert json.loads(result.stdout)["error"] == "InvalidArgument"


def test_validate_agentos_schemas_answers_for_air_our_loader_refuses(tmp_path: Path) -> None:
    if not SCHEMAS.is_dir():
        pytest.skip(f"AgentOS's schemas are not at {SCHEMAS} (../shared beside the repository)")
    manifest = {"$kind": "manifest", "air_version": "1", "routing": {"events": 3}}
    (tmp_path / "bad.air.json").write_text(json.dumps(manifest))
    result = runner.invoke(
        app, ["validate", str(tmp_path), "--json", "--agentos-schemas", str(SCHEMAS)]
    )
    assert result.exit_code == 1
    answer = json.loads(result.stdout)
    assert answer["error"] == "ManifestError"
    (obj,) = answer["objects"]
    assert (obj["kind"], obj["agentos"]["valid"]) == ("manifest", False)


def test_validate_agentos_schemas_prints_a_count_without_json() -> None:
    if not SCHEMAS.is_dir():
        pytest.skip(f"AgentOS's schemas are not at {SCHEMAS} (../shared beside the repository)")
    counter = ROOT / "manifests" / "counter"
    result = runner.invoke(app, ["validate", str(counter), "--agentos-schemas", str(SCHEMAS)])
    assert result.exit_code == 0, result.output
    assert "0 of 4 object(s) valid under AgentOS's schemas" in result.stdout
