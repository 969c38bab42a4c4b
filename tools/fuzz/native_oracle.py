"""Differential oracle for the native step path: every native function against its reference.

Each ``check_*`` takes fuzz input, runs the C function (``kernel.native._native``) and the pure-Python
reference it stands for, and raises ``Disagreement`` unless they agree as ``kernel/native/__init__.py``
promises: what the C code accepts, the reference accepts with the same result (types included:
``True`` is not ``1``); and for the strict decoders, what the C code refuses, the reference
refuses too. ``check_bytes`` routes one fuzz input to all byte-level targets; ``Mutator`` turns
seeds (every head at every width boundary, shortest and over-long; real reducer outputs,
journal payloads, canonical encodings of random values) into
inputs: bit flips, byte edits, truncation, splices, non-shortest heads, random bytes.

Used by ``tests/kernel/native/test_native_fuzz.py`` (a bounded run in the suite), ``tools/fuzz/fuzz_native.py``
(atheris, or this module's own random loop, for as long as you like) and the AddressSanitizer
test. Run nothing here at import: it is a library.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import cbor2

from air import cbor
from air.errors import CborError, WorldError
from kernel import abi, journal, native
from kernel.cells import CellEntry, encode_entry
from kernel.errors import StepRejected
from world.cellstore._flush import merge_shard
from world.cellstore._shards import PackedShard

__all__ = [
    "Disagreement",
    "Mutator",
    "check_bytes",
    "check_decode_output",
    "check_decode_record",
    "check_dumps",
    "check_encode_input",
    "check_loads",
    "check_normalise",
    "check_shard_splice",
    "random_sugar",
    "random_type",
    "random_value",
    "same",
    "seed_corpus",
]

EXT: Any = native.built()


class Disagreement(AssertionError):
    """The native function and its reference disagree on ``data``."""

    def __init__(self, target: str, data: object, native_result: object, reference: object) -> None:
        self.target = target
        self.data = data
        super().__init__(f"{target}({data!r}): native {native_result!r} != reference {reference!r}")


def same(a: Any, b: Any) -> bool:
    """Equal, with types: ``1`` is not ``True``, a tuple is not a list, map order counts."""
    if type(a) is not type(b):
        return False
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if type(a) is cbor2.CBORTag:
        return bool(a.tag == b.tag and same(a.value, b.value))
    return bool(a == b)


def _reference(fn: Callable[[], Any], errors: tuple[type[BaseException], ...]) -> tuple[bool, Any]:
    try:
        return True, fn()
    except errors as exc:
        return False, exc


def check_loads(data: bytes) -> None:
    """The strict decoder: accept and refuse exactly what ``air.cbor.loads`` does."""
    try:
        ours: Any = EXT.loads(data)
        accepted = True
    except ValueError:
        ours, accepted = None, False
    ok, theirs = _reference(lambda: cbor.loads(data), (CborError,))
    if accepted != ok or (ok and not same(ours, theirs)):
        raise Disagreement("loads", data, ours if accepted else "refused", theirs)
    if accepted:  # and it re-encodes to the same bytes
        again = EXT.dumps(ours)
        if again != data:
            raise Disagreement("dumps(loads)", data, again, data)


def check_dumps(obj: Any) -> None:
    """The encoder: the reference's bytes, or "not mine" only where the reference refuses (or
    ``obj`` holds a value of a subclass, which the native code leaves to the reference)."""
    ours = EXT.dumps(obj)
    ok, theirs = _reference(lambda: cbor.dumps(obj), (CborError,))
    if ours is not None and (not ok or ours != theirs):
        raise Disagreement("dumps", obj, ours, theirs)
    if ours is None and ok and _exact_types(obj):
        raise Disagreement("dumps", obj, "not mine", theirs)


def _exact_types(obj: Any) -> bool:
    kind = type(obj)
    if kind in (list, tuple):
        return all(_exact_types(x) for x in obj)
    if kind is dict:
        return all(_exact_types(k) and _exact_types(v) for k, v in obj.items())
    return kind in (str, bytes, int, bool, type(None), cbor2.CBORTag)


def _output_facts(out: abi.StepOutput) -> tuple[Any, ...]:
    values = out.values
    assert values is not None
    return (out, values.state, list(values.events), list(values.params), values.ann)


def check_decode_output(raw: bytes) -> None:
    """``abi.decode_output``: same ``StepOutput`` and decoded payloads, or both refuse."""
    found = EXT.decode_output(raw)
    ok, theirs = _reference(lambda: _python_decode_output(raw), (StepRejected,))
    if (found is not None) != ok:
        raise Disagreement("decode_output", raw, found, theirs)
    if found is not None:
        ours = _output_facts(found if type(found) is abi.StepOutput else abi._from_native(found))
        reference = _output_facts(theirs)
        if ours[0] != reference[0] or not all(
            same(list(a) if isinstance(a, tuple) else a, list(b) if isinstance(b, tuple) else b)
            for a, b in zip(ours[1:], reference[1:], strict=True)
        ):
            raise Disagreement("decode_output", raw, ours, reference)


def _python_decode_output(raw: bytes) -> abi.StepOutput:
    was = native.enabled()
    native.set_enabled(False)
    try:
        return abi.decode_output(raw, module="m")
    finally:
        native.set_enabled(was)


def check_decode_record(payload: bytes) -> None:
    """``journal.decode_record_fast``: what the C code accepts decodes to the same record."""
    found = EXT.decode_record(payload)
    if found is None:
        return  # the lenient reference may accept non-canonical payloads: nothing to compare
    ok, theirs = _reference(lambda: journal._record_from_map(cbor2.loads(payload)), (CborError,))
    if not ok:
        if isinstance(theirs, CborError) and theirs.code == "journal.record":
            return  # subject/kind syntax: kernel.journal checks it after the C decode
        raise Disagreement("decode_record", payload, found, theirs)
    record = journal.JournalRecord(*found)
    if not same(list(found), [theirs.seq, theirs.subject, theirs.kind, theirs.body]):
        raise Disagreement("decode_record", payload, record, theirs)


def check_encode_input(
    state: Any, schema: Any, value: Any, key: Any, cell_mode: Any, with_record: bool = True
) -> None:
    """``abi.encode_input`` (and the journal join for the same bytes as a body)."""
    ours = EXT.encode_input(state, schema, value, key, cell_mode)
    ok, theirs = _reference(
        lambda: _python(lambda: abi.encode_input(state, schema, value, key, cell_mode)),
        (WorldError, UnicodeEncodeError, TypeError),
    )
    if ours is not None and (not ok or ours != theirs):
        raise Disagreement("encode_input", (state, schema, value, key, cell_mode), ours, theirs)
    if with_record and ours is not None:
        body = {"value": value, "schema": schema}
        payload = EXT.encode_record(7, body, b"\x64step", b"\x62/a")
        wanted = cbor.dumps({"seq": 7, "subject": "/a", "kind": "step", "body": body})
        if payload != wanted:
            raise Disagreement("encode_record", body, payload, wanted)


def _python(fn: Callable[[], Any]) -> Any:
    was = native.enabled()
    native.set_enabled(False)
    try:
        return fn()
    finally:
        native.set_enabled(was)


def _merged_shard(
    base: PackedShard, cells: dict[bytes, tuple[CellEntry, bytes] | None], inline_max: int
) -> Any:
    """``merge_shard``'s result as plain values, or the error it raised (type and text)."""
    try:
        merged = merge_shard(base, cells, inline_max)
    except Exception as exc:  # the Python merge's error on odd bytes: the C path must match it
        return type(exc), str(exc)
    fields = None if merged.view is None else merged.view.packed()
    return fields, merged.root, merged.adds, merged.drops


