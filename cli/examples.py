"""``world examples`` (list the bundled example worlds), ``world examples copy NAME DIR`` (one of
them, ready to change) and ``world init DIR (--air PATH | --example NAME)``.

The examples come from ``world.sdk.bundle_root()``: the installed package's copy, or the
checkout in an editable install. A copy is self-contained: the example's ``*.air.json`` at the
top of DIR and each reducer folder it uses (source and built ``.wasm``) under
``DIR/reducers/<folder>/``, with every ``defmodule``'s ``wasm`` path rewritten to point there,
so ``world validate DIR`` and ``world reducer build DIR/reducers/<r>/<r>.c`` work on the copy
alone. AIR files without a ``wasm`` path are copied byte for byte; rewritten ones are written
as two-space JSON (their canonical form, and so the manifest hash, is unchanged).

An example whose AIR names no wasm (AgentOS's ladder, ``agentos-*``, copied unchanged) binds its
modules in its ``modules.json`` (``world.sdk.example_modules``): ``world init --example`` binds
them as ``--module NAME=FILE`` would (a ``--module`` given for the same module wins), and a copy
carries the file with its paths pointing into ``DIR/reducers/``; a copy's AIR is then bound
with ``--module`` (the hint ``examples copy`` prints says how).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from air.errors import InputFileError
from cli import core
from cli.common import console, emit_json, fail, handle_errors

# world.sdk is imported where used: `world --help` need not load it (issue 9).

__all__ = ["app", "copy", "copy_example", "init", "list_examples"]

app = typer.Typer(
    help="The example worlds bundled with world: list them, copy one to change it.",
    invoke_without_command=True,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output")]


def _documents(air_file: Path) -> list[Any]:
    docs = json.loads(air_file.read_text(encoding="utf-8"))
    return docs if isinstance(docs, list) else [docs]


def _summary(name: str) -> dict[str, Any]:
    """An example's modules (name and wasm path) and the events its manifest routes."""
    from world.sdk import EXAMPLE_MODULES_FILE, example_path

    folder = example_path(name)
    bound = _bindings(folder / EXAMPLE_MODULES_FILE)
    modules, events = [], []
    for air_file in sorted(folder.glob("*.air.json")):
        for doc in _documents(air_file):
            if not isinstance(doc, dict):
                continue
            if doc.get("$kind") == "defmodule":
                wasm = doc.get("wasm", bound.get(str(doc.get("name"))))
                modules.append({"name": doc.get("name"), "wasm": wasm})
            if doc.get("$kind") == "manifest":
                routes = (doc.get("routing") or {}).get("events") or []
                events += [r.get("event") for r in routes if isinstance(r, dict)]
    return {"name": name, "path": str(folder), "modules": modules, "events": events}


