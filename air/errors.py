"""The error tree. Every error the project raises on purpose derives from ``WorldError``.

    WorldError
    ├── CborError(pointer, code, detail)          canonical CBOR encode/decode
    ├── ValueMismatch(pointer, code, detail)      a value does not match its AIR type
    ├── ExprError(pointer, code, detail)          Expr evaluation failed (deterministically)
    ├── ManifestError(diagnostics)                AIR failed validation; all diagnostics at once
    ├── ReducerError(module, code, detail)        kernel.wasm._host: load or step failed
    │   ├── ReducerLoadError                      rejected at load (not_wasm, imports, export_missing, ...)
    │   ├── ReducerTrap(trap_code)                code "trap"; trap_code e.g. "unreachable"
    │   │   ├── FuelExhausted(fuel_per_step)      code "fuel_exhausted"
    │   │   └── MemoryLimitExceeded(memory_bytes_max)  code "memory_limit"
    │   └── OutputTooLarge(output_bytes, output_bytes_max)
    ├── StepRejected(module, code, pointer, detail)  kernel._abi: output failed decoding/validation
    ├── WasmFormatError(offset, detail)           kernel.wasm._info: bytes are not a wasm module
    ├── JournalCorrupt(segment, offset, seq, reason)  kernel._journal: a bad record in the journal
    ├── ReplayDivergence(seq, entity, field, expected, actual)  kernel._divergence: replay differed
    ├── ObjectMissing(address)                    kernel._cells: nothing in the CAS at an address
    ├── WorldLocked(path, mode)                   world._fsutil: a lock that conflicts is held
    ├── WorldExists, NotAWorld, GenesisMismatch, CheckpointAhead, Interrupted, WorldStale,
    │   EventRejected, CheckpointMoved            world.errors: the world directory layer
    ├── StoreFailed(path)                         world.cellstore._store: a flush failed earlier
    ├── ReceiptRefused(intent_hash, reason), ReceiptKeyDamaged(path, reason)  world.effects._receipts
    ├── CellFileRefused(path, reason)             world.moves._cellfiles: an export file that does not hold
    ├── MigrationRefused(reducer, reason)         world.moves._migrate
    ├── SeqPastEnd(seq, seq_last)                 world.history._timetravel
    ├── ProtocolError(code, detail), ServedError(error_class, code, detail, fields)  world.serve._protocol
    ├── BuildError(reducer, code, detail)         world.sdk: a reducer that does not build
    ├── LimitExceeded(limit, value)               a named limit was hit
    ├── HashMismatch(expected, actual)            content did not match its address
    ├── JsonError(source, line, column, code, detail)  JSON text that cannot be read
    ├── StorageError(path, operation, errno_name, detail)  the OS failed a durable operation
    │   └── JournalWriteFailed(..., rolled_back)  a journal commit failed; nothing of it is kept
    ├── StoreDamaged(path, reason)                a derived file (checkpoint, index, state) is
    │                                             missing or damaged; rebuilt from the journal
    └── UsageError(detail)                        bad input from a user of the API/CLI; raised
        │                                         as one of its subclasses:
        ├── UnknownName(kind, name, known)        an unknown schema, reducer, route, backend
        ├── InvalidArgument(name, value, reason)  an argument outside its domain
        ├── WrongMode(operation, mode)            e.g. a write to a read-only handle
        ├── KeyMismatch(reducer, keyed)           a key for a non-keyed reducer, or none for a keyed one
        └── InputFileError(path, reason)          an input file unreadable, empty or of the wrong kind

Fields are structured; messages are derived from them. Tests assert on type and fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "CborError",
    "Diagnostic",
    "ExprError",
    "HashMismatch",
    "InputFileError",
    "InvalidArgument",
    "JournalWriteFailed",
    "JsonError",
    "KeyMismatch",
    "LimitExceeded",
    "ManifestError",
    "StorageError",
    "StoreDamaged",
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


class StorageError(WorldError):
    """The OS failed a durable operation (``errno_name`` e.g. ``ENOSPC``, ``EIO``, ``EROFS``)."""

    def __init__(self, path: str, operation: str, errno_name: str, detail: str) -> None:
        self.path = path
        self.operation = operation
        self.errno_name = errno_name
        self.detail = detail
        super().__init__(f"{operation} {path}: {detail} [{errno_name}]")


class JournalWriteFailed(StorageError):
    """A journal commit failed. ``rolled_back`` is True when every byte of the failed batch was
    cut again, so none of it is durable (a retry cannot duplicate it); False when the cut itself
    failed and the journal refuses further writes until it is reopened."""

    def __init__(
        self, path: str, operation: str, errno_name: str, detail: str, *, rolled_back: bool
    ) -> None:
        self.rolled_back = rolled_back
        super().__init__(path, operation, errno_name, detail)


class StoreDamaged(WorldError):
    """A derived file (checkpoint, index, shard, cell state, snapshot) is missing or damaged.
    The journal is the source of truth, so the world rebuilds from it."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class UnknownName(UsageError):
    """``name`` is not a known ``kind`` (``schema``, ``reducer``, ``route``, ``backend``, ...);
    ``known`` lists the names that are (possibly shortened)."""

    def __init__(self, kind: str, name: str, known: list[str] | None = None) -> None:
        self.kind = kind
        self.name = name
        self.known = list(known or [])
        hint = f"; known: {', '.join(self.known[:20])}" if self.known else ""
        super().__init__(f"unknown {kind} {name}{hint}")


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
