"""Semantic validation of AIR: cross-references, routing, effects, capabilities, wasm, plans.

Runs after shapes and names are known (``air._loader``). Each check records diagnostics with a
stable code (``air._diagnostics``) and carries on. Checks that need a def that failed to parse are
skipped for that def rather than reported twice: a name the loader could not parse
(``LoadedAir.unparsed``) is not reported unknown where it is used. Plans are checked by
``air._plan_checks``.

Capabilities. A defcap of a built-in cap type (``http.out``, ``blob``, ``timer``) may be the
author's own, with any record schema whose fields the kernel knows how to enforce: for
``http.out`` ``hosts``, ``verbs`` (or AgentOS's ``methods``) and ``path_prefixes``, each a set or
list of text, optionally an option; for ``blob`` and ``timer`` none. A field the kernel does not
read would be a constraint silently not enforced, so it is an error (``air.cap.schema``). So is
a grant's budget in ``cents`` or ``tokens`` (``air.cap.budget_unenforced``): only ``bytes`` is
charged (by ``blob.put``).

Routes. The kernel delivers an event under its own schema name (it does not wrap it into the
reducer's ABI event), and a reducer may take several, telling them apart by name: the order
reducer takes ``demo/FetchDone@1`` beside its ABI event ``demo/OrderPlaced@1``, and its AIR says
so by routing both. So a route of another event is how AIR declares a reducer of several events,
and what is refused (``air.route.event_not_accepted``) is the route that cannot be that: its
event is neither the ABI event nor a case of it (a variant case whose type is that schema, as
AgentOS writes a reducer of several events), and the ABI event (or a case of it) reaches the
reducer by no route and no plan's ``raise_event``. Then the reducer's one declared input never
arrives and something else does instead: the route names the wrong event (or reducer), and every
event it carries would fail its step. Not caught: a wrong route beside a right one (only the
wasm knows which names it takes, and the SDK's compiled comparisons leave no name in the binary
to look for). Rejected: refusing every route whose event is not the ABI event or a case of it,
which refuses the bundled order world and the Cells seed's example.

Cap slots. A slot's value is a defcap name, or a cap type (``"timer"``, ``"http.out"``), as
AgentOS writes ``cap_slots``: the slot then holds any capability of that type (one a defcap or
defeffect of the world has, else ``air.ref.unknown_cap``). The kernel finds a slot's cap type,
and an unbound slot's grant, through a defcap name, so each cap-type slot is resolved to one
(``LoadedAir.slot_caps``: the defcap of its bound grant, else of the one grant of its type,
else the one defcap of its type); the def keeps what was written, and its hash is of that.

Reducer effects. A reducer's effect names its cap slot or not; without one, the kernel uses the
one slot of the effect's cap type, and that slot's grant is its binding in ``module_bindings``
(or the only grant of the slot's cap). So each kind in ``effects_emitted`` needs exactly one
slot of its cap type, bound or with one grant: ``air.module.effect_unbound`` otherwise.
"""

from __future__ import annotations

from typing import Any

from air import cbor, expr
from air._ctx import Ctx
from air._diagnostics import Diagnostics, escape_pointer
from air._loaded import (
    InspectWasm,
    LoadedAir,
    Located,
    ReadWasm,
    is_cap_type_text,
    resolve_relative,
)
from air._model import (
    DefCap,
    DefEffect,
    DefModule,
    DefPlan,
    DefPolicy,
    DefPureModule,
    DefSchema,
    DefSecret,
    RaiseEvent,
)
from air._plan_checks import check_plan
from air.errors import ValueMismatch, WorldError
from air.secretrefs import SECRET_REF, constant_secret_refs, parse_secret_name
from air.sys.enforcers import ALLOW_ALL, ENFORCERS
from air.types import (
    ListT,
    OptionT,
    Prim,
    Record,
    Ref,
    SetT,
    TypeNode,
    Variant,
    parse_type,
    resolve,
    type_to_obj,
)
from air.values import normalise

__all__ = ["BUILTIN_CAP_FIELDS", "NAT_CAP_FIELDS", "UNENFORCED_BUDGET_FIELDS", "validate"]