def _bindings(file: Path) -> dict[str, str]:
    """An example's ``modules.json`` as written (module -> relative wasm path), or ``{}``."""
    if not file.is_file():
        return {}
    doc = json.loads(file.read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def list_examples(json_output: bool) -> None:
    from rich.table import Table

    from world.sdk import bundle_root, example_names

    summaries = [_summary(name) for name in example_names()]
    if json_output:
        emit_json({"ok": True, "root": str(bundle_root()), "examples": summaries})
        return
    table = Table(title=f"bundled examples ({bundle_root()})")
    for column in ("name", "modules", "events routed"):
        table.add_column(column)
    for s in summaries:
        table.add_row(
            s["name"],
            "\n".join(str(m["name"]) for m in s["modules"]),
            "\n".join(str(e) for e in s["events"]),
        )
    console.print(table)
    console.print("copy one to change it: world examples copy NAME DIR")


@app.callback()
def _examples(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List the bundled example worlds (or copy one: world examples copy NAME DIR)."""
    if ctx.invoked_subcommand is None:
        with handle_errors(json_output):
            list_examples(json_output)


def copy_example(name: str, dest: Path) -> list[Path]:
    """Copy the example ``name`` into ``dest`` (new or empty); return the files written."""
    from world.sdk import EXAMPLE_MODULES_FILE, example_path

    source = example_path(name)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InputFileError(str(dest), "exists and is not an empty folder")
    files: dict[Path, bytes] = {}
    reducer_dirs: dict[Path, Path] = {}  # a reducer folder of the bundle -> its place in the copy
    # the example's AIR, and a further AIR in a subfolder (agentos-06's v2/, its upgrade)
    for air_file in sorted(source.glob("*.air.json")) + sorted(source.glob("*/*.air.json")):
        place = air_file.relative_to(source)
        raw = json.loads(air_file.read_text(encoding="utf-8"))
        rewritten = False
        for doc in raw if isinstance(raw, list) else [raw]:
            if isinstance(doc, dict) and doc.get("$kind") == "defmodule" and doc.get("wasm"):
                wasm = (air_file.parent / str(doc["wasm"])).resolve()
                target = reducer_dirs.setdefault(wasm.parent, Path("reducers") / wasm.parent.name)
                doc["wasm"] = Path(os.path.relpath(target / wasm.name, place.parent)).as_posix()
                rewritten = True
        text = json.dumps(raw, indent=2, ensure_ascii=False) + "\n"
        files[place] = text.encode() if rewritten else air_file.read_bytes()
    bindings = _bindings(source / EXAMPLE_MODULES_FILE)
    for module, relative_wasm in bindings.items():
        wasm = (source / relative_wasm).resolve()
        target = reducer_dirs.setdefault(wasm.parent, Path("reducers") / wasm.parent.name)
        bindings[module] = (target / wasm.name).as_posix()
    if bindings:
        text = json.dumps(bindings, indent=2, ensure_ascii=False) + "\n"
        files[Path(EXAMPLE_MODULES_FILE)] = text.encode()
    for extra in ("README.md", "LICENSE", "NOTICE"):
        if (source / extra).is_file():
            files[Path(extra)] = (source / extra).read_bytes()
    for folder, target in reducer_dirs.items():
        for file in sorted(folder.iterdir()):
            if file.is_file() and not file.name.startswith("."):
                files[target / file.name] = file.read_bytes()
    for relative, data in files.items():
        (dest / relative).parent.mkdir(parents=True, exist_ok=True)
        (dest / relative).write_bytes(data)
    return [dest / relative for relative in files]


@app.command("copy")
def copy(
    name: Annotated[str, typer.Argument(help="The example, e.g. counter (see world examples)")],
    dest: Annotated[Path, typer.Argument(help="A new or empty folder")],
    json_output: JsonOpt = False,
) -> None:
    """Copy an example world (AIR, reducer source and wasm) into DEST to change it."""
    with handle_errors(json_output):
        written = copy_example(name, dest)
    if json_output:
        emit_json({"ok": True, "example": name, "files": [str(p) for p in written]})
        return
    for path in written:
        console.print(f"  {path}", markup=False)
    console.print(f"copied example {name!r} to {dest} ({len(written)} files)", markup=False)
    sources = [p for p in written if p.suffix == ".c"]
    bound = _bindings(dest / "modules.json")
    flags = "".join(f" --module {m}={dest / w}" for m, w in bound.items())
    console.print(f"next: world init WORLD --air {dest}{flags}", markup=False)
    if sources:
        console.print(f"      world reducer build {sources[0]}   (after changing it)", markup=False)


def init(
    directory: Annotated[Path, typer.Argument(help="The world directory")],
    air: Annotated[Path | None, typer.Option("--air", help="AIR file or folder")] = None,
    example: Annotated[
        str | None, typer.Option("--example", help="A bundled example world (world examples)")
    ] = None,
    module: core.ModuleOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Create a world in DIRECTORY from the AIR at --air, or from a bundled --example."""
    if (air is None) == (example is None):
        fail("give exactly one of --air PATH or --example NAME")
    if example is not None:
        from world.sdk import example_modules, example_path

        with handle_errors(json_output):
            air = example_path(example)
            given = {value.partition("=")[0] for value in module or []}
            bound = [f"{m}={w}" for m, w in example_modules(example).items() if m not in given]
        module = bound + list(module or [])
    assert air is not None
    core.init(directory, air, module, json_output)