def _shard_cell(n: int, size: int, seq: int) -> tuple[bytes, tuple[CellEntry, bytes]]:
    state = cbor.dumps(bytes(size)) if size else b""
    entry = CellEntry(cbor.dumps(n), cbor.digest(state), len(state), seq, bytes(range(32)))
    return cbor.digest(cbor.dumps(n)), (entry, state)


def check_shard_splice(data: bytes) -> bool:
    """The index shard merge (``kernel.native.shard_splice`` via ``merge_shard``) against
    ``merge``: a small shard and dirty cells drawn from ``data``, one of the shard's five fields
    then overwritten with ``data``'s bytes at a spot it picks (a damaged or hostile object). The
    C code declines, or gives the same shard, root, adds and drops, or the same error. Returns
    whether the C code took the input."""
    rng = random.Random(data)
    sizes = [0, 1, 5, 20]  # 20: out of line at the usual limit
    stored = dict(_shard_cell(n, rng.choice(sizes), 1) for n in rng.sample(range(30), 12))
    order = sorted(stored)
    limit = 8
    base = PackedShard.build(
        order,
        [encode_entry(stored[kh][0]) for kh in order],
        [s if len(s) <= limit else b"" for s in (stored[kh][1] for kh in order)],
    )
    cells: dict[bytes, tuple[CellEntry, bytes] | None] = {}
    for n in rng.sample(range(40), rng.randrange(1, 10)):
        kh, cell = _shard_cell(n, rng.choice(sizes), 2)
        if kh in stored and rng.random() < 0.3:  # put again with the same state
            old, state = stored[kh]
            cell = (CellEntry(old.key_cbor, old.state_hash, old.size, 2, old.manifest_hash), state)
        cells[kh] = None if rng.random() < 0.25 else cell
    fields = list(base.packed())
    which = rng.randrange(6)
    if which < 5 and data:  # which == 5: the shard as stored
        field = bytearray(fields[which])
        at = rng.randrange(len(field) + 1)
        field[at : at + rng.randrange(len(data) + 1)] = data[: rng.randrange(len(data) + 1)]
        fields[which] = bytes(field)
    odd = PackedShard(*fields)
    inline_max = rng.choice([limit, limit, 0, 30])
    if EXT.shard_splice(*fields, cells, inline_max) is None:
        return False
    ours = _merged_shard(odd, cells, inline_max)
    theirs = _python(lambda: _merged_shard(odd, cells, inline_max))
    if ours != theirs:
        raise Disagreement("shard_splice", (fields, cells, inline_max), ours, theirs)
    return True


