"""The AIR type system: type nodes, their JSON forms, and schema hashing.

A type is written in JSON in one of these forms (all equivalent where they overlap):

- a primitive by name: ``"nat"`` or ``{"nat": {}}`` (bool int nat dec128 bytes text time
  duration hash uuid unit)
- a reference to a schema: ``"ns/Name@1"`` or ``{"ref": "ns/Name@1"}``
- ``{"record": {"field": T, ...}}``, ``{"variant": {"Case": T, ...}}``
- ``{"list": T}``, ``{"set": T}``, ``{"option": T}``, ``{"map": {"key": K, "value": V}}``

``parse_type`` turns any of them into frozen nodes; ``type_to_obj`` gives the one canonical
form (``{"nat": {}}``, ``{"ref": name}``, records and variants as maps, which canonical CBOR
sorts), so the same type authored either way hashes the same. Record fields and variant cases
keep no declaration order: identity is by name, as in the canonical CBOR of values.

Invariants: nodes are immutable and hashable; a ``Ref`` is resolved through a ``Schemas``
mapping (name -> node) only when a value is checked, so recursive schemas are representable
here (AIR v1 itself has none: ``air._loader`` refuses a cycle of schemas); map keys are
restricted to int, nat, text, uuid and hash (checked after refs resolve). A type expression is
at most ``TYPE_DEPTH_MAX`` levels deep, so every walk of a node's own tree (``type_to_obj``,
``type_refs``) stays far from Python's recursion limit; member names are Unicode text (no lone
surrogates), since they become canonical CBOR.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from air import cbor
from air.errors import ValueMismatch

__all__ = [
    "DEF_NAME_MAX",
    "MAP_KEY_PRIMS",
    "PRIMS",
    "TYPE_DEPTH_MAX",
    "ListT",
    "MapT",
    "OptionT",
    "Prim",
    "Record",
    "Ref",
    "Schemas",
    "SetT",
    "TypeNode",
    "Variant",
    "def_name_problem",
    "is_def_name",
    "parse_type",
    "resolve",
    "schema_hash",
    "type_refs",
    "type_to_obj",
]

PRIMS: Final = frozenset(
    {"bool", "int", "nat", "dec128", "bytes", "text", "time", "duration", "hash", "uuid", "unit"}
)
MAP_KEY_PRIMS: Final = frozenset({"int", "nat", "text", "uuid", "hash"})
TYPE_DEPTH_MAX: Final = 64
"""Most type constructors (record, variant, list, set, option, map) nested in one type
expression; refs to other schemas start a new count. Deeper is ``type.invalid``."""


@dataclass(frozen=True, slots=True)
class Prim:
    name: str


@dataclass(frozen=True, slots=True)
class Ref:
    name: str


@dataclass(frozen=True, slots=True)
class Record:
    fields: tuple[tuple[str, TypeNode], ...]

    def field_map(self) -> dict[str, TypeNode]:
        return dict(self.fields)


@dataclass(frozen=True, slots=True)
class Variant:
    cases: tuple[tuple[str, TypeNode], ...]

    def case_map(self) -> dict[str, TypeNode]:
        return dict(self.cases)


@dataclass(frozen=True, slots=True)
class ListT:
    item: TypeNode


@dataclass(frozen=True, slots=True)
class SetT:
    item: TypeNode


@dataclass(frozen=True, slots=True)
class OptionT:
    item: TypeNode


@dataclass(frozen=True, slots=True)
class MapT:
    key: TypeNode
    value: TypeNode


TypeNode: TypeAlias = Prim | Ref | Record | Variant | ListT | SetT | OptionT | MapT
Schemas: TypeAlias = Mapping[str, TypeNode]

_WRAPPERS: Final[dict[str, type[ListT] | type[SetT] | type[OptionT]]] = {
    "list": ListT,
    "set": SetT,
    "option": OptionT,
}


DEF_NAME_MAX: Final = 128
"""Most characters in a def name, all of it: names become journal subjects, file names in
exports and keys of every table, so one has a bound."""
_SEGMENT_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_VERSION_RE: Final = re.compile(r"[1-9][0-9]*")


def def_name_problem(text: object) -> str | None:
    """Why ``text`` is not a def name, or None if it is one. The one grammar of AIR names:

    ``namespace/name@version``: exactly one ``/`` and one ``@``; namespace and name each of
    ASCII letters, digits, ``_``, ``-`` and ``.``, starting with a letter, digit or ``_``, with
    no ``..`` and no trailing ``.``; version a positive decimal integer without leading zeros;
    at most ``DEF_NAME_MAX`` characters. ``sys/HttpRequest@1``, ``com.acme/Thing@1`` and
    ``sys/http.out@1`` are names. Every such name is also a run of two journal subject segments
    (``kernel.subjects``), so a world's subjects can always be built from its names.
    ASCII only: a Cyrillic letter that looks like a Latin one would make two defs that read the
    same; whitespace, ``*``, ``>`` and control characters would break subjects and terminals.
    """
    if not isinstance(text, str):
        return "a def name is text"
    if not text:
        return "the name is empty"
    if len(text) > DEF_NAME_MAX:
        return f"longer than DEF_NAME_MAX={DEF_NAME_MAX} characters ({len(text)})"
    head, at, version = text.partition("@")
    if not at:
        return "no @version: a def name is namespace/name@version"
    if "@" in version:
        return "more than one '@'"
    namespace, slash, name = head.partition("/")
    if not slash:
        return "no '/': a def name is namespace/name@version"
    if "/" in name:
        return "more than one '/'"
    for role, part in (("namespace", namespace), ("name", name)):
        problem = _segment_problem(part)
        if problem is not None:
            return f"the {role} {problem}"
    if _VERSION_RE.fullmatch(version) is None:
        return f"version {version!r} is not a positive decimal integer without leading zeros"
    return None


def _segment_problem(part: str) -> str | None:
    if not part:
        return "is empty"
    if _SEGMENT_RE.fullmatch(part) is None:
        if part.startswith((".", "-")):
            return f"{part!r} starts with {part[0]!r}"
        return f"{part!r} has a character other than ASCII letters, digits, '_', '-' and '.'"
    if ".." in part:
        return f"{part!r} has '..'"
    if part.endswith("."):
        return f"{part!r} ends with '.'"
    return None


def is_def_name(text: object) -> bool:
    """Whether ``text`` is a def name (``def_name_problem`` says why not)."""
    return def_name_problem(text) is None


def _bad(pointer: str, detail: str) -> ValueMismatch:
    return ValueMismatch(pointer, "type.invalid", detail)


def parse_type(obj: Any, pointer: str = "") -> TypeNode:
    """Parse a type in any accepted JSON form; raise ``ValueMismatch(code='type.invalid')``."""
    return _parse(obj, pointer, 0)


def _parse(obj: Any, pointer: str, depth: int) -> TypeNode:
    if depth > TYPE_DEPTH_MAX:
        raise _bad(pointer, f"type nested deeper than TYPE_DEPTH_MAX={TYPE_DEPTH_MAX}")
    if isinstance(obj, str):
        if obj in PRIMS:
            return Prim(obj)
        problem = def_name_problem(obj)
        if problem is None:
            return Ref(obj)
        if "/" in obj or "@" in obj:  # meant as a schema name: say what is wrong with it
            raise _bad(pointer, f"{_short(obj)} is not a schema name: {problem}")
        raise _bad(pointer, f"unknown type {_short(obj)}")
    if not isinstance(obj, dict) or len(obj) != 1:
        raise _bad(pointer, "a type is a name or an object with exactly one key")
    ((kind, body),) = obj.items()
    if not isinstance(kind, str):
        raise _bad(pointer, "a type kind is text")
    at = f"{pointer}/{_escape(kind)}"
    if kind in PRIMS:
        if body not in ({}, None):
            raise _bad(at, f"primitive {kind} takes no parameters")
        return Prim(kind)
    if kind == "ref":
        problem = def_name_problem(body)
        if problem is not None:
            raise _bad(at, f"ref must name a schema as namespace/name@version: {problem}")
        return Ref(body)
    if kind in ("record", "variant"):
        return _parse_fields(kind, body, at, depth + 1)
    if kind in _WRAPPERS:
        return _WRAPPERS[kind](_parse(body, at, depth + 1))
    if kind == "map":
        if not isinstance(body, dict) or set(body) != {"key", "value"}:
            raise _bad(at, "map needs exactly 'key' and 'value'")
        key = _parse(body["key"], f"{at}/key", depth + 1)
        if isinstance(key, Prim) and key.name not in MAP_KEY_PRIMS:
            raise _bad(f"{at}/key", f"map keys must be one of {sorted(MAP_KEY_PRIMS)}")
        return MapT(key, _parse(body["value"], f"{at}/value", depth + 1))
    raise _bad(pointer, f"unknown type kind {_short(kind)}")


def _short(text: str) -> str:
    return repr(text) if len(text) <= 80 else repr(text[:80]) + "..."


def _parse_fields(kind: str, body: Any, at: str, depth: int) -> TypeNode:
    if not isinstance(body, dict):
        raise _bad(at, f"{kind} takes an object of names to types")
    if kind == "variant" and not body:
        raise _bad(at, "a variant needs at least one case")
    items = []
    for name, sub in body.items():
        if not _member_name(name):
            shown = _short(name) if isinstance(name, str) else f"<{type(name).__name__}>"
            raise _bad(at, f"invalid {kind} member name {shown}")
        items.append((name, _parse(sub, f"{at}/{_escape(name)}", depth)))
    items.sort()
    return Record(tuple(items)) if kind == "record" else Variant(tuple(items))


def _member_name(name: Any) -> bool:
    if not isinstance(name, str) or not name or name.startswith("$"):
        return False
    return name.isascii() or not any("\ud800" <= char <= "\udfff" for char in name)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def type_to_obj(node: TypeNode) -> Any:
    """The canonical JSON/CBOR object of a type (the form that is hashed)."""
    if isinstance(node, Prim):
        return {node.name: {}}
    if isinstance(node, Ref):
        return {"ref": node.name}
    if isinstance(node, Record):
        return {"record": {name: type_to_obj(sub) for name, sub in node.fields}}
    if isinstance(node, Variant):
        return {"variant": {name: type_to_obj(sub) for name, sub in node.cases}}
    if isinstance(node, MapT):
        return {"map": {"key": type_to_obj(node.key), "value": type_to_obj(node.value)}}
    kind = {ListT: "list", SetT: "set", OptionT: "option"}[type(node)]
    return {kind: type_to_obj(node.item)}


def type_refs(node: TypeNode) -> set[str]:
    """Every schema name a type refers to directly (not transitively)."""
    if isinstance(node, Ref):
        return {node.name}
    if isinstance(node, Record | Variant):
        members = node.fields if isinstance(node, Record) else node.cases
        return set().union(*(type_refs(sub) for _, sub in members)) if members else set()
    if isinstance(node, MapT):
        return type_refs(node.key) | type_refs(node.value)
    if isinstance(node, ListT | SetT | OptionT):
        return type_refs(node.item)
    return set()


def resolve(node: TypeNode, schemas: Schemas, pointer: str = "") -> TypeNode:
    """Follow refs until a structural node; raise ``ValueMismatch`` for an unknown or cyclic ref."""
    if not isinstance(node, Ref):  # most calls, from every value walk: no set to build
        return node
    seen: set[str] = set()
    while isinstance(node, Ref):
        if node.name in seen:
            raise ValueMismatch(pointer, "type.ref_cycle", f"schema {node.name} refers to itself")
        seen.add(node.name)
        target = schemas.get(node.name)
        if target is None:
            raise ValueMismatch(pointer, "type.ref_unknown", f"unknown schema {node.name}")
        node = target
    return node


def schema_hash(node: TypeNode) -> str:
    """Content address of a type's canonical form (refs are hashed by name)."""
    return cbor.content_hash(cbor.dumps(type_to_obj(node)))
