"""The ``workspace.*`` adapter (``world.effects._workspace``): trees in the store, written,
listed, read, diffed and annotated as AgentOS's kernel does, every old root left as it was,
and each bad input an ``error`` receipt naming it."""

from __future__ import annotations

from typing import Any

import pytest
from blake3 import blake3

from air import cbor
from kernel.cells import MemoryCas
from world.effects import Intent
from world.effects._workspace import WorkspaceAdapter

_n = 0


class Spaces:
    def __init__(self, history: dict[str, Any] | None = None) -> None:
        self.cas = MemoryCas()
        self.adapter = WorkspaceAdapter(self.cas, history=lambda name: (history or {}).get(name))

    def ask(self, op: str, **params: Any) -> tuple[str, Any]:
        global _n
        _n += 1
        intent = Intent(blake3(str(_n).encode()).digest(), f"workspace.{op}", params, "plan t")
        receipts: list[Any] = []
        self.adapter.submit(intent, receipts.append)
        [receipt] = receipts
        return receipt.status, receipt.payload

    def ok(self, op: str, **params: Any) -> Any:
        status, payload = self.ask(op, **params)
        assert status == "ok", payload
        return payload

    def empty(self) -> bytes:
        root: bytes = self.ok("empty_root", workspace="w")["root_hash"]
        return root

    def write(self, root: bytes, path: str, data: bytes, mode: int | None = None) -> bytes:
        made = self.ok("write_bytes", root_hash=root, path=path, bytes=data, mode=mode)
        assert made["blob_hash"] == cbor.hash_to_raw("blake3:" + blake3(data).hexdigest())
        new: bytes = made["new_root_hash"]
        return new

    def read(self, root: bytes, path: str, window: Any = None) -> bytes:
        data: bytes = self.ok("read_bytes", root_hash=root, path=path, range=window)
        return data

    def tree(self, files: dict[str, bytes]) -> bytes:
        root = self.empty()
        for path, data in files.items():
            root = self.write(root, path, data)
        return root


@pytest.fixture
def spaces() -> Spaces:
    return Spaces()


def _list(spaces: Spaces, root: bytes, **given: Any) -> tuple[list[str], Any]:
    params = {"path": None, "scope": None, "cursor": None, "limit": 0, **given}
    found = spaces.ok("list", root_hash=root, **params)
    return [e["path"] for e in found["entries"]], found["next_cursor"]


def test_writes_make_new_roots_and_every_old_root_reads_as_it_was(spaces: Spaces) -> None:
    empty = spaces.empty()
    one = spaces.write(empty, "a/b/c.txt", b"first")
    two = spaces.write(one, "a/b/c.txt", b"second")
    assert spaces.read(one, "a/b/c.txt") == b"first"
    assert spaces.read(two, "a/b/c.txt") == b"second"
    assert spaces.read(two, "a/b/c.txt", {"start": 1, "end": 4}) == b"eco"
    assert _list(spaces, empty)[0] == []
    assert spaces.tree({"x": b"1", "y/z": b"2"}) == spaces.tree({"y/z": b"2", "x": b"1"})


def test_list_gives_a_directory_or_a_subtree_in_path_order_in_pages(spaces: Spaces) -> None:
    root = spaces.tree({"b.txt": b"b", "a/2.txt": b"2", "a/1.txt": b"1", "c/d/e": b"e"})
    assert _list(spaces, root)[0] == ["a", "b.txt", "c"]
    assert _list(spaces, root, path="a")[0] == ["a/1.txt", "a/2.txt"]
    every = ["a", "a/1.txt", "a/2.txt", "b.txt", "c", "c/d", "c/d/e"]
    assert _list(spaces, root, scope="subtree")[0] == every
    page, cursor = _list(spaces, root, scope="subtree", limit=3)
    assert (page, cursor) == (every[:3], "a/2.txt")
    page, cursor = _list(spaces, root, scope="subtree", limit=3, cursor=cursor)
    assert (page, cursor) == (every[3:6], "c/d")
    assert _list(spaces, root, scope="subtree", limit=3, cursor=cursor) == (every[6:], None)


def test_read_ref_names_an_entry_or_nothing(spaces: Spaces) -> None:
    root = spaces.tree({"d/f": b"abc"})
    assert spaces.ok("read_ref", root_hash=root, path="d/f") == {
        "kind": "file",
        "hash": cbor.hash_to_raw("blake3:" + blake3(b"abc").hexdigest()),
        "size": 3,
        "mode": 0o644,
    }
    assert spaces.ok("read_ref", root_hash=root, path="d")["kind"] == "dir"
    assert spaces.ok("read_ref", root_hash=root, path="nothing/here") is None


def test_remove_takes_a_file_or_an_empty_directory(spaces: Spaces) -> None:
    root = spaces.tree({"d/f": b"1", "g": b"2"})
    gone = spaces.ok("remove", root_hash=root, path="d/f")["new_root_hash"]
    assert _list(spaces, gone, scope="subtree")[0] == ["d", "g"]
    assert spaces.ask("remove", root_hash=root, path="d")[0] == "error"  # not empty
    empty_dir = spaces.ok("remove", root_hash=gone, path="d")["new_root_hash"]
    assert _list(spaces, empty_dir)[0] == ["g"]


