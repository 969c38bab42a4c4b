"""Effects that are not live: where a world's outward effects go when nothing should reach the
outside world (``world run|serve --effects live|replay|stub|deny``).

A fork (``world fork``) or a copy of a world re-derives the intents its parent already sent,
and a live run of it would send them again, to real servers. The mode says who answers them:

* ``live``: the adapters, as always.
* ``stub``: no adapter; each intent gets a *stub receipt* at once: receipt status ``stub``
  (``STUB_STATUS``), adapter id ``effects.stub``, and a payload of the effect's receipt schema
  that says nothing happened. For ``http.request`` that is ``{status: 0, headers: {}, body_ref:
  null, body_preview: "stub: ..."}``: HTTP status 0 is what the adapter's own transport
  failures carry, so a plan's guards take their "no answer" branch (the order world's ``failed``
  edge). The receipt status, not a body field, is the mark: it is covered by the receipt's
  signature (a body field beside ``sig`` would not be, and could be edited unseen), it is what
  ``world effects ls`` shows (``done (stub)``), and ``journal tail`` shows it with the adapter
  id. Like any status but ``ok`` it reaches its waiter and is a dead letter (``effect_failed``,
  ``http.request ended stub``): the effect did not happen, and the world says so.
* ``replay``: the receipt journaled earlier for the same intent hash answers it again (status
  and payload as journaled, adapter id ``effects.replay``). It is looked up in this world's
  journal and, for a fork, in its parent's journal after the fork point: a fork re-derives its
  parent's intents with the same hashes (the idempotency key is the run and step, or the cell
  and delivery), so a fork replayed runs against the answers its parent got. An intent with no
  such receipt is denied, as below. The parent's journal is opened read-only (no lock, as any
  reader); if it cannot be opened, only this world's journal answers.
* ``deny``: no adapter; each intent gets an ``error`` receipt (adapter id ``effects.deny``)
  whose payload says effects are denied in this run.

Every one of these receipts is signed with the world's key where the pump takes it and
verified before it is journaled, as an adapter's is (``world.effects._pump``): ``journal
verify`` and ``replay --verify`` check it like any other, and replay re-applies it without
asking anyone. They are made inside ``dispatch``, so they are taken in the same cycle and a
stubbed run of the same fork writes the same journal bytes every time.

What the mode covers: the effects that leave the world. ``timer.set``, ``blob.put``,
``blob.get`` and ``workspace.*`` (``LOCAL_KINDS``) stay with their adapters in every mode: a
timer is the world's own clock, and a blob or a workspace tree its own content store (a fork
copies it). Rejected: stubbing them too. A
stubbed timer would have to fire at some invented time or never (a forked timer world would
hang or lie about time), and a stubbed put would hand out a ``blob_ref`` the store does not
hold, so the next ``blob.get`` would fail for a reason its parent never met. Any other kind,
``http.request`` and any kind added later, is outward and governed by the mode.

The world's mode (``MODE_FILE``, ``<world>/effects-mode.json``, written with
``world._fsutil.atomic_write``): ``world fork`` writes ``stub`` with the reason ``fork of
<parent> at seq N`` (and the parent's path and seq, which ``replay`` reads). A run without
``--effects`` uses it, and says so on stderr; ``--effects live`` given once rewrites it to
``live`` for good (keeping the parent, for a later ``--effects replay``); any other
``--effects`` is for that run only. A world without the file is live. A file that cannot be
read as a mode fails closed: it counts as ``stub`` (a notice names it) until ``--effects
live`` rewrites it. ``--sim`` without ``--effects`` stubs outward effects whatever the file
says: simulated time is for runs that must write the same bytes every time, and an HTTP
answer comes from outside (``--sim --effects live`` sends them anyway). That default is told
on stderr only when a run did stub something, so a simulated timer world stays quiet.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias, cast

from air import cbor
from air.errors import InvalidArgument, WorldError
from air.sys.llm import LLM_KIND
from air.sys.ondemand import HTTP_KINDS
from air.sys.workspace import WORKSPACE_KINDS
from kernel.journal import JournalRecord
from world import _fileio as fileio
from world._fsutil import atomic_write
from world.effects._adapters import Intent, Receipt, ReceiptStatus
from world.effects._blob import BLOB_GET_KIND, BLOB_PUT_KIND
from world.effects._timer import TIMER_KIND

__all__ = [
    "DENY_ADAPTER_ID",
    "EFFECTS_MODES",
    "LOCAL_KINDS",
    "MODE_FILE",
    "MODE_FILE_BYTES_MAX",
    "REPLAY_ADAPTER_ID",
    "SIM_REASON",
    "STUB_ADAPTER_ID",
    "STUB_STATUS",
    "ChosenMode",
    "EffectsMode",
    "JournaledReceipts",
    "ModeFile",
    "NotLive",
    "choose_mode",
    "failed_payload",
    "fork_mode",
    "read_mode_file",
    "write_mode_file",
]

EffectsMode: TypeAlias = Literal["live", "replay", "stub", "deny"]
EFFECTS_MODES: Final[tuple[EffectsMode, ...]] = ("live", "replay", "stub", "deny")

MODE_FILE: Final = "effects-mode.json"
MODE_FILE_BYTES_MAX: Final = 64 * 1024
"""The most of a mode file that is read; a longer one is damaged (and so ``stub``)."""

LOCAL_KINDS: Final = frozenset({TIMER_KIND, BLOB_PUT_KIND, BLOB_GET_KIND, *WORKSPACE_KINDS})
"""Kinds that stay with their adapters in every mode (the module docstring says why)."""

STUB_STATUS: Final = "stub"
STUB_ADAPTER_ID: Final = "effects.stub"
DENY_ADAPTER_ID: Final = "effects.deny"
REPLAY_ADAPTER_ID: Final = "effects.replay"

_STUB_SAYS: Final = "stub: not sent; effects are stubbed in this run (--effects stub)"
_DENY_SAYS: Final = "denied: effects are denied in this run (--effects deny)"
_UNREPLAYED_SAYS: Final = "denied: no journaled receipt for this intent (--effects replay)"


# --- the world's mode file ---------------------------------------------------------------------


@dataclass(frozen=True)
class ModeFile:
    """What ``<world>/effects-mode.json`` holds: the default ``mode`` (``stub`` or ``live``),
    why, and for a fork its ``parent`` folder (absolute) and the ``parent_seq`` it forked at."""

    mode: EffectsMode
    reason: str
    parent: str | None = None
    parent_seq: int | None = None

    def to_json(self) -> bytes:
        doc = {
            "mode": self.mode,
            "reason": self.reason,
            "parent": self.parent,
            "parent_seq": self.parent_seq,
        }
        return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> ModeFile:
        """``InvalidArgument`` for bytes that are not a mode file."""
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidArgument(MODE_FILE, "not JSON", str(exc)) from exc
        if not isinstance(doc, dict):
            raise InvalidArgument(MODE_FILE, type(doc).__name__, "must be an object")
        mode, reason = doc.get("mode"), doc.get("reason")
        parent, parent_seq = doc.get("parent"), doc.get("parent_seq")
        if mode not in ("live", "stub") or not isinstance(reason, str):
            raise InvalidArgument(MODE_FILE, mode, "mode must be live or stub, with a reason")
        if not (parent is None or isinstance(parent, str)):
            raise InvalidArgument(MODE_FILE, parent, "parent must be a path or null")
        if not (parent_seq is None or (type(parent_seq) is int and parent_seq >= 0)):
            raise InvalidArgument(MODE_FILE, parent_seq, "parent_seq must be a seq or null")
        return cls(cast(EffectsMode, mode), reason, parent, parent_seq)


def _mode_path(world_dir: str | os.PathLike[str]) -> Path:
    return Path(world_dir) / MODE_FILE


def read_mode_file(world_dir: str | os.PathLike[str]) -> ModeFile | None:
    """The world's mode file; None if it has none. A damaged one is ``stub`` (fails closed)."""
    path = _mode_path(world_dir)
    try:
        data = fileio.read_regular(path, MODE_FILE_BYTES_MAX, operation="read effects mode")
    except WorldError as exc:  # not a regular file, too long, unreadable
        return ModeFile("stub", f"{path} cannot be read ({exc})")
    if data is None:
        return None
    try:
        return ModeFile.from_json(data)
    except InvalidArgument as exc:
        return ModeFile("stub", f"{path} is damaged ({exc})")


