"""``workspace.*``: content-addressed file trees in the world's own store (``air.sys.workspace``),
answered inside ``submit`` (no I/O beyond the store, so a receipt's tick never depends on
thread timing, and a replay reuses the journaled receipts as for any effect).

A tree is a ``sys/WorkspaceTree@2`` node (canonical CBOR in the store, named by its hash): its
entries in name order, each a ``file`` (the blob of its bytes, ``size``, ``mode`` 0o644 or
0o755) or a ``dir`` (the child tree's hash, ``mode`` 0o755, ``size`` 0), and an optional
``annotations_hash``, a ``sys/WorkspaceAnnotations@1`` node. A change writes new nodes from the
changed entry up to a new root; nothing is changed in place. As AgentOS's kernel does
(``crates/aos-kernel/src/internal_effects.rs`` at its last plan-era commit):

* ``resolve {workspace, version?}``: the workspace's history is the ``sys/Workspace@1`` cell
  of that name; ``exists`` false (the rest null) for no cell or no such version; else the
  version asked (the head when null), the head and that version's root.
* ``empty_root {workspace}``: the empty tree's hash.
* ``list {root_hash, path?, scope?, cursor?, limit}``: the entries of the directory at
  ``path`` (``scope`` ``dir``, the default) or of its whole subtree (``subtree``), as paths
  from the root, in path order; after ``cursor`` (a path) and at most ``limit`` (0: all), with
  ``next_cursor`` the last path given when more are left.
* ``read_ref {root_hash, path}``: the entry at ``path`` (``kind``, ``hash``, ``size``,
  ``mode``), or null. ``read_bytes {root_hash, path, range?}``: a file's bytes, or
  ``[start, end)`` of them.
* ``write_bytes {root_hash, path, bytes, mode?}``: the file written (directories made on
  the way; ``mode`` kept from the file it replaces, else 0o644), its blob and the new root.
  ``remove``: an entry (an empty directory only) gone, the new root.
* ``diff {root_a, root_b, prefix?}``: every path under ``prefix`` whose kind, hash or
  annotations differ between the two roots, in path order, with the old and new hashes.
* ``annotations_get``/``annotations_set {root_hash, path?, annotations_patch}``: the
  annotations of the root, a file or a directory; a patch sets a key to a hash or removes it
  (null); the new root and the new annotations' hash.

Anything else (a bad name or path, a missing path, a directory where a file is wanted, a node
that is not a tree, a range past the file) is an ``error`` receipt naming it, and nothing is
written that a later receipt could name. A name or segment is 1+ of ``[A-Za-z0-9._~-]``, not
``.`` or ``..``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from air import cbor
from air.sys.workspace import WORKSPACE_REDUCER
from world.effects._adapters import Done, Intent, Receipt
from world.effects._blob import BlobStore

__all__ = ["WORKSPACE_ADAPTER_ID", "WorkspaceAdapter", "cell_history"]

WORKSPACE_ADAPTER_ID: Final = "workspace"
MODE_FILE: Final = 0o644
MODE_EXEC: Final = 0o755
MODE_DIR: Final = 0o755
_SEGMENT: Final = re.compile(r"[A-Za-z0-9._~-]+")

History = Callable[[str], Any]
"""Workspace name -> its ``sys/WorkspaceHistory@1`` state (``{latest, versions}``), or None."""


def cell_history(world: Any) -> History:
    """``History`` read from the ``sys/Workspace@1`` cells of ``world``'s kernel as it is when
    asked (None: no cell of that name, or no such reducer in the world)."""

    def history(name: str) -> Any:
        kernel = world.kernel
        if WORKSPACE_REDUCER not in kernel.air.modules:
            return None
        found = kernel.cell_of(WORKSPACE_REDUCER, cbor.dumps(name))
        return None if found is None else cbor.loads(found[1])

    return history


class WorkspaceRefused(Exception):
    """What a workspace effect cannot do: the ``error`` receipt's detail."""


def _segment(name: str) -> str:
    if not _SEGMENT.fullmatch(name) or name in (".", ".."):
        raise WorkspaceRefused(f"invalid path segment {name!r}")
    return name


def _path(path: Any) -> list[str]:
    if not isinstance(path, str) or not path or path.startswith("/") or path.endswith("/"):
        raise WorkspaceRefused(f"invalid path {path!r}")
    return [_segment(s) for s in path.split("/")]


def _maybe_path(path: Any) -> list[str]:
    return [] if path is None else _path(path)


