"""``world air normalize DIR -o OUT``: a world's AIR written in AgentOS's strict form
(``air._normalize``), one file per def kind and ``manifest.air.json``; every feature of ours
kept because AgentOS's AIR v1 has no form for it is printed, a line per object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from cli.common import console, emit_json, err_console, handle_errors
from cli.validate import report_manifest_error

__all__ = ["app", "normalize"]

app = typer.Typer(help="Work on AIR as files: rewrite it for other tools.", no_args_is_help=True)


@app.command("normalize")
def normalize(
    path: Annotated[Path, typer.Argument(help="An AIR JSON file or a folder of *.air.json files")],
    out: Annotated[Path, typer.Option("-o", "--out", help="The folder to write (created)")],
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Write the AIR at PATH in AgentOS's strict form (its AIR v1 JSON Schemas) into OUT."""
    from air import normalize_air
    from world import load_air_path

    with handle_errors(json_output, report_manifest_error(json_output)):
        result = normalize_air(load_air_path(path))
        out.mkdir(parents=True, exist_ok=True)
        for name, doc in result.files.items():
            text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
            (out / name).write_text(text, encoding="utf-8")
    if json_output:
        emit_json(
            {
                "ok": True,
                "files": sorted(str(out / n) for n in result.files),
                "kept": [u.as_json() for u in result.unmapped],
                "rewritten": [u.as_json() for u in result.rewritten],
            }
        )
        return
    for item in result.rewritten:
        err_console.print(f"rewritten: {item.render()}", markup=False, soft_wrap=True)
    for item in result.unmapped:
        err_console.print(f"kept: {item.render()}", markup=False, soft_wrap=True)
    console.print(f"wrote {len(result.files)} file(s) to {out}", markup=False)