def check_bytes(data: bytes) -> None:
    """Every byte-level target on one input."""
    check_loads(data)
    check_decode_output(data)
    check_decode_record(data)


# --- inputs -----------------------------------------------------------------------------------


def random_value(rng: random.Random, depth: int = 0, wild: bool = True) -> Any:
    """A random value, mostly in the model; with ``wild`` also floats, big ints, tuples, odd
    tags and lone surrogates (which the reference refuses or handles). Not subclasses of the
    built-in types: the native code leaves those to the reference, and the reference's
    ``air.cbor.dumps`` fails one with an AssertionError (a str subclass), a bug of its own."""
    roll = rng.random()
    if depth > 4 or roll < 0.45:
        return _scalar(rng, wild)
    if roll < 0.7:
        items = [random_value(rng, depth + 1, wild) for _ in range(rng.randrange(5))]
        return tuple(items) if wild and rng.random() < 0.1 else items
    keys = [_key(rng, wild) for _ in range(rng.randrange(6))]
    return {k: random_value(rng, depth + 1, wild) for k in keys}


def _scalar(rng: random.Random, wild: bool) -> Any:
    choices: list[Callable[[], Any]] = [
        lambda: None,
        lambda: rng.random() < 0.5,
        lambda: rng.choice([0, 1, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63]),
        lambda: -rng.choice([1, 24, 25, 256, 257, 2**32, 2**63, 2**64]),
        lambda: rng.randrange(-(2**64), 2**64),
        lambda: "".join(rng.choice("ab/ü€𝄞\x00") for _ in range(rng.randrange(30))),
        lambda: rng.randbytes(rng.randrange(40)),
        lambda: cbor2.CBORTag(2000, rng.randbytes(16)),
    ]
    if wild:
        choices += [
            lambda: 1.5,
            lambda: 2**64 + rng.randrange(10),
            lambda: -(2**64) - 1,
            lambda: cbor2.CBORTag(
                rng.choice([2, 3, 2000, 55799]), rng.randbytes(rng.randrange(20))
            ),
            lambda: "x\ud800y",
        ]
    return rng.choice(choices)()


