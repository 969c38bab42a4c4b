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
from air.types import resolve
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

NOT_AGENTOS: dict[tuple[str, str], str] = {}
"""The objects of the normalized bundled manifests that AgentOS's v1 schemas refuse, and why:
none (each feature of ours the bundled manifests use has a form of AgentOS's they are rewritten
into, ``REWRITTEN``)."""

REWRITTEN = {
    ("account", "demo/Account@1"): "/key_schema",
    ("counter", "demo/Counter@1"): "/key_schema",
    ("order", "demo/Order@1"): "/key_schema",
    ("order", "demo/fetch_flow@1"): "/steps/2 /steps/5 /steps/6",
    ("order", "demo/order_policy@1"): "/rules/0/when/method",
    ("session", "demo/Session@1"): "/key_schema",
    ("timer", "demo/Timer@1"): "/key_schema /abi/reducer/cap_slots/timer",
}
"""What normalize rewrites in the bundled manifests into a form of AgentOS's that does the same
(its def hash differs): an inline key type lifted into a defschema, our raise_event in the routed
form, a policy ``method`` its grant implies, a cap slot naming a defcap as its cap type."""


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
    result = normalize_air(original)
    again = _reload(result)
    moved = {n for n in original.wasm_bytes if not original.defs[n].builtin}  # sha256, no bytes
    assert moved  # every bundled module names its wasm
    assert {n: again.wasm_hashes[n] for n in moved} != {n: original.wasm_hashes[n] for n in moved}
    assert all(again.wasm_hashes[n].startswith("sha256:") for n in moved)
    rewritten = {u.name for u in result.rewritten}
    lifted = set(result.lifted.values())
    assert set(again.def_hashes) == set(original.def_hashes) | lifted
    same = set(original.def_hashes) - moved - rewritten
    assert {n: again.def_hashes[n] for n in same} == {n: original.def_hashes[n] for n in same}
    again.wasm_hashes.update({n: original.wasm_hashes[n] for n in moved})
    fill_hashes(again, Located(again.manifest_file, "", again.manifest, None), Diagnostics())
    same = set(original.def_hashes) - rewritten
    assert {n: again.def_hashes[n] for n in same} == {n: original.def_hashes[n] for n in same}
    if not rewritten:
        assert again.manifest_hash == original.manifest_hash
    for module in result.lifted:  # the same key type, now by name
        found = resolve(again.key_types[module], again.schemas)
        assert found == resolve(original.key_types[module], original.schemas)


@pytest.mark.parametrize("name", MANIFESTS)
def test_normalized_air_reports_what_it_kept_of_ours_and_what_it_rewrote(name: str) -> None:
    result = normalize_air(_bundled(name))
    kept = {u.name for u in result.unmapped}
    assert kept == {n for (m, n) in NOT_AGENTOS if m == name}
    rewrote: dict[str, list[str]] = {}
    for u in result.rewritten:
        rewrote.setdefault(u.name, []).append(u.pointer)
    wanted = {n: sorted(p.split()) for (m, n), p in REWRITTEN.items() if m == name}
    assert {n: sorted(p) for n, p in rewrote.items()} == wanted


def test_a_routed_raise_event_is_written_only_where_the_routing_delivers_it_alike() -> None:
    original = _bundled("order")
    plan = next(d for d in normalize_air(original).files["plans.air.json"])
    raised = [s for s in plan["steps"] if s["op"] == "raise_event"]
    assert raised
    assert all(set(s) == {"id", "op", "event", "value"} for s in raised)
    assert {s["event"] for s in raised} == {"demo/FetchDone@1"}
    assert all("$schema" not in s["value"]["record"] for s in raised)
    # a second route of the schema, or a trigger on it, and it is kept as ours
    for extra in (
        {"routing": {"events": [*_raw_routes(original), {"event": "demo/FetchDone@1",
                                                         "reducer": "demo/Other@1"}]}},
        {"triggers": [{"event": "demo/FetchDone@1", "plan": "demo/fetch_flow@1"}]},
    ):  # fmt: skip
        changed = original.manifest.model_copy(update=_manifest_update(original, extra))
        twisted = type(original)(**{**original.__dict__, "manifest": changed})
        result = normalize_air(twisted)
        assert any(u.name == "demo/fetch_flow@1" for u in result.unmapped)


def _raw_routes(air: LoadedAir) -> list[dict[str, Any]]:
    return [r.model_dump(exclude_none=True) for r in air.manifest.routing.events]


def _manifest_update(air: LoadedAir, extra: dict[str, Any]) -> dict[str, Any]:
    from air._model import Route, Routing, Trigger

    if "routing" in extra:
        routes = [Route.model_validate(r) for r in extra["routing"]["events"]]
        return {"routing": Routing(events=routes)}
    return {"triggers": [Trigger.model_validate(t) for t in extra["triggers"]]}


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
    assert count >= 80


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
                doc["rules"][1]["when"]["method"] = "POST"  # no grant named: not implied
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
        ("demo/order_policy@1", "/rules/1/when/method"),
        ("demo/order_policy@1", "/rules/1/decision"),
        ("manifest", "/governance"),
        ("manifest", "/defaults/cap_grants/0/budget"),
    } <= kept
    manifest = result.files["manifest.air.json"]
    assert manifest["governance"] == {"apply_requires": ["approval"]}
    assert manifest["defaults"]["cap_grants"][0]["budget"] == {"bytes": 10}
    (policy,) = result.files["policies.air.json"]
    assert policy["rules"][1]["decision"] == "require_approval"
    rewritten = {(u.name, u.pointer) for u in result.rewritten}
    assert ("demo/order_policy@1", "/rules/0/when/method") in rewritten  # its grant is GET-only
    again = _reload(result).defs["demo/order_policy@1"].model
    before = load_air_path(folder).defs["demo/order_policy@1"].model
    assert again.rules[1] == before.rules[1]
    assert (again.rules[0].when.host, again.rules[0].when.method) == ("localhost", None)