class _Trees:
    """Tree nodes in the store: read (each checked), written (canonical CBOR)."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs

    def put(self, node: Any) -> bytes:
        return cbor.hash_to_raw(self.blobs.put(cbor.dumps(node)))

    def tree(self, ref: bytes) -> dict[str, Any]:
        name = cbor.raw_to_hash(ref)
        try:
            node = cbor.loads(self.blobs.get(name))
        except Exception as exc:
            raise WorkspaceRefused(f"tree {name}: {exc}") from exc
        entries = node.get("entries") if isinstance(node, dict) else None
        if not isinstance(entries, list) or set(node) != {"entries", "annotations_hash"}:
            raise WorkspaceRefused(f"{name} is not a workspace tree")
        names = [e.get("name") if isinstance(e, dict) else None for e in entries]
        if names != sorted(set(names), key=str) or not all(isinstance(n, str) for n in names):
            raise WorkspaceRefused(f"tree {name}: entries not in name order")
        for entry in entries:
            _segment(entry["name"])
            kind, mode = entry.get("kind"), entry.get("mode")
            if not (
                (kind == "file" and mode in (MODE_FILE, MODE_EXEC))
                or (kind == "dir" and mode == MODE_DIR and entry.get("size") == 0)
            ):
                raise WorkspaceRefused(f"tree {name}: entry {entry['name']!r} is no file or dir")
        return {"entries": list(entries), "annotations_hash": node["annotations_hash"]}

    def empty(self) -> bytes:
        return self.put({"entries": [], "annotations_hash": None})

    @staticmethod
    def find(tree: dict[str, Any], name: str) -> dict[str, Any] | None:
        return next((e for e in tree["entries"] if e["name"] == name), None)

    @staticmethod
    def upsert(tree: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
        kept = [e for e in tree["entries"] if e["name"] != entry["name"]]
        return {**tree, "entries": sorted([*kept, entry], key=lambda e: str(e["name"]))}

    def dir(self, root: bytes, path: list[str]) -> bytes:
        current = root
        for segment in path:
            entry = self.find(self.tree(current), segment)
            if entry is None:
                raise WorkspaceRefused(f"missing path segment {segment!r}")
            if entry["kind"] != "dir":
                raise WorkspaceRefused("path is not a directory")
            current = entry["hash"]
        return current

    def entry(self, root: bytes, path: list[str]) -> dict[str, Any] | None:
        """The entry at ``path``, None if it (or a directory on the way) is not there."""
        current = root
        for i, segment in enumerate(path):
            entry = self.find(self.tree(current), segment)
            if entry is None or i == len(path) - 1:
                return entry
            if entry["kind"] != "dir":
                raise WorkspaceRefused("path is not a directory")
            current = entry["hash"]
        return None

    def walk(self, ref: bytes, base: str) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for entry in self.tree(ref)["entries"]:
            path = f"{base}/{entry['name']}" if base else entry["name"]
            out.append((path, entry))
            if entry["kind"] == "dir":
                out.extend(self.walk(entry["hash"], path))
        return out

    def write(self, ref: bytes, path: list[str], file: dict[str, Any]) -> bytes:
        tree = self.tree(ref)
        existing = self.find(tree, path[0])
        if len(path) == 1:
            keep = (
                existing.get("annotations_hash")
                if existing and existing["kind"] == "file"
                else None
            )
            return self.put(self.upsert(tree, {**file, "name": path[0], "annotations_hash": keep}))
        if existing is not None and existing["kind"] != "dir":
            raise WorkspaceRefused("path is not a directory")
        child = existing["hash"] if existing is not None else self.empty()
        entry = {
            "name": path[0],
            "kind": "dir",
            "hash": self.write(child, path[1:], file),
            "size": 0,
            "mode": MODE_DIR,
            "annotations_hash": existing.get("annotations_hash") if existing else None,
        }
        return self.put(self.upsert(tree, entry))

    def remove(self, ref: bytes, path: list[str]) -> bytes:
        tree = self.tree(ref)
        entry = self.find(tree, path[0])
        if entry is None:
            raise WorkspaceRefused("path not found")
        if len(path) == 1:
            if entry["kind"] == "dir" and self.tree(entry["hash"])["entries"]:
                raise WorkspaceRefused("directory not empty")
            kept = [e for e in tree["entries"] if e["name"] != path[0]]
            return self.put({**tree, "entries": kept})
        if entry["kind"] != "dir":
            raise WorkspaceRefused("path is not a directory")
        return self.put(self.upsert(tree, {**entry, "hash": self.remove(entry["hash"], path[1:])}))

    def annotations(self, ref: bytes | None) -> dict[str, bytes] | None:
        if ref is None:
            return None
        found = cbor.loads(self.blobs.get(cbor.raw_to_hash(ref)))
        if not isinstance(found, dict):
            raise WorkspaceRefused("annotations are not a map")
        return found

    def patched(self, ref: bytes | None, patch: dict[str, Any]) -> bytes:
        current = dict(self.annotations(ref) or {})
        for key, value in patch.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        return self.put(current)

    def annotate(self, ref: bytes, path: list[str], patch: dict[str, Any]) -> tuple[bytes, bytes]:
        tree = self.tree(ref)
        if not path:
            made = self.patched(tree["annotations_hash"], patch)
            return self.put({**tree, "annotations_hash": made}), made
        entry = self.find(tree, path[0])
        if entry is None:
            raise WorkspaceRefused("path not found")
        if len(path) == 1 and entry["kind"] == "file":
            made = self.patched(entry.get("annotations_hash"), patch)
            return self.put(self.upsert(tree, {**entry, "annotations_hash": made})), made
        if entry["kind"] != "dir":
            raise WorkspaceRefused("path is not a directory")
        child, made = self.annotate(entry["hash"], path[1:], patch)
        return self.put(self.upsert(tree, {**entry, "hash": child})), made


class WorkspaceAdapter:
    """The ``workspace.*`` effects over the world's store; ``history`` reads the
    ``sys/Workspace@1`` cells (``resolve``)."""

    adapter_id: str = WORKSPACE_ADAPTER_ID

    def __init__(self, blobs: BlobStore, history: History) -> None:
        from air.sys.workspace import WORKSPACE_KINDS

        self.kinds: frozenset[str] = WORKSPACE_KINDS
        self.trees = _Trees(blobs)
        self.blobs = blobs
        self.history = history

    def submit(self, intent: Intent, done: Done) -> None:
        done(self._answer(intent))

    def close(self) -> None:
        return

    def _answer(self, intent: Intent) -> Receipt:
        op = intent.kind.removeprefix("workspace.")
        try:
            payload = getattr(self, f"_{op}")(intent.params)
        except WorkspaceRefused as exc:
            return self._refused(intent, str(exc))
        except Exception as exc:  # a bug or an input nothing above foresaw: still one receipt
            return self._refused(intent, f"{type(exc).__name__}: {exc}")
        return Receipt(intent.intent_hash, self.adapter_id, "ok", payload)

    def _refused(self, intent: Intent, detail: str) -> Receipt:
        payload = {"error": f"{intent.kind}: {detail}", "kind": intent.kind}
        return Receipt(intent.intent_hash, self.adapter_id, "error", payload)

    def _resolve(self, params: dict[str, Any]) -> dict[str, Any]:
        name = _workspace(params["workspace"])
        history = self.history(name)
        missing = {"exists": False, "resolved_version": None, "head": None, "root_hash": None}
        if history is None:
            return missing
        head = history["latest"]
        version = head if params.get("version") is None else params["version"]
        meta = history["versions"].get(version)
        if meta is None:
            return missing
        return {
            "exists": True,
            "resolved_version": version,
            "head": head,
            "root_hash": meta["root_hash"],
        }

    def _empty_root(self, params: dict[str, Any]) -> dict[str, Any]:
        _workspace(params["workspace"])
        return {"root_hash": self.trees.empty()}

    def _list(self, params: dict[str, Any]) -> dict[str, Any]:
        path = _maybe_path(params.get("path"))
        scope = params.get("scope") or "dir"
        base = "/".join(path)
        top = self.trees.dir(params["root_hash"], path)
        if scope == "dir":
            found = [
                (f"{base}/{e['name']}" if base else e["name"], e)
                for e in self.trees.tree(top)["entries"]
            ]
        elif scope == "subtree":
            found = self.trees.walk(top, base)
        else:
            raise WorkspaceRefused(f"invalid scope {scope!r}")
        entries = [
            {"path": p, "kind": e["kind"], "hash": e["hash"], "size": e["size"], "mode": e["mode"]}
            for p, e in sorted(found, key=lambda pe: pe[0])
        ]
        cursor = params.get("cursor")
        start = (
            0
            if cursor is None
            else next((i for i, e in enumerate(entries) if e["path"] > cursor), len(entries))
        )
        limit = params["limit"]
        end = len(entries) if limit == 0 else min(start + limit, len(entries))
        more = end < len(entries) and end > start
        return {
            "entries": entries[start:end],
            "next_cursor": entries[end - 1]["path"] if more else None,
        }

    def _read_ref(self, params: dict[str, Any]) -> dict[str, Any] | None:
        entry = self.trees.entry(params["root_hash"], _path(params["path"]))
        if entry is None:
            return None
        return {k: entry[k] for k in ("kind", "hash", "size", "mode")}

    def _read_bytes(self, params: dict[str, Any]) -> bytes:
        entry = self.trees.entry(params["root_hash"], _path(params["path"]))
        if entry is None:
            raise WorkspaceRefused(f"path not found: {params['path']}")
        if entry["kind"] != "file":
            raise WorkspaceRefused(f"path is not a file: {params['path']}")
        data = self.blobs.get(cbor.raw_to_hash(entry["hash"]))
        window = params.get("range")
        if window is None:
            return data
        if window["start"] > window["end"] or window["end"] > len(data):
            raise WorkspaceRefused(f"range {window['start']}..{window['end']} is outside the file")
        return data[window["start"] : window["end"]]

    def _write_bytes(self, params: dict[str, Any]) -> dict[str, Any]:
        path = _path(params["path"])
        root = params["root_hash"]
        existing = self.trees.entry(root, path)
        if existing is not None and existing["kind"] == "dir":
            raise WorkspaceRefused("path is a directory")
        mode = params.get("mode")
        if mode is None:
            mode = existing["mode"] if existing is not None else MODE_FILE
        if mode not in (MODE_FILE, MODE_EXEC):
            raise WorkspaceRefused(f"invalid file mode {mode:o}")
        data: bytes = params["bytes"]
        blob = cbor.hash_to_raw(self.blobs.put(data))
        file = {"kind": "file", "hash": blob, "size": len(data), "mode": mode}
        return {"new_root_hash": self.trees.write(root, path, file), "blob_hash": blob}

    def _remove(self, params: dict[str, Any]) -> dict[str, Any]:
        path = _path(params["path"])
        if self.trees.entry(params["root_hash"], path) is None:
            raise WorkspaceRefused(f"path not found: {params['path']}")
        return {"new_root_hash": self.trees.remove(params["root_hash"], path)}

    def _diff(self, params: dict[str, Any]) -> dict[str, Any]:
        prefix = _maybe_path(params.get("prefix"))
        sides = []
        for root in (params["root_a"], params["root_b"]):
            if not prefix:
                sides.append(dict(self.trees.walk(root, "")))
                continue
            entry = self.trees.entry(root, prefix)
            base = "/".join(prefix)
            if entry is None:
                sides.append({})
            elif entry["kind"] == "file":
                sides.append({base: entry})
            else:
                sides.append(dict(self.trees.walk(entry["hash"], base)))
        old, new = sides
        if prefix and not old and not new:
            raise WorkspaceRefused(f"path not found: {'/'.join(prefix)}")
        changes = []
        for path in sorted(set(old) | set(new)):
            a, b = old.get(path), new.get(path)
            if a is not None and b is not None and _same(a, b):
                continue
            changes.append(
                {
                    "path": path,
                    "kind": (b or a or {}).get("kind", "file"),
                    "old_hash": None if a is None else a["hash"],
                    "new_hash": None if b is None else b["hash"],
                }
            )
        return {"changes": changes}

    def _annotations_get(self, params: dict[str, Any]) -> dict[str, Any]:
        path = _maybe_path(params.get("path"))
        root = params["root_hash"]
        if not path:
            return {
                "annotations": self.trees.annotations(self.trees.tree(root)["annotations_hash"])
            }
        entry = self.trees.entry(root, path)
        if entry is None:
            raise WorkspaceRefused(f"path not found: {params['path']}")
        ref = entry.get("annotations_hash")
        if entry["kind"] == "dir":
            ref = self.trees.tree(entry["hash"])["annotations_hash"]
        return {"annotations": self.trees.annotations(ref)}

    def _annotations_set(self, params: dict[str, Any]) -> dict[str, Any]:
        path = _maybe_path(params.get("path"))
        root = params["root_hash"]
        if path and self.trees.entry(root, path) is None:
            raise WorkspaceRefused(f"path not found: {params['path']}")
        new_root, made = self.trees.annotate(root, path, params["annotations_patch"])
        return {"new_root_hash": new_root, "annotations_hash": made}


def _workspace(name: Any) -> str:
    if not isinstance(name, str) or not _SEGMENT.fullmatch(name):
        raise WorkspaceRefused(f"invalid workspace name {name!r}")
    return name


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("kind", "hash", "annotations_hash"))
