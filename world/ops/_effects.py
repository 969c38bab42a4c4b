"""Effects: ``effects.ls`` (every intent: parked awaiting approval, queued in flight, done,
denied, cancelled) and ``effects.approve`` / ``effects.deny`` for an intent a policy parked with
``require_approval`` (journaled ``effect.approval``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from pydantic import Field

from world.ops._base import Args, Context, Result, operation
from world.ops._status import NoArgs

if TYPE_CHECKING:
    from kernel import Intent, Settled

__all__ = [
    "WHAT_MAX",
    "Decided",
    "EffectsList",
    "IntentOf",
    "effects_approve",
    "effects_deny",
    "effects_ls",
]

WHAT_MAX: Final = 60
"""How much of an intent's request a row's ``what`` shows."""


class EffectsList(Result):
    intents: list[dict[str, Any]] = Field(
        description="{intent_hash, kind, what, cap, status, origin, decision, rule_index, "
        "receipt_status?, queued_seq?, age_records?, idempotency_key?} each (idempotency_key: "
        "a live intent's plan-chosen key, its text, or its bytes as hex)"
    )
    dead_effects: int = Field(description="Dead letters an effect made")


@operation("effects.ls")
def effects_ls(ctx: Context, args: NoArgs) -> EffectsList:
    """Every intent: parked (awaiting approval), queued (in flight), done, denied."""
    from world.operate import queued_seqs

    ctx.catch_up()
    world = ctx.world
    listing = world.kernel.intents()
    live = {i.intent_hash for i in listing if i.status in ("queued", "parked")}
    asked = queued_seqs(world.journal, live)
    head = world.journal.seq_next
    rows = [_row(i, asked.get(i.intent_hash), head) for i in listing]
    dead = len([d for d in world.kernel.dead_letter_list() if d.code.startswith("effect")])
    return EffectsList(intents=rows, dead_effects=dead)


def _what(params_cbor: bytes | None) -> str:
    """What an intent asks for, in a few words: an HTTP request's method and URL, else its
    params' scalar fields (``key=value``), cut at ``WHAT_MAX`` characters."""
    import cbor2

    if params_cbor is None:
        return ""
    params = cbor2.loads(params_cbor)  # the kernel's own canonical encoding of checked params
    if not isinstance(params, dict):
        return repr(params)[:WHAT_MAX]
    if "method" in params and "url" in params:
        text = f"{params['method']} {params['url']}"
    else:
        text = " ".join(
            f"{k}={v}" for k, v in params.items() if isinstance(v, str | int | float | bool)
        )
    return text if len(text) <= WHAT_MAX else text[: WHAT_MAX - 1] + "…"


def _row(intent: Intent | Settled, queued_seq: int | None, head: int) -> dict[str, Any]:
    """One intent as ``effects.ls`` lists it; a live one with the seq it was queued at and its
    age (records journaled since)."""
    from air import cbor
    from kernel import Settled

    origin = {
        k: (v.hex() if isinstance(v, bytes) else v)
        for k, v in intent.origin.items()
        if k not in ("rule_index", "decision")
    }
    if origin.get("kind") == "reducer" and isinstance(intent.origin.get("key"), bytes):
        origin["key"] = cbor.loads(intent.origin["key"])
    params_cbor = None if isinstance(intent, Settled) else intent.params_cbor
    row: dict[str, Any] = {
        "intent_hash": cbor.raw_to_hash(intent.intent_hash),
        "kind": intent.kind,
        "what": _what(params_cbor),
        "cap": intent.cap,
        "status": intent.status,
        "origin": origin,
        "decision": intent.origin.get("decision"),
        "rule_index": intent.origin.get("rule_index"),
    }
    if isinstance(intent, Settled) and intent.receipt_status is not None:
        row["receipt_status"] = intent.receipt_status
    key = None if isinstance(intent, Settled) else intent.idempotency_key
    if key is not None:
        row["idempotency_key"] = key.hex() if isinstance(key, bytes) else key
    if queued_seq is not None:
        row["queued_seq"] = queued_seq
        row["age_records"] = head - 1 - queued_seq
    return row


class IntentOf(Args):
    intent: str = Field(description="The intent hash, or a unique prefix of it")


class Decided(Result):
    seq: int = Field(description="The seq of the journaled effect.approval")
    decision: str = Field(description="approved or denied")


@operation("effects.approve", writes=True)
def effects_approve(ctx: Context, args: IntentOf) -> Decided:
    """Approve a parked intent: it is sent at the next cycle."""
    return _decide(ctx, args.intent, True)


@operation("effects.deny", writes=True)
def effects_deny(ctx: Context, args: IntentOf) -> Decided:
    """Deny a parked intent: the run that asked for it ends with an error."""
    return _decide(ctx, args.intent, False)


def _decide(ctx: Context, intent: str, approved: bool) -> Decided:
    from world.effects import decide_parked

    ctx.catch_up()
    seq = decide_parked(ctx.world, intent, approved)
    return Decided(seq=seq, decision="approved" if approved else "denied")
