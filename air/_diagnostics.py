"""Collecting diagnostics: every finding is recorded with its file and JSON pointer, and
validation goes on, so an author sees all problems at once rather than the first.

Stable codes used across the loader and validator (tests and tools key on these; each has a
minimal AIR input that produces it in tests/air/test_diagnostic_codes.py). Diagnostics carry a file
and a JSON pointer, not a line: the ``air.json.*`` codes, which come before there is any JSON
to point into, put the 1-based line and column at the start of their message.

    air.json                     not an AIR document: not an object / array of objects (or, from
                                 ``world._airfiles``, no such file, an empty folder, unreadable)
    air.json.syntax              the text is not valid JSON (empty text included)
    air.json.encoding            the bytes are not UTF-8
    air.json.too_deep            arrays/objects nested deeper than ``jsontext.JSON_DEPTH_MAX``
    air.json.number_too_long     a number with more than ``jsontext.JSON_NUMBER_DIGITS_MAX`` digits
    air.json.duplicate_key       an object names one key twice
    air.json.surrogate           a string or key holds a lone UTF-16 surrogate (``"\\ud800"``)
    air.json.not_finite          NaN, Infinity, or a number too large for a float
    air.kind.unknown             ``$kind`` missing or not an AIR kind
    air.shape                    a field is missing, unknown or of the wrong JSON type
    air.name.invalid             a def name, or a reference to a def by name, breaks the one name
                                 grammar (``air.types.def_name_problem``: namespace/name@version,
                                 ASCII letters, digits, _ - . in the parts, a version without
                                 leading zeros, at most ``DEF_NAME_MAX`` characters); says which rule
    air.name.duplicate           two defs share a name, or two cap grants do; a built-in ``sys/``
                                 def defined again is fine when it is the same def (its canonical
                                 form, refs to built-in schemas expanded), else this, saying so
    air.manifest.missing         no manifest in the AIR
    air.manifest.multiple        more than one manifest
    air.hash.mismatch            a hash written in the AIR differs from the computed one
    air.hash.foreign             (a warning) a def's hash in the manifest is not ``blake3:`` (as
                                 AgentOS writes ``sha256:``): not checked
    air.type.invalid             a type expression is malformed (or nested too deep)
    air.schema.cycle             schemas reach themselves through refs (AIR v1 has no recursive
                                 types); once per cycle, at its least-named schema
    air.ref.unknown_schema       a name that should be a schema is not defined
    air.ref.unknown_module       ... a module
    air.ref.unknown_plan         ... a plan
    air.ref.unknown_cap          ... a defcap (a cap slot may instead name a cap type, as AgentOS
                                 writes ``cap_slots``: one no defcap or defeffect has)
    air.ref.unknown_policy       ... a policy
    air.ref.unknown_effect       an effect kind that no defeffect provides (in a module, a plan's
                                 ``allowed_effects``, a policy rule)
    air.ref.unknown_secret       a secret no ``defsecret`` declares (in the manifest's ``secrets``,
                                 or a SecretRef a plan writes as a constant)
    air.ref.unknown_cap_grant    a cap grant name not in ``defaults.cap_grants`` (a binding, an
                                 ``emit_effect.cap``, a plan's ``required_caps``, a
                                 ``defsecret``'s ``allowed_caps``)
    air.ref.unknown_slot         a module binding names a slot the module does not declare
    air.route.keyed_to_unkeyed   a route with ``key_field`` targets a reducer without ``key_schema``
    air.route.unkeyed_to_keyed   a route without ``key_field`` targets a keyed reducer
    air.route.key_field_missing  ``key_field`` is not a field of the event's record schema
    air.route.key_type_mismatch  the key field's type is not the reducer's ``key_schema``
    air.route.event_not_accepted  the reducer cannot take the route's event: it is neither the
                                 ABI event nor a case of it, and the ABI event reaches the
                                 reducer by no route or plan (``air._validate``, "Routes")
    air.trigger.input_mismatch   the trigger's event is not the plan's input schema
    air.trigger.correlate_missing  ``correlate_by`` is not a field of the event's record schema
    air.effect.origin            an effect kind used where its origin is not allowed
    air.cap.type_mismatch        a grant's capability type does not fit the effect, or the cap
                                 slot it is bound to
    air.cap.enforcer             a defcap's ``enforcer`` is not the built-in one of its cap type
                                 (``sys/CapEnforceHttpOut@1`` for http.out, ...), nor
                                 ``sys/CapAllowAll@1`` for a cap type without one
    air.cap.schema               a defcap of a built-in cap type (http.out, blob, timer) has a
                                 schema field the kernel does not enforce, or one of the wrong type
    air.cap.budget_unenforced    a grant's budget sets ``cents`` or ``tokens``, which the kernel
                                 never charges (only ``bytes`` is enforced)
    air.value.mismatch           a literal value does not match its schema
    air.expr.<code>              an expression failed to parse, or a constant one to evaluate
                                 (``expr.*`` codes from air.expr, e.g. air.expr.parse.shape)
    air.plan.step.old_shape      a step in the project's earlier shape (emit_effect without bind,
                                 await_receipt.for naming a step, raise_event with both reducer
                                 and value, assign with var/value, await_event without bind);
                                 says what to write
    air.plan.step.duplicate      two steps share an id
    air.plan.edge.unknown_step   an edge names a step that does not exist
    air.plan.cycle               the plan's edges form a cycle
    air.plan.ref.unknown_step    ``@step:x`` names no step of the plan
    air.plan.ref.unknown_var     ``@var:x`` is neither a local nor bound by a step before this one
    air.plan.ref.event_outside_where  ``@event`` used outside an ``await_event.where``
    air.plan.ref.unknown_field   a typed ref's path names a field its schema does not have
    air.plan.ref.type_mismatch   a typed ref where a value of another type is needed
    air.plan.op.type_mismatch    an op whose result (or an argument) is of another kind than the
                                 place needs (``utf8_encode`` gives bytes where text is needed)
    air.plan.await_receipt.for   ``await_receipt.for`` is not ``{"ref": "@var:x"}`` for an ``x``
                                 that an earlier ``emit_effect`` binds with ``effect_id_as``
    air.plan.raise_event.key     a keyed reducer needs ``key``; a non-keyed one must not get one
    air.plan.raise_event.unrouted  to a reducer: the raised event's schema is neither the
                                 reducer's ABI event nor routed to it; routed (``{event, value}``):
                                 no route, trigger or ``await_event`` takes the schema
    air.plan.emit_effect.idempotency_key  ``emit_effect.idempotency_key`` is not text or bytes
    air.plan.allowed_effects     an ``emit_effect`` kind outside the plan's ``allowed_effects``
    air.plan.required_caps       an ``emit_effect`` cap outside the plan's ``required_caps``
    air.plan.http_header         an HTTP ``emit_effect`` sets, by a constant name, a header only
                                 the client writes (Content-Length, Transfer-Encoding,
                                 Connection, ...: ``air.sys.ondemand.HTTP_HEADERS_REFUSED``)
    air.plan.end.result_missing  the plan declares an output and an ``end`` has no result
    air.plan.end.missing         the plan declares an output and a path ends without an ``end``
    air.plan.await_event.where_required  a correlated plan awaits an event without ``where``
    air.module.pure_unsupported  a ``module_kind: "pure"`` module of the author's: this build runs
                                 only its built-in ones, the capability enforcers
    air.module.wasm_missing      the module's wasm file is absent or unreadable
    air.module.wasm_unbound      (a warning) the module names neither ``wasm`` nor ``wasm_hash``,
                                 as AgentOS's do: ``world init --module NAME=FILE.wasm`` binds it
    air.module.wasm_invalid      the wasm bytes are not a valid module
    air.module.imports           the module imports something (reducers import nothing)
    air.module.exports           the module lacks memory, alloc or step
    air.module.effect_unbound    a reducer's effect kind does not resolve to a grant: not exactly
                                 one cap slot of its cap type, or that slot neither bound in
                                 ``module_bindings`` nor with exactly one grant of its cap
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from air.errors import Diagnostic, ManifestError

__all__ = ["Diagnostics", "escape_pointer"]


def escape_pointer(token: object) -> str:
    """One JSON pointer reference token (RFC 6901)."""
    return str(token).replace("~", "~0").replace("/", "~1")


@dataclass
class Diagnostics:
    """An append-only list of findings with helpers to raise when any is an error."""

    items: list[Diagnostic] = field(default_factory=list)

    def add(
        self,
        file: str,
        pointer: str,
        code: str,
        message: str,
        severity: Literal["error", "warning"] = "error",
    ) -> None:
        self.items.append(Diagnostic(file, pointer, code, message, severity))

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity == "warning"]

    def raise_if_errors(self) -> None:
        if self.errors:
            raise ManifestError(self.errors)
