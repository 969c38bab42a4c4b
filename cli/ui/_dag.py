"""A plan's DAG laid out for drawing: each step in a column by its depth (the longest chain of
edges from a step with none coming in), in plan order within the column; each edge with its
guard as text. The template draws it as SVG, so the page needs no drawing library.

A run's path marks what it took: a step it executed, and an edge between two steps it
executed in that order.
"""

from __future__ import annotations

import json
from typing import Any, Final

__all__ = ["layout"]

COLUMN_W: Final = 250
ROW_H: Final = 70
BOX_W: Final = 150
BOX_H: Final = 40
MARGIN: Final = 20
GUARD_CHARS: Final = 12
"""A guard's label on the drawing is cut to this, with ``...``; the whole of it is the edge's
``title`` and in the page's table of guards."""


def layout(plan: dict[str, Any], taken: list[str]) -> dict[str, Any]:
    steps = [step["id"] for step in plan.get("steps", [])]
    ops = {step["id"]: step.get("op", "") for step in plan.get("steps", [])}
    edges = [(e["from"], e["to"], e.get("when")) for e in plan.get("edges", [])]
    depth = dict.fromkeys(steps, 0)
    for _ in steps:  # longest path; a DAG settles within len(steps) rounds (AIR checks it is one)
        for source, target, _when in edges:
            if source in depth and target in depth and depth[target] < depth[source] + 1:
                depth[target] = depth[source] + 1
    rows: dict[int, int] = {}
    at: dict[str, tuple[int, int]] = {}
    for step in steps:
        column = depth[step]
        row = rows.get(column, 0)
        rows[column] = row + 1
        at[step] = (MARGIN + column * COLUMN_W, MARGIN + row * ROW_H)
    order = {step: i for i, step in enumerate(taken)}
    nodes = [
        {"id": s, "op": ops[s], "x": at[s][0], "y": at[s][1], "taken": s in order} for s in steps
    ]
    drawn = []
    for source, target, when in edges:
        if source not in at or target not in at:
            continue
        guard = "" if when is None else json.dumps(when, separators=(",", ":"))
        drawn.append(
            {
                "from": source,
                "to": target,
                "guard": guard,
                "label": guard if len(guard) <= GUARD_CHARS else guard[: GUARD_CHARS - 3] + "...",
                "x1": at[source][0] + BOX_W,
                "y1": at[source][1] + BOX_H // 2,
                "x2": at[target][0],
                "y2": at[target][1] + BOX_H // 2,
                "taken": source in order and target in order and order[source] < order[target],
            }
        )
    width = MARGIN * 2 + (max(depth.values(), default=0) + 1) * COLUMN_W
    height = MARGIN * 2 + max(rows.values(), default=1) * ROW_H
    return {"nodes": nodes, "edges": drawn, "width": width, "height": height, "box": [BOX_W, BOX_H]}
