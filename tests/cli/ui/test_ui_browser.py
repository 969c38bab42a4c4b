"""The inspector in headless Chromium (Debian's ``chromium``, driven by Playwright): a user's
walk through the bundled order world after a run against a loopback server, from the world
page to a cell's timeline, the step that changed it and the why-chain back to the HTTP
receipt; the plan page showing a 5xx run's path differ from a 2xx run's; and a parked intent
approved from the page, after which the run finishes.

Chromium is a system package: ``.ci/run`` installs it and sets ``WORLD_REQUIRE_BROWSER=1`` so
that a missing one fails there; elsewhere the tests skip without it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from httpkit import Answer, Loopback
from plans_kit import ORDER, ORDER_PLACED
from typer.testing import CliRunner
from uikit import Inspector

from cli.main import app

runner = CliRunner()
WORLD = str(Path(sys.executable).parent / "world")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""As Chromium runs in a sandbox with no network: without the background-networking flags it
tries Google's hosts at every start."""
GUARD_MS = 120_000
"""How long an action may wait for the page: a guard against a hang only (a loaded machine
makes the walk slower, not failed); nothing here waits for time to pass."""

if CHROMIUM is None:
    if os.environ.get("WORLD_REQUIRE_BROWSER") == "1":
        raise RuntimeError("chromium is not installed (apt-get install chromium)")
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")


def _cli(*args: object) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def _follow(page: Any, link: Any) -> None:
    """Click ``link`` and wait for the page it loads. A click returns once it is sent; a read
    right after it can find the old page (the same ids are on both), so every navigating click
    here goes through this."""
    with page.expect_navigation():
        link.click()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def orders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The order world after two orders: ``o1`` fetched (200), ``o2`` failed (503)."""
    path = tmp_path_factory.mktemp("orders") / "w"
    with Loopback({"/o1": Answer(status=200), "/o2": Answer(status=503)}) as server:
        _cli("init", path, "--example", "order")
        for order in ("o1", "o2"):
            _cli(
                "send",
                path,
                ORDER_PLACED,
                json.dumps({"order_id": order, "url": server.url(f"/{order}")}),
            )
        _cli("run", path, "--until-idle")
    return path


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(GUARD_MS)
    opened = context.new_page()
    yield opened
    context.close()


def test_from_the_world_page_to_the_step_and_back_to_the_http_receipt(
    orders: Path, page: Any, tmp_path: Path
) -> None:
    inspector = Inspector(WORLD, orders)
    try:
        page.goto(inspector.url)
        assert page.locator("h1").inner_text() == "World"
        page.screenshot(path=tmp_path / "world.png")
        _follow(page, page.locator(f"#reducers a:text('{ORDER}')"))  # the reducer's cells
        _follow(page, page.locator("#cells a:text('\"o1\"')"))  # the cell
        assert '"Fetched"' in page.locator("#state").inner_text()
        page.screenshot(path=tmp_path / "cell.png")
        # Its timeline, newest first: the step that made it Fetched, and what it consumed.
        newest = page.locator("#timeline tr[data-seq]").first
        step_seq = int(newest.get_attribute("data-seq"))
        _follow(page, newest.locator("a.at"))  # the state then, and what that step changed
        assert page.locator("#diff").inner_text().count("Fetched") >= 1
        page.screenshot(path=tmp_path / "diff.png")
        _follow(page, page.locator(f"#timeline tr[data-seq='{step_seq}'] a.why"))
        chain = page.locator("#chain > li.cause")
        kinds = [chain.nth(i).get_attribute("data-kind") for i in range(chain.count())]
        assert kinds == ["step", "plan.step", "plan.started", "step", "event.in"]
        assert int(chain.first.get_attribute("data-seq")) == step_seq
        receipt = page.locator("#chain li.cause[data-kind='receipt']").first
        assert "http answered intent" in receipt.inner_text()
        page.screenshot(path=tmp_path / "why.png")
        _follow(page, receipt.locator("a").first)  # the receipt record itself
        body = json.loads(page.locator("#body").inner_text())
        assert body["adapter_id"] == "http"
        assert body["payload"]["status"] == 200
    finally:
        inspector.close()


def test_the_plan_page_shows_a_5xx_run_take_another_path_than_a_2xx_run(
    orders: Path, page: Any
) -> None:
    inspector = Inspector(WORLD, orders)
    try:
        page.goto(inspector.url)
        page.goto(inspector.base + "/runs")
        statuses = page.locator("#runs tr[data-run]")
        assert statuses.count() == 2
        taken: dict[str, set[str]] = {}
        for run in ("0", "1"):
            page.goto(inspector.base + "/runs")
            _follow(page, page.locator(f"#runs tr[data-run='{run}'] a"))
            nodes = page.locator("#dag g.node.taken")
            taken[run] = {nodes.nth(i).get_attribute("data-step") for i in range(nodes.count())}
        assert taken["0"] != taken["1"]
        assert {"fetch", "response"} <= taken["0"] & taken["1"]  # the common start
    finally:
        inspector.close()


def test_approving_a_parked_intent_from_the_page_lets_the_run_finish(
    tmp_path: Path, page: Any
) -> None:
    from test_ui import _approval_air

    path = tmp_path / "w"
    _cli("init", path, "--air", _approval_air(tmp_path / "air"))
    _cli("send", path, "hello/Reminder@1", json.dumps({"key": "tea", "amount": 3, "at_ns": 5}))
    _cli("run", path, "--sim")
    read_only = Inspector(WORLD, path)
    try:
        page.goto(read_only.url)
        page.goto(read_only.base + "/effects")
        assert page.locator("#intents tr[data-status='parked']").count() == 1
        assert page.locator("#intents button").count() == 0  # no --allow-approvals
    finally:
        read_only.close()
    inspector = Inspector(WORLD, path, "--allow-approvals")
    try:
        page.goto(inspector.url)
        page.goto(inspector.base + "/effects")
        _follow(page, page.locator("#intents tr[data-status='parked'] button[value='approve']"))
        assert page.locator("#intents tr[data-status='parked']").count() == 0
        _cli("run", path, "--sim")
        page.goto(inspector.base + "/runs")
        assert page.locator("#runs").inner_text().count("ok") == 1
        page.goto(inspector.base + "/cell?reducer=demo%2FCounter%401&key=tea")
        assert json.loads(page.locator("#state").inner_text()) == {"count": 3, "events": 1}
    finally:
        inspector.close()


def test_the_journal_page_shows_new_records_while_the_world_runs(orders: Path, page: Any) -> None:
    copy = orders.parent / "live"
    if not copy.exists():
        shutil.copytree(orders, copy)
    inspector = Inspector(WORLD, copy)
    try:
        page.goto(inspector.url)
        page.goto(inspector.base + "/journal")
        last = int(page.locator("#records tr[data-seq]").last.get_attribute("data-seq"))
        hostile = 'http://127.0.0.1:9/"><img src=x onerror=document.title=1></pre><script>'
        placed = {"order_id": "o9", "url": hostile}  # the row is built in the page's script
        _cli("send", copy, ORDER_PLACED, json.dumps(placed))
        new = page.locator(f"#records tr[data-seq='{last + 1}']")
        new.wait_for()  # the page polls once a second; no reload
        assert "event.in" in new.inner_text()
        assert json.loads(new.locator("pre").inner_text())["value"]["url"] == hostile  # as text
        assert page.locator("#records img, #records script").count() == 0
    finally:
        inspector.close()
