"""Rung 06, safe-upgrade: a world on ``air.v1`` is proposed ``air.v2`` (a second plan version
with a follow-up call, its capability and policy), the shadow run shows what would change,
and it is approved and applied through the operations layer; the next fetch runs the new plan
while the cell keeps its state, pinned to its era until it is upgraded."""

from __future__ import annotations

from pathlib import Path

from world.ladder._kit import FakeHttp, Rung, Say, Seen, create, expect, resolve, self_signed

EXAMPLE = "agentos-06-safe-upgrade"
REDUCER = "demo/SafeUpgrade@1"
START = {"Start": {"url": "https://example.com/data.json"}}


def _answer(seen: Seen) -> tuple[int, dict[str, str], bytes]:
    known = {"/data.json": b'{"data": 1}', "/follow.json": b'{"follow": 2}'}
    body = known.get(seen.path)
    return (404, {}, b"") if body is None else (200, {"Content-Type": "application/json"}, body)


def _drive(path: Path, say: Say) -> None:
    from world import Engine
    from world.ops import LocalHandle
    from world.sdk import example_modules, example_path

    pem = path.with_name("example.com.pem")
    with (
        FakeHttp(_answer, tls=self_signed(("example.com",), pem)) as fake,
        create(path, EXAMPLE) as world,
    ):
        resolve(path, {"example.com": fake.address}, ca_file=pem)
        handle = LocalHandle(world)
        handle.send("demo/SafeUpgradeEvent@1", START)
        with Engine(world) as loop:
            loop.run()
        v1 = handle.cell(REDUCER, None)
        expect("requests under air.v1", (v1.state["pc"], v1.state["requests_observed"]),
               ("Completed", 1))  # fmt: skip
        say("air.v1: Start runs demo/fetch_plan@1, one GET; Completed, 1 request observed")

        proposal = handle.propose(
            example_path(EXAMPLE) / "v2", note="fetch_plan@2", modules=example_modules(EXAMPLE)
        )
        diff = proposal.diff
        expect("plans the proposal adds", diff["added"].get("plan"), ["demo/fetch_plan@2"])
        expect("caps it adds", diff["added"].get("cap"), ["demo/http_followup_cap@1"])
        expect("the reducer", [r["change"] for r in diff["reducers"]], ["kept"])
        say(f"proposed air.v2 as {proposal.id}: + demo/fetch_plan@2, + cap_http_followup, "
            "policy demo/http-policy@1 → @2, the reducer kept")  # fmt: skip

        shadowed = handle.shadow(proposal.id).model_dump()
        [cell] = shadowed["cells"]["shown"]
        fields = {f["path"]: (f["real"], f["shadow"]) for f in cell["fields"]}
        expect("what the shadow shows", fields,
               {"/follow_status": (None, 202), "/requests_observed": (1, 2)})  # fmt: skip
        new = [(e["origin"]["name"], e["params"]["url"]) for e in shadowed["effects"]["new"]]
        expect("the calls the shadow would make", new, [
            ("demo/fetch_plan@2", "https://example.com/data.json"),
            ("demo/fetch_plan@2", "https://example.com/follow.json"),
        ])  # fmt: skip
        say("shadow: the history replayed under air.v2 would call /data.json and "
            "/follow.json; follow_status null → 202, requests_observed 1 → 2")  # fmt: skip

        handle.approve(proposal.id, note="looks right")
        applied = handle.apply(proposal.id)
        pinned = handle.cell(REDUCER, None)
        expect("the cell's era after apply", pinned.era, v1.era)
        expect("the world's era after apply", pinned.current_era, applied.manifest_hash)
        say("approved and applied: the world's era is air.v2's, the cell still pinned to v1's")

        handle.send("demo/SafeUpgradeEvent@1", START)
        with Engine(world) as loop:
            loop.run()
        v2 = handle.cell(REDUCER, None)
        handle.cells_upgrade(REDUCER, None)
        upgraded = handle.cell(REDUCER, None)
    expect("calls made", [(s.path, s.headers.get("x-idempotency-key")) for s in fake.seen], [
        ("/data.json", "safe-upgrade-v1-primary"),
        ("/data.json", "safe-upgrade-v2-primary"),
        ("/follow.json", "safe-upgrade-v2-follow"),
    ])  # fmt: skip
    got = (v2.state["pc"], v2.state["follow_status"], v2.state["requests_observed"])
    expect("the cell after the next Start", got, ("Completed", 202, 2))
    expect("the cell's era after cells upgrade", upgraded.era, applied.manifest_hash)
    expect("its state after cells upgrade", upgraded.state, v2.state)
    say("Start again: demo/fetch_plan@2 makes both calls; follow_status 202, 2 requests; "
        "cells upgrade moves the cell to the new era, its state unchanged")  # fmt: skip


RUNG = Rung(
    example=EXAMPLE,
    title="safe-upgrade: propose air.v2, shadow it, approve, apply; the cell carries over",
    drive=_drive,
)
