"""``world ui``, the inspector, in process (Starlette's test client) and as the installed
command: the token gate, loopback only, approvals only with ``--allow-approvals`` and then the
same journaled path as the CLI, every page beside its JSON, and what the pages say.
(The same app in headless Chromium: ``tests/cli/ui/test_ui_browser.py``.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient
from test_why import reminder_air
from typer.testing import CliRunner
from uikit import Inspector

from cli.main import app as cli_app
from cli.ui import _views as views
from cli.ui._app import COOKIE, make_app
from cli.ui._views import field_diff
from world import World

from worldkit import COUNTER, COUNTER_AIR

runner = CliRunner()
WORLD = str(Path(sys.executable).parent / "world")
TOKEN = "t0ken-for-tests"


def _cli(*args: object) -> str:
    result = runner.invoke(cli_app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def _approval_air(folder: Path) -> Path:
    """The counter world with the tutorial's reminder plan, its timers parked for approval."""
    return reminder_air(folder, "require_approval")


@pytest.fixture(scope="module")
def parked_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A world whose reminder run waits on a parked timer intent (built once; tests that
    change it take a copy: ``parked``)."""
    folder = tmp_path_factory.mktemp("parked")
    path = folder / "w"
    _cli("init", path, "--air", _approval_air(folder / "air"))
    reminder = {"key": "apples", "amount": 5, "at_ns": 1_000_000_000}
    _cli("send", path, "hello/Reminder@1", json.dumps(reminder))
    _cli("run", path, "--sim")
    return path


@pytest.fixture
def parked(parked_base: Path, tmp_path: Path) -> Path:
    shutil.copytree(parked_base, tmp_path / "w")
    return tmp_path / "w"


def _client(path: Path, *, approvals: bool = False) -> TestClient:
    return TestClient(make_app(path, TOKEN, allow_approvals=approvals), base_url="http://127.0.0.1")


def _parked_intent(path: Path) -> str:
    rows = json.loads(_cli("effects", "ls", path, "--json"))["intents"]
    [row] = [r for r in rows if r["status"] == "parked"]
    return str(row["intent_hash"])


# --- the token ---------------------------------------------------------------------------------

SNEAKS = {
    "no token": ({}, {}),
    "a wrong token": ({"token": "guess"}, {}),
    "a token one character short": ({"token": TOKEN[:-1]}, {}),
    "an empty token": ({"token": ""}, {}),
    "a wrong cookie": ({}, {COOKIE: "guess"}),
    "the token under another cookie name": ({}, {"token": TOKEN}),
    "the token in another parameter": ({"t": TOKEN}, {}),
}
"""The ways to reach a page without the token; each is 403."""


@pytest.mark.parametrize("how", sorted(SNEAKS))
@pytest.mark.parametrize("page", ["/", "/journal", "/api/world", "/effects", "/record?seq=0"])
def test_every_way_without_the_token_is_403(parked_base: Path, how: str, page: str) -> None:
    params, cookies = SNEAKS[how]
    client = _client(parked_base)
    client.cookies.update(cookies)
    answer = client.get(page, params=params)
    assert answer.status_code == 403
    assert "token" in answer.text
    assert TOKEN not in answer.text


def test_the_token_in_the_url_sets_a_cookie_that_opens_the_other_pages(
    parked_base: Path,
) -> None:
    client = _client(parked_base)
    first = client.get("/", params={"token": TOKEN})
    assert first.status_code == 200
    cookie = first.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={TOKEN}")
    assert "httponly" in cookie.lower()
    assert "samesite=strict" in cookie.lower()
    assert client.get("/journal").status_code == 200  # the cookie, no token in the URL


# --- approvals ---------------------------------------------------------------------------------


def _records(path: Path) -> int:
    with World.open(path, readonly=True) as world:
        return world.journal.seq_next


def test_without_allow_approvals_no_page_can_approve(parked: Path) -> None:
    intent = _parked_intent(parked)
    client = _client(parked)
    client.cookies.set(COOKIE, TOKEN)
    page = client.get("/effects")
    assert page.status_code == 200
    assert intent in page.text
    assert "<button" not in page.text
    assert "--allow-approvals" in page.text
    before = _records(parked)
    for decision in ("approve", "deny"):
        form = {"token": TOKEN, "intent": intent, "decision": decision}
        answer = client.post("/effects/decide", data=form)
        assert answer.status_code == 403
    assert client.get("/effects/decide").status_code == 405
    assert _records(parked) == before


def test_with_allow_approvals_the_form_needs_the_token_too(parked: Path) -> None:
    intent = _parked_intent(parked)
    client = _client(parked, approvals=True)
    client.cookies.set(COOKIE, TOKEN)
    before = _records(parked)
    for form in ({"intent": intent, "decision": "approve"}, {"token": "guess", "intent": intent}):
        assert client.post("/effects/decide", data=form).status_code == 403
    assert _records(parked) == before
    bad = client.post(
        "/effects/decide", data={"token": TOKEN, "intent": "blake3:00", "decision": "approve"}
    )
    assert bad.status_code == 400
    assert _records(parked) == before


def test_approving_from_the_page_journals_it_and_the_run_finishes(parked: Path) -> None:
    intent = _parked_intent(parked)
    client = _client(parked, approvals=True)
    client.cookies.set(COOKIE, TOKEN)
    assert 'value="approve"' in client.get("/effects").text
    answer = client.post(
        "/effects/decide",
        data={"token": TOKEN, "intent": intent, "decision": "approve"},
        follow_redirects=False,
    )
    assert answer.status_code == 303
    with World.open(parked, readonly=True) as world:
        last = next(iter(world.journal.read(world.journal.seq_next - 1)))
    assert last.kind == "effect.approval"
    assert last.body["approved"] is True
    _cli("run", parked, "--sim")
    runs = client.get("/api/runs").json()["runs"]
    assert [r["status"] for r in runs] == ["ok"]
    state = client.get("/api/cell", params={"reducer": COUNTER, "key": "apples"}).json()
    assert state["state"] == {"count": 5, "events": 1}


# --- pages and their JSON ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_world(parked_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The parked world, approved and run to its end (built once; read only)."""
    path = tmp_path_factory.mktemp("finished") / "w"
    shutil.copytree(parked_base, path)
    _cli("effects", "approve", path, _parked_intent(path))
    _cli("run", path, "--sim")
    return path


