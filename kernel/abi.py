"""The reducer envelope (SPEC §5): input encoding, strict output decoding, output validation.

- ``encode_input`` builds the canonical CBOR input ``{version: 1, state, event: {schema,
  value}, ctx: {key?, cell_mode, ...}}``. Payloads (``state``, ``event.value``, ``ctx.key``)
  are the kernel's own canonical bytes and are passed through, not re-checked.
- ``decode_output`` accepts only canonical CBOR (``air.cbor.loads``) of exactly the output
  shape: known keys, right types, optional keys absent rather than null, and every inner
  payload itself canonical CBOR. It returns a frozen ``StepOutput``.
- ``validate_output`` checks a ``StepOutput`` against the reducer's declared schemas through
  an injected ``check(schema_name, value)`` (raising ``air.errors.ValueMismatch``), so this
  module does not depend on the type system; and enforces the effect rules: at most one effect,
  of a reducer-scoped kind that the module declares in ``effects_emitted``.

Every failure is ``StepRejected(module, code, pointer, detail)`` with a JSON pointer into the
output envelope (``/state/count``, ``/effects/0/kind``). Nothing here mutates its inputs.

Refusals. A reducer may refuse its event with a reason: the output ``{"error": text}``.
``decode_output`` raises ``StepRefused`` (a ``StepRejected`` with code ``refused``, pointer
``/error`` and ``reason`` the text), which the kernel journals as ``step.failed`` with that code
and the reason as detail: the state is unchanged, nothing is emitted, and the delivery becomes
a dead letter with that reason. The rules, each a bad output otherwise:

- ``error`` stands alone: with ``state``, ``domain_events``, ``effects`` or ``ann`` beside it
  the output is ambiguous (did the step happen?), so it is refused as ``refusal_not_alone``
  rather than one half being silently dropped. A refusal has no ``state`` key at all.
- ``error`` is non-empty text (``output_shape`` otherwise) of at most ``REFUSAL_REASON_MAX``
  bytes of UTF-8 (``refusal_too_long`` otherwise: the reason is journaled and shown to
  operators, so it is a sentence, not a payload).

The native decoder does not know ``error``: it declines any output with that key, so the code
below decides every refusal on both paths and the records are the same bytes.

Why the common input case skips ``air.cbor.dumps``: the envelope's key order is fixed, so it is
written in canonical order and encoded by cbor2 directly (~1 us instead of ~7 us per step);
``tests/kernel/wasm/test_host_abi.py`` holds it byte-equal to ``air.cbor.dumps`` of the same envelope.
Extra ``ctx`` fields take the general path.

With the native path on (``kernel.native``), ``encode_input`` and ``decode_output`` first ask the
extension, which either gives the same result or declines; the code below is then the reference
that decides, and the only place errors are made (``tests/kernel/native/test_native_fuzz.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import cbor2

from air import cbor
from air.errors import CborError, InvalidArgument, ValueMismatch
from kernel import native
from kernel.errors import StepRefused, StepRejected

__all__ = [
    "ABI_VERSION",
    "REDUCER_EFFECTS",
    "REFUSAL_REASON_MAX",
    "DomainEventOut",
    "EffectOut",
    "OutputValues",
    "StepOutput",
    "decode_output",
    "encode_input",
    "validate_output",
]

ABI_VERSION: Final = 1
REDUCER_EFFECTS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "timer.set": "sys/TimerSetParams@1",
        "blob.put": "sys/BlobPutParams@1",
        "blob.get": "sys/BlobGetParams@1",
    }
)
REFUSAL_REASON_MAX: Final = 512
"""Most bytes (UTF-8) of a refusal's reason (``{"error": text}``); longer is ``refusal_too_long``."""
_OUTPUT_KEYS: Final = frozenset({"state", "domain_events", "effects", "ann", "error"})
_EVENT_KEYS: Final = frozenset({"schema", "value", "key"})
_EFFECT_KEYS: Final = frozenset({"kind", "params", "cap_slot"})
_CTX_RESERVED: Final = frozenset({"key", "cell_mode"})

