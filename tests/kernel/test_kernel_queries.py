"""What is outside the kernel reads it through its queries (``kernel._core``, "Queries"), and
the kernel alone says whether its memory equals the journal (``Kernel.consistent``, kept by
each ``ingest_*`` around its own append and apply)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from air.errors import UnknownName
from world import World

from worldkit import ROOT

ACCOUNT_AIR = ROOT / "manifests" / "account"
EVENT = "demo/AccountEvent@1"


def _withdraw(key: str, n: int) -> dict[str, Any]:
    return {"key": key, "op": {"$tag": "Withdraw", "$value": n}}


def test_the_kernel_counts_and_lists_its_dead_letters_through_its_queries(
    tmp_path: Path,
) -> None:
    with World.create(tmp_path / "w", ACCOUNT_AIR) as w:
        w.send_many([(EVENT, _withdraw("a", 1)), (EVENT, _withdraw("b", 1))])
        w.run_until_idle()
        kernel = w.kernel
        counts = kernel.counts()
        assert (counts.dead_letters_total, counts.dead_letters_kept) == (2, 2)
        assert (counts.steps_failed, counts.steps_total, counts.pending_deliveries) == (2, 2, 0)
        letters = kernel.dead_letter_list()
        assert [d.code for d in letters] == ["refused", "refused"]
        assert kernel.dead_letter(letters[0].id) == letters[0]
        letters.clear()
        assert len(kernel.dead_letter_list()) == 2, "the list is the caller's copy"
        with pytest.raises(UnknownName):
            kernel.dead_letter("99")
        assert (kernel.runs(), kernel.live_intents(), kernel.run_failures()) == ({}, [], {})


def test_an_input_that_fails_after_its_append_leaves_the_kernel_inconsistent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with World.create(tmp_path / "w", ACCOUNT_AIR) as w:
        kernel = w.kernel
        value_cbor, value = kernel.normalise_event(EVENT, _withdraw("a", 1))

        def broken(*_args: Any, **_kwargs: Any) -> int:
            raise RuntimeError("routing failed")

        monkeypatch.setattr(kernel, "_route", broken)
        before = w.journal.seq_next
        with pytest.raises(RuntimeError):
            kernel.ingest_many([(EVENT, value_cbor, value, None)])
        assert w.journal.seq_next == before + 1
        assert not kernel.consistent, "memory is behind the journal: no checkpoint"


def test_an_input_that_fails_before_its_append_leaves_the_kernel_consistent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with World.create(tmp_path / "w", ACCOUNT_AIR) as w:
        kernel = w.kernel

        def refused(*_args: Any, **_kwargs: Any) -> int:
            raise OSError("disk full")

        monkeypatch.setattr(kernel.journal, "append", refused)
        with pytest.raises(OSError):
            kernel.ingest_approval(b"\0" * 32, True)
        assert kernel.consistent, "nothing appended: memory still equals the journal"