def _key(rng: random.Random, wild: bool) -> Any:
    roll = rng.random()
    if roll < 0.6:
        return "".join(rng.choice("abcü") for _ in range(rng.randrange(6)))
    if roll < 0.75:
        return rng.randbytes(rng.randrange(4))
    if roll < 0.95 or not wild:
        return rng.randrange(-300, 300)
    return rng.choice([True, None, 1.5, (1, 2)])


HEAD_BOUNDARIES = (0, 23, 24, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 2**64 - 1)
"""Where the shortest head of a value changes width (RFC 8949 §4.2.1), and the two ends."""
SEED_LENGTH_MAX = 256
"""Longest bytes, text, array or map a boundary seed builds; longer ones stop at the head."""
_WIDTH_AI = {1: 24, 2: 25, 4: 26, 8: 27}  # argument bytes -> the additional information


def _heads(major: int, value: int) -> list[bytes]:
    """Every head of ``value`` in ``major``: the shortest (canonical) first, then each longer."""
    top = major << 5
    forms = [bytes((top | value,))] if value < 24 else []
    for size, ai in _WIDTH_AI.items():
        if value < 1 << (8 * size):
            forms.append(bytes((top | ai,)) + value.to_bytes(size, "big"))
    return forms


def _announced(major: int, n: int) -> bytes:
    """What a head ``(major, n)`` is followed by: n bytes, characters, items or entries, or
    dec128's content after a tag; nothing for an integer or a length past the seed maximum."""
    if major in (0, 1) or (major in (2, 3, 4, 5) and n > SEED_LENGTH_MAX):
        return b""
    if major == 6:
        return b"\x50" + bytes(16)
    if major == 5:  # keys 0..n-1 ascend bytewise when encoded, as canonical order wants
        return b"".join(cbor.head(0, k) + b"\x00" for k in range(n))
    return {2: b"\x00", 3: b"a", 4: b"\x00"}[major] * n


def boundary_seeds() -> list[bytes]:
    """Each head boundary of major types 0 to 6 (and tag 2000, dec128's), in its shortest head
    and in every longer one, with dec128's content and false, true and null in longer heads too:
    the item alone, as the state payload of a step output and as the body of a journal record.
    So ``check_bytes`` meets every over-long head through ``loads``, ``decode_output`` and
    ``decode_record`` at the start of every run: a C decoder that took ``19 00 ff`` for 255 got
    past the mutation loop and 30,000 atheris runs seeded with random values alone.
    ``tests/air/test_cbor_heads.py`` holds the table these mirror, and checks they are here."""
    items = [
        form + _announced(major, value)
        for major in range(7)
        for value in HEAD_BOUNDARIES + ((cbor.DEC128_TAG,) if major == 6 else ())
        for form in _heads(major, value)
    ]
    dec128 = cbor.head(6, cbor.DEC128_TAG)
    items += [dec128 + form + bytes(16) for form in _heads(2, 16)]  # its content's heads
    items += [bytes(form) for simple in (20, 21, 22) for form in ((0xE0 | simple,), (0xF8, simple))]
    record_tail = b"".join(map(cbor.dumps, ["kind", "step", "subject", "/world/a/b"]))
    seeds = []
    for item in items:
        seeds.append(item)
        seeds.append(cbor.dumps({"state": item}))
        seeds.append(b"\xa4\x63seq\x00\x64body" + item + record_tail)
    return seeds


