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
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from air import LoadedAir, cbor
from air.errors import InvalidArgument, UnknownName, WorldError
from air.types import Ref, TypeNode
from air.values import to_sugar
from kernel import CELL_IMPORTED
from kernel.journal import JournalRecord
from world._reading import cell_state
from world.errors import StoreDamaged

if TYPE_CHECKING:
    from world._world import World

__all__ = [
    "MEMO_ITEMS_MAX",
    "MEMO_VALUE_BYTES_MAX",
    "JournalView",
    "RecordView",
    "cells_page",
    "plain",
]


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

    @classmethod
    def of_world(cls, world: World) -> RecordView:
        """A view of ``world``'s journal that knows its eras already (from its kernel), so
        records can be rendered in any order."""
        view = cls(world.genesis_air)
        view.follow(world)
        return view

    def follow(self, world: World) -> None:
        """Know the eras ``world``'s kernel has started since this view last looked (no
        journal read: a served world's pages call it each time)."""
        history = world.kernel.eras.history
        self._eras.extend((era.since, era.air) for era in history[len(self._eras) :])

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


MEMO_ITEMS_MAX: Final = 16_384
"""Rendered values (and texts, hashes) ``JournalView`` remembers of each sort (then it starts
over): a few MiB at most, in a server that lives long too."""
MEMO_VALUE_BYTES_MAX: Final = 256
"""Only values this small are remembered: a journal repeats its small keys and events."""


_dumps: Final = json.JSONEncoder().encode
"""``json.dumps`` with its defaults, without its per-call checks."""