_PROBLEM_CODES = {
    "imports": "air.module.imports",
    "export_missing": "air.module.exports",
    "export_kind": "air.module.exports",
}
"""The ``WasmInfo`` problems AIR validation reports, and their diagnostic codes."""

BUILTIN_CAP_FIELDS: dict[str, frozenset[str]] = {
    "http.out": frozenset({"hosts", "verbs", "methods", "path_prefixes"}),
    "llm.basic": frozenset({"providers", "models", "max_tokens", "tools_allow"}),
    "workspace": frozenset({"workspaces", "path_prefixes", "ops"}),
    "blob": frozenset(),
    "timer": frozenset(),
}
"""The fields the kernel enforces for each built-in cap type: all a custom defcap may have.
Each is a set or list of text (or an option of one), but those in ``NAT_CAP_FIELDS``."""

NAT_CAP_FIELDS: dict[str, frozenset[str]] = {"llm.basic": frozenset({"max_tokens"})}
"""The built-in cap fields that are a ``nat`` (or an option of one): a limit, not a set."""

UNENFORCED_BUDGET_FIELDS = ("cents", "tokens")
"""Budget fields AIR accepts in shape but the kernel never charges: refused at validation."""


def validate(
    air: LoadedAir,
    manifest: Located,
    diags: Diagnostics,
    read_wasm: ReadWasm | None,
    inspect_wasm: InspectWasm | None,
) -> None:
    ctx = Ctx(air, diags)
    _manifest_lists(ctx, manifest)
    for name, loc in air.defs.items():
        if isinstance(loc.model, DefModule):
            _module(ctx, name, loc, read_wasm, inspect_wasm)
        elif isinstance(loc.model, DefPureModule):
            _pure_module(ctx, loc)
        elif isinstance(loc.model, DefCap):
            _cap(ctx, loc)
        elif isinstance(loc.model, DefPolicy):
            _policy(ctx, loc)
        elif isinstance(loc.model, DefEffect):
            for field_name in ("params_schema", "receipt_schema"):
                ctx.need_schema(
                    getattr(loc.model, field_name), loc.file, f"{loc.pointer}/{field_name}"
                )
    _routing(ctx, manifest)
    _defaults(ctx, manifest)
    _reducer_effects(ctx, manifest)
    _resolve_slots(ctx, manifest)
    correlated = {t.plan for t in manifest.model.triggers if t.correlate_by}
    for name, loc in air.defs.items():
        if isinstance(loc.model, DefPlan):
            check_plan(ctx, loc, correlated=name in correlated)
    _triggers(ctx, manifest)
    _secrets(ctx, manifest)


def _manifest_lists(ctx: Ctx, manifest: Located) -> None:
    lists: dict[str, tuple[type | tuple[type, ...], str]] = {
        "schemas": (DefSchema, "air.ref.unknown_schema"),
        "modules": ((DefModule, DefPureModule), "air.ref.unknown_module"),
        "plans": (DefPlan, "air.ref.unknown_plan"),
        "caps": (DefCap, "air.ref.unknown_cap"),
        "policies": (DefPolicy, "air.ref.unknown_policy"),
        "effects": (DefEffect, "air.ref.unknown_effect"),
        "secrets": (DefSecret, "air.ref.unknown_secret"),
    }
    for field_name, (model_type, code) in lists.items():
        for i, item in enumerate(getattr(manifest.model, field_name)):
            name = item if isinstance(item, str) else item.name
            ctx.need(name, model_type, manifest.file, f"{manifest.pointer}/{field_name}/{i}", code)


