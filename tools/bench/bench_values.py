"""Benchmark strict value checking: ``air.values.check`` against its compiled form.

Run by hand (not in CI)::

    .venv/bin/python tools/bench/bench_values.py [--repeat 7]

For each value it prints microseconds per call (the best of ``--repeat`` timing runs) of
``check(Ref(name), obj, schemas)``, of a checker from ``compile_checker(Ref(name), schemas)``,
and of ``SchemaCheckers(schemas).check(name, obj)`` (the kernel's call: a dict lookup more).
Cases: the counter state of the demo worlds, a nested record with a list of records and a
variant, a 100-entry ``map<text, CounterState>``, and a rejected counter state (a rejection runs
the compiled fast walk and then ``check`` to explain it, so it costs a little more than
``check``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from air import SchemaCheckers, compile_checker  # noqa: E402
from air.errors import ValueMismatch  # noqa: E402 - the repo root goes on sys.path first
from air.types import Ref, TypeNode, parse_type  # noqa: E402
from air.values import check, normalise  # noqa: E402

SCHEMAS: dict[str, TypeNode] = {
    name: parse_type(obj)
    for name, obj in {
        "demo/CounterState@1": {"record": {"count": "nat", "events": "nat"}},
        "demo/CounterMap@1": {"map": {"key": "text", "value": "demo/CounterState@1"}},
        "bench/Line@1": {"record": {"sku": "text", "qty": "nat", "price": "dec128"}},
        "bench/Order@1": {
            "record": {
                "id": "text",
                "status": {"variant": {"Pending": "unit", "Fetched": "int", "Failed": "int"}},
                "lines": {"list": "bench/Line@1"},
                "tags": {"set": "text"},
                "note": {"option": "text"},
            }
        },
    }.items()
}

ORDER = {
    "id": "order-17",
    "status": {"$tag": "Fetched", "$value": 200},
    "lines": [{"sku": f"sku-{i}", "qty": i + 1, "price": f"{i}.25"} for i in range(5)],
    "tags": ["gift", "express"],
    "note": None,
}

CASES: list[tuple[str, str, Any]] = [
    ("counter state", "demo/CounterState@1", {"count": 41, "events": 42}),
    ("order: list of 5 records, variant, set", "bench/Order@1", ORDER),
    (
        "map of 100 counter states",
        "demo/CounterMap@1",
        {f"k{i}": {"count": i, "events": i} for i in range(100)},
    ),
    ("counter state, rejected (-1)", "demo/CounterState@1", {"count": -1, "events": 42}),
]


def per_call_us(call: Callable[[], None], repeat: int) -> float:
    """Best of ``repeat`` runs, each long enough (>= 0.2 s) to swamp the timer's own cost."""
    timer = timeit.Timer(call)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


def rejecting(call: Callable[[], None]) -> Callable[[], None]:
    """``call`` with its expected ``ValueMismatch`` swallowed (used for rejected values only)."""

    def run() -> None:
        with contextlib.suppress(ValueMismatch):
            call()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    checkers = SchemaCheckers(SCHEMAS)
    rows = []
    for label, name, data in CASES:
        node = Ref(name)
        rejected = "rejected" in label
        obj = data if rejected else normalise(node, data, SCHEMAS)
        compiled = compile_checker(node, SCHEMAS)
        calls = [
            lambda: check(node, obj, SCHEMAS),  # noqa: B023 - each lambda is timed in this pass
            lambda: compiled(obj),  # noqa: B023
            lambda: checkers.check(name, obj),  # noqa: B023
        ]
        times = [per_call_us(rejecting(call) if rejected else call, args.repeat) for call in calls]
        rows.append((label, *times, times[0] / times[1]))
    header = ("value", "check µs", "compiled µs", "SchemaCheckers µs", "speed-up")
    width = max(len(row[0]) for row in rows)
    print(f"{header[0]:<{width}}  {header[1]:>9}  {header[2]:>11}  {header[3]:>17}  {header[4]:>8}")
    for label, slow, fast, named, ratio in rows:
        print(f"{label:<{width}}  {slow:>9.2f}  {fast:>11.2f}  {named:>17.2f}  {ratio:>7.1f}x")


if __name__ == "__main__":
    main()
