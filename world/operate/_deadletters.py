"""Dead letters as an operator sees and acts on them (``world dead-letters ...``).

``dead_letters`` and ``dead_letter`` read the kernel's kept letters (``Kernel.dead_letter_list``,
``Kernel.dead_letter``; ``kernel._deadletters`` keeps them) in one view (``World.read``), each
with its key and event value as sugar JSON read through the current AIR (raw, as
``world._views.plain``, where that AIR no longer fits them). Retrying and
dropping are the world's (``World.retry_dead_letter``, ``World.drop_dead_letter``): they
journal the operator's record and apply it, durable on return.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from air import cbor
from air.errors import WorldError
from air.types import Ref
from air.values import to_sugar
from kernel import DeadLetter
from world._views import plain

if TYPE_CHECKING:
    from world._world import World

__all__ = ["dead_letter", "dead_letters"]


def _sugar(world: World, node: Any, data: bytes | None) -> Any:
    if data is None:
        return None
    if node is not None:
        try:
            return to_sugar(node, cbor.loads(data), world.air.schemas)
        except WorldError:
            pass
    try:
        return plain(cbor.loads(data))
    except WorldError:
        return data.hex()


def view(world: World, d: DeadLetter, *, value: bool = False) -> dict[str, Any]:
    """One letter as JSON: id, seq, reducer, key, schema, code, detail, retryable (and its
    event ``value`` with ``value=True``)."""
    air = world.air
    key_type = air.key_types.get(d.reducer)
    out: dict[str, Any] = {
        "id": d.id,
        "seq": d.seq,
        "reducer": d.reducer,
        "key": _sugar(world, key_type, d.key_cbor),
        "schema": d.schema,
        "code": d.code,
        "detail": d.detail,
        "retryable": d.retryable,
    }
    if value:
        node = Ref(d.schema) if d.schema in air.schemas else None
        out["value"] = _sugar(world, node, d.value_cbor)
    return out


def _listing(world: World) -> dict[str, Any]:
    counts = world.kernel.counts()
    letters = world.kernel.dead_letter_list()
    return {
        "total": counts.dead_letters_total,
        "kept": len(letters),
        "steps_failed": counts.steps_failed,
        "letters": [view(world, d) for d in letters],
    }


def dead_letters(world: World) -> dict[str, Any]:
    """``{total, kept, steps_failed, letters: [...]}``, the letters oldest first."""
    return world.read(partial(_listing, world))


def dead_letter(world: World, letter_id: str) -> dict[str, Any]:
    """The kept letter ``letter_id`` (exact), with its event value; ``UnknownName`` if none."""
    return world.read(lambda: view(world, world.kernel.dead_letter(letter_id), value=True))