def _module(
    ctx: Ctx, name: str, loc: Located, read_wasm: ReadWasm | None, inspect: InspectWasm | None
) -> None:
    model: DefModule = loc.model
    abi = model.abi.reducer
    base = f"{loc.pointer}/abi/reducer"
    for field_name in ("state", "event", "annotations"):
        ref = getattr(abi, field_name)
        if ref is not None:
            ctx.need_schema(ref, loc.file, f"{base}/{field_name}")
    if model.key_schema is not None:
        key = ctx.type_field(loc, model.key_schema, "/key_schema")
        if key is not None:
            ctx.air.key_types[name] = key
    for i, kind in enumerate(abi.effects_emitted):
        ctx.effect_for(kind, "reducer", loc.file, f"{base}/effects_emitted/{i}")
    for slot, cap in abi.cap_slots.items():
        at = f"{base}/cap_slots/{escape_pointer(slot)}"
        if not is_cap_type_text(cap):
            ctx.need(cap, DefCap, loc.file, at, "air.ref.unknown_cap")
        elif cap not in _cap_types(ctx):
            known = ", ".join(sorted(_cap_types(ctx)))
            detail = f"unknown cap {cap}: neither a defcap nor a cap type (the cap types: {known})"
            ctx.diags.add(loc.file, at, "air.ref.unknown_cap", detail)
    _wasm(ctx, name, loc, read_wasm, inspect)


def _cap(ctx: Ctx, loc: Located) -> None:
    """The cap's schema is a type; for a built-in cap type, one whose fields the kernel reads."""
    model: DefCap = loc.model
    if model.enforcer is not None:
        _enforcer(ctx, loc)
    node = ctx.type_field(loc, model.schema_, "/schema")
    known = BUILTIN_CAP_FIELDS.get(model.cap_type)
    if node is None or known is None:
        return
    try:
        record = resolve(node, ctx.air.schemas)
    except ValueMismatch:
        return
    pointer = f"{loc.pointer}/schema"
    if not isinstance(record, Record):
        detail = f"a {model.cap_type} cap's schema is a record of {_fields_text(known)}"
        ctx.diags.add(loc.file, pointer, "air.cap.schema", detail)
        return
    for field_name, sub in record.fields:
        if field_name not in known:
            detail = (
                f"the kernel enforces only {_fields_text(known)} for {model.cap_type}, "
                f"not {field_name!r}"
            )
            ctx.diags.add(loc.file, pointer, "air.cap.schema", detail)
        elif field_name in NAT_CAP_FIELDS.get(model.cap_type, ()):
            if not _is_nat(ctx, sub):
                detail = f"{field_name!r} is a nat (optionally an option of one)"
                ctx.diags.add(loc.file, pointer, "air.cap.schema", detail)
        elif not _is_text_collection(ctx, sub):
            detail = f"{field_name!r} is a set or list of text (optionally an option of one)"
            ctx.diags.add(loc.file, pointer, "air.cap.schema", detail)


def _enforcer(ctx: Ctx, loc: Located) -> None:
    """A defcap's ``enforcer`` is the built-in one of its cap type, or ``sys/CapAllowAll@1``
    for a cap type without one (``air.sys.enforcers``), by name: the def need not be in the
    world (naming it pulls no on-demand def in, ``air._builtins``)."""
    model: DefCap = loc.model
    pointer = f"{loc.pointer}/enforcer"
    enforcer = model.enforcer
    module = enforcer.get("module") if isinstance(enforcer, dict) else None
    if not isinstance(module, str) or set(enforcer) != {"module"}:
        ctx.diags.add(loc.file, pointer, "air.shape", 'an enforcer is {"module": NAME}')
        return
    if module not in (ALLOW_ALL, *ENFORCERS.values()):
        detail = f"unknown module {module}: an enforcer is one of the built-in ones"
        ctx.diags.add(loc.file, f"{pointer}/module", "air.ref.unknown_module", detail)
        return
    own = ENFORCERS.get(model.cap_type)
    if module == own or (own is None and module == ALLOW_ALL):
        return
    checks = (
        f"{own}, whose checks are built in" if own else f"{ALLOW_ALL} (it has no checks of its own)"
    )
    detail = f"a {model.cap_type} cap is enforced by {checks}, not {module}"
    ctx.diags.add(loc.file, f"{pointer}/module", "air.cap.enforcer", detail)


