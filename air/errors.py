"""The error tree. Every error the project raises on purpose derives from ``WorldError``.

Each layer keeps every class it raises in one module (``air.errors``, ``kernel.errors``,
``world.errors``); the tree is drawn here, once, and ``tests/air/test_errors.py`` holds the drawing
to the classes (every class is drawn, under its real base, in its real module).

    WorldError                                        air.errors
    ├── CborError(pointer, code, detail)              canonical CBOR encode/decode
    ├── ValueMismatch(pointer, code, detail)          a value does not match its AIR type
    ├── ExprError(pointer, code, detail)              Expr evaluation failed (deterministically)
    ├── ManifestError(diagnostics)                    AIR failed validation; all diagnostics at once
    ├── JsonError(source, line, column, code, detail)  JSON text that cannot be read
    ├── HashMismatch(expected, actual)                content did not match its address
    ├── LimitExceeded(limit, value)                   a named limit was hit
    ├── UsageError(detail)                            bad input from a user of the API or CLI
    │   ├── UnknownName(kind, name, known)            an unknown schema, reducer, route, backend
    │   ├── AmbiguousName(kind, name, candidates)      a prefix that more than one name starts with
    │   ├── InvalidArgument(name, value, reason)      an argument outside its domain
    │   ├── WrongMode(operation, mode)                e.g. a write to a read-only handle
    │   ├── KeyMismatch(reducer, keyed)               a key for a non-keyed reducer, or none for a keyed one
    │   ├── InputFileError(path, reason)              an input file unreadable, empty or of the wrong kind
    │   └── OutputExists(path, kind)                  world.errors: an export would write over a file
    ├── ReducerError(module, code, detail)            kernel.errors: a module's load or step failed
    │   ├── ReducerLoadError                          refused at load (not_wasm, imports, exports, ...)
    │   ├── ReducerTrap(trap_code)                    code "trap"; trap_code e.g. "unreachable"
    │   │   ├── FuelExhausted(fuel_per_step)          code "fuel_exhausted"
    │   │   └── MemoryLimitExceeded(memory_bytes_max)  code "memory_limit"
    │   └── OutputTooLarge(output_bytes, output_bytes_max)
    ├── StepRejected(module, code, pointer, detail)   kernel.errors: output failed decoding or validation
    │   └── StepRefused(module, reason)               the reducer refused its event, saying why
    ├── CellRefused(code, detail)                     kernel.errors: no module of the cell's era takes it
    ├── WasmFormatError(offset, detail)               kernel.errors: bytes are not a wasm module
    ├── JournalCorrupt(segment, offset, seq, reason, detail)  kernel.errors: a bad record in the journal
    ├── ReplayDivergence(seq, entity, field, expected, actual)  kernel.errors: replay differed
    ├── ObjectMissing(address, path, module)          kernel.errors: nothing in the CAS at an address
    ├── StorageError(path, operation, errno_name, detail)  world.errors: the OS failed a durable operation
    │   └── JournalWriteFailed(..., rolled_back)      a journal commit failed; nothing of it is kept
    ├── DerivedStateError                             world.errors: derived state is not usable; the
    │   │                                             journal has everything, the world rebuilds
    │   ├── StoreDamaged(path, reason)                a checkpoint, index, shard or state missing or damaged
    │   ├── CheckpointAhead(checkpoint_seq_next, journal_seq_next)  committed records were lost
    │   ├── CheckpointMoved(path)                     a live writer replaced a reader's checkpoint
    │   └── StoreFailed(path)                         a flush failed earlier; reopen the store
    ├── Refused                                       world.errors: input not taken, nothing stored
    │   ├── ReceiptRefused(intent_hash, reason)       forged, altered, or for no waiting intent
    │   ├── CellFileRefused(path, reason)             an exported cell that does not hold
    │   ├── MigrationRefused(reducer, reason)         a reducer that cannot become cells
    │   ├── UpgradeRefused(source, problems)          an AIR that cannot be proposed to this world
    │   ├── EventRejected(index, cause, where)        one event of a batch failed; none journaled
    │   └── ArchiveRefused(archive, reason)           another world's archive, or not an archive
    ├── WorldUnavailable                              world.errors: the directory cannot be used now
    │   ├── NotAWorld(path)                           no world there
    │   ├── NotACluster(path, reason)                 no partitioned world there
    │   ├── WorldExists(path)                         a new world needs an empty folder
    │   ├── WorldLocked(path, mode)                   a lock that conflicts is held
    │   │   └── WorldServed(path)                     held by `world serve`, not asked through it
    │   ├── JournalReplaced(path, how)                a writer's locked directory was swapped
    │   ├── JournalDamaged(path, finding)             a check found damage: no write until repair
    │   ├── WorldStale(reason)                        this handle stopped after an error; reopen
    │   └── GenesisMismatch(expected, actual)         the journal was started by another manifest
    ├── ServeError                                    world.errors: a served world
    │   ├── ProtocolError(code, detail)               a frame that is not of the control protocol
    │   ├── SocketNotTrusted(path, reason)            not this world's socket; nothing sent on it
    │   ├── ServerBusy(clients_max)                   all connections taken; answered and closed
    │   └── ServedError(error_class, code, detail, fields)  the served world answered an error
    ├── Interrupted(seq_next)                         world.errors: stopped at a tick boundary
    ├── SeqPastEnd(seq, seq_last)                     world.errors: a position past the journal's end
    ├── ReceiptKeyDamaged(path, reason)               world.errors: the receipt key file is not a key
    └── BuildError(reducer, code, detail)             world.errors: a reducer that does not build

Fields are structured; messages are derived from them. Tests assert on type and fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "AmbiguousName",
    "CborError",
    "Diagnostic",
    "ExprError",
    "HashMismatch",
    "InputFileError",
    "InvalidArgument",
    "JsonError",
    "KeyMismatch",
    "LimitExceeded",
    "ManifestError",
    "UnknownName",
    "UsageError",
    "ValueMismatch",
    "WorldError",
    "WrongMode",
]


class WorldError(Exception):
    """Root of every error the world kernel raises deliberately."""


class _PointedError(WorldError):
    def __init__(self, pointer: str, code: str, detail: str) -> None:
        self.pointer = pointer
        self.code = code
        self.detail = detail
        super().__init__(f"{pointer}: {detail} [{code}]")


class CborError(_PointedError):
    """Bytes are not canonical CBOR, or a value cannot be encoded canonically."""


class ValueMismatch(_PointedError):
    """A value does not match its AIR type; ``pointer`` is inside the value."""


class ExprError(_PointedError):
    """An Expr could not be evaluated; ``pointer`` is inside the expression."""


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding about AIR: where (file + JSON pointer), what (stable code), and why."""

    file: str
    pointer: str
    code: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def render(self) -> str:
        return f"{self.file}:{self.pointer or '/'}: {self.message} [{self.code}]"

    def as_json(self) -> dict[str, str]:
        return {
            "file": self.file,
            "pointer": self.pointer,
            "code": self.code,
            "message": self.message,
            "severity": self.severity,
        }


