"""AgentOS's example worlds load (issue 22, item 3): a module that names no wasm is a warning
bound at ``world init --module NAME=FILE.wasm``; a built-in def written again identically is
accepted, a different one is refused; a reducer's ``cap_slots`` may name a cap type."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from air import AirSource, load_air
from air.errors import InvalidArgument, ManifestError
from cli.core import module_bindings
from world import Engine, World
from world._airfiles import air_sources, bind_module_wasm, builtin_sources, inspect_wasm, read_file
from world.history import verify_world

from worldkit import ROOT

COUNTER_AIR = ROOT / "manifests" / "counter"
COUNTER_WASM = ROOT / "reducers" / "counter" / "counter.wasm"
TIMER_AIR = ROOT / "manifests" / "timer"
COUNTER = "demo/Counter@1"
EVENT = "demo/CounterEvent@1"


def _without_wasm(folder: Path, into: Path) -> Path:
    """A copy of the AIR at ``folder`` whose modules name no wasm (as AgentOS writes them)."""
    into.mkdir(parents=True)
    for file in folder.glob("*.air.json"):
        docs = json.loads(file.read_text())
        for doc in docs if isinstance(docs, list) else [docs]:
            if doc.get("$kind") == "defmodule":
                doc.pop("wasm", None)
        (into / file.name).write_text(json.dumps(docs, indent=2))
    return into


def _docs(folder: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for file in sorted(folder.glob("*.air.json")):
        docs = json.loads(file.read_text())
        out += docs if isinstance(docs, list) else [docs]
    return out


def _load(docs: list[dict[str, Any]], **kwargs: Any) -> Any:
    return load_air([*builtin_sources(), AirSource("w.air.json", json.dumps(docs))], **kwargs)


def _errors(docs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    with pytest.raises(ManifestError) as info:
        _load(docs)
    return [(d.code, d.pointer, d.message) for d in info.value.diagnostics]


# --- modules without a wasm -----------------------------------------------------------------


def test_a_module_naming_no_wasm_is_a_warning_at_its_pointer(tmp_path: Path) -> None:
    air = _without_wasm(COUNTER_AIR, tmp_path / "air")
    sources = builtin_sources() + air_sources(air)
    loaded = load_air(sources, read_file, inspect_wasm)
    found = [(d.code, d.pointer, d.severity) for d in loaded.warnings]
    assert found == [("air.module.wasm_unbound", "/0", "warning")]
    assert loaded.warnings[0].file.endswith("counter.air.json")
    assert f"--module {COUNTER}=FILE.wasm" in loaded.warnings[0].message
    assert COUNTER not in loaded.wasm_hashes


def test_init_without_the_binding_names_the_module_and_the_option(tmp_path: Path) -> None:
    air = _without_wasm(COUNTER_AIR, tmp_path / "air")
    with pytest.raises(InvalidArgument) as info:
        World.create(tmp_path / "w", air)
    assert COUNTER in str(info.value)
    assert "--module" in str(info.value)
    assert not (tmp_path / "w").exists()


def test_init_binds_a_module_reopens_and_replays(tmp_path: Path) -> None:
    air = _without_wasm(COUNTER_AIR, tmp_path / "air")
    w = tmp_path / "w"
    with World.create(tmp_path / "plain", COUNTER_AIR) as plain:
        expected = plain.air.manifest_hash  # the AIR that names the wasm itself
    with World.create(w, air, modules={COUNTER: COUNTER_WASM}) as world:
        assert world.air.manifest_hash == expected
        world.send(EVENT, {"key": "a", "op": {"$tag": "Add", "$value": 2}})
        world.run_until_idle()
    with World.open(w) as world:
        assert world.air.manifest_hash == expected
        world.send(EVENT, {"key": "a", "op": {"$tag": "Add", "$value": 3}})
        world.run_until_idle()
        assert world.state(COUNTER, "a")["count"] == 5
    with World.open(w, readonly=True) as world:
        assert world.state(COUNTER, "a") == {"count": 5, "events": 2}
    assert verify_world(w).ok
    # The world stores the binding as the module's wasm path: it needs no --module again.
    stored = json.loads((w / "air" / "sources.json").read_text())
    assert str(COUNTER_WASM.resolve().as_posix()) in stored["wasm"]


def test_the_cli_binds_with_module(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    air = _without_wasm(COUNTER_AIR, tmp_path / "air")
    runner = CliRunner()
    args = ["init", str(tmp_path / "w"), "--air", str(air)]
    refused = runner.invoke(app, args)
    assert refused.exit_code != 0
    made = runner.invoke(app, [*args, "--module", f"{COUNTER}={COUNTER_WASM}"])
    assert made.exit_code == 0, made.output
    with World.open(tmp_path / "w", readonly=True) as world:
        assert COUNTER in world.air.wasm_hashes


@pytest.mark.parametrize(
    ("name", "file", "says"),
    [
        pytest.param("demo/Nope@1", COUNTER_WASM, "no module demo/Nope@1", id="not-a-module"),
        pytest.param(COUNTER, Path("missing.wasm"), "no wasm file", id="missing-file"),
        pytest.param("demo/CounterEvent@1", COUNTER_WASM, "no module", id="a-schema-not-a-module"),
    ],
)
def test_a_bad_binding_is_refused_naming_it(
    tmp_path: Path, name: str, file: Path, says: str
) -> None:
    air = _without_wasm(COUNTER_AIR, tmp_path / "air")
    with pytest.raises(InvalidArgument) as info:
        World.create(tmp_path / "w", air, modules={name: file})
    assert says in str(info.value)
    assert name in str(info.value)
    assert not (tmp_path / "w").exists()


def test_binding_a_module_that_names_its_wasm_is_refused() -> None:
    sources = builtin_sources() + air_sources(COUNTER_AIR)
    with pytest.raises(InvalidArgument, match="already names its wasm"):
        bind_module_wasm(sources, {COUNTER: COUNTER_WASM})


def test_a_module_bound_twice_or_a_malformed_option_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="bound twice"):
        module_bindings([f"{COUNTER}=a.wasm", f"{COUNTER}=b.wasm"])
    with pytest.raises(InvalidArgument, match=r"NAME=FILE\.wasm"):
        module_bindings([COUNTER])
    assert module_bindings([f"{COUNTER}=a.wasm"]) == {COUNTER: Path("a.wasm")}


def test_binding_leaves_other_sources_byte_for_byte(tmp_path: Path) -> None:
    air = _without_wasm(COUNTER_AIR, tmp_path / "air")
    sources = builtin_sources() + air_sources(air)
    bound = bind_module_wasm(sources, {COUNTER: COUNTER_WASM})
    changed = [s.file for s, b in zip(sources, bound, strict=True) if s.text != b.text]
    assert [Path(f).name for f in changed] == ["counter.air.json"]


# --- a built-in def written again -----------------------------------------------------------

AGENTOS_CAPS = [  # examples/01-hello-timer and 02-blob-echo's capabilities.air.json
    {"$kind": "defcap", "name": "sys/timer@1", "cap_type": "timer", "schema": {"record": {}}},
    {"$kind": "defcap", "name": "sys/blob@1", "cap_type": "blob", "schema": {"record": {}}},
]


def test_a_built_in_written_again_identically_is_accepted() -> None:
    docs = _docs(TIMER_AIR)
    plain = _load(docs)
    again = _load(
        [
            *AGENTOS_CAPS,
            {"$kind": "defcap", "name": "sys/http.out@1", "cap_type": "http.out",
             "schema": "sys/HttpOutCap@1"},
            {"$kind": "defschema", "name": "sys/TimerSetParams@1",
             "type": {"record": {"key": {"option": {"text": {}}}, "deliver_at_ns": {"nat": {}}}}},
            *docs,
        ]
    )  # fmt: skip
    assert again.manifest_hash == plain.manifest_hash
    assert again.defs["sys/timer@1"].builtin
    assert again.warnings == []


@pytest.mark.parametrize(
    "redefined",
    [
        pytest.param({**AGENTOS_CAPS[0], "cap_type": "blob"}, id="another-cap-type"),
        pytest.param(
            {**AGENTOS_CAPS[0], "schema": {"record": {"hosts": {"set": "text"}}}},
            id="another-schema",
        ),
        pytest.param(
            {"$kind": "defschema", "name": "sys/TimerSetParams@1", "type": {"record": {}}},
            id="a-schema",
        ),
        pytest.param(
            {"$kind": "defschema", "name": "sys/timer@1", "type": {"record": {}}},
            id="another-kind",
        ),
    ],
)
def test_a_built_in_written_differently_is_refused(redefined: dict[str, Any]) -> None:
    found = _errors([redefined, *_docs(TIMER_AIR)])
    assert [(c, p) for c, p, _ in found] == [("air.name.duplicate", "/0/name")]
    assert "built-in" in found[0][2]
    assert "differs" in found[0][2]


def test_two_author_defs_of_one_name_are_still_duplicates() -> None:
    docs = _docs(TIMER_AIR)
    schema = next(d for d in docs if d["name"] == "demo/TimerEvent@1")
    found = _errors([*docs, copy.deepcopy(schema)])
    assert [c for c, _, _ in found] == ["air.name.duplicate"]
    assert "already defined" in found[0][2]


# --- cap slots naming a cap type ------------------------------------------------------------


def _timer_docs(slot_value: str) -> list[dict[str, Any]]:
    docs = _docs(TIMER_AIR)
    module = next(d for d in docs if d["$kind"] == "defmodule")
    module["abi"]["reducer"]["cap_slots"] = {"timer": slot_value}
    return docs


def _module_index(docs: list[dict[str, Any]]) -> int:
    return next(i for i, d in enumerate(docs) if d["$kind"] == "defmodule")


def test_a_cap_slot_may_name_a_cap_type() -> None:
    air = _load(_timer_docs("timer"))
    assert air.defs["demo/Timer@1"].model.abi.reducer.cap_slots == {"timer": "timer"}
    assert air.slot_caps == {"demo/Timer@1": {"timer": "sys/timer@1"}}
    assert air.modules["demo/Timer@1"].abi.reducer.cap_slots == {"timer": "sys/timer@1"}


def test_a_cap_type_slot_without_a_binding_uses_the_one_grant_of_its_type() -> None:
    docs = _timer_docs("timer")
    del docs[-1]["module_bindings"]
    air = _load(docs)
    assert air.slot_caps == {"demo/Timer@1": {"timer": "sys/timer@1"}}


def test_an_unknown_cap_type_in_a_slot_is_unknown_cap() -> None:
    docs = _timer_docs("timers")
    found = _errors(docs)
    at = f"/{_module_index(docs)}/abi/reducer/cap_slots/timer"
    assert ("air.ref.unknown_cap", at) in [(c, p) for c, p, _ in found]
    message = next(m for c, _, m in found if c == "air.ref.unknown_cap")
    assert "neither a defcap nor a cap type" in message


def test_a_cap_type_slot_bound_to_a_grant_of_another_type_is_a_mismatch() -> None:
    docs = _timer_docs("blob")
    docs[-1]["defaults"]["cap_grants"].append({"name": "blobs", "cap": "sys/blob@1", "params": {}})
    found = [(c, p) for c, p, _ in _errors(docs)]
    assert ("air.cap.type_mismatch", "/4/module_bindings/demo~1Timer@1/slots/timer") in found


def test_a_timer_world_whose_slot_names_the_cap_type_runs_and_replays(tmp_path: Path) -> None:
    air = tmp_path / "air"
    air.mkdir()
    docs = _timer_docs("timer")
    module = docs[_module_index(docs)]
    module["wasm"] = str((ROOT / "reducers" / "timer" / "timer.wasm").resolve())
    (air / "timer.air.json").write_text(json.dumps(docs))
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send("demo/TimerEvent@1", {"key": "t", "deliver_at_ns": 1_000})
    with World.open(w) as world, Engine(world, sim=True) as loop:
        assert loop.run().receipts == 1
        assert world.state("demo/Timer@1", "t")["last_fired_ns"] == 1_000
    assert verify_world(w).ok
    shutil.rmtree(w)


# --- AgentOS's sha256 refs and defcap enforcers -------------------------------------------------


def test_a_sha256_ref_in_the_manifest_is_a_warning_and_a_blake3_one_is_still_checked() -> None:
    schema = {"$kind": "defschema", "name": "t/S@1", "type": {"record": {"n": "int"}}}
    foreign = "sha256:" + "ab" * 32
    manifest = {"$kind": "manifest", "schemas": [{"name": "t/S@1", "hash": foreign}]}
    loaded = _load([schema, manifest])
    found = [(d.code, d.pointer, d.severity) for d in loaded.warnings]
    assert found == [("air.hash.foreign", "/1/schemas/0/hash", "warning")]
    same = _load([schema, {"$kind": "manifest"}])
    assert loaded.manifest_hash == same.manifest_hash  # the foreign hash changes nothing
    wrong = {**manifest, "schemas": [{"name": "t/S@1", "hash": "blake3:" + "00" * 32}]}
    assert [code for code, _, _ in _errors([schema, wrong])] == ["air.hash.mismatch"]


def test_a_defcap_with_agentos_enforcer_loads_and_hashes_as_without() -> None:
    cap = {"$kind": "defcap", "name": "t/cap@1", "cap_type": "t.cap", "schema": {"record": {}}}
    enforced = {**cap, "enforcer": {"module": "sys/CapAllowAll@1"}}
    manifest = {"$kind": "manifest"}
    plain, with_enforcer = _load([cap, manifest]), _load([enforced, manifest])
    assert with_enforcer.def_hashes["t/cap@1"] == plain.def_hashes["t/cap@1"]
    assert with_enforcer.manifest_hash == plain.manifest_hash


def test_a_proposal_binds_its_unbound_modules_with_module(tmp_path: Path) -> None:
    """``world upgrade propose --module``: an AIR whose module names no wasm is proposed and
    applied as ``world init --module`` would take it."""
    from typer.testing import CliRunner

    from cli.main import app

    w = tmp_path / "w"
    with World.create(w, COUNTER_AIR):
        pass
    air = _without_wasm(COUNTER_AIR, tmp_path / "v2")
    fixed = tmp_path / "fixed.wasm"
    payload = b"\x03fix"
    fixed.write_bytes(COUNTER_WASM.read_bytes() + bytes([0, len(payload)]) + payload)
    runner = CliRunner()
    refused = runner.invoke(app, ["upgrade", "propose", str(w), "--air", str(air)])
    assert refused.exit_code == 1
    made = runner.invoke(
        app,
        [
            "upgrade",
            "propose",
            str(w),
            "--air",
            str(air),
            "--module",
            f"{COUNTER}={fixed}",
            "--json",
        ],
    )
    assert made.exit_code == 0, made.output
    proposal = json.loads(made.stdout)
    assert proposal["diff"]["reducers"][0]["wasm_same"] is False
    applied = runner.invoke(app, ["upgrade", "apply", str(w), str(proposal["id"])])
    assert applied.exit_code == 0, applied.output
    with World.open(w) as world:
        assert world.air.wasm_hashes[COUNTER] == world.cas.put(fixed.read_bytes())
    assert verify_world(w).ok
