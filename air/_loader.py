"""Loading AIR: JSON documents in, a validated ``LoadedAir`` with hashes out.

Pure: the caller (``world._airfiles``) reads the files and passes their text, and supplies
``read_wasm`` / ``inspect_wasm`` callbacks for module binaries, so nothing here touches the
filesystem or wasmtime.

Pipeline: parse JSON (``air.jsontext``) → shape-check each def (a plan's steps in an earlier
shape first, ``air._plan_old_shapes.old_step_shapes``; then pydantic) → names (the grammar of
``air.types.def_name_problem`` for every def and every reference to one, duplicates, one
manifest) → schema types, and no cycles among schemas → semantic validation
(``air._validate``) → canonical forms and hashes. Every step records diagnostics and goes on;
errors raise one ``ManifestError`` at the end. Bad input of any kind, down to a binary file or
10,000 nested brackets, is a diagnostic naming the file, never an exception of its own.

Choices:
- The world is every def in the AIR plus the built-in ``sys/`` defs. The manifest's def lists
  may name defs (optionally with a ``hash`` that must match); the loader fills in every def and
  its hash, so the canonical manifest lists them all, sorted by name.
- Built-ins come in two catalogues: ``sys.air.json`` (the caller's built-in sources, every def
  in every world) and the *on-demand* one (``air.sys.ondemand``, which the loader adds itself:
  a def enters only when the AIR refers to it). Which on-demand defs enter, and when an
  author's definition is the built-in one, are ``air._builtins``'s rules (an idea of their own:
  what a world's built-ins are, not how AIR is read); the loader parses both catalogues, puts
  the built-ins first, and reports a built-in defined differently as a duplicate.
- ``defsecret`` (AgentOS's secrets): ``name`` is ``alias@version`` (a def name: the alias is
  ``namespace/name``, the version >= 1), ``binding_id`` names where this machine finds the
  value (``<world>/local.json``, never the AIR), ``expected_digest`` (optional, ``sha256:<hex>``
  as AgentOS writes it or ``blake3:<hex>``, over the value's bytes) and ``allowed_caps`` /
  ``allowed_plans`` (grant and plan names; absent or empty: any). The manifest's ``secrets``
  list names them like the other lists.
- A document's text may be ``bytes``: the loader reads it as UTF-8 and reports bytes that are
  not (``air.json.encoding``, with the line and column in the message).
- No schema may reach itself through refs (``air.schema.cycle``), directly or through record,
  variant, list, set, option or map: AIR v1 has no recursive types, so every value has a
  bounded depth and every type a finite canonical form.
- A def hash is blake3 over the canonical CBOR of the def's canonical form: types in their
  one canonical form, expressions via ``air.expr.to_json``, literal values normalised by
  their schema, plan steps sorted by id and edges by (from, to), set-like lists sorted. The
  module's ``wasm`` path is authoring detail and is not hashed; its ``wasm_hash`` is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pydantic

from air import _canonical as canonical
from air import _validate as validate
from air import jsontext
from air._builtins import ondemand_wanted, same_as_builtin
from air._diagnostics import Diagnostics, escape_pointer
from air._loaded import AirSource, InspectWasm, LoadedAir, Located, ReadWasm, is_cap_type_text
from air._model import (
    AIR_KINDS,
    STEP_OPS,
    AwaitEvent,
    DefEffect,
    DefModule,
    DefPlan,
    DefPureModule,
    DefSchema,
    DefSecret,
    Manifest,
    RaiseEvent,
)
from air._plan_old_shapes import old_step_shapes
from air.errors import JsonError, ValueMismatch
from air.sys.ondemand import ONDEMAND_SOURCES
from air.types import (
    TypeNode,
    def_name_problem,
    parse_type,
    type_refs,
)

__all__ = ["load_air"]


def _parse_documents(
    sources: Iterable[AirSource], diags: Diagnostics
) -> list[tuple[AirSource, str, Any]]:
    out = []
    for source in sources:
        try:
            obj = jsontext.loads(source.text, source=source.file)
        except JsonError as exc:
            where = f"line {exc.line}, column {exc.column}"
            diags.add(source.file, "", f"air.{exc.code}", f"{where}: {exc.detail}")
            continue
        if isinstance(obj, dict):
            out.append((source, "", obj))
        elif isinstance(obj, list):
            out.extend((source, f"/{i}", item) for i, item in enumerate(obj))
        else:
            diags.add(
                source.file, "", "air.json", "an AIR file holds an object or an array of objects"
            )
    return out


def _author_loc(loc: tuple[int | str, ...]) -> list[int | str]:
    """Pydantic's error location as a path in the author's JSON: without its validator
    names (``function-...``) and the ``op`` tag it puts after a step's index (a step's union
    is discriminated by ``op``, which is not a level of the JSON)."""
    out: list[int | str] = []
    for part in loc:
        if str(part).startswith("function"):
            continue
        if len(out) >= 2 and out[-2] == "steps" and isinstance(out[-1], int) and part in STEP_OPS:
            continue
        out.append(part)
    return out


def _shape(source: AirSource, pointer: str, obj: Any, diags: Diagnostics) -> Located | None:
    kind = obj.get("$kind") if isinstance(obj, dict) else None
    model_type = AIR_KINDS.get(kind) if isinstance(kind, str) else None
    if model_type is None:
        diags.add(source.file, f"{pointer}/$kind", "air.kind.unknown", f"unknown $kind {kind!r}")
        return None
    if kind == "defmodule" and obj.get("module_kind") == "pure":
        model_type = DefPureModule
    if kind == "defplan":
        old = old_step_shapes(obj.get("steps"))
        for i, message in old:
            diags.add(source.file, f"{pointer}/steps/{i}", "air.plan.step.old_shape", message)
        if old:  # pydantic would only list what the old shape lacks and has too much of
            return None
    try:
        model = model_type.model_validate(obj)
    except pydantic.ValidationError as exc:
        for err in exc.errors():
            loc = "".join(f"/{escape_pointer(p)}" for p in _author_loc(err["loc"]))
            diags.add(source.file, pointer + loc, "air.shape", f"{kind}: {err['msg']}")
        return None
    return Located(source.file, pointer, model, obj, source.builtin)


def _shapes(
    docs: list[tuple[AirSource, str, Any]], diags: Diagnostics
) -> tuple[list[Located], set[str]]:
    """The defs whose shape is right, and the names of those of a known kind whose is not."""
    located = []
    unparsed = set()
    for source, pointer, obj in docs:
        loc = _shape(source, pointer, obj, diags)
        if loc is not None:
            located.append(loc)
        elif isinstance(obj, dict) and obj.get("$kind") in AIR_KINDS:
            name = obj.get("name")
            if isinstance(name, str):
                unparsed.add(name)
    return located, unparsed


def _ondemand(docs: list[tuple[AirSource, str, Any]], diags: Diagnostics) -> list[Located]:
    """The on-demand built-ins the AIR refers to, with those they refer to (``air._builtins``)."""
    catalogue_docs = _parse_documents(
        [AirSource(file, text, True) for file, text in ONDEMAND_SOURCES], diags
    )
    catalogue, _unparsed = _shapes(catalogue_docs, diags)
    return ondemand_wanted(docs, catalogue)


def _register(
    located: list[Located], diags: Diagnostics
) -> tuple[dict[str, Located], list[Located]]:
    defs: dict[str, Located] = {}
    manifests = []
    for loc in located:
        if isinstance(loc.model, Manifest):
            manifests.append(loc)
            continue
        name = loc.model.name
        if _bad_name(name, loc.file, f"{loc.pointer}/name", diags):
            continue
        previous = defs.get(name)
        if previous is None:
            defs[name] = loc
        elif previous.builtin:
            if not same_as_builtin(loc, previous, defs):
                diags.add(
                    loc.file,
                    f"{loc.pointer}/name",
                    "air.name.duplicate",
                    f"{name} is a built-in def ({previous.file}:{previous.pointer or '/'}) and "
                    "this definition differs from it; leave it out to use the built-in, or give "
                    "yours another name",
                )
            # else: the same built-in written again (as AgentOS's examples do): the built-in
        else:
            where = f"{previous.file}:{previous.pointer or '/'}"
            diags.add(
                loc.file,
                f"{loc.pointer}/name",
                "air.name.duplicate",
                f"{name} is already defined at {where}",
            )
    return defs, manifests


def _bad_name(name: str, file: str, pointer: str, diags: Diagnostics) -> bool:
    """Report ``name`` at ``pointer`` if it is not a def name (``air.types.def_name_problem``)."""
    problem = def_name_problem(name)
    if problem is not None:
        diags.add(file, pointer, "air.name.invalid", f"{name!r} is not a def name: {problem}")
    return problem is not None


def _reference_names(located: list[Located], diags: Diagnostics) -> set[str]:
    """Report each reference to a def that is not a def name, and return those names: no def
    can have one, so the validator must not report them unknown as well (``unparsed``).
    Names inside types and Exprs are reported by their parsers (``air.type.invalid``,
    ``air.expr.*``), which say the same thing in their own terms."""
    bad: set[str] = set()
    for loc in located:
        for suffix, name in _references(loc.model):
            if _bad_name(name, loc.file, loc.pointer + suffix, diags):
                bad.add(name)
    return bad


def _references(model: object) -> list[tuple[str, str]]:
    """(JSON pointer under the def, name) of each def a def names outside types and Exprs."""
    refs: list[tuple[str, str | None]] = []
    if isinstance(model, DefModule):
        abi = model.abi.reducer
        base = "/abi/reducer"
        refs += [(f"{base}/{f}", getattr(abi, f)) for f in ("state", "event", "annotations")]
        refs += [
            (f"{base}/cap_slots/{escape_pointer(s)}", c)
            for s, c in abi.cap_slots.items()
            if not is_cap_type_text(c)  # a cap type ("timer"), not a defcap name
        ]
    elif isinstance(model, DefPureModule):
        refs += [(f"/abi/pure/{f}", getattr(model.abi.pure, f)) for f in ("input", "output")]
    elif isinstance(model, DefPlan):
        refs += [("/input", model.input), ("/output", model.output)]
        for i, step in enumerate(model.steps):
            if isinstance(step, RaiseEvent):
                refs.append((f"/steps/{i}/reducer", step.reducer))
            elif isinstance(step, AwaitEvent):
                refs.append((f"/steps/{i}/event", step.event))
    elif isinstance(model, DefEffect):
        fields = ("params_schema", "receipt_schema", "receipt_event")
        refs += [(f"/{f}", getattr(model, f)) for f in fields]
    elif isinstance(model, DefSecret):
        refs += [(f"/allowed_plans/{i}", p) for i, p in enumerate(model.allowed_plans)]
    elif isinstance(model, Manifest):
        refs += _manifest_references(model)
    return [(pointer, name) for pointer, name in refs if name is not None]


def _manifest_references(model: Manifest) -> list[tuple[str, str | None]]:
    refs: list[tuple[str, str | None]] = []
    for list_name in ("schemas", "modules", "plans", "caps", "policies", "effects", "secrets"):
        for i, item in enumerate(getattr(model, list_name)):
            refs.append((f"/{list_name}/{i}", item if isinstance(item, str) else item.name))
    for i, route in enumerate(model.routing.events):
        refs += [(f"/routing/events/{i}/event", route.event)]
        refs += [(f"/routing/events/{i}/reducer", route.reducer)]
    for i, inbox in enumerate(model.routing.inboxes):
        refs.append((f"/routing/inboxes/{i}/reducer", inbox.reducer))
    for i, trigger in enumerate(model.triggers):
        refs += [(f"/triggers/{i}/event", trigger.event), (f"/triggers/{i}/plan", trigger.plan)]
    refs.append(("/defaults/policy", model.defaults.policy))
    for i, grant in enumerate(model.defaults.cap_grants):
        refs.append((f"/defaults/cap_grants/{i}/cap", grant.cap))
    refs += [(f"/module_bindings/{escape_pointer(m)}", m) for m in model.module_bindings]
    return refs


def _one_manifest(manifests: list[Located], diags: Diagnostics) -> Located | None:
    if not manifests:
        diags.add("<air>", "", "air.manifest.missing", "the AIR has no manifest")
        return None
    for extra in manifests[1:]:
        diags.add(
            extra.file, extra.pointer, "air.manifest.multiple", "a world has exactly one manifest"
        )
    return manifests[0]


def _parse_schemas(defs: dict[str, Located], diags: Diagnostics) -> dict[str, TypeNode]:
    schemas: dict[str, TypeNode] = {}
    for name, loc in defs.items():
        if isinstance(loc.model, DefSchema):
            try:
                schemas[name] = parse_type(loc.model.type, f"{loc.pointer}/type")
            except ValueMismatch as exc:
                diags.add(loc.file, exc.pointer, "air.type.invalid", exc.detail)
    for name, node in schemas.items():
        loc = defs[name]
        for ref in sorted(type_refs(node)):
            if ref not in schemas and (
                ref not in defs or not isinstance(defs[ref].model, DefSchema)
            ):
                diags.add(
                    loc.file,
                    f"{loc.pointer}/type",
                    "air.ref.unknown_schema",
                    f"unknown schema {ref}",
                )
    for cycle in _schema_cycles(schemas):
        loc = defs[cycle[0]]
        path = " -> ".join([*cycle, cycle[0]])
        detail = f"schemas refer to themselves ({path}); AIR v1 has no recursive types"
        diags.add(loc.file, f"{loc.pointer}/type", "air.schema.cycle", detail)
        for name in cycle:  # later checks would walk the cycle: they skip these, as if unparsed
            del schemas[name]
    return schemas


def _schema_cycles(schemas: dict[str, TypeNode]) -> list[list[str]]:
    """Each group of schemas that reach themselves through refs, as a path through the group
    starting at its least name. Iterative (a chain of 10,000 schemas is no deeper for it).

    Tarjan's strongly connected components; a group is a cycle if it has two or more members or
    one member that refers to itself.
    """
    graph = {
        name: sorted(r for r in type_refs(node) if r in schemas) for name, node in schemas.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            name, i = work.pop()
            if i == 0:
                index[name] = low[name] = len(index)
                stack.append(name)
                on_stack.add(name)
            succs = graph[name]
            if i < len(succs):
                work.append((name, i + 1))
                succ = succs[i]
                if succ not in index:
                    work.append((succ, 0))
                elif succ in on_stack:
                    low[name] = min(low[name], index[succ])
                continue
            if low[name] == index[name]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == name:
                        break
                if len(group) > 1 or name in graph[name]:
                    groups.append(_cycle_path(sorted(group), graph))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[name])
    return sorted(groups)


def _cycle_path(group: list[str], graph: dict[str, list[str]]) -> list[str]:
    """A cycle within ``group`` from its least member back to it, by least names first (BFS)."""
    members = set(group)
    start = group[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for name in frontier:
            for succ in graph[name]:
                if succ == start:
                    path = [name]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return path[::-1]
                if succ in members and succ not in came_from:
                    came_from[succ] = name
                    following.append(succ)
        frontier = following
    return [start]  # unreachable: every member of a strongly connected group reaches the start


def load_air(
    sources: Iterable[AirSource],
    read_wasm: ReadWasm | None = None,
    inspect_wasm: InspectWasm | None = None,
) -> LoadedAir:
    """Load and validate AIR; raise ``ManifestError`` with every error diagnostic found."""
    diags = Diagnostics()
    docs = _parse_documents(sources, diags)
    located, unparsed = _shapes(docs, diags)
    located = _ondemand(docs, diags) + located  # built-ins first: an author's copy meets them
    defs, manifests = _register(located, diags)
    unparsed |= _reference_names(located, diags)
    manifest_loc = _one_manifest(manifests, diags)
    schemas = _parse_schemas(defs, diags)
    if manifest_loc is None:
        diags.raise_if_errors()
        raise AssertionError("unreachable: a missing manifest is an error")
    air = LoadedAir(
        manifest=manifest_loc.model,
        manifest_file=manifest_loc.file,
        defs=defs,
        schemas=schemas,
        key_types={},
        wasm_hashes={},
        wasm_bytes={},
        unparsed=unparsed,
    )
    validate.validate(air, manifest_loc, diags, read_wasm, inspect_wasm)
    diags.raise_if_errors()
    canonical.fill_hashes(air, manifest_loc, diags)
    diags.raise_if_errors()
    air.warnings = diags.warnings
    return air
