"""The effect manager: intents, capability checks, policy, budgets, approvals and receipts.

Everything here is deterministic: it reads no clock and does no I/O. An *intent* is an effect a
plan step or a reducer step asked for. Its identity is
``intent_hash = blake3(cbor([kind, params_cbor, cap, idempotency_key]))``, where the
idempotency key comes from the origin (``run:<run_id>:<step id>`` for a plan step,
``cell:<reducer>:<key hash hex>:<src seq>:<idx>`` for a reducer step: the delivery it
handled), so two distinct intents never share a hash and the same intent re-derived on replay
always has the same one. A plan step may choose a key of its own (``emit_effect.idempotency_key``,
text or bytes): it is a fifth element of that list, only when given, so every intent without
one keeps the hash it always had (``intent_hash``), and it is journaled in ``effect.queued``
for the adapter to send.

Enqueue, in order (the first failure wins and is the journaled reason):

1. **Capability** (``cap.*`` codes): the grant exists in ``manifest.defaults.cap_grants``; its
   cap's ``cap_type`` is the effect's; it has not expired (``expiry_ns`` against the logical
   clock ``now_ns``, which only journaled timer receipts move); the params stay inside it;
   and budget is left (``bytes``, below).
   For ``http.out`` the URL is first read by ``kernel._urls`` (the one normaliser, which the
   HTTP adapter sends through too): one it cannot read unambiguously (userinfo, another
   scheme, a backslash, a non-canonical IP, an encoded ``/`` in the path, ...) is
   ``cap.url_invalid``. Then, on the normalised URL: its host is in ``hosts``
   (``cap.host_not_allowed``; an entry ``host`` admits any port, ``host:port`` that effective
   port only); a ``Host`` header, if the params carry one, names the URL's own authority
   (``cap.host_header``); no header is one the client alone writes, framing or
   connection-specific (``Content-Length``, ``Transfer-Encoding``, ``Connection``, ...:
   ``air.sys.ondemand.HTTP_HEADERS_REFUSED``; ``cap.header_not_allowed``); the method is in ``verbs`` (AgentOS spells it ``methods``;
   ``cap.method_not_allowed``); the path lies under one of ``path_prefixes``, whole segments
   only, so ``/api`` admits ``/api/x`` but not ``/apix`` (``cap.path_not_allowed``). An empty
   set allows nothing (``verbs: []`` no method, ``path_prefixes: []`` no path, ``hosts`` absent
   or empty no host); ``verbs``/``methods`` or ``path_prefixes`` absent or null restrict
   nothing. The params are journaled as the plan wrote them, not rewritten: the normaliser
   is a pure function, so the adapter derives the same URL again when it sends. (A budget's
   ``cents`` and ``tokens`` are never enforced; validation refuses them.)
2. **Policy**: the rules of ``defaults.policy``, first match wins; no match (or no policy)
   denies. The decision is journaled with its rule index (-1 for the default). A rule's
   ``host`` glob and ``path_prefix`` read the same normalised URL (the glob's rules are in
   ``kernel._urls``: ``*.example.com`` never matches ``evil-example.com``; a prefix matches
   whole segments); a rule that names either matches only an intent with a URL. ``method``
   compares without case.
3. **Secrets** (after capability and policy, as AgentOS orders them; only for an intent the
   policy did not deny): each ``sys/SecretRef@1`` in the params (found by the effect's params
   schema, ``air.secretrefs``) names a declared ``defsecret`` (``secret.unknown``), one whose
   ``allowed_caps``, if given, holds the intent's grant (``secret.cap_not_allowed``) and whose
   ``allowed_plans``, if given, holds the plan that asks (``secret.plan_not_allowed``; a
   reducer is never in it). A refusal is a ``CapDenied`` like a capability's: the origin fails
   with that code and detail journaled (a plan's ``plan.ended`` error, a reducer's
   ``step.failed``), no intent is queued, nothing is sent. The kernel sees the reference
   only: the value is read by the adapter when it sends (``world.effects._secrets``), so the
   intent hash, the journal and the receipts hold ``{alias, version}``, never the value.
4. ``allow`` queues the intent for an adapter; ``require_approval`` parks it until
   ``approve``; ``deny`` fails the origin.

``http.request.v2`` (``sys/HttpRequestParams@2``, an on-demand built-in: ``air.sys.ondemand``)
is checked as ``http.request`` is: the same ``http.out`` capability and policy fields (a
``Host`` header given as a secret is refused ``cap.host_header``: the check cannot read it),
the same reservation and settlement. Its params may carry the body inline: a literal ``body``
larger than ``HTTP_INLINE_BODY_BYTES_MAX`` is refused ``params.body_too_large`` and one given
with ``body_ref`` too ``params.body_twice`` (a large body goes by ``body_ref``).

Receipts (``apply_receipt``) settle budget, move the clock (``timer.set``), and return where
the result goes. The manager's whole state is a CBOR-able object for snapshots.

**Byte budgets.** A grant's ``bytes`` budget is charged at admission and settled by the
receipt, so a refusal happens before anything is sent. A ``blob.put`` reserves its data's
length; an ``http.request`` reserves what it may move at most, request body plus response
body: ``HTTP_RESERVE_BYTES_MAX`` (the adapter's own response limit), or what is left of the
budget if less. The kernel cannot know the request body's length (``body_ref`` names a blob it
does not read) and the params carry no response limit (``sys/HttpRequestParams@1`` has none),
so the reservation is the limit: the pump hands it to the adapter (``bytes_max``), which sends
no request body larger than it and reads no response body past what remains of it (a larger
one is an ``error`` receipt). With nothing left (``left <= 0``), or a put larger than what is
left, the intent is refused ``cap.budget_exhausted`` and no adapter sees it. Settling replaces
the reservation: a stored put by its receipt's ``size``; an HTTP exchange, whatever its
status, by the body bytes it moved (``HTTP_BODY_BYTES_HEADER`` in the receipt's headers,
capped at the reservation: bytes that crossed the wire are spent even when the answer was
refused, and an answer over the limit counts the whole limit, read or refused unread by its
``Content-Length``, so an oversized answer cannot be fetched again and again for free: under
a budget smaller than one answer, the first spends what was left and the next is refused
``cap.budget_exhausted``). The count is in the journaled receipt, so replay settles alike. A failed put, a
receipt without a count and an approver's denial refund the whole reservation. The one
cancel path is a run's (``cancel_run``, for ``run.cancelled``): its live intents settle
``cancelled`` and their reservations are refunded; an adapter's later receipt for one is
refused (``not_queued``), never journaled. A grant without a
budget reserves nothing and an HTTP exchange under it charges nothing (a stored put is still
counted in ``spent``, as before).

**Bounded state.** ``intents`` holds the live intents only (queued and parked); a settled one
(done or denied) leaves it, and the journal keeps it. A short ``Settled`` line (hash, kind,
grant, origin, statuses; no params, no payload) of the last ``SETTLED_RECENT_MAX`` settled
intents is kept, in settling order, with totals by status: within it a duplicate receipt is
recognised (``apply_receipt`` returns None, the pump ignores it, replay calls it
``not_queued``) and an intent derived again is not added again; beyond it the hash is unknown
(the pump refuses the receipt ``unknown_intent``, replay says the same: either way it is not
journaled or applied twice). A receipt's payload (up to 16 MiB) is not kept, except a plan's:
its run may reach ``await_receipt`` after the receipt came, so it is ``held`` until the run
ends (bounded by the live runs and their steps). ``restore`` also reads the older form that
kept every intent with its receipt (a checkpoint written before this one opens): its settled
intents become ``Settled`` lines in hash order and its plans' receipts are held, and the kernel
then lets go of those whose run is gone (``keep_runs``).

Intents are made here too (``intent_for``: the check, the decision and the hash), with the
two records that journal one (``records_of``: ``effect.queued`` and ``policy.decision``), and
for a reducer step's micro-effects, the grant each uses (``grant_for``: its cap slot's binding).

Not here: what a grant's hosts, verbs and paths and a policy rule's ``when`` admit
(``kernel._grants``), adapters, signatures (``world/`` verifies a receipt before it is
journaled), or the records' placement in the journal (``kernel._core``, ``kernel._runs``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import cbor2

from air import LoadedAir, cbor
from air.errors import WorldError
from air.secretrefs import SECRET_REF, secret_refs
from air.sys.ondemand import HTTP_INLINE_BODY_BYTES_MAX, HTTP_KINDS, HTTP_SECRET_KIND
from air.types import Ref, parse_type
from air.values import normalise
from kernel._grants import CapDenied, check_http, check_llm, check_workspace, rule_matches
from kernel._scheduler import Delivery, Entity
from kernel.abi import StepOutput
from kernel.subjects import make_subject

__all__ = [
    "DEFAULT_RULE",
    "HTTP_BODY_BYTES_HEADER",
    "HTTP_RESERVE_BYTES_MAX",
    "SETTLED_RECENT_MAX",
    "CapDenied",
    "EffectManager",
    "Intent",
    "Settled",
    "intent_hash",
]

DEFAULT_RULE: Final = -1
"""The rule index journaled when no policy rule matched (the default: deny)."""

SETTLED_RECENT_MAX: Final = 1024
"""How many settled intents the manager remembers (hash, kind, grant, origin, statuses) after
they leave the live set: within them a duplicate receipt is known as one; an older one is
unknown (the journal keeps every intent)."""

HTTP_RESERVE_BYTES_MAX: Final = 16 * 1024 * 1024
"""The most an ``http.request`` under a ``bytes`` budget reserves: request plus response
body. The same as the HTTP adapter's ``HTTP_RESPONSE_BYTES_MAX``, so a budget with room
changes nothing of what the adapter reads; with less room left, it reserves what is left and
the adapter's limit shrinks to that."""