@pytest.fixture
def finished(finished_world: Path) -> TestClient:
    client = _client(finished_world)
    client.cookies.set(COOKIE, TOKEN)
    return client


PAGES = {
    "world": {},
    "journal": {"from": "0"},
    "record": {"seq": "1"},
    "cells": {"reducer": COUNTER},
    "cell": {"reducer": COUNTER, "key": "apples"},
    "why": {"reducer": COUNTER, "key": "apples"},
    "runs": {},
    "plan": {"name": "hello/remind@1", "run": "0"},
    "effects": {},
    "upgrades": {},
}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_page_has_a_stable_url_and_json_with_the_same_data(
    finished: TestClient, finished_world: Path, page: str
) -> None:
    html = finished.get(f"/{page}", params=PAGES[page])
    assert html.status_code == 200, html.text
    assert html.headers["content-type"].startswith("text/html")
    assert 'id="error"' not in html.text
    data = finished.get(f"/api/{page}", params=PAGES[page])
    assert data.status_code == 200
    answer = data.json()
    assert answer.pop("ok") is True
    assert answer == json.loads(json.dumps(VIEWS[page](finished_world)))  # the view it renders


VIEWS: dict[str, Any] = {
    "world": lambda d: views.world_view(d),
    "journal": lambda d: views.journal_view(d, start=0),
    "record": lambda d: views.record_view(d, 1),
    "cells": lambda d: views.cells_view(d, COUNTER),
    "cell": lambda d: views.cell_view(d, COUNTER, "apples"),
    "why": lambda d: views.why_view(d, COUNTER, "apples"),
    "runs": lambda d: views.runs_view(d),
    "plan": lambda d: views.plan_view(d, "hello/remind@1", "0"),
    "effects": lambda d: views.effects_view(d),
    "upgrades": lambda d: views.upgrades_view(d),
}


