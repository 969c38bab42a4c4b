"""Inline WAT reducers for the host tests: well-behaved ones, hostile ones, broken ones.

``reducer(...)`` builds a module with the ABI exports whose ``step`` runs some WAT first (a
loop, a trap, a memory bomb) and then returns ``output`` from a data segment, in either step
flavour. The carry-over modules keep a counter in memory, in a non-exported mutable global, in
a table, or in a dropped data segment, and report it as their state, so a host that let one
step see another's leftovers would produce different outputs.
"""

from __future__ import annotations

from typing import Literal

import wasmtime

from air import cbor

StepAbi = Literal["multi_value", "retptr"]

COUNT_STATE_OUTPUT = cbor.dumps({"state": cbor.dumps(0)})
"""``{state: h'00'}``; the carry-over modules overwrite the last byte with their counter."""
OK_OUTPUT = cbor.dumps({"state": cbor.dumps({"count": 1, "events": 1})})
OUT_AT = 16
HEAP_AT = 1024


def wat_bytes(data: bytes) -> str:
    return "".join(f"\\{b:02x}" for b in data)


def wasm(wat: str) -> bytes:
    return bytes(wasmtime.wat2wasm(wat))


def _step_func(step_abi: StepAbi, body: str, out_len: int) -> str:
    if step_abi == "multi_value":
        return f"""
  (func (export "step") (param $ptr i32) (param $len i32) (result i32 i32)
    {body}
    i32.const {OUT_AT} i32.const {out_len})"""
    return f"""
  (func (export "step") (param $ret i32) (param $ptr i32) (param $len i32)
    {body}
    (i32.store (local.get $ret) (i32.const {OUT_AT}))
    (i32.store offset=4 (local.get $ret) (i32.const {out_len})))"""


def reducer_wat(
    output: bytes = OK_OUTPUT,
    *,
    step_abi: StepAbi = "multi_value",
    body: str = "",
    out_len: int | None = None,
    memory: str = '(memory (export "memory") 1)',
    alloc: str = "",
    extra: str = "",
) -> str:
    """A reducer: bump ``alloc`` from HEAP_AT, ``step`` runs ``body`` then returns ``output``."""
    alloc = (
        alloc
        or f"""
  (global $bump (mut i32) (i32.const {HEAP_AT}))
  (func (export "alloc") (param $len i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $bump))
    (global.set $bump (i32.add (global.get $bump) (local.get $len)))
    (local.get $p))"""
    )
    size = len(output) if out_len is None else out_len
    return f"""(module
  {memory}
  (data (i32.const {OUT_AT}) "{wat_bytes(output)}")
  {alloc}
  {_step_func(step_abi, body, size)}
  {extra}
)"""


def reducer(output: bytes = OK_OUTPUT, **kwargs: object) -> bytes:
    return wasm(reducer_wat(output, **kwargs))  # type: ignore[arg-type]


# --- hostile bodies -------------------------------------------------------------------------

INFINITE_LOOP = "(loop $l (br $l))"
UNREACHABLE = "unreachable"
# Grow one page at a time until refused, then trap the way a C allocator's abort() would.
MEMORY_BOMB = """
    (block $done (loop $grow
      (br_if $done (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
      (br $grow)))
    unreachable"""
# Grow until refused and carry on: hitting the limit is not an error in itself.
MEMORY_GROW_AND_COPE = """
    (block $done (loop $grow
      (br_if $done (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
      (br $grow)))"""
STACK_OVERFLOW_EXTRA = (
    '(func $deep (export "deep") (param i32) (result i32) (call $deep (local.get 0)))'
)
STACK_OVERFLOW = "(drop (call $deep (i32.const 0)))"

_COUNTER_BYTE = OUT_AT + len(COUNT_STATE_OUTPUT) - 1

# ``$report`` writes a small counter (0..23, one canonical CBOR byte) as the state payload.
_REPORT = f"""(func $report (param $v i32)
    (i32.store8 (i32.const {_COUNTER_BYTE}) (i32.rem_u (local.get $v) (i32.const 24))))"""

MEMORY_COUNTER = reducer_wat(
    COUNT_STATE_OUTPUT,
    body="""
    (i32.store (i32.const 8) (i32.add (i32.load (i32.const 8)) (i32.const 1)))
    (call $report (i32.load (i32.const 8)))""",
    extra=_REPORT,
)

GLOBAL_COUNTER = reducer_wat(
    COUNT_STATE_OUTPUT,
    body="""
    (global.set $n (i32.add (global.get $n) (i32.const 1)))
    (call $report (global.get $n))""",
    extra=f"(global $n (mut i32) (i32.const 0)) {_REPORT}",
)

TABLE_COUNTER = reducer_wat(
    COUNT_STATE_OUTPUT,
    body="""
    (if (ref.is_null (table.get $t (i32.const 0)))
      (then (table.set $t (i32.const 0) (ref.func $mark)) (call $report (i32.const 1)))
      (else (call $report (i32.const 2))))""",
    extra=f"(table $t 1 funcref) (func $mark) (elem declare func $mark) {_REPORT}",
)

DROPPED_SEGMENT_COUNTER = reducer_wat(
    COUNT_STATE_OUTPUT,
    body="""
    (memory.init $seg (i32.const 512) (i32.const 0) (i32.const 1))
    (data.drop $seg)
    (call $report (i32.load8_u (i32.const 512)))""",
    extra=f'(data $seg "\\01") {_REPORT}',
)

CARRY_OVER_MODULES = {
    "memory": MEMORY_COUNTER,
    "global": GLOBAL_COUNTER,
    "table": TABLE_COUNTER,
    "data_segment": DROPPED_SEGMENT_COUNTER,
}
