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
reason)``. Not here: what to do with a refused receipt (the shell drops it and records why),
and key rotation (one key per world for its lifetime; a new key would refuse every receipt
signed before it).
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Final

import blake3

from air import cbor
from air.errors import InvalidArgument
from world import _fileio as fileio
from world._fsutil import atomic_write
from world.effects._adapters import Receipt
from world.errors import ReceiptKeyDamaged, ReceiptRefused, storage_error

__all__ = [
    "KEY_BYTES",
    "KEY_DIR",
    "KEY_FILE",
    "KEY_ID_BYTES",
    "KEY_ID_CONTEXT",
    "SIG_BYTES",
    "ReceiptKey",
    "signed_bytes",
]

KEY_DIR: Final = "keys"
KEY_FILE: Final = "receipt.key"
KEY_BYTES: Final = 32
KEY_ID_BYTES: Final = 8
MAC_BYTES: Final = 32
SIG_BYTES: Final = KEY_ID_BYTES + MAC_BYTES
KEY_ID_CONTEXT: Final = "world-kernel receipt key id v1"


def signed_bytes(receipt: Receipt) -> bytes:
    """What the MAC covers: canonical CBOR of ``[intent_hash, adapter_id, status, payload_cbor]``."""
    return cbor.dumps(
        [receipt.intent_hash, receipt.adapter_id, receipt.status, receipt.payload_cbor]
    )


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
    def load_or_create(cls, world_dir: str | os.PathLike[str]) -> ReceiptKey:
        """The world's key, created on first use; ``ReceiptKeyDamaged`` if the file is not one."""
        key_dir = Path(world_dir) / KEY_DIR
        path = key_dir / KEY_FILE
        try:
            key = path.read_bytes()
        except FileNotFoundError:
            if not key_dir.is_dir():
                fileio.mkdir(key_dir)
                fileio.fsync_dir(world_dir)
            key = os.urandom(KEY_BYTES)
            atomic_write(path, key)
            return cls(key)
        except OSError as exc:
            raise storage_error(exc, "read receipt key") from exc
        if len(key) != KEY_BYTES:
            raise ReceiptKeyDamaged(str(path), f"{len(key)} bytes, not {KEY_BYTES}")
        return cls(key)

    def sign(self, receipt: Receipt) -> bytes:
        mac = blake3.blake3(signed_bytes(receipt), key=self._key).digest()
        return self.key_id + mac

    def verify(self, receipt: Receipt, sig: bytes) -> None:
        """Return if ``sig`` is this key's signature of ``receipt``; else raise
        ``ReceiptRefused``."""
        intent_hex = receipt.intent_hash.hex()
        if len(sig) != SIG_BYTES or not hmac.compare_digest(sig[:KEY_ID_BYTES], self.key_id):
            raise ReceiptRefused(intent_hex, "forged")
        if not hmac.compare_digest(sig, self.sign(receipt)):
            raise ReceiptRefused(intent_hex, "altered")
