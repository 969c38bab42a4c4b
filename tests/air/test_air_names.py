"""The one grammar of AIR def names (``air.types.def_name_problem``): every way to write a bad
name is refused with ``air.name.invalid`` at the def or at the reference that uses it, naming the
rule; good names, the AgentOS-style ones included, load; and every good name makes journal
subjects, so a world that validates can always journal its events."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from air import AirSource, LoadedAir, load_air
from air.errors import ManifestError
from air.types import DEF_NAME_MAX, def_name_problem, is_def_name
from cli.main import app
from kernel.subjects import cell_subject, event_subject, is_subject
from world._airfiles import builtin_sources

FILE = "w.air.json"
BASE: list[dict[str, Any]] = [
    {"$kind": "defschema", "name": "t/Event@1", "type": {"record": {"id": "text"}}},
    {"$kind": "defschema", "name": "t/State@1", "type": "nat"},
    {
        "$kind": "defmodule",
        "name": "t/Mod@1",
        "module_kind": "reducer",
        "wasm_hash": "blake3:" + "0" * 64,
        "abi": {"reducer": {"state": "t/State@1", "event": "t/Event@1"}},
    },
    {
        "$kind": "manifest",
        "routing": {"events": [{"event": "t/Event@1", "reducer": "t/Mod@1"}]},
    },
]

BAD = [
    pytest.param("demo/Cou nter@1", id="space"),
    pytest.param("demo/Counter @1", id="space-before-at"),
    pytest.param("demo/Counter\t@1", id="tab"),
    pytest.param("demo/Coun\nter@1", id="newline"),
    pytest.param("demo/x\x00@1", id="nul"),
    pytest.param("demo/x\x1b[31m@1", id="escape-sequence"),
    pytest.param("demo/x\x7f@1", id="del"),
    pytest.param("demo/../../x@1", id="dot-dot-path"),
    pytest.param("demo/a..b@1", id="dot-dot-inside"),
    pytest.param("../x@1", id="dot-dot-namespace"),
    pytest.param("a/b/c@1", id="extra-slash"),
    pytest.param("demo/x/@1", id="trailing-slash"),
    pytest.param("/demo/x@1", id="leading-slash"),
    pytest.param("demo/x@1@2", id="extra-at"),
    pytest.param("de@mo/x@1", id="at-in-namespace"),
    pytest.param("demo/x", id="no-version"),
    pytest.param("demo/x@", id="empty-version"),
    pytest.param("x@1", id="no-namespace"),
    pytest.param("/x@1", id="empty-namespace"),
    pytest.param("demo/@1", id="empty-name"),
    pytest.param("", id="empty"),
    pytest.param("demo/x@01", id="leading-zero-version"),
    pytest.param("demo/x@0", id="version-zero"),
    pytest.param("demo/x@-1", id="negative-version"),
    pytest.param("demo/x@1.0", id="dotted-version"),
    pytest.param("demo/x@v1", id="letter-version"),
    pytest.param("demo/x@\uff11", id="fullwidth-digit-version"),
    pytest.param("demo/x@1 ", id="trailing-space"),
    pytest.param("demo/x.@1", id="trailing-dot"),
    pytest.param(".demo/x@1", id="leading-dot"),
    pytest.param("-demo/x@1", id="leading-dash"),
    pytest.param("d\u0435mo/x@1", id="cyrillic-e-look-alike"),
    pytest.param("demo/C\u03bfunter@1", id="greek-omicron-look-alike"),
    pytest.param("demo/Café@1", id="accented-letter"),
    pytest.param("demo/x*@1", id="subject-wildcard-star"),
    pytest.param("demo/x>@1", id="subject-wildcard-gt"),
    pytest.param("demo\\x@1", id="backslash"),
    pytest.param("demo/x:y@1", id="colon"),
    pytest.param("t/" + "x" * DEF_NAME_MAX + "@1", id="too-long"),
]

GOOD = [
    "t/X@1",
    "demo/Counter@1",
    "sys/HttpRequest@1",
    "sys/TimerFired@2",
    "com.acme/http.out@1",
    "com.acme/Thing@1",
    "com.acme/OrderSM@2",
    "demo/allow_timers@1",
    "a-b/c-d@10",
    "_x/_y@99",
    "9lives/3d@123456789",
    "a.b.c/d.e.f@1",
    "x/y@1" + "0" * (DEF_NAME_MAX - 5),  # exactly DEF_NAME_MAX characters
]


def _load(docs: list[dict[str, Any]]) -> LoadedAir:
    return load_air([*builtin_sources(), AirSource(FILE, json.dumps(docs))])


def _found(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as info:
        _load(docs)
    return [(d.code, d.pointer) for d in info.value.diagnostics]


def _with_extra_schema(name: str) -> list[dict[str, Any]]:
    return [*copy.deepcopy(BASE), {"$kind": "defschema", "name": name, "type": "nat"}]


@pytest.mark.parametrize("name", BAD)
def test_a_bad_def_name_is_refused_at_its_name(name: str) -> None:
    assert _found(_with_extra_schema(name)) == [("air.name.invalid", "/4/name")]


@pytest.mark.parametrize("name", BAD)
def test_every_bad_name_has_a_reason(name: str) -> None:
    problem = def_name_problem(name)
    assert problem
    assert not is_def_name(name)


@pytest.mark.parametrize("name", GOOD)
def test_a_good_def_name_loads_and_makes_journal_subjects(name: str) -> None:
    assert def_name_problem(name) is None
    air = _load(_with_extra_schema(name))
    assert name in air.schemas
    assert is_subject(event_subject(name))
    assert is_subject(cell_subject(name, b"\x01" * 32))


def test_the_longest_good_name_is_exactly_the_limit() -> None:
    assert len(GOOD[-1]) == DEF_NAME_MAX
    assert def_name_problem(GOOD[-1] + "0") is not None


def _set_route(field: str, value: str) -> list[dict[str, Any]]:
    docs = copy.deepcopy(BASE)
    docs[3]["routing"]["events"][0][field] = value
    return docs


@pytest.mark.parametrize("name", ["t/Ev ent@1", "t/../Event@1", "t/Event@1@1", "t/Event@01"])
@pytest.mark.parametrize("field", ["event", "reducer"])
def test_a_bad_name_in_a_route_is_refused_there_and_not_also_unknown(field: str, name: str) -> None:
    assert _found(_set_route(field, name)) == [("air.name.invalid", f"/3/routing/events/0/{field}")]


def test_bad_names_in_the_manifest_and_the_module_are_each_refused_where_written() -> None:
    docs = copy.deepcopy(BASE)
    docs[2]["abi"]["reducer"]["state"] = "t/St ate@1"
    docs[3]["schemas"] = ["t/a/b@1"]
    docs[3]["triggers"] = [{"event": "t/Event@1", "plan": "t/plan@0"}]
    docs[3]["defaults"] = {"policy": "t/pol\x00icy@1"}
    docs[3]["module_bindings"] = {"t/Mod@1@1": {"slots": {}}}
    assert sorted(_found(docs)) == sorted(
        [
            ("air.name.invalid", "/2/abi/reducer/state"),
            ("air.name.invalid", "/3/schemas/0"),
            ("air.name.invalid", "/3/triggers/0/plan"),
            ("air.name.invalid", "/3/defaults/policy"),
            ("air.name.invalid", "/3/module_bindings/t~1Mod@1@1"),
        ]
    )


def test_a_bad_name_in_a_plan_is_refused_at_the_step() -> None:
    docs = copy.deepcopy(BASE)
    plan = {
        "$kind": "defplan",
        "name": "t/plan@1",
        "input": "t/Event@1",
        "steps": [
            {"id": "w", "op": "await_event", "event": "t/E vent@1", "bind": {"as": "e"}},
            {"id": "end", "op": "end"},
        ],
        "edges": [{"from": "w", "to": "end"}],
    }
    docs.insert(3, plan)
    assert _found(docs) == [("air.name.invalid", "/3/steps/0/event")]


def test_a_bad_schema_name_in_a_type_says_why() -> None:
    docs = copy.deepcopy(BASE)
    docs[1]["type"] = {"list": "t/Sta te@1"}
    with pytest.raises(ManifestError) as info:
        _load(docs)
    (diag,) = info.value.diagnostics
    assert (diag.code, diag.pointer) == ("air.type.invalid", "/1/type/list")
    assert "not a schema name" in diag.message


def test_the_message_names_the_rule_broken() -> None:
    with pytest.raises(ManifestError) as info:
        _load(_with_extra_schema("demo/x@01"))
    (diag,) = info.value.diagnostics
    assert diag.message == repr("demo/x@01") + " is not a def name: " + str(
        def_name_problem("demo/x@01")
    )


def test_world_validate_names_the_file_and_the_pointer(tmp_path: Path) -> None:
    air = tmp_path / "bad.air.json"
    docs = copy.deepcopy(BASE)
    docs[2]["name"] = docs[3]["routing"]["events"][0]["reducer"] = "t/Cou nter@1"
    air.write_text(json.dumps(docs))
    result = CliRunner().invoke(app, ["validate", str(air)])
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if "[air.name.invalid]" in line]
    assert [line.removeprefix("error: ").split(": ", 1)[0] for line in lines] == [
        f"{air}:/2/name",
        f"{air}:/3/routing/events/0/reducer",
    ]


# Names close to the grammar: parts drawn from the allowed characters and a few that are not.
_PART = st.text(alphabet="aZ09_.-/@ é\x00*>", min_size=0, max_size=8)
_NEAR_NAMES = st.builds(
    lambda a, b, v: f"{a}/{b}@{v}", _PART, _PART, st.text("0123456789@", max_size=4)
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_NEAR_NAMES, st.text(max_size=20)))
def test_every_name_the_grammar_accepts_makes_a_journal_subject(name: str) -> None:
    if is_def_name(name):
        assert is_subject(event_subject(name))
        assert len(name) <= DEF_NAME_MAX
    else:
        assert def_name_problem(name)
