"""The built-in LLM and vault defs (``air.sys.llm``): on demand, so a world that names none of
them keeps its manifest hash; naming the effect kind brings the effect, its schemas and the
secret schemas it refers to; a plan's params are read through ``sys/LlmGenerateParams@1`` as
AgentOS's rung 07 writes them (every field, the options null)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from air import AirSource, load_air
from air.errors import ManifestError
from air.sys.llm import LLM_KIND
from world._airfiles import builtin_sources

LLM_DEFS = {
    "sys/llm.generate@1",
    "sys/LlmGenerateParams@1",
    "sys/LlmGenerateReceipt@1",
    "sys/TextOrSecretRef@1",
    "sys/SecretRef@1",
}


def _load(docs: list[dict[str, Any]]) -> Any:
    return load_air([*builtin_sources(), AirSource("w.air.json", json.dumps(docs))])


def _plan(params: dict[str, Any]) -> list[dict[str, Any]]:
    plan = {
        "$kind": "defplan",
        "name": "t/ask@1",
        "input": "sys/EmptyCap@1",
        "steps": [
            {"id": "ask", "op": "emit_effect", "kind": LLM_KIND, "params": params,
             "cap": "llm", "bind": {"effect_id_as": "r"}},
            {"id": "end", "op": "end"},
        ],
        "edges": [{"from": "ask", "to": "end"}],
        "required_caps": ["llm"],
        "allowed_effects": [LLM_KIND],
    }  # fmt: skip
    grant = {"name": "llm", "cap": "sys/llm.basic@1",
             "params": {"providers": None, "models": ["m"], "max_tokens": 100, "tools_allow": None}}  # fmt: skip
    return [plan, {"$kind": "manifest", "defaults": {"cap_grants": [grant]}}]


PARAMS = {
    "provider": {"text": "p"},
    "model": {"text": "m"},
    "temperature": {"text": "0"},
    "max_tokens": {"nat": 10},
    "message_refs": {"list": []},
    "tools": {"list": []},
    "api_key": {"null": {}},
}


def test_a_world_that_names_none_of_them_has_none_of_them() -> None:
    loaded = _load([{"$kind": "manifest"}])
    assert not LLM_DEFS & set(loaded.defs)
    assert not any(name.startswith("sys/Vault") for name in loaded.defs)


def test_a_plan_that_emits_llm_generate_brings_the_effect_its_schemas_and_the_cap() -> None:
    loaded = _load(_plan({"record": PARAMS}))
    assert LLM_DEFS | {"sys/llm.basic@1", "sys/LlmBasicCap@1"} <= set(loaded.defs)
    assert loaded.effects[LLM_KIND].cap_type == "llm.basic"
    assert not any(name.startswith("sys/Vault") for name in loaded.defs)


def test_the_vault_schemas_come_by_name_and_no_vault_effect_exists() -> None:
    manifest = {
        "$kind": "manifest",
        "schemas": ["sys/VaultPutParams@1", "sys/VaultRotateReceipt@1"],
    }
    loaded = _load([manifest])
    assert {"sys/VaultPutParams@1", "sys/VaultRotateReceipt@1"} <= set(loaded.defs)
    assert not {"vault.put", "vault.rotate"} & set(loaded.effects)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"max_tokens": {"int": -1}}, "air.value.mismatch"),  # not a nat
        ({"tool_refs": {"list": []}}, "unknown field 'tool_refs'"),  # AgentOS's, not ours
    ],
)
def test_params_that_are_not_llm_generate_params_are_refused(
    change: dict[str, Any], says: str
) -> None:
    with pytest.raises(ManifestError) as refused:
        _load(_plan({"record": {**PARAMS, **change}}))
    found = [f"{d.code} {d.message}" for d in refused.value.diagnostics]
    assert any(says in line for line in found), found
