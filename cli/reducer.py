"""``world reducer new|build|check`` and ``world sdk include``: write, build and check reducers
anywhere, with the SDK and the pinned toolchain that ship with (or beside) the package.

``new NAME [DIR]`` writes ``DIR/NAME.c`` (a keyed reducer on the SDK's cell-mode wrapper) and
``DIR/NAME.air.json`` (its event and state schemas, the ``defmodule`` pointing at
``NAME.wasm`` next to it, and a keyed route), so after ``world reducer build DIR/NAME.c`` the
folder DIR is a world's AIR as it stands. It refuses to overwrite either file.
``build`` and ``check`` are ``world.sdk.build`` and ``world.sdk.check_abi``: every refusal is
one line on stderr and exit 1 (for a compile error, the compiler's first error line; ``-v``
prints its whole output first).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from air.errors import InputFileError, InvalidArgument
from cli.common import console, emit_json, err_console, error_fields, fail, handle_errors

if TYPE_CHECKING:  # world.sdk is imported where used: `world --help` need not load it
    from world.errors import BuildError

__all__ = ["app", "build_command", "check_command", "new", "scaffold", "sdk_app", "sdk_include"]

app = typer.Typer(help="Write, build and check C reducers on the world SDK.", no_args_is_help=True)
sdk_app = typer.Typer(help="The reducer SDK that ships with world.", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output")]

_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,62}")
_NAMESPACE_RE = re.compile(r"[a-z][a-z0-9_.-]{0,62}")
_SDK_PREFIXES = ("world", "cbor")  # world.h's own names; NAME_step and NAME_key could clash


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_") if part)


_C_TEMPLATE = """\
/*
 * {module} -- a keyed reducer on the world SDK: one cell (state and mailbox) per key.
 *
 * Event {event} = {{key: text, amount: nat}}
 * State {state} = {{total: nat, events: nat}}
 *
 * Each event adds `amount` to its key's total and 1 to its events. The schemas and the
 * defmodule are in {name}.air.json next to this file; change all three together.
 *
 * Build:  world reducer build {name}.c        (writes {name}.wasm next to it)
 * SDK:    world sdk include                   (the folder of world.h; its README is one up)
 */
#include "world.h"

/* Where the key is in an event. Only used in v1 (map-in-state) mode when the kernel sends no
   ctx.key; in cell mode the kernel passes the key itself. */
static int {name}_key(const world_event *ev, cbor_span *key) {{
    return world_event_field(ev, "key", key);
}}

/* state: this cell's state as canonical CBOR, or NULL for a new cell.
   key:   the cell's key as canonical CBOR.
   Return WORLD_OK, or a negative code to fail the step (the kernel records it, commits nothing
   from it, and goes on). world_delete_state(out) instead of world_set_state deletes the cell. */
static int {name}_step(const cbor_span *state, const world_event *ev, const cbor_span *key,
{pad}world_out *out) {{
    cbor_span field;
    uint64_t amount, total = 0, events = 0;
    (void)key;
    if (!world_schema_is(ev, "{event}")) return WORLD_EINVAL;
    WORLD_TRY(world_event_field(ev, "amount", &field));
    WORLD_TRY(cbor_read_uint(field, &amount));
    if (state) {{
        WORLD_TRY(world_rec_uint(*state, "total", &total));
        WORLD_TRY(world_rec_uint(*state, "events", &events));
    }}
    if (__builtin_add_overflow(total, amount, &total)) return WORLD_ERANGE;
    if (__builtin_add_overflow(events, 1u, &events)) return WORLD_ERANGE;

    cbor_map rec; /* fields in any order: the SDK writes the map canonically */
    cbor_map_init(&rec);
    cbor_put_uint(cbor_map_key(&rec, "total"), total);
    cbor_put_uint(cbor_map_key(&rec, "events"), events);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}}

