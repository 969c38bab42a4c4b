"""AIR loading and validation: every bundled manifest passes; each broken variant is rejected
with the right stable code and JSON pointer; both lenses give the same manifest hash."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from air import AirSource, LoadedAir, load_air
from air.errors import ManifestError
from world._airfiles import builtin_sources, load_air_path

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted(p for p in (ROOT / "manifests").iterdir() if p.is_dir())


def _order_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for f in sorted((ROOT / "manifests" / "order").glob("*.air.json")):
        docs.extend(json.loads(f.read_text()))
    return docs


def _load(docs: list[dict[str, Any]], file: str = "world.air.json") -> LoadedAir:
    return load_air([*builtin_sources(), AirSource(file, json.dumps(docs))])


def _codes(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as info:
        _load(docs)
    return [(d.code, d.pointer) for d in info.value.diagnostics]


def _find(
    docs: list[dict[str, Any]], kind: str, name: str | None = None
) -> tuple[int, dict[str, Any]]:
    for i, doc in enumerate(docs):
        if doc["$kind"] == kind and (name is None or doc.get("name") == name):
            return i, doc
    raise KeyError(kind)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_bundled_manifest_validates(path: Path) -> None:
    air = load_air_path(path)
    assert air.manifest_hash.startswith("blake3:")
    assert all(d.code != "air.module.wasm_missing" for d in air.warnings), (
        "bundled reducers are built"
    )


def test_valid_world_reports_no_errors_and_fills_every_def_hash() -> None:
    air = _load(_order_docs())
    assert set(air.def_hashes) == set(air.defs)
    assert "demo/fetch_flow@1" in air.plans


def test_unknown_schema_ref_is_reported_with_its_pointer() -> None:
    docs = _order_docs()
    i, schema = _find(docs, "defschema", "demo/OrderState@1")
    schema["type"]["record"]["url"] = "demo/Nope@1"
    assert ("air.ref.unknown_schema", f"/{i}/type") in _codes(docs)


def test_duplicate_name_is_rejected() -> None:
    docs = _order_docs()
    _, schema = _find(docs, "defschema", "demo/FetchDone@1")
    docs.append(copy.deepcopy(schema))
    assert ("air.name.duplicate", f"/{len(docs) - 1}/name") in _codes(docs)


def test_listing_a_builtin_def_again_is_harmless() -> None:
    docs = _order_docs()
    builtin = json.loads(builtin_sources()[0].text)
    docs.append(next(d for d in builtin if d.get("name") == "sys/TimerFired@1"))
    assert _load(docs).manifest_hash == _load(_order_docs()).manifest_hash


def test_cyclic_plan_is_rejected() -> None:
    docs = _order_docs()
    i, plan = _find(docs, "defplan")
    plan["edges"].append({"from": "fetched", "to": "fetch"})
    assert ("air.plan.cycle", f"/{i}/edges") in _codes(docs)


def test_keyed_route_to_non_keyed_reducer_is_rejected() -> None:
    docs = _order_docs()
    _, module = _find(docs, "defmodule")
    del module["key_schema"]
    m, _ = _find(docs, "manifest")
    codes = _codes(docs)
    assert ("air.route.keyed_to_unkeyed", f"/{m}/routing/events/0/key_field") in codes


def test_unkeyed_route_to_keyed_reducer_is_rejected() -> None:
    docs = _order_docs()
    m, manifest = _find(docs, "manifest")
    del manifest["routing"]["events"][1]["key_field"]
    assert ("air.route.unkeyed_to_keyed", f"/{m}/routing/events/1") in _codes(docs)


def test_key_field_missing_from_event_schema_is_rejected() -> None:
    docs = _order_docs()
    m, manifest = _find(docs, "manifest")
    manifest["routing"]["events"][0]["key_field"] = "order"
    assert ("air.route.key_field_missing", f"/{m}/routing/events/0/key_field") in _codes(docs)


def test_key_field_of_the_wrong_type_is_rejected() -> None:
    docs = _order_docs()
    m, manifest = _find(docs, "manifest")
    manifest["routing"]["events"][1]["key_field"] = "status"
    assert ("air.route.key_type_mismatch", f"/{m}/routing/events/1/key_field") in _codes(docs)


def test_literal_that_does_not_match_its_schema_is_rejected() -> None:
    docs = _order_docs()
    i, plan = _find(docs, "defplan")
    plan["steps"][2]["event"]["record"]["status"] = "not a number"
    assert ("air.value.mismatch", f"/{i}/steps/2/event/record/status") in _codes(docs)


def test_cap_grant_params_that_do_not_match_the_cap_schema_are_rejected() -> None:
    docs = _order_docs()
    m, manifest = _find(docs, "manifest")
    manifest["defaults"]["cap_grants"][0]["params"]["verbs"] = "GET"
    assert ("air.value.mismatch", f"/{m}/defaults/cap_grants/0/params/verbs") in _codes(docs)


def test_await_event_without_where_in_a_correlated_plan_is_rejected() -> None:
    docs = _order_docs()
    i, plan = _find(docs, "defplan")
    wait = {"id": "wait", "op": "await_event", "event": "demo/FetchDone@1", "bind": {"as": "e"}}
    plan["steps"].insert(3, wait)
    assert ("air.plan.await_event.where_required", f"/{i}/steps/3") in _codes(docs)


def test_await_event_with_where_in_a_correlated_plan_is_accepted() -> None:
    docs = _order_docs()
    _, plan = _find(docs, "defplan")
    where = {"op": "eq", "args": [{"ref": "@event.order_id"}, {"ref": "@plan.input.order_id"}]}
    wait = {"id": "wait", "op": "await_event", "event": "demo/FetchDone@1", "where": where}
    plan["steps"].insert(3, {**wait, "bind": {"as": "done"}})
    _load(docs)


def test_reducer_listing_a_plan_only_effect_is_rejected() -> None:
    docs = _order_docs()
    i, module = _find(docs, "defmodule")
    module["abi"]["reducer"]["effects_emitted"] = ["timer.set", "http.request"]
    assert ("air.effect.origin", f"/{i}/abi/reducer/effects_emitted/1") in _codes(docs)


def test_unknown_step_ref_and_event_outside_where_are_rejected() -> None:
    docs = _order_docs()
    i, plan = _find(docs, "defplan")
    plan["steps"][2]["event"]["record"]["status"] = {"ref": "@step:nope.status"}
    plan["steps"][0]["params"]["record"]["url"] = {"ref": "@event.url"}
    codes = _codes(docs)
    assert ("air.plan.ref.unknown_step", f"/{i}/steps/2/event/record/status") in codes
    assert ("air.plan.ref.event_outside_where", f"/{i}/steps/0/params/record/url") in codes


def test_every_problem_is_reported_at_once() -> None:
    docs = _order_docs()
    _m, manifest = _find(docs, "manifest")
    manifest["routing"]["events"][0]["key_field"] = "order"
    _i, plan = _find(docs, "defplan")
    plan["edges"].append({"from": "end_fetched", "to": "fetch"})
    codes = {c for c, _ in _codes(docs)}
    assert {"air.route.key_field_missing", "air.plan.cycle"} <= codes


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        pytest.param(
            lambda d: d.append({"$kind": "defwhat", "name": "a/b@1"}),
            "air.kind.unknown",
            id="unknown-kind",
        ),
        pytest.param(
            lambda d: d.append({"$kind": "defschema", "name": "nope", "type": "nat"}),
            "air.name.invalid",
            id="bad-name",
        ),
        pytest.param(
            lambda d: d.append({"$kind": "defschema", "name": "a/b@1", "type": "float"}),
            "air.type.invalid",
            id="bad-type",
        ),
        pytest.param(
            lambda d: d.append({"$kind": "defschema", "name": "a/b@1", "tpye": "nat"}),
            "air.shape",
            id="typo-field",
        ),
        pytest.param(
            lambda d: d.append(copy.deepcopy(_find(d, "manifest")[1])),
            "air.manifest.multiple",
            id="two-manifests",
        ),
        pytest.param(
            lambda d: d.remove(_find(d, "manifest")[1]), "air.manifest.missing", id="no-manifest"
        ),
    ],
)
def test_malformed_documents_are_rejected_with_stable_codes(mutate: Any, code: str) -> None:
    docs = _order_docs()
    mutate(docs)
    assert code in {c for c, _ in _codes(docs)}


def test_invalid_json_names_the_file() -> None:
    with pytest.raises(ManifestError) as info:
        load_air([AirSource("bad.air.json", "{nope")])
    assert info.value.diagnostics[0].file == "bad.air.json"
    assert info.value.diagnostics[0].code == "air.json.syntax"


def _to_tagged_and_shuffled(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    docs = copy.deepcopy(docs)[::-1]
    for doc in docs:
        if doc["$kind"] == "defschema":
            doc["type"] = _long_type(doc["type"])
        if doc["$kind"] == "manifest":
            grant = doc["defaults"]["cap_grants"][0]
            grant["params"] = {
                "record": {
                    "verbs": {"set": [{"text": "GET"}, "GET"]},
                    "hosts": {"set": ["localhost", "127.0.0.1"]},
                }
            }
        if doc["$kind"] == "defplan":
            doc["steps"] = doc["steps"][::-1]
            doc["steps"][-1]["params"]["record"]["method"] = {"text": "GET"}
    return [dict(reversed(list(d.items()))) for d in docs]


def _long_type(t: Any) -> Any:
    if isinstance(t, str):
        return {"ref": t} if "/" in t else {t: {}}
    ((kind, body),) = t.items()
    if kind in ("record", "variant"):
        return {kind: {k: _long_type(v) for k, v in reversed(list(body.items()))}}
    if kind == "map":
        return {"map": {"value": _long_type(body["value"]), "key": _long_type(body["key"])}}
    return {kind: _long_type(body)}


def test_same_air_in_either_lens_and_any_order_has_the_same_manifest_hash() -> None:
    docs = _order_docs()
    other = _to_tagged_and_shuffled(docs)
    assert other != docs
    assert _load(other).manifest_hash == _load(docs).manifest_hash


def test_a_real_change_changes_the_manifest_hash() -> None:
    docs = _order_docs()
    _m, manifest = _find(docs, "manifest")
    manifest["defaults"]["cap_grants"][0]["params"]["verbs"].append("POST")
    assert _load(docs).manifest_hash != _load(_order_docs()).manifest_hash
