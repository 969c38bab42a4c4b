"""What a new AIR changes against the one a world runs: ``diff_air(old, new)``.

Pure (no files, no clock): both sides are ``LoadedAir``. The diff has three parts.

* **Defs**: every def added, removed or changed (its content hash differs), by kind.
* **Manifest**: routes, triggers and cap grants added or removed, and the default policy.
* **Reducers**, one line per *family* (a reducer's name without ``@version``): a reducer in
  both AIRs is ``kept``; a family with exactly one reducer removed and one added is a
  ``successor`` (``demo/Tally@1 → demo/Tally@2``): the new one takes over the old one's cells;
  otherwise ``added`` or ``removed``. For kept and successor lines: whether the wasm, the
  state schema and the key schema are the same. Schemas compare by structure with every
  reference followed (a renamed but equal schema is the same; an equal name whose fields
  changed is not), as a cell's bytes are all that carry over.

``problems`` are what stops the AIR from becoming a proposal for this world: a key schema that
changed (every cell's identity would change: that is ``world migrate``'s job), and a state
schema that changed under the same wasm (the module that wrote the old states cannot be the one
that upgrades them). A state schema that changes with a new wasm is allowed: the cells keep
their era until ``world cells upgrade`` steps each through the new module's upgrade hook
(``kernel._upgrades``), and one whose upgrade fails stays where it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from air._loaded import LoadedAir
from air.types import ListT, MapT, OptionT, Prim, Record, Ref, SetT, TypeNode, Variant

__all__ = ["AirDiff", "ReducerChange", "diff_air", "same_state_shape"]


@dataclass(frozen=True)
class ReducerChange:
    """One reducer family across the two AIRs (see the module docstring)."""

    family: str
    change: str  # kept | successor | added | removed
    old: str | None
    new: str | None
    wasm_same: bool | None = None
    state_same: bool | None = None
    key_same: bool | None = None

    def describe(self, cells: int | None = None) -> str:
        if self.change == "added":
            return f"{self.new}: new reducer"
        if self.change == "removed":
            return f"{self.old}: removed" + ("" if cells is None else f" ({cells:,} cells)")
        head = self.new if self.change == "kept" else f"{self.old} → {self.new}"
        parts = [
            "same wasm" if self.wasm_same else "new wasm",
            "state schema " + ("same" if self.state_same else "changed"),
            "key schema " + ("same" if self.key_same else "changed"),
        ]
        follow = "" if cells is None else f": {cells:,} cells follow"
        return f"{head}{follow} ({', '.join(parts)})"

    def as_json(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "change": self.change,
            "old": self.old,
            "new": self.new,
            "wasm_same": self.wasm_same,
            "state_same": self.state_same,
            "key_same": self.key_same,
        }


@dataclass(frozen=True)
class AirDiff:
    added: dict[str, list[str]] = field(default_factory=dict)  # kind -> def names
    removed: dict[str, list[str]] = field(default_factory=dict)
    changed: dict[str, list[str]] = field(default_factory=dict)
    manifest: dict[str, list[str]] = field(default_factory=dict)  # what -> lines
    reducers: list[ReducerChange] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.manifest)

    def successors(self) -> dict[str, str]:
        """Old reducer name -> the new one that takes over its cells."""
        return {r.old: r.new for r in self.reducers if r.change == "successor" and r.old and r.new}

    def as_json(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "removed": self.removed,
            "changed": self.changed,
            "manifest": self.manifest,
            "reducers": [r.as_json() for r in self.reducers],
            "problems": self.problems,
        }


def diff_air(old: LoadedAir, new: LoadedAir) -> AirDiff:
    """What ``new`` changes against ``old`` (see the module docstring)."""
    diff = AirDiff()
    kinds = {name: _kind(new, name) for name in new.defs} | {
        name: _kind(old, name) for name in old.defs if name not in new.defs
    }
    for name in sorted(kinds):
        if name.startswith("sys/"):
            continue  # built-ins: the same in every AIR of this version
        if name not in old.defs:
            diff.added.setdefault(kinds[name], []).append(name)
        elif name not in new.defs:
            diff.removed.setdefault(kinds[name], []).append(name)
        elif old.def_hashes.get(name) != new.def_hashes.get(name):
            diff.changed.setdefault(kinds[name], []).append(name)
    _manifest(diff, old, new)
    _reducers(diff, old, new)
    return diff


def _kind(air: LoadedAir, name: str) -> str:
    kind = getattr(air.defs[name].model, "kind", "def")
    return str(kind).removeprefix("def")


def _manifest(diff: AirDiff, old: LoadedAir, new: LoadedAir) -> None:
    def routes(air: LoadedAir) -> set[str]:
        return {
            f"{r.event} → {r.reducer}" + (f" by {r.key_field}" if r.key_field else "")
            for r in air.manifest.routing.events
        }

    def triggers(air: LoadedAir) -> set[str]:
        return {f"{t.event} → {t.plan}" for t in air.manifest.triggers}

    def grants(air: LoadedAir) -> set[str]:
        return {
            f"{g.name} ({g.cap})" + ("" if g.params is None else f" {sorted(g.params)}")
            for g in air.manifest.defaults.cap_grants
        }

    for what, read in (("routes", routes), ("triggers", triggers), ("cap_grants", grants)):
        before, after = read(old), read(new)
        lines = [f"+ {line}" for line in sorted(after - before)]
        lines += [f"- {line}" for line in sorted(before - after)]
        if lines:
            diff.manifest[what] = lines

    def needs(air: LoadedAir) -> list[str]:
        governance = air.manifest.governance
        return [] if governance is None else sorted(set(governance.apply_requires))

    if needs(old) != needs(new):
        diff.manifest["governance"] = [f"apply requires {needs(old)} → {needs(new)}"]
    if old.manifest.defaults.policy != new.manifest.defaults.policy:
        was, now = old.manifest.defaults.policy, new.manifest.defaults.policy
        diff.manifest["policy"] = [f"{was} → {now}"]


def _reducers(diff: AirDiff, old: LoadedAir, new: LoadedAir) -> None:
    families: dict[str, tuple[list[str], list[str]]] = {}
    for name in sorted(set(old.modules) | set(new.modules)):
        family = name.partition("@")[0]
        gone, came = families.setdefault(family, ([], []))
        if name not in new.modules:
            gone.append(name)
        elif name not in old.modules:
            came.append(name)
        else:
            diff.reducers.append(_pair(family, "kept", old, name, new, name))
    for family, (gone, came) in sorted(families.items()):
        if len(gone) == 1 and len(came) == 1:
            diff.reducers.append(_pair(family, "successor", old, gone[0], new, came[0]))
            continue
        diff.reducers.extend(ReducerChange(family, "removed", name, None) for name in gone)
        diff.reducers.extend(ReducerChange(family, "added", None, name) for name in came)
    diff.reducers.sort(key=lambda r: (r.family, r.old or "", r.new or ""))
    for line in diff.reducers:
        if line.change not in ("kept", "successor"):
            continue
        if not line.key_same:
            diff.problems.append(
                f"{line.new}: its key schema changed, so every cell's identity would; "
                "`world migrate` moves cells to new keys, an upgrade cannot"
            )
        elif not line.state_same and line.wasm_same:
            diff.problems.append(
                f"{line.new}: its state schema changed but its wasm did not; the module that "
                "wrote the old states cannot upgrade them: give it a new module with an upgrade "
                "hook (sys/StateUpgrade@1), or keep the state schema"
            )


def same_state_shape(old: LoadedAir, old_name: str, new: LoadedAir, new_name: str) -> bool:
    """Whether reducer ``old_name`` of ``old`` and ``new_name`` of ``new`` have state schemas
    of the same structure (every reference followed): a cell's bytes read the same in both."""
    was, now = old.modules[old_name], new.modules[new_name]
    return bool(_shape(Ref(was.abi.reducer.state), old) == _shape(Ref(now.abi.reducer.state), new))


