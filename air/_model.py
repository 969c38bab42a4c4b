"""Pydantic models of the AIR definitions, as authored in JSON.

These models check *shape* only: field names, required fields, simple types. Types, values and
expressions inside them stay raw JSON (``Any``) here and are parsed by ``air.types``,
``air.values`` and ``air.expr`` in ``air._loader``, which knows the JSON pointer of each and so
can report every problem at once. Cross-references (unknown names, keyed routes, cycles) are
``air._validate``'s job.

Every model forbids unknown fields, so a typo such as ``key_feild`` is an error, not a silent
default.

Plans, caps, grants and policies have the AIR v1 shapes (SPEC §3), so AIR written for AgentOS
loads unchanged: a step's ``bind`` names the var it fills (``effect_id_as`` for an effect id,
``as`` for a value), ``await_receipt.for`` is an Expr, ``raise_event`` is either form
(``RaiseEvent``: to a reducer's cell, or routed by the manifest as AgentOS last wrote it).
The project's earlier step shapes (no ``bind``, ``for`` naming a step, ``raise_event`` with
both ``reducer`` and ``value``, ``assign`` with ``var``/``value``) are recognised by ``air._loader`` before these
models see the plan, so an author gets one ``air.plan.step.old_shape`` saying what to write
instead of a list of missing and unknown fields.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "AIR_KINDS",
    "STEP_OPS",
    "Assign",
    "AwaitEvent",
    "AwaitReceipt",
    "BindAs",
    "BindEffect",
    "Budget",
    "CapGrant",
    "DefCap",
    "DefEffect",
    "DefModule",
    "DefPlan",
    "DefPolicy",
    "DefPureModule",
    "DefSchema",
    "DefSecret",
    "Defaults",
    "Edge",
    "EmitEffect",
    "End",
    "Inbox",
    "Manifest",
    "ModuleBinding",
    "NamedRef",
    "PlanStep",
    "PolicyMatch",
    "PolicyRule",
    "RaiseEvent",
    "ReducerAbi",
    "Route",
    "Routing",
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


class PureAbi(_Model):
    input: str
    output: str


class PureModuleAbi(_Model):
    pure: PureAbi


class DefPureModule(_Model):
    """AgentOS's ``module_kind: "pure"``: a module that computes an output from an input and
    holds no state. This build has only built-in ones, the capability enforcers of
    ``air.sys.enforcers`` (their checks are native, ``kernel._grants``); an author's own pure
    module is refused (``air.module.pure_unsupported``). Not a ``DefModule``: no cell, no
    route, no step, so nothing that reads reducers meets one."""

    kind: Literal["defmodule"] = Field(alias="$kind")
    name: str
    module_kind: Literal["pure"]
    wasm_hash: str | None = None
    abi: PureModuleAbi


class BindEffect(_Model):
    """``emit_effect.bind``: the var that receives the effect id (its intent hash)."""

    effect_id_as: str


class BindAs(_Model):
    """``await_receipt``, ``await_event`` and ``assign``'s ``bind``: the var the value goes to."""

    as_: str = Field(alias="as")


class _Step(_Model):
    id: str


class EmitEffect(_Step):
    op: Literal["emit_effect"]
    kind: str
    params: Any  # Expr
    cap: str  # a cap grant name in manifest.defaults.cap_grants
    bind: BindEffect
    idempotency_key: Any = None
    """ExprOrValue of text or bytes (AgentOS's plan-chosen key): folded into the intent hash
    beside the origin's key (``kernel._effects.intent_hash``); absent, nothing changes."""


class AwaitReceipt(_Step):
    op: Literal["await_receipt"]
    for_: Any = Field(alias="for")  # Expr: an effect id bound earlier, {"ref": "@var:req"}
    bind: BindAs


class RaiseEvent(_Step):
    """Two forms, told apart by ``reducer``:

    * to one cell, ``{reducer, key?, event}``: ``event`` is the event value (Expr); its schema
      is the ``$schema`` of a record Expr (``air.expr.record_schema``), else the target
      reducer's ABI event schema;
    * routed, ``{event, value}`` (AgentOS's from Dec 2025): ``event`` is the schema name and
      ``value`` the event (ExprOrValue); the event goes where the manifest's routing sends an
      event of that schema, each route's key from its ``key_field`` (``routed``).
    """

    op: Literal["raise_event"]
    reducer: str | None = None
    key: Any = None  # Expr; required for a keyed reducer, forbidden for a non-keyed one
    event: Any
    value: Any = None

    @model_validator(mode="after")
    def _one_form(self) -> RaiseEvent:
        if self.reducer is None:
            if not isinstance(self.event, str):
                raise ValueError("a routed raise_event names its event schema: event is a Name")
            if self.value is None:
                raise ValueError("a routed raise_event needs value (or give reducer and event)")
            if self.key is not None:
                raise ValueError("a routed raise_event takes its key from the route: drop key")
        return self

    @property
    def routed(self) -> bool:
        """Whether this is the routed form (``{event, value}``, no ``reducer``)."""
        return self.reducer is None


class AwaitEvent(_Step):
    op: Literal["await_event"]
    event: str  # a schema name
    where: Any = None  # Expr over @event
    bind: BindAs