def _pure_module(ctx: Ctx, loc: Located) -> None:
    """Only the built-in pure modules (the enforcers) are run by this build."""
    if not loc.builtin:
        detail = (
            f"{loc.model.name}: this build runs no pure modules but its built-in capability "
            f"enforcers ({', '.join(sorted({ALLOW_ALL, *ENFORCERS.values()}))})"
        )
        ctx.diags.add(loc.file, f"{loc.pointer}/module_kind", "air.module.pure_unsupported", detail)


def _fields_text(fields: frozenset[str]) -> str:
    return ", ".join(sorted(fields)) if fields else "no fields"


def _is_nat(ctx: Ctx, node: TypeNode) -> bool:
    try:
        node = resolve(node, ctx.air.schemas)
        if isinstance(node, OptionT):
            node = resolve(node.item, ctx.air.schemas)
    except ValueMismatch:
        return True  # an unknown ref is reported where it is written
    return isinstance(node, Prim) and node.name == "nat"


def _is_text_collection(ctx: Ctx, node: TypeNode) -> bool:
    try:
        node = resolve(node, ctx.air.schemas)
        if isinstance(node, OptionT):
            node = resolve(node.item, ctx.air.schemas)
        if not isinstance(node, SetT | ListT):
            return False
        item = resolve(node.item, ctx.air.schemas)
    except ValueMismatch:
        return True  # an unknown ref is reported where it is written
    return isinstance(item, Prim) and item.name == "text"


def _policy(ctx: Ctx, loc: Located) -> None:
    """A rule's ``effect_kind`` names a known effect: a typo would silently never match."""
    for i, rule in enumerate(loc.model.rules):
        kind = rule.when.effect_kind
        if kind is not None and kind not in ctx.air.effects:
            at = f"{loc.pointer}/rules/{i}/when/effect_kind"
            detail = f"no defeffect provides effect kind {kind!r}"
            ctx.diags.add(loc.file, at, "air.ref.unknown_effect", detail)


def _wasm(
    ctx: Ctx, name: str, loc: Located, read_wasm: ReadWasm | None, inspect: InspectWasm | None
) -> None:
    """Hash and inspect the module's binary. With no ``read_wasm`` the caller asked for no
    binaries: nothing is read or reported, and a written ``wasm_hash`` is taken as it is."""

    model: DefModule = loc.model
    if model.wasm is None and model.wasm_hash is None:
        ctx.diags.add(
            loc.file,
            loc.pointer,
            "air.module.wasm_unbound",
            f"module {name} names neither a wasm file nor a wasm_hash: bind one when creating "
            f"the world (world init --module {name}=FILE.wasm)",
            "warning",
        )
        return
    data = read_wasm(resolve_relative(loc.file, model.wasm)) if model.wasm and read_wasm else None
    if data is None:
        if model.wasm_hash is not None:
            ctx.air.wasm_hashes[name] = model.wasm_hash
        elif read_wasm is not None:
            ctx.diags.add(
                loc.file,
                f"{loc.pointer}/wasm",
                "air.module.wasm_missing",
                f"wasm file {model.wasm} of module {name} is missing or cannot be read",
            )
        return
    actual = cbor.content_hash(data)
    if model.wasm_hash is not None and model.wasm_hash != actual:
        ctx.diags.add(
            loc.file,
            f"{loc.pointer}/wasm_hash",
            "air.hash.mismatch",
            f"wasm_hash {model.wasm_hash} but {model.wasm} hashes to {actual}",
        )
    ctx.air.wasm_hashes[name] = actual
    ctx.air.wasm_bytes[name] = data
    if inspect is not None:
        _inspect(ctx, loc, inspect(data))


def _inspect(ctx: Ctx, loc: Located, info: Any) -> None:
    """What ``inspect`` found wrong with the module, in its words (the reducer check's, so
    ``world validate``, ``init`` and ``reducer check`` say the same): bytes that are not wasm,
    imports, ABI exports missing or of the wrong kind. Signatures, limits and the start
    function are the reducer check's alone (``world._runner.check_module``), run by ``init``
    and ``upgrade propose``: a stored world's AIR is loaded with this too, and a world made
    before those checks must still open (its steps on such a module fail, one by one)."""
    pointer = f"{loc.pointer}/wasm"
    if info.error is not None:
        ctx.diags.add(loc.file, pointer, "air.module.wasm_invalid", info.error)
        return
    found: dict[str, list[str]] = {}
    for problem in info.problems:
        code = _PROBLEM_CODES.get(problem.code)
        if code is not None:
            found.setdefault(code, []).append(problem.detail)
    for code, details in found.items():  # one diagnostic per code: every export it misses
        ctx.diags.add(loc.file, pointer, code, "; ".join(details))


