"""The built-in workspace defs (on-demand, ``air.sys.ondemand``), as AgentOS's ``spec/defs`` has
them at its last plan-era commit: content-addressed file trees a plan reads and writes through
``workspace.*`` effects, their commit history in the reducer ``sys/Workspace@1``, and the
registry of what is published over HTTP in ``sys/HttpPublish@1``.

A tree is a ``sys/WorkspaceTree@2`` node in the world's content store (its canonical CBOR):
``{entries: [sys/WorkspaceEntry@2], annotations_hash?}``, the entries in name order, each a
``file`` (its bytes a blob, ``mode`` 0o644 or 0o755) or a ``dir`` (its ``hash`` the child tree,
``mode`` 0o755, ``size`` 0), and ``annotations_hash`` a ``sys/WorkspaceAnnotations@1`` node
(``map<text, hash>``). A name or path segment is 1+ of ``[A-Za-z0-9._~-]`` and not ``.`` or
``..``; a path is segments joined by ``/``. A change makes new nodes up to a new root, never
touching the old: every root a receipt names stays readable. What each effect does is
``world.effects._workspace``'s docstring.

The effects (kind ``workspace.<op>``, from plans, cap type ``workspace``): ``resolve`` (a
workspace's head, or a version, from ``sys/Workspace@1``'s cell), ``empty_root``, ``list``,
``read_ref``, ``read_bytes``, ``write_bytes``, ``remove``, ``diff``, ``annotations_get``,
``annotations_set``. The cap ``sys/workspace@1`` ``{workspaces?, path_prefixes?, ops?}``
(``kernel._grants.check_workspace``, the enforcer ``sys/CapEnforceWorkspace@1``'s checks).

The two reducers are built in with their code: C on our SDK, ``reducers/sys_workspace`` and
``reducers/sys_http_publish``, whose ``.wasm`` a module here names by a ``<builtin>/`` path that
the world layer reads from its bundled reducers (``world._airfiles.read_file``); the module's
hash is of those bytes, which the build reproduces (``tools/build_reducers.py --check``).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "WORKSPACE_FILE",
    "WORKSPACE_KINDS",
    "WORKSPACE_REDUCER",
    "WORKSPACE_TEXT",
    "WORKSPACE_WASM",
]

WORKSPACE_REDUCER: Final = "sys/Workspace@1"

WORKSPACE_FILE: Final = "<builtin>/sys_workspace.air.json"

WORKSPACE_WASM: Final = {
    "sys/Workspace@1": "sys_workspace.wasm",
    "sys/HttpPublish@1": "sys_http_publish.wasm",
}
"""Each built-in reducer's wasm, by file name (beside ``WORKSPACE_FILE``: ``<builtin>/...``)."""

_EFFECTS: Final = {
    "resolve": ("WorkspaceResolveParams", "WorkspaceResolveReceipt"),
    "empty_root": ("WorkspaceEmptyRootParams", "WorkspaceEmptyRootReceipt"),
    "list": ("WorkspaceListParams", "WorkspaceListReceipt"),
    "read_ref": ("WorkspaceReadRefParams", "WorkspaceReadRefReceipt"),
    "read_bytes": ("WorkspaceReadBytesParams", "WorkspaceReadBytesReceipt"),
    "write_bytes": ("WorkspaceWriteBytesParams", "WorkspaceWriteBytesReceipt"),
    "remove": ("WorkspaceRemoveParams", "WorkspaceRemoveReceipt"),
    "diff": ("WorkspaceDiffParams", "WorkspaceDiffReceipt"),
    "annotations_get": ("WorkspaceAnnotationsGetParams", "WorkspaceAnnotationsGetReceipt"),
    "annotations_set": ("WorkspaceAnnotationsSetParams", "WorkspaceAnnotationsSetReceipt"),
}

WORKSPACE_KINDS: Final = frozenset(f"workspace.{op}" for op in _EFFECTS)

