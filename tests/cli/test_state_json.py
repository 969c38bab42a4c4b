"""``world state --json`` tells a bytes state from a text one: the sugar of bytes is base64
text, so beside it the answer carries the state's canonical CBOR (hex), as ``cells show`` has
it (``state_cbor``)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from air import cbor
from cli.main import app
from world import World

from worldkit import const_wasm, manifest, module, output, schema, write_world_air

EVENT = "t/Poke@1"


def _world(tmp_path: Path) -> Path:
    """Two reducers whose states read the same as sugar: text "aGk=" and the bytes b"hi"."""
    air = write_world_air(
        tmp_path / "air",
        {"t/Text@1": const_wasm(output("aGk=")), "t/Bytes@1": const_wasm(output(b"hi"))},
        [
            schema(EVENT, {"record": {}}),
            schema("t/TextState@1", "text"),
            schema("t/BytesState@1", "bytes"),
            module("t/Text@1", "t/TextState@1", EVENT),
            module("t/Bytes@1", "t/BytesState@1", EVENT),
            manifest(
                [{"event": EVENT, "reducer": "t/Text@1"}, {"event": EVENT, "reducer": "t/Bytes@1"}]
            ),
        ],
    )
    w = tmp_path / "w"
    with World.create(w, air) as world:
        world.send(EVENT, {})
        world.run_until_idle()
    return w


def _state(w: Path, reducer: str) -> dict:
    done = CliRunner().invoke(app, ["state", str(w), reducer, "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_state_json_tells_a_bytes_state_from_a_text_one(tmp_path: Path) -> None:
    w = _world(tmp_path)
    text, data = _state(w, "t/Text@1"), _state(w, "t/Bytes@1")
    assert text["state"] == data["state"] == "aGk="  # the sugar alone reads alike
    assert cbor.loads(bytes.fromhex(text["state_cbor"])) == "aGk="
    assert cbor.loads(bytes.fromhex(data["state_cbor"])) == b"hi"
