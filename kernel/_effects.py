"""The effect manager: intents, capability checks, policy, budgets, approvals and receipts.

Everything here is deterministic: it reads no clock and does no I/O. An *intent* is an effect a
plan step or a reducer step asked for. Its identity is
``intent_hash = blake3(cbor([kind, params_cbor, cap, idempotency_key]))``, where the
idempotency key comes from the origin (``run:<run_id>:<step id>`` for a plan step,
``cell:<reducer>:<key hash hex>:<src seq>:<idx>`` for a reducer step: the delivery it
handled), so two distinct intents never share a hash and the same intent re-derived on replay
always has the same one.

Enqueue, in order (the first failure wins and is the journaled reason):

1. **Capability** (``cap.*`` codes): the grant exists in ``manifest.defaults.cap_grants``; its
   cap's ``cap_type`` is the effect's; it has not expired (``expiry_ns`` against the logical
   clock ``now_ns``, which only journaled timer receipts move); the params stay inside it;
   and budget is left (``bytes``: a ``blob.put`` reserves its data's length and its receipt
   settles the stored size; HTTP is not charged, as its receipt does not carry a body size).
   For ``http.out`` the URL is first read by ``kernel._urls`` (the one normaliser, which the
   HTTP adapter sends through too): one it cannot read unambiguously (userinfo, another
   scheme, a backslash, a non-canonical IP, an encoded ``/`` in the path, ...) is
   ``cap.url_invalid``. Then, on the normalised URL: its host is in ``hosts``
   (``cap.host_not_allowed``; an entry ``host`` admits any port, ``host:port`` that effective
   port only); a ``Host`` header, if the params carry one, names the URL's own authority
   (``cap.host_header``); the method is in ``verbs`` (AgentOS spells it ``methods``;
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
3. ``allow`` queues the intent for an adapter; ``require_approval`` parks it until
   ``approve``; ``deny`` fails the origin.

Receipts (``apply_receipt``) settle budget, move the clock (``timer.set``), and return where
the result goes. The manager's whole state is a CBOR-able object for snapshots.

Intents are made here too (``intent_for``: the check, the decision and the hash), with the
two records that journal one (``records_of``: ``effect.queued`` and ``policy.decision``), and
for a reducer step's micro-effects, the grant each uses (``grant_for``: its cap slot's binding).

Not here: adapters, signatures (``world/`` verifies a receipt before it is journaled), or the
records' placement in the journal (``kernel._core``, ``kernel._runs``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import cbor2

from air import LoadedAir, cbor
from air.errors import WorldError
from air.types import parse_type
from air.values import normalise
from kernel._scheduler import Delivery, Entity
from kernel._urls import (
    Url,
    UrlRefused,
    host_matches_glob,
    path_has_prefix,
    read_authority,
    read_host_entry,
    read_url,
)
from kernel.abi import StepOutput
from kernel.subjects import make_subject

__all__ = ["DEFAULT_RULE", "CapDenied", "EffectManager", "Intent", "intent_hash"]

DEFAULT_RULE: Final = -1
"""The rule index journaled when no policy rule matched (the default: deny)."""

_HTTP_VERB_FIELDS: Final = ("verbs", "methods")


class CapDenied(Exception):
    """A capability check failed: ``code`` (``cap.*``) and ``detail``; for a URL that cannot
    be read (``cap.url_invalid``), ``reason`` names the rule (``kernel._urls``). Internal to
    the kernel: code and detail become a journaled reason, never an error a caller sees."""

    def __init__(self, code: str, detail: str, *, reason: str | None = None) -> None:
        self.code = code
        self.detail = detail
        self.reason = reason
        super().__init__(f"{detail} [{code}]")


def intent_hash(kind: str, params_cbor: bytes, cap: str, idempotency_key: str) -> bytes:
    return cbor.digest(cbor.dumps([kind, params_cbor, cap, idempotency_key]))


@dataclass
class Intent:
    """One effect asked for. ``status``: ``queued`` (for an adapter), ``parked`` (awaiting
    approval), ``done`` (its receipt is journaled), ``denied``."""

    intent_hash: bytes
    kind: str
    params_cbor: bytes
    cap: str
    origin: dict[str, Any]
    status: str
    reserved: int = 0
    receipt: dict[str, Any] | None = None

    def to_obj(self) -> list[Any]:
        return [
            self.intent_hash,
            self.kind,
            self.params_cbor,
            self.cap,
            self.origin,
            self.status,
            self.reserved,
            self.receipt,
        ]

    @classmethod
    def from_obj(cls, obj: list[Any]) -> Intent:
        return cls(*obj)


Record = tuple[str, str, dict[str, Any]]


@dataclass
class EffectManager:
    air: LoadedAir
    intents: dict[bytes, Intent] = field(default_factory=dict)
    spent: dict[str, int] = field(default_factory=dict)  # grant name -> bytes used
    now_ns: int = 0
    _modules: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self._modules = self.air.modules  # computed once: LoadedAir.modules builds a dict

    # --- intents ----------------------------------------------------------------------------

    def intent_for(
        self, kind: str, params: Any, cap: str, origin: dict[str, Any], idem: str
    ) -> Intent:
        """Capability check (``CapDenied``), then policy: an intent ``queued``, ``parked`` or
        ``denied`` (``reserved`` holds the bytes it reserves). Not yet added (``add``)."""
        reserved = self.check_cap(kind, params, cap)
        decision, rule = self.decide(kind, params, cap, origin)
        params_cbor = cbor.dumps(params)
        status = {"allow": "queued", "require_approval": "parked"}.get(decision, "denied")
        return Intent(
            intent_hash(kind, params_cbor, cap, idem),
            kind,
            params_cbor,
            cap,
            {**origin, "rule_index": rule, "decision": decision},
            status,
            reserved if status != "denied" else 0,
        )

    def records_of(self, intent: Intent) -> list[Record]:
        """The records that journal ``intent``: ``effect.queued`` and ``policy.decision``."""
        hexed = intent.intent_hash.hex()
        origin = {k: v for k, v in intent.origin.items() if k not in ("rule_index", "decision")}
        return [
            (
                "effect.queued",
                make_subject("world", "effect", hexed, "queued"),
                {
                    "origin": origin,
                    "intent_hash": intent.intent_hash,
                    "kind": intent.kind,
                    "params": intent.params_cbor,
                    "cap": intent.cap,
                },
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
        if cap_type == "http.out":
            _check_http(cap, self._grant_params(grant, defcap), params)
        return self._reserve(cap, grant, kind, params)

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
        cost = len(params["data"]) if kind == "blob.put" and isinstance(params, dict) else 0
        left = limit - self.spent.get(cap, 0)
        if left <= 0 or cost > left:
            raise CapDenied(
                "cap.budget_exhausted", f"grant {cap} has {max(left, 0)} of {limit} bytes left"
            )
        return cost

    def decide(self, kind: str, params: Any, cap: str, origin: dict[str, Any]) -> tuple[str, int]:
        """Policy: ``(decision, rule index)``; the first matching rule wins, else deny."""
        name = self.air.manifest.defaults.policy
        policy = None if name is None else self.air.policies.get(name)
        if policy is None:
            return "deny", DEFAULT_RULE
        rules = policy.rules
        for index, rule in enumerate(rules):
            if _matches(rule.when, kind, params, cap, origin):
                return str(rule.decision), index
        return "deny", DEFAULT_RULE

    def add(self, intent: Intent) -> None:
        """Record an intent that passed its checks; its reservation counts from now on."""
        self.intents[intent.intent_hash] = intent
        if intent.reserved:
            self.spent[intent.cap] = self.spent.get(intent.cap, 0) + intent.reserved

    # --- approvals and receipts -------------------------------------------------------------

    def approve(self, intent_hash: bytes, approved: bool) -> Intent | None:
        """Decide a parked intent; None if there is no such parked intent."""
        intent = self.intents.get(intent_hash)
        if intent is None or intent.status != "parked":
            return None
        intent.status = "queued" if approved else "denied"
        if not approved:
            self._refund(intent)
        return intent

    def apply_receipt(self, intent_hash: bytes, status: str, payload: Any) -> Intent | None:
        """Record a receipt for a queued intent; None if there is none (unknown or done)."""
        intent = self.intents.get(intent_hash)
        if intent is None or intent.status != "queued":
            return None
        intent.status = "done"
        intent.receipt = {"status": status, "payload": payload}
        if intent.kind == "timer.set" and isinstance(payload, dict):
            delivered = payload.get("delivered_at_ns")
            if type(delivered) is int:
                self.now_ns = max(self.now_ns, delivered)
        if intent.kind == "blob.put" and isinstance(payload, dict):
            size = payload.get("size")
            if type(size) is int:  # settle: the stored size replaces the reservation
                self.spent[intent.cap] = self.spent.get(intent.cap, 0) - intent.reserved + size
        return intent

    def _refund(self, intent: Intent) -> None:
        if intent.reserved:
            self.spent[intent.cap] = self.spent.get(intent.cap, 0) - intent.reserved

    # --- views ------------------------------------------------------------------------------

    def queued(self) -> list[Intent]:
        """Intents waiting for an adapter (or in flight), in hash order."""
        return [i for _h, i in sorted(self.intents.items()) if i.status == "queued"]

    def parked(self) -> list[Intent]:
        return [i for _h, i in sorted(self.intents.items()) if i.status == "parked"]

    def to_obj(self) -> dict[str, Any]:
        return {
            "intents": [i.to_obj() for _h, i in sorted(self.intents.items())],
            "spent": dict(sorted(self.spent.items())),
            "now_ns": self.now_ns,
        }

    def restore(self, obj: dict[str, Any] | None) -> None:
        if not obj:
            return
        self.intents = {i[0]: Intent.from_obj(i) for i in obj["intents"]}
        self.spent = dict(obj["spent"])
        self.now_ns = obj["now_ns"]


def _read_url(params: Any) -> Url:
    """The intent's URL normalised (``kernel._urls``), or ``CapDenied`` naming why not."""
    try:
        return read_url(params.get("url") if isinstance(params, dict) else None)
    except UrlRefused as exc:
        raise CapDenied(exc.code, exc.detail, reason=exc.reason) from exc


