"""The built-in ``sys/`` defs in a world's AIR: which of them enter it, and when an author's
definition is the built-in one. Pure, for ``air._loader`` (which parses both catalogues and
calls these two rules at its registering step).

Built-ins come in two catalogues. ``sys.air.json`` (the caller's built-in sources): every def
of it is in every world. The *on-demand* one (``air.sys.ondemand``, which the loader adds
itself): a def of it enters the world only when the AIR refers to it, so a def added there
changes no existing world's manifest hash. The rule (``ondemand_wanted``): an on-demand def
enters when some string value anywhere in the AIR's documents (a type's ref, a manifest list, a
plan's ``input``, ...) is its name, or, for a ``defeffect``, its ``effect_kind`` (a plan's
``emit_effect``, a reducer's ``effects_emitted``, a policy rule's ``effect_kind``); and then,
transitively, every on-demand def the entered ones name. A def of the author's that provides the
same effect kind under another name keeps the kind to itself (the on-demand effect does not
enter by kind). Every string counts, a text literal equal to the name too: the def then enters
and nothing else changes.

An author's identical definition of a built-in def (on-demand or not) is accepted as the
built-in (``same_as_builtin``: the same canonical form once refs to built-in schemas are
expanded, as AgentOS's examples write them); a different one is a duplicate, which the loader
reports.
"""

from __future__ import annotations

from typing import Any

from air import _canonical as canonical
from air._loaded import AirSource, Located
from air._model import DefEffect, DefSchema
from air.errors import CborError, ValueMismatch
from air.types import (
    ListT,
    MapT,
    OptionT,
    Record,
    Ref,
    SetT,
    TypeNode,
    Variant,
    parse_type,
    type_to_obj,
)

__all__ = ["ondemand_wanted", "same_as_builtin"]


def _strings(obj: Any, out: set[str]) -> None:
    """Add every string value inside ``obj`` (not the keys) to ``out``; iterative."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.add(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def ondemand_wanted(
    docs: list[tuple[AirSource, str, Any]], catalogue: list[Located]
) -> list[Located]:
    """The defs of the on-demand ``catalogue`` the AIR's ``docs`` refer to, with those they
    refer to (the module docstring), in catalogue order."""
    by_name = {loc.model.name: loc for loc in catalogue}
    mentioned: set[str] = set()
    taken_kinds: set[str] = set()
    for _source, _pointer, obj in docs:
        if isinstance(obj, dict) and obj.get("$kind") == "defcap":
            obj = {k: v for k, v in obj.items() if k != "enforcer"}  # a name, no reference
        _strings(obj, mentioned)
        if isinstance(obj, dict) and obj.get("$kind") == "defeffect":
            builtin = by_name.get(str(obj.get("name")))
            if builtin is None or not isinstance(builtin.model, DefEffect):
                taken_kinds.add(str(obj.get("effect_kind")))
    wanted = {
        name
        for name, loc in by_name.items()
        if name in mentioned
        or (
            isinstance(loc.model, DefEffect)
            and loc.model.effect_kind in mentioned
            and loc.model.effect_kind not in taken_kinds
        )
    }
    todo = sorted(wanted)
    while todo:
        names: set[str] = set()
        _strings(by_name[todo.pop()].raw, names)
        for name in sorted(names & by_name.keys() - wanted):
            wanted.add(name)
            todo.append(name)
    return [loc for loc in catalogue if loc.model.name in wanted]


def same_as_builtin(loc: Located, builtin: Located, defs: dict[str, Located]) -> bool:
    """Whether ``loc`` defines what the built-in def ``builtin`` does: the same canonical form
    once every ref to a built-in schema in their types is replaced by that schema's type (so
    AgentOS's ``sys/timer@1`` with ``"schema": {"record": {}}`` is ours, whose schema is the
    built-in ``sys/EmptyCap@1``, a ``{"record": {}}``). Anything that does not parse is not
    the same (its own diagnostics say why)."""
    if type(loc.model) is not type(builtin.model):
        return False
    try:
        mine, theirs = (_expanded(canonical.def_canonical(d.model), defs) for d in (loc, builtin))
    except (ValueMismatch, CborError, RecursionError):
        return False
    return mine == theirs


_TYPE_FIELDS = {"defschema": ("type",), "defcap": ("schema",)}
"""The fields holding a type in the canonical forms of the defs a built-in may be."""


def _expanded(form: dict[str, Any], defs: dict[str, Located]) -> dict[str, Any]:
    out = dict(form)
    for field_name in _TYPE_FIELDS.get(str(form.get("$kind")), ()):
        out[field_name] = type_to_obj(_expand(parse_type(form[field_name]), defs, 0))
    return out


def _expand(node: TypeNode, defs: dict[str, Located], depth: int) -> TypeNode:
    """``node`` with each ref to a built-in schema replaced by its type (built-ins have no
    cycles; ``depth`` guards anyway)."""
    if depth > 64:
        raise ValueMismatch("", "type.invalid", "built-in schemas nested too deep")
    if isinstance(node, Ref):
        target = defs.get(node.name)
        if target is None or not target.builtin or not isinstance(target.model, DefSchema):
            return node
        return _expand(parse_type(target.model.type), defs, depth + 1)
    if isinstance(node, Record | Variant):
        parts = tuple((k, _expand(v, defs, depth + 1)) for k, v in _parts(node))
        return Record(parts) if isinstance(node, Record) else Variant(parts)
    if isinstance(node, ListT | SetT | OptionT):
        return type(node)(_expand(node.item, defs, depth + 1))
    if isinstance(node, MapT):
        return MapT(_expand(node.key, defs, depth + 1), _expand(node.value, defs, depth + 1))
    return node


def _parts(node: Record | Variant) -> tuple[tuple[str, TypeNode], ...]:
    return node.fields if isinstance(node, Record) else node.cases