def test_the_upgrades_page_shows_a_proposal_its_diff_and_its_shadow_runs(tmp_path: Path) -> None:
    from world.gov import propose, shadow

    from worldkit import EVENT, ROOT, add

    path = tmp_path / "w"
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add("a", 3))])
        world.run_until_idle()
        made, _diff = propose(world, ROOT / "tests" / "fixtures" / "counter_v2_air")
        shadow(world, made.id)
    client = _client(path)
    client.cookies.set(COOKIE, TOKEN)
    listing = client.get("/api/upgrades").json()
    [row] = listing["proposals"]
    assert (row["id"], row["shadows"], row["applied"]) == (made.id, 1, None)
    chosen = client.get("/api/upgrades", params={"id": str(made.id)}).json()["chosen"]
    assert chosen["diff"]["added"]["module"] == ["demo/Counter@2"]
    [run] = chosen["shadow_runs"]
    assert run["report"].startswith("blake3:")
    page = client.get("/upgrades", params={"id": str(made.id)}).text
    assert "demo/Counter@2" in page
    assert run["report"] in page
    missing = client.get("/upgrades", params={"id": "999"})
    assert missing.status_code in (400, 404)
    assert 'id="error"' in missing.text


def test_the_journal_filters_by_a_cell_key(finished: TestClient) -> None:
    found = finished.get("/api/journal", params={"from": "0", "key": "apples"}).json()
    assert found["records"]
    assert {r["body"]["key"] for r in found["records"]} == {"apples"}
    assert {r["kind"] for r in found["records"]} >= {"step", "plan.step"}


def test_the_pages_show_what_they_are_about(finished: TestClient) -> None:
    world = finished.get("/").text
    assert "hello/remind@1" in world
    assert COUNTER in world
    why = finished.get("/why", params=PAGES["why"]).text
    assert "raised it" in why
    assert "timer.sim answered intent" in why
    assert "sent from outside" in why
    cell = finished.get("/cell", params=PAGES["cell"]).text
    assert "What step" not in cell  # a diff re-executes: only for a step asked for
    assert "/why?reducer=" in cell


