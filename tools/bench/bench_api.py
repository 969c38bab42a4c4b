"""A served world's sends over its socket and over HTTP, side by side (issue 34's measure).

    .venv/bin/python tools/bench/bench_api.py [--rounds 3]

For each transport, on a fresh counter world served on a thread: one request of 10,000 events
(``send_many``), then 1,000 requests of one event each (``send``), each acknowledged only when
journaled. Socket: ``world.connect(path)``; HTTP: a plain ``httpx`` client posting
``/v1/ops/events.send`` (what a client in another language does) and ``world.connect(url)``.
Prints events/s per round and the median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from world import World, connect  # noqa: E402
from world.serve import HttpSettings, serve  # noqa: E402

EVENT = "demo/CounterEvent@1"
TOKEN = "bench-token-" + "x" * 32


def _add(i: int) -> dict[str, object]:
    return {"key": f"k{i % 1000}", "op": {"$tag": "Add", "$value": 1}}


def _serve(path: Path) -> tuple[threading.Event, threading.Thread, list[str]]:
    stop, ready, url = threading.Event(), threading.Event(), []
    settings = HttpSettings("127.0.0.1", 0, TOKEN, "bench", 1e9, 10**9)
    thread = threading.Thread(
        target=serve,
        args=(path,),
        kwargs={
            "stop_event": stop,
            "on_listening": lambda _p: ready.set(),
            "http": settings,
            "on_http": url.append,
        },
        daemon=True,
    )
    thread.start()
    ready.wait(60)
    return stop, thread, url


def one_round(kind: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w"
        with World.create(path, ROOT / "manifests" / "counter"):
            pass
        stop, thread, url = _serve(path)
        try:
            batch = [_add(i) for i in range(10_000)]
            if kind == "socket":
                h = connect(path)
                t0 = time.perf_counter()
                h.send_many(EVENT, batch)
                big = time.perf_counter() - t0
                t0 = time.perf_counter()
                for i in range(1000):
                    h.send(EVENT, _add(i))
                small = time.perf_counter() - t0
                h.close()
            else:
                auth = {"Authorization": f"Bearer {TOKEN}"}
                with httpx.Client(base_url=url[0], headers=auth) as http:
                    t0 = time.perf_counter()
                    r = http.post("/v1/ops/events.send", json={"schema": EVENT, "values": batch})
                    big = time.perf_counter() - t0
                    assert r.status_code == 200, r.text
                    t0 = time.perf_counter()
                    for i in range(1000):
                        one = {"schema": EVENT, "values": [_add(i)]}
                        assert http.post("/v1/ops/events.send", json=one).status_code == 200
                    small = time.perf_counter() - t0
        finally:
            stop.set()
            thread.join(120)
    return 10_000 / big, 1000 / small


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    for kind in ("socket", "http"):
        results = [one_round(kind) for _ in range(rounds)]
        big = [r[0] for r in results]
        small = [r[1] for r in results]
        print(
            f"{kind:6}  10,000 in one request: {statistics.median(big):9,.0f} events/s "
            f"({', '.join(f'{b:,.0f}' for b in big)})   1,000 single-event requests: "
            f"{statistics.median(small):7,.0f} requests/s ({', '.join(f'{s:,.0f}' for s in small)})"
        )


if __name__ == "__main__":
    main()
