"""Test kit for plan worlds end to end: small plan manifests, journal views, and an adapter
wrapper that orders receipts. The loopback HTTP server these worlds talk to is ``httpkit``'s.

Gates instead of sleeps: "answer /b only after the receipt for /a is in the loop's hands" is
what ``ReceiptGates`` (an adapter wrapper) and ``httpkit.Answer.gate`` give together, so
receipts come back in a chosen order without any timing assumption.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from air import cbor
from kernel.journal import JournalRecord
from world import World
from world.effects import Done, Intent, Receipt

from worldkit import ROOT, const_wasm, output, write_world_air

ORDER_AIR: Final = ROOT / "manifests" / "order"
ORDER: Final = "demo/Order@1"
ORDER_PLACED: Final = "demo/OrderPlaced@1"

# --- receipts in a chosen order ----------------------------------------------------------------


class ReceiptGates:
    """An adapter wrapper: after the inner adapter's receipt for a URL path is handed to the
    loop, the gate for that path is set (a server answer can wait on it)."""

    def __init__(self, inner: Any, gates: dict[str, threading.Event]) -> None:
        self.inner = inner
        self.gates = gates
        self.adapter_id = inner.adapter_id
        self.kinds = inner.kinds

    def submit(self, intent: Intent, done: Done) -> None:
        path = "/" + str(intent.params["url"]).split("://", 1)[1].split("/", 1)[1]

        def then(receipt: Receipt) -> None:
            done(receipt)
            gate = self.gates.get(path)
            if gate is not None:
                gate.set()

        self.inner.submit(intent, then)

    def close(self) -> None:
        self.inner.close()


# --- manifests ---------------------------------------------------------------------------------

SINK: Final = "t/Sink@1"
SINK_STATE: Final = "t/SinkState@1"


def ref(path: str) -> dict[str, Any]:
    return {"ref": path}


def op(name: str, *args: Any) -> dict[str, Any]:
    return {"op": name, "args": list(args)}


def blob_put(step_id: str, data: Any, bind: str) -> dict[str, Any]:
    """An ``emit_effect`` of a ``blob.put`` of ``data`` (an Expr) under grant ``blob``."""
    return {
        "id": step_id,
        "op": "emit_effect",
        "kind": "blob.put",
        "params": {"record": {"data": data}},
        "cap": "blob",
        "bind": {"effect_id_as": bind},
    }


def http_get(step_id: str, url: Any, bind: str, cap: str = "http") -> dict[str, Any]:
    """An ``emit_effect`` of a GET to ``url`` (an Expr)."""
    return {
        "id": step_id,
        "op": "emit_effect",
        "kind": "http.request",
        "params": {
            "record": {
                "method": "GET",
                "url": url,
                "headers": {"lit": {}},
                "body_ref": {"none": {}},
            }
        },
        "cap": cap,
        "bind": {"effect_id_as": bind},
    }


def await_receipt(step_id: str, effect_var: str, bind: str) -> dict[str, Any]:
    return {
        "id": step_id,
        "op": "await_receipt",
        "for": ref(f"@var:{effect_var}"),
        "bind": {"as": bind},
    }


def end(step_id: str = "end", result: Any = None) -> dict[str, Any]:
    step: dict[str, Any] = {"id": step_id, "op": "end"}
    if result is not None:
        step["result"] = result
    return step


def chain(*ids: str) -> list[dict[str, Any]]:
    """Edges ``a -> b -> c ...``."""
    return [{"from": a, "to": b} for a, b in itertools.pairwise(ids)]


def plan(
    name: str,
    input_schema: str,
    steps: list[dict[str, Any]],
    edges: list[dict[str, Any]],
    **extra: Any,
) -> dict[str, Any]:
    return {
        "$kind": "defplan",
        "name": name,
        "input": input_schema,
        "steps": steps,
        "edges": edges,
        **extra,
    }


def http_grant(hosts: list[str], name: str = "http", **extra: Any) -> dict[str, Any]:
    params = {"hosts": hosts, "verbs": ["GET"]}
    return {"name": name, "cap": "sys/http.out@1", "params": params, **extra}


def blob_grant(name: str = "blob", **extra: Any) -> dict[str, Any]:
    return {"name": name, "cap": "sys/blob@1", "params": {}, **extra}


def policy(rules: list[dict[str, Any]], name: str = "t/policy@1") -> dict[str, Any]:
    return {"$kind": "defpolicy", "name": name, "rules": rules}


ALLOW_ALL: Final = [{"when": {}, "decision": "allow"}]


def plan_world(
    folder: Path,
    *,
    schemas: dict[str, Any],
    plans: list[dict[str, Any]],
    triggers: list[dict[str, Any]],
    grants: Sequence[dict[str, Any]] = (),
    rules: list[dict[str, Any]] | None = ALLOW_ALL,
    sink_events: Sequence[str] = (),
) -> Path:
    """Write a world's AIR: ``schemas`` (name -> type), plans and triggers, a non-keyed sink
    reducer (a fixed-output WAT module) that takes ``sink_events``, the grants, and a policy
    of ``rules`` (None: no policy at all)."""
    docs: list[dict[str, Any]] = [
        {"$kind": "defschema", "name": n, "type": t} for n, t in schemas.items()
    ]
    docs.append({"$kind": "defschema", "name": SINK_STATE, "type": {"record": {}}})
    sink_event = sink_events[0] if sink_events else next(iter(schemas))
    docs.append(
        {
            "$kind": "defmodule",
            "name": SINK,
            "module_kind": "reducer",
            "wasm": "t_Sink@1.wasm",
            "abi": {"reducer": {"state": SINK_STATE, "event": sink_event}},
        }
    )
    docs.extend(plans)
    defaults: dict[str, Any] = {"cap_grants": list(grants)}
    if rules is not None:
        docs.append(policy(rules))
        defaults["policy"] = "t/policy@1"
    docs.append(
        {
            "$kind": "manifest",
            "air_version": "1",
            "routing": {"events": [{"event": e, "reducer": SINK} for e in sink_events]},
            "triggers": triggers,
            "defaults": defaults,
        }
    )
    return write_world_air(folder, {SINK: const_wasm(output({}))}, docs)


# --- journal views -----------------------------------------------------------------------------


def records(path: Path) -> list[JournalRecord]:
    with World.open(path, readonly=True) as world:
        return list(world.journal.read(0))


def of_kind(recs: list[JournalRecord], kind: str) -> list[JournalRecord]:
    return [r for r in recs if r.kind == kind]


def ended(recs: list[JournalRecord]) -> dict[int, dict[str, Any]]:
    """``plan.ended`` bodies by run id, with ``result`` decoded."""
    out = {}
    for r in of_kind(recs, "plan.ended"):
        body = dict(r.body)
        if "result" in body:
            body["result"] = cbor.loads(body["result"])
        out[body["run_id"]] = body
    return out


def started(recs: list[JournalRecord]) -> dict[int, str]:
    """Plan name by run id."""
    return {r.body["run_id"]: r.body["plan"] for r in of_kind(recs, "plan.started")}


def steps_of(recs: list[JournalRecord], run_id: int) -> list[str]:
    """The ids of the steps a run journaled, in order."""
    return [r.body["step"] for r in of_kind(recs, "plan.step") if r.body["run_id"] == run_id]


def raised(recs: list[JournalRecord], run_id: int) -> list[tuple[str, Any]]:
    """The events a run raised: (schema, value)."""
    return [
        (r.body["event"][0], cbor.loads(r.body["event"][1]))
        for r in of_kind(recs, "plan.step")
        if r.body["run_id"] == run_id and r.body["op"] == "raise_event"
    ]


def queued_urls(recs: list[JournalRecord]) -> dict[bytes, str]:
    """URL by intent hash, for the http intents queued."""
    return {
        r.body["intent_hash"]: cbor.loads(r.body["params"])["url"]
        for r in of_kind(recs, "effect.queued")
        if r.body["kind"] == "http.request"
    }


def lines(text: str) -> Iterator[dict[str, Any]]:
    """JSON lines of a CLI's output."""
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)