BAD = {
    "cell of an unknown reducer": ("/cell", {"reducer": "demo/Nope@1", "key": "a"}, 404),
    "cell without a key": ("/cell", {"reducer": COUNTER}, 400),
    "record past the end": ("/record", {"seq": "99999"}, 400),
    "record that is not a number": ("/record", {"seq": "-1"}, 400),
    "plan that does not exist": ("/plan", {"name": "hello/none@1"}, 404),
    "run that does not exist": ("/plan", {"name": "hello/remind@1", "run": "7"}, 404),
    "why at a seq past the end": ("/why", {"reducer": COUNTER, "key": "a", "at": "99999"}, 400),
    "key not of the key schema": ("/cell", {"reducer": COUNTER, "key": "[1,2]"}, 400),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_gets_a_page_naming_it_and_json_with_its_code(
    finished: TestClient, case: str
) -> None:
    path, params, status = BAD[case]
    html = finished.get(path, params=params)
    assert html.status_code == status
    assert 'id="error"' in html.text
    answer = finished.get("/api" + path, params=params)
    assert answer.status_code == status
    body = answer.json()
    assert body["ok"] is False
    assert body["code"]
    assert body["detail"]


def test_the_plan_page_marks_the_path_the_run_took(finished: TestClient) -> None:
    data = finished.get("/api/plan", params=PAGES["plan"]).json()
    taken = {n["id"] for n in data["dag"]["nodes"] if n["taken"]}
    assert taken == {"wait", "fired", "add"}
    assert all(e["taken"] for e in data["dag"]["edges"])
    html = finished.get("/plan", params=PAGES["plan"]).text
    assert html.count('class="node taken"') == 3
    untaken = finished.get("/plan", params={"name": "hello/remind@1"}).text
    assert 'class="node taken"' not in untaken
    # each step of the path with what it journaled: the raised event, the intent it bound
    path = {step["step"]: step for step in data["run"]["path"]}
    assert path["add"]["record"]["event"]["schema"] == "demo/CounterEvent@1"
    assert path["add"]["record"]["event"]["value"] == {
        "key": "apples",
        "op": {"$tag": "Add", "$value": 5},
    }
    assert path["wait"]["record"]["intent_hash"] == path["wait"]["intent_hash"]


def test_the_cell_page_diffs_a_chosen_step_field_by_field(finished: TestClient) -> None:
    data = finished.get("/api/cell", params=PAGES["cell"]).json()
    assert data["diff"] is None
    [step] = data["steps"]
    assert step["kind"] == "step"
    chosen = finished.get("/api/cell", params={**PAGES["cell"], "at": str(step["seq"])}).json()
    # Its first step made the cell: before it, nothing.
    assert chosen["diff"] == {
        "seq": step["seq"],
        "changes": [{"path": "/", "after": {"count": 5, "events": 1}}],
    }
    assert chosen["state"] == data["state"] == {"count": 5, "events": 1}
    assert (
        "What step" in finished.get("/cell", params={**PAGES["cell"], "at": str(step["seq"])}).text
    )
    earlier = finished.get("/api/cell", params={**PAGES["cell"], "at": str(step["seq"] - 1)})
    assert earlier.json()["state"] is None
    assert earlier.json()["steps"] == []


def test_field_diff_names_each_changed_field_by_pointer() -> None:
    before = {"a": 1, "b": {"c": [1], "d/e": "x"}, "gone": True}
    after = {"a": 2, "b": {"c": [1, 2], "d/e": "x"}, "new": None}
    assert field_diff(before, after) == [
        {"path": "/a", "before": 1, "after": 2},
        {"path": "/b/c", "before": [1], "after": [1, 2]},
        {"path": "/gone", "before": True},
        {"path": "/new", "after": None},
    ]
    assert field_diff(None, {"x": 1}) == [{"path": "/", "after": {"x": 1}}]
    assert field_diff({"x": 1}, {"x": 1}) == []


def test_the_journal_page_filters_and_pages(finished: TestClient) -> None:
    every = finished.get("/api/journal", params={"from": "0", "limit": "200"}).json()
    kinds = {r["kind"] for r in every["records"]}
    assert {"event.in", "plan.started", "effect.approval", "receipt", "step"} <= kinds
    steps = finished.get("/api/journal", params={"from": "0", "kind": "plan.step"}).json()
    assert steps["records"]
    assert {r["kind"] for r in steps["records"]} == {"plan.step"}
    run = finished.get("/api/journal", params={"from": "0", "run": "0"}).json()
    assert {r["body"]["run_id"] for r in run["records"]} == {0}
    page = finished.get("/api/journal", params={"from": "2", "limit": "3"}).json()
    assert [r["seq"] for r in page["records"]] == [2, 3, 4]
    assert page["next"] == 5
    subject = finished.get("/api/journal", params={"from": "0", "subject": "/world/run/**"}).json()
    assert all(r["subject"].startswith("/world/run/") for r in subject["records"])


# --- the command -------------------------------------------------------------------------------


def test_world_ui_listens_on_loopback_only_with_a_token_in_its_url(parked: Path) -> None:
    child = subprocess.Popen(
        [WORLD, "ui", str(parked)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        url = re.search(r"http://\S+", line)
        assert url is not None, line
        found = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=([\w-]{20,})", url.group(0))
        assert found is not None, url.group(0)
        port = int(found.group(1))
        assert httpx.get(url.group(0), timeout=30).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).status_code == 403
        for address in _other_addresses():
            with pytest.raises(OSError), socket.create_connection((address, port), timeout=2):
                pass
    finally:
        os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=30)
    assert "stopped" in out
    assert "Traceback" not in err


def _other_addresses() -> list[str]:
    """This machine's addresses that are not loopback (none on some sandboxes)."""
    found = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(str(info[4][0]))
    except OSError:
        pass
    return sorted(a for a in found if not a.startswith("127."))


def test_world_ui_json_says_where_it_listens_in_one_line_and_works_on_a_served_world(
    parked: Path,
) -> None:
    served = subprocess.run([WORLD, "serve", str(parked), "--detach"], capture_output=True)
    assert served.returncode == 0, served.stderr
    try:
        with Inspector(WORLD, parked) as inspector:
            assert inspector.url == f"{inspector.base}/?token={inspector.token}"
            with httpx.Client(timeout=30) as client:
                assert client.get(inspector.url).status_code == 200
                runs = client.get(f"{inspector.base}/api/runs").json()
                assert [r["status"] for r in runs["runs"]] == ["waiting"]
                assert client.get(f"{inspector.base}/effects").status_code == 200
            # the server still answers: the inspector took no lock from it
            sent = subprocess.run(
                [WORLD, "send", str(parked), "demo/CounterEvent@1", '{"key": "a", "op": "Clear"}'],
                capture_output=True,
                text=True,
            )
            assert sent.returncode == 0, sent.stderr
    finally:
        subprocess.run([WORLD, "serve", str(parked), "--stop"], capture_output=True)


def test_world_ui_refuses_a_folder_that_is_not_a_world(tmp_path: Path) -> None:
    done = subprocess.run(
        [WORLD, "ui", str(tmp_path / "nothing")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "nothing" in done.stderr


# --- hostile values and parameters ---------------------------------------------------------------

HOSTILE_KEYS = {
    "a quote that ends an attribute": '" autofocus onfocus=alert(1) x="',
    "a quote, content-visibility": (
        '" style=display:block;content-visibility:auto '
        'oncontentvisibilityautostatechange=document.title=1 x="'
    ),
    "a single quote": "' onmouseover='alert(1)",
    "the end of a script": "</script><script>alert(1)</script>",
    "an element": "<img src=x onerror=alert(1)>",
    "an entity": "&quot; onclick=alert(1) &#34;",
}
"""Keys anyone who can send an event chooses; every page shows them as text, never as markup."""


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attributes: set[str] = set()
        self.scripts = 0
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.scripts += tag == "script"
        self.attributes.update(name for name, _ in attrs)


PAGE_ATTRIBUTES = {
    "action", "charset", "class", "colspan", "d", "data-from", "data-intent", "data-kind",
    "data-run", "data-seq", "data-status", "data-step", "data-to", "fill", "font-weight",
    "height", "href", "id", "lang", "marker-end", "markerheight", "markerunits", "markerwidth",
    "method", "name", "orient", "placeholder", "refx", "refy", "rx", "size", "type", "value",
    "title", "viewbox", "width", "x", "x1", "x2", "y", "y1", "y2",
}  # fmt: skip


def test_hostile_keys_are_shown_as_text_on_every_page(tmp_path: Path) -> None:
    from worldkit import EVENT, add

    path = tmp_path / "w"
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add(key, 1)) for key in HOSTILE_KEYS.values()])
        world.run_until_idle()
    client = _client(path)
    client.cookies.set(COOKIE, TOKEN)
    pages = [("/journal", {"from": "0"}), ("/cells", {"reducer": COUNTER})]
    for key in HOSTILE_KEYS.values():
        wanted = {"reducer": COUNTER, "key": json.dumps(key)}
        pages += [("/cell", wanted), ("/why", wanted), ("/cell", {**wanted, "at": "3"})]
    pages += [("/record", {"seq": str(seq)}) for seq in range(1, 2 * len(HOSTILE_KEYS) + 1)]
    for address, params in pages:
        answer = client.get(address, params=params)
        assert answer.status_code == 200, (address, params, answer.text[-300:])
        found = _Elements()
        found.feed(answer.text)
        assert found.attributes <= PAGE_ATTRIBUTES, (address, found.attributes - PAGE_ATTRIBUTES)
        assert "img" not in found.tags
        assert found.scripts == (1 if address == "/journal" and "from" not in params else 0)
    # and the time-travel form carries the key whole
    form = client.get("/cell", params={"reducer": COUNTER, "key": json.dumps('"q"')}).text
    assert 'name="key" value="&#34;\\&#34;q\\&#34;&#34;"' in form


