"""The ``ModuleCache`` contract, run against the in-memory and the file implementation, and a
world-style reopen: a second host over the same cache directory deserializes, not compiles."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from air.cbor import content_hash
from air.errors import UsageError
from kernel.wasm import InMemoryModuleCache, ModuleCache, ReducerHost, cache_key
from world._modcache import FileModuleCache

from host_wat import OK_OUTPUT, reducer

KEY = cache_key(content_hash(b"module"), "f" * 64)
OTHER_KEY = cache_key(content_hash(b"other"), "f" * 64)

Factory = Callable[[Path], ModuleCache]
FACTORIES: dict[str, Factory] = {
    "memory": lambda _: InMemoryModuleCache(),
    "file": lambda tmp: FileModuleCache(tmp / "cache"),
}


@pytest.fixture(params=sorted(FACTORIES))
def cache(request: pytest.FixtureRequest, tmp_path: Path) -> ModuleCache:
    return FACTORIES[request.param](tmp_path)


def test_a_missing_key_is_a_miss(cache: ModuleCache) -> None:
    assert cache.get(KEY) is None


def test_put_then_get_returns_the_same_bytes(cache: ModuleCache) -> None:
    cache.put(KEY, b"\x00compiled\xff")
    assert cache.get(KEY) == b"\x00compiled\xff"
    assert cache.get(OTHER_KEY) is None


def test_put_replaces_an_entry(cache: ModuleCache) -> None:
    cache.put(KEY, b"old")
    cache.put(KEY, b"new")
    assert cache.get(KEY) == b"new"


@pytest.mark.parametrize("key", ["../escape", "", "ab/cd", KEY.upper(), KEY + "0"])
def test_the_file_cache_refuses_keys_that_are_not_cache_keys(tmp_path: Path, key: str) -> None:
    with pytest.raises(UsageError):
        FileModuleCache(tmp_path).put(key, b"x")
    with pytest.raises(UsageError):
        FileModuleCache(tmp_path).get(key)


def test_the_file_cache_leaves_no_temp_files_behind(tmp_path: Path) -> None:
    FileModuleCache(tmp_path / "c").put(KEY, b"data")
    assert [p.name for p in (tmp_path / "c").iterdir()] == [KEY]


class _Counting(FileModuleCache):
    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.hits = 0
        self.puts = 0

    def get(self, key: str) -> bytes | None:
        data = super().get(key)
        self.hits += data is not None
        return data

    def put(self, key: str, data: bytes) -> None:
        self.puts += 1
        super().put(key, data)


@pytest.mark.parametrize("backend", ["fast", "public"])
def test_a_reopened_world_loads_its_reducer_from_the_file_cache(
    tmp_path: Path, backend: str
) -> None:
    data = reducer(body="nop nop nop")
    first = _Counting(tmp_path / "cache")
    assert ReducerHost(cache=first, backend=backend).load(data).call(b"") == OK_OUTPUT  # type: ignore[arg-type]
    reopened = _Counting(tmp_path / "cache")
    assert ReducerHost(cache=reopened, backend=backend).load(data).call(b"") == OK_OUTPUT  # type: ignore[arg-type]
    assert (first.hits, first.puts, reopened.hits, reopened.puts) == (0, 1, 1, 0)