HTTP_BODY_BYTES_HEADER: Final = ":body-bytes"
"""The entry of an ``http.request`` receipt's ``headers`` that counts the body bytes the
exchange moved (request body sent plus response body read, in decimal): what its budget is
settled with. A pseudo-header, as HTTP/2 spells them: a ``:`` cannot begin a real field name
(RFC 9110 §5.1), so no server can send it. Not a field of its own because
``sys/HttpRequestReceipt@1`` is a closed record and a new builtin schema changes every
world's manifest hash."""


def intent_hash(
    kind: str,
    params_cbor: bytes,
    cap: str,
    idempotency_key: str,
    plan_key: str | bytes | None = None,
) -> bytes:
    """The intent's identity: blake3 of ``cbor([kind, params_cbor, cap, idempotency_key])``,
    ``idempotency_key`` the origin's (module docstring). A plan step's own
    ``emit_effect.idempotency_key`` (``plan_key``), when it gives one, is folded in as a fifth
    element, as AgentOS folds its key into the intent hash; it is added to the origin's key
    rather than put in its place, so two runs that choose the same key still make two intents
    (this kernel keeps intents by hash), and every intent without one keeps its hash."""
    parts: list[Any] = [kind, params_cbor, cap, idempotency_key]
    if plan_key is not None:
        parts.append(plan_key)
    return cbor.digest(cbor.dumps(parts))