ODD_PARAMETERS = {
    "a superscript digit as a seq": ("/record", {"seq": "\u00b2"}),
    "a superscript digit as a limit": ("/journal", {"limit": "\u00b9"}),
    "a superscript digit as at": ("/cell", {"reducer": COUNTER, "key": "a", "at": "\u00b9"}),
    "a negative seq": ("/record", {"seq": "-1"}),
    "a seq with spaces": ("/record", {"seq": " 1"}),
    "an empty reducer": ("/cells", {"reducer": ""}),
    "an empty plan name": ("/plan", {"name": ""}),
    "a run that is not a number": ("/plan", {"name": "hello/remind@1", "run": "x"}),
    "a key that is not JSON and has a quote": ("/cell", {"reducer": COUNTER, "key": '"a'}),
}


@pytest.mark.parametrize("case", sorted(ODD_PARAMETERS))
def test_odd_parameters_get_a_4xx_never_a_500(parked_base: Path, case: str) -> None:
    path, params = ODD_PARAMETERS[case]
    client = _client(parked_base)
    client.cookies.set(COOKIE, TOKEN)
    for prefix in ("", "/api"):
        answer = client.get(prefix + path, params=params)
        assert 400 <= answer.status_code < 500, (case, prefix, answer.status_code, answer.text)


