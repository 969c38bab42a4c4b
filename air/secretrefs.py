"""Secret references (``sys/SecretRef@1``) in values and plans; ``defsecret`` names and digests.

Pure helpers shared by validation (``air._validate``), the effect manager (``kernel._effects``:
the per-secret ACL) and the HTTP adapter (``world.effects``: resolution). Nothing here sees a
secret's value: only its reference ``{alias, version}``, which is what the journal holds.

* ``secret_name(alias, version)`` and ``parse_secret_name(name)``: a ``defsecret``'s ``name`` is
  ``alias@version``, the alias a ``namespace/name`` and the version >= 1 (the one def-name
  grammar, ``air.types.def_name_problem``).
* ``digest_problem(text)``: an ``expected_digest`` is ``sha256:<64 lowercase hex>`` (AgentOS's
  ``Hash``) or ``blake3:<64 lowercase hex>`` (ours), over the secret's bytes as the adapter
  reads them (``world.effects._secrets``). Both are accepted so AgentOS AIR loads unchanged.
* ``secret_refs(node, value, schemas)``: every SecretRef inside ``value``, a canonical value of
  type ``node``, found by its type (a ``sys/SecretRef@1`` position), never by its shape, so a
  user's own variant with a ``secret`` case is not one.
* ``constant_secret_refs(expr_json)``: the SecretRefs written as constants in an Expr's canonical
  JSON (``air.expr.to_json``), with their JSON pointer: what validation can check at load.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

from air.sys.ondemand import SECRET_REF
from air.types import ListT, MapT, OptionT, Record, Ref, SetT, TypeNode, Variant, def_name_problem

__all__ = [
    "DIGEST_ALGORITHMS",
    "SECRET_REF",
    "constant_secret_refs",
    "digest_problem",
    "parse_secret_name",
    "secret_name",
    "secret_refs",
]

DIGEST_ALGORITHMS: Final = ("sha256", "blake3")
_DIGEST_RE: Final = re.compile(r"(sha256|blake3):[0-9a-f]{64}")


def secret_name(alias: str, version: int) -> str:
    return f"{alias}@{version}"


def parse_secret_name(name: str) -> tuple[str, int] | None:
    """``(alias, version)`` of a ``defsecret`` name, or None if it is not ``alias@version``."""
    if def_name_problem(name) is not None:
        return None
    alias, _, version = name.rpartition("@")
    return alias, int(version)


def digest_problem(text: str) -> str | None:
    """Why ``text`` is not an ``expected_digest``, or None."""
    if _DIGEST_RE.fullmatch(text) is None:
        return "an expected_digest is sha256:<64 lowercase hex> or blake3:<64 lowercase hex>"
    return None


def secret_refs(node: TypeNode, value: Any, schemas: dict[str, TypeNode]) -> list[tuple[str, int]]:
    """Every ``(alias, version)`` referenced in ``value`` (canonical, of type ``node``), in
    walk order. A value that is not of its type is skipped where it does not fit (the kernel
    has checked it against the schema already)."""
    out: list[tuple[str, int]] = []
    stack: list[tuple[TypeNode, Any, int]] = [(node, value, 0)]
    while stack:
        node, value, depth = stack.pop()
        if depth > 256:  # schemas have no cycles; values are depth-bounded: defence only
            continue
        if isinstance(node, Ref):
            if node.name == SECRET_REF:
                if isinstance(value, dict):
                    alias, version = value.get("alias"), value.get("version")
                    if isinstance(alias, str) and type(version) is int:
                        out.append((alias, version))
                continue
            target = schemas.get(node.name)
            if target is not None:
                stack.append((target, value, depth + 1))
        elif isinstance(node, Record) and isinstance(value, dict):
            stack.extend((t, value.get(k), depth + 1) for k, t in reversed(node.fields))
        elif isinstance(node, Variant) and isinstance(value, dict):
            cases = dict(node.cases)
            case = cases.get(value.get("$tag"))  # type: ignore[arg-type]
            if case is not None:
                stack.append((case, value.get("$value"), depth + 1))
        elif isinstance(node, OptionT):
            if value is not None:
                stack.append((node.item, value, depth + 1))
        elif isinstance(node, ListT | SetT) and isinstance(value, list):
            stack.extend((node.item, v, depth + 1) for v in reversed(value))
        elif isinstance(node, MapT) and isinstance(value, dict):
            stack.extend((node.value, value[k], depth + 1) for k in reversed(list(value)))
    return out


def constant_secret_refs(expr_json: Any, pointer: str = "") -> Iterator[tuple[str, str, int]]:
    """``(pointer, alias, version)`` of each constant ``secret`` variant whose value is a
    constant ``{alias: text, version: int}`` record, in an Expr's canonical JSON."""
    stack: list[tuple[Any, str]] = [(expr_json, pointer)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, dict):
            variant = item.get("variant") if len(item) == 1 else None
            if isinstance(variant, dict) and variant.get("tag") == "secret":
                record = variant.get("value")
                fields = record.get("record") if isinstance(record, dict) else None
                if isinstance(fields, dict) and set(fields) == {"alias", "version"}:
                    alias, version = fields["alias"], fields["version"]
                    if isinstance(alias, str) and type(version) is int:
                        yield at, alias, version
                        continue
            stack.extend((v, f"{at}/{k}") for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, f"{at}/{i}") for i, v in enumerate(item))
