"""Rung 05, chain-comp: a saga of plans chained by the reducer (charge, reserve, notify), and
its compensation (a refund of the charge) when the reservation fails."""

from __future__ import annotations

from pathlib import Path

from world.ladder._kit import FakeHttp, Rung, Say, Seen, create, expect, resolve, self_signed

REDUCER = "demo/ChainComp@1"
ANSWERS = {
    ("POST", "/charge"): (200, b"charged"),
    ("PUT", "/reserve/sku-1"): (200, b"sku-1 held"),
    ("PUT", "/reserve/sku-2"): (409, b"sku-2 out of stock"),
    ("POST", "/notify"): (202, b"noted"),
    ("POST", "/refund"): (200, b"refunded"),
}


def start(order_id: str, sku: str) -> dict[str, object]:
    """A ``Start`` event for ``order_id`` reserving ``sku``, every target on ``example.com``."""

    def target(name: str, method: str, path: str) -> dict[str, str]:
        return {"name": name, "method": method, "url": f"https://example.com{path}"}

    return {
        "Start": {
            "order_id": order_id,
            "customer_id": "cust-7",
            "amount_cents": 1250,
            "reserve_sku": sku,
            "charge": target("charge", "POST", "/charge"),
            "reserve": target("reserve", "PUT", f"/reserve/{sku}"),
            "notify": target("notify", "POST", "/notify"),
            "refund": target("refund", "POST", "/refund"),
        }
    }


def _answer(seen: Seen) -> tuple[int, dict[str, str], bytes]:
    status, body = ANSWERS.get((seen.method, seen.path), (404, b"no such route"))
    return status, {"Content-Type": "text/plain"}, body


def _drive(path: Path, say: Say) -> None:
    from world import Engine

    pem = path.with_name("example.com.pem")
    with (
        FakeHttp(_answer, tls=self_signed(("example.com",), pem)) as fake,
        create(path, "agentos-05-chain-comp") as world,
    ):
        resolve(path, {"example.com": fake.address}, ca_file=pem)
        world.send("demo/ChainEvent@1", start("order-1", "sku-1"))
        say("order-1: charge, then reserve sku-1 (in stock), then notify")
        with Engine(world) as loop:
            loop.run()
        done = world.state(REDUCER)
        first = [(s.method, s.path) for s in fake.seen]
        world.send("demo/ChainEvent@1", start("order-2", "sku-2"))
        say("order-2: charge, then reserve sku-2 (out of stock), so refund the charge")
        with Engine(world) as loop:
            loop.run()
        refunded = world.state(REDUCER)
    calls = [(s.method, s.path) for s in fake.seen]
    expect("order-1's calls", first, [("POST", "/charge"), ("PUT", "/reserve/sku-1"),
           ("POST", "/notify")])  # fmt: skip
    expect("order-1's saga", done["phase"], "Completed")
    saga = done["current_saga"]
    statuses = [saga[f"{step}_status"] for step in ("charge", "reserve", "notify", "refund")]
    expect("order-1's statuses", statuses, [200, 200, 202, None])
    say(f"order-1 {done['phase']}: charged 200, reserved 200, notified 202")
    expect("order-2's calls", calls[len(first) :], [("POST", "/charge"),
           ("PUT", "/reserve/sku-2"), ("POST", "/refund")])  # fmt: skip
    expect("order-2's saga", refunded["phase"], "Refunded")
    saga = refunded["current_saga"]
    statuses = [saga[f"{step}_status"] for step in ("charge", "reserve", "notify", "refund")]
    expect("order-2's statuses", statuses, [200, 409, None, 200])
    expect("order-2's error", saga["last_error"], "sku-2 out of stock")
    say(f"order-2 {refunded['phase']}: reserve said 409 ({saga['last_error']}), refund 200")


RUNG = Rung(
    example="agentos-05-chain-comp",
    title="chain-comp: a saga of plans chained by the reducer, compensated when one fails",
    drive=_drive,
)
