"""Test kit for world-level tests: inline-WAT reducers with fixed outputs and tiny manifests."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

import wasmtime

from air import cbor

ROOT = Path(__file__).resolve().parents[1]
COUNTER_AIR = ROOT / "manifests" / "counter"
EVENT = "demo/CounterEvent@1"
COUNTER = "demo/Counter@1"


def add(key: str, n: int) -> dict[str, Any]:
    return {"key": key, "op": {"$tag": "Add", "$value": n}}


def _escape(data: bytes) -> str:
    return "".join(f"\\{b:02x}" for b in data)


def const_wasm(output: bytes) -> bytes:
    """A reducer that ignores its input and returns ``output`` (multi-value ``step``)."""
    return wasmtime.wat2wasm(f"""
      (module
        (memory (export "memory") 1)
        (data (i32.const 1024) "{_escape(output)}")
        (func (export "alloc") (param i32) (result i32) (i32.const 8192))
        (func (export "step") (param i32 i32) (result i32 i32) (i32.const 1024) (i32.const {len(output)})))
    """)


def body_wasm(body: str) -> bytes:
    """A reducer whose ``step`` body is ``body`` (for traps and loops)."""
    return wasmtime.wat2wasm(f"""
      (module
        (memory (export "memory") 1)
        (func (export "alloc") (param i32) (result i32) (i32.const 8192))
        (func (export "step") (param i32 i32) (result i32 i32) {body}))
    """)


def output(state: Any, events: list[tuple[str, Any]] = ()) -> bytes:  # type: ignore[assignment]
    out: dict[str, Any] = {"state": None if state is None else cbor.dumps(state)}
    if events:
        out["domain_events"] = [{"schema": s, "value": cbor.dumps(v)} for s, v in events]
    return cbor.dumps(out)


def write_world_air(folder: Path, modules: dict[str, bytes], docs: list[dict[str, Any]]) -> Path:
    """Write wasm files and one AIR file; modules maps module name -> wasm bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in modules.items():
        (folder / f"{name.replace('/', '_')}.wasm").write_bytes(data)
    (folder / "world.air.json").write_text(json.dumps(docs))
    return folder


def module(name: str, state: str, event: str, key_schema: Any = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "$kind": "defmodule",
        "name": name,
        "module_kind": "reducer",
        "wasm": f"{name.replace('/', '_')}.wasm",
        "abi": {"reducer": {"state": state, "event": event}},
    }
    if key_schema is not None:
        doc["key_schema"] = key_schema
    return doc


def schema(name: str, type_json: Any) -> dict[str, Any]:
    return {"$kind": "defschema", "name": name, "type": type_json}


def manifest(routes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"$kind": "manifest", "air_version": "1", "routing": {"events": routes}}


def counter_with_plans(
    folder: Path,
    triggers: list[dict[str, Any]],
    docs: list[dict[str, Any]],
    defaults: dict[str, Any] | None = None,
) -> Path:
    """The bundled counter world's AIR in ``folder`` (its wasm by absolute path), with these
    manifest ``triggers`` and ``defaults`` and ``docs`` (plans, schemas, policies) beside it."""
    import json
    import shutil

    shutil.copytree(COUNTER_AIR, folder)
    module_doc, manifest_doc = json.loads((folder / "counter.air.json").read_text())
    module_doc["wasm"] = str((COUNTER_AIR / module_doc["wasm"]).resolve())
    manifest_doc["triggers"] = triggers
    if defaults is not None:
        manifest_doc["defaults"] = defaults
    (folder / "counter.air.json").write_text(json.dumps([module_doc, manifest_doc]))
    (folder / "plans.air.json").write_text(json.dumps(docs))
    return folder


def extract_fixture(archive: Path, dest: Path) -> None:
    """Unpack a fixture world (a ``.tar.gz`` written by older code) into ``dest``.

    ``extractall(filter="data")`` came in Python 3.11.4, and Debian 12's ``python3.11`` is
    3.11.2; so the members are checked here the way that filter would (plain files and folders
    only, relative names, no ``..``), and the filter is passed only where it exists."""
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            name = PurePosixPath(member.name)
            if not (member.isfile() or member.isdir()) or name.is_absolute() or ".." in name.parts:
                raise ValueError(f"{archive}: member {member.name!r} is not a plain relative path")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Python < 3.11.4, members checked above
            tar.extractall(dest)