def seed_corpus(rng: random.Random, count: int = 200) -> list[bytes]:
    """The boundary heads (``boundary_seeds``), then canonical encodings of random values and
    of step outputs and journal records."""
    seeds = boundary_seeds()
    for _ in range(count):
        value = random_value(rng, wild=False)
        seeds.append(cbor.dumps(value))
        state = cbor.dumps(value)
        event = {"schema": "t/E@1", "value": cbor.dumps(random_value(rng, wild=False))}
        if rng.random() < 0.5:
            event["key"] = cbor.dumps("k")
        out: dict[str, Any] = {"state": state if rng.random() < 0.8 else None}
        if rng.random() < 0.4:
            out["domain_events"] = [event]
        if rng.random() < 0.3:
            out["effects"] = [{"kind": "timer.set", "params": cbor.dumps({"a": 1})}]
        if rng.random() < 0.2:
            out["ann"] = cbor.dumps(value)
        seeds.append(cbor.dumps(out))
        body = {"reducer": "demo/C@1", "key": cbor.dumps("k"), "src": 3, "state": state}
        seeds.append(journal.encode_record(rng.randrange(2**40), "/world/a/b", "step", body))
    return seeds


class Mutator:
    """Byte-level mutations of seeds."""

    def __init__(self, rng: random.Random, seeds: list[bytes]) -> None:
        self.rng = rng
        self.seeds = seeds

    def __iter__(self) -> Iterator[bytes]:
        while True:
            yield self.mutate(self.rng.choice(self.seeds))

    def mutate(self, data: bytes) -> bytes:
        rng = self.rng
        buf = bytearray(data)
        for _ in range(rng.choice([1, 1, 1, 2, 3, 8])):
            op = rng.randrange(8)
            at = rng.randrange(len(buf) + 1)
            if op == 0 and buf:  # flip a bit
                i = rng.randrange(len(buf))
                buf[i] ^= 1 << rng.randrange(8)
            elif op == 1 and buf:  # set a byte to an interesting value
                buf[rng.randrange(len(buf))] = rng.choice(
                    [
                        0x00,
                        0x17,
                        0x18,
                        0x19,
                        0x1A,
                        0x1B,
                        0x1F,
                        0x5F,
                        0x7F,
                        0x9F,
                        0xBF,
                        0xF4,
                        0xF6,
                        0xF7,
                        0xF9,
                        0xFF,
                    ]
                )
            elif op == 2:  # insert bytes
                buf[at:at] = rng.randbytes(rng.randrange(1, 4))
            elif op == 3 and buf:  # delete bytes
                del buf[at : at + rng.randrange(1, 4)]
            elif op == 4:  # truncate
                del buf[at:]
            elif op == 5:  # splice another seed
                other = rng.choice(self.seeds)
                cut = rng.randrange(len(other) + 1)
                buf[at:] = other[cut:]
            elif op == 6 and buf:  # widen a head: value < 24 written with ai 24 (non-shortest)
                i = rng.randrange(len(buf))
                if buf[i] & 31 < 24 and buf[i] >> 5 != 7:
                    buf[i : i + 1] = bytes([(buf[i] & 0xE0) | 24, buf[i] & 31])
            else:  # random bytes
                buf[at:at] = rng.randbytes(rng.randrange(1, 12))
        return bytes(buf)


# --- normalising outside values ------------------------------------------------------------------


def check_normalise(node: Any, schemas: Any, value: Any) -> None:
    """``air.values.normalise``: what the C code handles, the reference gives the same."""
    from air.values import normalise

    program = native.norm_program(node, schemas)
    try:
        ours: Any = EXT.normalise(program, value)
        handled = True
    except ValueError:
        ours, handled = None, False
    # ValueError: the reference lets base64.b64decode's escape for non-ASCII text (a bug of
    # air._scalars._norm_bytes, reported); the C code declines such text, so both paths agree.
    ok, theirs = _reference(lambda: normalise(node, value, schemas), (WorldError, ValueError))
    if handled and (not ok or not same(ours, theirs)):
        raise Disagreement("normalise", (node, value), ours, theirs)


