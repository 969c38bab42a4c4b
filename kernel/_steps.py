"""One cell's step: the envelope in, the output checked, the record body out.

``CellSteps`` is owned by ``kernel._core.Kernel``. ``run`` runs a reducer on an entity's
delivery (through the ``Runner``, the WASM host behind a narrow interface) and returns the
``step`` record's body with the decoded output; ``validate`` holds the output to the reducer's
declared schemas and effect rules (``abi.validate_output`` decides every error; the state-only
output, the common one, takes one compiled check first); ``failure_body`` is the body of
``step.failed`` (a refusal, ``StepRefused``, has its reason as the detail). ``subject`` caches
each entity's record subjects (bounded).

Nothing here changes kernel state other than its caches: the tick appends and applies.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from air import LoadedAir, SchemaCheckers, cbor
from air.errors import LimitExceeded, ValueMismatch
from kernel import abi
from kernel._scheduler import Delivery, Entity
from kernel.cells import CellEntry
from kernel.errors import StepRefused
from kernel.subjects import cell_subject, make_subject

__all__ = ["CellSteps", "Runner"]

_SUBJECTS_CACHED_MAX: Final = 65_536  # per record kind (leaf)


class Runner(Protocol):
    """Runs one reducer step: the module (its wasm hash, ``blake3:<hex>``), canonical envelope
    in, raw output bytes out (or a WorldError). By hash, not by reducer name: a cell of an
    older era (``kernel._eras``) runs its era's module."""

    def run(self, module: str, input_cbor: bytes) -> bytes: ...


class CellSteps:
    def __init__(
        self, air: LoadedAir, runner: Runner, events_per_step_max: int, checkers: SchemaCheckers
    ) -> None:
        self.air = air
        self.runner = runner
        self.events_per_step_max = events_per_step_max
        self.checkers = checkers
        self.modules = air.modules  # computed once: LoadedAir.modules builds a dict per call
        self.wasm = air.wasm_hashes
        self.reducer_effects = {
            k: e.params_schema for k, e in air.effects.items() if "reducer" in e.origins
        }
        self.subjects: dict[str, dict[Entity, str]] = {}
        self._output_rules: dict[str, tuple[Any, ...]] = {}

    def subject(self, entity: Entity, leaf: str) -> str:
        """The subject of ``entity``'s records of kind ``leaf``, cached per leaf and entity
        (no tuple built per lookup; the entity's hash is computed once)."""
        cached = self.subjects.get(leaf)
        if cached is None:
            cached = self.subjects[leaf] = {}
        subject = cached.get(entity)
        if subject is not None:
            return subject
        if entity.key_cbor is None:
            subject = make_subject("world", "reducer", entity.reducer, leaf)
        else:
            subject = cell_subject(entity.reducer, entity.store_key_hash, leaf)
        if len(cached) >= _SUBJECTS_CACHED_MAX:
            cached.clear()  # bounded; cheap to rebuild, and never changes a subject
        cached[entity] = subject
        return subject

    def run(
        self,
        entity: Entity,
        delivery: Delivery,
        current: tuple[CellEntry, bytes] | None,
        name: str | None = None,
    ) -> tuple[str, dict[str, Any], abi.StepOutput]:
        """Step ``entity`` with this era's module ``name`` (default: the entity's reducer; an
        older era may have named it otherwise)."""
        name = name or entity.reducer
        module = self.modules[name]
        cell_mode = module.key_schema is not None
        state_cbor = current[1] if current else None
        envelope = abi.encode_input(
            state_cbor, delivery.schema, delivery.value_cbor, entity.key_cbor, cell_mode
        )
        raw = self.runner.run(self.wasm[name], envelope)
        out = abi.decode_output(raw, module=entity.reducer)
        self.validate(entity, out, name)
        body: dict[str, Any] = {
            "reducer": entity.reducer,
            "key": entity.key_cbor,
            "src": delivery.src_seq,
            "idx": delivery.index,
            "out_hash": cbor.digest(raw),
            "state_hash": None if out.state_cbor is None else cbor.digest(out.state_cbor),
        }
        # Empty lists are left out, so the common body is flat (the journal's fast encode path).
        if out.domain_events:
            body["events"] = [[e.schema, e.value_cbor] for e in out.domain_events]
        if out.effects:
            body["effects"] = [[e.kind, e.params_cbor, e.cap_slot] for e in out.effects]
        return "step", body, out

    def validate(self, entity: Entity, out: abi.StepOutput, name: str | None = None) -> None:
        if len(out.domain_events) > self.events_per_step_max:
            raise LimitExceeded("events_per_step_max", self.events_per_step_max)
        name = name or entity.reducer
        rules = self._output_rules.get(name)
        if rules is None:
            reducer_abi = self.modules[name].abi.reducer
            rules = self._output_rules[name] = (
                reducer_abi.state,
                frozenset(reducer_abi.effects_emitted),
                reducer_abi.annotations,
                frozenset(reducer_abi.cap_slots),
            )
        state_schema, effects_emitted, ann_schema, cap_slots = rules
        values = out.values
        if not out.domain_events and not out.effects and out.ann_cbor is None and values:
            # State only, the common output: one compiled check; anything it refuses is
            # explained by validate_output below, the one place errors are made.
            try:
                if out.state_cbor is not None:
                    self.checkers.check(state_schema, values.state)
                return
            except ValueMismatch:
                pass
        abi.validate_output(
            out,
            check=self.check_schema,
            state_schema=state_schema,
            effects_emitted=effects_emitted,
            reducer_effect_kinds=self.reducer_effects,
            effect_params=self.reducer_effects,
            ann_schema=ann_schema,
            cap_slots=cap_slots,
            module=entity.reducer,
        )

    def check_schema(self, name: str, obj: Any) -> None:
        """``ValueMismatch`` unless ``obj`` is a canonical value of schema ``name`` (an unknown
        name is ``schema.unknown``): the check behind reducer outputs and plan values."""
        if name not in self.air.schemas:
            raise ValueMismatch("/", "schema.unknown", f"unknown schema {name}")
        self.checkers.check(name, obj)

    def failure_body(self, entity: Entity, delivery: Delivery, exc: Exception) -> dict[str, Any]:
        code = getattr(exc, "code", None) or getattr(exc, "limit", None) or type(exc).__name__
        # A refusal's detail is its reason, whole (bounded by abi.REFUSAL_REASON_MAX).
        detail = exc.reason if isinstance(exc, StepRefused) else str(exc)[:500]
        return {
            "reducer": entity.reducer,
            "key": entity.key_cbor,
            "src": delivery.src_seq,
            "idx": delivery.index,
            "reason": {"code": str(code), "error": type(exc).__name__, "detail": detail},
        }