@pytest.mark.parametrize("token", ["\u00e9", "t0ken-for-test\u00e9", "\x00", TOKEN + "\u00e9"])
def test_a_token_of_any_text_that_is_not_the_token_is_403(parked: Path, token: str) -> None:
    client = _client(parked, approvals=True)
    assert client.get("/api/world", params={"token": token}).status_code == 403
    client.cookies.set(COOKIE, TOKEN)
    intent = _parked_intent(parked)
    form = {"token": token, "intent": intent, "decision": "approve"}
    assert client.post("/effects/decide", data=form).status_code == 403


@pytest.mark.parametrize("decision", [None, "", "yes", "APPROVE"])
def test_a_decision_that_is_neither_approve_nor_deny_decides_nothing(
    parked: Path, decision: str | None
) -> None:
    client = _client(parked, approvals=True)
    client.cookies.set(COOKIE, TOKEN)
    form = {"token": TOKEN, "intent": _parked_intent(parked)}
    if decision is not None:
        form["decision"] = decision
    before = _records(parked)
    assert client.post("/effects/decide", data=form).status_code == 400
    assert _records(parked) == before


def test_a_page_shows_at_most_page_max_records(finished: TestClient) -> None:
    asked = finished.get("/api/journal", params={"from": "0", "limit": "100000"}).json()
    every = finished.get("/api/journal", params={"from": "0", "limit": "1"}).json()["head"]
    assert len(asked["records"]) == min(views.PAGE_MAX, every)
    one = finished.get("/api/journal", params={"from": "0", "limit": "1"}).json()
    assert [r["seq"] for r in one["records"]] == [0]


def test_the_timeline_names_the_era_each_step_ran_in(tmp_path: Path) -> None:
    """Steps before the upgrade ran in the first era, steps after ``cells upgrade`` in the
    applied one; a step before the cell was upgraded stays in its era even after the apply."""
    from world.gov import apply, propose, upgrade_cells

    from worldkit import EVENT, ROOT, add

    path = tmp_path / "w"
    with World.create(path, COUNTER_AIR) as world:
        world.send_many([(EVENT, add("a", 1))])
        world.run_until_idle()
        first = world.air.manifest_hash
        made, _diff = propose(world, ROOT / "tests" / "fixtures" / "counter_v2_air")
        apply(world, made.id)
        world.send_many([(EVENT, add("a", 1))])  # still in the first era: not upgraded yet
        world.run_until_idle()
        upgrade_cells(world, "demo/Counter@2")
        world.send_many([(EVENT, add("a", 1))])
        world.run_until_idle()
        second = world.air.manifest_hash
    client = _client(path)
    client.cookies.set(COOKIE, TOKEN)
    data = client.get("/api/cell", params={"reducer": "demo/Counter@2", "key": "a"}).json()
    steps = [s for s in reversed(data["steps"]) if s["kind"] == "step"]
    assert [s["era"] for s in steps] == [first, first, second]


def test_every_page_reads_beside_a_writer_that_holds_the_world(tmp_path: Path) -> None:
    """A writer (as ``world run`` is) holds the world open, sends, runs and checkpoints while
    the pages are read: each page answers, and sees what was committed."""
    from worldkit import EVENT, add

    path = tmp_path / "w"
    with World.create(path, COUNTER_AIR) as writer:
        client = _client(path)
        client.cookies.set(COOKIE, TOKEN)
        for round_ in range(3):
            writer.send_many([(EVENT, add("a", 1)), (EVENT, add(f"k{round_}", 1))])
            writer.run_until_idle()
            writer.snapshot()  # a checkpoint moves the store the pages read
            for page, params in [
                ("/", {}),
                ("/journal", {}),
                ("/cells", {"reducer": COUNTER}),
                ("/cell", {"reducer": COUNTER, "key": "a"}),
                ("/why", {"reducer": COUNTER, "key": "a"}),
            ]:
                assert client.get(page, params=params).status_code == 200, page
            cell = client.get("/api/cell", params={"reducer": COUNTER, "key": "a"}).json()
            assert cell["state"] == {"count": round_ + 1, "events": round_ + 1}