def _record_field(ctx: Ctx, schema: str, field_name: str) -> TypeNode | None:
    try:
        node = resolve(ctx.air.schemas[schema], ctx.air.schemas)
    except ValueMismatch:
        return None
    if not isinstance(node, Record):
        return None
    return node.field_map().get(field_name)


def _same_type(ctx: Ctx, a: TypeNode, b: TypeNode) -> bool:
    try:
        return bool(
            type_to_obj(resolve(a, ctx.air.schemas)) == type_to_obj(resolve(b, ctx.air.schemas))
        )
    except ValueMismatch:
        return False


def _routing(ctx: Ctx, manifest: Located) -> None:
    for i, route in enumerate(manifest.model.routing.events):
        at = f"{manifest.pointer}/routing/events/{i}"
        ok_event = ctx.need_schema(route.event, manifest.file, f"{at}/event")
        if not ctx.need(
            route.reducer, DefModule, manifest.file, f"{at}/reducer", "air.ref.unknown_module"
        ):
            continue
        if ok_event:
            _route_event(ctx, manifest, at, route)
        keyed = ctx.loc(route.reducer).model.key_schema is not None
        if route.key_field is not None and not keyed:
            ctx.diags.add(
                manifest.file,
                f"{at}/key_field",
                "air.route.keyed_to_unkeyed",
                f"route has key_field but {route.reducer} has no key_schema",
            )
        elif route.key_field is None and keyed:
            ctx.diags.add(
                manifest.file,
                at,
                "air.route.unkeyed_to_keyed",
                f"{route.reducer} is keyed; the route needs a key_field",
            )
        elif route.key_field is not None and ok_event:
            _route_key(ctx, manifest, at, route)
    for i, inbox in enumerate(manifest.model.routing.inboxes):
        at = f"{manifest.pointer}/routing/inboxes/{i}/reducer"
        ctx.need(inbox.reducer, DefModule, manifest.file, at, "air.ref.unknown_module")


def _route_event(ctx: Ctx, manifest: Located, at: str, route: Any) -> None:
    """The reducer can take the route's event (the module docstring, "Routes")."""
    abi_event = ctx.loc(route.reducer).model.abi.reducer.event
    if abi_event not in ctx.air.schemas:
        return  # reported by _module
    takes = {abi_event} | _variant_case_schemas(ctx, abi_event)
    delivered = _schemas_delivered(ctx, route.reducer)
    if route.event in takes or not takes.isdisjoint(delivered):
        return
    if any(schema not in ctx.air.schemas for schema in delivered):
        return  # a route or raise_event naming an unknown schema is reported where it is
    detail = (
        f"{route.reducer} takes {abi_event} (its ABI event), which no route or plan gives it, "
        f"and {route.event} is not a case of it: every {route.event} would fail its step"
    )
    ctx.diags.add(manifest.file, f"{at}/event", "air.route.event_not_accepted", detail)


def _variant_case_schemas(ctx: Ctx, schema: str) -> set[str]:
    """The schemas named as cases of ``schema`` if it is a variant (AgentOS's way of taking
    several events: one case per event schema)."""
    try:
        node = resolve(ctx.air.schemas[schema], ctx.air.schemas)
    except ValueMismatch:
        return set()
    if not isinstance(node, Variant):
        return set()
    return {case.name for _, case in node.cases if isinstance(case, Ref)}


