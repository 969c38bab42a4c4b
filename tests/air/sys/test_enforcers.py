"""The built-in capability enforcers (``air.sys.enforcers``): AgentOS's ``sys/CapEnforce*@1``
pure modules enter a world when named, a defcap's ``enforcer`` must be the one of its cap type
(or ``sys/CapAllowAll@1`` for a cap type with none), an author's own pure module is refused,
and none of it changes a hash."""

from __future__ import annotations

import json
from typing import Any

import pytest

from air import AirSource, load_air
from air.errors import ManifestError
from air.sys.enforcers import ALLOW_ALL, ENFORCERS
from world._airfiles import builtin_sources

HTTP_CAP = {
    "$kind": "defcap",
    "name": "t/http@1",
    "cap_type": "http.out",
    "schema": {"record": {"hosts": {"set": {"text": {}}}}},
}


def _load(docs: list[dict[str, Any]]) -> Any:
    return load_air([*builtin_sources(), AirSource("w.air.json", json.dumps(docs))])


def _errors(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as info:
        _load(docs)
    return [(d.code, d.pointer) for d in info.value.diagnostics if d.severity == "error"]


def test_the_enforcer_of_its_cap_type_loads_and_enters_the_manifest_list() -> None:
    cap = {**HTTP_CAP, "enforcer": {"module": ENFORCERS["http.out"]}}
    manifest = {"$kind": "manifest", "caps": ["t/http@1"], "modules": [ENFORCERS["http.out"]]}
    loaded = _load([cap, manifest])
    assert ENFORCERS["http.out"] in loaded.defs
    assert "sys/CapCheckInput@1" in loaded.defs  # the ABI's schemas come with it
    assert ENFORCERS["http.out"] not in loaded.modules  # a pure module is no reducer
    assert ENFORCERS["llm.basic"] not in loaded.defs  # on demand: only what is named


def test_an_unnamed_enforcer_leaves_every_hash_as_it_was() -> None:
    plain = _load([HTTP_CAP, {"$kind": "manifest"}])
    named = _load(
        [{**HTTP_CAP, "enforcer": {"module": ENFORCERS["http.out"]}}, {"$kind": "manifest"}]
    )
    assert named.def_hashes["t/http@1"] == plain.def_hashes["t/http@1"]
    assert ENFORCERS["http.out"] not in plain.defs


SNEAKS = [
    # (what the author tries, the enforcer written, the code)
    ("another cap type's enforcer", {"module": ENFORCERS["llm.basic"]}, "air.cap.enforcer"),
    ("allow-all on a cap type with checks", {"module": ALLOW_ALL}, "air.cap.enforcer"),
    ("an enforcer of their own", {"module": "t/MyEnforcer@1"}, "air.ref.unknown_module"),
    ("a name that is no module", {"module": "sys/HttpRequestParams@1"}, "air.ref.unknown_module"),
    ("not a module reference", {"wasm": "x.wasm"}, "air.shape"),
    ("a bare string", ENFORCERS["http.out"], "air.shape"),
    ("extra fields", {"module": ENFORCERS["http.out"], "config": {}}, "air.shape"),
]
"""The ways to get a check other than the cap type's built-in one, and what refuses each."""


@pytest.mark.parametrize(("what", "enforcer", "code"), SNEAKS, ids=[s[0] for s in SNEAKS])
def test_no_enforcer_but_the_cap_types_own_is_accepted(what: str, enforcer: Any, code: str) -> None:
    errors = _errors([{**HTTP_CAP, "enforcer": enforcer}, {"$kind": "manifest"}])
    assert (code, "/0/enforcer" + ("/module" if code != "air.shape" else "")) in errors, what


def test_allow_all_is_the_enforcer_of_a_cap_type_without_checks() -> None:
    cap = {"$kind": "defcap", "name": "t/c@1", "cap_type": "t.cap", "schema": {"record": {}}}
    plain = _load([cap, {"$kind": "manifest"}])
    loaded = _load([{**cap, "enforcer": {"module": ALLOW_ALL}}, {"$kind": "manifest"}])
    assert loaded.manifest_hash == plain.manifest_hash  # a name, pulling nothing in
    errors = _errors(
        [{**cap, "enforcer": {"module": ENFORCERS["http.out"]}}, {"$kind": "manifest"}]
    )
    assert ("air.cap.enforcer", "/0/enforcer/module") in errors


def test_an_authors_own_pure_module_is_refused() -> None:
    pure = {
        "$kind": "defmodule",
        "name": "t/Check@1",
        "module_kind": "pure",
        "abi": {"pure": {"input": "sys/CapCheckInput@1", "output": "sys/CapCheckOutput@1"}},
    }
    manifest = {"$kind": "manifest", "modules": ["t/Check@1", ENFORCERS["http.out"]]}
    errors = _errors([pure, manifest])
    assert errors == [("air.module.pure_unsupported", "/0/module_kind")]


def test_a_route_to_an_enforcer_is_refused_as_to_no_reducer() -> None:
    schema = {"$kind": "defschema", "name": "t/E@1", "type": {"record": {"n": "nat"}}}
    route = {"event": "t/E@1", "reducer": ENFORCERS["http.out"]}
    manifest = {"$kind": "manifest", "routing": {"events": [route]}}
    errors = _errors([schema, manifest])
    assert ("air.ref.unknown_module", "/1/routing/events/0/reducer") in errors
