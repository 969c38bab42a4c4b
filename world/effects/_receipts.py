"""Per-world receipt signing: adapters' receipts are signed, and verified before they are journaled.

The key is 32 random bytes (``os.urandom``) in ``<world>/keys/receipt.key``: the directory is
``0700`` and the file ``0600`` whatever the umask, written atomically (temp, fsync, rename,
fsync dir). Create it only while holding the world's write lock (two creators would race). The
key is never logged, journaled or shown: ``ReceiptKey``'s repr names only its key id.

A signature is ``key_id || mac`` (``SIG_BYTES`` = 8 + 32):

* ``mac`` = keyed blake3 (``blake3(data, key=key)``, blake3's MAC mode) over the canonical CBOR
  of ``[intent_hash, adapter_id, status, payload_cbor]``. Every field is covered, and as one
  CBOR array, so no field's bytes can slide into its neighbour's.
* ``key_id`` = the first 8 bytes of blake3's key derivation from the key (context
  ``KEY_ID_CONTEXT``): a public name of the key that reveals nothing of it. It is what lets
  ``verify`` say *why* it refuses. A MAC alone cannot tell a receipt signed by another key
  from one changed after signing; with the key id, a signature that is not ours (wrong length,
  another world's key) is ``forged``, and our signature over different content is ``altered``.

``verify`` compares with ``hmac.compare_digest`` and raises ``ReceiptRefused(intent_hash,
reason)``.

After the journal. A journaled receipt keeps its ``sig``, and the readers that check a world
(``world replay --verify``, ``world journal verify``) check it again with ``JournalSignatures``:
over the exact bytes the record holds (its ``payload`` as journaled, not re-encoded from a
decoded value), so an edited journal whose frames were re-checksummed is still caught, at the
record's seq. Those readers load the key with ``ReceiptKey.load``, which only reads: it never
creates the key (a reader must write nothing), and a missing or damaged key file is a finding
that names the file (``KeyProblem``), not an exception. A missing key is a finding only when
the journal holds a receipt (a world is born with its key, but one made before that, which
never took a receipt, has none and needs none).

Not here: what to do with a refused receipt (the shell drops it and records why; a checking
reader reports it), whether a receipt answers a queued intent (``world.effects._pump`` before
journaling, ``world.history`` on replay), and key rotation (one key per world for its
lifetime; a new key would refuse every receipt signed before it).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import blake3

from air import cbor
from air.errors import CborError, InvalidArgument
from kernel.journal import JournalRecord
from world import _fileio as fileio
from world._fsutil import atomic_write
from world.effects._adapters import Receipt
from world.errors import (
    ReceiptKeyDamaged,
    ReceiptRefused,
    RefusalReason,
    StorageError,
)

__all__ = [
    "KEY_BYTES",
    "KEY_DIR",
    "KEY_FILE",
    "KEY_FILE_BYTES_MAX",
    "KEY_ID_BYTES",
    "KEY_ID_CONTEXT",
    "SIG_BYTES",
    "BadReceipt",
    "JournalSignatures",
    "KeyProblem",
    "ReceiptKey",
    "signed_bytes",
]

KEY_DIR: Final = "keys"
KEY_FILE: Final = "receipt.key"
KEY_BYTES: Final = 32
KEY_FILE_BYTES_MAX: Final = 4096
"""The most of a key file ``load`` reads: a longer file is damaged, named, and not read (nor
is a FIFO or a device in its place: ``world._fileio.read_regular``)."""
KEY_ID_BYTES: Final = 8
MAC_BYTES: Final = 32
SIG_BYTES: Final = KEY_ID_BYTES + MAC_BYTES
KEY_ID_CONTEXT: Final = "world-kernel receipt key id v1"


def signed_bytes(receipt: Receipt) -> bytes:
    """What the MAC covers: canonical CBOR of ``[intent_hash, adapter_id, status, payload_cbor]``."""
    return _covered(receipt.intent_hash, receipt.adapter_id, receipt.status, receipt.payload_cbor)


def _covered(intent_hash: Any, adapter_id: Any, status: Any, payload_cbor: Any) -> bytes:
    return cbor.dumps([intent_hash, adapter_id, status, payload_cbor])


def _key_path(world_dir: str | os.PathLike[str]) -> Path:
    """Where the world at ``world_dir`` keeps its receipt key."""
    return Path(world_dir) / KEY_DIR / KEY_FILE


class ReceiptKey:
    __slots__ = ("_key", "key_id")

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise InvalidArgument("key", f"{len(key)} bytes", f"a receipt key is {KEY_BYTES} bytes")
        self._key = bytes(key)
        derive = blake3.blake3(self._key, derive_key_context=KEY_ID_CONTEXT)
        self.key_id: bytes = derive.digest(length=KEY_ID_BYTES)

    def __repr__(self) -> str:
        return f"ReceiptKey(key_id={self.key_id.hex()})"

    @classmethod
    def load(cls, world_dir: str | os.PathLike[str]) -> ReceiptKey | None:
        """The world's key, read and never created: None if the world has none yet;
        ``ReceiptKeyDamaged`` if the file is not one (or not a file: a FIFO, a device, a
        folder), ``StorageError`` if it cannot be read.
        For readers beside a live writer, which must write nothing."""
        path = _key_path(world_dir)
        key = fileio.read_regular(
            path, KEY_FILE_BYTES_MAX, damaged=ReceiptKeyDamaged, operation="read receipt key"
        )
        if key is None:
            return None
        if len(key) != KEY_BYTES:
            raise ReceiptKeyDamaged(str(path), f"{len(key)} bytes, not {KEY_BYTES}")
        return cls(key)

    @classmethod
    def load_or_create(cls, world_dir: str | os.PathLike[str]) -> ReceiptKey:
        """The world's key, created on first use; ``ReceiptKeyDamaged`` if the file is not one.
        Only under the world's write lock (two creators would race)."""
        found = cls.load(world_dir)
        if found is not None:
            return found
        key_dir = Path(world_dir) / KEY_DIR
        if not key_dir.is_dir():
            fileio.mkdir(key_dir)
            fileio.fsync_dir(world_dir)
        key = os.urandom(KEY_BYTES)
        atomic_write(key_dir / KEY_FILE, key)
        return cls(key)

    def derive(self, context: str) -> bytes:
        """32 bytes for another use of this world's secret (blake3's key derivation with
        ``context``, as ``key_id`` is made): each use its own key, none revealing this one.
        ``world.moves._cellfiles`` seeds the world's export signing key with it."""
        return blake3.blake3(self._key, derive_key_context=context).digest()

    def sign(self, receipt: Receipt) -> bytes:
        return self._sign(signed_bytes(receipt))

    def _sign(self, covered: bytes) -> bytes:
        return self.key_id + blake3.blake3(covered, key=self._key).digest()

    def verify(self, receipt: Receipt, sig: bytes) -> None:
        """Return if ``sig`` is this key's signature of ``receipt``; else raise
        ``ReceiptRefused``."""
        self._verify(receipt.intent_hash.hex(), signed_bytes(receipt), sig)

    def verify_journaled(self, body: Mapping[str, Any]) -> None:
        """``verify`` for a journaled receipt's body (``{intent_hash, adapter_id, status,
        payload, sig}``), over the bytes it holds: a field of the wrong type or a missing one
        cannot match the signature, so it is refused too, never raised as anything else."""
        intent_hash = body.get("intent_hash")
        intent_hex = intent_hash.hex() if isinstance(intent_hash, bytes) else repr(intent_hash)
        fields = (intent_hash, body.get("adapter_id"), body.get("status"), body.get("payload"))
        try:
            covered: bytes | None = _covered(*fields)
        except CborError:  # outside the value model: nothing this key signed
            covered = None
        self._verify(intent_hex, covered, body.get("sig"))

    def _verify(self, intent_hex: str, covered: bytes | None, sig: object) -> None:
        if (
            not isinstance(sig, bytes)
            or len(sig) != SIG_BYTES
            or not hmac.compare_digest(sig[:KEY_ID_BYTES], self.key_id)
        ):
            raise ReceiptRefused(intent_hex, "forged")
        if covered is None or not hmac.compare_digest(sig, self._sign(covered)):
            raise ReceiptRefused(intent_hex, "altered")


