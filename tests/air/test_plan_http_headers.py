"""A plan may not set a header the HTTP client alone writes (``HTTP_HEADERS_REFUSED``: the
message's framing and its connection-specific fields): where the name is a constant, the AIR is
refused when it is validated (``air.plan.http_header``, at the pointer of the name as written),
in every way a constant can be written; a name computed at run time
validates and is the capability check's (``tests/kernel/test_grants.py``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from air import AirSource, LoadedAir, load_air
from air.errors import ManifestError
from air.sys.ondemand import HTTP_HEADERS_REFUSED
from world._airfiles import builtin_sources

CODE = "air.plan.http_header"
PARAMS = "/1/steps/0/params"
SECRET_REF = {"$tag": "secret", "$value": {"alias": "t/token", "version": 1}}


def _docs(params: Any, kind: str = "http.request") -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [
        {"$kind": "defschema", "name": "t/In@1", "type": {"record": {"name": "text"}}},
        {
            "$kind": "defplan",
            "name": "t/p@1",
            "input": "t/In@1",
            "steps": [
                {
                    "id": "e",
                    "op": "emit_effect",
                    "kind": kind,
                    "params": params,
                    "cap": "g",
                    "bind": {"effect_id_as": "e"},
                },
                {"id": "end", "op": "end"},
            ],
            "edges": [{"from": "e", "to": "end"}],
        },
        {
            "$kind": "manifest",
            "air_version": "1",
            "defaults": {
                "cap_grants": [
                    {"name": "g", "cap": "sys/http.out@1", "params": {"hosts": ["h"], "verbs": []}}
                ]
            },
        },
    ]
    if kind == "http.request.v2":
        docs.append({"$kind": "defsecret", "name": "t/token@1", "binding_id": "t"})
    return docs


def _load(params: Any, kind: str = "http.request") -> LoadedAir:
    return load_air([*builtin_sources(), AirSource("w.air.json", json.dumps(_docs(params, kind)))])


def _record(headers: Any) -> dict[str, Any]:
    return {
        "record": {
            "method": {"text": "GET"},
            "url": {"text": "http://h/"},
            "headers": headers,
            "body_ref": {"none": {}},
        }
    }


def _plain(headers: Any) -> dict[str, Any]:
    return {"method": "GET", "url": "http://h/", "headers": headers, "body_ref": None}


INPUT = {"ref": "@plan.input.name"}

CONSTANT_NAMES = [
    pytest.param(
        _plain({"Content-Length": "5"}),
        "http.request",
        f"{PARAMS}/headers/Content-Length",
        id="plain-json-params",
    ),
    pytest.param(
        {"lit": _plain({"Transfer-Encoding": "chunked"})},
        "http.request",
        f"{PARAMS}/lit/headers/Transfer-Encoding",
        id="lit-params",
    ),
    pytest.param(
        _record({"lit": {"connection": "close"}}),
        "http.request",
        f"{PARAMS}/record/headers/lit/connection",
        id="lit-headers",
    ),
    pytest.param(
        _record({"lit": {"X-A": "1", "Trailer": "x"}}),
        "http.request",
        f"{PARAMS}/record/headers/lit/Trailer",
        id="second-of-two",
    ),
    pytest.param(
        _record({"lit": {"te": "x"}}),
        "http.request",
        f"{PARAMS}/record/headers/lit/te",
        id="lit-lower-case",
    ),
    pytest.param(
        _record({"map": [{"key": {"text": "Upgrade"}, "value": INPUT}]}),
        "http.request",
        f"{PARAMS}/record/headers/map/0/key",
        id="map-entry-text-key",
    ),
    pytest.param(
        _record({"map": [{"key": "TE", "value": INPUT}]}),
        "http.request",
        f"{PARAMS}/record/headers/map/0/key",
        id="map-entry-bare-key",
    ),
    pytest.param(
        _record({"map": [{"key": {"text": " Keep-Alive "}, "value": {"text": "x"}}]}),
        "http.request",
        f"{PARAMS}/record/headers/map/0/key",  # folded into one constant, found as written
        id="padded-name-in-a-constant-map",
    ),
    pytest.param(
        {**_plain({"CONTENT-LENGTH": {"$tag": "literal", "$value": "5"}}), "body": None},
        "http.request.v2",
        f"{PARAMS}/headers/CONTENT-LENGTH",
        id="v2-literal-value",
    ),
    pytest.param(
        {**_plain({"Transfer-Encoding": SECRET_REF}), "body": None},
        "http.request.v2",
        f"{PARAMS}/headers/Transfer-Encoding",
        id="v2-secret-value",
    ),
]


@pytest.mark.parametrize(("params", "kind", "pointer"), CONSTANT_NAMES)
def test_a_client_header_named_by_a_constant_is_refused_when_the_air_is_validated(
    params: Any, kind: str, pointer: str
) -> None:
    with pytest.raises(ManifestError) as info:
        _load(params, kind)
    assert [(d.code, d.pointer) for d in info.value.diagnostics] == [(CODE, pointer)]


@pytest.mark.parametrize("name", sorted(HTTP_HEADERS_REFUSED))
def test_every_refused_name_is_refused_in_any_case(name: str) -> None:
    for spelled in (name, name.upper(), name.title()):
        with pytest.raises(ManifestError) as info:
            _load(_plain({spelled: "x"}))
        (diagnostic,) = info.value.diagnostics
        assert diagnostic.code == CODE
        assert repr(spelled) in diagnostic.message


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"map": [{"key": INPUT, "value": {"text": "chunked"}}]}, id="computed-name"),
        pytest.param({"lit": {"Host": "h", "Expect": "100-continue"}}, id="host-and-expect"),
        pytest.param({"lit": {"X-Content-Length": "5"}}, id="look-alike-name"),
        pytest.param({"lit": {}}, id="no-headers"),
    ],
)
def test_what_validation_cannot_see_or_allows_validates(headers: Any) -> None:
    assert _load(_record(headers)).plans
