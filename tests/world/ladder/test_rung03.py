"""Rung 03 (``world.ladder.rung03``): a GET to a loopback HTTPS server, reached under the AIR's
own ``https://example.com`` through ``local.json``, comes back as ``NotifyComplete`` 200."""

from __future__ import annotations

from pathlib import Path

from plans_kit import of_kind, records

from air import cbor
from world._localconfig import read_local_config
from world.history import verify_world
from world.ladder import drive
from world.ladder.rung03 import BODY


def test_the_plan_fetches_over_https_and_raises_the_status_back(tmp_path: Path) -> None:
    path = drive("rung03", tmp_path)
    [receipt] = (r.body for r in of_kind(records(path), "receipt"))
    assert receipt["status"] == "ok"
    payload = cbor.loads(receipt["payload"])
    assert (payload["status"], payload["body_preview"]) == (200, BODY.decode())
    assert payload["headers"]["date"] == "Thu, 01 Jan 1970 00:00:00 GMT"
    assert read_local_config(path).http.resolve is not None
    assert verify_world(path).ok
