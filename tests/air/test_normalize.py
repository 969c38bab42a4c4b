"""``air._normalize``: every bundled manifest in AgentOS's strict form loads in our loader to the
same defs (a module's wasm hash aside, as the module docstring says), and validates under
AgentOS's AIR v1 JSON Schemas except for the features AgentOS's v1 lacks, listed here with
their reason so the list only shrinks. A bundled example is read as ``world init --example``
reads it: an ``agentos-*`` example's modules bound to the wasm its ``modules.json`` names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from air import AirSource, LoadedAir, Located, load_air
from air._canonical import fill_hashes
from air._diagnostics import Diagnostics
from air._normalize import NormalizedAir, _strict_expr, normalize_air
from air.expr import parse_expr, to_json
from world._airfiles import (
    air_sources,
    bind_module_wasm,
    builtin_sources,
    inspect_wasm,
    load_air_path,
    read_file,
)
from world.sdk import example_modules

from worldkit import ROOT

MANIFESTS = sorted(p.name for p in (ROOT / "manifests").iterdir() if p.is_dir())
SCHEMAS = ROOT.parent / "shared" / "agentos" / "spec" / "schemas"

KEY_SCHEMA = "key_schema is an inline type (text); AgentOS's is a schema name"
RAISE_EVENT = "raise_event {reducer, key, event}: AgentOS's last v1 has only {event, value}"
NOT_AGENTOS = {
    ("account", "demo/Account@1"): KEY_SCHEMA,
    ("counter", "demo/Counter@1"): KEY_SCHEMA,
    ("order", "demo/Order@1"): KEY_SCHEMA,
    ("order", "demo/fetch_flow@1"): RAISE_EVENT,
    ("order", "demo/order_policy@1"): "policy match field 'method': AgentOS's Match lacks it",
    ("session", "demo/Session@1"): KEY_SCHEMA,
    ("timer", "demo/Timer@1"): KEY_SCHEMA + "; a cap slot names a defcap, AgentOS's a cap type",
}
"""The objects of the normalized bundled manifests that AgentOS's v1 schemas refuse, and why."""


def _bundled(name: str) -> LoadedAir:
    """The bundled example ``name``'s AIR, its modules bound as ``world init --example`` does."""
    sources = builtin_sources() + air_sources(ROOT / "manifests" / name)
    return load_air(bind_module_wasm(sources, example_modules(name)), read_file, inspect_wasm)


def _reload(result: NormalizedAir) -> LoadedAir:
    sources = [
        AirSource(f"/normalized/{name}", json.dumps(doc)) for name, doc in result.files.items()
    ]
    return load_air(builtin_sources() + sources, read_file, inspect_wasm)


@pytest.mark.parametrize("name", MANIFESTS)
def test_normalized_air_loads_to_the_same_defs_given_back_each_modules_wasm_hash(
    name: str,
) -> None:
    original = _bundled(name)
    again = _reload(normalize_air(original))
    moved = set(original.wasm_bytes)  # written with a sha256 wasm_hash, no bytes
    assert moved  # every bundled module names its wasm
    assert {n: again.wasm_hashes[n] for n in moved} != {n: original.wasm_hashes[n] for n in moved}
    assert all(again.wasm_hashes[n].startswith("sha256:") for n in moved)
    assert {n: h for n, h in again.def_hashes.items() if n not in moved} == {
        n: h for n, h in original.def_hashes.items() if n not in moved
    }
    again.wasm_hashes.update({n: original.wasm_hashes[n] for n in moved})
    fill_hashes(again, Located(again.manifest_file, "", again.manifest, None), Diagnostics())
    assert again.def_hashes == original.def_hashes
    assert again.manifest_hash == original.manifest_hash


@pytest.mark.parametrize("name", MANIFESTS)
def test_normalized_air_reports_what_it_kept_of_ours(name: str) -> None:
    result = normalize_air(_bundled(name))
    kept = {u.name for u in result.unmapped}
    assert kept == {n for (m, n) in NOT_AGENTOS if m == name}


def _validators() -> dict[str, Any]:
    jsonschema = pytest.importorskip("jsonschema")
    referencing = pytest.importorskip("referencing")
    if not SCHEMAS.is_dir():
        pytest.skip(f"AgentOS's schemas are not at {SCHEMAS} (../shared beside the repository)")
    docs = {p.name: json.loads(p.read_text()) for p in SCHEMAS.glob("*.schema.json")}
    registry = referencing.Registry().with_resources(
        [(d["$id"], referencing.Resource.from_contents(d)) for d in docs.values()]
    )
    return {
        name.removesuffix(".schema.json"): jsonschema.Draft202012Validator(d, registry=registry)
        for name, d in docs.items()
    }


