"""Receipt signing: a world's key signs its adapters' receipts, and refuses any receipt it did
not sign (``forged``) or that changed after signing (``altered``)."""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from air import cbor
from air.errors import InvalidArgument
from world.effects import KEY_DIR, KEY_FILE, Receipt, ReceiptKey
from world.effects._receipts import KEY_BYTES, SIG_BYTES
from world.errors import ReceiptKeyDamaged, ReceiptRefused

RECEIPT = Receipt(
    intent_hash=cbor.digest(b"intent"),
    adapter_id="http",
    status="ok",
    payload={"status": 200, "headers": {"a": "b"}, "body_ref": None, "body_preview": "hi"},
)


@pytest.fixture
def world(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def key(world: Path) -> ReceiptKey:
    return ReceiptKey.load_or_create(world)


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def test_a_signed_receipt_verifies(key: ReceiptKey) -> None:
    sig = key.sign(RECEIPT)
    assert len(sig) == SIG_BYTES
    key.verify(RECEIPT, sig)


def test_signing_is_deterministic_and_independent_of_map_order(key: ReceiptKey) -> None:
    reordered = dataclasses.replace(RECEIPT, payload=dict(reversed(list(RECEIPT.payload.items()))))
    assert key.sign(reordered) == key.sign(RECEIPT)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("intent_hash", cbor.digest(b"another intent"), id="intent_hash"),
        pytest.param("adapter_id", "blob", id="adapter_id"),
        pytest.param("status", "error", id="status"),
        pytest.param("payload", {**RECEIPT.payload, "status": 201}, id="payload-value"),
        pytest.param("payload", {**RECEIPT.payload, "extra": 1}, id="payload-field"),
    ],
)
def test_a_receipt_altered_after_signing_is_refused(
    key: ReceiptKey, field: str, value: Any
) -> None:
    sig = key.sign(RECEIPT)
    altered = dataclasses.replace(RECEIPT, **{field: value})
    with pytest.raises(ReceiptRefused) as info:
        key.verify(altered, sig)
    assert (info.value.intent_hash, info.value.reason) == (altered.intent_hash.hex(), "altered")


def test_a_signature_with_a_flipped_bit_is_refused(key: ReceiptKey) -> None:
    sig = bytearray(key.sign(RECEIPT))
    sig[-1] ^= 1
    with pytest.raises(ReceiptRefused) as info:
        key.verify(RECEIPT, bytes(sig))
    assert info.value.reason == "altered"


def test_a_signature_made_with_another_worlds_key_is_refused_as_forged(
    key: ReceiptKey, tmp_path_factory: pytest.TempPathFactory
) -> None:
    other = ReceiptKey.load_or_create(tmp_path_factory.mktemp("other-world"))
    with pytest.raises(ReceiptRefused) as info:
        key.verify(RECEIPT, other.sign(RECEIPT))
    assert (info.value.intent_hash, info.value.reason) == (RECEIPT.intent_hash.hex(), "forged")


@pytest.mark.parametrize(
    "sig", [b"", bytes(SIG_BYTES), bytes(SIG_BYTES - 1), bytes(SIG_BYTES + 1)], ids=len
)
def test_a_signature_that_is_not_this_keys_is_refused_as_forged(
    key: ReceiptKey, sig: bytes
) -> None:
    with pytest.raises(ReceiptRefused) as info:
        key.verify(RECEIPT, sig)
    assert info.value.reason == "forged"


def test_the_key_file_is_0600_in_a_0700_directory_even_under_umask_000(
    world: Path, open_umask: None
) -> None:
    ReceiptKey.load_or_create(world)
    key_dir = world / KEY_DIR
    assert stat.S_IMODE(key_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((key_dir / KEY_FILE).stat().st_mode) == 0o600
    assert (key_dir / KEY_FILE).stat().st_size == KEY_BYTES
    assert sorted(p.name for p in key_dir.iterdir()) == [KEY_FILE]  # no temp file left


def test_reloading_the_key_gives_the_same_key(world: Path) -> None:
    first = ReceiptKey.load_or_create(world)
    again = ReceiptKey.load_or_create(world)
    assert again.key_id == first.key_id
    again.verify(RECEIPT, first.sign(RECEIPT))


def test_each_world_gets_its_own_key(tmp_path_factory: pytest.TempPathFactory) -> None:
    one = ReceiptKey.load_or_create(tmp_path_factory.mktemp("one"))
    two = ReceiptKey.load_or_create(tmp_path_factory.mktemp("two"))
    assert one.key_id != two.key_id


def test_a_key_file_of_the_wrong_size_is_reported_not_replaced(world: Path) -> None:
    ReceiptKey.load_or_create(world)
    path = world / KEY_DIR / KEY_FILE
    path.write_bytes(b"short")
    with pytest.raises(ReceiptKeyDamaged) as info:
        ReceiptKey.load_or_create(world)
    assert info.value.path == str(path)
    assert path.read_bytes() == b"short"


def test_the_key_never_shows_in_its_repr(world: Path) -> None:
    key = ReceiptKey.load_or_create(world)
    secret = (world / KEY_DIR / KEY_FILE).read_bytes()
    assert secret.hex() not in repr(key)
    assert key.key_id.hex() in repr(key)


def test_a_key_must_be_32_bytes() -> None:
    with pytest.raises(InvalidArgument):
        ReceiptKey(b"too short")


def test_a_generated_key_lives_in_memory_and_signs_like_a_loaded_one(world: Path) -> None:
    key = ReceiptKey(os.urandom(32))
    key.verify(RECEIPT, key.sign(RECEIPT))
    with pytest.raises(ReceiptRefused):
        ReceiptKey(os.urandom(32)).verify(RECEIPT, key.sign(RECEIPT))
    assert not (world / KEY_DIR).exists()
