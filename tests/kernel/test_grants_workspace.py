"""The ``workspace`` capability check (``kernel._grants.check_workspace``, AgentOS's enforcer
``sys/CapEnforceWorkspace@1``): the op, the workspace and the path each refused with its code
when outside the grant; an absent field restricts nothing and, unlike AgentOS's, an empty list
allows nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from air import AirSource, LoadedAir, load_air
from kernel._effects import CapDenied, EffectManager
from world._airfiles import builtin_sources

GRANTS = [
    {"name": "demo", "cap": "sys/workspace@1",  # as AgentOS's rung 09 grants
     "params": {"workspaces": ["alpha", "beta"], "path_prefixes": None,
                "ops": ["resolve", "list", "read", "write", "diff"]}},
    {"name": "docs", "cap": "sys/workspace@1",
     "params": {"workspaces": None, "path_prefixes": ["docs", "site/pub"], "ops": None}},
    {"name": "open", "cap": "sys/workspace@1",
     "params": {"workspaces": None, "path_prefixes": None, "ops": None}},
    {"name": "none", "cap": "sys/workspace@1",
     "params": {"workspaces": [], "path_prefixes": [], "ops": []}},
]  # fmt: skip
ROOT = b"\1" * 32


def _air() -> LoadedAir:
    manifest = {
        "$kind": "manifest",
        "air_version": "1",
        "effects": ["sys/workspace.resolve@1", "sys/workspace.write_bytes@1",
                    "sys/workspace.annotations_get@1", "sys/workspace.diff@1",
                    "sys/workspace.list@1"],
        "defaults": {"cap_grants": GRANTS},
    }  # fmt: skip
    return load_air([*builtin_sources(), AirSource("t.air.json", json.dumps([manifest]))])


@pytest.fixture(scope="module")
def effects() -> EffectManager:
    return EffectManager(_air())


def _write(path: str) -> dict[str, Any]:
    return {"root_hash": ROOT, "path": path, "bytes": b"", "mode": None}


SNEAKS = [
    ("demo", "workspace.resolve", {"workspace": "gamma", "version": None},
     "cap.workspace_not_allowed"),
    ("demo", "workspace.resolve", {"workspace": "Alpha", "version": None},
     "cap.workspace_not_allowed"),
    ("docs", "workspace.write_bytes", _write("docsx/a"), "cap.path_not_allowed"),
    ("docs", "workspace.write_bytes", _write("site/public/a"), "cap.path_not_allowed"),
    ("docs", "workspace.write_bytes", _write("site"), "cap.path_not_allowed"),
    ("docs", "workspace.list", {"root_hash": ROOT, "path": None, "scope": None, "cursor": None,
                                "limit": 0}, "cap.path_not_allowed"),
    ("docs", "workspace.diff", {"root_a": ROOT, "root_b": ROOT, "prefix": None},
     "cap.path_not_allowed"),
    ("none", "workspace.resolve", {"workspace": "alpha", "version": None},
     "cap.workspace_op_not_allowed"),
]  # fmt: skip


@pytest.mark.parametrize(("grant", "kind", "params", "code"), SNEAKS)
def test_an_intent_outside_its_workspace_grant_is_refused_with_its_code(
    effects: EffectManager, grant: str, kind: str, params: dict[str, Any], code: str
) -> None:
    with pytest.raises(CapDenied) as info:
        effects.check_cap(kind, params, grant)
    assert info.value.code == code
    assert grant in info.value.detail


@pytest.mark.parametrize(
    ("grant", "kind", "params"),
    [
        ("demo", "workspace.resolve", {"workspace": "alpha", "version": None}),
        ("demo", "workspace.write_bytes", _write("any/where")),
        ("demo", "workspace.annotations_get", {"root_hash": ROOT, "path": None}),  # a read
        ("docs", "workspace.write_bytes", _write("docs")),
        ("docs", "workspace.write_bytes", _write("docs/a/b")),
        ("docs", "workspace.write_bytes", _write("site/pub/index.html")),
        ("docs", "workspace.resolve", {"workspace": "anything", "version": None}),
        ("open", "workspace.list", {"root_hash": ROOT, "path": None, "scope": None,
                                    "cursor": None, "limit": 0}),
    ],
)  # fmt: skip
def test_within_the_grant_or_where_it_says_nothing_is_allowed(
    effects: EffectManager, grant: str, kind: str, params: dict[str, Any]
) -> None:
    effects.check_cap(kind, params, grant)
