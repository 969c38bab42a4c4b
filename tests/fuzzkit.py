"""The native fuzzing oracle (``tools/fuzz/native_oracle.py``) for the tests that use it: a
library beside the fuzzer, not a package, so it is loaded from its file once."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

FUZZ = Path(__file__).resolve().parents[1] / "tools" / "fuzz"


def load_oracle() -> Any:
    if "native_oracle" not in sys.modules:
        spec = importlib.util.spec_from_file_location("native_oracle", FUZZ / "native_oracle.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["native_oracle"] = module
        spec.loader.exec_module(module)
    return sys.modules["native_oracle"]
