"""Reducer micro-effects end to end: intents, policy, signed receipts, simulated and real time,
replay without adapters (issue 8, items 3-6)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from air import cbor
from kernel.journal import JournalRecord
from world import Engine, World
from world.effects import Receipt, ReceiptKey, accept_receipt
from world.errors import ReceiptRefused
from world.history import verify_world

from worldkit import ROOT

TIMER_AIR = ROOT / "manifests" / "timer"
TIMER = "demo/Timer@1"
EVENT = "demo/TimerEvent@1"


def _timer_world(path: Path, deadlines: dict[str, int]) -> Path:
    with World.create(path, TIMER_AIR) as world:
        world.send_many([(EVENT, {"key": k, "deliver_at_ns": t}) for k, t in deadlines.items()])
    return path


def _records(path: Path) -> list[JournalRecord]:
    with World.open(path, readonly=True) as world:
        return list(world.journal.read(0))


def test_a_simulated_timer_world_completes_at_once_in_deadline_order(tmp_path: Path) -> None:
    w = _timer_world(tmp_path / "w", {"late": 5_000, "early": 3_000})
    with World.open(w) as world, Engine(world, sim=True) as loop:
        report = loop.run()
        assert report.receipts == 2
        assert world.state(TIMER, "early")["last_fired_ns"] == 3_000
        assert world.state(TIMER, "late")["last_fired_ns"] == 5_000
        assert world.kernel.effects.now_ns == 5_000
    kinds = [r.kind for r in _records(w)]
    assert kinds.count("effect.queued") == kinds.count("policy.decision") == 2
    fired = [r.body["status"] for r in _records(w) if r.kind == "receipt"]
    assert fired == ["ok", "ok"]
    assert verify_world(w).ok


def test_two_simulated_runs_of_the_same_world_write_identical_journal_bytes(
    tmp_path: Path,
) -> None:
    w = _timer_world(tmp_path / "w", {"a": 7_000, "b": 2_000, "c": 7_000})
    shutil.copytree(w, tmp_path / "copy")
    for path in (w, tmp_path / "copy"):
        with World.open(path) as world, Engine(world, sim=True) as loop:
            loop.run()
    ours = b"".join(p.read_bytes() for p in sorted((w / "journal").glob("*.log")))
    theirs = b"".join(p.read_bytes() for p in sorted((tmp_path / "copy" / "journal").glob("*.log")))
    assert ours == theirs
    assert len(_records(w)) > 10


def test_a_real_time_timer_fires_no_earlier_than_its_deadline(tmp_path: Path) -> None:
    w = tmp_path / "w"
    with World.create(w, TIMER_AIR) as world:
        deadline = time.time_ns() + 200_000_000
        started = time.monotonic()
        world.send(EVENT, {"key": "t", "deliver_at_ns": deadline})
        with Engine(world) as loop:
            loop.run(until_idle=False)
        waited = time.monotonic() - started
        fired = world.state(TIMER, "t")["last_fired_ns"]
    assert waited >= 0.2
    assert fired >= deadline


def _queued_intent(path: Path) -> bytes:
    with World.open(path) as world:
        world.run_until_idle()
        [intent] = world.kernel.effects.queued()
        return intent.intent_hash


def test_forged_altered_unknown_and_duplicate_receipts(tmp_path: Path) -> None:
    w = _timer_world(tmp_path / "w", {"t": 1_000})
    intent_hash = _queued_intent(w)
    with World.open(w) as world:
        key = ReceiptKey.load_or_create(w)
        receipt = Receipt(intent_hash, "timer.sim", "ok", {"delivered_at_ns": 1_000, "key": None})
        other = ReceiptKey(os.urandom(32))
        with pytest.raises(ReceiptRefused) as forged:
            accept_receipt(world, key, receipt, other.sign(receipt))
        assert forged.value.reason == "forged"
        altered = Receipt(intent_hash, "timer.sim", "ok", {"delivered_at_ns": 9, "key": None})
        with pytest.raises(ReceiptRefused) as changed:
            accept_receipt(world, key, altered, key.sign(receipt))
        assert changed.value.reason == "altered"
        stranger = Receipt(bytes(32), "timer.sim", "ok", {"delivered_at_ns": 1, "key": None})
        with pytest.raises(ReceiptRefused) as unknown:
            accept_receipt(world, key, stranger, key.sign(stranger))
        assert unknown.value.reason == "unknown_intent"
        before = world.journal.seq_next
        assert accept_receipt(world, key, receipt, key.sign(receipt)) is True
        assert accept_receipt(world, key, receipt, key.sign(receipt)) is False
        assert world.journal.seq_next == before + 1
        world.commit()
        world.run_until_idle()
        assert world.state(TIMER, "t")["fired"] == 1
    assert verify_world(w).ok


def test_replay_reuses_journaled_receipts_and_never_calls_an_adapter(tmp_path: Path) -> None:
    w = _timer_world(tmp_path / "w", {"t": 1_000})
    with World.open(w) as world, Engine(world, sim=True) as loop:
        loop.run()
    receipts = [r for r in _records(w) if r.kind == "receipt"]
    assert len(receipts) == 1
    assert cbor.loads(receipts[0].body["payload"])["delivered_at_ns"] == 1_000
    report = verify_world(w)  # builds no Engine: nothing could dispatch
    assert report.ok, report