def _schemas_delivered(ctx: Ctx, reducer: str) -> set[str]:
    """The event schemas the AIR gives ``reducer``: by its routes and its plans' raise_event to
    it (a ``$schema`` record, else the ABI event: ``RaiseEvent``; a routed one is a route's)."""
    delivered = {r.event for r in ctx.air.manifest.routing.events if r.reducer == reducer}
    abi_event = ctx.loc(reducer).model.abi.reducer.event
    for plan in ctx.air.plans.values():
        for step in plan.steps:
            if isinstance(step, RaiseEvent) and step.reducer == reducer:  # routed: by routes
                delivered.add(_raised_schema(step.event) or abi_event)
    return delivered


def _raised_schema(event: Any) -> str | None:
    """The ``$schema`` of a raise_event's record Expr, as ``air.expr.record_schema`` reads it."""
    body = event.get("record") if isinstance(event, dict) and len(event) == 1 else None
    schema = body.get("$schema") if isinstance(body, dict) else None
    return schema if isinstance(schema, str) else None


def _route_key(ctx: Ctx, manifest: Located, at: str, route: Any) -> None:
    field_type = _record_field(ctx, route.event, route.key_field)
    if field_type is None:
        ctx.diags.add(
            manifest.file,
            f"{at}/key_field",
            "air.route.key_field_missing",
            f"field {route.key_field!r} not in schema {route.event}",
        )
        return
    key_type = ctx.air.key_types.get(route.reducer)
    if key_type is not None and not _same_type(ctx, field_type, key_type):
        ctx.diags.add(
            manifest.file,
            f"{at}/key_field",
            "air.route.key_type_mismatch",
            f"field {route.key_field!r} does not have {route.reducer}'s key_schema type",
        )


def _triggers(ctx: Ctx, manifest: Located) -> None:
    for i, trigger in enumerate(manifest.model.triggers):
        at = f"{manifest.pointer}/triggers/{i}"
        ok_event = ctx.need_schema(trigger.event, manifest.file, f"{at}/event")
        if not ctx.need(trigger.plan, DefPlan, manifest.file, f"{at}/plan", "air.ref.unknown_plan"):
            continue
        if ok_event and ctx.loc(trigger.plan).model.input != trigger.event:
            ctx.diags.add(
                manifest.file,
                f"{at}/event",
                "air.trigger.input_mismatch",
                f"{trigger.plan} takes {ctx.loc(trigger.plan).model.input}, not {trigger.event}",
            )
        if (
            ok_event
            and trigger.correlate_by
            and _record_field(ctx, trigger.event, trigger.correlate_by) is None
        ):
            ctx.diags.add(
                manifest.file,
                f"{at}/correlate_by",
                "air.trigger.correlate_missing",
                f"field {trigger.correlate_by!r} not in schema {trigger.event}",
            )


_STEP_EXPR_FIELDS: dict[str, tuple[str, ...]] = {
    "emit_effect": ("params", "idempotency_key"),
    "raise_event": ("key", "event", "value"),
    "assign": ("expr",),
    "end": ("result",),
}
"""The step fields whose Expr may hold a SecretRef constant (``air._canonical._STEP_EXPRS``)."""


def _secrets(ctx: Ctx, manifest: Located) -> None:
    """``defsecret``s: the name is ``alias@version`` (unique: it is the def's name; the digest's
    form is the model's), ``allowed_caps`` are grants and ``allowed_plans`` plans of the world. Each SecretRef
    a plan writes as a constant names a declared secret (one built at run time is checked by
    the kernel when the effect is asked for, ``kernel._effects``)."""
    grants = {g.name for g in manifest.model.defaults.cap_grants}
    declared: set[tuple[str, int]] = set()
    for loc in ctx.air.defs.values():
        model = loc.model
        if not isinstance(model, DefSecret):
            continue
        parsed = parse_secret_name(model.name)
        if parsed is not None:
            declared.add(parsed)
        for i, grant in enumerate(model.allowed_caps):
            if grant not in grants:
                at = f"{loc.pointer}/allowed_caps/{i}"
                detail = f"no cap grant named {grant!r} in manifest.defaults.cap_grants"
                ctx.diags.add(loc.file, at, "air.ref.unknown_cap_grant", detail)
        for i, plan in enumerate(model.allowed_plans):
            at = f"{loc.pointer}/allowed_plans/{i}"
            ctx.need(plan, DefPlan, loc.file, at, "air.ref.unknown_plan")
    if SECRET_REF not in ctx.air.schemas:
        return  # no SecretRef can be written in a world without the schema
    for loc in ctx.air.defs.values():
        if not isinstance(loc.model, DefPlan):
            continue
        for i, step in enumerate(loc.model.steps):
            for field_name in _STEP_EXPR_FIELDS.get(step.op, ()):
                raw = getattr(step, field_name, None)
                if raw is None:
                    continue
                try:
                    tree = expr.to_json(expr.parse_expr(raw))
                except WorldError:
                    continue  # reported by the plan checks
                base = f"{loc.pointer}/steps/{i}/{field_name}"
                for _at, alias, version in constant_secret_refs(tree, base):
                    at = base  # the canonical Expr's pointers are not the author's
                    if (alias, version) not in declared:
                        detail = (
                            f"secret {alias}@{version} is not declared: add a defsecret named "
                            f"{alias}@{version}"
                        )
                        ctx.diags.add(loc.file, at, "air.ref.unknown_secret", detail)


