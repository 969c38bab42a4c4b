"""The ladder's shared kit (``world.ladder._kit``): ``expect``, ``resolve`` into ``local.json``,
the loopback ``FakeHttp``, and ``drive``/``rung`` over ``RUNGS``."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import httpx
import pytest

from world._localconfig import read_local_config
from world.ladder import RUNGS, RungFailed, drive, rung
from world.ladder._kit import FakeHttp, Seen, expect, resolve, self_signed
from world.sdk import example_names


def test_expect_names_what_differs() -> None:
    expect("same", {"a": 1}, {"a": 1})
    with pytest.raises(RungFailed, match=r"the state: got 'Failed', wanted 'Done'"):
        expect("the state", "Failed", "Done")


def test_resolve_merges_into_local_json_and_the_settings_read_it(tmp_path: Path) -> None:
    (tmp_path / "local.json").write_text(json.dumps({"http": {"retries_max": 1}}))
    resolve(tmp_path, {"example.com": "127.0.0.1:1234"})
    resolve(tmp_path, {"api.example.com": "127.0.0.1:99"})
    http = read_local_config(tmp_path).http
    assert http.retries_max == 1
    assert http.resolve == {"example.com": "127.0.0.1:1234", "api.example.com": "127.0.0.1:99"}


def test_the_fake_answers_with_its_function_and_records_every_request() -> None:
    def answer(seen: Seen) -> tuple[int, dict[str, str], bytes]:
        return 201, {"X-Echo": seen.method}, seen.body[::-1]

    with FakeHttp(answer) as fake:
        got = httpx.post(f"http://{fake.address}/p?q=1", content=b"abc", headers={"X-A": "b"})
    assert (got.status_code, got.headers["x-echo"], got.content) == (201, "POST", b"cba")
    [seen] = fake.seen
    assert (seen.method, seen.path, seen.body, seen.headers["x-a"]) == (
        "POST",
        "/p?q=1",
        b"abc",
        "b",
    )


def test_every_rung_names_a_bundled_example_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    for name in RUNGS:
        assert rung(name).example in example_names()
        assert rung(name).title
    assert list(RUNGS) == sorted(RUNGS)
    with pytest.raises(KeyError, match="no rung 'rung99'"):
        drive("rung99", tmp_path)


def test_a_tls_fake_is_trusted_through_its_pem_and_refused_without(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"

    def answer(seen: Seen) -> tuple[int, dict[str, str], bytes]:
        return 200, {}, seen.headers["host"].encode()

    with FakeHttp(answer, tls=self_signed(("example.com",), pem)) as fake:
        trusting = ssl.create_default_context(cafile=str(pem))
        port = fake.address.rpartition(":")[2]
        mapped = httpx.HTTPTransport(verify=trusting)
        got = httpx.Client(transport=mapped).get(
            f"https://127.0.0.1:{port}/",
            headers={"Host": "example.com"},
            extensions={"sni_hostname": "example.com"},
        )
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.Client().get(
                f"https://127.0.0.1:{port}/", extensions={"sni_hostname": "example.com"}
            )
    assert (got.status_code, got.content) == (200, b"example.com")
    assert not pem.with_name("ca.pem.key").exists()