def test_world_ui_on_a_port_in_use_says_so_in_one_line(parked_base: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [WORLD, "ui", str(parked_base), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        as_json = subprocess.run(
            [WORLD, "ui", str(parked_base), "--port", str(port), "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use "
        "(--port 0 takes any free one)"
    )
    assert as_json.returncode == 1
    answer = json.loads(as_json.stdout)
    assert answer["ok"] is False
    assert str(port) in answer["detail"]


HOSTILE_STATES = {
    "o-script": "</script><script>alert(1)</script>",
    "o-img": '"><img src=x onerror=alert(1)>',
    "o-attr": "' onmouseover='alert(1)",
    "o-entity": "&lt;b&gt; &quot; onclick=alert(1) &#34;",
    "o-svg": "<svg/onload=alert(1)>",
}
"""Cell states of text anyone who can send an event chooses (the order reducer keeps the
event's ``url`` in its state): every page that shows a state shows them as text."""


@pytest.fixture(scope="module")
def hostile_states(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An order world whose cells' states hold the texts of ``HOSTILE_STATES``; each cell
    stepped twice (the second url another hostile text), so a step has a state diff."""
    from plans_kit import ORDER_AIR, ORDER_PLACED

    path = tmp_path_factory.mktemp("states") / "w"
    values = list(HOSTILE_STATES.values())
    with World.create(path, ORDER_AIR) as world:
        for turn in range(2):
            world.send_many(
                [
                    (ORDER_PLACED, {"order_id": key, "url": values[(i + turn) % len(values)]})
                    for i, key in enumerate(HOSTILE_STATES)
                ]
            )
            world.run_until_idle()
    return path


def test_hostile_states_are_shown_as_text_on_every_page_that_shows_a_state(
    hostile_states: Path,
) -> None:
    from plans_kit import ORDER

    client = _client(hostile_states)
    client.cookies.set(COOKIE, TOKEN)
    with World.open(hostile_states, readonly=True) as world:
        head = world.journal.seq_next
        states = {c.key: c.state for c in world.cells(ORDER)}
    assert {s["url"] for s in states.values()} == set(HOSTILE_STATES.values())
    pages = [("/cells", {"reducer": ORDER}), ("/journal", {"from": "0"}), ("/journal", {})]
    for key in HOSTILE_STATES:
        wanted = {"reducer": ORDER, "key": json.dumps(key)}
        pages += [("/cell", wanted), ("/why", wanted)]
        pages += [("/cell", {**wanted, "at": str(seq)}) for seq in range(1, head)]
    pages += [("/record", {"seq": str(seq)}) for seq in range(1, head)]
    diffs = 0
    for address, params in pages:
        answer = client.get(address, params=params)
        assert answer.status_code == 200, (address, params, answer.text[-300:])
        diffs += 'id="diff"' in answer.text
        found = _Elements()
        found.feed(answer.text)
        assert found.attributes <= PAGE_ATTRIBUTES, (address, found.attributes - PAGE_ATTRIBUTES)
        assert not found.tags & {"img", "svg"}, (address, params)
        assert found.scripts == (1 if address == "/journal" and "from" not in params else 0)
    assert diffs >= len(HOSTILE_STATES)  # each second step's before and after
    listed = client.get("/cells", params={"reducer": ORDER}).text
    for text in HOSTILE_STATES.values():  # shown, as text (escaped once, not dropped)
        assert (
            json.dumps(text, ensure_ascii=False)
            .replace("&", "&amp;")
            .replace("<", "&lt;")
            .replace(">", "&gt;")
            .replace('"', "&#34;")
            .replace("'", "&#39;")
            in listed
        )
    for key in HOSTILE_STATES:  # the export: JSON, never a page a browser renders
        exported = client.get("/api/cell", params={"reducer": ORDER, "key": json.dumps(key)})
        assert exported.headers["content-type"] == "application/json"
        assert exported.json()["state"] == states[key]