@dataclass
class ManifestError(WorldError):
    """AIR failed validation; carries every error diagnostic found, not just the first."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)


class HashMismatch(WorldError):
    def __init__(self, expected: str, actual: str) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(f"expected {expected}, found {actual}")


class LimitExceeded(WorldError):
    def __init__(self, limit: str, value: int, detail: str = "") -> None:
        self.limit = limit
        self.value = value
        super().__init__(f"limit {limit}={value} exceeded{': ' + detail if detail else ''}")


class UsageError(WorldError):
    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)


class JsonError(WorldError):
    """JSON text that cannot be read: malformed, too deep, a number too long, a duplicate key,
    a lone surrogate, or bytes that are not UTF-8. ``line``/``column`` are 1-based."""

    def __init__(self, source: str, line: int, column: int, code: str, detail: str) -> None:
        self.source = source
        self.line = line
        self.column = column
        self.code = code
        self.detail = detail
        super().__init__(f"{source}:{line}:{column}: {detail} [{code}]")


class UnknownName(UsageError):
    """``name`` is not a known ``kind`` (``schema``, ``reducer``, ``route``, ``backend``, ...);
    ``known`` lists the names that are (possibly shortened)."""

    def __init__(self, kind: str, name: str, known: list[str] | None = None) -> None:
        self.kind = kind
        self.name = name
        self.known = list(known or [])
        hint = f"; known: {', '.join(self.known[:20])}" if self.known else ""
        super().__init__(f"unknown {kind} {name}{hint}")


class AmbiguousName(UsageError):
    """``name``, given as a prefix of a ``kind`` (an intent hash, a run id), starts more than one
    of them: ``candidates`` (the first 20 are named, in full)."""

    def __init__(self, kind: str, name: str, candidates: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.candidates = list(candidates)
        more = f" and {len(self.candidates) - 20} more" if len(self.candidates) > 20 else ""
        super().__init__(
            f"{kind} {name} is ambiguous: it starts {len(self.candidates)} of them: "
            f"{', '.join(self.candidates[:20])}{more}; give more of it"
        )


class InvalidArgument(UsageError):
    """Argument ``name`` has a value outside its domain (``reason`` says what is allowed)."""

    def __init__(self, name: str, value: object, reason: str) -> None:
        self.name = name
        self.value = repr(value) if not isinstance(value, str | int) else value
        self.reason = reason
        super().__init__(f"{name}: {reason} (got {self.value!r})")


class WrongMode(UsageError):
    """``operation`` is not allowed while the object is in ``mode`` (``read-only``,
    ``closed``, ``failed``, ``not started``, ...)."""

    def __init__(self, operation: str, mode: str) -> None:
        self.operation = operation
        self.mode = mode
        super().__init__(f"cannot {operation}: {mode}")


class KeyMismatch(UsageError):
    """A key was given for a non-keyed reducer (``keyed`` False) or none for a keyed one."""

    def __init__(self, reducer: str, keyed: bool) -> None:
        self.reducer = reducer
        self.keyed = keyed
        super().__init__(
            f"{reducer} is keyed: give a key" if keyed else f"{reducer} is not keyed: give no key"
        )


class InputFileError(UsageError):
    """An input file (``path``) cannot be used: unreadable, empty, or not what was expected."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")
