"""Page times of the inspector (``world ui``) on a large world, run by hand (the issue "See
why": the world page, a cell with 100,000 steps and the journal page at the end, on a
1,000,000-event world).

Builds a keyed-counter world of ``--events`` events: ``--hot`` of them to the key ``hot`` (its
timeline is the long one), the rest spread over ``--cells`` keys, sent in batches and run, then
a snapshot; then asks each page, as HTML and as JSON, through the app in this process
(Starlette's test client: the view, the template and the HTTP layer, without a socket),
``--repeat`` times after one untimed warm-up, and prints the median and best.

    .venv/bin/python tools/bench/bench_ui.py [--events 1000000] [--hot 100000] [--keep DIR]

``--keep DIR`` builds the world once in DIR and reuses it. Not a test: nothing is asserted
but the status codes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

EVENT = "demo/CounterEvent@1"
COUNTER = "demo/Counter@1"


def build(path: Path, events: int, hot: int, cells: int, batch: int = 20_000) -> float:
    from world import World

    start = time.perf_counter()
    world = World.create(path, ROOT / "manifests" / "counter")
    every = max(1, events // hot)  # the hot key's events are spread over the whole journal
    for i in range(0, events, batch):
        world.send_many(
            (
                EVENT,
                {
                    "key": "hot" if n % every == 0 else f"k{n % cells}",
                    "op": {"$tag": "Add", "$value": 1},
                },
            )
            for n in range(i, min(events, i + batch))
        )
        world.run_until_idle()
    world.snapshot()
    world.close()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--hot", type=int, default=100_000)
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", type=Path)
    args = parser.parse_args()
    path = (args.keep or Path(tempfile.mkdtemp())) / "w"
    if not path.exists():
        print(f"building {args.events:,} events ({args.hot:,} to 'hot') ...", flush=True)
        print(f"built in {build(path, args.events, args.hot, args.cells):.1f} s", flush=True)

    from starlette.testclient import TestClient

    from cli.ui._app import COOKIE, make_app

    client = TestClient(make_app(path, "bench"), base_url="http://127.0.0.1")
    client.cookies.set(COOKIE, "bench")
    hot = '/cell?reducer=demo/Counter@1&key="hot"'
    newest = client.get("/api" + hot).json()["steps"][0]["seq"]
    pages = {
        "world page": "/",
        "cell with the long timeline (its 50 newest records)": hot,
        "the same cell at its newest step, with that step's diff": f"{hot}&at={newest}",
        "journal page at the end (100 records)": "/journal",
        "why of the hot cell": '/why?reducer=demo/Counter@1&key="hot"',
    }
    for name, url in pages.items():
        for prefix in ("", "/api"):
            address = url if not prefix else prefix + (url if url != "/" else "/world")
            assert client.get(address).status_code == 200, address
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                answer = client.get(address)
                times.append(time.perf_counter() - start)
                assert answer.status_code == 200, address
            kind = "JSON" if prefix else "HTML"
            print(
                f"{name} ({kind}): median {statistics.median(times):.3f} s, "
                f"best {min(times):.3f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
