"""Every error the kernel raises on purpose; the whole tree is drawn in ``air.errors``.

``JournalProblem`` is the data of a ``JournalCorrupt`` (one bad place in a journal), kept here
beside it because every surface that reports one (opening, reading, ``verify``) builds both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from air.errors import WorldError

__all__ = [
    "FuelExhausted",
    "JournalCorrupt",
    "JournalProblem",
    "MemoryLimitExceeded",
    "ObjectMissing",
    "OutputTooLarge",
    "ReducerError",
    "ReducerLoadError",
    "ReducerTrap",
    "ReplayDivergence",
    "StepRefused",
    "StepRejected",
    "WasmFormatError",
]


class ReducerError(WorldError):
    """A reducer module could not be loaded or a step failed. ``module`` is its hash."""

    def __init__(self, module: str, code: str, detail: str) -> None:
        self.module = module
        self.code = code
        self.detail = detail
        super().__init__(f"{module}: {detail} [{code}]")


class ReducerLoadError(ReducerError):
    """The module was refused at load time (not wasm, imports, ABI exports, compile, ...)."""


class ReducerTrap(ReducerError):
    """The step trapped; ``trap_code`` is wasmtime's trap code in lower case."""

    def __init__(
        self, module: str, trap_code: str, *, code: str = "trap", detail: str = ""
    ) -> None:
        self.trap_code = trap_code
        super().__init__(module, code, detail or f"trapped: {trap_code}")


class FuelExhausted(ReducerTrap):
    """The step used all of ``fuel_per_step``."""

    def __init__(self, module: str, fuel_per_step: int) -> None:
        self.fuel_per_step = fuel_per_step
        super().__init__(
            module, "out_of_fuel", code="fuel_exhausted", detail=f"used all {fuel_per_step} fuel"
        )


class MemoryLimitExceeded(ReducerTrap):
    """The step trapped with its memory grown as far as ``memory_bytes_max`` allows."""

    def __init__(self, module: str, trap_code: str, memory_bytes_max: int) -> None:
        self.memory_bytes_max = memory_bytes_max
        detail = f"trapped ({trap_code}) at the {memory_bytes_max}-byte memory limit"
        super().__init__(module, trap_code, code="memory_limit", detail=detail)


class OutputTooLarge(ReducerError):
    def __init__(self, module: str, output_bytes: int, output_bytes_max: int) -> None:
        self.output_bytes = output_bytes
        self.output_bytes_max = output_bytes_max
        super().__init__(
            module, "output_too_large", f"output of {output_bytes} bytes exceeds {output_bytes_max}"
        )


class StepRejected(WorldError):
    """A step's output failed decoding or validation; ``pointer`` is inside the output."""

    def __init__(self, module: str, code: str, pointer: str, detail: str) -> None:
        self.module = module
        self.code = code
        self.pointer = pointer
        self.detail = detail
        super().__init__(f"{module}: output {pointer}: {detail} [{code}]")


class StepRefused(StepRejected):
    """The reducer refused its event (output ``{"error": reason}``, ``kernel.abi``): a
    deliberate, well-formed failure, journaled as ``step.failed`` with code ``refused`` and
    ``reason`` as the detail."""

    def __init__(self, module: str, reason: str) -> None:
        super().__init__(module, "refused", "/error", reason)
        self.reason = reason


class CellRefused(WorldError):
    """A delivery no module of the cell's era can take (``kernel._eras``): its reducer left
    the manifest, or the cell's era predates the event. Journaled as ``step.failed``."""

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        self.detail = detail
        super().__init__(f"{detail} [{code}]")


class WasmFormatError(WorldError):
    """The bytes are not a (parsable) core wasm module; ``offset`` is where reading failed."""

    def __init__(self, offset: int, detail: str) -> None:
        self.offset = offset
        self.detail = detail
        super().__init__(f"not a wasm module (at byte {offset}): {detail}")


@dataclass(frozen=True, slots=True)
class JournalProblem:
    """One bad place in a journal, as opening, reading, ``verify`` and ``repair`` describe it.

    ``segment`` is the segment file name, ``offset`` the byte offset of the bad frame (or ``0``
    for the segment header), ``seq`` the sequence number expected there (``None`` when unknown),
    ``reason`` one of ``PROBLEM_REASONS``, ``detail`` free text for humans. ``describe`` is the
    one line every surface prints (``JournalCorrupt``'s message, ``world info``'s open error,
    ``world journal verify``); ``as_json`` is ``{segment, offset, seq, reason, detail}``.
    """

    segment: str
    offset: int
    seq: int | None
    reason: str
    detail: str = ""

    def describe(self) -> str:
        seq = "" if self.seq is None else f", seq {self.seq}"
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.segment} at offset {self.offset}{seq}: {self.reason}{detail}"

    def as_json(self) -> dict[str, Any]:
        return {
            "segment": self.segment,
            "offset": self.offset,
            "seq": self.seq,
            "reason": self.reason,
            "detail": self.detail,
        }

    def error(self) -> JournalCorrupt:
        return JournalCorrupt(self.segment, self.offset, self.seq, self.reason, self.detail)


class JournalCorrupt(WorldError):
    """A record inside the journal is bad, so the journal refuses to open or read on.

    The fields are a ``JournalProblem``'s (``problem`` gives it back): ``segment``, ``offset``,
    ``seq`` (``None`` when unknown), ``reason`` (one of ``PROBLEM_REASONS``), ``detail``. The
    message is ``"journal corrupt: " + problem.describe()``.
    """

    def __init__(
        self, segment: str, offset: int, seq: int | None, reason: str, detail: str = ""
    ) -> None:
        self.segment = segment
        self.offset = offset
        self.seq = seq
        self.reason = reason
        self.detail = detail
        super().__init__(f"journal corrupt: {self.problem.describe()}")

    @property
    def problem(self) -> JournalProblem:
        return JournalProblem(self.segment, self.offset, self.seq, self.reason, self.detail)


class ReplayDivergence(WorldError):
    """Re-executing the journal produced something other than what it recorded: at record
    ``seq`` (for ``entity``), the first differing ``field`` (``kind``, ``subject`` or
    ``body.<name>``) was ``expected`` in the journal and ``actual`` on re-execution."""

    def __init__(
        self, seq: int, entity: str, expected: str, actual: str, field: str = "record"
    ) -> None:
        self.seq = seq
        self.entity = entity
        self.field = field
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"replay diverged at seq {seq} ({entity}): {field} expected {expected}, got {actual}"
        )


class ObjectMissing(WorldError):
    """The content store holds nothing at ``address`` (``blake3:<hex>``). A store of files names
    the file it looked for (``path``); a caller that knows which module the object is (the
    wasm of a reducer) names it (``module``). Both are empty when unknown."""

    def __init__(self, address: str, path: str = "", module: str = "") -> None:
        self.address = address
        self.path = path
        self.module = module
        where = f" at {path}" if path else ""
        what = f" (the wasm of module {module})" if module else ""
        super().__init__(f"no object {address}{where}{what}")
