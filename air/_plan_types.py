"""Static types of plan Exprs, for ``air._plan_checks``: paths through schemas, and how much of
an Expr can be checked against the schema it must produce before the plan runs.

What can be known before a run: a constant's value (normalised by the schema, as the kernel
will), a record / variant / list / set / map construct's shape (walked field by field), a typed
ref's type (the checker is told how to type a ref: ``ref_type``), and the result of the ops
whose result type does not depend on values (``OP_RESULTS``: the request-building ops, whose
args are checked too, and the comparisons). Other ops are not typed. Every finding goes to
``report(pointer, code, detail)``; the walk goes on.

ExprOrValue (``read_expr_or_value``): AgentOS lets ``emit_effect.params``, ``raise_event.event``,
``assign.expr`` and ``end.result`` hold plain JSON read through the position's schema. The
rule, from ``air.expr``: *an Expr form name wins* (``air.expr.is_expr_form``: ``{"op", "args"}``
or a one-key object whose key is an Expr form), ``{"lit": X}`` forces a literal, and anything
else is a literal. A literal is normalised by the schema (either JSON lens of ``air.values``:
record, both variant sugars ``{"Tag": v}`` and ``{"$tag": T, "$value": v}``, maps, lists,
options, bytes as base64...) into a constant, whose canonical Expr JSON (``air.expr.to_json``)
is what the plan then holds; with no schema known it is the plain JSON value (``lit``). Where an
Expr form was read but the plain reading would have fit the schema, the diagnostic says so and
shows the ``lit`` to write.

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
from typing import Any

from air import cbor, expr
from air._diagnostics import escape_pointer
from air._expr_eval import OPS, children, kind_of
from air.errors import ExprError, ValueMismatch
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
from air.values import VALUE_DEPTH_MAX, normalise

__all__ = [
    "FITS_DEPTH_MAX",
    "OP_RESULTS",
    "PlanTypes",
    "author_pointer",
    "describe",
    "desugar_variants",
    "read_expr_or_value",
]

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


_TEXT, _BYTES, _INT, _BOOL = Prim("text"), Prim("bytes"), Prim("int"), Prim("bool")

OP_RESULTS: dict[str, tuple[tuple[TypeNode | None, ...], TypeNode | None]] = {
    "utf8_encode": ((_TEXT,), _BYTES),
    "utf8_decode": ((_BYTES,), _TEXT),
    "base64_encode": ((_BYTES,), _TEXT),
    "base64_decode": ((_TEXT,), _BYTES),
    "int_to_text": ((_INT,), _TEXT),
    "hash": ((None,), Prim("hash")),
    "hash_bytes": ((_BYTES,), Prim("hash")),
    "json_encode": ((None, _TEXT), _TEXT),  # arg 0 is checked against the named schema
    "json_decode": ((_TEXT, _TEXT), None),  # the named schema: see PlanTypes.op_type
    **dict.fromkeys(("eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not"), ((), _BOOL)),
}
"""Op -> (the type each arg must have, None: not checked; the result type, None: see
``op_type``). Ops not here are untyped."""

_PRIM_KINDS = {"nat": "int", "time": "int", "duration": "int", "hash": "bytes", "uuid": "bytes"}
"""Primitives whose values share another primitive's run-time kind (``air.expr``'s kinds)."""


def read_expr_or_value(
    raw: Any, pointer: str, want: TypeNode | None, schemas: Schemas
) -> tuple[expr.Expr | None, list[tuple[str, str, str]]]:
    """Read an ExprOrValue position (module docstring): (the Expr, or None when it cannot be
    read; the findings ``(pointer, code, detail)``). A literal comes back as a constant: its
    ``air.expr.to_json`` is the Expr the plan holds from then on."""
    if expr.is_expr_form(raw):
        try:
            node = expr.parse_expr(raw, pointer)
        except ExprError as exc:
            detail = exc.detail + _lit_hint(raw, want, schemas)
            return None, [(exc.pointer, f"air.{exc.code}", detail)]
        hint = _lit_hint(raw, want, schemas) if isinstance(node, expr.Const) else ""
        if hint and want is not None and isinstance(node, expr.Const):  # say so once, here
            try:
                normalise(want, node.value, schemas, pointer)
            except ValueMismatch as exc:
                detail = f"literal does not match {describe(want)}: {exc.detail}{hint}"
                return None, [(pointer, "air.value.mismatch", detail)]
        return node, []
    forced = type(raw) is dict and set(raw) == {"lit"}
    literal = raw["lit"] if forced else raw
    if want is None:  # a plain JSON value, as lit reads one
        try:
            return expr.parse_expr({"lit": literal}, pointer), []
        except ExprError as exc:
            if not forced:  # the author wrote no lit: point inside what they wrote
                exc_pointer = pointer + exc.pointer[len(pointer) + len("/lit") :]
                return None, [(exc_pointer, f"air.{exc.code}", exc.detail)]
            return None, [(exc.pointer, f"air.{exc.code}", exc.detail)]
    at = f"{pointer}/lit" if forced else pointer
    moves: list[tuple[str, str]] = []
    try:
        value = normalise(want, desugar_variants(want, literal, schemas, at, moves), schemas, at)
    except ValueMismatch as exc:
        detail = f"literal does not match {describe(want)}: {exc.detail}"
        return None, [(author_pointer(exc.pointer, moves), "air.value.mismatch", detail)]
    return expr.Const(cbor.dumps(value), pointer), []


def desugar_variants(
    node: TypeNode,
    value: Any,
    schemas: Schemas,
    pointer: str = "",
    moves: list[tuple[str, str]] | None = None,
    depth: int = 0,
) -> Any:
    """``value`` with AgentOS's variant sugar ``{"Case": v}`` rewritten, wherever ``node`` puts
    a variant, to ``{"$tag": "Case", "$value": v}``, which ``air.values.normalise`` reads (it
    takes the other sugars and the tagged lens itself). Anything it does not recognise is left
    for ``normalise`` to report. Each rewrite appends ``(its pointer in the result, the author's
    pointer)`` to ``moves`` (``author_pointer`` maps a pointer back). Bounded by
    ``VALUE_DEPTH_MAX`` levels, as ``normalise`` is."""
    moves = [] if moves is None else moves
    try:
        node = resolve(node, schemas)
    except ValueMismatch:
        return value
    if depth > VALUE_DEPTH_MAX or isinstance(node, Prim):
        return value
    deeper = depth + 1

    def walk(sub: TypeNode, item: Any, at: str) -> Any:
        return desugar_variants(sub, item, schemas, at, moves, deeper)

    if isinstance(node, OptionT):
        return None if value is None else walk(node.item, value, pointer)
    if isinstance(node, Variant):
        return _desugar_variant(node, value, pointer, walk, moves)
    if isinstance(node, Record) and type(value) is dict:
        fields = node.field_map()
        if set(value) == {"record"} and "record" not in fields and type(value["record"]) is dict:
            moves.append((pointer, f"{pointer}/record"))
            return {"record": walk(node, value["record"], pointer)}
        return {
            k: walk(fields[k], v, f"{pointer}/{k}") if k in fields else v for k, v in value.items()
        }
    if isinstance(node, ListT | SetT):
        kind = "list" if isinstance(node, ListT) else "set"
        if type(value) is dict and set(value) == {kind} and type(value[kind]) is list:
            moves.append((pointer, f"{pointer}/{kind}"))
            return {kind: walk(node, value[kind], pointer)}
        if type(value) is list:
            return [walk(node.item, item, f"{pointer}/{i}") for i, item in enumerate(value)]
        return value
    if isinstance(node, MapT) and type(value) is dict:
        return {k: walk(node.value, v, f"{pointer}/{k}") for k, v in value.items()}
    return value  # maps written as entries: variants in their values keep to the other sugars


def _desugar_variant(
    node: Variant, value: Any, pointer: str, walk: Callable[..., Any], moves: list[tuple[str, str]]
) -> Any:
    if type(value) is not dict:
        return value
    cases = node.case_map()
    if "$tag" in value:
        tag = value["$tag"]
        if type(tag) is str and tag in cases and "$value" in value:
            return {**value, "$value": walk(cases[tag], value["$value"], f"{pointer}/$value")}
        return value
    if len(value) != 1:
        return value
    ((tag, inner),) = value.items()
    if tag == "variant" or tag not in cases:
        return value  # the tagged lens, or no case of that name: normalise says which
    moves.append((f"{pointer}/$value", f"{pointer}/{escape_pointer(tag)}"))
    moves.append((f"{pointer}/$tag", f"{pointer}/{escape_pointer(tag)}"))
    return {"$tag": tag, "$value": walk(cases[tag], inner, f"{pointer}/$value")}


def author_pointer(pointer: str, moves: list[tuple[str, str]]) -> str:
    """A pointer into ``desugar_variants``'s result, as a pointer into what the author wrote."""
    for moved, original in reversed(moves):  # innermost rewrites were appended last
        if pointer == moved or pointer.startswith(moved + "/"):
            pointer = original + pointer[len(moved) :]
    return pointer


