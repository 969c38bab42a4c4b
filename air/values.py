"""AIR values: normalisation from either JSON lens, strict checking, and display as sugar JSON.

Three entry points walk a value alongside its type:

- ``normalise(node, value, schemas)``: accepts the *sugar* lens (plain JSON read through the
  type: base64 bytes, ``blake3:`` hashes, RFC 3339 times, ``"Tag"`` for unit variant cases),
  the *tagged* lens (``{"nat": 1}``, ``{"variant": {"tag": T, "value": V}}``, ...), and the
  canonical Python form itself (docs/CONTRACTS.md), and returns the canonical form: sets
  deduplicated and sorted, maps keyed by typed keys, numbers range-checked.
- ``check(node, obj, schemas)``: the strict walk for values decoded from canonical CBOR (reducer
  outputs, journal bodies): only the canonical form is accepted, nothing is converted.
  ``compile_checker`` and ``SchemaCheckers`` give the same decisions and errors for the hot
  path, from closures built once per type (``air._checkers``).
- ``to_sugar(node, obj, schemas)``: canonical form back to sugar JSON for display.

A one-key object whose key is the type's own kind (``{"nat": 1}`` for a nat) is read as the
tagged lens. The only ambiguity is a record with a field named ``record`` (read as sugar) and a
``map<text, _>`` holding the single key ``map`` with a list value (read as tagged); both are
documented here rather than guessed around elsewhere.

Every failure is a ``ValueMismatch(pointer, code, detail)`` with the JSON pointer inside the
value. Each primitive's own normaliser, check and sugar (ranges, dec128, times, durations) is in
``air._scalars``; the names public there are re-exported here.

Bad input from the Python API is a ``ValueMismatch`` too, never a bare Python error:

- Depth. ``normalise``, ``check`` and ``to_sugar`` recurse once per level of the type (record,
  variant, list, set, map, option), so a value nested deeper than ``VALUE_DEPTH_MAX`` levels is
  ``value.too_deep`` (a recursive schema allows any depth; a JSON text cannot go past
  ``air.jsontext.JSON_DEPTH_MAX``). ``compile_checker`` keeps its fast walk only for types that
  cannot reach that depth, so it still decides exactly as ``check`` does.
- Text with a lone surrogate (``"\\ud800"``), as a value or a map key, is ``text.not_unicode``
  in ``normalise``: it has no UTF-8 form, so no canonical CBOR. ``check`` leaves that to
  ``air.cbor``: values it sees were decoded from CBOR, which cannot hold one.
- Integers of any size are range-checked without being printed in full (Python refuses to
  turn an int of more than 4,300 digits into text), and integer text (``"123"``) longer than
  any in-range number is ``range`` before it is converted. Integer text is ASCII digits only.
- Error details show at most a short, flat rendering of the offending value.
"""

from __future__ import annotations

import itertools
from typing import Any, Final

from air import cbor
from air._scalars import (
    INT_MAX,
    INT_MIN,
    NAT_MAX,
    PRIM_NORMALISERS,
    PRIM_SUGAR,
    check_prim,
    dec128_decode,
    dec128_encode,
    mismatch,
    show,
    token,
)
from air.errors import ValueMismatch
from air.types import (
    ListT,
    MapT,
    OptionT,
    Prim,
    Record,
    Schemas,
    SetT,
    TypeNode,
    Variant,
    resolve,
)

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "NAT_MAX",
    "VALUE_DEPTH_MAX",
    "check",
    "dec128_decode",
    "dec128_encode",
    "normalise",
    "to_sugar",
    "value_hash",
]

VALUE_DEPTH_MAX: Final = 128
"""Most type levels (record, variant, list, set, map, option) a value may nest. Below
``air.cbor.CBOR_DEPTH_MAX`` with room for the records the kernel wraps a value in, and low
enough that a walk of it stays far from Python's recursion limit (each level costs two frames)."""