class JournalView(RecordView):
    """``world journal tail``'s view (direct and served alike): ``RecordView``, and the key and
    state a ``cell.imported`` record moves in read through the reducer's key and state
    schemas, as every other value (not hex). Small values it rendered before are remembered
    (per era), not decoded again: a journal's keys and events repeat, and reading 400,000
    records is mostly this."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._memo: dict[tuple[int, TypeNode, bytes], Any] = {}
        self._hashes: dict[bytes, str] = {}
        self._texts: dict[str, str] = {}  # strings as JSON text
        self._hash_texts: dict[bytes, str] = {}  # 32-byte hashes as JSON text
        self._memo_text: dict[tuple[int, TypeNode, bytes], str] = {}

    def render(self, record: JournalRecord, *, raw: bool = False) -> dict[str, Any]:
        """``RecordView.render``, with the two kinds most of a journal is (an ``event.in``, a
        ``step`` that emitted nothing) rendered without its general walk: the same object."""
        body, kind = record.body, record.kind
        if raw or type(body) is not dict or (kind != "event.in" and kind != "step"):
            return super().render(record, raw=raw)
        if kind == "step" and ("events" in body or "effects" in body):
            return super().render(record, raw=raw)
        self._era(record)
        since, air = self._eras[-1]
        self.air = air if since <= record.seq else self._air_at(record.seq)
        out = self._plain_body(body)
        if kind == "event.in":
            out["value"] = self._sugar(self._schema(body.get("schema")), body.get("value"))
        else:
            out["key"] = self._key(body.get("reducer"), body.get("key"))
        return {"seq": record.seq, "subject": record.subject, "kind": kind, "body": out}

    def render_line(self, record: JournalRecord, *, raw: bool = False) -> str:
        """``json.dumps(self.render(record, raw=raw))``: the same text, the common kinds'
        (as ``render``) put together from the remembered texts of their values."""
        body, kind = record.body, record.kind
        if raw or type(body) is not dict:
            return _dumps(self.render(record, raw=raw))
        if kind == "event.in":
            field, schema_of = "value", body.get("schema")
        elif kind == "step" and "events" not in body and "effects" not in body:
            field, schema_of = "key", body.get("reducer")
        else:
            return _dumps(self.render(record, raw=raw))
        if field not in body:
            return _dumps(self.render(record, raw=raw))
        self._era(record)
        since, air = self._eras[-1]
        self.air = air if since <= record.seq else self._air_at(record.seq)
        texts, hashes, remember = self._texts, self._hash_texts, self._remember_text
        parts = []
        for name, value in body.items():
            kind_of = type(value)
            if name == field:
                if kind == "event.in":
                    text = self._sugar_text(self._schema(schema_of), value)
                elif value is None:
                    text = "null"
                else:
                    key_type = self.air.key_types.get(schema_of) if type(schema_of) is str else None
                    text = self._sugar_text(key_type, value)
            elif kind_of is int:
                text = int.__repr__(value)
            elif kind_of is str:
                text = texts.get(value) or remember(value)
            elif kind_of is bytes and len(value) == 32:
                text = hashes.get(value) or self._remember_hash(value)
            else:
                text = self._value_text(value)
            # a name that is not text is never found: the memo's keys are all text
            parts.append(f"{texts.get(name) or remember(str(name))}: {text}")
        return (
            f'{{"seq": {record.seq}, "subject": {texts.get(record.subject) or remember(record.subject)}, '
            f'"kind": {texts.get(kind) or remember(kind)}, "body": {{{", ".join(parts)}}}}}'
        )

    def _remember_hash(self, value: bytes) -> str:
        if len(self._hash_texts) >= MEMO_ITEMS_MAX:
            self._hash_texts.clear()
        shown = self._hash_texts[value] = _dumps(cbor.raw_to_hash(value))
        return shown

    def _remember_text(self, text: str) -> str:
        if len(self._texts) >= MEMO_ITEMS_MAX:
            self._texts.clear()
        shown = self._texts[text] = _dumps(text)
        return shown

    def _value_text(self, value: Any) -> str:
        kind = type(value)
        if kind is int:
            return int.__repr__(value)
        if kind is str:
            return self._texts.get(value) or self._remember_text(value)
        if value is None:
            return "null"
        if kind is bool:
            return "true" if value else "false"
        if kind is bytes and len(value) == 32:
            return self._hash_texts.get(value) or self._remember_hash(value)
        return _dumps(plain(value))

    def _sugar_text(self, node: TypeNode | None, data: Any) -> str:
        if node is None or type(data) is not bytes or len(data) > MEMO_VALUE_BYTES_MAX:
            return _dumps(self._sugar(node, data))
        memo_key = (id(self.air), node, data)
        found = self._memo_text.get(memo_key)
        if found is None:
            if len(self._memo_text) >= MEMO_ITEMS_MAX:
                self._memo_text.clear()
            found = self._memo_text[memo_key] = _dumps(super()._sugar(node, data))
        return found

    def _air_at(self, seq: int) -> Any:
        return next(air for since, air in reversed(self._eras) if since <= seq)

    def _plain_body(self, body: dict[Any, Any]) -> dict[str, Any]:
        """``plain(body)`` for a record's body, its hashes remembered."""
        out: dict[str, Any] = {}
        hashes = self._hashes
        for name, value in body.items():
            kind = type(value)
            if kind is str or kind is int or value is None or kind is bool:
                out[str(name)] = value
            elif kind is bytes and len(value) == 32:
                shown = hashes.get(value)
                if shown is None:
                    if len(hashes) >= MEMO_ITEMS_MAX:
                        hashes.clear()
                    shown = hashes[value] = cbor.raw_to_hash(value)
                out[str(name)] = shown
            else:
                out[str(name)] = plain(value)
        return out

    def _sugar(self, node: TypeNode | None, data: Any) -> Any:
        if node is None or type(data) is not bytes or len(data) > MEMO_VALUE_BYTES_MAX:
            return super()._sugar(node, data)
        memo_key = (id(self.air), node, data)
        found = self._memo.get(memo_key, self)
        if found is self:
            if len(self._memo) >= MEMO_ITEMS_MAX:
                self._memo.clear()
            found = self._memo[memo_key] = super()._sugar(node, data)
        return found

    def _body(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        out = super()._body(kind, body)
        if kind == CELL_IMPORTED:
            reducer = body.get("reducer")
            module = self.air.modules.get(reducer) if isinstance(reducer, str) else None
            state = None if module is None else self._schema(module.abi.reducer.state)
            out["key"] = self._key(reducer, body.get("key"))
            out["state"] = self._sugar(state, body.get("state"))
        return out
