"""``world validate PATH``: load AIR, print every diagnostic, or a summary when it is valid."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from air.errors import Diagnostic, ManifestError
from cli.common import console, emit_json, err_console, handle_errors

if TYPE_CHECKING:  # air._loader (pydantic) is imported where used: `world --help` stays quick
    from air import LoadedAir

__all__ = ["agentos_checks", "report_manifest_error", "summary", "validate"]


def summary(air: LoadedAir) -> dict[str, object]:
    manifest = air.manifest
    user_defs = {n for n, d in air.defs.items() if not d.builtin}
    return {
        "ok": True,
        "manifest_hash": air.manifest_hash,
        "schemas": sorted(n for n in user_defs if n in air.schemas),
        "modules": {
            n: {"wasm_hash": air.wasm_hashes.get(n), "keyed": n in air.key_types}
            for n in sorted(air.modules)
        },
        "plans": sorted(air.plans),
        "routes": [r.model_dump(exclude_none=True) for r in manifest.routing.events],
        "triggers": [t.model_dump(exclude_none=True) for t in manifest.triggers],
        "warnings": [d.as_json() for d in air.warnings],
    }


def diagnostics_answer(exc: ManifestError) -> dict[str, Any]:
    """``--json``'s answer for AIR that failed validation: an error object (``error``, the
    first diagnostic's ``code``) with every diagnostic."""
    first = exc.diagnostics[0].code if exc.diagnostics else "air.invalid"
    return {
        "ok": False,
        "error": "ManifestError",
        "code": first,
        "detail": str(exc).splitlines()[0] if str(exc) else "invalid AIR",
        "diagnostics": [d.as_json() for d in exc.diagnostics],
    }


def _print_diagnostics(items: list[Diagnostic]) -> None:
    from rich.markup import escape

    for d in items:
        colour = "red" if d.severity == "error" else "yellow"
        err_console.print(
            f"[{colour}]{d.severity}:[/{colour}] {escape(d.render())}", soft_wrap=True
        )


def _print_summary(air: LoadedAir, info: dict[str, object]) -> None:
    from rich.table import Table

    _print_diagnostics(air.warnings)
    table = Table(title="AIR summary", show_header=False)
    table.add_row("manifest hash", air.manifest_hash)
    table.add_row("schemas", str(len(info["schemas"])))  # type: ignore[arg-type]
    for name, module in info["modules"].items():  # type: ignore[attr-defined]
        table.add_row(
            "module",
            f"{name} ({'keyed' if module['keyed'] else 'v1'}) {module['wasm_hash'] or 'no wasm'}",
        )
    for plan in info["plans"]:  # type: ignore[attr-defined]
        table.add_row("plan", plan)
    for route in info["routes"]:  # type: ignore[attr-defined]
        key = f" by {route['key_field']}" if "key_field" in route else ""
        table.add_row("route", f"{route['event']} -> {route['reducer']}{key}")
    for trigger in info["triggers"]:  # type: ignore[attr-defined]
        table.add_row("trigger", f"{trigger['event']} -> {trigger['plan']}")
    console.print(table)


def report_manifest_error(json_output: bool) -> Callable[[ManifestError], None]:
    """What ``handle_errors`` does with invalid AIR: every diagnostic, or ``--json``'s answer."""

    def on_manifest(exc: ManifestError) -> None:
        if json_output:
            emit_json(diagnostics_answer(exc))
        else:
            _print_diagnostics(exc.diagnostics)
            if len(exc.diagnostics) > 1:
                err_console.print(f"[red]{len(exc.diagnostics)} error(s)[/red]")

    return on_manifest


