"""An upgrade of a partitioned world: one AIR proposed to every partition, then applied in each
(``world.gov``: a ``gov.proposed`` and a ``gov.applied`` record per partition, so each partition's
journal says when its era began and replays exactly on its own).

Two phases, so that a refusal changes no era: every partition that does not run the new AIR yet
is proposed it first (a partition that refuses, as a single world would, stops the upgrade before
any apply: the proposals already journaled are harmless, and are taken up again by the next run);
then each is approved (``approve``) and applied. An apply that fails half-way (a full disk) leaves
some partitions in the new era and some in the old, which ``info`` shows; running the same
upgrade again finishes it: a partition already on the new AIR is skipped, one with a proposal of
it is applied without a second one.

Every partition must run the same AIR before (one era for the whole world), or the new one.
The cluster must be down: its actors hold every partition's writer lock.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from air import load_air
from air.errors import UsageError
from world._airfiles import air_sources, bind_module_wasm, builtin_sources, inspect_wasm
from world._airfiles import read_file as _read_file
from world._world import World
from world.cluster._layout import Layout
from world.errors import UpgradeRefused

__all__ = ["upgrade_cluster"]


def upgrade_cluster(
    root: Path,
    air_path: Path,
    note: str | None = None,
    *,
    modules: Mapping[str, str | os.PathLike[str]] | None = None,
    approve: bool = False,
) -> list[dict[str, Any]]:
    """Propose the AIR at ``air_path`` to every partition, then apply it in each (``approve``:
    journal an approval first, for an AIR whose governance asks for one); a row per
    partition: ``{partition, proposal, applied}`` (``skipped``: it ran the AIR already)."""
    from world.gov import applied, apply, proposals, propose
    from world.gov import approve as approve_proposal

    layout = Layout.read(root)
    if layout.up() is not None:
        raise UsageError(f"{root} is up on Ray: world cluster down first (its actors hold it)")
    sources = builtin_sources() + air_sources(Path(air_path))
    if modules:
        sources = bind_module_wasm(sources, modules)
    target = load_air(sources, _read_file, inspect_wasm).manifest_hash
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        worlds = [stack.enter_context(World.open(p)) for p in layout.partitions()]
        bases = {w.air.manifest_hash for w in worlds} - {target}
        if len(bases) > 1:
            raise UpgradeRefused(
                str(air_path),
                [f"the partitions run {len(bases)} different AIRs; they must run one"],
            )
        pending: list[tuple[int, World, int]] = []
        for index, world in enumerate(worlds):  # phase 1: every proposal, or none applied
            if world.air.manifest_hash == target:
                rows.append({"partition": index, "skipped": True})
                continue
            done = {a.proposal for a in applied(world)}
            earlier = [
                p.id
                for p in proposals(world)
                if (p.base, p.manifest_hash) == (world.air.manifest_hash, target)
                and p.id not in done
            ]
            if earlier:
                pending.append((index, world, earlier[-1]))
                continue
            made, _diff = propose(world, air_path, note, modules=modules)
            pending.append((index, world, made.id))
        for index, world, proposal_id in pending:  # phase 2: apply in each
            if approve:
                approve_proposal(world, proposal_id, note)
            done_at = apply(world, proposal_id)
            rows.append({"partition": index, "proposal": proposal_id, "applied": done_at.seq})
    return sorted(rows, key=lambda row: row["partition"])