def write_mode_file(world_dir: str | os.PathLike[str], mode_file: ModeFile) -> None:
    """Replace the world's mode file, atomically and durably."""
    atomic_write(_mode_path(world_dir), mode_file.to_json())


def fork_mode(parent: str | os.PathLike[str], seq: int) -> ModeFile:
    """The mode a fork of ``parent`` at ``seq`` starts with: ``stub``."""
    where = str(Path(parent).absolute())
    return ModeFile("stub", f"fork of {where} at seq {seq}", where, seq)


SIM_REASON: Final = "simulated time (--sim)"


@dataclass(frozen=True)
class ChosenMode:
    """The mode of one run; ``why`` (for a mode the run was not given) says where it came from."""

    mode: EffectsMode
    why: str | None = None

    @property
    def by_sim(self) -> bool:
        """Stubbed only because of ``--sim`` (a command says so once something was stubbed,
        not on every simulated run of a timer world, which stubs nothing)."""
        return self.why == SIM_REASON

    @property
    def notice(self) -> str | None:
        """The line a run prints on stderr when it is not live by default; else None."""
        if self.why is None or self.mode == "live":
            return None
        if self.by_sim:
            return (
                f"effects {self.mode} by default ({self.why}): nothing left the world; "
                f"--sim --effects live sends for real"
            )
        return (
            f"effects {self.mode} by default ({self.why}): nothing is sent; "
            f"--effects live sends for real from now on"
        )


