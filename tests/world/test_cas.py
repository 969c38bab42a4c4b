"""The Cas contract over MemoryCas and FileCas, then FileCas on disk: layout, verification on
read, atomic and idempotent puts."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from air import cbor
from air.errors import CborError, HashMismatch
from kernel.cells import Cas, MemoryCas
from kernel.errors import ObjectMissing
from world import _fileio as fileio
from world._cas import FileCas
from world.errors import StorageError


@pytest.fixture(params=["memory", "file"])
def cas(request: pytest.FixtureRequest, tmp_path: Path) -> Cas:
    return MemoryCas() if request.param == "memory" else FileCas(tmp_path)


def test_put_returns_the_content_address_and_get_returns_the_bytes(cas: Cas) -> None:
    address = cas.put(b"hello")
    assert address == cbor.content_hash(b"hello")
    assert cas.get(address) == b"hello"


def test_put_is_idempotent(cas: Cas) -> None:
    assert cas.put(b"same") == cas.put(b"same")
    assert cas.get(cbor.content_hash(b"same")) == b"same"


def test_the_empty_object_is_storable(cas: Cas) -> None:
    assert cas.get(cas.put(b"")) == b""


def test_an_absent_object_is_reported_as_missing(cas: Cas) -> None:
    address = cbor.content_hash(b"never stored")
    with pytest.raises(ObjectMissing) as caught:
        cas.get(address)
    assert caught.value.address == address


@pytest.mark.parametrize("address", ["sha256:" + "0" * 64, "blake3:" + "A" * 64, "blake3:00"])
def test_a_malformed_address_is_refused(cas: Cas, address: str) -> None:
    with pytest.raises(CborError):
        cas.get(address)


def test_objects_live_under_a_two_hex_fan_out(tmp_path: Path) -> None:
    address = FileCas(tmp_path).put(b"layout")
    hex_digest = address.removeprefix("blake3:")
    assert (tmp_path / "cas" / hex_digest[:2] / hex_digest[2:]).read_bytes() == b"layout"


def test_a_tampered_object_is_caught_on_read(tmp_path: Path) -> None:
    cas = FileCas(tmp_path)
    address = cas.put(b"original")
    path = cas.path_of(address)
    path.write_bytes(b"tampered")
    with pytest.raises(HashMismatch) as caught:
        cas.get(address)
    assert (caught.value.expected, caught.value.actual) == (address, cbor.content_hash(b"tampered"))


def test_put_rewrites_an_object_whose_file_was_truncated(tmp_path: Path) -> None:
    cas = FileCas(tmp_path)
    address = cas.put(b"whole object")
    cas.path_of(address).write_bytes(b"whole")
    cas.put(b"whole object")
    assert cas.get(address) == b"whole object"


def all_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_puts_leave_no_temp_files_behind(tmp_path: Path) -> None:
    cas = FileCas(tmp_path)
    addresses = [cas.put(str(n).encode()) for n in range(50)]
    expected = sorted(str(cas.path_of(a).relative_to(tmp_path / "cas")) for a in addresses)
    assert all_files(tmp_path / "cas") == expected


def test_a_put_that_fails_midway_leaves_no_object_and_no_temp_file(tmp_path: Path) -> None:
    cas = FileCas(tmp_path)

    def failing_fsync(op: str, _path: str) -> None:
        if op == "fsync":
            raise OSError(errno.EIO, "simulated I/O error")

    with fileio.fault_hook(failing_fsync), pytest.raises(StorageError) as caught:
        cas.put(b"doomed")
    assert (caught.value.operation, caught.value.errno_name) == ("fsync", "EIO")
    with pytest.raises(ObjectMissing):
        cas.get(cbor.content_hash(b"doomed"))
    assert all_files(tmp_path / "cas") == []


def test_temp_files_left_by_a_crash_are_removed_on_open(tmp_path: Path) -> None:
    FileCas(tmp_path)
    leftover = tmp_path / "cas" / ".tmp" / ".x.abc.tmp"
    leftover.write_bytes(b"half an object")
    FileCas(tmp_path)
    assert not leftover.exists()


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_a_second_put_pins_its_object_or_fails_with_the_object_intact(
    tmp_path: Path, code: int
) -> None:
    """The pin is durable before a second ``put`` returns; a pin that cannot be written fails
    the put (nothing acknowledged) and leaves the object as it was."""
    from world._cas import pinned

    cas = FileCas(tmp_path)
    address = cas.put(b"shared bytes")
    path = str(cas.path_of(address))
    assert not pinned(path)
    ops: list[str] = []
    with fileio.fault_hook(lambda op, where: ops.append(f"{op} {where}")):
        assert cas.put(b"shared bytes") == address
    assert pinned(path)
    assert ops[0] == f"fsync {path}"  # the object's bytes first: a flush may not have synced them
    assert f"fsync {path}.pin" not in ops  # then the pin like any durable file: temp, fsync, ...
    assert any(op.startswith("fsync ") and ".tmp" in op for op in ops[1:])
    for at in range(len(ops)):
        other = tmp_path / f"w{at}"
        fresh = FileCas(other)
        fresh_address = fresh.put(b"shared bytes")
        seen = 0

        def fail(op: str, where: str, at: int = at) -> None:
            nonlocal seen
            seen += 1
            if seen - 1 == at:
                raise OSError(code, "injected", where)

        with fileio.fault_hook(fail), pytest.raises(StorageError):
            fresh.put(b"shared bytes")
        assert fresh.get(fresh_address) == b"shared bytes"
        fresh_path = str(fresh.path_of(fresh_address))
        if not pinned(fresh_path):  # not acknowledged: the next put pins it
            assert fresh.put(b"shared bytes") == fresh_address
        assert pinned(fresh_path)


def test_a_put_racing_the_cell_stores_collection_keeps_its_object(tmp_path: Path) -> None:
    """A blob put (an adapter thread) of bytes that are also a cell's out-of-line state, while a
    checkpoint on another thread collects that state: the put waits for the collection and
    writes the object anew, instead of pinning a file about to be unlinked."""
    from cellstore_kit import MODULE, put

    from world.cellstore import FileCellStore

    store = FileCellStore(tmp_path)
    kh = put(store, 1, value=1, pad=2000)  # out of line
    store.flush(b"")
    found = store.get(MODULE, kh)
    assert found is not None
    state_cbor = found[1]
    cas = FileCas(tmp_path)
    state_path = str(cas.path_of(cbor.raw_to_hash(found[0].state_hash)))
    put(store, 1, value=2, pad=2000)  # the old state becomes garbage at the next flush
    results: list[str] = []
    blob_put = threading.Thread(target=lambda: results.append(cas.put(state_cbor)))

    def race(op: str, where: str) -> None:
        if op == "unlink" and where == state_path and not blob_put.is_alive() and not results:
            blob_put.start()
            blob_put.join(0.3)  # without the lock, the put pins the file in this time

    with fileio.fault_hook(race):
        store.flush(b"")
    blob_put.join(10)
    assert results == [cbor.content_hash(state_cbor)]
    assert cas.get(results[0]) == state_cbor