Check = Callable[[str, Any], None]


@dataclass(frozen=True, slots=True)
class DomainEventOut:
    schema: str
    value_cbor: bytes
    key_cbor: bytes | None = None


@dataclass(frozen=True, slots=True)
class EffectOut:
    kind: str
    params_cbor: bytes
    cap_slot: str | None = None


@dataclass(frozen=True, slots=True)
class OutputValues:
    """The decoded payloads of a ``StepOutput``, kept so validation does not decode twice.
    Canonical-form Python values (docs/CONTRACTS.md); treat as read-only."""

    state: Any = None
    events: tuple[Any, ...] = ()
    params: tuple[Any, ...] = ()
    ann: Any = None


@dataclass(frozen=True, slots=True)
class StepOutput:
    state_cbor: bytes | None
    domain_events: tuple[DomainEventOut, ...] = ()
    effects: tuple[EffectOut, ...] = ()
    ann_cbor: bytes | None = None
    values: OutputValues | None = field(default=None, compare=False, hash=False, repr=False)


# --- input ----------------------------------------------------------------------------------


_INPUT_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "state_cbor": (bytes, type(None)),
    "event_schema": (str,),
    "event_value_cbor": (bytes,),
    "key_cbor": (bytes, type(None)),
    "cell_mode": (bool,),
}


def _check_input_types(*args: object) -> None:
    state_cbor, event_schema, event_value_cbor, key_cbor, cell_mode = args
    if (
        (state_cbor is None or type(state_cbor) is bytes)
        and type(event_schema) is str
        and type(event_value_cbor) is bytes
        and (key_cbor is None or type(key_cbor) is bytes)
        and type(cell_mode) is bool
    ):
        return
    for (name, kinds), value in zip(_INPUT_TYPES.items(), args, strict=True):
        if type(value) not in kinds:
            raise InvalidArgument(name, type(value).__name__, f"must be one of {kinds}")


def encode_input(
    state_cbor: bytes | None,
    event_schema: str,
    event_value_cbor: bytes,
    key_cbor: bytes | None,
    cell_mode: bool,
    extra_ctx: Mapping[str, Any] | None = None,
) -> bytes:
    """The canonical CBOR input envelope for one step."""
    extension = native.ext()
    if extension is not None and not extra_ctx:
        encoded: bytes | None = extension.encode_input(
            state_cbor, event_schema, event_value_cbor, key_cbor, cell_mode
        )
        if encoded is not None:
            return encoded
    _check_input_types(state_cbor, event_schema, event_value_cbor, key_cbor, cell_mode)
    ctx: dict[str, Any] = (
        {"cell_mode": cell_mode} if key_cbor is None else {"key": key_cbor, "cell_mode": cell_mode}
    )
    event = {"value": event_value_cbor, "schema": event_schema}
    if extra_ctx:
        clash = _CTX_RESERVED.intersection(extra_ctx)
        if clash:
            raise InvalidArgument("extra_ctx", sorted(clash), "may not set reserved fields")
        envelope = {
            "version": ABI_VERSION,
            "state": state_cbor,
            "event": event,
            "ctx": {**extra_ctx, **ctx},
        }
        return cbor.dumps(envelope)
    # Canonical order by hand: ctx < event < state < version; key < cell_mode; value < schema.
    return cbor2.dumps({"ctx": ctx, "event": event, "state": state_cbor, "version": ABI_VERSION})


# --- output decoding ------------------------------------------------------------------------


def _escape(token: object) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def _join(base: str, inner: str) -> str:
    return base if inner in ("", "/") else base + inner


def _key_order(key: str) -> tuple[int, bytes]:
    raw = key.encode()
    return len(raw), raw