_PRIMS = (
    "bool",
    "int",
    "nat",
    "text",
    "bytes",
    "hash",
    "uuid",
    "unit",
    "time",
    "duration",
    "dec128",
)


def random_type(rng: random.Random, depth: int = 0) -> Any:
    """A random AIR type node (no refs)."""
    from air.types import ListT, MapT, OptionT, Prim, Record, SetT, Variant

    roll = rng.random()
    if depth > 2 or roll < 0.4:
        return Prim(rng.choice(_PRIMS))
    if roll < 0.6:
        names = rng.sample(["a", "b", "key", "op", "record", "x1", "ü"], rng.randrange(1, 4))
        return Record(tuple((n, random_type(rng, depth + 1)) for n in names))
    if roll < 0.75:
        names = rng.sample(["Add", "Clear", "Set", "variant"], rng.randrange(1, 4))
        return Variant(tuple((n, random_type(rng, depth + 1)) for n in names))
    if roll < 0.85:
        return OptionT(random_type(rng, depth + 1))
    if roll < 0.95:
        return ListT(random_type(rng, depth + 1))
    return rng.choice([SetT(Prim("nat")), MapT(Prim("text"), Prim("nat"))])


def random_sugar(rng: random.Random, node: Any, depth: int = 0) -> Any:
    """A value for ``node``, mostly valid sugar, sometimes off in the ways users get it wrong."""
    from air.types import ListT, OptionT, Prim, Record, Variant

    if rng.random() < 0.08:
        return random_value(rng, depth + 3)  # anything at all
    if rng.random() < 0.05:
        kind = node.name if isinstance(node, Prim) else type(node).__name__.lower().rstrip("t")
        return {kind: random_sugar(rng, node, depth + 1)}  # the tagged lens
    if isinstance(node, Prim):
        return _prim_sugar(rng, node.name)
    if isinstance(node, Record):
        out = {
            n: random_sugar(rng, sub, depth + 1) for n, sub in node.fields if rng.random() < 0.93
        }
        if rng.random() < 0.05:
            out["extra"] = 1
        return out
    if isinstance(node, Variant):
        name, sub = rng.choice(node.cases)
        if rng.random() < 0.2:
            return name
        return {"$tag": name, "$value": random_sugar(rng, sub, depth + 1)}
    if isinstance(node, OptionT):
        return None if rng.random() < 0.3 else random_sugar(rng, node.item, depth + 1)
    if isinstance(node, ListT):
        items = [random_sugar(rng, node.item, depth + 1) for _ in range(rng.randrange(4))]
        return tuple(items) if rng.random() < 0.2 else items
    return random_value(rng, depth + 3)


def _prim_sugar(rng: random.Random, name: str) -> Any:
    valid: dict[str, Callable[[], Any]] = {
        "bool": lambda: rng.random() < 0.5,
        "int": lambda: rng.choice([0, -5, 2**63 - 1, -(2**63), 2**63, "12", True]),
        "nat": lambda: rng.choice([0, 7, 2**64 - 1, 2**64, -1, "3", False]),
        "text": lambda: rng.choice(["", "k", "ü€", "x\ud800", 5]),
        "bytes": lambda: rng.choice([b"", b"ab", "YWI=", "!"]),
        "hash": lambda: rng.choice([bytes(32), bytes(31), "blake3:" + "0" * 64]),
        "uuid": lambda: rng.choice([bytes(16), "01234567-89ab-cdef-0123-456789abcdef"]),
        "unit": lambda: rng.choice([None, {}, 0]),
        "time": lambda: rng.choice([0, 10**18, "2026-11-26T00:00:00Z", "17"]),
        "duration": lambda: rng.choice([5, "10s", -3]),
        "dec128": lambda: rng.choice(["1.5", 3]),
    }
    return valid[name]()