def agentos_checks(path: Path, schemas_dir: Path) -> list[dict[str, Any]]:
    """Each AIR object at ``path`` as written (file, JSON pointer, ``$kind``, name) with
    ``agentos: {valid, errors}``: whether it is valid under the AgentOS AIR v1 JSON Schemas in
    ``schemas_dir`` (``<kind>.schema.json`` and the ``common.schema.json`` they refer to).
    ``InvalidArgument`` (argument ``agentos-schemas``) if the folder lacks them or
    ``jsonschema`` is not installed. An object of no known kind is invalid, saying so."""
    from air import jsontext
    from air.errors import InvalidArgument, JsonError
    from world import air_sources

    try:
        import jsonschema  # type: ignore[import-untyped]  # no stubs installed
        from referencing import Registry, Resource
    except ImportError as exc:  # a dependency: only a broken install lacks it
        raise InvalidArgument(
            "agentos-schemas", str(schemas_dir), "needs the jsonschema package (pip install)"
        ) from exc
    docs = {}
    for file in sorted(schemas_dir.glob("*.schema.json")):
        try:
            docs[file.name] = jsontext.loads(file.read_text(encoding="utf-8"), source=str(file))
        except (OSError, JsonError, UnicodeDecodeError) as exc:
            raise InvalidArgument("agentos-schemas", str(file), f"cannot read: {exc}") from exc
    if "common.schema.json" not in docs:
        reason = "no common.schema.json: not a folder of AgentOS's AIR schemas"
        raise InvalidArgument("agentos-schemas", str(schemas_dir), reason)
    resources = [(d["$id"], Resource.from_contents(d)) for d in docs.values() if "$id" in d]
    registry: Registry[Any] = Registry().with_resources(resources)
    out = []
    for source in air_sources(path):
        try:
            doc = jsontext.loads(source.text, source=source.file)
        except JsonError:
            continue  # the loader's diagnostics say where
        items = list(enumerate(doc)) if isinstance(doc, list) else [(None, doc)]
        for i, obj in items:
            kind = obj.get("$kind") if isinstance(obj, dict) else None
            schema = docs.get(f"{kind}.schema.json")
            if schema is None:
                errors = [f"no AgentOS schema for $kind {kind!r}"]
            else:
                validator = jsonschema.Draft202012Validator(schema, registry=registry)
                errors = [
                    f"{e.json_path}: {e.message}"
                    for e in sorted(validator.iter_errors(obj), key=lambda e: e.json_path)
                ]
            out.append(
                {
                    "file": source.file,
                    "pointer": "" if i is None else f"/{i}",
                    "kind": kind,
                    "name": obj.get("name") if isinstance(obj, dict) else None,
                    "agentos": {"valid": not errors, "errors": errors},
                }
            )
    return out


def validate(
    path: Annotated[Path, typer.Argument(help="An AIR JSON file or a folder of *.air.json files")],
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
    agentos_schemas: Annotated[
        Path | None,
        typer.Option(
            "--agentos-schemas",
            help="A folder of AgentOS's AIR v1 JSON Schemas: say of each object whether it is "
            "valid under them (in --json, each object's agentos: {valid, errors})",
        ),
    ] = None,
) -> None:
    """Validate a world's AIR and print its diagnostics or a summary."""
    from world import load_air_path

    objects = None
    with handle_errors(json_output):
        if agentos_schemas is not None:
            objects = agentos_checks(path, agentos_schemas)
    on_manifest = report_manifest_error(json_output)
    if objects is not None and json_output:

        def on_manifest(exc: ManifestError) -> None:
            emit_json({**diagnostics_answer(exc), "objects": objects})

    with handle_errors(json_output, on_manifest):
        air = load_air_path(path)
    info = summary(air)
    if objects is not None:
        info["objects"] = objects
    if json_output:
        emit_json(info)
        return
    _print_summary(air, info)
    if objects is not None:
        _print_agentos(objects)


def _print_agentos(objects: list[dict[str, Any]]) -> None:
    valid = sum(o["agentos"]["valid"] for o in objects)
    for o in objects:
        if not o["agentos"]["valid"]:
            where = f"{o['file']}:{o['pointer'] or '/'} {o['name'] or o['kind']}"
            console.print(f"not AgentOS's: {where}: {o['agentos']['errors'][0]}", markup=False)
    console.print(f"{valid} of {len(objects)} object(s) valid under AgentOS's schemas")