def _loads_envelope(data: bytes, d: _Decoder) -> Any:
    """Decode the output map; the bytes must be exactly cbor2's encoding of what they decode to.

    With the shape walk, which admits only maps of known text keys in canonical order, lists,
    text, bytes and null, that is the canonical-CBOR check of ``air.cbor.loads`` for this shape
    (``tests/kernel/wasm/test_host_abi.py`` holds the two equivalent), at half its cost.
    """
    try:
        top = cbor2.loads(data)
        same = cbor2.dumps(top) == data
    except (cbor2.CBORError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise d.reject("output_not_cbor", "/", str(exc)) from exc
    if not same:
        raise d.reject("output_not_cbor", "/", "not in canonical form")
    return top


class _Decoder:
    """Walks one decoded output map; ``module`` only labels the errors."""

    def __init__(self, module: str) -> None:
        self.module = module

    def reject(self, code: str, pointer: str, detail: str) -> StepRejected:
        return StepRejected(self.module, code, pointer, detail)

    def keys(
        self, obj: object, allowed: frozenset[str], required: tuple[str, ...], pointer: str
    ) -> dict[Any, Any]:
        if type(obj) is not dict:
            raise self.reject("output_shape", pointer or "/", "expected a map")
        if not allowed.issuperset(obj):
            key = next(k for k in obj if k not in allowed)
            raise self.reject(
                "output_unknown_key", f"{pointer}/{_escape(key)}", f"unknown key {key!r}"
            )
        if len(obj) > 1 and list(obj) != sorted(obj, key=_key_order):
            raise self.reject("output_not_cbor", pointer or "/", "map keys not in canonical order")
        for key in required:
            if key not in obj:
                raise self.reject(
                    "output_shape", f"{pointer}/{key}", f"missing required key {key!r}"
                )
        return obj

    def typed(self, obj: dict[Any, Any], key: str, kind: type, pointer: str) -> Any:
        value = obj[key]
        if type(value) is not kind:
            raise self.reject("output_shape", f"{pointer}/{key}", f"{key} must be {kind.__name__}")
        return value

    def payload(self, data: bytes, pointer: str) -> Any:
        try:
            return cbor.loads(data)
        except CborError as exc:
            raise self.reject("payload_not_cbor", _join(pointer, exc.pointer), exc.detail) from exc

    def optional_bytes(self, obj: dict[Any, Any], key: str, pointer: str) -> bytes | None:
        return self.typed(obj, key, bytes, pointer) if key in obj else None

    def event(self, obj: object, pointer: str) -> tuple[DomainEventOut, Any]:
        item = self.keys(obj, _EVENT_KEYS, ("schema", "value"), pointer)
        schema = self.typed(item, "schema", str, pointer)
        value_cbor = self.typed(item, "value", bytes, pointer)
        key_cbor = self.optional_bytes(item, "key", pointer)
        if key_cbor is not None:
            self.payload(key_cbor, f"{pointer}/key")
        return DomainEventOut(schema, value_cbor, key_cbor), self.payload(
            value_cbor, f"{pointer}/value"
        )

    def effect(self, obj: object, pointer: str) -> tuple[EffectOut, Any]:
        item = self.keys(obj, _EFFECT_KEYS, ("kind", "params"), pointer)
        kind = self.typed(item, "kind", str, pointer)
        params_cbor = self.typed(item, "params", bytes, pointer)
        cap_slot = self.typed(item, "cap_slot", str, pointer) if "cap_slot" in item else None
        return EffectOut(kind, params_cbor, cap_slot), self.payload(
            params_cbor, f"{pointer}/params"
        )

    def items(self, top: dict[Any, Any], key: str) -> list[Any]:
        return self.typed(top, key, list, "") if key in top else []


def _unzip(pairs: list[tuple[Any, Any]]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    if not pairs:
        return (), ()
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def _from_native(found: tuple[Any, ...]) -> StepOutput:
    """A ``StepOutput`` from what ``kernel.native._native.decode_output`` accepted."""
    state_cbor, state, events, effects, ann_cbor, ann = found
    if not events and not effects and ann_cbor is None:
        return StepOutput(state_cbor, values=OutputValues(state))
    values = OutputValues(state, tuple(e[3] for e in events), tuple(e[3] for e in effects), ann)
    return StepOutput(
        state_cbor,
        tuple(DomainEventOut(e[0], e[1], e[2]) for e in events),
        tuple(EffectOut(e[0], e[1], e[2]) for e in effects),
        ann_cbor,
        values,
    )


def decode_output(output_cbor: bytes, *, module: str = "") -> StepOutput:
    """Strictly decode a reducer's output bytes; raise ``StepRejected`` on anything off-contract."""
    extension = native.ext()
    if extension is not None and type(output_cbor) is bytes:
        found = extension.decode_output(output_cbor)
        if found is not None:
            return found if type(found) is StepOutput else _from_native(found)
    d = _Decoder(module)
    top = _loads_envelope(output_cbor, d)
    if type(top) is dict and "error" in top:
        raise _refusal(d, d.keys(top, _OUTPUT_KEYS, (), ""))
    top = d.keys(top, _OUTPUT_KEYS, ("state",), "")
    state_cbor = top["state"]
    if state_cbor is not None and type(state_cbor) is not bytes:
        raise d.reject("output_shape", "/state", "state must be bytes or null")
    state = None if state_cbor is None else d.payload(state_cbor, "/state")
    if len(top) == 1:  # the common case: state only
        return StepOutput(state_cbor, values=OutputValues(state))
    raw_events, raw_effects = d.items(top, "domain_events"), d.items(top, "effects")
    events, event_values = _unzip(
        [d.event(e, f"/domain_events/{i}") for i, e in enumerate(raw_events)]
    )
    effects, params = _unzip([d.effect(e, f"/effects/{i}") for i, e in enumerate(raw_effects)])
    ann_cbor = d.optional_bytes(top, "ann", "")
    ann = None if ann_cbor is None else d.payload(ann_cbor, "/ann")
    values = OutputValues(state, event_values, params, ann)
    return StepOutput(state_cbor, events, effects, ann_cbor, values)


def _refusal(d: _Decoder, top: dict[Any, Any]) -> StepRejected:
    """The error a refusal output ``top`` (a checked map holding ``error``) raises: the
    ``StepRefused`` itself, or why it is a bad output (the module docstring's rules)."""
    other = next((key for key in top if key != "error"), None)
    if other is not None:
        detail = f"a refusal (error) carries nothing else, but {other!r} is there too"
        return d.reject("refusal_not_alone", f"/{_escape(other)}", detail)
    reason = top["error"]
    if type(reason) is not str or not reason:
        return d.reject("output_shape", "/error", "error must be non-empty text")
    size = len(reason.encode())
    if size > REFUSAL_REASON_MAX:
        detail = f"the reason is {size} bytes, over REFUSAL_REASON_MAX ({REFUSAL_REASON_MAX})"
        return d.reject("refusal_too_long", "/error", detail)
    return StepRefused(d.module, reason)


# --- output validation ----------------------------------------------------------------------


def _checked(module: str, check: Check, schema: str, value: Any, pointer: str) -> None:
    try:
        check(schema, value)
    except ValueMismatch as exc:
        detail = f"{exc.detail} [{exc.code}] (schema {schema})"
        raise StepRejected(module, "schema_mismatch", _join(pointer, exc.pointer), detail) from exc


@dataclass(frozen=True, slots=True)
class _EffectRules:
    emitted: Container[str]
    reducer_kinds: Container[str]
    params: Mapping[str, str]
    cap_slots: Container[str] | None


def _validate_effect(
    effect: EffectOut, params: Any, pointer: str, module: str, check: Check, rules: _EffectRules
) -> None:
    kind, cap_slot = effect.kind, effect.cap_slot
    problem: tuple[str, str, str] | None = None
    if kind not in rules.reducer_kinds:
        problem = ("effect_not_reducer_scoped", "/kind", f"{kind!r} is not a reducer effect")
    elif kind not in rules.emitted:
        problem = ("effect_not_declared", "/kind", f"{kind!r} not in effects_emitted")
    elif cap_slot is not None and rules.cap_slots is not None and cap_slot not in rules.cap_slots:
        problem = ("cap_slot_unknown", "/cap_slot", f"no cap slot {cap_slot!r}")
    elif kind not in rules.params:
        problem = ("effect_params_unknown", "/params", f"no params schema for {kind!r}")
    if problem is not None:
        code, where, detail = problem
        raise StepRejected(module, code, pointer + where, detail)
    _checked(module, check, rules.params[kind], params, f"{pointer}/params")


def _validate_effects(
    out: StepOutput, values: OutputValues, module: str, check: Check, rules: _EffectRules
) -> None:
    if len(out.effects) > 1:
        raise StepRejected(module, "too_many_effects", "/effects/1", "at most one effect per step")
    for i, effect in enumerate(out.effects):
        _validate_effect(effect, values.params[i], f"/effects/{i}", module, check, rules)


def _decode_values(out: StepOutput, module: str) -> OutputValues:
    """Payload values of a hand-built ``StepOutput`` (one that did not come from decoding)."""
    d = _Decoder(module)
    return OutputValues(
        None if out.state_cbor is None else d.payload(out.state_cbor, "/state"),
        tuple(
            d.payload(e.value_cbor, f"/domain_events/{i}/value")
            for i, e in enumerate(out.domain_events)
        ),
        tuple(d.payload(e.params_cbor, f"/effects/{i}/params") for i, e in enumerate(out.effects)),
        None if out.ann_cbor is None else d.payload(out.ann_cbor, "/ann"),
    )


def validate_output(
    out: StepOutput,
    *,
    check: Check,
    state_schema: str,
    effects_emitted: Container[str],
    reducer_effect_kinds: Container[str] = REDUCER_EFFECTS,
    effect_params: Mapping[str, str] = REDUCER_EFFECTS,
    event_schemas: Container[str] | None = None,
    ann_schema: str | None = None,
    cap_slots: Container[str] | None = None,
    module: str = "",
) -> None:
    """Check ``out`` against the reducer's declared schemas and effect rules.

    ``check(schema_name, value)`` raises ``ValueMismatch`` (also for an unknown schema name).
    ``reducer_effect_kinds``: the effect kinds reducers may emit at all; ``effect_params``: each
    such kind's params schema (an effect whose kind has none is rejected, never let through
    unchecked). ``event_schemas``: the domain-event schemas the reducer may emit (``None``: any
    schema ``check`` knows). ``cap_slots``: the module's declared cap slots, if checked here.
    """
    values = out.values if out.values is not None else _decode_values(out, module)
    if out.state_cbor is not None:
        _checked(module, check, state_schema, values.state, "/state")
    if not out.domain_events and not out.effects and out.ann_cbor is None:
        return  # the common output, state only: nothing below applies
    for i, event in enumerate(out.domain_events):
        if event_schemas is not None and event.schema not in event_schemas:
            detail = f"{event.schema!r} is not an event this reducer may emit"
            raise StepRejected(module, "event_schema_unknown", f"/domain_events/{i}/schema", detail)
        _checked(module, check, event.schema, values.events[i], f"/domain_events/{i}/value")
    rules = _EffectRules(effects_emitted, reducer_effect_kinds, effect_params, cap_slots)
    _validate_effects(out, values, module, check, rules)
    if out.ann_cbor is not None:
        if ann_schema is None:
            raise StepRejected(
                module, "ann_not_declared", "/ann", "module declares no annotations schema"
            )
        _checked(module, check, ann_schema, values.ann, "/ann")


native.bind_types(
    (StepOutput, ("state_cbor", "domain_events", "effects", "ann_cbor", "values")),
    (OutputValues, ("state", "events", "params", "ann")),
    (DomainEventOut, ("schema", "value_cbor", "key_cbor")),
    (EffectOut, ("kind", "params_cbor", "cap_slot")),
)
