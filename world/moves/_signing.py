"""Who signed an exported cell file, and whom an import trusts (``world.moves._cellfiles``).

A checksum only says a file is self-consistent: anyone who edits a cell file can recompute it.
So an export is signed, and an import takes only what a signer it trusts signed.

The key. ``ExportKey`` is Ed25519, its seed derived from the world's receipt key
(``ReceiptKey.derive(EXPORT_KEY_CONTEXT)``, ``keys/receipt.key``): a world keeps one secret,
made at ``init`` and never journaled, and copies of a world sign alike. Its public half
(``world_signer``; ``world cells key``) names the world to others. What is signed is
``SIGNED_PREFIX`` and the bytes the file format says (``_cellfiles``): the prefix keeps any
other message signed with the key from passing for a cell file.

Rejected: the receipts' own keyed blake3 MAC. A MAC is checked only by the holder of its key,
so an importing world could tell that another world's file is not its own (by a key id) but not
whether that world signed it: ``--trust-key`` would then trust a name anyone can write, and an
edited file from a trusted world would pass. Ed25519 (``cryptography``) checks another world's
signature with its public key alone.

Trust. ``Trust`` is the importer's choice, made before anything is journaled: by default only
files signed by the importing world; ``any_signer`` (``--trust``) also unsigned files and
files validly signed by any key; ``keys`` (``--trust-key HEX``) files validly signed by those
keys. A signature that does not verify (``bad_signature``) is refused by the reader, whatever
the trust.

Not here: key rotation (a world signs with one key for its life, as it does receipts) and any
registry of other worlds' keys (a trusted key is given on each import).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from air.errors import InvalidArgument
from world.effects import ReceiptKey
from world.errors import CellFileRefused

__all__ = [
    "EXPORT_KEY_CONTEXT",
    "PUBLIC_KEY_BYTES",
    "SIGNATURE_BYTES",
    "SIGNED_PREFIX",
    "ExportKey",
    "Trust",
    "signature_holds",
    "world_signer",
]

EXPORT_KEY_CONTEXT: Final = "world-kernel cell export signing key v1"
SIGNED_PREFIX: Final = b"world-kernel signed cell file v2\x00"
PUBLIC_KEY_BYTES: Final = 32
SIGNATURE_BYTES: Final = 64


class ExportKey:
    """A world's export signing key: Ed25519 seeded from its receipt key. ``public`` is the
    raw 32-byte public key; the private half is never shown."""

    __slots__ = ("_private", "public")

    def __init__(self, receipt_key: ReceiptKey) -> None:
        self._private = Ed25519PrivateKey.from_private_bytes(receipt_key.derive(EXPORT_KEY_CONTEXT))
        self.public: bytes = self._private.public_key().public_bytes_raw()

    def __repr__(self) -> str:
        return f"ExportKey(public={self.public.hex()})"

    @classmethod
    def of_world(cls, world_dir: str | os.PathLike[str]) -> ExportKey | None:
        """The key of the world at ``world_dir``, only read (``ReceiptKey.load``): None if
        the world has no key file."""
        receipt_key = ReceiptKey.load(world_dir)
        return None if receipt_key is None else cls(receipt_key)

    def sign(self, covered: bytes) -> bytes:
        return self._private.sign(SIGNED_PREFIX + covered)


def world_signer(world_dir: str | os.PathLike[str]) -> bytes | None:
    """The public key the world at ``world_dir`` signs its exports with (None: no key file,
    its exports are unsigned)."""
    key = ExportKey.of_world(world_dir)
    return None if key is None else key.public


def signature_holds(signer: bytes, signature: bytes, covered: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(signer).verify(signature, SIGNED_PREFIX + covered)
    except (InvalidSignature, ValueError):
        return False
    return True


@dataclass(frozen=True)
class Trust:
    """Which cell files an import takes besides those the importing world signed:
    ``any_signer`` (``--trust``) takes unsigned files and any valid signature; ``keys``
    (``--trust-key``) the files validly signed by one of these raw public keys. A signature
    that does not verify is refused whatever the trust."""

    any_signer: bool = False
    keys: frozenset[bytes] = frozenset()

    @classmethod
    def of(cls, *, any_signer: bool = False, keys_hex: Collection[str] = ()) -> Trust:
        """From the CLI's flags: ``InvalidArgument`` for a key that is not 64 hex digits."""
        keys = set()
        for key_hex in keys_hex:
            try:
                key = bytes.fromhex(key_hex)
            except ValueError:
                key = b""
            if len(key) != PUBLIC_KEY_BYTES:
                raise InvalidArgument(
                    "--trust-key", key_hex, f"a public key is {PUBLIC_KEY_BYTES * 2} hex digits"
                )
            keys.add(key)
        return cls(any_signer, frozenset(keys))

    def check(self, path: Path, signer: bytes | None, own: bytes | None) -> None:
        """Refuse the file at ``path``, whose signature by ``signer`` (None: unsigned) was
        verified, unless ``signer`` is ``own`` (the importing world's public key) or
        trusted: ``CellFileRefused`` ``unsigned`` or ``foreign_signer``."""
        if signer is not None and signer in (own, *self.keys):
            return
        if self.any_signer:
            return
        if signer is None:
            raise CellFileRefused(str(path), "unsigned")
        raise CellFileRefused(str(path), "foreign_signer", signer.hex())
