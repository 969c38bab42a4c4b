"""AIR: the world's control plane. Types, values, canonical CBOR, manifests, Expr.

Invariants:
- Pure: nothing here reads files, clocks, randomness or the environment (``tests/project/test_purity.py``).
- One canonical form: every value is normalised by its schema before it is hashed or stored,
  and its bytes are canonical CBOR (RFC 8949 core deterministic encoding, map keys in bytewise
  order); a content address is ``blake3:<hex>`` of those bytes.
- Loading never raises on bad input of its own: every finding is a ``Diagnostic`` naming the
  file, a JSON pointer and a stable code, all of them raised at once as ``ManifestError``.

Public modules: ``cbor`` (``dumps``, ``loads``, ``content_hash``), ``errors`` (the error tree of
the whole project), ``jsontext`` (the one strict JSON reader), ``types`` (type nodes and their
JSON forms), ``values`` (normalise, check, sugar), ``expr`` (the Expr language). This face
exports the rest of the supported API: loading (``load_air`` and what it takes and gives) and
the compiled value checkers, what one AIR changes against another (``diff_air``), and a loaded
AIR in AgentOS's strict form (``normalize_air``).

Private parts: ``_loader`` (the loading pipeline), ``_builtins`` (which built-in defs enter a
world), ``_loaded`` (what it produces), ``_diff`` (the diff of two AIRs), ``_model`` (pydantic
shapes), ``_validate``, ``_ctx`` and ``_plan_checks`` (semantic validation),
``_plan_types`` and ``_plan_old_shapes`` (plan typing, earlier step shapes), ``_canonical``
(canonical forms and hashes), ``_diagnostics`` (the codes), ``_normalize`` (AgentOS's strict
form), ``_scalars`` and ``_checkers`` (primitive values, compiled checks), ``_expr_eval`` (the
evaluator).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from air._checkers import SchemaCheckers, compile_checker
    from air._diff import AirDiff, ReducerChange, diff_air, same_state_shape
    from air._loaded import AirSource, LoadedAir, Located, WasmInfo, resolve_relative
    from air._loader import load_air
    from air._normalize import NormalizedAir, Unmapped, normalize_air

__all__ = [
    "AirDiff",
    "AirSource",
    "LoadedAir",
    "Located",
    "NormalizedAir",
    "ReducerChange",
    "SchemaCheckers",
    "Unmapped",
    "WasmInfo",
    "compile_checker",
    "diff_air",
    "load_air",
    "normalize_air",
    "resolve_relative",
    "same_state_shape",
]


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``air._face``): ``world --help``
    imports ``air.errors`` alone, and pydantic (the loader's) must not come with it."""
    if name not in __all__:  # first: the imports below look their submodules up here
        raise AttributeError(f"module 'air' has no attribute {name!r}")
    from air import _checkers, _diff, _face, _loaded, _loader, _normalize

    modules = (_loaded, _loader, _checkers, _diff, _normalize)
    return _face.export("air", name, modules, globals())