# --- checking a journal's receipts -------------------------------------------------------------


@dataclass(frozen=True)
class BadReceipt:
    """The journaled receipt at ``seq``, for the intent ``intent_hash`` (hex), does not hold:
    ``reason`` is ``forged`` or ``altered`` (its signature), or, on replay, ``unknown_intent``
    or ``not_queued`` (it answers no intent that was waiting for one)."""

    seq: int
    intent_hash: str
    reason: RefusalReason

    def describe(self) -> str:
        return f"receipt at seq {self.seq} (intent {self.intent_hash}) refused: {self.reason}"

    def as_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "intent_hash": self.intent_hash, "reason": self.reason}


@dataclass(frozen=True)
class KeyProblem:
    """The world's receipt key file at ``path`` cannot check signatures: ``reason`` is
    ``missing`` (no file, yet the journal holds receipts) or what is wrong with it."""

    path: str
    reason: str

    def describe(self) -> str:
        return f"receipt key {self.path} {self.reason}: receipt signatures cannot be checked"

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason}


class JournalSignatures:
    """Checks journaled receipts' signatures with the key of the world at ``world_dir``, read
    once and only read (``ReceiptKey.load``). Without a usable key nothing can be checked:
    each receipt is counted ``unchecked`` and ``key_problem`` says why."""

    def __init__(self, world_dir: str | os.PathLike[str]) -> None:
        self.path = _key_path(world_dir)
        self.checked = 0
        self.unchecked = 0
        self._damage: str | None = None
        self._key: ReceiptKey | None = None
        try:
            self._key = ReceiptKey.load(world_dir)
        except ReceiptKeyDamaged as exc:
            self._damage = f"damaged ({exc.reason})"
        except StorageError as exc:
            self._damage = f"unreadable ({exc.detail} [{exc.errno_name}])"

    def check(self, record: JournalRecord) -> BadReceipt | None:
        """The refusal of the ``receipt`` record ``record``; None if its signature holds or
        there is no key to check it with."""
        if self._key is None:
            self.unchecked += 1
            return None
        self.checked += 1
        body = record.body if isinstance(record.body, Mapping) else {}
        try:
            self._key.verify_journaled(body)
        except ReceiptRefused as refused:
            return BadReceipt(record.seq, refused.intent_hash, refused.reason)
        return None

    @property
    def key_problem(self) -> KeyProblem | None:
        """A damaged or unreadable key file; a missing one once a receipt went unchecked."""
        if self._damage is not None:
            return KeyProblem(str(self.path), self._damage)
        if self._key is None and self.unchecked:
            return KeyProblem(str(self.path), "missing")
        return None
