"""Fuzz the native step path against its pure-Python reference, for as long as you like.

    .venv/bin/python tools/fuzz/fuzz_native.py                 # atheris if installed, else random
    .venv/bin/python tools/fuzz/fuzz_native.py -runs=1000000   # libFuzzer flags go to atheris
    .venv/bin/python tools/fuzz/fuzz_native.py --random --seconds 600 --seed 7

With atheris (``pip install atheris``; a dev dependency on x86-64 Linux) this is a libFuzzer
run: each input is routed to every byte-level target (``native_oracle.check_bytes``: strict
decode, output decode, record decode), written over a field of a small index shard
(``check_shard_splice``: the checkpoint's shard merge) and, read as a structured recipe, to the
encoders (``check_dumps``, ``check_encode_input``). Coverage guidance comes from the Python reference
code atheris instruments; the C code is not instrumented (gcc has no libFuzzer coverage mode),
so the corpus is seeded with real outputs and records, and with every CBOR head at every width
boundary in its shortest and its longer forms (``native_oracle.boundary_seeds``: mutations of
random values never happened on ``19 00 ff``). ``--random`` (or no atheris) runs the
same checks on ``native_oracle.Mutator``'s mutations of the same seeds instead. A disagreement
raises ``Disagreement`` with the input: add it to ``tests/kernel/native/test_native_fuzz.py``'s ``EDGE_INPUTS``.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

try:
    import atheris  # type: ignore[import-not-found]
except ImportError:
    atheris = None

# Coverage for libFuzzer: the Python references (air, kernel) and the oracle are instrumented
# as they are imported; the C extension is not (gcc has no libFuzzer coverage mode).
_instrumented: Any = (
    atheris.instrument_imports(include=["air", "kernel", "native_oracle"])
    if atheris is not None
    else contextlib.nullcontext()
)
with _instrumented:
    import native_oracle


def one_input(data: bytes) -> None:
    native_oracle.check_bytes(data)
    native_oracle.check_shard_splice(data)
    rng = random.Random(data)
    native_oracle.check_dumps(native_oracle.random_value(rng))
    native_oracle.check_encode_input(
        rng.choice([None, data[:8]]), data[:12].decode("utf-8", "replace"), data, None, True
    )


def run_random(seconds: float, seed: int) -> int:
    rng = random.Random(seed)
    mutator = native_oracle.Mutator(rng, native_oracle.seed_corpus(rng))
    deadline = time.monotonic() + seconds
    count = 0
    for data in mutator:
        one_input(data)
        count += 1
        if count % 1000 == 0 and time.monotonic() > deadline:
            break
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", action="store_true", help="the Python mutation loop")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parent / "corpus")
    args, rest = parser.parse_known_args()
    if native_oracle.EXT is None:
        sys.exit("the native extension is not built: nothing to fuzz")
    if args.random or atheris is None:
        count = run_random(args.seconds, args.seed)
        print(f"{count} inputs, no disagreement (random mutation, seed {args.seed})")
        return
    seeds = native_oracle.seed_corpus(random.Random(args.seed), 50)
    corpus = args.corpus
    corpus.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(seeds):
        (corpus / f"seed-{i:03d}").write_bytes(seed)
    atheris.Setup([sys.argv[0], *rest, str(corpus)], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