@dataclass
class Intent:
    """One effect asked for. ``status``: ``queued`` (for an adapter), ``parked`` (awaiting
    approval), ``done`` (its receipt is journaled), ``denied``, ``cancelled`` (its run was
    cancelled: ``cancel_run``). Only a queued or parked intent
    is kept by the manager (``EffectManager.intents``); a settled one is remembered as a
    ``Settled`` line. ``receipt`` is set only on the intent ``apply_receipt`` returns."""

    intent_hash: bytes
    kind: str
    params_cbor: bytes
    cap: str
    origin: dict[str, Any]
    status: str
    reserved: int = 0
    receipt: dict[str, Any] | None = None
    idempotency_key: str | bytes | None = None
    """The plan step's ``emit_effect.idempotency_key`` (None: it gave none): in the hash
    (``intent_hash``), journaled in ``effect.queued``, for the adapter to send."""

    def to_obj(self) -> list[Any]:
        """A CBOR-able list; the key is a ninth element only when there is one, so an
        intent without one snapshots as it always did."""
        obj = [
            self.intent_hash,
            self.kind,
            self.params_cbor,
            self.cap,
            self.origin,
            self.status,
            self.reserved,
            self.receipt,
        ]
        if self.idempotency_key is not None:
            obj.append(self.idempotency_key)
        return obj

    @classmethod
    def from_obj(cls, obj: list[Any]) -> Intent:
        return cls(*obj)


