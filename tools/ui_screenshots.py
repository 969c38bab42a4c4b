"""Screenshots of the inspector's pages for the README (``docs/ui/*.png``).

    .venv/bin/python tools/ui_screenshots.py [--out docs/ui]

Builds the bundled order world in a scratch folder, runs it against a loopback server that
answers ``/ok`` with 200 and ``/down`` with 503, adds a world whose timer waits for approval,
serves each with ``world ui`` and saves a picture of each page through headless Chromium
(Debian's ``chromium``, driven by Playwright), the way ``tests/cli/ui/test_ui_browser.py`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
WORLD = str(Path(sys.executable).parent / "world")
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 200 if self.path == "/ok" else 503
        self.send_response(status)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def world(*args: object) -> None:
    subprocess.run([WORLD, *map(str, args)], check=True, capture_output=True)


@contextmanager
def inspector(path: Path, *extra: str) -> Iterator[str]:
    child = subprocess.Popen(
        [WORLD, "ui", str(path), *extra], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert child.stdout is not None
    found = re.search(r"http://\S+", child.stdout.readline())
    assert found is not None
    try:
        yield found.group(0)
    finally:
        os.killpg(child.pid, signal.SIGINT)
        child.communicate(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    orders = scratch / "orders"
    world("init", orders, "--example", "order")
    for order, path in (("o1", "ok"), ("o2", "down")):
        placed = {"order_id": order, "url": f"http://127.0.0.1:{port}/{path}"}
        world("send", orders, "demo/OrderPlaced@1", json.dumps(placed))
    world("run", orders, "--until-idle")
    server.shutdown()
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_context(viewport={"width": 1280, "height": 860}).new_page()
        with inspector(orders) as url:
            base = url.split("/?")[0]
            shots = {
                "world": url,
                "journal": f"{base}/journal",
                "cell": f"{base}/cell?reducer=demo%2FOrder%401&key=o1",
                "why": f"{base}/why?reducer=demo%2FOrder%401&key=o1",
                "plan": f"{base}/plan?name=demo%2Ffetch_flow%401&run=1",
                "runs": f"{base}/runs",
            }
            for name, address in shots.items():
                page.goto(address)
                if name == "cell":  # the newest step: the state then, and what it changed
                    with page.expect_navigation():
                        page.locator("#timeline tr[data-seq] a.at").first.click()
                page.screenshot(path=out / f"{name}.png", full_page=name != "journal")
                print(out / f"{name}.png")
        page.goto("about:blank")
        approvals = scratch / "approvals"
        world("examples", "copy", "counter", scratch / "air")
        _park_timers(scratch / "air")
        world("init", approvals, "--air", scratch / "air")
        reminder = {"key": "tea", "amount": 3, "at_ns": 5}
        world("send", approvals, "hello/Reminder@1", json.dumps(reminder))
        world("run", approvals, "--sim")
        with inspector(approvals, "--allow-approvals") as url:
            page.goto(url.split("/?")[0] + "/effects")
            page.goto(url)
            page.goto(url.split("/?")[0] + "/effects")
            page.screenshot(path=out / "effects.png")
            print(out / "effects.png")
        browser.close()
    shutil.rmtree(scratch)


def _park_timers(air: Path) -> None:
    """The tutorial's reminder plan, its timers parked for a person's approval."""
    docs = json.loads((air / "counter.air.json").read_text())
    module, manifest = docs
    manifest["triggers"] = [{"event": "hello/Reminder@1", "plan": "hello/remind@1"}]
    manifest["defaults"] = {
        "policy": "hello/policy@1",
        "cap_grants": [{"name": "timer", "cap": "sys/timer@1", "params": {}}],
    }
    (air / "counter.air.json").write_text(json.dumps([module, manifest]))
    record = {"key": {"ref": "@plan.input.key"}}
    plan = {
        "$kind": "defplan",
        "name": "hello/remind@1",
        "input": "hello/Reminder@1",
        "steps": [
            {
                "id": "wait",
                "op": "emit_effect",
                "kind": "timer.set",
                "cap": "timer",
                "params": {"record": {"deliver_at_ns": {"ref": "@plan.input.at_ns"}, **record}},
                "bind": {"effect_id_as": "timer"},
            },
            {
                "id": "fired",
                "op": "await_receipt",
                "for": {"ref": "@var:timer"},
                "bind": {"as": "t"},
            },
        ],
        "edges": [{"from": "wait", "to": "fired"}],
        "required_caps": ["timer"],
        "allowed_effects": ["timer.set"],
    }
    reminder = {"record": {"key": "text", "amount": "nat", "at_ns": "nat"}}
    policy = {
        "$kind": "defpolicy",
        "name": "hello/policy@1",
        "rules": [{"when": {"effect_kind": "timer.set"}, "decision": "require_approval"}],
    }
    schema = {"$kind": "defschema", "name": "hello/Reminder@1", "type": reminder}
    (air / "plans.air.json").write_text(json.dumps([schema, plan, policy]))


if __name__ == "__main__":
    main()
