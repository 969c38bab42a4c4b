"""A world's local settings (``<world>/local.json``, ``world._localconfig``): the HTTP
adapter's retries, backoff and timeouts on this machine, shown by ``world info``; a file that
is not a settings file is refused naming the field, and the world does not run on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from httpkit import Answer, Loopback, loopback_fixture
from plans_kit import ORDER, ORDER_AIR, ORDER_PLACED
from typer.testing import CliRunner

from air.errors import InvalidArgument
from cli.main import app
from world import Engine, World
from world._localconfig import read_local_config
from world.effects import http_settings

runner = CliRunner()


server = loopback_fixture({f"/flaky-{n}": Answer(200, drop_first=1) for n in ("a", "b")})


def _order(path: Path, url: str, settings: dict[str, object] | None) -> object:
    with World.create(path, ORDER_AIR) as world:
        if settings is not None:
            (path / "local.json").write_text(json.dumps(settings))
        world.send(ORDER_PLACED, {"order_id": "o-1", "url": url})
        with Engine(world) as loop:
            loop.run()
        return world.state(ORDER, "o-1")["status"]


def test_the_http_retries_come_from_local_json(tmp_path: Path, server: Loopback) -> None:
    """The first connection is dropped: the default retries get through, none does not."""
    fetched = _order(tmp_path / "a", server.url("/flaky-a"), {"http": {"backoff_base_s": 0.01}})
    assert fetched == {"$tag": "Fetched", "$value": 200}
    failed = _order(tmp_path / "b", server.url("/flaky-b"), {"http": {"retries_max": 0}})
    assert failed != fetched


def test_no_file_is_every_default_and_info_shows_them(tmp_path: Path) -> None:
    with World.create(tmp_path / "w", ORDER_AIR):
        pass
    assert read_local_config(tmp_path / "w").http.given() == {}
    shown = json.loads(runner.invoke(app, ["info", str(tmp_path / "w"), "--json"]).stdout)
    assert shown["http"] == http_settings(tmp_path / "w")
    assert shown["http"]["retries_max"] == 3
    assert shown["llm"] == {}
    (tmp_path / "w" / "local.json").write_text('{"http": {"retries_max": 7}}')
    text = runner.invoke(app, ["info", str(tmp_path / "w")]).output
    assert "retries_max 7" in text
    assert "llm (local.json)" not in text
    llm = {"llm": {"providers": {"openai": {"base_url": "https://api.openai.com/v1/"}}}}
    (tmp_path / "w" / "local.json").write_text(json.dumps(llm))
    shown = json.loads(runner.invoke(app, ["info", str(tmp_path / "w"), "--json"]).stdout)
    assert shown["llm"] == {"providers": {"openai": "https://api.openai.com/v1"}}
    text = runner.invoke(app, ["info", str(tmp_path / "w")]).output
    assert "openai https://api.openai.com/v1" in text


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ('{"http": {"retries_max": -1}}', "/http/retries_max"),
        ('{"http": {"retry": 3}}', "/http/retry"),
        ('{"secrets": {"b": {"env": "X", "file": "/y"}}}', "/secrets/b"),
        ('{"secrets": {"b": {"file": "relative"}}}', "/secrets/b"),
        ("[1]", "/"),
        ("{", "(the file)"),
    ],
)
def test_a_file_that_is_not_settings_is_refused_naming_where(
    tmp_path: Path, doc: str, where: str
) -> None:
    (tmp_path / "local.json").write_text(doc)
    with pytest.raises(InvalidArgument) as refused:
        read_local_config(tmp_path)
    assert str(tmp_path / "local.json") in str(refused.value)
    assert where in str(refused.value)


seen_by_name = loopback_fixture({"/named": Answer(200, b"by name")})


def test_resolve_reaches_a_host_name_at_the_mapped_address_keeping_the_name(
    tmp_path: Path, seen_by_name: Loopback
) -> None:
    """``http.resolve`` (curl's ``--resolve``): the URL names ``localhost`` on port 80, the
    request goes to the loopback's port, and the server sees the name in ``Host``."""
    address = f"127.0.0.1:{seen_by_name.port}"
    fetched = _order(
        tmp_path / "a", "http://localhost/named", {"http": {"resolve": {"localhost": address}}}
    )
    assert fetched == {"$tag": "Fetched", "$value": 200}
    [request] = seen_by_name.seen
    assert (request.path, request.headers["host"]) == ("/named", "localhost")


def test_resolve_does_not_widen_the_capability(tmp_path: Path, seen_by_name: Loopback) -> None:
    """The cap check reads the URL's name, not the mapped address: a host the grant does not
    name is refused even when it resolves to one it does."""
    address = f"127.0.0.1:{seen_by_name.port}"
    settings = {"http": {"resolve": {"shop.example": address}}}
    failed = _order(tmp_path / "a", "http://shop.example/named", settings)
    assert failed != {"$tag": "Fetched", "$value": 200}
    assert seen_by_name.seen == []


def test_an_https_host_resolved_elsewhere_keeps_its_name_for_tls() -> None:
    from kernel.cells import MemoryCas
    from world.effects._http import HttpAdapter, _Request, _Scrub

    adapter = HttpAdapter(MemoryCas(), resolve={"api.example.com": "[::1]:8443"})
    try:
        request = _Request("GET", "https://api.example.com/v1?x=1", {}, None, 0, _Scrub([]))
        sent = adapter._outgoing(request)
    finally:
        adapter.close()
    assert (sent.url.host, sent.url.port, sent.url.raw_path) == ("::1", 8443, b"/v1?x=1")
    assert sent.headers["host"] == "api.example.com"
    assert sent.extensions["sni_hostname"] == "api.example.com"


@pytest.mark.parametrize(
    "resolve",
    [
        {"Shop.Example": "127.0.0.1:80"},
        {"shop.example": "127.0.0.1"},
        {"shop.example": "127.0.0.1:0"},
        {"shop.example": "127.0.0.1:70000"},
        {"shop.example": "a b:80"},
        {"shop.example": ":80"},
    ],
)
def test_a_resolve_entry_that_is_not_a_name_and_host_port_is_refused(
    tmp_path: Path, resolve: dict[str, str]
) -> None:
    (tmp_path / "local.json").write_text(json.dumps({"http": {"resolve": resolve}}))
    with pytest.raises(InvalidArgument) as refused:
        read_local_config(tmp_path)
    assert "/http/resolve" in str(refused.value)


@pytest.mark.parametrize("ca_file", ["ca.pem", "/nonexistent/ca.pem", "/", ""])
def test_a_ca_file_that_is_not_an_absolute_file_is_refused(tmp_path: Path, ca_file: str) -> None:
    (tmp_path / "local.json").write_text(json.dumps({"http": {"ca_file": ca_file}}))
    with pytest.raises(InvalidArgument) as refused:
        read_local_config(tmp_path)
    assert "/http/ca_file" in str(refused.value)


def test_a_ca_file_is_trusted_beside_the_usual_authorities(tmp_path: Path) -> None:
    """An https URL whose server's certificate only ``ca_file`` vouches for: refused without
    the file (a TLS failure, not retried into success), answered with it."""
    from kernel.cells import MemoryCas
    from world.effects._http import HttpAdapter, _Request, _Scrub
    from world.ladder._kit import FakeHttp, Seen, self_signed

    pem = tmp_path / "ca.pem"

    def answer(seen: Seen) -> tuple[int, dict[str, str], bytes]:
        return 200, {}, seen.headers["host"].encode()

    def fetch(**settings: object) -> object:
        adapter = HttpAdapter(MemoryCas(), resolve={"secure.example": fake.address}, **settings)
        try:
            request = _Request("GET", "https://secure.example/x", {}, None, 1024, _Scrub([]))
            return adapter._attempt(request)
        finally:
            adapter.close()

    with FakeHttp(answer, tls=self_signed(("secure.example",), pem)) as fake:
        trusted = fetch(ca_file=str(pem))
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
            fetch()
    assert trusted["status"] == 200
    assert trusted["body_preview"] == "secure.example"


def test_llm_providers_are_read_with_their_base_urls(tmp_path: Path) -> None:
    settings = {"llm": {"providers": {"openai": {"base_url": "https://api.openai.com/v1/"}},
                        "read_timeout_s": 200}}  # fmt: skip
    (tmp_path / "local.json").write_text(json.dumps(settings))
    llm = read_local_config(tmp_path).llm
    assert llm.providers["openai"].base_url == "https://api.openai.com/v1"
    assert (llm.read_timeout_s, llm.attempt_deadline_s) == (200, None)


@pytest.mark.parametrize(
    ("llm", "where"),
    [
        ({"providers": {"p": {"base_url": "ftp://x/v1"}}}, "/llm/providers/p/base_url"),
        ({"providers": {"p": {"base_url": "https://x/v1?key=1"}}}, "/llm/providers/p/base_url"),
        ({"providers": {"p": {"base_url": "https://x/v1", "key": "k"}}}, "/llm/providers/p/key"),
        ({"providers": {"p": {}}}, "/llm/providers/p/base_url"),
        ({"read_timeout_s": 0}, "/llm/read_timeout_s"),
        ({"model": "m"}, "/llm/model"),
    ],
)
def test_llm_settings_that_are_not_what_they_should_be_are_refused(
    tmp_path: Path, llm: dict[str, Any], where: str
) -> None:
    (tmp_path / "local.json").write_text(json.dumps({"llm": llm}))
    with pytest.raises(InvalidArgument) as refused:
        read_local_config(tmp_path)
    assert where in str(refused.value)