def _too_deep(pointer: str) -> ValueMismatch:
    detail = f"value nested deeper than VALUE_DEPTH_MAX={VALUE_DEPTH_MAX}"
    return mismatch(pointer, "value.too_deep", detail)


# --- normalise -------------------------------------------------------------------------------


def _kind(node: TypeNode) -> str:
    if isinstance(node, Prim):
        return node.name
    return {
        Record: "record",
        Variant: "variant",
        ListT: "list",
        SetT: "set",
        OptionT: "option",
        MapT: "map",
    }[type(node)]


def _untag(node: TypeNode, value: Any) -> Any:
    """Strip the tagged lens's outer ``{"<kind>": ...}`` when the value uses it."""
    if not isinstance(value, dict) or len(value) != 1:
        return value
    kind = _kind(node)
    if kind not in value or "$tag" in value:
        return value
    body = value[kind]
    if isinstance(node, Record) and kind in node.field_map():
        return value
    if isinstance(node, MapT) and not isinstance(body, list):
        return value
    if isinstance(node, Variant):
        if not isinstance(body, dict) or "tag" not in body or not set(body) <= {"tag", "value"}:
            return value
        return {"$tag": body["tag"], "$value": body.get("value")}
    return body


def normalise(
    node: TypeNode, value: Any, schemas: Schemas, pointer: str = "", _depth: int = 0
) -> Any:
    """Normalise ``value`` (sugar, tagged or canonical) to the canonical form of ``node``.

    ``_depth`` is the recursion's own: the type levels around ``value``. (A parameter rather
    than a private twin: one call less per value, as for ``check`` and ``to_sugar``.)
    """
    node = resolve(node, schemas, pointer)
    value = _untag(node, value)
    if isinstance(node, Prim):
        return PRIM_NORMALISERS[node.name](value, pointer)
    if _depth >= VALUE_DEPTH_MAX:  # after the leaves: they are most calls, and cannot nest
        raise _too_deep(pointer)
    depth = _depth + 1
    if isinstance(node, Record):
        return _norm_record(node, value, schemas, pointer, depth)
    if isinstance(node, Variant):
        return _norm_variant(node, value, schemas, pointer, depth)
    if isinstance(node, OptionT):
        if value is None or _tagged_null(node, value, schemas, pointer):
            return None
        return normalise(node.item, value, schemas, pointer, depth)
    if isinstance(node, MapT):
        return _norm_map(node, value, schemas, pointer, depth)
    if not isinstance(value, list | tuple):
        raise mismatch(pointer, "type", f"expected a {_kind(node)}, got {type(value).__name__}")
    assert isinstance(node, ListT | SetT)
    item = node.item
    items = [normalise(item, v, schemas, f"{pointer}/{i}", depth) for i, v in enumerate(value)]
    return _sorted_set(items) if isinstance(node, SetT) else items


def _tagged_null(node: OptionT, value: Any, schemas: Schemas, pointer: str) -> bool:
    """``{"null": {}}``, the tagged lens's none (AgentOS writes an absent option so in a grant's
    params), unless the option's item could itself be written so: a record with a field
    ``null``, or a map (``{"null": {}}`` would be its one entry)."""
    if not (isinstance(value, dict) and len(value) == 1 and value.get("null") == {}):
        return False
    item = resolve(node.item, schemas, pointer)
    if isinstance(item, MapT):
        return False
    return not (isinstance(item, Record) and "null" in item.field_map())


def _sorted_set(items: list[Any]) -> list[Any]:
    by_bytes = {cbor.dumps(item): item for item in items}
    return [by_bytes[key] for key in sorted(by_bytes)]