@dataclass(frozen=True)
class Settled:
    """What is remembered of a settled intent (``done`` or ``denied``): enough to recognise a
    duplicate receipt and to list it, not its params or its receipt's payload.
    ``receipt_status`` is None for a denied intent."""

    intent_hash: bytes
    kind: str
    cap: str
    origin: dict[str, Any]
    status: str
    receipt_status: str | None

    def to_obj(self) -> list[Any]:
        return [
            self.intent_hash,
            self.kind,
            self.cap,
            self.origin,
            self.status,
            self.receipt_status,
        ]

    @classmethod
    def from_obj(cls, obj: list[Any]) -> Settled:
        return cls(*obj)

    @classmethod
    def of(cls, intent: Intent) -> Settled:
        status = None if intent.receipt is None else str(intent.receipt["status"])
        return cls(
            intent.intent_hash, intent.kind, intent.cap, intent.origin, intent.status, status
        )


Record = tuple[str, str, dict[str, Any]]


@dataclass
class EffectManager:
    air: LoadedAir
    intents: dict[bytes, Intent] = field(default_factory=dict)
    """Live intents only: queued or parked."""
    spent: dict[str, int] = field(default_factory=dict)  # grant name -> bytes used
    now_ns: int = 0
    settled: dict[bytes, Settled] = field(default_factory=dict)
    """The last ``SETTLED_RECENT_MAX`` settled intents, oldest first (settling order)."""
    settled_total: dict[str, int] = field(default_factory=dict)
    """How many intents ever settled, by status (``done``, ``denied``)."""
    held: dict[bytes, list[Any]] = field(default_factory=dict)
    """Receipts of plan intents kept for their run: ``[run_id, status, payload]``."""
    _modules: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.use(self.air)

    def use(self, air: LoadedAir) -> None:
        """Check capabilities and policy by ``air`` from now on (the current era's, for every
        intent, whatever era its origin was pinned to: ``kernel._eras``)."""
        self.air = air
        self._modules = air.modules  # computed once: LoadedAir.modules builds a dict

    # --- intents ----------------------------------------------------------------------------

    def intent_for(
        self,
        kind: str,
        params: Any,
        cap: str,
        origin: dict[str, Any],
        idem: str,
        plan_key: str | bytes | None = None,
    ) -> Intent:
        """Capability check (``CapDenied``), then policy: an intent ``queued``, ``parked`` or
        ``denied`` (``reserved`` holds the bytes it reserves). Not yet added (``add``).
        ``plan_key``: a plan step's ``idempotency_key`` (``intent_hash``)."""
        reserved = self.check_cap(kind, params, cap)
        decision, rule = self.decide(kind, params, cap, origin)
        if decision != "deny":
            self.check_secrets(kind, params, cap, origin)
        params_cbor = cbor.dumps(params)
        status = {"allow": "queued", "require_approval": "parked"}.get(decision, "denied")
        return Intent(
            intent_hash(kind, params_cbor, cap, idem, plan_key),
            kind,
            params_cbor,
            cap,
            {**origin, "rule_index": rule, "decision": decision},
            status,
            reserved if status != "denied" else 0,
            idempotency_key=plan_key,
        )

    def records_of(self, intent: Intent) -> list[Record]:
        """The records that journal ``intent``: ``effect.queued`` and ``policy.decision``."""
        hexed = intent.intent_hash.hex()
        origin = {k: v for k, v in intent.origin.items() if k not in ("rule_index", "decision")}
        queued: dict[str, Any] = {
            "origin": origin,
            "intent_hash": intent.intent_hash,
            "kind": intent.kind,
            "params": intent.params_cbor,
            "cap": intent.cap,
        }
        if intent.idempotency_key is not None:  # only then: older journals keep their bytes
            queued["idempotency_key"] = intent.idempotency_key
        return [
            (
                "effect.queued",
                make_subject("world", "effect", hexed, "queued"),
                queued,
            ),
            (
                "policy.decision",
                make_subject("world", "effect", hexed, "decision"),
                {
                    "intent_hash": intent.intent_hash,
                    "rule_index": intent.origin["rule_index"],
                    "decision": intent.origin["decision"],
                },
            ),
        ]

    def reducer_intents(
        self, entity: Entity, delivery: Delivery, out: StepOutput
    ) -> tuple[list[Record], list[Intent]]:
        """A reducer step's micro-effects as intents and their records; ``CapDenied`` if one
        is refused (by its capability, or by policy: a reducer's effect cannot park)."""
        records: list[Record] = []
        intents = []
        key_hex = entity.store_key_hash.hex()
        for index, effect in enumerate(out.effects):
            cap = self.grant_for(entity.reducer, effect.kind, effect.cap_slot)
            params = cbor2.loads(effect.params_cbor)
            origin: dict[str, Any] = {
                "kind": "reducer",
                "name": entity.reducer,
                "key": entity.key_cbor,
            }
            idem = f"cell:{entity.reducer}:{key_hex}:{delivery.src_seq}:{delivery.index}:{index}"
            intent = self.intent_for(effect.kind, params, cap, origin, idem)
            if intent.status == "denied":
                raise CapDenied("policy.denied", f"policy denied {effect.kind}")
            records += self.records_of(intent)
            intents.append(intent)
        return records, intents

    def grant_for(self, reducer: str, kind: str, cap_slot: str | None) -> str:
        """The cap grant a reducer's effect uses: its slot's binding in ``module_bindings``;
        without a slot, the one slot of the effect's cap type (validation ensures one)."""
        abi_slots = dict(self._modules[reducer].abi.reducer.cap_slots)
        effect = self.air.effects.get(kind)
        if cap_slot is None:
            want = None if effect is None else effect.cap_type
            fits = [
                slot
                for slot, cap in sorted(abi_slots.items())
                if (c := self.air.caps.get(cap)) is not None and c.cap_type == want
            ]
            if len(fits) != 1:
                raise CapDenied("cap.slot_missing", f"{reducer} has no single slot for {kind}")
            cap_slot = fits[0]
        binding = self.air.manifest.module_bindings.get(reducer)
        if binding is not None and cap_slot in binding.slots:
            return str(binding.slots[cap_slot])
        cap_name = abi_slots.get(cap_slot)
        grants = [g.name for g in self.air.manifest.defaults.cap_grants if g.cap == cap_name]
        if len(grants) != 1:
            raise CapDenied("cap.grant_missing", f"no grant bound to slot {cap_slot} of {reducer}")
        return grants[0]

    # --- enqueue ----------------------------------------------------------------------------

    def check_cap(self, kind: str, params: Any, cap: str) -> int:
        """Raise ``CapDenied`` unless grant ``cap`` allows ``kind`` with ``params``; return
        the bytes this intent would reserve from the grant's budget (``add`` reserves them).
        Changes nothing."""
        grants = {g.name: g for g in self.air.manifest.defaults.cap_grants}
        grant = grants.get(cap)
        if grant is None:
            raise CapDenied("cap.grant_missing", f"no cap grant named {cap!r}")
        effect = self.air.effects.get(kind)
        if effect is None:
            raise CapDenied("cap.effect_unknown", f"unknown effect kind {kind}")
        defcap = self.air.caps.get(grant.cap)
        cap_type = None if defcap is None else defcap.cap_type
        if cap_type != effect.cap_type:
            raise CapDenied(
                "cap.type_mismatch",
                f"grant {cap} is a {cap_type} capability; {kind} needs {effect.cap_type}",
            )
        if grant.expiry_ns is not None and self.now_ns >= grant.expiry_ns:
            raise CapDenied(
                "cap.expired", f"grant {cap} expired at {grant.expiry_ns} (now {self.now_ns})"
            )
        if kind == HTTP_SECRET_KIND:
            _check_inline_body(params)
        if cap_type == "http.out":
            check_http(cap, self._grant_params(grant, defcap), _http_view(kind, params))
        elif cap_type == "llm.basic":
            check_llm(cap, self._grant_params(grant, defcap), params)
        elif cap_type == "workspace":
            check_workspace(cap, self._grant_params(grant, defcap), kind, params)
        return self._reserve(cap, grant, kind, params)

    def check_secrets(self, kind: str, params: Any, cap: str, origin: dict[str, Any]) -> None:
        """Raise ``CapDenied`` unless every secret the params reference is declared and may
        be used by grant ``cap`` and the origin (module docstring, 3)."""
        if SECRET_REF not in self.air.schemas:
            return  # no world without the schema can hold a reference
        effect = self.air.effects.get(kind)
        if effect is None:
            return
        secrets = self.air.secrets
        for alias, version in secret_refs(Ref(effect.params_schema), params, self.air.schemas):
            name = f"{alias}@{version}"
            secret = secrets.get((alias, version))
            if secret is None:
                raise CapDenied("secret.unknown", f"secret {name} is not declared (no defsecret)")
            if secret.allowed_caps and cap not in secret.allowed_caps:
                raise CapDenied(
                    "secret.cap_not_allowed", f"secret {name} may not be used under grant {cap}"
                )
            if secret.allowed_plans and not (
                origin.get("kind") == "plan" and origin.get("name") in secret.allowed_plans
            ):
                who = f"{origin.get('kind')} {origin.get('name')}"
                raise CapDenied(
                    "secret.plan_not_allowed",
                    f"secret {name} may not be used by {who} (allowed_plans: "
                    f"{', '.join(sorted(secret.allowed_plans))})",
                )

    def _grant_params(self, grant: Any, defcap: Any) -> Any:
        """A grant's params read through its cap's schema (sugar or tagged, as AgentOS writes
        them), so a set of hosts is a list of text whatever the lens."""
        try:
            node = parse_type(defcap.schema_)
            return normalise(node, grant.params or {}, self.air.schemas)
        except WorldError:
            return grant.params or {}

    def _reserve(self, cap: str, grant: Any, kind: str, params: Any) -> int:
        budget = getattr(grant, "budget", None)
        limit = None if budget is None else getattr(budget, "bytes", None)
        if limit is None:
            return 0
        left = int(limit) - self.spent.get(cap, 0)
        if left <= 0:
            raise CapDenied("cap.budget_exhausted", f"grant {cap} has 0 of {limit} bytes left")
        if kind in HTTP_KINDS:  # what it may move at most, bounded by what is left
            return min(HTTP_RESERVE_BYTES_MAX, left)
        cost = len(params["data"]) if kind == "blob.put" and isinstance(params, dict) else 0
        if cost > left:
            raise CapDenied("cap.budget_exhausted", f"grant {cap} has {left} of {limit} bytes left")
        return cost

    def decide(self, kind: str, params: Any, cap: str, origin: dict[str, Any]) -> tuple[str, int]:
        """Policy: ``(decision, rule index)``; the first matching rule wins, else deny."""
        name = self.air.manifest.defaults.policy
        policy = None if name is None else self.air.policies.get(name)
        if policy is None:
            return "deny", DEFAULT_RULE
        rules = policy.rules
        for index, rule in enumerate(rules):
            if rule_matches(rule.when, kind, params, cap, origin):
                return str(rule.decision), index
        return "deny", DEFAULT_RULE

    def add(self, intent: Intent) -> None:
        """Record an intent that passed its checks; its reservation counts from now on. A
        policy-denied intent is settled at once. An intent already live or recently settled
        is not added again (its hash is its identity: it is carried out once)."""
        if intent.intent_hash in self.intents or intent.intent_hash in self.settled:
            return
        if intent.status == "denied":
            self._settle(intent)
            return
        self.intents[intent.intent_hash] = intent
        if intent.reserved:
            self.spent[intent.cap] = self.spent.get(intent.cap, 0) + intent.reserved

    # --- approvals and receipts -------------------------------------------------------------

    def approve(self, intent_hash: bytes, approved: bool) -> Intent | None:
        """Decide a parked intent; None if there is no such parked intent."""
        intent = self.intents.get(intent_hash)
        if intent is None or intent.status != "parked":
            return None
        if approved:
            intent.status = "queued"
            return intent
        intent.status = "denied"
        self._refund(intent)
        self._settle(intent)
        return intent

    def apply_receipt(self, intent_hash: bytes, status: str, payload: Any) -> Intent | None:
        """Settle a queued intent with its receipt and return it (with ``receipt`` set); None
        if there is none (unknown, parked, or already settled)."""
        intent = self.intents.get(intent_hash)
        if intent is None or intent.status != "queued":
            return None
        intent.status = "done"
        intent.receipt = {"status": status, "payload": payload}
        if intent.kind == "timer.set" and isinstance(payload, dict):
            delivered = payload.get("delivered_at_ns")
            if type(delivered) is int:
                self.now_ns = max(self.now_ns, delivered)
        used = _bytes_used(intent.kind, status, payload, intent.reserved)
        self.spent[intent.cap] = self.spent.get(intent.cap, 0) - intent.reserved + used
        if intent.origin.get("kind") == "plan":
            self.held[intent_hash] = [intent.origin.get("run_id"), status, payload]
        self._settle(intent)
        return intent

    def _refund(self, intent: Intent) -> None:
        if intent.reserved:
            self.spent[intent.cap] = self.spent.get(intent.cap, 0) - intent.reserved

    def _settle(self, intent: Intent) -> None:
        """The intent leaves the live set; a short line of it is kept among the recent."""
        self.intents.pop(intent.intent_hash, None)
        self.settled[intent.intent_hash] = Settled.of(intent)
        self.settled_total[intent.status] = self.settled_total.get(intent.status, 0) + 1
        while len(self.settled) > SETTLED_RECENT_MAX:
            del self.settled[next(iter(self.settled))]

    def run_intents(self, run_id: int) -> list[Intent]:
        """The live (queued or parked) intents of plan run ``run_id``, in hash order."""
        return [
            i
            for _h, i in sorted(self.intents.items())
            if i.origin.get("kind") == "plan" and i.origin.get("run_id") == run_id
        ]

    def cancel_run(self, run_id: int) -> list[bytes]:
        """Settle run ``run_id``'s live intents ``cancelled`` (a parked one is never sent, a
        queued one's receipt is refused when it comes), refund their reservations and forget
        its held receipts; the hashes cancelled, in hash order."""
        cancelled = []
        for intent in self.run_intents(run_id):
            intent.status = "cancelled"
            self._refund(intent)
            self._settle(intent)
            cancelled.append(intent.intent_hash)
        self.release_run(run_id)
        return cancelled

    # --- receipts kept for plan runs --------------------------------------------------------

    def receipt_of(self, intent_hash: bytes) -> dict[str, Any] | None:
        """The receipt of a plan's settled intent while its run may still await it."""
        held = self.held.get(intent_hash)
        return None if held is None else {"status": held[1], "payload": held[2]}

    def release(self, intent_hash: bytes) -> None:
        """Forget a held receipt (its run is gone)."""
        self.held.pop(intent_hash, None)

    def release_run(self, run_id: int) -> None:
        """Forget the receipts held for run ``run_id`` (it ended)."""
        for intent_hash in [h for h, held in self.held.items() if held[0] == run_id]:
            del self.held[intent_hash]

    def keep_runs(self, run_ids: set[int]) -> None:
        """Forget the receipts held for runs not in ``run_ids`` (after a restore)."""
        for intent_hash in [h for h, held in self.held.items() if held[0] not in run_ids]:
            del self.held[intent_hash]

    # --- views ------------------------------------------------------------------------------

    def queued(self) -> list[Intent]:
        """Intents waiting for an adapter (or in flight), in hash order."""
        return [i for _h, i in sorted(self.intents.items()) if i.status == "queued"]

    def parked(self) -> list[Intent]:
        return [i for _h, i in sorted(self.intents.items()) if i.status == "parked"]

    def status_of(self, intent_hash: bytes) -> str | None:
        """``queued``, ``parked``, ``done`` or ``denied``; None for an intent never added or
        settled longer ago than the last ``SETTLED_RECENT_MAX``."""
        live = self.intents.get(intent_hash)
        if live is not None:
            return live.status
        settled = self.settled.get(intent_hash)
        return None if settled is None else settled.status

    def listing(self) -> list[Intent | Settled]:
        """The live intents and the recently settled ones, in hash order."""
        rows: dict[bytes, Intent | Settled] = {**self.settled, **self.intents}
        return [row for _h, row in sorted(rows.items())]

    def counts(self) -> dict[str, int]:
        """How many intents are queued and parked now, and how many ever settled."""
        counts = {"queued": 0, "parked": 0, "done": 0, "denied": 0}  # and "cancelled", once
        for intent in self.intents.values():
            counts[intent.status] += 1
        for status, total in self.settled_total.items():
            counts[status] = counts.get(status, 0) + total
        return counts

    def to_obj(self) -> dict[str, Any]:
        return {
            "intents": [i.to_obj() for _h, i in sorted(self.intents.items())],
            "spent": dict(sorted(self.spent.items())),
            "now_ns": self.now_ns,
            "settled": [s.to_obj() for s in self.settled.values()],
            "settled_total": dict(sorted(self.settled_total.items())),
            "held": [[h, *held] for h, held in sorted(self.held.items())],
        }

    def restore(self, obj: dict[str, Any] | None) -> None:
        """Read ``to_obj``'s form, or the older one that kept every intent with its receipt
        (a settled intent there becomes a ``Settled`` line, in hash order, and a plan's
        receipt is held: the kernel then drops those of runs no longer live)."""
        if not obj:
            return
        self.spent = dict(obj["spent"])
        self.now_ns = obj["now_ns"]
        intents = [Intent.from_obj(i) for i in obj["intents"]]
        self.intents = {i.intent_hash: i for i in intents if i.status in _LIVE}
        self.settled = {s[0]: Settled.from_obj(s) for s in obj.get("settled", [])}
        self.settled_total = dict(obj.get("settled_total", {}))
        self.held = {h[0]: list(h[1:]) for h in obj.get("held", [])}
        for old in (i for i in intents if i.status not in _LIVE):  # the older form only
            if old.receipt is not None and old.origin.get("kind") == "plan":
                receipt = old.receipt
                self.held[old.intent_hash] = [
                    old.origin.get("run_id"),
                    receipt["status"],
                    receipt["payload"],
                ]
            self._settle(old)


