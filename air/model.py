"""Pydantic models of the AIR definitions, as authored in JSON.

These models check *shape* only: field names, required fields, simple types. Types, values and
expressions inside them stay raw JSON (``Any``) here and are parsed by ``air.types``,
``air.values`` and ``air.expr`` in ``air.loader``, which knows the JSON pointer of each and so
can report every problem at once. Cross-references (unknown names, keyed routes, cycles) are
``air.validate``'s job.

Every model forbids unknown fields, so a typo such as ``key_feild`` is an error, not a silent
default.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AIR_KINDS",
    "CapGrant",
    "DefCap",
    "DefEffect",
    "DefModule",
    "DefPlan",
    "DefPolicy",
    "DefSchema",
    "Edge",
    "Manifest",
    "NamedRef",
    "PlanStep",
    "PolicyRule",
    "ReducerAbi",
    "Route",
    "Trigger",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class DefSchema(_Model):
    kind: Literal["defschema"] = Field(alias="$kind")
    name: str
    type: Any


class ReducerAbi(_Model):
    state: str
    event: str
    annotations: str | None = None
    effects_emitted: list[str] = []
    cap_slots: dict[str, str] = {}


class ModuleAbi(_Model):
    reducer: ReducerAbi


class DefModule(_Model):
    kind: Literal["defmodule"] = Field(alias="$kind")
    name: str
    module_kind: Literal["reducer"]
    wasm: str | None = None
    wasm_hash: str | None = None
    key_schema: Any = None
    abi: ModuleAbi


class _Step(_Model):
    id: str


class EmitEffect(_Step):
    op: Literal["emit_effect"]
    kind: str
    params: Any
    cap: str | None = None


class AwaitReceipt(_Step):
    op: Literal["await_receipt"]
    for_step: str = Field(alias="for")


class RaiseEvent(_Step):
    op: Literal["raise_event"]
    event: str
    value: Any
    reducer: str | None = None
    key: Any = None


class AwaitEvent(_Step):
    op: Literal["await_event"]
    event: str
    where: Any = None


class Assign(_Step):
    op: Literal["assign"]
    var: str
    value: Any


class End(_Step):
    op: Literal["end"]
    result: Any = None


PlanStep = Annotated[
    EmitEffect | AwaitReceipt | RaiseEvent | AwaitEvent | Assign | End, Field(discriminator="op")
]


class Edge(_Model):
    from_step: str = Field(alias="from")
    to: str
    when: Any = None


class DefPlan(_Model):
    kind: Literal["defplan"] = Field(alias="$kind")
    name: str
    input: str
    output: str | None = None
    locals: dict[str, Any] = {}
    steps: list[PlanStep]
    edges: list[Edge] = []
    invariants: list[Any] = []


class DefCap(_Model):
    kind: Literal["defcap"] = Field(alias="$kind")
    name: str
    cap_type: str
    schema_: Any = Field(alias="schema")


class PolicyMatch(_Model):
    effect_kind: str | None = None
    origin_kind: Literal["reducer", "plan"] | None = None
    origin_name: str | None = None
    cap: str | None = None


class PolicyRule(_Model):
    when: PolicyMatch = PolicyMatch()
    decision: Literal["allow", "deny"]


class DefPolicy(_Model):
    kind: Literal["defpolicy"] = Field(alias="$kind")
    name: str
    rules: list[PolicyRule]


class DefEffect(_Model):
    kind: Literal["defeffect"] = Field(alias="$kind")
    name: str
    effect_kind: str
    params_schema: str
    receipt_schema: str
    cap_type: str
    origins: list[Literal["reducer", "plan"]]
    receipt_event: str | None = None


class NamedRef(_Model):
    name: str
    hash: str | None = None


class Route(_Model):
    event: str
    reducer: str
    key_field: str | None = None


class Trigger(_Model):
    event: str
    plan: str
    correlate_by: str | None = None


class CapGrant(_Model):
    name: str
    cap: str
    params: Any = {}
    expiry_ns: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] | None = None  # an AIR time


class Defaults(_Model):
    policy: str | None = None
    cap_grants: list[CapGrant] = []


class Routing(_Model):
    events: list[Route] = []


class ModuleBinding(_Model):
    slots: dict[str, str] = {}


class Manifest(_Model):
    kind: Literal["manifest"] = Field(alias="$kind")
    air_version: Literal["1"]
    schemas: list[str | NamedRef] = []
    modules: list[str | NamedRef] = []
    plans: list[str | NamedRef] = []
    caps: list[str | NamedRef] = []
    policies: list[str | NamedRef] = []
    effects: list[str | NamedRef] = []
    routing: Routing = Routing()
    triggers: list[Trigger] = []
    defaults: Defaults = Defaults()
    module_bindings: dict[str, ModuleBinding] = {}


AIR_KINDS: dict[str, type[_Model]] = {
    "defschema": DefSchema,
    "defmodule": DefModule,
    "defplan": DefPlan,
    "defcap": DefCap,
    "defpolicy": DefPolicy,
    "defeffect": DefEffect,
    "manifest": Manifest,
}