def _pair(
    family: str, change: str, old: LoadedAir, old_name: str, new: LoadedAir, new_name: str
) -> ReducerChange:
    state_same = same_state_shape(old, old_name, new, new_name)
    key_same = _shape(old.key_types.get(old_name), old) == _shape(new.key_types.get(new_name), new)
    return ReducerChange(
        family,
        change,
        old_name,
        new_name,
        wasm_same=old.wasm_hashes.get(old_name) == new.wasm_hashes.get(new_name),
        state_same=state_same,
        key_same=key_same,
    )


def _shape(node: TypeNode | None, air: LoadedAir, depth: int = 0) -> Any:
    """``node`` as plain data with every reference followed (AIR refuses cyclic schemas)."""
    if node is None or depth > 64:
        return None
    if isinstance(node, Ref):
        return _shape(air.schemas.get(node.name), air, depth + 1)
    if isinstance(node, Prim):
        return node.name
    if isinstance(node, Record):
        return ("record", tuple((k, _shape(v, air, depth + 1)) for k, v in node.fields))
    if isinstance(node, Variant):
        return ("variant", tuple((k, _shape(v, air, depth + 1)) for k, v in node.cases))
    if isinstance(node, MapT):
        return ("map", _shape(node.key, air, depth + 1), _shape(node.value, air, depth + 1))
    wrapper = {ListT: "list", SetT: "set", OptionT: "option"}[type(node)]
    return (wrapper, _shape(node.item, air, depth + 1))
