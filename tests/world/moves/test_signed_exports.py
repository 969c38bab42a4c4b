"""Signed cell exports (issue 20 item 10): a checksum only says a file is self-consistent, so
``world cells import`` takes only files signed by a key it trusts: the importing world's own
(by default), any valid signer or none (``--trust``), or named keys (``--trust-key``). A
signature that does not verify is refused whatever the trust. Every refusal journals nothing.

Worlds here: ``a`` (the importer, which exports its own cells too) and ``b`` (another world,
with a cell ``a`` whose state is the same as ``a``'s: only the signer differs)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import cli.moves  # noqa: F401  (registers cells export/import/key)
from air import cbor
from air.errors import InvalidArgument
from cli.main import app
from world import World
from world.errors import CellFileRefused, ServedError
from world.moves import (
    Trust,
    export_all,
    export_cell,
    import_path,
    read_cell_file,
    world_signer,
)
from world.serve import Client, serve, socket_path

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

WAIT_S = 20.0
runner = CliRunner()


@dataclass(frozen=True)
class Worlds:
    a: Path
    b: Path
    out: Path  # where files are made

    def export(self, world: Path, key: str, name: str) -> Path:
        with World.open(world, readonly=True) as opened:
            export_cell(opened, COUNTER, key, self.out / name, force=True)
        return self.out / name

    def tree(self, world: Path, name: str) -> Path:
        with World.open(world, readonly=True) as opened:
            export_all(opened, COUNTER, self.out / name, force=True)
        return self.out / name


def _make(path: Path, events: list[tuple[str, int]]) -> Path:
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add(k, n)) for k, n in events])
        world.run_until_idle()
    return path


@pytest.fixture
def worlds(tmp_path: Path) -> Worlds:
    out = tmp_path / "files"
    out.mkdir()
    a = _make(tmp_path / "a", [("a", 1), ("b", 2), ("a", 4)])
    b = _make(tmp_path / "b", [("a", 1), ("a", 4), ("z", 9)])
    return Worlds(a, b, out)


def _states(path: Path) -> dict[str, Any]:
    with World.open(path, readonly=True) as world:
        return {view.key: view.state for view in world.cells(COUNTER)}


def _signer(path: Path) -> bytes:
    signer = world_signer(path)
    assert signer is not None
    return signer


def _edit(data: bytes, **changes: Any) -> bytes:
    """``data`` with ``changes`` (None removes a field) and its checksum recomputed, the
    signature kept as it was: what an editor who cannot sign makes."""
    obj = cbor.loads(data)
    for name, value in changes.items():
        if value is None:
            obj.pop(name, None)
        else:
            obj[name] = value
    fields = {k: v for k, v in obj.items() if k not in ("checksum", "signature")}
    obj["checksum"] = cbor.digest(cbor.dumps(fields))
    return cbor.dumps(obj)


def _write(w: Worlds, name: str, data: bytes) -> Path:
    (w.out / name).write_bytes(data)
    return w.out / name


# --- the sneak-past table -------------------------------------------------------------------


def _edited_payload(w: Worlds) -> Path:
    data = w.export(w.a, "a", "a.cbor").read_bytes()
    state = cbor.dumps({"count": 1_000_000, "events": 2})
    return _write(w, "edited.cbor", _edit(data, state=state, state_hash=cbor.digest(state)))


def _signature_stripped(w: Worlds) -> Path:
    data = w.export(w.a, "a", "a.cbor").read_bytes()
    return _write(w, "stripped.cbor", _edit(data, signature=None))


def _downgraded_to_format_1(w: Worlds) -> Path:
    data = w.export(w.a, "a", "a.cbor").read_bytes()
    state = cbor.dumps({"count": 1_000_000, "events": 2})
    edited = _edit(data, format=1, signer=None, signature=None, state=state)
    return _write(w, "downgraded.cbor", _edit(edited, state_hash=cbor.digest(state)))


def _another_worlds_file(w: Worlds) -> Path:
    return w.export(w.b, "a", "from_b.cbor")


def _signature_of_another_file(w: Worlds) -> Path:
    other = cbor.loads(w.export(w.a, "b", "b.cbor").read_bytes())
    data = w.export(w.a, "a", "a.cbor").read_bytes()
    return _write(w, "moved_sig.cbor", _edit(data, signature=other["signature"]))


def _signer_swapped_to_another_world(w: Worlds) -> Path:
    data = w.export(w.a, "a", "a.cbor").read_bytes()
    return _write(w, "swapped.cbor", _edit(data, signer=_signer(w.b)))


def _signer_swapped_to_ours(w: Worlds) -> Path:
    """Another world's file claiming to be signed by the importer."""
    data = w.export(w.b, "a", "from_b.cbor").read_bytes()
    return _write(w, "claims_ours.cbor", _edit(data, signer=_signer(w.a)))