def _norm_record(
    node: Record, value: Any, schemas: Schemas, pointer: str, depth: int
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise mismatch(pointer, "type", f"expected a record, got {type(value).__name__}")
    fields = node.field_map()
    for name in value:
        if name not in fields:
            at = f"{pointer}/{token(name)}"
            raise mismatch(at, "record.extra", f"unknown field {show(name)}")
    out = {}
    for name, sub in node.fields:
        if name in value:
            out[name] = normalise(sub, value[name], schemas, f"{pointer}/{name}", depth)
        elif isinstance(resolve(sub, schemas, pointer), OptionT):
            out[name] = None
        else:
            raise mismatch(f"{pointer}/{name}", "record.missing", f"missing field {name!r}")
    return out


def _norm_variant(
    node: Variant, value: Any, schemas: Schemas, pointer: str, depth: int
) -> dict[str, Any]:
    cases = node.case_map()
    if isinstance(value, str):
        value = {"$tag": value, "$value": None}
    elif isinstance(value, dict) and len(value) == 1 and "$tag" not in value:
        ((tag, inner),) = value.items()
        if isinstance(tag, str) and tag in cases:  # AgentOS's sugar: {"Case": value}
            value = {"$tag": tag, "$value": inner}
    if not isinstance(value, dict) or "$tag" not in value or not set(value) <= {"$tag", "$value"}:
        raise mismatch(pointer, "type", 'expected a variant {"$tag": T, "$value": V}')
    tag = value["$tag"]
    if not isinstance(tag, str) or tag not in cases:  # a list tag would not even hash
        raise mismatch(f"{pointer}/$tag", "variant.tag", f"unknown case {show(tag)}")
    inner = normalise(cases[tag], value.get("$value"), schemas, f"{pointer}/$value", depth)
    return {"$tag": tag, "$value": inner}


def _norm_map(node: MapT, value: Any, schemas: Schemas, pointer: str, depth: int) -> dict[Any, Any]:
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list | tuple):
        pairs = [_pair(item, f"{pointer}/{i}") for i, item in enumerate(value)]
    else:
        raise mismatch(pointer, "type", f"expected a map, got {type(value).__name__}")
    out: dict[Any, Any] = {}
    for raw_key, raw_value in pairs:
        at = f"{pointer}/{raw_key if type(raw_key) is str else token(raw_key)}"
        key = normalise(node.key, raw_key, schemas, at, depth)
        if key in out:
            raise mismatch(at, "map.duplicate", f"duplicate map key {show(raw_key)}")
        out[key] = normalise(node.value, raw_value, schemas, at, depth)
    return {key: out[key] for key in sorted(out, key=cbor.dumps)}


def _pair(item: Any, pointer: str) -> tuple[Any, Any]:
    if isinstance(item, dict) and set(item) == {"key", "value"}:
        return item["key"], item["value"]
    if isinstance(item, list | tuple) and len(item) == 2:
        return item[0], item[1]
    raise mismatch(pointer, "map.entry", "map entries are [key, value] or {key, value}")


# --- check (strict, canonical form only) -----------------------------------------------------


def check(node: TypeNode, obj: Any, schemas: Schemas, pointer: str = "", _depth: int = 0) -> None:
    """Raise ``ValueMismatch`` unless ``obj`` is exactly the canonical form of a ``node`` value.
    (``_depth`` is the recursion's own, as for ``normalise``.)"""
    node = resolve(node, schemas, pointer)
    if isinstance(node, Prim):
        check_prim(node.name, obj, pointer)
        return
    if _depth >= VALUE_DEPTH_MAX:
        raise _too_deep(pointer)
    depth = _depth + 1
    if isinstance(node, Record):
        if not isinstance(obj, dict) or len(obj) != len(node.fields):
            _check_record_shape(node, obj, pointer)
        for name, sub in node.fields:
            if name not in obj:
                raise mismatch(f"{pointer}/{name}", "record.missing", f"missing field {name!r}")
            check(sub, obj[name], schemas, f"{pointer}/{name}", depth)
    elif isinstance(node, Variant):
        if not isinstance(obj, dict) or set(obj) != {"$tag", "$value"}:
            raise mismatch(pointer, "type", 'expected a variant {"$tag", "$value"}')
        tag = obj["$tag"]
        case_type = node.case_map().get(tag) if isinstance(tag, str) else None
        if case_type is None:
            raise mismatch(f"{pointer}/$tag", "variant.tag", f"unknown case {show(tag)}")
        check(case_type, obj["$value"], schemas, f"{pointer}/$value", depth)
    elif isinstance(node, OptionT):
        if obj is not None:
            check(node.item, obj, schemas, pointer, depth)
    else:
        _check_collection(node, obj, schemas, pointer, depth)