def choose_mode(
    world_dir: str | os.PathLike[str], asked: EffectsMode | None, *, sim: bool = False
) -> ChosenMode:
    """The mode of a run of the world at ``world_dir`` (open for writing: it may rewrite the
    mode file) given ``--effects asked`` (None: not given) and ``--sim``."""
    if asked is not None and asked not in EFFECTS_MODES:
        raise InvalidArgument("--effects", asked, f"must be one of {', '.join(EFFECTS_MODES)}")
    written = read_mode_file(world_dir)
    if asked is not None:
        if asked == "live" and written is not None and written.mode != "live":
            write_mode_file(world_dir, replace(written, mode="live", reason="--effects live"))
        return ChosenMode(asked)
    if written is not None and written.mode != "live":
        return ChosenMode(written.mode, written.reason)
    if sim:
        return ChosenMode("stub", SIM_REASON)
    return ChosenMode("live")


# --- answering intents without an adapter ------------------------------------------------------


class JournaledReceipts:
    """The receipts journaled in this world's journal and, for a fork, in its parent's after
    the fork point, by intent hash (the first found wins; this world's before its parent's).
    Indexed on first use, holding seqs only (a payload is read again when it is wanted); what
    the parent journals after that is not seen by this run (its intents are denied)."""

    def __init__(self, journal: Any, world_dir: str | os.PathLike[str]) -> None:
        self._sources: list[tuple[Any, int]] = [(journal, 0)]
        self._opened: list[Any] = []
        written = read_mode_file(world_dir)
        if written is not None and written.parent is not None:
            self._open_parent(Path(written.parent), written.parent_seq or 0)
        self._index: dict[bytes, tuple[int, int]] | None = None

    def _open_parent(self, parent: Path, seq: int) -> None:
        from world.journal import FileJournal  # a reader: writes nothing, takes no lock

        try:
            journal = FileJournal.open(parent / "journal", readonly=True)
        except (WorldError, OSError):
            return  # the parent moved or is damaged: this world's journal alone answers
        self._opened.append(journal)
        self._sources.append((journal, seq + 1))

    def _receipts(self, source: int) -> Iterator[JournalRecord]:
        journal, from_seq = self._sources[source]
        return (r for r in journal.read(from_seq) if r.kind == "receipt")

    def find(self, intent_hash: bytes) -> Receipt | None:
        """The journaled receipt for ``intent_hash``, adapter id ``REPLAY_ADAPTER_ID``."""
        if self._index is None:
            self._index = {}
            for source in range(len(self._sources)):
                for record in self._receipts(source):
                    found = record.body.get("intent_hash")
                    if isinstance(found, bytes):
                        self._index.setdefault(found, (source, record.seq))
        where = self._index.get(intent_hash)
        if where is None:
            return None
        source, seq = where
        journal, _from = self._sources[source]
        record = next(journal.read(seq))
        try:
            payload = cbor.loads(record.body["payload"])
            status = cast(ReceiptStatus, record.body["status"])
            return Receipt(intent_hash, REPLAY_ADAPTER_ID, status, payload)
        except (WorldError, KeyError, TypeError):
            return None  # not a receipt this world could take: deny instead

    def close(self) -> None:
        for journal in self._opened:
            journal.close()
        self._opened = []