def _lit_hint(raw: Any, want: TypeNode | None, schemas: Schemas) -> str:
    """The note for an object read as an Expr form that would fit ``want`` as a literal."""
    if want is None or "op" in raw:
        return ""
    try:
        normalise(want, desugar_variants(want, raw, schemas), schemas)
    except ValueMismatch:
        return ""
    key = next(iter(raw))
    return (
        f" (an object whose one key is the Expr form name {key!r} is read as that Expr; as a "
        f'literal of {describe(want)} it fits: write {{"lit": {json.dumps(raw, ensure_ascii=False)[:200]}}})'
    )


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
            found = self.op_type(node)
            kinds = self.kinds(target)
            if found is None or kinds is None:
                return
            if isinstance(found, Prim):
                fits = bool((self.kinds(found) or kinds) & kinds)
            else:
                fits = self.fits(found, target)
            if not fits:
                detail = f"{node.name} gives {describe(found)}; {describe(want)} is needed"
                self.report(node.pointer, "air.plan.op.type_mismatch", detail)
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
        elif isinstance(node, expr.MakeList | expr.MakeSet) and isinstance(target, ListT | SetT):
            for item in node.items:
                self.conform(item, target.item, ref_type)
        elif isinstance(node, expr.MakeMap) and isinstance(target, MapT):
            for key, value in node.entries:
                self.conform(key, target.key, ref_type)
                self.conform(value, target.value, ref_type)
        else:
            kind = type(node).__name__.removeprefix("Make").lower()
            mismatch(node.pointer, f"a {kind} construct where {describe(target)} is needed")

    def op_type(self, node: expr.Op) -> TypeNode | None:
        """The type ``node`` gives, where its op's result type does not depend on values."""
        if node.name == "json_decode":
            name = node.args[1]
            if isinstance(name, expr.Const) and name.value in self.schemas:
                return Ref(name.value)
            return None
        if node.name == "concat":  # the kind its args share, where one of them shows it
            for arg in node.args:
                if isinstance(arg, expr.Const) and kind_of(arg.value) in ("text", "bytes"):
                    return Prim(kind_of(arg.value))
            return None
        spec = OP_RESULTS.get(node.name)
        return None if spec is None else spec[1]

    def check_ops(self, node: expr.Expr, ref_type: RefType) -> None:
        """Check the args of every typed op in ``node`` (``OP_RESULTS``) whose type is known:
        a ref's, another op's; ``json_encode``'s value against its schema."""
        pending = [node]
        while pending:
            sub = pending.pop()
            pending.extend(children(sub))
            if not isinstance(sub, expr.Op):
                continue
            needs = OP_RESULTS[sub.name][0] if sub.name in OP_RESULTS else ()
            if not needs:  # untyped, or typed by its result only (the comparisons, logic)
                self._check_kinds(sub, ref_type)
            if sub.name not in OP_RESULTS:
                continue
            if sub.name == "json_encode":
                name = sub.args[1]
                if isinstance(name, expr.Const) and name.value in self.schemas:
                    self.conform(sub.args[0], Ref(name.value), ref_type)
            for arg, need in zip(sub.args, needs, strict=False):
                if need is None:
                    continue
                found = self._arg_type(arg, ref_type)
                have = None if found is None else self.kinds(found)
                if found is not None and have is not None and not have & (self.kinds(need) or have):
                    detail = f"{sub.name} takes {describe(need)}; this is {describe(found)}"
                    self.report(arg.pointer, "air.plan.op.type_mismatch", detail)

    def _check_kinds(self, node: expr.Op, ref_type: RefType) -> None:
        """The run-time signature (``air._expr_eval.OPS``) of an untyped op, checked on the
        args whose kinds are known now (a constant's, a ref's, a typed op's): each arg's kind
        must be one the op takes, and an op whose args must share a kind (``concat``: all
        text, all bytes or all lists; the comparisons; ``starts_with``) must not have two
        args that cannot (``concat(text, nat)``). An option may be absent (unit) or not, so
        it is given the benefit of the doubt, as ``fits`` does."""
        spec = OPS.get(node.name)
        if spec is None:
            return
        first: tuple[int, frozenset[str], str] | None = None
        for i, arg in enumerate(node.args):
            have, shown = self._arg_kinds(arg, ref_type)
            if have is None:
                continue
            allowed = spec.kinds[min(i, len(spec.kinds) - 1)]
            if not have & allowed:
                detail = (
                    f"{node.name} arg {i} must be {' or '.join(sorted(allowed))}; this is {shown}"
                )
                self.report(arg.pointer, "air.plan.op.type_mismatch", detail)
                continue
            if not spec.same_kind:
                continue
            if first is not None and not have & first[1]:
                detail = (
                    f"{node.name} arg {i} is {shown} but arg {first[0]} is {first[2]}: "
                    f"{node.name}'s args must all be of one kind ({' or '.join(sorted(allowed))})"
                )
                self.report(arg.pointer, "air.plan.op.type_mismatch", detail)
            first = first or (i, have, shown)

    def value_kinds(self, node: expr.Expr, ref_type: RefType) -> tuple[frozenset[str] | None, str]:
        """The run-time kinds of ``node``'s values where known now, and how to name them."""
        return self._arg_kinds(node, ref_type)

    def _arg_kinds(self, arg: expr.Expr, ref_type: RefType) -> tuple[frozenset[str] | None, str]:
        """The run-time kinds of ``arg``'s values where known now, and how to name them."""
        if isinstance(arg, expr.Const):
            kind = kind_of(arg.value)
            return frozenset({kind}), kind
        found = self._arg_type(arg, ref_type)
        if found is None:
            return None, ""
        return self.kinds(found), describe(found)

    def _arg_type(self, arg: expr.Expr, ref_type: RefType) -> TypeNode | None:
        if isinstance(arg, expr.Ref):
            return ref_type(arg)
        if isinstance(arg, expr.Op):
            return self.op_type(arg)
        return None  # constants are kind-checked when parsed

    def kinds(self, node: TypeNode) -> frozenset[str] | None:
        """The run-time kinds (``air.expr``'s: int, text, bytes, map...) of ``node``'s values;
        None when unknown."""
        try:
            node = resolve(node, self.schemas)
        except ValueMismatch:
            return None
        if isinstance(node, Prim):
            return frozenset({_PRIM_KINDS.get(node.name, node.name)})
        if isinstance(node, OptionT):
            inner = self.kinds(node.item)
            return None if inner is None else inner | {"unit"}
        if isinstance(node, ListT | SetT):
            return frozenset({"list"})
        return frozenset({"map"})  # records, variants and maps

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
