"""Signatures that mean something (issue 20, item 3): after a receipt is journaled, the readers
that check a world check its signature again, so an edited journal whose frames were
re-checksummed is caught at the record's seq; an edited effect record is a replay divergence.

Every world here is a timer world run with simulated time (``world run --sim``), whose journal
is one unsealed segment. An edit rewrites one record's frame with both CRCs fixed, so the
journal still verifies frame by frame and only the signature (or re-execution) can tell.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from air import cbor
from cli.main import app
from kernel.journal import JournalRecord, decode_record, encode_record
from world import World
from world import journal as file_journal
from world._repair import check_world
from world.effects import KEY_DIR, KEY_FILE, BadReceipt, KeyProblem, Receipt, ReceiptKey
from world.errors import ReceiptKeyDamaged
from world.history import verify_world
from world.journal import FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES

from worldkit import COUNTER_AIR, EVENT, ROOT, add

TIMER_AIR = ROOT / "manifests" / "timer"
TIMER_EVENT = "demo/TimerEvent@1"

runner = CliRunner()


def world_cli(*args: object) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def timer_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two timers fired by ``world run --sim``: two receipts, one unsealed segment."""
    w = tmp_path_factory.mktemp("timer") / "w"
    assert world_cli("init", w, "--air", TIMER_AIR)[0] == 0
    for key, at in (("a", 3_000), ("b", 5_000)):
        event = json.dumps({"key": key, "deliver_at_ns": at})
        assert world_cli("send", w, TIMER_EVENT, event)[0] == 0
    code, out, _ = world_cli("run", w, "--sim", "--json")
    assert (code, json.loads(out)["receipts"]) == (0, 2)
    assert [p.name for p in (w / "journal").iterdir() if p.suffix == ".seal"] == []
    return w


@pytest.fixture
def w(timer_world: Path, tmp_path: Path) -> Path:
    """A fresh copy of the timer world, to edit."""
    return Path(shutil.copytree(timer_world, tmp_path / "w"))


# --- editing a journal as an attacker would: change a record, fix its frame's CRCs ----------


