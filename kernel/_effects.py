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
   clock ``now_ns``, which only journaled timer receipts move); the params stay inside it
   (``http.out``: the URL's host, or ``host:port``, is in ``hosts``; the method is in ``verbs``
   (AgentOS spells it ``methods``); the path starts with one of ``path_prefixes`` when given);
   and budget is left (``bytes``: a ``blob.put`` reserves its data's length and its receipt
   settles the stored size; HTTP is not charged, as its receipt does not carry a body size).
2. **Policy**: the rules of ``defaults.policy``, first match wins; no match (or no policy)
   denies. The decision is journaled with its rule index (-1 for the default).
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

import fnmatch
from dataclasses import dataclass, field
from typing import Any, Final

import cbor2

from air import LoadedAir, cbor
from air.errors import WorldError
from air.types import parse_type
from air.values import normalise
from kernel._scheduler import Delivery, Entity
from kernel.abi import StepOutput
from kernel.subjects import make_subject

__all__ = ["DEFAULT_RULE", "CapDenied", "EffectManager", "Intent", "intent_hash"]

DEFAULT_RULE: Final = -1
"""The rule index journaled when no policy rule matched (the default: deny)."""

_HTTP_VERB_FIELDS: Final = ("verbs", "methods")


class CapDenied(Exception):
    """A capability check failed: ``code`` (``cap.*``) and ``detail``. Internal to the kernel:
    it becomes a journaled reason, never an error a caller sees."""

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        self.detail = detail
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


def _url(params: Any) -> tuple[str, int | None, str]:
    """``(host, port, path)`` of an http(s) URL, parsed as RFC 3986 does (the authority ends
    at the first ``/``, ``?`` or ``#``; dot segments are removed from the path), so the
    capability check sees the host and path the request will really go to. A URL that cannot
    be read that way (no scheme, userinfo, a bad port, a backslash) has host ``""``, which no
    grant allows. Written here because ``kernel/`` imports nothing that can touch the network.
    """
    url = params.get("url", "") if isinstance(params, dict) else ""
    if not isinstance(url, str) or "://" not in url or "\\" in url:
        return "", None, "/"
    scheme, rest = url.split("://", 1)
    if scheme.lower() not in ("http", "https"):
        return "", None, "/"
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority or not authority:
        return "", None, "/"
    port: int | None = None
    if authority.startswith("["):  # [v6]:port
        close = authority.find("]")
        host, after = authority[1:close], authority[close + 1 :]
        port_text = after[1:] if after.startswith(":") else after
    else:
        host, _colon, port_text = authority.partition(":")
    if port_text:
        if not port_text.isdigit() or len(port_text) > 5:
            return "", None, "/"
        port = int(port_text)
    path = tail.split("#", 1)[0].split("?", 1)[0] or "/"
    return host.lower(), port, _without_dot_segments(path)


def _without_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 for an absolute path: ``/a/./b/../c`` is ``/a/c``."""
    out: list[str] = []
    segments = path.split("/")
    for segment in segments[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if segments[-1] in (".", "..") and (not out or out[-1] != ""):
        out.append("")
    return "/" + "/".join(out)


def _check_http(cap: str, grant_params: Any, params: Any) -> None:
    host, port, path = _url(params)
    hosts = {str(h).lower() for h in grant_params.get("hosts", [])}
    if host not in hosts and (port is None or f"{host}:{port}" not in hosts):
        where = host if port is None else f"{host}:{port}"
        raise CapDenied("cap.host_not_allowed", f"host {where!r} is outside grant {cap}")
    verbs: set[str] = set()
    for name in _HTTP_VERB_FIELDS:
        verbs |= {str(v).upper() for v in grant_params.get(name) or []}
    method = str(params.get("method", "")).upper() if isinstance(params, dict) else ""
    if verbs and method not in verbs:
        raise CapDenied("cap.method_not_allowed", f"method {method} is outside grant {cap}")
    prefixes = grant_params.get("path_prefixes")
    if prefixes and not any(path.startswith(str(p)) for p in prefixes):
        raise CapDenied("cap.path_not_allowed", f"path {path!r} is outside grant {cap}")


def _matches(when: Any, kind: str, params: Any, cap: str, origin: dict[str, Any]) -> bool:
    if when.effect_kind is not None and when.effect_kind != kind:
        return False
    if getattr(when, "cap_name", None) is not None and when.cap_name != cap:
        return False
    if when.origin_kind is not None and when.origin_kind != origin["kind"]:
        return False
    if when.origin_name is not None and when.origin_name != origin["name"]:
        return False
    host, _port, path = _url(params)
    if getattr(when, "host", None) is not None and not fnmatch.fnmatchcase(host, when.host):
        return False
    prefix = getattr(when, "path_prefix", None)
    if prefix is not None and not path.startswith(prefix):
        return False
    method = getattr(when, "method", None)
    if method is not None:
        asked = str(params.get("method", "")).upper() if isinstance(params, dict) else ""
        if asked != method.upper():
            return False
    return True