def _defaults(ctx: Ctx, manifest: Located) -> None:
    model = manifest.model
    base = f"{manifest.pointer}/defaults"
    if model.defaults.policy is not None:
        at = f"{base}/policy"
        ctx.need(model.defaults.policy, DefPolicy, manifest.file, at, "air.ref.unknown_policy")
    seen: set[str] = set()
    for i, grant in enumerate(model.defaults.cap_grants):
        at = f"{base}/cap_grants/{i}"
        if grant.name in seen:
            detail = f"cap grant {grant.name!r} is defined twice"
            ctx.diags.add(manifest.file, f"{at}/name", "air.name.duplicate", detail)
        seen.add(grant.name)
        _budget(ctx, manifest, grant, at)
        if not ctx.need(grant.cap, DefCap, manifest.file, f"{at}/cap", "air.ref.unknown_cap"):
            continue
        try:
            node = parse_type(ctx.loc(grant.cap).model.schema_)
            normalise(node, grant.params, ctx.air.schemas, f"{at}/params")
        except ValueMismatch as exc:
            ctx.diags.add(manifest.file, exc.pointer, "air.value.mismatch", exc.detail)
    for module, binding in model.module_bindings.items():
        at = f"{manifest.pointer}/module_bindings/{escape_pointer(module)}"
        if ctx.need(module, DefModule, manifest.file, at, "air.ref.unknown_module"):
            _binding(ctx, manifest, module, binding.slots, f"{at}/slots")


def _budget(ctx: Ctx, manifest: Located, grant: Any, at: str) -> None:
    """Only a budget's ``bytes`` is enforced: a ``cents`` or ``tokens`` limit would be a
    promise the kernel never keeps."""
    if grant.budget is None:
        return
    for field_name in UNENFORCED_BUDGET_FIELDS:
        if getattr(grant.budget, field_name) is not None:
            detail = f"the kernel enforces only a budget's bytes, not {field_name!r}"
            pointer = f"{at}/budget/{field_name}"
            ctx.diags.add(manifest.file, pointer, "air.cap.budget_unenforced", detail)


def _binding(ctx: Ctx, manifest: Located, module: str, slots: dict[str, str], base: str) -> None:
    """Each bound slot exists, and its grant exists and is of the slot's cap type."""
    declared = ctx.loc(module).model.abi.reducer.cap_slots
    grants = {g.name: g for g in manifest.model.defaults.cap_grants}
    for slot, grant_name in slots.items():
        at = f"{base}/{escape_pointer(slot)}"
        grant = grants.get(grant_name)
        if slot not in declared:
            detail = f"{module} declares no cap slot {slot!r}"
            ctx.diags.add(manifest.file, at, "air.ref.unknown_slot", detail)
        if grant is None:
            detail = f"no cap grant named {grant_name!r} in defaults.cap_grants"
            ctx.diags.add(manifest.file, at, "air.ref.unknown_cap_grant", detail)
        elif slot in declared:
            want, have = _slot_type(ctx, declared[slot]), ctx.cap_type(grant.cap)
            if want is not None and have is not None and want != have:
                detail = f"slot {slot!r} holds a {want} capability; grant {grant_name!r} is {have}"
                ctx.diags.add(manifest.file, at, "air.cap.type_mismatch", detail)