def test_normalized_bundled_manifests_validate_under_agentos_schemas() -> None:
    validators = _validators()
    refused = {}
    count = 0
    for name in MANIFESTS:
        result = normalize_air(_bundled(name))
        for doc in result.files.values():
            for obj in doc if isinstance(doc, list) else [doc]:
                count += 1
                errors = list(validators[obj["$kind"]].iter_errors(obj))
                if errors:
                    refused[(name, obj.get("name", "manifest"))] = errors[0].message
    assert set(refused) == set(NOT_AGENTOS), refused
    assert count - len(refused) >= 23  # of 30 objects: 1 of them as written


@pytest.mark.parametrize(
    ("authored", "strict"),
    [
        pytest.param(200, {"int": 200}, id="int"),
        pytest.param(2**64 - 1, {"nat": 2**64 - 1}, id="nat-above-i64"),
        pytest.param("GET", {"text": "GET"}, id="text"),
        pytest.param(None, {"null": {}}, id="null"),
        pytest.param({"none": {}}, {"null": {}}, id="none"),
        pytest.param({"some": 3}, {"int": 3}, id="some"),
        pytest.param({"bytes": "AA=="}, {"bytes_b64": "AA=="}, id="bytes"),
        pytest.param({"lit": {}}, {"record": {}}, id="lit"),
        pytest.param(
            {"op": "ge", "args": [{"ref": "@var:r.status"}, 200]},
            {"op": "ge", "args": [{"ref": "@var:r.status"}, {"int": 200}]},
            id="op",
        ),
        pytest.param(
            {"map": [{"key": "a", "value": True}]},
            {"map": [{"key": {"text": "a"}, "value": {"bool": True}}]},
            id="map",
        ),
    ],
)
def test_strict_exprs_are_agentos_spellings_of_the_same_expr(authored: Any, strict: Any) -> None:
    assert _strict_expr(authored) == strict
    assert to_json(parse_expr(strict)) == to_json(parse_expr(authored))


def test_a_module_without_wasm_is_reported_not_invented(tmp_path: Path) -> None:
    folder = tmp_path / "air"
    folder.mkdir()
    for file in (ROOT / "manifests" / "counter").glob("*.air.json"):
        docs = json.loads(file.read_text())
        for doc in docs if isinstance(docs, list) else [docs]:
            doc.pop("wasm", None)
        (folder / file.name).write_text(json.dumps(docs))
    result = normalize_air(load_air_path(folder))
    (module,) = result.files["modules.air.json"]
    assert "wasm_hash" not in module
    assert ("demo/Counter@1", "/wasm_hash") in {(u.name, u.pointer) for u in result.unmapped}


def test_features_agentos_lacks_are_kept_and_reported_one_line_each(tmp_path: Path) -> None:
    folder = tmp_path / "air"
    folder.mkdir()
    for file in (ROOT / "manifests" / "order").glob("*.air.json"):
        docs = json.loads(file.read_text())
        for doc in docs:
            if doc["$kind"] == "defpolicy":
                doc["rules"][0]["when"]["host"] = "localhost"
                doc["rules"][1]["decision"] = "require_approval"
            elif doc["$kind"] == "defmodule":
                doc["wasm"] = str(ROOT / "reducers" / "order" / "order.wasm")
            elif doc["$kind"] == "manifest":
                doc["governance"] = {"apply_requires": ["approval"]}
                doc["defaults"]["cap_grants"][0]["budget"] = {"bytes": 10}
        (folder / file.name).write_text(json.dumps(docs))
    result = normalize_air(load_air_path(folder))
    kept = {(u.name, u.pointer) for u in result.unmapped}
    assert {
        ("demo/order_policy@1", "/rules/0/when/host"),
        ("demo/order_policy@1", "/rules/0/when/method"),
        ("demo/order_policy@1", "/rules/1/decision"),
        ("manifest", "/governance"),
        ("manifest", "/defaults/cap_grants/0/budget"),
    } <= kept
    manifest = result.files["manifest.air.json"]
    assert manifest["governance"] == {"apply_requires": ["approval"]}
    assert manifest["defaults"]["cap_grants"][0]["budget"] == {"bytes": 10}
    (policy,) = result.files["policies.air.json"]
    assert policy["rules"][1]["decision"] == "require_approval"
    assert (
        _reload(result).def_hashes["demo/order_policy@1"]
        == load_air_path(folder).def_hashes["demo/order_policy@1"]
    )