def _truncated_signature(w: Worlds) -> Path:
    data = w.export(w.a, "a", "a.cbor").read_bytes()
    return _write(w, "short.cbor", _edit(data, signature=cbor.loads(data)["signature"][:63]))


def _signature_of_wrong_type(w: Worlds) -> Path:
    data = w.export(w.a, "a", "a.cbor").read_bytes()
    return _write(w, "text_sig.cbor", _edit(data, signature=cbor.loads(data)["signature"].hex()))


def _signer_of_wrong_type(w: Worlds) -> Path:
    data = w.export(w.a, "a", "a.cbor").read_bytes()
    return _write(w, "int_signer.cbor", _edit(data, signer=7))


def _signature_without_signer(w: Worlds) -> Path:
    data = w.export(w.a, "a", "a.cbor").read_bytes()
    return _write(w, "no_signer.cbor", _edit(data, format=1, signer=None))


def _renamed_into_another_reducers_tree(w: Worlds) -> Path:
    tree = w.tree(w.a, "tree")
    module_dir = next((tree / "state" / "reducers").iterdir())
    module_dir.rename(module_dir.with_name("07" * 32))
    return tree


def _old_unsigned_format(w: Worlds) -> Path:
    cell = read_cell_file(w.export(w.a, "a", "a.cbor"))
    return _write(w, "old.cbor", cell.to_bytes())


def _one_foreign_file_in_our_tree(w: Worlds) -> Path:
    tree = w.tree(w.a, "tree")
    theirs = w.export(w.b, "a", "from_b.cbor")
    ours = next(
        p for p in tree.rglob("cells/*.cbor") if read_cell_file(p).key_cbor == cbor.dumps("a")
    )
    shutil.copyfile(theirs, ours)
    return tree


def _other_trust() -> Trust:
    return Trust(keys=frozenset({b"\x01" * 32}))


Make = Callable[[Worlds], Path]
SNEAKS = [
    pytest.param(_edited_payload, Trust(), "bad_signature", id="edited-payload-checksum-fixed"),
    pytest.param(_edited_payload, Trust(any_signer=True), "bad_signature", id="edited-trusted"),
    pytest.param(_signature_stripped, Trust(), "unsigned", id="signature-stripped"),
    pytest.param(_downgraded_to_format_1, Trust(), "unsigned", id="edited-downgraded-to-v1"),
    pytest.param(_another_worlds_file, Trust(), "foreign_signer", id="another-worlds-signature"),
    pytest.param(_signature_of_another_file, Trust(), "bad_signature", id="signature-of-other"),
    pytest.param(_signer_swapped_to_another_world, Trust(), "bad_signature", id="signer-swapped"),
    pytest.param(_signer_swapped_to_ours, Trust(), "bad_signature", id="claims-our-signer"),
    pytest.param(_truncated_signature, Trust(), "bad_signature", id="truncated-signature"),
    pytest.param(_signature_of_wrong_type, Trust(), "bad_signature", id="signature-as-text"),
    pytest.param(_signer_of_wrong_type, Trust(), "bad_signature", id="signer-as-int"),
    pytest.param(_signature_without_signer, Trust(), "bad_signature", id="no-signer"),
    pytest.param(
        _renamed_into_another_reducers_tree, Trust(), "module", id="into-another-module-tree"
    ),
    pytest.param(_old_unsigned_format, Trust(), "unsigned", id="old-unsigned-format"),
    pytest.param(_another_worlds_file, _other_trust(), "foreign_signer", id="trusted-key-other"),
    pytest.param(_one_foreign_file_in_our_tree, Trust(), "foreign_signer", id="tree-one-foreign"),
]