def _check_record_shape(node: Record, obj: Any, pointer: str) -> None:
    if not isinstance(obj, dict):
        raise mismatch(pointer, "type", f"expected a record, got {type(obj).__name__}")
    fields = node.field_map()
    for name in obj:
        if name not in fields:
            at = f"{pointer}/{token(name)}"
            raise mismatch(at, "record.extra", f"unknown field {show(name)}")


def _check_collection(node: TypeNode, obj: Any, schemas: Schemas, pointer: str, depth: int) -> None:
    if isinstance(node, MapT):
        if not isinstance(obj, dict):
            raise mismatch(pointer, "type", "expected a map")
        for key, sub in obj.items():
            at = f"{pointer}/{key if type(key) is str else token(key)}"
            check(node.key, key, schemas, at, depth)
            check(node.value, sub, schemas, at, depth)
        return
    assert isinstance(node, ListT | SetT)
    if not isinstance(obj, list):
        raise mismatch(pointer, "type", f"expected a {_kind(node)}")
    for i, item in enumerate(obj):
        check(node.item, item, schemas, f"{pointer}/{i}", depth)
    if isinstance(node, SetT):
        encoded = [cbor.dumps(item) for item in obj]
        if any(a >= b for a, b in itertools.pairwise(encoded)):
            raise mismatch(pointer, "set.order", "set elements must be unique and sorted")


# --- display ---------------------------------------------------------------------------------


def to_sugar(node: TypeNode, obj: Any, schemas: Schemas, _depth: int = 0) -> Any:
    """Canonical form to sugar JSON (the inverse of ``normalise`` on the sugar lens).

    Deeper than ``VALUE_DEPTH_MAX`` is ``value.too_deep`` at the root pointer: this is for
    canonical values, which ``check`` bounds already, so it does not track where it is.
    (``_depth`` is the recursion's own: the levels around ``obj``.)
    """
    node = resolve(node, schemas)
    if isinstance(node, Prim):
        sugar = PRIM_SUGAR.get(node.name)
        return obj if sugar is None else sugar(obj)
    if _depth >= VALUE_DEPTH_MAX:
        raise _too_deep("")
    depth = _depth + 1
    if isinstance(node, Record):
        return {name: to_sugar(sub, obj[name], schemas, depth) for name, sub in node.fields}
    if isinstance(node, Variant):
        sub = node.case_map()[obj["$tag"]]
        if isinstance(resolve(sub, schemas), Prim) and obj["$value"] is None:
            return obj["$tag"]
        return {"$tag": obj["$tag"], "$value": to_sugar(sub, obj["$value"], schemas, depth)}
    if isinstance(node, OptionT):
        return None if obj is None else to_sugar(node.item, obj, schemas, depth)
    if isinstance(node, MapT):
        key_node = resolve(node.key, schemas)
        if isinstance(key_node, Prim) and key_node.name == "text":
            return {k: to_sugar(node.value, v, schemas, depth) for k, v in obj.items()}
        return [
            [to_sugar(node.key, k, schemas, depth), to_sugar(node.value, v, schemas, depth)]
            for k, v in obj.items()
        ]
    assert isinstance(node, ListT | SetT)
    return [to_sugar(node.item, item, schemas, depth) for item in obj]


def value_hash(schema_hash_text: str, obj: Any) -> str:
    """Hash of a value bound to its schema: blake3 of canonical ``[schema hash (raw), value]``."""
    return cbor.content_hash(cbor.dumps([cbor.hash_to_raw(schema_hash_text), obj]))