def _frame(payload: bytes) -> bytes:
    head = struct.pack("<II", len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload


def _payloads(segment: bytes) -> list[bytes]:
    found, offset = [], SEGMENT_HEADER_BYTES
    while offset < len(segment):
        length = struct.unpack_from("<I", segment, offset)[0]
        start = offset + FRAME_HEADER_BYTES
        found.append(segment[start : start + length])
        offset = start + length
    return found


def _rewrite(world: Path, change: Callable[[list[JournalRecord]], list[JournalRecord]]) -> None:
    """Rewrite the world's one segment with ``change(records)``, every frame's CRCs right."""
    [segment] = sorted((world / "journal").glob("*.log"))
    data = segment.read_bytes()
    records = change([decode_record(p) for p in _payloads(data)])
    frames = [_frame(encode_record(r.seq, r.subject, r.kind, r.body)) for r in records]
    segment.write_bytes(data[:SEGMENT_HEADER_BYTES] + b"".join(frames))
    assert file_journal.verify(world / "journal").clean, "the frames still check"


def _edit(world: Path, kind: str, edit: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """Change the body of the first record of ``kind``; its seq."""
    seqs: list[int] = []

    def change(records: list[JournalRecord]) -> list[JournalRecord]:
        first = next(r for r in records if r.kind == kind)
        seqs.append(first.seq)
        edited = JournalRecord(first.seq, first.subject, first.kind, edit(dict(first.body)))
        return [edited if r is first else r for r in records]

    _rewrite(world, change)
    return seqs[0]


def _records(world: Path, kind: str) -> list[JournalRecord]:
    with World.open(world, readonly=True) as opened:
        return [r for r in opened.journal.read(0) if r.kind == kind]


def _later_delivery(body: dict[str, Any]) -> dict[str, Any]:
    payload = cbor.loads(body["payload"])
    return {**body, "payload": cbor.dumps({**payload, "delivered_at_ns": 4_000})}


def _files(world: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(world)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(world.rglob("*"))
        if p.is_file()
    }


# --- an untouched world ----------------------------------------------------------------------


def test_an_untouched_timer_world_verifies_with_every_receipt_signature_checked(w: Path) -> None:
    replay = verify_world(w)
    assert replay.ok, replay
    assert (replay.receipts_checked, replay.bad_receipt, replay.receipt_key_problem) == (
        2,
        None,
        None,
    )
    check = check_world(w)
    assert check.ok
    assert check.clean
    assert (check.receipts_checked, check.bad_receipt, check.receipt_key_problem) == (2, None, None)
    code, out, _ = world_cli("replay", w, "--verify", "--json")
    data = json.loads(out)
    assert code == 0
    assert (data["ok"], data["receipts_checked"], data["bad_receipt"]) == (True, 2, None)
    assert data["receipt_key_problem"] is None
    code, out, _ = world_cli("journal", "verify", w, "--json")
    data = json.loads(out)
    assert code == 0
    assert (data["ok"], data["receipts_checked"], data["bad_receipt"]) == (True, 2, None)
    assert (data["needs_repair"], data["receipt_key_problem"]) == (False, None)


# --- a receipt edited in the journal ---------------------------------------------------------


def test_a_receipt_payload_edited_in_the_journal_is_refused_as_altered_at_its_seq(w: Path) -> None:
    [receipt, _] = _records(w, "receipt")
    seq = _edit(w, "receipt", _later_delivery)
    assert seq == receipt.seq
    bad = BadReceipt(seq, receipt.body["intent_hash"].hex(), "altered")
    replay = verify_world(w)
    assert not replay.ok
    assert (replay.bad_receipt, replay.divergence, replay.records) == (bad, None, seq)
    check = check_world(w)
    assert not check.ok
    assert not check.needs_repair
    assert (check.bad_receipt, check.receipts_checked) == (bad, 1)


def test_both_commands_report_an_altered_receipt_in_json_and_in_one_line_and_exit_1(
    w: Path,
) -> None:
    [receipt, _] = _records(w, "receipt")
    seq = _edit(w, "receipt", _later_delivery)
    wanted = {"seq": seq, "intent_hash": receipt.body["intent_hash"].hex(), "reason": "altered"}
    for command in (("replay", w, "--verify"), ("journal", "verify", w)):
        code, out, _ = world_cli(*command, "--json")
        assert (code, json.loads(out)["ok"], json.loads(out)["bad_receipt"]) == (1, False, wanted)
        code, out, err = world_cli(*command)
        assert code == 1
        assert len(err.strip().splitlines()) == 1
        for shown in (f"seq {seq} ", wanted["intent_hash"], "altered"):
            assert shown in err
        assert "--repair" not in err, "cutting the journal cannot make a signature good"


def test_a_receipt_signed_with_another_key_is_refused_as_forged(w: Path) -> None:
    other = ReceiptKey(os.urandom(32))

    def resign(body: dict[str, Any]) -> dict[str, Any]:
        receipt = Receipt(
            body["intent_hash"],
            body["adapter_id"],
            body["status"],
            cbor.loads(_later_delivery(body)["payload"]),
        )
        return {**body, "payload": receipt.payload_cbor, "sig": other.sign(receipt)}

    [receipt, _] = _records(w, "receipt")
    seq = _edit(w, "receipt", resign)
    bad = BadReceipt(seq, receipt.body["intent_hash"].hex(), "forged")
    assert verify_world(w).bad_receipt == bad
    assert check_world(w).bad_receipt == bad
    for command in (("replay", w, "--verify"), ("journal", "verify", w)):
        code, out, _ = world_cli(*command, "--json")
        assert (code, json.loads(out)["bad_receipt"]["reason"]) == (1, "forged")


def test_a_receipt_copied_to_the_end_of_the_journal_holds_its_signature_but_answers_no_queued_intent(
    w: Path,
) -> None:
    def duplicate(records: list[JournalRecord]) -> list[JournalRecord]:
        first = next(r for r in records if r.kind == "receipt")
        copied = JournalRecord(len(records), first.subject, first.kind, first.body)
        return [*records, copied]

    _rewrite(w, duplicate)
    [first, _, copied] = _records(w, "receipt")
    check = check_world(w)
    assert (check.ok, check.receipts_checked) == (True, 3), "a copy is signed: only replay tells"
    replay = verify_world(w)
    assert replay.bad_receipt == BadReceipt(
        copied.seq, first.body["intent_hash"].hex(), "not_queued"
    )
    assert not replay.ok


# --- effect records edited in the journal: re-execution tells --------------------------------


@pytest.mark.parametrize(
    ("kind", "field", "edit"),
    [
        pytest.param(
            "effect.queued",
            "body.params",
            lambda body: {**body, "params": cbor.dumps({"key": "a", "deliver_at_ns": 3_001})},
            id="queued-params",
        ),
        pytest.param(
            "policy.decision",
            "body.rule_index",
            lambda body: {**body, "rule_index": body["rule_index"] + 1},
            id="decision-rule-index",
        ),
    ],
)
def test_an_effect_record_edited_in_the_journal_is_a_replay_divergence_at_its_seq(
    w: Path, kind: str, field: str, edit: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    seq = _edit(w, kind, edit)
    divergence = verify_world(w).divergence
    assert divergence is not None
    assert (divergence.seq, divergence.field) == (seq, field)
    code, out, _ = world_cli("replay", w, "--verify", "--json")
    data = json.loads(out)
    assert (code, data["ok"], data["divergence"]["seq"]) == (1, False, seq)
    assert data["divergence"]["field"] == field
    assert check_world(w).ok, "journal verify checks frames and signatures, not re-execution"


# --- the key file ------------------------------------------------------------------------------


def test_a_missing_key_file_is_a_finding_that_names_it_and_is_not_created(w: Path) -> None:
    key_file = w / KEY_DIR / KEY_FILE
    key_file.unlink()
    missing = KeyProblem(str(key_file), "missing")
    replay = verify_world(w)
    assert (replay.ok, replay.receipt_key_problem, replay.receipts_checked) == (False, missing, 0)
    check = check_world(w)
    assert (check.ok, check.needs_repair, check.receipt_key_problem) == (False, False, missing)
    for command in (("replay", w, "--verify"), ("journal", "verify", w)):
        code, out, _ = world_cli(*command, "--json")
        assert (code, json.loads(out)["receipt_key_problem"]) == (1, missing.as_json())
        code, _, err = world_cli(*command)
        assert code == 1
        assert str(key_file) in err.replace("\n", "")
    assert not key_file.exists()


def test_a_damaged_key_file_is_a_finding_that_names_it_and_is_left_as_it_is(w: Path) -> None:
    key_file = w / KEY_DIR / KEY_FILE
    key_file.write_bytes(b"short")
    replay, check = verify_world(w), check_world(w)
    for problem in (replay.receipt_key_problem, check.receipt_key_problem):
        assert problem is not None
        assert problem.path == str(key_file)
        assert problem.reason.startswith("damaged")
    assert not replay.ok
    assert not check.ok
    assert world_cli("replay", w, "--verify")[0] == 1
    assert world_cli("journal", "verify", w)[0] == 1
    assert key_file.read_bytes() == b"short"


def test_a_world_without_receipts_needs_no_key_and_verifying_it_makes_none(
    tmp_path: Path,
) -> None:
    w = tmp_path / "w"
    with World.create(w, COUNTER_AIR) as world:
        world.send(EVENT, add("k", 1))
        world.step(1)
    shutil.rmtree(w / KEY_DIR)  # a world made before worlds were born with their key
    assert verify_world(w).ok
    assert check_world(w).clean
    assert world_cli("replay", w, "--verify")[0] == 0
    assert world_cli("journal", "verify", w)[0] == 0
    assert not (w / KEY_DIR).exists()


def test_loading_the_key_read_only_finds_none_without_creating_it(tmp_path: Path) -> None:
    assert ReceiptKey.load(tmp_path) is None
    assert not (tmp_path / KEY_DIR).exists()
    made = ReceiptKey.load_or_create(tmp_path)
    loaded = ReceiptKey.load(tmp_path)
    assert loaded is not None
    assert loaded.key_id == made.key_id
    (tmp_path / KEY_DIR / KEY_FILE).write_bytes(b"short")
    with pytest.raises(ReceiptKeyDamaged):
        ReceiptKey.load(tmp_path)


# --- neither command writes ----------------------------------------------------------------


def test_verifying_an_edited_world_writes_nothing(w: Path) -> None:
    _edit(w, "receipt", _later_delivery)
    before = _files(w)
    verify_world(w)
    check_world(w)
    for command in (("replay", w, "--verify"), ("journal", "verify", w)):
        world_cli(*command)
        world_cli(*command, "--json")
    assert _files(w) == before
