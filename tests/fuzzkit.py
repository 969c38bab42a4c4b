"""The native fuzzing oracle (``tools/fuzz/native_oracle.py``) for the tests that use it: a
library beside the fuzzer, not a package, so it is loaded from its file once."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Final

from air import cbor
from air.errors import CborError
from kernel import native

FUZZ = Path(__file__).resolve().parents[1] / "tools" / "fuzz"
EXAMPLES_SCALE = float(os.environ.get("WORLD_EXAMPLES_SCALE", "1"))
"""Scales the property tests' example counts (``examples``): the ASan run of the native tests
(``tests/kernel/native/test_native_asan.py``) sets it below 1, where every example costs ~5 times as much and
what it adds is a check of each C access on the paths the examples reach."""


def examples(count: int) -> int:
    """``count`` hypothesis examples, scaled by ``WORLD_EXAMPLES_SCALE`` (at least 10)."""
    return max(10, round(count * EXAMPLES_SCALE))


def load_oracle() -> Any:
    if "native_oracle" not in sys.modules:
        spec = importlib.util.spec_from_file_location("native_oracle", FUZZ / "native_oracle.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["native_oracle"] = module
        spec.loader.exec_module(module)
    return sys.modules["native_oracle"]


REFUSED: Final = object()
"""What ``native_loads`` and ``python_loads`` answer for bytes their decoder refuses."""


def native_loads(data: bytes) -> Any:
    """The C decoder alone: ``REFUSED`` where it declines (``kernel.native.loads`` would then
    run the reference)."""
    try:
        return native.built().loads(data)
    except ValueError:
        return REFUSED


def python_loads(data: bytes) -> Any:
    """The reference decoder (``air.cbor.loads``): ``REFUSED`` where it refuses."""
    try:
        return cbor.loads(data)
    except CborError:
        return REFUSED
