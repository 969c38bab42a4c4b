"""Plan steps in the project's earlier shapes, found in raw JSON so the loader can say what to write.

``old_step_shapes`` finds them before pydantic does, one ``air.plan.step.old_shape`` per step
saying what to write instead (the AIR v1 shapes: SPEC §3; the checks of those: ``air._plan_checks``). Rejected: translating old steps to new ones. An ``emit_effect`` without
``bind`` has no var for its effect id, so any translation would invent names the author then
has to discover.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["old_step_shapes"]

_SHOWN_CHARS_MAX = 400
"""The longest piece of the author's JSON an old-shape message quotes."""


def old_step_shapes(steps: Any) -> list[tuple[int, str]]:
    """``(index, message)`` for each step of a raw ``steps`` list in an earlier shape."""
    if not isinstance(steps, list):
        return []
    by_id = {s.get("id"): s for s in steps if isinstance(s, dict)}
    found = []
    for i, step in enumerate(steps):
        message = _old_shape(step, by_id) if isinstance(step, dict) else None
        if message is not None:
            found.append((i, message))
    return found


def _old_shape(step: dict[str, Any], by_id: dict[Any, Any]) -> str | None:
    sid = step.get("id") if isinstance(step.get("id"), str) else "step"
    op = step.get("op")
    if op == "emit_effect" and "bind" not in step:
        new = {
            "id": sid,
            "op": "emit_effect",
            "bind": {"effect_id_as": f"{sid}_id"},
            "cap": step.get("cap", "<cap grant name>"),
            "kind": step.get("kind", "<effect kind>"),
            "params": step.get("params", "<Expr>"),
        }
        wait = {"op": "await_receipt", "for": {"ref": f"@var:{sid}_id"}, "bind": {"as": "<var>"}}
        return f"emit_effect binds its effect id: await it with {_show(wait)}; write {_show(new)}"
    if op == "await_receipt" and isinstance(step.get("for"), str):
        target = by_id.get(step["for"])
        bind = target.get("bind") if isinstance(target, dict) else None
        var = bind.get("effect_id_as") if isinstance(bind, dict) else None
        var = var if isinstance(var, str) else f"{step['for']}_id"
        new = {"id": sid, "op": "await_receipt", "for": {"ref": f"@var:{var}"}, "bind": {"as": sid}}
        return (
            f"await_receipt.for is an Expr for the effect id an emit_effect bound: write "
            f'{_show(new)} instead of "for": {_show(step["for"])}, and read the receipt as '
            f"@var:{sid}"
        )
    if op == "raise_event" and "value" in step and "reducer" in step:
        new = {"id": sid, "op": "raise_event", "reducer": step.get("reducer", "<reducer>")}
        if "key" in step:
            new["key"] = step["key"]
        new["event"] = _old_event(step.get("event"), step["value"])
        return (
            f"raise_event.event is the event value, its schema named by $schema: write "
            f"{_show(new)} instead of event/value"
        )
    if op == "assign" and ("var" in step or "value" in step):
        new = {
            "id": sid,
            "op": "assign",
            "bind": {"as": step.get("var", "<var>")},
            "expr": step.get("value", "<Expr>"),
        }
        return f"write {_show(new)} instead of var/value"
    if op == "await_event" and "bind" not in step:
        return f'await_event binds the event it receives: add "bind": {{"as": "{sid}"}} and read it as @var:{sid}'
    return None


def _old_event(schema: Any, value: Any) -> Any:  # the project's {reducer, event, value}
    """The old ``event`` (a schema name) and ``value`` (an Expr) as one v1 event Expr."""
    record = value.get("record") if isinstance(value, dict) and len(value) == 1 else None
    if isinstance(record, dict) and isinstance(schema, str):
        return {"record": {"$schema": schema, **record}}
    return value  # not a record construct: it must then be the reducer's ABI event


def _show(obj: Any) -> str:
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= _SHOWN_CHARS_MAX else text[: _SHOWN_CHARS_MAX - 3] + "..."
