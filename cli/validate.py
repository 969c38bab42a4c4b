"""``world validate PATH``: load AIR, print every diagnostic, or a summary when it is valid."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from air.errors import Diagnostic, ManifestError
from cli.common import console, emit_json, err_console, handle_errors

if TYPE_CHECKING:  # air._loader (pydantic) is imported where used: `world --help` stays quick
    from air import LoadedAir

__all__ = ["summary", "validate"]


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


def validate(
    path: Annotated[Path, typer.Argument(help="An AIR JSON file or a folder of *.air.json files")],
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Validate a world's AIR and print its diagnostics or a summary."""
    from world import load_air_path

    def on_manifest(exc: ManifestError) -> None:
        if json_output:
            emit_json(diagnostics_answer(exc))
        else:
            _print_diagnostics(exc.diagnostics)
            if len(exc.diagnostics) > 1:
                err_console.print(f"[red]{len(exc.diagnostics)} error(s)[/red]")

    with handle_errors(json_output, on_manifest):
        air = load_air_path(path)
    info = summary(air)
    if json_output:
        emit_json(info)
    else:
        _print_summary(air, info)
