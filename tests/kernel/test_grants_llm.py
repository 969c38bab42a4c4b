"""The ``llm.basic`` capability check (``kernel._grants.check_llm``, AgentOS's enforcer
``sys/CapEnforceLlmBasic@1``): each way an intent could ask for more than its grant gives, and
that it is refused with its code; what the grant leaves out restricts nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from air import AirSource, LoadedAir, load_air
from air.errors import ManifestError
from kernel._effects import CapDenied, EffectManager
from world._airfiles import builtin_sources

AGENTOS_CAP = {  # as AgentOS's rung 07 writes it
    "$kind": "defcap",
    "name": "t/llm@1",
    "cap_type": "llm.basic",
    "schema": {"record": {"models": {"set": "text"}, "max_tokens": "nat"}},
    "enforcer": {"module": "sys/CapEnforceLlmBasic@1"},
}
GRANTS = [
    {"name": "agentos", "cap": "t/llm@1", "params": {"models": ["m"], "max_tokens": 100}},
    {
        "name": "full",
        "cap": "sys/llm.basic@1",
        "params": {
            "providers": ["openai"],
            "models": ["m", "n"],
            "max_tokens": 50,
            "tools_allow": ["search"],
        },
    },
    {
        "name": "open",
        "cap": "sys/llm.basic@1",
        "params": {"providers": None, "models": None, "max_tokens": None, "tools_allow": None},
    },
    {
        "name": "none",
        "cap": "sys/llm.basic@1",
        "params": {"providers": [], "models": [], "max_tokens": 0, "tools_allow": []},
    },
]


def _air(*docs: dict[str, Any], grants: list[dict[str, Any]] = GRANTS) -> LoadedAir:
    manifest = {
        "$kind": "manifest",
        "air_version": "1",
        "effects": ["sys/llm.generate@1"],
        "defaults": {"cap_grants": grants},
    }
    text = json.dumps([AGENTOS_CAP, *docs, manifest])
    return load_air([*builtin_sources(), AirSource("t.air.json", text)])


@pytest.fixture(scope="module")
def effects() -> EffectManager:
    return EffectManager(_air())


def _params(**given: Any) -> dict[str, Any]:
    base = {"provider": "openai", "model": "m", "temperature": "0", "max_tokens": 10,
            "message_refs": [], "tools": None, "api_key": None}  # fmt: skip
    return {**base, **given}


SNEAKS = [
    ("agentos", _params(model="n"), "cap.model_not_allowed"),
    ("agentos", _params(model="M"), "cap.model_not_allowed"),
    ("agentos", _params(model="m "), "cap.model_not_allowed"),
    ("agentos", _params(max_tokens=101), "cap.max_tokens_exceeded"),
    ("agentos", _params(max_tokens=None), "cap.max_tokens_exceeded"),
    ("agentos", _params(max_tokens="10"), "cap.max_tokens_exceeded"),
    ("full", _params(provider="anthropic"), "cap.provider_not_allowed"),
    ("full", _params(max_tokens=51), "cap.max_tokens_exceeded"),
    ("full", _params(tools=["search", "shell"]), "cap.tool_not_allowed"),
    ("none", _params(), "cap.provider_not_allowed"),
    ("none", _params(provider=None), "cap.provider_not_allowed"),
]


@pytest.mark.parametrize(("grant", "params", "code"), SNEAKS)
def test_an_intent_asking_for_more_than_its_grant_is_refused_with_its_code(
    effects: EffectManager, grant: str, params: dict[str, Any], code: str
) -> None:
    with pytest.raises(CapDenied) as info:
        effects.check_cap("llm.generate", params, grant)
    assert info.value.code == code
    assert grant in info.value.detail


@pytest.mark.parametrize(
    ("grant", "params"),
    [
        ("agentos", _params(provider="anything", max_tokens=100, tools=["x"])),
        ("full", _params(model="n", max_tokens=50, tools=["search"])),
        ("open", _params(provider="p", model="z", max_tokens=10**9, tools=["any"])),
    ],
)
def test_within_the_grant_or_where_it_says_nothing_is_allowed(
    effects: EffectManager, grant: str, params: dict[str, Any]
) -> None:
    effects.check_cap("llm.generate", params, grant)


def test_an_llm_cap_whose_max_tokens_is_not_a_nat_is_refused_at_validation() -> None:
    bad = {**AGENTOS_CAP, "name": "t/bad@1",
           "schema": {"record": {"models": {"set": "text"}, "max_tokens": {"set": "text"}}}}  # fmt: skip
    with pytest.raises(ManifestError) as refused:
        _air(bad, grants=[])
    [found] = [d for d in refused.value.diagnostics if d.code == "air.cap.schema"]
    assert "'max_tokens' is a nat" in found.message


def test_an_llm_cap_with_a_field_the_kernel_does_not_check_is_refused() -> None:
    bad = {**AGENTOS_CAP, "name": "t/bad@1",
           "schema": {"record": {"temperature_max": "text"}}}  # fmt: skip
    with pytest.raises(ManifestError) as refused:
        _air(bad, grants=[])
    assert any("not 'temperature_max'" in d.message for d in refused.value.diagnostics)