_LIVE: Final = frozenset(("queued", "parked"))

_SECRET_HEADER: Final = "\x00secret"
"""What a header given as a secret reads as to the capability check: no authority is it."""


def _http_view(kind: str, params: Any) -> Any:
    """``http.request.v2`` params as the capability check reads ``http.request``'s: each
    header value a text (a literal's text; a secret as ``_SECRET_HEADER``)."""
    if kind != HTTP_SECRET_KIND or not isinstance(params, dict):
        return params
    headers = params.get("headers")
    if not isinstance(headers, dict):
        return params
    plain = {}
    for name, value in headers.items():
        literal = isinstance(value, dict) and value.get("$tag") == "literal"
        plain[name] = value.get("$value") if literal else _SECRET_HEADER
    return {**params, "headers": plain}


def _check_inline_body(params: Any) -> None:
    """An inline body of at most ``HTTP_INLINE_BODY_BYTES_MAX`` bytes, never with a
    ``body_ref`` too."""
    if not isinstance(params, dict) or params.get("body") is None:
        return
    if params.get("body_ref") is not None:
        raise CapDenied("params.body_twice", "give the body inline (body) or by body_ref, not both")
    body = params["body"]
    data = body.get("$value") if isinstance(body, dict) and body.get("$tag") == "literal" else b""
    if isinstance(data, bytes) and len(data) > HTTP_INLINE_BODY_BYTES_MAX:
        raise CapDenied(
            "params.body_too_large",
            f"inline body of {len(data)} bytes exceeds HTTP_INLINE_BODY_BYTES_MAX="
            f"{HTTP_INLINE_BODY_BYTES_MAX}; put it in a blob (blob.put) and send it by body_ref",
        )


def _bytes_used(kind: str, status: str, payload: Any, reserved: int) -> int:
    """What a receipt settles a reservation to: a stored ``blob.put`` its ``size``; an
    ``http.request`` the body bytes it moved (``HTTP_BODY_BYTES_HEADER``), whatever its
    status, never more than it reserved (so 0 when the grant has no budget); anything else, a
    failed put, or a receipt without its count: nothing (the reservation is refunded)."""
    if not isinstance(payload, dict):
        return 0
    if kind == "blob.put":
        size = payload.get("size")
        return size if status == "ok" and type(size) is int and size >= 0 else 0
    if kind in HTTP_KINDS:
        headers = payload.get("headers")
        text = headers.get(HTTP_BODY_BYTES_HEADER) if isinstance(headers, dict) else None
        if isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 20:
            return min(int(text), reserved)
    return 0