WORLD_CELL_REDUCER({name}_step, {name}_key)
"""


def _air(name: str, module: str, event: str, state: str) -> list[dict[str, Any]]:
    return [
        {
            "$kind": "defschema",
            "name": event,
            "type": {"record": {"key": "text", "amount": "nat"}},
        },
        {
            "$kind": "defschema",
            "name": state,
            "type": {"record": {"total": "nat", "events": "nat"}},
        },
        {
            "$kind": "defmodule",
            "name": module,
            "module_kind": "reducer",
            "wasm": f"{name}.wasm",
            "key_schema": "text",
            "abi": {"reducer": {"state": state, "event": event}},
        },
        {
            "$kind": "manifest",
            "air_version": "1",
            "routing": {"events": [{"event": event, "reducer": module, "key_field": "key"}]},
        },
    ]


def scaffold(name: str, folder: Path, namespace: str = "app") -> tuple[Path, Path, str, str]:
    """Write ``NAME.c`` and ``NAME.air.json`` into ``folder``; return both paths, the module
    name and the event schema."""
    if not _NAME_RE.fullmatch(name) or name.startswith(_SDK_PREFIXES):
        raise InvalidArgument(
            "NAME", name, "lower case letters, digits and _, from a letter; not world* or cbor*"
        )
    if not _NAMESPACE_RE.fullmatch(namespace):
        raise InvalidArgument("--namespace", namespace, "lower case letters, digits, _ . -")
    camel = _camel(name)
    module, event, state = (f"{namespace}/{camel}{s}@1" for s in ("", "Event", "State"))
    source, air_file = folder / f"{name}.c", folder / f"{name}.air.json"
    for path in (source, air_file):
        if path.exists():
            raise InputFileError(str(path), "exists; not overwriting it")
    pad = " " * len(f"static int {name}_step(")
    c_text = _C_TEMPLATE.format(name=name, module=module, event=event, state=state, pad=pad)
    folder.mkdir(parents=True, exist_ok=True)
    source.write_text(c_text, encoding="utf-8")
    air_text = json.dumps(_air(name, module, event, state), indent=2) + "\n"
    air_file.write_text(air_text, encoding="utf-8")
    return source, air_file, module, event


@app.command("new")
def new(
    name: Annotated[str, typer.Argument(help="The reducer's name: lower case, digits and _")],
    folder: Annotated[
        Path | None, typer.Argument(help="Where to write it (default: ./NAME)")
    ] = None,
    namespace: Annotated[
        str, typer.Option("--namespace", help="Namespace of the schema and module names")
    ] = "app",
    json_output: JsonOpt = False,
) -> None:
    """Write a starting C reducer on the SDK and the AIR that wires it into a world."""
    folder = folder if folder is not None else Path(name)
    with handle_errors(json_output):
        source, air_file, module, event = scaffold(name, folder, namespace)
    if json_output:
        emit_json({"ok": True, "source": str(source), "air": str(air_file), "module": module})
        return
    console.print(f"wrote {source} and {air_file} (module {module})", markup=False)
    console.print(f"next: world reducer build {source}", markup=False)
    console.print(f"      world init WORLD --air {folder}", markup=False)
    example = json.dumps({"key": "a", "amount": 2})
    console.print(f"      world send WORLD {event} '{example}'", markup=False)


def _refuse(exc: BuildError, verbose: bool, json_output: bool) -> NoReturn:
    """One line for the refusal (after the compiler's whole output when ``verbose``), or with
    ``--json`` the error object ``handle_errors`` writes for any other error."""
    if json_output:
        emit_json(
            {
                "ok": False,
                "error": "BuildError",
                "code": exc.code,
                "detail": str(exc),
                "fields": error_fields(exc),
            }
        )
        raise typer.Exit(1) from exc
    detail = exc.detail
    if exc.code == "compile":
        lines = [line for line in detail.splitlines() if line.strip()]
        if verbose:
            err_console.print(detail, markup=False, highlight=False, soft_wrap=True)
        errors = [line for line in lines if "error:" in line] or lines or ["the compiler failed"]
        more = f" (+{len(errors) - 1} more; -v shows all)" if len(errors) > 1 else ""
        detail = f"does not compile: {errors[0].strip()}{more}"
    fail(f"{exc.reducer}: {detail}")


@app.command("build")
def build_command(
    source: Annotated[Path, typer.Argument(help="The reducer's C source")],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Where to write (default: FILE.wasm)")
    ] = None,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Show the compiler's whole output on failure")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Build a C reducer into a reproducible wasm module and check it against the ABI."""
    from world.errors import BuildError
    from world.sdk import build

    wasm_path = output if output is not None else source.with_suffix(".wasm")
    try:
        built = build(source, wasm_path)
    except BuildError as exc:
        _refuse(exc, verbose, json_output)
    if json_output:
        emit_json(
            {
                "ok": True,
                "source": str(source),
                "wasm": str(built.wasm_path),
                "size_bytes": built.size_bytes,
                "wasm_hash": built.content_hash,
            }
        )
        return
    console.print(
        f"built {built.wasm_path}  {built.size_bytes:,} bytes  {built.content_hash}",
        markup=False,
        soft_wrap=True,
    )
    # The wasm path is relative to the AIR file: right as it stands when AIR sits next to the
    # module (the layout `reducer new` writes); otherwise the user has to make it so.
    beside = any(built.wasm_path.parent.glob("*.air.json"))
    wasm_ref = built.wasm_path.name if beside else str(built.wasm_path)
    snippet = json.dumps({"wasm": wasm_ref, "wasm_hash": built.content_hash})
    console.print(f"defmodule: {snippet[1:-1]}", markup=False, soft_wrap=True)
    where = "the AIR next to it" if beside else "the AIR file that names it"
    console.print(
        f"  (wasm is relative to {where}; wasm_hash is optional and pins the bytes)",
        soft_wrap=True,
    )


@app.command("check")
def check_command(
    wasm: Annotated[Path, typer.Argument(help="A wasm module built by any toolchain")],
    json_output: JsonOpt = False,
) -> None:
    """Check a wasm module as world init does: no imports, the ABI exports, limits, start.

    The same check as world init and upgrade propose, with the same message; stricter only
    on exports other than memory, alloc and step, which it refuses and a world runs.
    """
    import blake3

    from kernel.wasm import inspect_wasm_report
    from world.errors import BuildError
    from world.sdk import check_abi

    with handle_errors(json_output):
        wasm_bytes = wasm.read_bytes()
    try:
        check_abi(wasm.stem, wasm_bytes)
    except BuildError as exc:
        if json_output:
            _refuse(exc, False, json_output)
        fail(f"{wasm}: {exc.detail}")
    info = inspect_wasm_report(wasm_bytes)
    digest = "blake3:" + blake3.blake3(wasm_bytes).hexdigest()
    if json_output:
        emit_json(
            {
                "ok": True,
                "wasm": str(wasm),
                "size_bytes": len(wasm_bytes),
                "wasm_hash": digest,
                "step_abi": info.step_abi,
                "memory_min_bytes": info.memory_min_bytes,
            }
        )
        return
    console.print(
        f"ok {wasm}: no imports; exports memory, alloc, step ({info.step_abi}); "
        f"initial memory {info.memory_min_bytes // 1024} KiB; "
        f"{len(wasm_bytes):,} bytes  {digest}",
        markup=False,
        soft_wrap=True,
    )


@sdk_app.command("include")
def sdk_include(json_output: JsonOpt = False) -> None:
    """Print the folder of the SDK header world.h (for -I with your own compiler)."""
    from world.sdk import sdk_include_dir

    with handle_errors(json_output):
        folder = sdk_include_dir()
    if json_output:
        emit_json({"ok": True, "include": str(folder)})
    else:
        typer.echo(str(folder))
