"""Hostile reducer modules, one row per way a module can fail to run (issue 35, item 3).

For every row: ``world reducer check`` refuses it (``world.sdk.check_abi``), and ``world init``
and ``upgrade propose`` refuse it with the same detail. Where such a module gets into a running
world anyway (built here by WAT and installed past those checks), every delivery to it is a
``step.failed`` and a dead letter whose code and detail name the cause, while a healthy reducer
of the same world keeps stepping, and replay reproduces the records exactly. A module off the
ABI (an import, an export missing or of the wrong kind) cannot be in a stored world at all: AIR
validation refuses it when the world opens, so those rows run on a kernel over a runner, with
the AIR loaded without inspecting its wasm.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from air import LoadedAir, load_air
from air.errors import ManifestError
from cli.main import app
from kernel import Kernel
from kernel._deadletters import RETRIED
from kernel.cells import MemoryCellStore
from kernel.journal import MemoryJournal
from world import World
from world._airfiles import air_sources, builtin_sources, read_file
from world._runner import HostRunner
from world.errors import BuildError
from world.gov import propose
from world.history import rebuild_world, verify_world
from world.sdk import check_abi

from host_wat import reducer_wat, wasm
from worldkit import const_wasm, manifest, module, output, schema, write_world_air

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STATE = "t/State@1"
HIT, PING = "t/Hit@1", "t/Ping@1"
BAD, GOOD = "t/Bad@1", "t/Good@1"
_OUT = output({"n": 1})
_ALLOC = '(func (export "alloc") (param i32) (result i32) (i32.const 1024))'
_STEP = '(func (export "step") (param i32 i32) (result i32 i32) (i32.const 0) (i32.const 0))'
_MEMORY = '(memory (export "memory") 1)'


def _wat(*parts: str) -> str:
    return f"(module {' '.join(parts)})"


def _start(body: str) -> str:
    return reducer_wat(_OUT, extra=f"(func $s {body}) (start $s)")


def _invalid_body() -> bytes:
    data = bytearray(wasm(_wat(_MEMORY, _ALLOC, _STEP)))
    at = data.rfind(b"\x41\x00")  # the last i32.const 0 of step
    data[at] = 0x42  # i64.const 0: step returns an i64 where an i32 is declared
    return bytes(data)


@dataclass(frozen=True)
class Row:
    wasm: bytes
    code: str
    detail: str
    stored: bool = True  # whether a stored world can hold it (AIR validation passes)


ROWS = {
    "start-loops": Row(
        wasm(_start("(loop $l (br $l))")),
        "fuel_exhausted",
        "the start function used all 10000000 fuel",
    ),
    "start-traps": Row(
        wasm(_start("unreachable")), "trap", "the start function trapped: unreachable"
    ),
    "start-divides-by-zero": Row(
        wasm(_start("(drop (i32.div_u (i32.const 1) (i32.const 0)))")),
        "trap",
        "the start function trapped: integer_division_by_zero",
    ),
    "start-writes-out-of-bounds": Row(
        wasm(_start("(i32.store (i32.const 70000) (i32.const 1))")),
        "trap",
        "the start function trapped: memory_out_of_bounds",
    ),
    "initial-memory-over-the-limit": Row(
        wasm(reducer_wat(_OUT, memory='(memory (export "memory") 513)')),
        "memory_limit",
        f"initial memory of {513 * 65536} bytes exceeds {32 * 1024 * 1024}",
    ),
    "table-too-big": Row(
        wasm(reducer_wat(_OUT, extra="(table 10001 funcref)")),
        "table_limit",
        "initial table of 10001 elements exceeds 10000",
    ),
    "two-tables": Row(
        wasm(reducer_wat(_OUT, extra="(table 1 funcref) (table 1 funcref)")),
        "table_limit",
        "2 tables; a reducer may have one",
    ),
    "alloc-signature": Row(
        wasm(
            _wat(_MEMORY, '(func (export "alloc") (param i64) (result i32) (i32.const 0))', _STEP)
        ),
        "alloc_signature",
        "alloc must be (i32) -> i32",
    ),
    "step-signature": Row(
        wasm(
            _wat(_MEMORY, _ALLOC, '(func (export "step") (param i32) (result i32) (i32.const 0))')
        ),
        "step_signature",
        "step must be (i32, i32) -> (i32, i32) or (i32, i32, i32) -> ()",
    ),
    "code-that-does-not-validate": Row(_invalid_body(), "invalid_wasm", "", stored=True),
    "missing-step": Row(
        wasm(_wat(_MEMORY, _ALLOC)), "export_missing", "no export named 'step'", stored=False
    ),
    "missing-alloc": Row(
        wasm(_wat(_MEMORY, _STEP)), "export_missing", "no export named 'alloc'", stored=False
    ),
    "missing-memory": Row(
        wasm(_wat("(memory 1)", _ALLOC, _STEP)),
        "export_missing",
        "no export named 'memory'",
        stored=False,
    ),
    "step-is-a-global": Row(
        wasm(_wat(_MEMORY, _ALLOC, '(global (export "step") i32 (i32.const 0))')),
        "export_kind",
        "export 'step' is a global, not a func",
        stored=False,
    ),
    "memory-is-a-function": Row(
        wasm(_wat("(memory 1)", '(func (export "memory"))', _ALLOC, _STEP)),
        "export_kind",
        "export 'memory' is a func, not a memory",
        stored=False,
    ),
    "an-import-the-host-does-not-provide": Row(
        wasm(_wat('(import "env" "clock" (func (result i64)))', _MEMORY, _ALLOC, _STEP)),
        "imports",
        "reducers import nothing; found env::clock",
        stored=False,
    ),
}
STORED = [name for name, row in ROWS.items() if row.stored]


def _air(folder: Path, bad: bytes | None) -> Path:
    """A healthy reducer t/Good@1 (on t/Ping@1) and, unless ``bad`` is None, the keyed module
    t/Bad@1 (on t/Hit@1, keyed by ``key``) with ``bad`` as its wasm."""
    event = {"record": {"key": "text"}}
    modules = {GOOD: const_wasm(_OUT)}
    docs: list[dict[str, Any]] = [
        schema(STATE, {"record": {"n": "nat"}}),
        schema(HIT, event),
        schema(PING, event),
        module(GOOD, STATE, PING),
    ]
    routes = [{"event": PING, "reducer": GOOD}]
    if bad is not None:
        modules[BAD] = bad
        docs.append(module(BAD, STATE, HIT, key_schema="text"))
        routes.append({"event": HIT, "reducer": BAD, "key_field": "key"})
    return write_world_air(folder, modules, [*docs, manifest(routes)])


def _check_detail(row: Row) -> str:
    """What ``world reducer check`` says (``check_abi`` is its check); the row's code."""
    with pytest.raises(BuildError) as caught:
        check_abi("bad", row.wasm)
    assert caught.value.code == row.code
    if row.detail:
        assert caught.value.detail == row.detail
    return str(caught.value.detail)