def test_diff_lists_what_changed_under_a_prefix(spaces: Spaces) -> None:
    before = spaces.tree({"a/x": b"1", "a/y": b"2", "b": b"3"})
    after = spaces.write(spaces.write(before, "a/x", b"changed"), "a/z", b"new")
    changes = spaces.ok("diff", root_a=before, root_b=after, prefix=None)["changes"]
    assert [(c["path"], c["old_hash"] is None, c["new_hash"] is None) for c in changes] == [
        ("a", False, False),
        ("a/x", False, False),
        ("a/z", True, False),
    ]
    under = spaces.ok("diff", root_a=before, root_b=after, prefix="a/z")["changes"]
    assert [c["path"] for c in under] == ["a/z"]
    assert spaces.ok("diff", root_a=before, root_b=before, prefix=None)["changes"] == []


def test_annotations_are_set_on_the_root_a_file_or_a_directory_and_read_back(
    spaces: Spaces,
) -> None:
    root = spaces.tree({"d/f": b"x"})
    tag = cbor.hash_to_raw("blake3:" + blake3(b"text/html").hexdigest())
    for path in (None, "d", "d/f"):
        patch = {"http.content-type": tag, "gone": None}
        made = spaces.ok("annotations_set", root_hash=root, path=path, annotations_patch=patch)
        got = spaces.ok("annotations_get", root_hash=made["new_root_hash"], path=path)
        assert got == {"annotations": {"http.content-type": tag}}
        assert spaces.read(made["new_root_hash"], "d/f") == b"x"
        removed = spaces.ok(
            "annotations_set",
            root_hash=made["new_root_hash"],
            path=path,
            annotations_patch={"http.content-type": None},
        )
        again = spaces.ok("annotations_get", root_hash=removed["new_root_hash"], path=path)
        assert again == {"annotations": {}}
    kept = spaces.ok("annotations_set", root_hash=root, path="d/f", annotations_patch={"k": tag})
    rewritten = spaces.write(kept["new_root_hash"], "d/f", b"y")
    assert spaces.ok("annotations_get", root_hash=rewritten, path="d/f") == {
        "annotations": {"k": tag}
    }


def test_resolve_reads_the_workspace_history() -> None:
    root = cbor.hash_to_raw("blake3:" + "ab" * 32)
    history = {
        "w": {"latest": 2, "versions": {1: {"root_hash": b"\1" * 32}, 2: {"root_hash": root}}}
    }
    spaces = Spaces(history)
    assert spaces.ok("resolve", workspace="w", version=None) == {
        "exists": True,
        "resolved_version": 2,
        "head": 2,
        "root_hash": root,
    }
    assert spaces.ok("resolve", workspace="w", version=1)["root_hash"] == b"\1" * 32
    missing = {"exists": False, "resolved_version": None, "head": None, "root_hash": None}
    assert spaces.ok("resolve", workspace="w", version=3) == missing
    assert spaces.ok("resolve", workspace="other", version=None) == missing


HOSTILE_PATHS = ["", "/a", "a/", "a//b", ".", "..", "a/../b", "a b", "ü", "a\\b", "a/./b"]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_a_path_that_is_not_segments_of_safe_characters_is_refused(
    spaces: Spaces, path: str
) -> None:
    root = spaces.tree({"a/b": b"1"})
    for op, params in (
        ("write_bytes", {"bytes": b"x", "mode": None}),
        ("read_bytes", {"range": None}),
        ("read_ref", {}),
        ("remove", {}),
    ):
        status, payload = spaces.ask(op, root_hash=root, path=path, **params)
        assert status == "error", (op, path)
        assert "invalid path" in payload["error"]


@pytest.mark.parametrize(
    ("op", "params", "says"),
    [
        ("empty_root", {"workspace": "a/b"}, "invalid workspace name"),
        ("resolve", {"workspace": "", "version": None}, "invalid workspace name"),
        ("read_bytes", {"path": "missing", "range": None}, "path not found"),
        ("read_bytes", {"path": "d", "range": None}, "path is not a file"),
        ("read_bytes", {"path": "d/f", "range": {"start": 2, "end": 9}}, "outside the file"),
        ("write_bytes", {"path": "d", "bytes": b"", "mode": None}, "path is a directory"),
        ("write_bytes", {"path": "d/f/g", "bytes": b"", "mode": None}, "not a directory"),
        ("write_bytes", {"path": "n", "bytes": b"", "mode": 0o777}, "invalid file mode"),
        ("list", {"path": None, "scope": "all", "cursor": None, "limit": 0}, "invalid scope"),
        ("list", {"path": "d/f", "scope": None, "cursor": None, "limit": 0}, "not a directory"),
    ],
)
def test_what_cannot_be_done_is_an_error_receipt_naming_it(
    spaces: Spaces, op: str, params: dict[str, Any], says: str
) -> None:
    root = spaces.tree({"d/f": b"abc"})
    status, payload = spaces.ask(op, root_hash=root, **params)
    assert status == "error"
    assert says in payload["error"]


def test_a_root_that_is_no_tree_is_refused(spaces: Spaces) -> None:
    blob = cbor.hash_to_raw(spaces.cas.put(b"not a tree"))
    unsorted = {"entries": [
        {"name": "b", "kind": "file", "hash": blob, "size": 1, "mode": 0o644, "annotations_hash": None},
        {"name": "a", "kind": "file", "hash": blob, "size": 1, "mode": 0o644, "annotations_hash": None},
    ], "annotations_hash": None}  # fmt: skip
    bad_mode = {"entries": [{**unsorted["entries"][1], "mode": 0o777}], "annotations_hash": None}
    nowhere = cbor.hash_to_raw("blake3:" + "00" * 32)
    for root in (blob, nowhere, *(cbor.hash_to_raw(spaces.cas.put(cbor.dumps(t)))
                                  for t in (unsorted, bad_mode))):  # fmt: skip
        status, _ = spaces.ask("list", root_hash=root, path=None, scope=None, cursor=None, limit=0)
        assert status == "error"
