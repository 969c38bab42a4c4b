"""Static types of plan Exprs, for ``air._plan_checks``: paths through schemas, and how much of
an Expr can be checked against the schema it must produce before the plan runs.

What can be known before a run: a constant's value (normalised by the schema, as the kernel
will), a record / variant / list construct's shape (walked field by field), and a typed ref's
type (the checker is told how to type a ref: ``ref_type``). Ops are not typed: their results
depend on values. Every finding goes to ``report(pointer, code, detail)``; the walk goes on.

Compatibility of two types (``fits``) is deliberately lenient where the kernel checks at run
time anyway: ``int`` and ``nat`` fit each other (the range is checked when the value exists), a
value fits its option, a record fits one with extra option fields, a list fits a set. It is
strict where no value could pass: a record where text is needed, an option where its item is
needed (``null`` would not pass), a field the schema does not have.

Not here: which refs a step may read (``air._plan_checks``), or evaluating anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from air import expr
from air._diagnostics import escape_pointer
from air.errors import ValueMismatch
from air.types import (
    ListT,
    MapT,
    OptionT,
    Prim,
    Record,
    Ref,
    Schemas,
    SetT,
    TypeNode,
    Variant,
    resolve,
    type_to_obj,
)
from air.values import normalise

__all__ = ["FITS_DEPTH_MAX", "PlanTypes", "describe"]

FITS_DEPTH_MAX = 32
"""How deep ``fits`` compares two types before it gives them the benefit of the doubt (types
are finite, AIR has no recursive schemas: this only bounds the work on a very tall type)."""

Report = Callable[[str, str, str], None]
"""``report(pointer, code, detail)``."""
RefType = Callable[[expr.Ref], TypeNode | None]
"""The type of what a ref reads, or None where it cannot be known."""


def describe(node: TypeNode) -> str:
    """A type for a message: a schema or primitive name, else its canonical JSON."""
    if isinstance(node, Ref | Prim):
        return node.name
    return json.dumps(type_to_obj(node), separators=(",", ":"))


@dataclass(frozen=True)
class PlanTypes:
    schemas: Schemas
    report: Report

    def walk(self, node: TypeNode, path: tuple[str, ...]) -> tuple[TypeNode | None, int | None]:
        """The type at ``path`` below ``node``, as a ref's dotted path selects it:
        (the type or None if unknown, the index of a segment the type does not have)."""
        for i, segment in enumerate(path):
            try:
                node = resolve(node, self.schemas)
                while isinstance(node, OptionT):  # into an absent option fails at run time
                    node = resolve(node.item, self.schemas)
            except ValueMismatch:
                return None, None
            if isinstance(node, Record):
                found = node.field_map().get(segment)
                if found is None:
                    return None, i
                node = found
            elif isinstance(node, Variant):
                if segment == "$value":
                    return None, None  # its type depends on the value's case
                if segment != "$tag":
                    return None, i
                node = Prim("text")
            elif isinstance(node, MapT):
                if node.key != Prim("text"):
                    return None, None  # a dotted path reads text keys only: a run-time miss
                node = node.value
            else:
                return None, i
        return node, None

    def conform(self, node: expr.Expr, want: TypeNode, ref_type: RefType) -> None:
        """Check the parts of ``node`` whose type is known now against ``want``."""
        try:
            target = resolve(want, self.schemas)
        except ValueMismatch:
            return
        if isinstance(node, expr.Const):
            try:
                normalise(target, node.value, self.schemas, node.pointer)
            except ValueMismatch as exc:
                detail = f"literal does not match {describe(want)}: {exc.detail}"
                self.report(exc.pointer, "air.value.mismatch", detail)
        elif isinstance(node, expr.Ref):
            found = ref_type(node)
            if found is not None and not self.fits(found, target):
                shown = "@" + ".".join((node.root, *node.path))
                detail = f"{shown} is {describe(found)}; {describe(want)} is needed"
                self.report(node.pointer, "air.plan.ref.type_mismatch", detail)
        elif isinstance(node, expr.Op):
            return  # ops are not typed statically
        elif isinstance(target, OptionT):
            self.conform(node, target.item, ref_type)  # "some" is the value itself
        else:
            self._construct(node, want, target, ref_type)

    def _construct(
        self, node: expr.Expr, want: TypeNode, target: TypeNode, ref_type: RefType
    ) -> None:
        def mismatch(pointer: str, detail: str) -> None:
            self.report(pointer, "air.value.mismatch", f"{detail} ({describe(want)})")

        if isinstance(node, expr.MakeRecord) and isinstance(target, Record):
            fields = target.field_map()
            for name, sub in node.fields:
                if name in fields:
                    self.conform(sub, fields[name], ref_type)
                else:
                    at = f"{node.pointer}/record/{escape_pointer(name)}"
                    mismatch(at, f"unknown field {name!r}")
            given = dict(node.fields)
            for name, sub_type in target.fields:
                if name not in given and not self.is_option(sub_type):
                    mismatch(f"{node.pointer}/record", f"missing field {name!r}")
        elif isinstance(node, expr.MakeRecord) and isinstance(target, MapT):
            for _name, sub in node.fields:
                self.conform(sub, target.value, ref_type)
        elif isinstance(node, expr.MakeVariant) and isinstance(target, Variant):
            cases = target.case_map()
            if node.tag in cases:
                self.conform(node.value, cases[node.tag], ref_type)
            else:
                mismatch(f"{node.pointer}/variant/tag", f"unknown case {node.tag!r}")
        elif isinstance(node, expr.MakeList) and isinstance(target, ListT | SetT):
            for item in node.items:
                self.conform(item, target.item, ref_type)
        else:
            kind = type(node).__name__.removeprefix("Make").lower()
            mismatch(node.pointer, f"a {kind} construct where {describe(target)} is needed")

    def is_option(self, node: TypeNode) -> bool:
        """Whether ``node`` is an option (an absent record field is then null); an unknown
        schema counts as one, so it is not reported missing as well as unknown."""
        try:
            return isinstance(resolve(node, self.schemas), OptionT)
        except ValueMismatch:
            return True

    def fits(self, src: TypeNode, dst: TypeNode, depth: int = 0) -> bool:
        """Whether a value of ``src`` can be a value of ``dst``, as far as types can tell."""
        try:
            src, dst = resolve(src, self.schemas), resolve(dst, self.schemas)
        except ValueMismatch:
            return True
        if depth > FITS_DEPTH_MAX or type_to_obj(src) == type_to_obj(dst):
            return True
        deeper = depth + 1
        if isinstance(dst, OptionT):
            inner = src.item if isinstance(src, OptionT) else src
            return self.fits(inner, dst.item, deeper)
        if isinstance(src, Prim) and isinstance(dst, Prim):
            return {src.name, dst.name} <= {"int", "nat"}
        if isinstance(src, Record) and isinstance(dst, Record):
            have, need = src.field_map(), dst.field_map()
            return set(have) <= set(need) and all(
                self.fits(have[n], t, deeper) if n in have else self.is_option(t)
                for n, t in need.items()
            )
        if isinstance(src, Variant) and isinstance(dst, Variant):
            cases = dst.case_map()
            return all(n in cases and self.fits(t, cases[n], deeper) for n, t in src.cases)
        if isinstance(src, ListT | SetT) and isinstance(dst, ListT | SetT):
            return self.fits(src.item, dst.item, deeper)
        if isinstance(src, MapT) and isinstance(dst, MapT):
            return self.fits(src.key, dst.key, deeper) and self.fits(src.value, dst.value, deeper)
        return False