def _refusal(caught: pytest.ExceptionInfo[ManifestError]) -> tuple[str, str]:
    (diagnostic,) = caught.value.diagnostics
    assert diagnostic.file.endswith("world.air.json")
    assert diagnostic.pointer == "/4/wasm"  # the defmodule of t/Bad@1
    return diagnostic.code, diagnostic.message


def _air_code(code: str) -> str:
    return {"export_missing": "air.module.exports", "export_kind": "air.module.exports"}.get(
        code, f"air.module.{code}"
    )


@pytest.mark.parametrize("name", list(ROWS))
def test_init_and_propose_refuse_a_hostile_module_as_reducer_check_does(
    tmp_path: Path, name: str
) -> None:
    row = ROWS[name]
    detail = _check_detail(row)
    air = _air(tmp_path / "air", row.wasm)
    with pytest.raises(ManifestError) as caught:
        World.create(tmp_path / "w", air)
    assert _refusal(caught) == (_air_code(row.code), detail)
    assert not (tmp_path / "w").exists()
    with World.create(tmp_path / "healthy", _air(tmp_path / "air0", None)) as world:
        seq_next = world.journal.seq_next
        with pytest.raises(ManifestError) as caught:
            propose(world, air)
        assert _refusal(caught) == (_air_code(row.code), detail)
        assert world.journal.seq_next == seq_next  # nothing journaled