class Assign(_Step):
    op: Literal["assign"]
    expr: Any
    bind: BindAs


class End(_Step):
    op: Literal["end"]
    result: Any = None  # Expr; required when the plan declares an output


PlanStep = Annotated[
    EmitEffect | AwaitReceipt | RaiseEvent | AwaitEvent | Assign | End, Field(discriminator="op")
]

STEP_OPS: frozenset[str] = frozenset(
    ("emit_effect", "await_receipt", "raise_event", "await_event", "assign", "end")
)
"""The ``op`` of each step model (``PlanStep``'s tags)."""


class Edge(_Model):
    from_step: str = Field(alias="from")
    to: str
    when: Any = None  # Expr guard


class DefPlan(_Model):
    kind: Literal["defplan"] = Field(alias="$kind")
    name: str
    input: str
    output: str | None = None
    locals: dict[str, Any] = {}  # var -> type
    steps: list[PlanStep]
    edges: list[Edge] = []
    required_caps: list[str] = []  # cap grant names
    allowed_effects: list[str] = []  # effect kinds
    invariants: list[Any] = []  # Exprs


class DefCap(_Model):
    kind: Literal["defcap"] = Field(alias="$kind")
    name: str
    cap_type: str
    schema_: Any = Field(alias="schema")
    enforcer: Any = None
    """AgentOS's enforcer module (``{"module": "sys/CapEnforceHttpOut@1"}``): must be the
    built-in enforcer of the cap type (``air.sys.enforcers``), whose checks are native
    (``kernel._grants``). So it says nothing the cap type does not, and is not part of the
    def's canonical form or hash."""


class PolicyMatch(_Model):
    """Every given field must match; an empty match matches every intent."""

    effect_kind: str | None = None
    cap_name: str | None = None  # the grant name
    host: str | None = None  # a glob over the URL's host
    path_prefix: str | None = None
    method: str | None = None
    origin_kind: Literal["plan", "reducer"] | None = None
    origin_name: str | None = None


class PolicyRule(_Model):
    when: PolicyMatch
    decision: Literal["allow", "deny", "require_approval"]


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


class DefSecret(_Model):
    """AgentOS's ``defsecret``: ``name`` is ``alias@version``; ``binding_id`` is looked up in
    the machine's ``local.json`` (never in the AIR); ``expected_digest`` ``sha256:<hex>`` or
    ``blake3:<hex>`` of the value's bytes; ``allowed_caps`` (grant names) and ``allowed_plans``
    (plan names) restrict who may use it (empty: anyone). Checked by ``air._validate``."""

    kind: Literal["defsecret"] = Field(alias="$kind")
    name: str
    binding_id: str = Field(min_length=1, max_length=256)
    expected_digest: str | None = Field(None, pattern=r"^(sha256|blake3):[0-9a-f]{64}$")
    allowed_caps: list[str] = []
    allowed_plans: list[str] = []


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


_Nat = Annotated[int, Field(ge=0, le=2**64 - 1)]


class Budget(_Model):
    bytes: _Nat | None = None
    cents: _Nat | None = None
    tokens: _Nat | None = None


class CapGrant(_Model):
    name: str
    cap: str  # a defcap name
    params: Any = {}  # a value of the cap's schema, in either lens
    expiry_ns: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] | None = None  # an AIR time
    budget: Budget | None = None


class Defaults(_Model):
    policy: str | None = None
    cap_grants: list[CapGrant] = []


class Inbox(_Model):
    """AIR v1's ``routing.inboxes``: accepted and checked (the reducer exists)."""

    source: str
    reducer: str


class Routing(_Model):
    events: list[Route] = []
    inboxes: list[Inbox] = []


class ModuleBinding(_Model):
    slots: dict[str, str] = {}


class Governance(_Model):
    """What applying an upgrade needs (``world.gov``): ``approval`` (a journaled
    ``world upgrade approve``) and/or ``shadow`` (a ``world upgrade shadow`` run) of the
    proposal first. Not AIR v1's: absent, nothing is needed."""

    apply_requires: list[Literal["approval", "shadow"]] = []


class Manifest(_Model):
    kind: Literal["manifest"] = Field(alias="$kind")
    air_version: Literal["1"] = "1"  # absent means "1"
    schemas: list[str | NamedRef] = []
    modules: list[str | NamedRef] = []
    plans: list[str | NamedRef] = []
    caps: list[str | NamedRef] = []
    policies: list[str | NamedRef] = []
    effects: list[str | NamedRef] = []
    secrets: list[str | NamedRef] = []
    routing: Routing = Routing()
    triggers: list[Trigger] = []
    defaults: Defaults = Defaults()
    module_bindings: dict[str, ModuleBinding] = {}
    governance: Governance | None = None


AIR_KINDS: dict[str, type[_Model]] = {
    "defschema": DefSchema,
    "defmodule": DefModule,
    "defplan": DefPlan,
    "defcap": DefCap,
    "defpolicy": DefPolicy,
    "defeffect": DefEffect,
    "defsecret": DefSecret,
    "manifest": Manifest,
}
