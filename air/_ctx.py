"""The validation context: what every check of ``air._validate`` and ``air._plan_checks``
needs (the AIR loaded so far and the diagnostics), with the lookups they share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from air._diagnostics import Diagnostics
from air._loaded import LoadedAir, Located
from air._model import DefCap, DefEffect, DefSchema
from air.errors import ValueMismatch
from air.types import TypeNode, parse_type, type_refs

__all__ = ["Ctx"]


@dataclass
class Ctx:
    """What every check needs: the AIR so far and the diagnostics, with lookup helpers."""

    air: LoadedAir
    diags: Diagnostics

    def loc(self, name: str) -> Located:
        return self.air.defs[name]

    def is_kind(self, name: str, model_type: type | tuple[type, ...]) -> bool:
        return name in self.air.defs and isinstance(self.air.defs[name].model, model_type)

    def need(
        self, name: str, model_type: type | tuple[type, ...], file: str, pointer: str, code: str
    ) -> bool:
        if self.is_kind(name, model_type):
            return True
        if name not in self.air.unparsed:  # else its own diagnostics say what is wrong
            self.diags.add(file, pointer, code, f"unknown {code.rsplit('_', 1)[-1]} {name}")
        return False

    def need_schema(self, name: str, file: str, pointer: str) -> bool:
        if name in self.air.schemas:
            return True
        if not self.is_kind(name, DefSchema) and name not in self.air.unparsed:
            self.diags.add(file, pointer, "air.ref.unknown_schema", f"unknown schema {name}")
        return False

    def cap_type(self, cap: str) -> str | None:
        """The cap type of defcap ``cap``; None if there is no such defcap."""
        return self.loc(cap).model.cap_type if self.is_kind(cap, DefCap) else None

    def type_field(self, loc: Located, raw: Any, pointer: str) -> TypeNode | None:
        """Parse a type written in a def at ``pointer``; None (reported) if bad or unknown."""
        try:
            node = parse_type(raw, loc.pointer + pointer)
        except ValueMismatch as exc:
            self.diags.add(loc.file, exc.pointer, "air.type.invalid", exc.detail)
            return None
        ok = all(
            self.need_schema(ref, loc.file, loc.pointer + pointer)
            for ref in sorted(type_refs(node))
        )
        return node if ok else None

    def effect_for(self, kind: str, origin: str, file: str, pointer: str) -> DefEffect | None:
        """The defeffect of ``kind`` if ``origin`` may emit it; else None, reported."""
        effect = self.air.effects.get(kind)
        if effect is None:
            detail = f"no defeffect provides effect kind {kind!r}"
            self.diags.add(file, pointer, "air.ref.unknown_effect", detail)
            return None
        if origin not in effect.origins:
            allowed = " or ".join(effect.origins)
            detail = f"effect {kind} may be emitted by {allowed}, not a {origin}"
            self.diags.add(file, pointer, "air.effect.origin", detail)
            return None
        return effect