def _check_http(cap: str, grant_params: Any, params: Any) -> None:
    url = _read_url(params)
    if not any(_admits(entry, url) for entry in grant_params.get("hosts") or []):
        raise CapDenied("cap.host_not_allowed", f"host {url.authority!r} is outside grant {cap}")
    _check_host_header(params, url)
    verbs = _granted_verbs(grant_params)
    method = str(params.get("method", "")).upper()
    if verbs is not None and method not in verbs:
        raise CapDenied("cap.method_not_allowed", f"method {method} is outside grant {cap}")
    prefixes = grant_params.get("path_prefixes")
    if prefixes is not None and not any(path_has_prefix(url.path, str(p)) for p in prefixes):
        raise CapDenied("cap.path_not_allowed", f"path {url.path!r} is outside grant {cap}")


def _admits(entry: Any, url: Url) -> bool:
    """A grant's ``hosts`` entry: ``host`` on any port, or ``host:port`` on that port."""
    read = read_host_entry(str(entry))
    if read is None:
        return False
    host, port = read
    return host == url.host and (port is None or port == url.effective_port)


def _granted_verbs(grant_params: Any) -> set[str] | None:
    """The methods a grant allows (``verbs`` and ``methods`` together); None if it names
    neither (no restriction). A named but empty set allows no method."""
    given = [grant_params.get(name) for name in _HTTP_VERB_FIELDS]
    if all(v is None for v in given):
        return None
    return {str(v).upper() for verbs in given for v in verbs or []}


