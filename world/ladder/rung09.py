"""Rung 09, workspaces: a plan seeds workspaces (content-addressed trees in the world's store)
through the ``workspace.*`` effects under a workspace grant, publishes each in the built-in
``sys/HttpPublish@1`` registry, and the reducer commits each new root to the built-in
``sys/Workspace@1`` history; seeding again finds the workspace and makes version 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from world.ladder._kit import Rung, Say, create, expect

EXAMPLE = "agentos-09-workspaces"
REDUCER = "demo/WorkspaceDemo@1"
FILES = {
    "README.txt": b"updated by plan\n",
    "data.json": b'{"demo":true,"items":[1,2,3]}\n',
    "meta/content-type.txt": b"text/html; charset=utf-8",
}


def read_file(world: Any, root: str, path: str) -> bytes:
    """The bytes at ``path`` of the tree ``root`` (``air.sys.workspace``), read from the store."""
    from air import cbor

    node = cbor.loads(world.cas.get(root))
    *dirs, name = path.split("/")
    for part in [*dirs, name]:
        entry = next(e for e in node["entries"] if e["name"] == part)
        if entry["kind"] == "file":
            data: bytes = world.cas.get(cbor.raw_to_hash(entry["hash"]))
            return data
        node = cbor.loads(world.cas.get(cbor.raw_to_hash(entry["hash"])))
    raise KeyError(path)


def _drive(path: Path, say: Say) -> None:
    from world import Engine

    with create(path, EXAMPLE) as world:
        world.send("demo/WorkspaceEvent@1", {"Start": {"workspaces": ["alpha", "beta"],
                                                        "owner": "ada"}})  # fmt: skip
        say("Start alpha and beta: the seed plan runs for each (no workspace yet: empty roots)")
        with Engine(world) as loop:
            loop.run()
        first = world.state(REDUCER)["workspaces"]
        heads = {w: world.state("sys/Workspace@1", w) for w in ("alpha", "beta")}
        published = world.state("sys/HttpPublish@1")["rules"]
        world.send("demo/WorkspaceEvent@1", {"Start": {"workspaces": ["alpha"], "owner": "ada"}})
        say("Start alpha again: resolve finds version 1, and the plan writes on its root")
        with Engine(world) as loop:
            loop.run()
        again = world.state(REDUCER)["workspaces"]["alpha"]
        history = world.state("sys/Workspace@1", "alpha")
        files = {name: read_file(world, again["root_hash"], name) for name in FILES}
        first_root = heads["alpha"]["versions"][0][1]["root_hash"]
        marker = read_file(world, again["root_hash"], "seed/alpha.txt")
    for name in ("alpha", "beta"):
        got = (first[name]["version"], first[name]["entry_count"], first[name]["diff_count"])
        expect(f"{name}'s first seed (version, entries, changes)", got, (1, 4, 4))
        expect(f"{name}'s history head", heads[name]["latest"], 1)
        expect(f"{name}'s published route", published[name]["route_prefix"], f"/{name}")
    expect("the head commit's root", first_root, first["alpha"]["root_hash"])
    say("alpha and beta at version 1: 4 entries, 4 changes each, published at /alpha, /beta")
    expect("alpha's history after the second seed", (history["latest"], again["version"]), (2, 2))
    expect("alpha's files at its head", files, FILES)
    expect("alpha's marker", marker, b"seed marker\n")
    same = "the same root" if again["root_hash"] == first_root else "a new root"
    say(f"alpha at version 2, {same} (the same files hash the same): README.txt, data.json, "
        "index.html, meta/content-type.txt as the plan wrote them")  # fmt: skip


RUNG = Rung(
    example=EXAMPLE,
    title="workspaces: content-addressed trees, a commit history, an HTTP publish registry",
    drive=_drive,
)
