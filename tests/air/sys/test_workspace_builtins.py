"""The built-in workspace defs (``air.sys.workspace``): on demand, a world that names none of
them keeps its hash; naming the reducers brings their code, read from the bundled
``reducers/`` (``<builtin>/`` paths), hashed as the committed files are."""

from __future__ import annotations

import json
from typing import Any

from blake3 import blake3

from air import AirSource, load_air
from air.sys.workspace import WORKSPACE_KINDS, WORKSPACE_WASM
from world._airfiles import builtin_sources, inspect_wasm, read_file

from worldkit import ROOT


def _load(docs: list[dict[str, Any]]) -> Any:
    text = json.dumps(docs)
    return load_air([*builtin_sources(), AirSource("w.air.json", text)], read_file, inspect_wasm)


def test_a_world_that_names_none_of_them_has_none_of_them() -> None:
    loaded = _load([{"$kind": "manifest"}])
    assert not any("Workspace" in n or "HttpPublish" in n for n in loaded.defs)
    assert not WORKSPACE_KINDS & set(loaded.effects)


def test_the_built_in_reducers_come_with_their_committed_code() -> None:
    loaded = _load([{"$kind": "manifest", "modules": list(WORKSPACE_WASM)}])
    for module, file in WORKSPACE_WASM.items():
        stem = file.removesuffix(".wasm")
        committed = (ROOT / "reducers" / stem / file).read_bytes()
        assert loaded.wasm_bytes[module] == committed
        assert loaded.wasm_hashes[module] == "blake3:" + blake3(committed).hexdigest()
    assert loaded.key_types["sys/Workspace@1"] is not None
    assert "sys/HttpPublish@1" not in loaded.key_types


def test_every_workspace_effect_is_a_plan_effect_of_the_workspace_cap_type() -> None:
    manifest = {"$kind": "manifest", "effects": [f"sys/{k}@1" for k in sorted(WORKSPACE_KINDS)]}
    loaded = _load([manifest])
    assert {loaded.effects[k].cap_type for k in WORKSPACE_KINDS} == {"workspace"}
    assert all(loaded.effects[k].origins == ["plan"] for k in WORKSPACE_KINDS)


def test_a_builtin_path_reads_only_a_bundled_reducer() -> None:
    assert read_file("<builtin>/sys_workspace.wasm") is not None
    for path in (
        "<builtin>/../manifests/x.wasm",
        "<builtin>/sys_workspace.c",
        "<builtin>/nope.wasm",
    ):
        assert read_file(path) is None


def _commit(workspace: str, head: int | None, root: str = "ab") -> dict[str, Any]:
    meta = {"root_hash": "blake3:" + root * 32, "owner": "o", "created_at": 0}
    return {"workspace": workspace, "expected_head": head, "meta": meta}


def test_the_workspace_reducer_appends_versions_and_refuses_a_stale_head_or_a_bad_name(
    tmp_path: Any,
) -> None:
    from world import World
    from world.sdk import example_modules, example_path

    name = "agentos-09-workspaces"
    with World.create(tmp_path / "w", example_path(name), modules=example_modules(name)) as w:
        w.send("sys/WorkspaceCommit@1", _commit("alpha", None))
        w.send("sys/WorkspaceCommit@1", _commit("alpha", 1, "cd"))
        w.send("sys/WorkspaceCommit@1", _commit("alpha", 1, "ef"))  # head is 2 now: refused
        w.send("sys/WorkspaceCommit@1", _commit("no~good!", None))  # not a safe name: refused
        w.run_until_idle()
        state = w.state("sys/Workspace@1", "alpha")
        assert state["latest"] == 2
        assert [v for v, _ in state["versions"]] == [1, 2]
        assert state["versions"][1][1]["root_hash"] == "blake3:" + "cd" * 32
        assert w.state("sys/Workspace@1", "no~good!") is None
        refusals = [r for r in w.journal.read(0) if r.kind == "step.failed"]
        assert len(refusals) == 2
        said = " ".join(str(r.body) for r in refusals)
        assert "workspace head mismatch" in said
        assert "invalid workspace name" in said


def test_the_publish_registry_sets_replaces_and_removes_rules(tmp_path: Any) -> None:
    from world import World
    from world.sdk import example_modules, example_path

    name = "agentos-09-workspaces"
    rule = {"route_prefix": "/a", "workspace": {"workspace": "a", "version": None, "path": None},
            "default_doc": None, "allow_dir_listing": False, "cache": "none"}  # fmt: skip
    with World.create(tmp_path / "w", example_path(name), modules=example_modules(name)) as w:
        w.send("sys/HttpPublishSet@1", {"id": "a", "rule": rule})
        w.send("sys/HttpPublishSet@1", {"id": "b", "rule": {**rule, "route_prefix": "/b"}})
        w.send("sys/HttpPublishSet@1", {"id": "a", "rule": {**rule, "cache": "etag"}})
        w.send("sys/HttpPublishSet@1", {"id": "b", "rule": None})
        w.send("sys/HttpPublishSet@1", {"id": "zz", "rule": None})  # nothing to remove
        w.run_until_idle()
        rules = w.state("sys/HttpPublish@1")["rules"]
    assert list(rules) == ["a"]
    assert rules["a"]["cache"] == "etag"