def _check_host_header(params: Any, url: Url) -> None:
    """A ``Host`` header (any case) must name the URL's own authority: otherwise the request
    would reach the granted address while asking its server for another site."""
    headers = params.get("headers")
    if not isinstance(headers, dict):
        return
    for name, value in headers.items():
        if str(name).strip().lower() != "host":
            continue
        try:
            same = read_authority(str(value).strip(), url.scheme) == (url.host, url.port)
        except UrlRefused:
            same = False
        if not same:
            raise CapDenied(
                "cap.host_header", f"Host header {value!r} is not the URL's {url.authority!r}"
            )


def _matches(when: Any, kind: str, params: Any, cap: str, origin: dict[str, Any]) -> bool:
    if when.effect_kind is not None and when.effect_kind != kind:
        return False
    if getattr(when, "cap_name", None) is not None and when.cap_name != cap:
        return False
    if when.origin_kind is not None and when.origin_kind != origin["kind"]:
        return False
    if when.origin_name is not None and when.origin_name != origin["name"]:
        return False
    glob = getattr(when, "host", None)
    prefix = getattr(when, "path_prefix", None)
    if glob is not None or prefix is not None:
        try:  # only an intent with a readable URL has a host and a path to match
            url = read_url(params.get("url") if isinstance(params, dict) else None)
        except UrlRefused:
            return False
        if glob is not None and not host_matches_glob(url.host, glob):
            return False
        if prefix is not None and not path_has_prefix(url.path, prefix):
            return False
    method = getattr(when, "method", None)
    if method is not None:
        asked = str(params.get("method", "")).upper() if isinstance(params, dict) else ""
        if asked != method.upper():
            return False
    return True
