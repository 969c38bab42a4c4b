"""Rung 03, fetch-notify: a reducer's intent starts a plan that makes an HTTPS call and raises
the result back to the reducer (routed by the manifest, AgentOS's ``{event, value}`` form)."""

from __future__ import annotations

from pathlib import Path

from world.ladder._kit import FakeHttp, Rung, Say, Seen, create, expect, resolve, self_signed

REDUCER = "demo/FetchNotify@1"
URL = "https://example.com/data.json"
BODY = b'{"items": [1, 2, 3]}'


def _answer(seen: Seen) -> tuple[int, dict[str, str], bytes]:
    if (seen.method, seen.path) != ("GET", "/data.json"):
        return 404, {}, b""
    return 200, {"Content-Type": "application/json"}, BODY


def _drive(path: Path, say: Say) -> None:
    from world import Engine

    pem = path.with_name("example.com.pem")
    tls = self_signed(("example.com",), pem)
    with FakeHttp(_answer, tls=tls) as fake, create(path, "agentos-03-fetch-notify") as world:
        resolve(path, {"example.com": fake.address}, ca_file=pem)
        world.send("demo/FetchNotifyEvent@1", {"Start": {"url": URL, "method": "GET"}})
        say(f"Start: the reducer's intent runs demo/fetch_plan@1, which GETs {URL}")
        with Engine(world) as loop:
            receipts = loop.run().receipts
        state = world.state(REDUCER)
    expect("requests the server got", [(s.method, s.path) for s in fake.seen],
           [("GET", "/data.json")])  # fmt: skip
    expect("the server was asked as", fake.seen[0].headers.get("host"), "example.com")
    expect("http receipts", receipts, 1)
    expect("the fetch machine", state.get("pc"), "Done")
    expect("the status raised back", state.get("last_status"), 200)
    expect("what is pending", state.get("pending_request"), None)
    say(f"NotifyComplete raised back with status {state['last_status']}: {state['pc']}")


RUNG = Rung(
    example="agentos-03-fetch-notify",
    title="fetch-notify: a reducer's intent, a plan's HTTPS call, the result raised back",
    drive=_drive,
)
