"""A world's local settings (``<world>/local.json``, ``world._localconfig``): the HTTP
adapter's retries, backoff and timeouts on this machine, shown by ``world info``; a file that
is not a settings file is refused naming the field, and the world does not run on it."""

from __future__ import annotations

import json
from pathlib import Path

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
    (tmp_path / "w" / "local.json").write_text('{"http": {"retries_max": 7}}')
    text = runner.invoke(app, ["info", str(tmp_path / "w")]).output
    assert "retries_max 7" in text


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