def _unchecked_air(folder: Path) -> LoadedAir:
    """The AIR at ``folder`` loaded without inspecting its wasm: how a module past the checks
    reaches a kernel."""
    return load_air(builtin_sources() + air_sources(folder), read_file, None)


def _feed(kernel: Kernel) -> None:
    for schema_name, key in ((HIT, "a"), (PING, "p"), (HIT, "b"), (PING, "q"), (HIT, "a")):
        value_cbor, value = kernel.normalise_event(schema_name, {"key": key})
        kernel.ingest(schema_name, value_cbor, value)
    while kernel.tick():
        pass


@pytest.mark.parametrize("name", list(ROWS))
def test_a_hostile_module_in_a_running_kernel_is_a_dead_letter_and_the_rest_steps(
    tmp_path: Path, name: str
) -> None:
    row = ROWS[name]
    detail = _check_detail(row)
    air = _unchecked_air(_air(tmp_path / "air", row.wasm))
    kernel = Kernel(air, MemoryJournal(), MemoryCellStore(), HostRunner(air, tmp_path / "c"))
    _feed(kernel)
    records = list(kernel.journal.read(0))
    ticks = [(r.kind, r.body["reducer"]) for r in records if r.kind.startswith("step")]
    assert sorted(ticks) == [("step", GOOD)] * 2 + [("step.failed", BAD)] * 3
    letters = kernel.dead_letter_list()
    assert [(d.reducer, d.code) for d in letters] == [(BAD, row.code)] * 3
    assert all(detail in d.detail for d in letters)
    assert kernel.state_of(GOOD, None) is not None
    kernel.ingest_dead_letter(RETRIED, letters[0].id)  # a retry fails the same way
    assert kernel.tick()
    assert [d.code for d in kernel.dead_letter_list()] == [row.code] * 3
    letters = kernel.dead_letter_list()
    records = list(kernel.journal.read(0))
    replayed = Kernel(air, MemoryJournal(), MemoryCellStore(), HostRunner(air, tmp_path / "c"))
    # The same cache: a module compiled once is restored from it, and refused the same way.
    for record in records:
        replayed.apply(record)  # ReplayDivergence at the first difference
    assert replayed.dead_letter_list() == letters
    assert replayed.state_of(GOOD, None) == kernel.state_of(GOOD, None)
    assert replayed.counts() == kernel.counts()


def _create_unchecked(monkeypatch: pytest.MonkeyPatch, path: Path, air: Path) -> World:
    """A world whose AIR holds a module the checks refuse, as a world made before them would."""
    with monkeypatch.context() as patched:
        patched.setattr("world._world.check_modules", lambda air: None)
        return World.create(path, air)


@pytest.mark.parametrize("name", STORED)
def test_a_world_holding_a_hostile_module_runs_and_replays_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    row = ROWS[name]
    air = _air(tmp_path / "air", row.wasm)
    with _create_unchecked(monkeypatch, tmp_path / "w", air) as world:
        world.send_many([(HIT, {"key": "a"}), (PING, {"key": "p"}), (HIT, {"key": "b"})])
        world.run_until_idle()
        assert world.kernel.idle()
        assert [d.code for d in world.kernel.dead_letter_list()] == [row.code] * 2
        assert world.state(GOOD) == {"n": 1}
    report = verify_world(tmp_path / "w")
    assert report.ok, report
    rebuild_world(tmp_path / "w", tmp_path / "rebuilt")  # not refused: it rebuilds as it ran
    with World.open(tmp_path / "rebuilt", readonly=True) as rebuilt:
        assert [d.code for d in rebuilt.kernel.dead_letter_list()] == [row.code] * 2