@pytest.mark.parametrize(("make", "trust", "reason"), SNEAKS)
def test_a_file_that_sneaks_past_the_checksum_is_refused_and_nothing_journaled(
    worlds: Worlds, make: Make, trust: Trust, reason: str
) -> None:
    path = make(worlds)
    before = _states(worlds.a)
    with World.open(worlds.a) as world:
        seq_next = world.journal.seq_next
        with pytest.raises(CellFileRefused) as caught:
            import_path(world, path, trust)
        assert world.journal.seq_next == seq_next
    assert caught.value.reason.startswith(reason)
    assert caught.value.path.startswith(str(path))
    assert _states(worlds.a) == before


def test_the_refusal_names_the_signer_a_file_claims(worlds: Worlds) -> None:
    with World.open(worlds.a) as world, pytest.raises(CellFileRefused) as caught:
        import_path(world, _another_worlds_file(worlds))
    assert caught.value.signer == _signer(worlds.b).hex()
    with World.open(worlds.a) as world, pytest.raises(CellFileRefused) as caught:
        import_path(world, _signer_swapped_to_ours(worlds))
    assert (caught.value.reason, caught.value.signer) == ("bad_signature", _signer(worlds.a).hex())


# --- what is taken --------------------------------------------------------------------------


def test_a_worlds_own_exports_import_back_without_trust(worlds: Worlds) -> None:
    before = _states(worlds.a)
    one, tree = worlds.export(worlds.a, "a", "a.cbor"), worlds.tree(worlds.a, "tree")
    assert read_cell_file(one).signer == _signer(worlds.a)
    with World.open(worlds.a) as world:
        world.send(EVENT, add("a", 100))
        world.run_until_idle()
        with pytest.raises(CellFileRefused, match="would roll demo/Counter@1 key 'a' back"):
            import_path(world, one)  # the cell stepped since: a restore says so (--force)
        assert import_path(world, one, force=True) == 1
    assert _states(worlds.a) == before
    copy = worlds.out.parent / "copy"
    shutil.copytree(worlds.a, copy)  # a copy keeps the key: it signs alike
    with World.open(copy) as world:
        assert import_path(world, tree) == len(before)


def test_trust_key_takes_that_worlds_files_only(worlds: Worlds) -> None:
    theirs, tree = worlds.export(worlds.b, "z", "z.cbor"), worlds.tree(worlds.b, "tree")
    trust = Trust.of(keys_hex=[_signer(worlds.b).hex()])
    with World.open(worlds.a) as world:
        assert import_path(world, theirs, trust) == 1
        assert import_path(world, tree, trust) == 2
        with pytest.raises(CellFileRefused) as caught:
            import_path(world, _old_unsigned_format(worlds), trust)
    assert caught.value.reason == "unsigned"
    assert _states(worlds.a)["z"] == _states(worlds.b)["z"]


def test_trust_takes_unsigned_and_foreign_files(worlds: Worlds) -> None:
    old = _old_unsigned_format(worlds)
    assert read_cell_file(old).signer is None
    with World.open(worlds.a) as world:
        assert import_path(world, old, Trust(any_signer=True)) == 1
        assert import_path(world, worlds.export(worlds.b, "z", "z.cbor"), Trust.of(any_signer=True))
    assert "z" in _states(worlds.a)


def test_a_world_without_a_key_exports_unsigned(worlds: Worlds) -> None:
    (worlds.b / "keys" / "receipt.key").unlink()
    assert world_signer(worlds.b) is None
    cell = read_cell_file(worlds.export(worlds.b, "z", "z.cbor"))
    assert cell.signer is None
    assert cbor.loads((worlds.out / "z.cbor").read_bytes())["format"] == 1


@pytest.mark.parametrize("key_hex", ["", "zz" * 32, "ab" * 31, "ab" * 33])
def test_a_trust_key_that_is_not_a_public_key_is_a_usage_error(key_hex: str) -> None:
    with pytest.raises(InvalidArgument):
        Trust.of(keys_hex=[key_hex])


def test_an_unsigned_file_reads_back_as_the_same_cell_with_no_signer(worlds: Worlds) -> None:
    cell = read_cell_file(worlds.export(worlds.a, "a", "a.cbor"))
    again = read_cell_file(worlds.out / "x.cbor", cell.to_bytes())
    assert again == dataclasses.replace(cell, signer=None)


# --- the CLI --------------------------------------------------------------------------------