class NotLive:
    """Answers the outward intents of a run whose mode is not ``live`` (``covers``), at once
    and without I/O: a stub, a replayed or a denied receipt (the module docstring)."""

    def __init__(self, mode: EffectsMode, journaled: JournaledReceipts | None = None) -> None:
        if mode not in EFFECTS_MODES:
            raise InvalidArgument("effects", mode, f"must be one of {', '.join(EFFECTS_MODES)}")
        if mode == "replay" and journaled is None:
            raise InvalidArgument("journaled", None, "replay needs the journaled receipts")
        self.mode = mode
        self.journaled = journaled

    def covers(self, kind: str) -> bool:
        return self.mode != "live" and kind not in LOCAL_KINDS

    def answer(self, intent: Intent) -> Receipt:
        if self.mode == "stub":
            payload = failed_payload(intent.kind, _STUB_SAYS)
            return Receipt(intent.intent_hash, STUB_ADAPTER_ID, STUB_STATUS, payload)
        if self.mode == "replay":
            assert self.journaled is not None
            found = self.journaled.find(intent.intent_hash)
            if found is not None:
                return found
            payload = failed_payload(intent.kind, _UNREPLAYED_SAYS)
            return Receipt(intent.intent_hash, DENY_ADAPTER_ID, "error", payload)
        payload = failed_payload(intent.kind, _DENY_SAYS)
        return Receipt(intent.intent_hash, DENY_ADAPTER_ID, "error", payload)

    def close(self) -> None:
        if self.journaled is not None:
            self.journaled.close()


def failed_payload(kind: str, says: str) -> dict[str, Any]:
    """A payload of ``kind``'s receipt schema for an effect that did not happen."""
    if kind in HTTP_KINDS:
        return {"status": 0, "headers": {}, "body_ref": None, "body_preview": says}
    if kind == LLM_KIND:  # no reply: no output, no tokens, and what happened instead
        return {
            "output_ref": None,
            "token_usage": {"prompt": 0, "completion": 0},
            "cost_cents": 0,
            "provider_id": "",
            "summary_preview": says,
            "tokens_prompt": 0,
            "tokens_completion": 0,
            "cost_millis": 0,
        }
    return {"error": says, "kind": kind}  # no schema known here: the dispatcher's own shape