_KILLED_CHILD = """
import os, sys
from pathlib import Path
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from world import World
world = World.open(Path(sys.argv[1]))
world.send_many([("t/Hit@1", {"key": "a"}), ("t/Ping@1", {"key": "p"}), ("t/Hit@1", {"key": "b"})])
world.run_until_idle()
print(len(world.kernel.dead_letter_list()))
os._exit(0)  # no close, no checkpoint: as if killed
"""


@pytest.mark.parametrize("name", ["start-loops", "step-signature"])
def test_recovery_after_a_kill_reproduces_the_dead_letters_of_a_hostile_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    row = ROWS[name]
    _create_unchecked(monkeypatch, tmp_path / "w", _air(tmp_path / "air", row.wasm)).close()
    args = [str(tmp_path / "w"), str(ROOT), str(HERE.parent)]
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_CHILD, *args], check=True, capture_output=True, text=True
    )
    assert done.stdout.strip() == "2"
    with World.open(tmp_path / "w") as world:  # recovery re-applies the journal
        assert [d.code for d in world.kernel.dead_letter_list()] == [row.code] * 2
        assert world.state(GOOD) == {"n": 1}
        assert world.kernel.idle()
        kinds = [r.kind for r in world.journal.read(0) if r.kind.startswith("step")]
    assert kinds == ["step.failed", "step", "step.failed"]
    assert verify_world(tmp_path / "w").ok


def test_a_memory_maximum_over_the_limit_is_accepted_and_steps(tmp_path: Path) -> None:
    # Not a row of refusals: the store limiter bounds growth whatever the module declares.
    bounded = wasm(reducer_wat(_OUT, memory='(memory (export "memory") 1 65536)'))
    check_abi("bounded", bounded)
    with World.create(tmp_path / "w", _air(tmp_path / "air", bounded)) as world:
        world.send(HIT, {"key": "a"})
        world.run_until_idle()
        assert world.state(BAD, "a") == {"n": 1}
        assert world.kernel.dead_letter_list() == []


def test_rustc_extra_exports_are_refused_by_reducer_check_only(tmp_path: Path) -> None:
    """``reducer check`` is stricter than a world on extra exports (``world.sdk``): a module
    with rustc's ``__heap_base`` runs, so ``world init`` takes it."""
    extra = wasm(reducer_wat(_OUT, extra='(global (export "__heap_base") i32 (i32.const 0))'))
    with pytest.raises(BuildError) as caught:
        check_abi("rustc", extra)
    assert caught.value.code == "exports"
    with World.create(tmp_path / "w", _air(tmp_path / "air", extra)) as world:
        world.send(HIT, {"key": "a"})
        world.run_until_idle()
        assert world.state(BAD, "a") == {"n": 1}


def test_world_init_s_error_is_reducer_check_s_detail_at_the_module(tmp_path: Path) -> None:
    def world_cli(*args: object) -> tuple[int, str, str]:
        result = CliRunner().invoke(app, [str(a) for a in args])
        return result.exit_code, result.stdout, result.stderr

    air = _air(tmp_path / "air", ROWS["start-loops"].wasm)
    bad = tmp_path / "air" / "t_Bad@1.wasm"
    detail = ROWS["start-loops"].detail
    code, _, check_err = world_cli("reducer", "check", bad)
    assert (code, check_err.strip()) == (1, f"error: {bad}: {detail}")
    code, _, init_err = world_cli("init", tmp_path / "w", "--air", air)
    assert code == 1
    assert f"world.air.json:/4/wasm: {detail} [air.module.fuel_exhausted]" in init_err
    answer = json.loads(world_cli("reducer", "check", bad, "--json")[1])
    assert answer["code"] == "fuel_exhausted"