def test_cli_export_names_the_signer_and_cells_key_prints_it(worlds: Worlds) -> None:
    out = worlds.out / "a.cbor"
    result = runner.invoke(app, ["cells", "export", str(worlds.a), COUNTER, "a", "-o", str(out)])
    assert result.exit_code == 0, result.output
    signer = _signer(worlds.a).hex()
    assert f"signed by {signer}" in result.output
    result = runner.invoke(app, ["cells", "key", str(worlds.a)])
    assert (result.exit_code, result.output.strip()) == (0, signer)
    result = runner.invoke(app, ["cells", "key", str(worlds.a), "--json"])
    assert json.loads(result.output) == {"ok": True, "signer": signer}


def test_cli_refuses_another_worlds_file_saying_how_to_trust_it(worlds: Worlds) -> None:
    theirs = worlds.export(worlds.b, "z", "z.cbor")
    signer = _signer(worlds.b).hex()
    result = runner.invoke(app, ["cells", "import", str(worlds.a), str(theirs)])
    assert result.exit_code == 1
    assert str(theirs) in result.output
    assert "foreign_signer" in result.output
    assert f"--trust-key {signer}" in result.output
    assert "Traceback" not in result.output
    result = runner.invoke(app, ["cells", "import", str(worlds.a), str(theirs), "--json"])
    refused = json.loads(result.output)
    assert (refused["error"], refused["fields"]["reason"]) == ("CellFileRefused", "foreign_signer")
    assert refused["fields"]["signer"] == signer
    assert "z" not in _states(worlds.a)
    result = runner.invoke(
        app, ["cells", "import", str(worlds.a), str(theirs), "--trust-key", signer]
    )
    assert result.exit_code == 0, result.output
    assert _states(worlds.a)["z"] == _states(worlds.b)["z"]


def test_cli_trust_never_takes_a_bad_signature(worlds: Worlds) -> None:
    edited = _edited_payload(worlds)
    result = runner.invoke(app, ["cells", "import", str(worlds.a), str(edited), "--trust"])
    assert result.exit_code == 1
    assert "bad_signature" in result.output
    result = runner.invoke(app, ["cells", "import", str(worlds.a), str(edited), "--trust-key", "x"])
    assert result.exit_code == 1
    assert "InvalidArgument" in result.output


# --- a served world -------------------------------------------------------------------------


class _Served:
    def __init__(self, path: Path) -> None:
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(path,), daemon=True)

    def _run(self, path: Path) -> None:
        try:
            serve(path, stop_event=self.stop_event, on_listening=lambda _p: self.ready.set())
        except BaseException as exc:
            self.errors.append(exc)
            self.ready.set()


@pytest.fixture
def served_a(worlds: Worlds) -> Iterator[Path]:
    server = _Served(worlds.a)
    server.thread.start()
    assert server.ready.wait(WAIT_S)
    assert server.errors == []
    yield worlds.a
    server.stop_event.set()
    server.thread.join(WAIT_S)
    assert not server.thread.is_alive()
    assert server.errors == []


def test_a_served_import_carries_the_trust_flags(worlds: Worlds, served_a: Path) -> None:
    theirs = worlds.export(worlds.b, "z", "z.cbor")
    signer = _signer(worlds.b).hex()
    with Client(socket_path(served_a), timeout_s=WAIT_S) as client:
        with pytest.raises(ServedError) as refused:
            client.call("cells.import", path=str(theirs))
        assert refused.value.error_class == "CellFileRefused"
        assert refused.value.fields["reason"] == "foreign_signer"
        with pytest.raises(ServedError) as refused:
            client.call("cells.import", path=str(_edited_payload(worlds)), trust=True)
        assert refused.value.fields["reason"] == "bad_signature"
    result = runner.invoke(app, ["cells", "import", str(served_a), str(theirs)])
    assert (result.exit_code, "foreign_signer" in result.output) == (1, True)
    result = runner.invoke(
        app, ["cells", "import", str(served_a), str(theirs), "--trust-key", signer]
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["cells", "import", str(served_a), str(theirs), "--trust"])
    assert result.exit_code == 0, result.output
    with Client(socket_path(served_a), timeout_s=WAIT_S) as client:
        state = client.call("world.state", reducer=COUNTER, key="z")["state"]
    assert state == _states(worlds.b)["z"]
