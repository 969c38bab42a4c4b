"""Refusals: a reducer declines its event with a reason (``{"error": text}``, ``kernel.abi``).

The refusal is journaled as ``step.failed`` with code ``refused`` and the reason as detail, the
state stays, nothing is emitted, the delivery is a dead letter with that reason, and replay
reproduces it. The reason is bounded (``REFUSAL_REASON_MAX``, hit exactly here), and a hostile
reducer's refusal (error not text, empty, too long, beside a state or events) is a bad output
with its own code, the world going on. Both the native and the pure decoder agree on each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from air import cbor
from kernel import abi, native
from kernel.errors import StepRefused, StepRejected
from world import World
from world.history import verify_world

from worldkit import ROOT, const_wasm, manifest, module, output, schema, write_world_air

ACCOUNT_AIR = ROOT / "manifests" / "account"
EVENT = "demo/AccountEvent@1"
ACCOUNT = "demo/Account@1"
PING = "t/Ping@1"


def op(key: str, tag: str, n: int) -> dict[str, Any]:
    return {"key": key, "op": {"$tag": tag, "$value": n}}


def _failures(world: World) -> list[dict[str, Any]]:
    return [r.body["reason"] for r in world.journal.read(0) if r.kind == "step.failed"]


def test_an_overdraft_is_refused_with_its_reason_and_the_state_stays(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", ACCOUNT_AIR) as world:
        world.send_many([(EVENT, op("alice", "Deposit", 5)), (EVENT, op("alice", "Withdraw", 9))])
        assert world.run_until_idle() == 2
        assert world.state(ACCOUNT, "alice") == {"balance": 5}
        reason = {
            "code": "refused",
            "error": "StepRefused",
            "detail": "overdraft: balance 5, asked 9",
        }
        assert _failures(world) == [reason]
        (letter,) = world.kernel.dead_letters.letters
        assert (letter.code, letter.detail, letter.id) == ("refused", reason["detail"], "4")
        assert world.info()["steps_failed"] == 1
        world.send(EVENT, op("alice", "Withdraw", 5))  # exactly the balance: taken
        world.run_until_idle()
        assert world.state(ACCOUNT, "alice") == {"balance": 0}
    assert verify_world(tmp_path / "w").ok, "the refusal replays to the same record"
    with World.open(tmp_path / "w") as world:  # from the snapshot: the letter and the counts
        assert [d.id for d in world.kernel.dead_letters.letters] == ["4"]
        assert world.kernel.dead_letters.steps_failed == 1


def test_a_first_withdraw_is_refused_and_makes_no_cell(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", ACCOUNT_AIR) as world:
        world.send(EVENT, op("bob", "Withdraw", 1))
        world.run_until_idle()
        assert world.state(ACCOUNT, "bob") is None
        assert world.cell_count(ACCOUNT) == 0
        assert _failures(world)[0]["detail"] == "overdraft: balance 0, asked 1"


# --- the ABI: decoding, on both paths ----------------------------------------------------------


def _rejection(raw: bytes) -> StepRejected:
    """The error ``decode_output`` raises for ``raw``, the same with the native path on and
    off (the native decoder declines every refusal, so the reference decides both)."""
    found = []
    for flag in (True, False):
        native.set_enabled(flag)
        try:
            with pytest.raises(StepRejected) as info:
                abi.decode_output(raw, module="t/M@1")
            found.append(info.value)
        finally:
            native.set_enabled(True)
    first, second = found
    assert (type(first), first.code, first.pointer, first.detail) == (
        type(second),
        second.code,
        second.pointer,
        second.detail,
    )
    return first


def test_the_reason_may_be_refusal_reason_max_bytes_and_no_more() -> None:
    limit = abi.REFUSAL_REASON_MAX
    at = _rejection(cbor.dumps({"error": "x" * limit}))
    assert isinstance(at, StepRefused)
    assert (at.code, at.reason) == ("refused", "x" * limit)
    over = _rejection(cbor.dumps({"error": "x" * (limit + 1)}))
    assert not isinstance(over, StepRefused)
    assert (over.code, over.pointer) == ("refusal_too_long", "/error")
    wide = _rejection(cbor.dumps({"error": "é" * (limit // 2 + 1)}))  # counted in UTF-8 bytes
    assert wide.code == "refusal_too_long"
    assert _rejection(cbor.dumps({"error": "é" * (limit // 2)})).code == "refused"


@pytest.mark.parametrize(
    ("out", "code", "pointer"),
    [
        pytest.param({"error": 5}, "output_shape", "/error", id="error-not-text"),
        pytest.param({"error": b"no"}, "output_shape", "/error", id="error-bytes"),
        pytest.param({"error": None}, "output_shape", "/error", id="error-null"),
        pytest.param({"error": ""}, "output_shape", "/error", id="error-empty"),
        pytest.param(
            {"error": "no", "state": cbor.dumps({"n": 1})},
            "refusal_not_alone",
            "/state",
            id="error-and-state",
        ),
        pytest.param({"error": "no", "state": None}, "refusal_not_alone", "/state", id="and-null"),
        pytest.param(
            {"error": "no", "domain_events": []}, "refusal_not_alone", "/domain_events", id="emits"
        ),
        pytest.param({"error": "no", "ann": cbor.dumps(1)}, "refusal_not_alone", "/ann", id="ann"),
        pytest.param({"error": "no", "why": 1}, "output_unknown_key", "/why", id="unknown-key"),
    ],
)
def test_a_bad_refusal_is_a_bad_output(out: dict[str, Any], code: str, pointer: str) -> None:
    found = _rejection(cbor.dumps(out))
    assert not isinstance(found, StepRefused)
    assert (found.code, found.pointer) == (code, pointer)


def test_a_plain_output_is_unchanged_and_state_is_still_required() -> None:
    assert abi.decode_output(cbor.dumps({"state": None})).state_cbor is None
    assert _rejection(cbor.dumps({"domain_events": []})).code == "output_shape"


# --- hostile reducers, in a world ------------------------------------------------------------

HUGE = "x" * 6_000  # what fits below const_wasm's input (written at 8192)


@pytest.mark.parametrize(
    ("wasm", "code"),
    [
        pytest.param(const_wasm(cbor.dumps({"error": "no thanks"})), "refused", id="refusal"),
        pytest.param(const_wasm(cbor.dumps({"error": 7})), "output_shape", id="error-not-text"),
        pytest.param(const_wasm(cbor.dumps({"error": HUGE})), "refusal_too_long", id="huge-error"),
        pytest.param(
            const_wasm(cbor.dumps({"error": "no", "state": cbor.dumps({"n": 5})})),
            "refusal_not_alone",
            id="error-plus-state",
        ),
        pytest.param(
            const_wasm(
                cbor.dumps(
                    {
                        "error": "no",
                        "domain_events": [{"value": cbor.dumps({"n": 1}), "schema": PING}],
                    }
                )
            ),
            "refusal_not_alone",
            id="error-plus-emits",
        ),
        pytest.param(const_wasm(b"\xa1\x65error\x62\xff\xfe"), "output_not_cbor", id="not-utf8"),
    ],
)
def test_a_hostile_refusal_fails_its_step_cleanly_and_the_world_keeps_running(
    tmp_path: Path, wasm: bytes, code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = {"record": {"n": "nat"}}
    air = write_world_air(
        tmp_path / "air",
        {"t/Bad@1": wasm, "t/Good@1": const_wasm(output({"n": 9}))},
        [
            schema("t/S@1", s),
            schema(PING, s),
            schema("t/Other@1", s),
            module("t/Bad@1", "t/S@1", PING),
            module("t/Good@1", "t/S@1", "t/Other@1"),
            manifest(
                [
                    {"event": PING, "reducer": "t/Bad@1"},
                    {"event": "t/Other@1", "reducer": "t/Good@1"},
                ]
            ),
        ],
    )
    journals = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("WORLD_NATIVE", flag)
        path = tmp_path / f"w{flag}"
        with World.create(path, air) as world:
            world.send_many([(PING, {"n": 1}), ("t/Other@1", {"n": 1})])
            assert world.run_until_idle() == 2
            assert world.state("t/Bad@1") is None, "nothing of the refused output is kept"
            assert world.state("t/Good@1") == {"n": 9}
            (letter,) = world.kernel.dead_letters.letters
            assert letter.code == code
            assert len(letter.detail) <= 500
            if code == "refused":
                assert letter.detail == "no thanks"
            assert not [r for r in world.journal.read(0) if r.kind == "effect.queued"]
        with World.open(path, readonly=True) as world:
            journals[flag] = [(r.kind, r.subject, r.body) for r in world.journal.read(0)]
        assert verify_world(path).ok
    assert journals["1"] == journals["0"]
