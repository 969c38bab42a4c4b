"""Bounded fuzzing of the native code that parses reducer output, journal bytes and AIR values.

Differential: every input goes to the C function and to the pure-Python reference it stands
for (``tools/fuzz/native_oracle.py``); they must agree as ``kernel/native/__init__.py`` promises. Three
sources of inputs, each bounded so the suite stays quick: a seeded mutation loop over every
head boundary (``tests/air/test_cbor_heads.py``'s table), real step outputs, journal records and
canonical values (always runs); hypothesis-generated values
for the encoders; and, where atheris is installed, a short coverage-guided libFuzzer run of
``tools/fuzz/fuzz_native.py`` in a subprocess (libFuzzer exits the process when done). The long
run is by hand: ``python tools/fuzz/fuzz_native.py [-runs=N | --random --seconds S]``.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fuzzkit import FUZZ, examples, load_oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from air import cbor
from air.errors import CborError
from kernel import native

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(
    not native.available(), reason="the native extension is not built: nothing to fuzz"
)


_oracle = load_oracle


EDGE_INPUTS = [
    # inputs at the edges of canonical CBOR and the record shapes; a disagreement a fuzz run
    # finds is added here
    b"",
    b"\x18\x01",  # non-shortest uint
    b"\xa2\x61b\x01\x61a\x02",  # keys out of order
    b"\xa2\x61a\x01\x61a\x02",  # duplicate key
    b"\x5f\x41a\xff",  # indefinite bytes
    b"\xf9\x3c\x00",  # half float
    b"\xf7",  # undefined
    b"\xc2\x49\x01" + bytes(8),  # bignum
    b"\xd9\x07\xd0\x4f" + bytes(15),  # dec128 of 15 bytes
    b"\x62\xed\xa0",  # truncated surrogate text
    b"\x63\xed\xa0\x80",  # UTF-8 of a surrogate
    b"\x9b" + b"\xff" * 8,  # huge array count
    b"\x81" * 256 + b"\x80",  # 257 nested arrays
    b"\x81" * 255 + b"\x80",  # 256: the limit
    b"\xa1\x65state\xf6",
    b"\xa1\x65state\x41\x00",
    b"\xa2\x65state\xf6\x6ddomain_events\x80",
    b"\xa1\x63ann\x40",
    b"\xa4\x63seq\x00\x64body\xf6\x64kind\x61x\x67subject\x62/a",
    b"\xa4\x63seq\x20\x64body\xf6\x64kind\x61x\x67subject\x62/a",
]


@pytest.mark.parametrize("data", EDGE_INPUTS, ids=lambda d: d[:12].hex() or "empty")
def test_each_edge_input_reads_the_same_in_c_and_in_python(data: bytes) -> None:
    _oracle().check_bytes(data)


def test_mutated_outputs_records_and_values_agree() -> None:
    oracle = _oracle()
    rng = random.Random(20261126)
    mutator = oracle.Mutator(rng, oracle.seed_corpus(rng, 150))
    for seed in mutator.seeds:
        oracle.check_bytes(seed)
    for count, data in enumerate(mutator):
        oracle.check_bytes(data)
        if count == 60_000:
            break


def test_random_values_encode_the_same() -> None:
    oracle = _oracle()
    rng = random.Random(7)
    for _ in range(5_000):
        value = oracle.random_value(rng)
        oracle.check_dumps(value)
        if oracle._exact_types(value):
            try:
                data = cbor.dumps(value)
            except CborError:
                continue
            oracle.check_loads(data)


def test_deep_values_stop_at_the_same_depth() -> None:
    oracle = _oracle()
    for depth in (255, 256, 257, 300):
        value: Any = 0
        for _ in range(depth):
            value = [value]
        oracle.check_dumps(value)
        nested = b"\x81" * depth + b"\x00"
        oracle.check_loads(nested)


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**65), max_value=2**65)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(max_size=5) | st.integers(-300, 300) | st.binary(max_size=3), inner, max_size=4
        )
    ),
    max_leaves=20,
)


@settings(max_examples=examples(300), deadline=None)
@given(_values)
def test_hypothesis_values_encode_and_decode_the_same(value: Any) -> None:
    oracle = _oracle()
    oracle.check_dumps(value)
    try:
        data = cbor.dumps(value)
    except Exception:
        return
    oracle.check_bytes(data)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.none() | st.binary(max_size=40),
    st.text(max_size=20),
    st.binary(max_size=40),
    st.none() | st.binary(max_size=10),
    st.booleans(),
)
def test_input_envelopes_encode_the_same(
    state: bytes | None, schema: str, value: bytes, key: bytes | None, cell_mode: bool
) -> None:
    _oracle().check_encode_input(state, schema, value, key, cell_mode)


ATHERIS_RUNS = {"main": 4_000, "long": 20_000}
"""Inputs of the bounded atheris run: the main suite's, and the long variant's (``-m long``,
which ``.ci/run`` runs after the main suite); ``WORLD_FUZZ_RUNS`` sets both. The AddressSanitizer
run (``test_native_asan.py``), where each costs ~5 times as much, sets fewer. A longer run is by
hand (module docstring)."""


HANG_GUARD_S = 1800
"""Only a guard against a hung run: the run is bounded by its input count (``-runs``), never by
time, so a loaded machine (it once took over 300 s under ASan beside another suite) makes it
slower, not failed."""


@pytest.mark.parametrize("depth", ["main", pytest.param("long", marks=pytest.mark.long)])
def test_a_bounded_atheris_run_finds_no_disagreement(tmp_path: Path, depth: str) -> None:
    runs = int(os.environ.get("WORLD_FUZZ_RUNS", ATHERIS_RUNS[depth]))
    pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris)")
    done = subprocess.run(
        [
            sys.executable,
            str(FUZZ / "fuzz_native.py"),
            "--corpus",
            str(tmp_path / "corpus"),
            f"-runs={runs}",
            "-max_len=512",
            "-seed=1",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_random_schemas_and_values_normalise_the_same() -> None:
    oracle = _oracle()
    rng = random.Random(11)
    for _ in range(400):
        node = oracle.random_type(rng)
        for _ in range(25):
            oracle.check_normalise(node, {}, oracle.random_sugar(rng, node))


def test_the_example_worlds_events_normalise_the_same() -> None:
    from air import load_air
    from air.types import Ref
    from world._airfiles import air_sources, builtin_sources, inspect_wasm, read_file

    oracle = _oracle()
    rng = random.Random(3)
    for folder in sorted((ROOT / "manifests").iterdir()):
        air = load_air(builtin_sources() + air_sources(folder), read_file, inspect_wasm)
        for name, node in sorted(air.schemas.items()):
            for _ in range(40):
                oracle.check_normalise(Ref(name), air.schemas, oracle.random_sugar(rng, node))
