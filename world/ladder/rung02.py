"""Rung 02, blob-echo: a reducer puts bytes in the CAS and gets them back."""

from __future__ import annotations

import base64
from pathlib import Path

from world.ladder._kit import Rung, Say, create, expect

REDUCER = "demo/BlobEchoSM@1"
DATA = b"echo through the CAS \x00\xff"


def _drive(path: Path, say: Say) -> None:
    from blake3 import blake3

    from world import Engine

    with create(path, "agentos-02-blob-echo") as world:
        world.send("demo/BlobEchoEvent@1", {"Start": {"data": base64.b64encode(DATA).decode()}})
        say(f"Start with {len(DATA)} bytes: blob.put, then blob.get of what was put")
        with Engine(world) as loop:
            receipts = loop.run().receipts
        state = world.state(REDUCER)
    expect("blob receipts", receipts, 2)
    ref = "blake3:" + blake3(DATA).hexdigest()
    expect("the stored blob", state.get("stored_blob_ref"), ref)
    expect("the blob got back", state.get("retrieved_blob_hash"), ref)
    expect("the echo machine", state.get("pc"), "Done")
    say(f"got the same bytes back: {ref[:19]}…")


RUNG = Rung(
    example="agentos-02-blob-echo",
    title="blob-echo: blob.put then blob.get through the content-addressed store",
    drive=_drive,
)
