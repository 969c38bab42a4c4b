"""Hostile reducer outputs, fuzzed: whatever bytes a reducer returns, the kernel journals a
``step`` or a ``step.failed`` and keeps going; no other exception escapes a tick."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from air import cbor
from kernel import Kernel
from kernel.cells import MemoryCellStore
from kernel.journal import MemoryJournal
from world._airfiles import load_air_path

from worldkit import COUNTER_AIR, EVENT, add

AIR = load_air_path(COUNTER_AIR)

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64 - 1),
    st.text(max_size=6),
    st.binary(max_size=6),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.one_of(st.text(max_size=6), st.integers(-(2**64), 2**64 - 1)), inner, max_size=3
        ),
    ),
    max_leaves=12,
)
state_like = st.one_of(
    values,
    st.fixed_dictionaries({"count": values, "events": values}),
    st.fixed_dictionaries({"count": st.integers(-5, 2**64 - 1), "events": st.integers(-5, 5)}),
)
outputs = st.one_of(
    st.binary(max_size=40),
    values.map(cbor.dumps),
    st.fixed_dictionaries(
        {"state": st.one_of(st.none(), state_like.map(cbor.dumps), st.binary(max_size=8))},
        optional={
            "domain_events": st.lists(
                st.fixed_dictionaries(
                    {
                        "schema": st.sampled_from([EVENT, "x/Y@1", ""]),
                        "value": values.map(cbor.dumps),
                    }
                ),
                max_size=2,
            ),
            "effects": st.lists(
                st.fixed_dictionaries(
                    {
                        "kind": st.sampled_from(["timer.set", "http.request", "?"]),
                        "params": values.map(cbor.dumps),
                    }
                ),
                max_size=2,
            ),
            "ann": values.map(cbor.dumps),
        },
    ).map(cbor.dumps),
)


class FixedRunner:
    def __init__(self, output: bytes) -> None:
        self.output = output

    def run(self, reducer: str, input_cbor: bytes) -> bytes:
        return self.output


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(outputs)
def test_any_reducer_output_becomes_a_step_or_a_failed_step(output: bytes) -> None:
    kernel = Kernel(AIR, MemoryJournal(), MemoryCellStore(), FixedRunner(output))
    value: Any = add("k", 1)
    kernel.ingest(EVENT, *kernel.normalise_event(EVENT, value))
    assert kernel.tick() is True
    kinds = [r.kind for r in kernel.journal.read(0)]
    assert kinds[-1] in ("step", "step.failed")
    assert kernel.idle() or kinds[-1] == "step"
