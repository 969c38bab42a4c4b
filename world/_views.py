"""Journal records as people read them: values and keys as sugar JSON read through their
schemas (SPEC §8), hashes as ``blake3:<hex>``, other bytes as hex.

``render(record)`` decodes each field whose schema the world's AIR fixes: an ``event.in``
value, a step's key and emitted events and effect params, a plan step's raised event and key,
an effect's params, a receipt's payload, a run's result. A field that does not decode through
its schema (it cannot happen for a journal the kernel wrote, but a view must not fail on one)
is shown raw. ``raw=True`` shows every byte field as canonical CBOR hex, as stored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from air import LoadedAir, cbor
from air.errors import InvalidArgument, UnknownName, WorldError
from air.types import Ref, TypeNode
from air.values import to_sugar
from kernel.journal import JournalRecord
from world._reading import cell_state
from world.errors import StoreDamaged

if TYPE_CHECKING:
    from world._world import World

__all__ = ["RecordView", "cells_page", "plain"]


def plain(obj: Any) -> Any:
    """Any decoded CBOR as JSON: 32-byte strings as hashes, other bytes as hex."""
    if isinstance(obj, bytes):
        return cbor.raw_to_hash(obj) if len(obj) == 32 else obj.hex()
    if isinstance(obj, list):
        return [plain(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, cbor.Tag):
        return obj.value.hex()
    return obj


class RecordView:
    """Renders journal records for people: values and keys read through their schemas, in the
    AIR that was in force at each record. ``air`` is the world's genesis AIR; ``load`` (an
    address -> the AIR stored there, ``world._airstore``) lets it follow the eras: at each
    ``gov.applied`` it goes on in the applied AIR. A view that starts later in the journal is
    told the applies before its start with ``learn``."""

    def __init__(self, air: LoadedAir, load: Callable[[str], LoadedAir] | None = None) -> None:
        self.air = air
        self._load = load
        self._eras: list[tuple[int, LoadedAir]] = [(0, air)]

    def learn(self, records: Iterable[JournalRecord]) -> None:
        """Take the eras the ``gov.applied`` records among ``records`` start."""
        for record in records:
            self._era(record)

    def _era(self, record: JournalRecord) -> None:
        if record.kind != "gov.applied" or self._load is None:
            return
        if record.seq <= self._eras[-1][0]:
            return  # known already (a view that learned, then read on)
        address = record.body.get("air")
        if isinstance(address, bytes):
            # Unloadable: rendered through the era before; the record itself is shown as it is.
            with contextlib.suppress(WorldError):
                self._eras.append((record.seq, self._load(cbor.raw_to_hash(address))))

    def render(self, record: JournalRecord, *, raw: bool = False) -> dict[str, Any]:
        self._era(record)
        self.air = next(air for since, air in reversed(self._eras) if since <= record.seq)
        body = record.body
        shown = plain(body) if raw or not isinstance(body, dict) else self._body(record.kind, body)
        return {"seq": record.seq, "subject": record.subject, "kind": record.kind, "body": shown}

    def _sugar(self, node: TypeNode | None, data: Any) -> Any:
        if node is None or not isinstance(data, bytes):
            return plain(data)
        try:
            return to_sugar(node, cbor.loads(data), self.air.schemas)
        except WorldError:
            return plain(data)

    def _schema(self, name: Any) -> TypeNode | None:
        return Ref(name) if isinstance(name, str) and name in self.air.schemas else None

    def _key(self, reducer: Any, data: Any) -> Any:
        key_type = self.air.key_types.get(reducer) if isinstance(reducer, str) else None
        return None if data is None else self._sugar(key_type, data)

    def _effect_schema(self, kind: Any, field: str) -> TypeNode | None:
        effect = self.air.effects.get(kind) if isinstance(kind, str) else None
        return None if effect is None else self._schema(getattr(effect, field))

    def _body(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        out = plain(body)
        if kind == "event.in":
            out["value"] = self._sugar(self._schema(body.get("schema")), body.get("value"))
        elif kind in ("step", "step.failed"):
            out["key"] = self._key(body.get("reducer"), body.get("key"))
            out["events"] = [
                {"schema": s, "value": self._sugar(self._schema(s), v)}
                for s, v in body.get("events", [])
            ]
            out["effects"] = [
                {"kind": k, "params": self._sugar(self._effect_schema(k, "params_schema"), p)}
                | ({"cap_slot": slot} if slot is not None else {})
                for k, p, slot in body.get("effects", [])
            ]
            if not out["events"]:
                del out["events"]
            if not out["effects"]:
                del out["effects"]
        elif kind == "plan.step" and "event" in body:
            schema, value = body["event"]
            out["event"] = {"schema": schema, "value": self._sugar(self._schema(schema), value)}
            if "reducer" in body:
                out["key"] = self._key(body["reducer"], body.get("key"))
        elif kind == "plan.ended" and isinstance(body.get("result"), bytes):
            out["result"] = plain(cbor.loads(body["result"]))
        elif kind == "effect.queued":
            node = self._effect_schema(body.get("kind"), "params_schema")
            out["params"] = self._sugar(node, body.get("params"))
        elif kind == "receipt":
            out["payload"] = plain(cbor.loads(body["payload"]))
        elif kind == "cell.upgraded":  # keys as keys; the eras (hashes) and reasons as they are
            reducer = body.get("reducer")
            out["cells"] = [
                [self._key(reducer, k), plain(era), plain(h)] for k, era, h in body.get("cells", [])
            ]
            out["failed"] = [
                [self._key(reducer, k), plain(era), plain(why)]
                for k, era, why in body.get("failed", [])
            ]
        return dict(out)


def cells_page(world: World, reducer: str, after: Any, limit: int) -> dict[str, Any]:
    """One page of ``world cells ls``: ``{reducer, count, cells: [{key, key_hash, state,
    state_hash, size, last_active, era}], next_after?}`` (``era``: the manifest hash the cell
    is pinned to, since its creation), the cells sorted by key (the key's
    canonical CBOR bytes), the first ``limit`` after the key ``after`` (sugar JSON; None: from
    the start). ``next_after`` (the last key shown) is there when more follow.

    Sorting needs every cell's key, which the index entries hold; states are read for the page
    only, so a page of a million-cell world reads the index, not a million states.
    """
    if limit < 1:
        raise InvalidArgument("limit", limit, "a count, 1 or more")
    module = world.air.modules.get(reducer)
    if module is None:
        raise UnknownName("reducer", reducer, sorted(world.air.modules))
    space = world.kernel.cell_space(reducer)
    key_type = world.air.key_types.get(reducer)
    after_cbor = None if after is None else world.key_cbor(reducer, after)
    entries = sorted(world.store.iter_entries(space), key=lambda found: found[1].key_cbor)
    count = len(entries)
    if after_cbor is not None:
        entries = [found for found in entries if found[1].key_cbor > after_cbor]
    cells = []
    for khash, entry in entries[:limit]:
        stored = world.store.get(space, khash)
        if stored is None:
            raise StoreDamaged(f"cell {khash.hex()} of {reducer}", "index entry without state")
        key = (
            None
            if key_type is None
            else to_sugar(key_type, cbor.loads(entry.key_cbor), world.air.schemas)
        )
        cells.append(
            {
                "key": key,
                "key_hash": khash.hex(),
                "state": cell_state(world, reducer, entry, stored[1]),
                "state_hash": cbor.raw_to_hash(entry.state_hash),
                "size": entry.size,
                "last_active": entry.last_active,
                "era": cbor.raw_to_hash(entry.manifest_hash),
            }
        )
    page: dict[str, Any] = {
        "reducer": reducer,
        "count": count,
        "cells": cells,
        "current_era": world.air.manifest_hash,
    }
    if len(entries) > limit:
        page["next_after"] = cells[-1]["key"]
    return page