_SCHEMAS: Final = {
    "WorkspaceName": '"text"',
    "WorkspaceRef": '{"record": {"workspace": "text", "version": {"option": "nat"}, '
    '"path": {"option": "text"}}}',
    "WorkspaceCommitMeta": '{"record": {"root_hash": "hash", "owner": "text", "created_at": "time"}}',
    "WorkspaceHistory": '{"record": {"latest": "nat", '
    '"versions": {"map": {"key": "nat", "value": "sys/WorkspaceCommitMeta@1"}}}}',
    "WorkspaceCommit": '{"record": {"workspace": "text", "expected_head": {"option": "nat"}, '
    '"meta": "sys/WorkspaceCommitMeta@1"}}',
    "WorkspaceEntry@2": '{"record": {"name": "text", "kind": "text", "hash": "hash", "size": "nat", '
    '"mode": "nat", "annotations_hash": {"option": "hash"}}}',
    "WorkspaceTree@2": '{"record": {"entries": {"list": "sys/WorkspaceEntry@2"}, '
    '"annotations_hash": {"option": "hash"}}}',
    "WorkspaceAnnotations": '{"map": {"key": "text", "value": "hash"}}',
    "WorkspaceAnnotationsPatch": '{"map": {"key": "text", "value": {"option": "hash"}}}',
    "WorkspaceResolveParams": '{"record": {"workspace": "text", "version": {"option": "nat"}}}',
    "WorkspaceResolveReceipt": '{"record": {"exists": "bool", "resolved_version": {"option": "nat"}, '
    '"head": {"option": "nat"}, "root_hash": {"option": "hash"}}}',
    "WorkspaceEmptyRootParams": '{"record": {"workspace": "text"}}',
    "WorkspaceEmptyRootReceipt": '{"record": {"root_hash": "hash"}}',
    "WorkspaceListParams": '{"record": {"root_hash": "hash", "path": {"option": "text"}, '
    '"scope": {"option": "text"}, "cursor": {"option": "text"}, "limit": "nat"}}',
    "WorkspaceListEntry": '{"record": {"path": "text", "kind": "text", "hash": {"option": "hash"}, '
    '"size": {"option": "nat"}, "mode": {"option": "nat"}}}',
    "WorkspaceListReceipt": '{"record": {"entries": {"list": "sys/WorkspaceListEntry@1"}, '
    '"next_cursor": {"option": "text"}}}',
    "WorkspaceReadRefParams": '{"record": {"root_hash": "hash", "path": "text"}}',
    "WorkspaceRefEntry": '{"record": {"kind": "text", "hash": "hash", "size": "nat", "mode": "nat"}}',
    "WorkspaceReadRefReceipt": '{"option": "sys/WorkspaceRefEntry@1"}',
    "WorkspaceReadBytesParams": '{"record": {"root_hash": "hash", "path": "text", '
    '"range": {"option": {"record": {"start": "nat", "end": "nat"}}}}}',
    "WorkspaceReadBytesReceipt": '"bytes"',
    "WorkspaceWriteBytesParams": '{"record": {"root_hash": "hash", "path": "text", "bytes": "bytes", '
    '"mode": {"option": "nat"}}}',
    "WorkspaceWriteBytesReceipt": '{"record": {"new_root_hash": "hash", "blob_hash": "hash"}}',
    "WorkspaceRemoveParams": '{"record": {"root_hash": "hash", "path": "text"}}',
    "WorkspaceRemoveReceipt": '{"record": {"new_root_hash": "hash"}}',
    "WorkspaceDiffParams": '{"record": {"root_a": "hash", "root_b": "hash", '
    '"prefix": {"option": "text"}}}',
    "WorkspaceDiffChange": '{"record": {"path": "text", "kind": "text", '
    '"old_hash": {"option": "hash"}, "new_hash": {"option": "hash"}}}',
    "WorkspaceDiffReceipt": '{"record": {"changes": {"list": "sys/WorkspaceDiffChange@1"}}}',
    "WorkspaceAnnotationsGetParams": '{"record": {"root_hash": "hash", "path": {"option": "text"}}}',
    "WorkspaceAnnotationsGetReceipt": '{"record": {"annotations": '
    '{"option": "sys/WorkspaceAnnotations@1"}}}',
    "WorkspaceAnnotationsSetParams": '{"record": {"root_hash": "hash", "path": {"option": "text"}, '
    '"annotations_patch": "sys/WorkspaceAnnotationsPatch@1"}}',
    "WorkspaceAnnotationsSetReceipt": '{"record": {"new_root_hash": "hash", '
    '"annotations_hash": "hash"}}',
    "HttpPublishRule": '{"record": {"route_prefix": "text", "workspace": "sys/WorkspaceRef@1", '
    '"default_doc": {"option": "text"}, "allow_dir_listing": "bool", "cache": "text"}}',
    "HttpPublishRegistry": '{"record": {"rules": {"map": {"key": "text", '
    '"value": "sys/HttpPublishRule@1"}}}}',
    "HttpPublishSet": '{"record": {"id": "text", "rule": {"option": "sys/HttpPublishRule@1"}}}',
    "WorkspaceCapParams": '{"record": {"workspaces": {"option": {"list": "text"}}, '
    '"path_prefixes": {"option": {"list": "text"}}, "ops": {"option": {"set": "text"}}}}',
}


def _schema(name: str, type_json: str) -> str:
    full = name if "@" in name else f"{name}@1"
    return f'  {{"$kind": "defschema", "name": "sys/{full}", "type": {type_json}}}'


def _effect(op: str, params: str, receipt: str) -> str:
    return (
        f'  {{"$kind": "defeffect", "name": "sys/workspace.{op}@1", '
        f'"effect_kind": "workspace.{op}", "params_schema": "sys/{params}@1", '
        f'"receipt_schema": "sys/{receipt}@1", "cap_type": "workspace", "origins": ["plan"]}}'
    )


_MODULES: Final = (
    '  {"$kind": "defmodule", "name": "sys/Workspace@1", "module_kind": "reducer",'
    ' "wasm": "sys_workspace.wasm", "key_schema": "sys/WorkspaceName@1",'
    ' "abi": {"reducer": {"state": "sys/WorkspaceHistory@1", "event": "sys/WorkspaceCommit@1",'
    ' "effects_emitted": [], "cap_slots": {}}}}',
    '  {"$kind": "defmodule", "name": "sys/HttpPublish@1", "module_kind": "reducer",'
    ' "wasm": "sys_http_publish.wasm",'
    ' "abi": {"reducer": {"state": "sys/HttpPublishRegistry@1", "event": "sys/HttpPublishSet@1",'
    ' "effects_emitted": [], "cap_slots": {}}}}',
    '  {"$kind": "defcap", "name": "sys/workspace@1", "cap_type": "workspace",'
    ' "schema": "sys/WorkspaceCapParams@1", "enforcer": {"module": "sys/CapEnforceWorkspace@1"}}',
)

WORKSPACE_TEXT: Final = (
    "[\n"
    + ",\n".join(
        [
            *(_schema(n, t) for n, t in _SCHEMAS.items()),
            *(_effect(op, p, r) for op, (p, r) in _EFFECTS.items()),
            *_MODULES,
        ]
    )
    + "\n]\n"
)
