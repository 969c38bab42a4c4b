"""Every diagnostic code that ``air/_diagnostics.py`` lists has one minimal AIR input that
produces exactly that code (and only it) at a known JSON pointer; and no code is produced
anywhere in the loader or validator without being listed there."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import wasmtime

import air._diagnostics
from air import AirSource, load_air
from air.errors import ManifestError
from world._airfiles import builtin_sources, inspect_wasm

ROOT = Path(__file__).resolve().parents[2]
FILE = "w.air.json"
HASH = "blake3:" + "0" * 64

# A valid world in as few defs as validation allows; each case breaks it in one place.
# Indexes: 0 event schema, 1 state schema, 2 module, 3 plan, 4 manifest.
BASE: list[dict[str, Any]] = [
    {"$kind": "defschema", "name": "t/Event@1", "type": {"record": {"id": "text", "n": "nat"}}},
    {"$kind": "defschema", "name": "t/State@1", "type": "nat"},
    {
        "$kind": "defmodule",
        "name": "t/Mod@1",
        "module_kind": "reducer",
        "wasm_hash": HASH,
        "abi": {"reducer": {"state": "t/State@1", "event": "t/Event@1"}},
    },
    {
        "$kind": "defplan",
        "name": "t/plan@1",
        "input": "t/Event@1",
        "steps": [{"id": "end", "op": "end"}],
    },
    {
        "$kind": "manifest",
        "air_version": "1",
        "routing": {"events": [{"event": "t/Event@1", "reducer": "t/Mod@1"}]},
    },
]
MOD, PLAN, MANIFEST = 2, 3, 4
BINDING = "/4/module_bindings/t~1Mod@1/slots"

REDUCER_WAT = """(module {imports}
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) i32.const 0)
  (func (export "step") (param i32 i32) (result i64) i64.const 0))"""


@dataclass
class Case:
    """Break ``BASE`` with ``mutate``, or load ``text`` beside it as a second file."""

    mutate: Callable[[list[dict[str, Any]]], None] | None = None
    text: str | bytes | None = None
    wasm: bytes | None = field(default=None, repr=False)
    reads_wasm: bool = False


def _module(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return docs[MOD]


def _reducer(docs: list[dict[str, Any]]) -> dict[str, Any]:
    reducer: dict[str, Any] = docs[MOD]["abi"]["reducer"]
    return reducer


def _manifest(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return docs[MANIFEST]


def _route(docs: list[dict[str, Any]]) -> dict[str, Any]:
    route: dict[str, Any] = docs[MANIFEST]["routing"]["events"][0]
    return route


def _steps(*steps: dict[str, Any]) -> Callable[[list[dict[str, Any]]], None]:
    def mutate(docs: list[dict[str, Any]]) -> None:
        docs[PLAN]["steps"] = [*steps, {"id": "end", "op": "end"}]

    return mutate


def _end_result(expr: Any) -> Callable[[list[dict[str, Any]]], None]:
    def mutate(docs: list[dict[str, Any]]) -> None:
        docs[PLAN]["steps"] = [{"id": "end", "op": "end", "result": expr}]

    return mutate


def _emit(kind: str, cap: str) -> dict[str, Any]:
    params = {"record": {"deliver_at_ns": 1, "key": {"none": {}}}}
    return {
        "id": "e",
        "op": "emit_effect",
        "kind": kind,
        "params": params,
        "cap": cap,
        "bind": {"effect_id_as": "e"},
    }


def _emit_http(*entries: dict[str, Any]) -> dict[str, Any]:
    params = {
        "record": {
            "method": {"text": "GET"},
            "url": {"text": "http://h/"},
            "headers": {"map": list(entries)},
            "body_ref": {"none": {}},
        }
    }
    return {
        "id": "e",
        "op": "emit_effect",
        "kind": "http.request",
        "params": params,
        "cap": "g",
        "bind": {"effect_id_as": "e"},
    }


def _raise(event: Any, **extra: Any) -> dict[str, Any]:
    return {"id": "r", "op": "raise_event", "reducer": "t/Mod@1", "event": event, **extra}


def _grants(*grants: dict[str, Any]) -> Callable[[list[dict[str, Any]]], None]:
    def mutate(docs: list[dict[str, Any]]) -> None:
        _manifest(docs)["defaults"] = {"cap_grants": list(grants)}

    return mutate


def _chain(*mutations: Callable[[list[dict[str, Any]]], None]) -> Callable[..., None]:
    def mutate(docs: list[dict[str, Any]]) -> None:
        for one in mutations:
            one(docs)

    return mutate


def _set(getter: Callable[[list[dict[str, Any]]], dict[str, Any]], **values: Any) -> Any:
    return lambda docs: getter(docs).update(values)


def _keyed(docs: list[dict[str, Any]]) -> None:
    _module(docs)["key_schema"] = "text"


def _wasm_file(docs: list[dict[str, Any]]) -> None:
    del _module(docs)["wasm_hash"]
    _module(docs)["wasm"] = "mod.wasm"


def _bind(slot: str, grant: str) -> Callable[[list[dict[str, Any]]], None]:
    def mutate(docs: list[dict[str, Any]]) -> None:
        _reducer(docs)["cap_slots"] = {"timer": "sys/timer@1"}
        _manifest(docs)["defaults"] = {
            "cap_grants": [{"name": "timer", "cap": "sys/timer@1", "params": {}}]
        }
        _manifest(docs)["module_bindings"] = {"t/Mod@1": {"slots": {slot: grant}}}

    return mutate


CASES: dict[str, tuple[Case, str]] = {
    # --- reading the file: a second document beside the valid one ---
    "air.json": (Case(text="42"), ""),
    "air.json.syntax": (Case(text="{nope"), ""),
    "air.json.encoding": (Case(text=b'[{"$kind": "\xff"}]'), ""),
    "air.json.too_deep": (Case(text="[" * 300 + "]" * 300), ""),
    "air.json.number_too_long": (Case(text="[" + "9" * 100 + "]"), ""),
    "air.json.duplicate_key": (Case(text='[{"$kind": "manifest", "$kind": "manifest"}]'), ""),
    "air.json.surrogate": (Case(text='[{"$kind": "\\ud800"}]'), ""),
    "air.json.not_finite": (Case(text="[NaN]"), ""),
    # --- shapes and names ---
    "air.kind.unknown": (
        Case(lambda d: d.append({"$kind": "defwhat", "name": "t/X@1"})),
        "/5/$kind",
    ),
    "air.shape": (
        Case(lambda d: d.append({"$kind": "defschema", "name": "t/X@1", "type": "nat", "x": 1})),
        "/5/x",
    ),
    "air.name.invalid": (
        Case(lambda d: d.append({"$kind": "defschema", "name": "nope", "type": "nat"})),
        "/5/name",
    ),
    "air.name.duplicate": (Case(lambda d: d.append(copy.deepcopy(d[0]))), "/5/name"),
    "air.manifest.missing": (Case(lambda d: d.pop(MANIFEST)), ""),
    "air.manifest.multiple": (Case(lambda d: d.append(copy.deepcopy(d[MANIFEST]))), "/5"),
    "air.hash.mismatch": (
        Case(_set(_manifest, schemas=[{"name": "t/State@1", "hash": HASH}])),
        "/4/schemas/0/hash",
    ),
    # --- types ---
    "air.type.invalid": (Case(lambda d: d[1].update(type="float")), "/1/type"),
    "air.schema.cycle": (
        Case(
            lambda d: d.extend(
                [
                    {"$kind": "defschema", "name": "t/A@1", "type": {"list": "t/B@1"}},
                    {"$kind": "defschema", "name": "t/B@1", "type": {"option": "t/A@1"}},
                ]
            )
        ),
        "/5/type",
    ),
    # --- references ---
    "air.ref.unknown_schema": (Case(_set(_reducer, event="t/Nope@1")), "/2/abi/reducer/event"),
    "air.ref.unknown_module": (
        Case(_set(_route, reducer="t/Nope@1")),
        "/4/routing/events/0/reducer",
    ),
    "air.ref.unknown_plan": (
        Case(_set(_manifest, triggers=[{"event": "t/Event@1", "plan": "t/nope@1"}])),
        "/4/triggers/0/plan",
    ),
    "air.ref.unknown_cap": (
        Case(_grants({"name": "g", "cap": "t/nocap@1", "params": {}})),
        "/4/defaults/cap_grants/0/cap",
    ),
    "air.ref.unknown_policy": (
        Case(_set(_manifest, defaults={"policy": "t/nopolicy@1"})),
        "/4/defaults/policy",
    ),
    "air.ref.unknown_effect": (
        Case(_set(_reducer, effects_emitted=["no.such"])),
        "/2/abi/reducer/effects_emitted/0",
    ),
    "air.ref.unknown_cap_grant": (Case(_bind("timer", "nogrant")), f"{BINDING}/timer"),
    "air.ref.unknown_slot": (Case(_bind("noslot", "timer")), f"{BINDING}/noslot"),
    # --- routing and triggers ---
    "air.route.keyed_to_unkeyed": (
        Case(_set(_route, key_field="id")),
        "/4/routing/events/0/key_field",
    ),
    "air.route.unkeyed_to_keyed": (Case(_keyed), "/4/routing/events/0"),
    "air.route.key_field_missing": (
        Case(_chain(_keyed, _set(_route, key_field="nope"))),
        "/4/routing/events/0/key_field",
    ),
    "air.route.key_type_mismatch": (
        Case(_chain(_keyed, _set(_route, key_field="n"))),
        "/4/routing/events/0/key_field",
    ),
    "air.route.event_not_accepted": (
        Case(
            _chain(
                lambda d: d.append({"$kind": "defschema", "name": "t/Other@1", "type": "nat"}),
                _set(_route, event="t/Other@1"),
            )
        ),
        "/4/routing/events/0/event",
    ),
    "air.trigger.input_mismatch": (
        Case(
            _chain(
                lambda d: d.append({"$kind": "defschema", "name": "t/Other@1", "type": "nat"}),
                _set(_manifest, triggers=[{"event": "t/Other@1", "plan": "t/plan@1"}]),
            )
        ),
        "/4/triggers/0/event",
    ),
    "air.trigger.correlate_missing": (
        Case(
            _set(
                _manifest,
                triggers=[{"event": "t/Event@1", "plan": "t/plan@1", "correlate_by": "nope"}],
            )
        ),
        "/4/triggers/0/correlate_by",
    ),
    # --- effects, caps and literal values ---
    "air.effect.origin": (
        Case(_set(_reducer, effects_emitted=["http.request"])),
        "/2/abi/reducer/effects_emitted/0",
    ),
    "air.cap.type_mismatch": (
        Case(
            _chain(
                _grants({"name": "g", "cap": "sys/blob@1", "params": {}}),
                _steps(_emit("timer.set", "g")),
            )
        ),
        "/3/steps/0/cap",
    ),
    "air.cap.enforcer": (
        Case(
            lambda d: d.append(
                {
                    "$kind": "defcap",
                    "name": "t/http@1",
                    "cap_type": "http.out",
                    "schema": {"record": {"hosts": {"set": "text"}}},
                    "enforcer": {"module": "sys/CapAllowAll@1"},
                }
            )
        ),
        "/5/enforcer/module",
    ),
    "air.module.pure_unsupported": (
        Case(
            lambda d: d.append(
                {
                    "$kind": "defmodule",
                    "name": "t/Pure@1",
                    "module_kind": "pure",
                    "abi": {"pure": {"input": "sys/EmptyCap@1", "output": "sys/EmptyCap@1"}},
                }
            )
        ),
        "/5/module_kind",
    ),
    "air.cap.schema": (
        Case(
            lambda d: d.append(
                {
                    "$kind": "defcap",
                    "name": "t/http@1",
                    "cap_type": "http.out",
                    "schema": {"record": {"hosts": {"set": "text"}, "rpm": "nat"}},
                }
            )
        ),
        "/5/schema",
    ),
    "air.cap.budget_unenforced": (
        Case(_grants({"name": "g", "cap": "sys/timer@1", "params": {}, "budget": {"cents": 5}})),
        "/4/defaults/cap_grants/0/budget/cents",
    ),
    "air.value.mismatch": (
        Case(_grants({"name": "g", "cap": "sys/http.out@1", "params": {"hosts": 5, "verbs": []}})),
        "/4/defaults/cap_grants/0/params/hosts",
    ),
    "air.expr.<code>": (Case(_end_result({"op": "nope", "args": []})), "/3/steps/0/result/op"),
    # --- plans ---
    "air.plan.step.duplicate": (Case(_steps({"id": "end", "op": "end"})), "/3/steps/1/id"),
    "air.plan.edge.unknown_step": (
        Case(lambda d: d[PLAN].update(edges=[{"from": "end", "to": "nope"}])),
        "/3/edges/0/to",
    ),
    "air.plan.cycle": (
        Case(
            _chain(
                _steps({"id": "a", "op": "end"}),
                lambda d: d[PLAN].update(
                    edges=[{"from": "a", "to": "end"}, {"from": "end", "to": "a"}]
                ),
            )
        ),
        "/3/edges",
    ),
    "air.plan.ref.unknown_step": (Case(_end_result({"ref": "@step:nope"})), "/3/steps/0/result"),
    "air.plan.ref.unknown_var": (Case(_end_result({"ref": "@var:nope"})), "/3/steps/0/result"),
    "air.plan.ref.event_outside_where": (
        Case(_end_result({"ref": "@event"})),
        "/3/steps/0/result",
    ),
    "air.plan.ref.unknown_field": (
        Case(_end_result({"ref": "@plan.input.nope"})),
        "/3/steps/0/result",
    ),
    "air.plan.ref.type_mismatch": (
        Case(_steps(_raise({"record": {"id": {"ref": "@plan.input.n"}, "n": 1}}))),
        "/3/steps/0/event/record/id",
    ),
    "air.ref.unknown_secret": (Case(_set(_manifest, secrets=["t/nosecret@1"])), "/4/secrets/0"),
    "air.plan.op.type_mismatch": (
        Case(_steps(_raise({"record": {"id": {"op": "utf8_encode", "args": ["x"]}, "n": 1}}))),
        "/3/steps/0/event/record/id",
    ),
    "air.plan.step.old_shape": (
        Case(_steps({"id": "a", "op": "assign", "var": "x", "value": 1})),
        "/3/steps/0",
    ),
    "air.plan.await_receipt.for": (
        Case(
            _steps(
                {"id": "w", "op": "await_receipt", "for": {"ref": "@var:w"}, "bind": {"as": "w"}}
            )
        ),
        "/3/steps/0/for",
    ),
    "air.plan.raise_event.key": (
        Case(_steps(_raise({"record": {"id": "x", "n": 1}}, key={"text": "k"}))),
        "/3/steps/0/key",
    ),
    "air.plan.raise_event.unrouted": (
        Case(_steps(_raise({"record": {"$schema": "t/State@1"}}))),
        "/3/steps/0/event/record/$schema",
    ),
    "air.plan.emit_effect.idempotency_key": (
        Case(
            _chain(
                _grants({"name": "g", "cap": "sys/timer@1"}),
                _steps({**_emit("timer.set", "g"), "idempotency_key": 5}),
            )
        ),
        "/3/steps/0/idempotency_key",
    ),
    "air.plan.allowed_effects": (
        Case(
            _chain(
                _grants({"name": "g", "cap": "sys/timer@1"}),
                _steps(_emit("timer.set", "g")),
                lambda d: d[PLAN].update(allowed_effects=["blob.put"]),
            )
        ),
        "/3/steps/0/kind",
    ),
    "air.plan.required_caps": (
        Case(
            _chain(
                _grants({"name": "g", "cap": "sys/timer@1"}, {"name": "h", "cap": "sys/timer@1"}),
                _steps(_emit("timer.set", "g")),
                lambda d: d[PLAN].update(required_caps=["h"]),
            )
        ),
        "/3/steps/0/cap",
    ),
    "air.plan.http_header": (
        Case(
            _chain(
                _grants(
                    {"name": "g", "cap": "sys/http.out@1", "params": {"hosts": ["h"], "verbs": []}}
                ),
                _steps(
                    _emit_http(
                        {"key": {"text": "Content-Length"}, "value": {"ref": "@plan.input.id"}}
                    )
                ),
            )
        ),
        "/3/steps/0/params/record/headers/map/0/key",
    ),
    "air.plan.end.result_missing": (
        Case(lambda d: d[PLAN].update(output="t/State@1")),
        "/3/steps/0",
    ),
    "air.plan.end.missing": (
        Case(
            lambda d: d[PLAN].update(
                output="t/State@1",
                steps=[
                    {"id": "a", "op": "assign", "expr": 1, "bind": {"as": "x"}},
                    {"id": "end", "op": "end", "result": 1},
                ],
            )
        ),
        "/3/steps/0",
    ),
    "air.plan.await_event.where_required": (
        Case(
            _chain(
                _set(
                    _manifest,
                    triggers=[{"event": "t/Event@1", "plan": "t/plan@1", "correlate_by": "id"}],
                ),
                _steps({"id": "w", "op": "await_event", "event": "t/Event@1", "bind": {"as": "e"}}),
            )
        ),
        "/3/steps/0",
    ),
    # --- module binaries (read through world._airfiles' real wasm inspection) ---
    "air.module.wasm_missing": (Case(_wasm_file, reads_wasm=True), "/2/wasm"),
    "air.module.wasm_invalid": (Case(_wasm_file, wasm=b"not wasm"), "/2/wasm"),
    "air.module.imports": (
        Case(
            _wasm_file,
            wasm=wasmtime.wat2wasm(REDUCER_WAT.format(imports='(import "env" "f" (func))')),
        ),
        "/2/wasm",
    ),
    "air.module.exports": (Case(_wasm_file, wasm=wasmtime.wat2wasm("(module)")), "/2/wasm"),
    "air.module.effect_unbound": (
        Case(_set(_reducer, effects_emitted=["timer.set"])),
        "/2/abi/reducer/effects_emitted/0",
    ),
}


def _listed_codes() -> list[str]:
    doc = air._diagnostics.__doc__ or ""
    return re.findall(r"^    (air\.[\w.<>]+)", doc, flags=re.MULTILINE)


def _load(case: Case) -> None:
    docs = copy.deepcopy(BASE)
    if case.mutate is not None:
        case.mutate(docs)
    sources = [*builtin_sources(), AirSource(FILE, json.dumps(docs))]
    if case.text is not None:
        sources.append(AirSource("bad.air.json", case.text))
    wasm = {"mod.wasm": case.wasm} if case.wasm is not None else {}
    reads = case.reads_wasm or case.wasm is not None
    load_air(sources, wasm.get if reads else None, inspect_wasm if reads else None)


def test_the_base_world_is_valid() -> None:
    _load(Case())


WARNING_CODES = {"air.module.wasm_unbound", "air.hash.foreign"}
"""Codes that are warnings, not errors: each is tested where it is made (a warning does not
stop a load, so ``CASES``' one-code-per-load check cannot hold it)."""


def test_every_listed_code_has_a_case_and_every_case_a_listed_code() -> None:
    assert sorted(CASES) == sorted(set(_listed_codes()) - WARNING_CODES)


@pytest.mark.parametrize(
    ("code", "case", "pointer"), [(c, *v) for c, v in CASES.items()], ids=list(CASES)
)
def test_each_code_is_produced_alone_at_its_pointer(code: str, case: Case, pointer: str) -> None:
    with pytest.raises(ManifestError) as info:
        _load(case)
    found = [(d.code, d.pointer) for d in info.value.diagnostics]
    # The one family entry stands for every ``expr.*`` code; this case produces one of them.
    expected = "air.expr.parse.unknown_op" if code == "air.expr.<code>" else code
    assert found == [(expected, pointer)]
    file = "bad.air.json" if case.text is not None else FILE
    if code != "air.manifest.missing":
        assert info.value.diagnostics[0].file == file


def test_no_code_is_raised_that_is_not_listed() -> None:
    listed = set(_listed_codes())
    sources = [*sorted((ROOT / "air").glob("*.py")), ROOT / "world" / "_airfiles.py"]
    used = set()
    for path in sources:
        used |= set(re.findall(r'"(air(?:\.[a-z_]+)+)"', path.read_text()))
    used -= {"air.sys"}  # the package holding the built-in defs, not a code
    # air.json.<code> and air.expr.<code> are built from the JsonError / ExprError code.
    assert used - listed == set()
    assert "air.shape" in used  # the pattern does see one-part codes


@pytest.mark.parametrize(
    ("budget", "pointers"),
    [
        pytest.param({"bytes": 5}, [], id="bytes-is-enforced"),
        pytest.param({"tokens": 5}, ["budget/tokens"], id="tokens"),
        pytest.param({"cents": 0, "tokens": 0}, ["budget/cents", "budget/tokens"], id="both-zero"),
        pytest.param(
            {"bytes": 5, "cents": 1}, ["budget/cents"], id="bytes-beside-cents-still-refused"
        ),
    ],
)
def test_a_budget_the_kernel_does_not_charge_is_refused_field_by_field(
    budget: dict[str, int], pointers: list[str]
) -> None:
    case = Case(_grants({"name": "g", "cap": "sys/blob@1", "params": {}, "budget": budget}))
    if not pointers:
        _load(case)
        return
    with pytest.raises(ManifestError) as info:
        _load(case)
    found = [(d.code, d.pointer) for d in info.value.diagnostics]
    at = "/4/defaults/cap_grants/0/"
    assert found == [("air.cap.budget_unenforced", at + p) for p in pointers]