def _reducer_effects(ctx: Ctx, manifest: Located) -> None:
    """Each effect kind a reducer emits resolves, without a cap slot named, to one grant."""
    for name, loc in ctx.air.defs.items():
        if not isinstance(loc.model, DefModule):
            continue
        for i, kind in enumerate(loc.model.abi.reducer.effects_emitted):
            effect = ctx.air.effects.get(kind)
            if effect is None or "reducer" not in effect.origins:
                continue  # reported by _module
            problem = _slot_problem(ctx, manifest, name, effect)
            if problem is not None:
                at = f"{loc.pointer}/abi/reducer/effects_emitted/{i}"
                ctx.diags.add(loc.file, at, "air.module.effect_unbound", f"{kind}: {problem}")


def _slot_problem(ctx: Ctx, manifest: Located, module: str, effect: DefEffect) -> str | None:
    slots = ctx.loc(module).model.abi.reducer.cap_slots
    fits = sorted(s for s, cap in slots.items() if _slot_type(ctx, cap) == effect.cap_type)
    if len(fits) != 1:
        found = "no cap slot" if not fits else f"{len(fits)} cap slots ({', '.join(fits)})"
        return f"{module} has {found} of cap type {effect.cap_type}; it needs exactly one"
    slot = fits[0]
    binding = manifest.model.module_bindings.get(module)
    if binding is not None and slot in binding.slots:
        return None
    cap = slots[slot]
    if len(_slot_grants(ctx, manifest, cap)) == 1:
        return None
    return (
        f"slot {slot!r} is not bound in module_bindings, and there is not exactly one grant "
        f"of {cap} to use instead"
    )


def _cap_types(ctx: Ctx) -> set[str]:
    """The cap types the world knows: of its defcaps and its defeffects."""
    return {c.cap_type for c in ctx.air.caps.values()} | {
        e.cap_type for e in ctx.air.effects.values()
    }


def _slot_type(ctx: Ctx, cap: str) -> str | None:
    """The cap type a slot holds: its defcap's, or the cap type it names (AgentOS's form)."""
    if is_cap_type_text(cap):
        return cap if cap in _cap_types(ctx) else None
    return ctx.cap_type(cap)


def _slot_grants(ctx: Ctx, manifest: Located, cap: str) -> list[Any]:
    """The grants an unbound slot may use: those of its defcap, or of its cap type."""
    grants = manifest.model.defaults.cap_grants
    if is_cap_type_text(cap):
        return [g for g in grants if ctx.cap_type(g.cap) == cap]
    return [g for g in grants if g.cap == cap]


def _resolve_slots(ctx: Ctx, manifest: Located) -> None:
    """``LoadedAir.slot_caps``: the defcap each slot written as a cap type stands for (the
    kernel finds a slot's cap type, and an unbound slot's grant, through a defcap name).
    A slot that resolves to none is left as written: the kernel then refuses its effects
    (``cap.slot_missing``), which validation already reports (``air.module.effect_unbound``)
    for every effect kind the module declares."""
    bindings = manifest.model.module_bindings
    grants = {g.name: g for g in manifest.model.defaults.cap_grants}
    for name, module in ctx.air.of_kind(DefModule).items():
        for slot, cap in module.abi.reducer.cap_slots.items():
            if not is_cap_type_text(cap):
                continue
            bound = bindings[name].slots.get(slot) if name in bindings else None
            if bound in grants and ctx.cap_type(grants[bound].cap) == cap:
                chosen = [grants[bound].cap]
            else:
                chosen = sorted({g.cap for g in _slot_grants(ctx, manifest, cap)})
                if len(chosen) != 1:
                    chosen = sorted(n for n, c in ctx.air.caps.items() if c.cap_type == cap)
            if len(chosen) == 1:
                ctx.air.slot_caps.setdefault(name, {})[slot] = chosen[0]
