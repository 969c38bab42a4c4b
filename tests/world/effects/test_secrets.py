"""Secrets (issue 22, item 4; AgentOS's ``spec/17-secrets.md``): ``defsecret``, the on-demand
built-ins that carry references (``sys/SecretRef@1``, ``sys/TextOrSecretRef@1``,
``sys/BytesOrSecretRef@1``, ``sys/HttpRequestParams@2``, ``http.request.v2``), the per-secret
ACL in the effect manager, and resolution in the HTTP adapter only.

End to end: a plan POSTs a JSON body built from its input with an ``Authorization`` header from
a secret bound to an environment variable; a loopback server sees both; then no byte of the
world directory, an export, a fork or ``world journal tail`` holds the token. A plan outside
``allowed_plans`` is refused with a journaled reason and sends nothing; an ``expected_digest``
mismatch refuses the dispatch; an unbound secret stops ``world run`` naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from httpkit import Answer, Exchange, Loopback, Script, loopback_fixture
from plans_kit import (
    await_receipt,
    chain,
    end,
    ended,
    of_kind,
    plan,
    plan_world,
    records,
)
from typer.testing import CliRunner

from air import AirSource, cbor, load_air
from air.errors import ManifestError, UsageError
from cli.main import app
from world import Engine, World
from world._airfiles import builtin_sources
from world._engine import LoopReport
from world._localconfig import SecretBinding
from world.effects._secrets import SecretResolver, SecretUnavailable
from world.history import fork_world

runner = CliRunner()

TOKEN = "tok-5f3a9c1e-SECRET-value-77"
BEARER = f"Bearer {TOKEN}"
ENV = "WORLD_TEST_ACME_TOKEN"
ORDER = "t/Order@1"
OTHER = "t/Other@1"
ORDER_TYPE = {"record": {"id": "text", "amount": "nat"}}


server = loopback_fixture()


# --- the world -------------------------------------------------------------------------------


def secret_ref(alias: str = "acme/token", version: int = 1) -> dict[str, Any]:
    record = {"record": {"alias": {"text": alias}, "version": {"nat": version}}}
    return {"variant": {"tag": "secret", "value": record}}


def literal(expr: Any) -> dict[str, Any]:
    return {"variant": {"tag": "literal", "value": expr}}


def post_json(step_id: str, url: str, bind: str, auth: Any | None = None) -> dict[str, Any]:
    """An ``http.request.v2`` POST of the plan's input as JSON, with ``auth`` as its
    ``authorization`` header (a secret reference by default)."""
    body = {
        "op": "utf8_encode",
        "args": [{"op": "json_encode", "args": [{"ref": "@plan.input"}, ORDER]}],
    }
    headers = [
        {"key": "authorization", "value": secret_ref() if auth is None else auth},
        {"key": "content-type", "value": literal("application/json")},
    ]
    return {
        "id": step_id,
        "op": "emit_effect",
        "kind": "http.request.v2",
        "params": {
            "record": {
                "method": {"text": "POST"},
                "url": {"text": url},
                "headers": {"map": headers},
                "body": {"some": literal(body)},
                "body_ref": {"none": {}},
            }
        },
        "cap": "http",
        "bind": {"effect_id_as": bind},
    }


def posting_plan(name: str, input_schema: str, url: str) -> dict[str, Any]:
    steps = [post_json("post", url, "req"), await_receipt("wait", "req", "rcpt"), end()]
    return plan(name, input_schema, steps, chain("post", "wait", "end"))


def secret_world(
    folder: Path,
    server: Loopback,
    *,
    secret: dict[str, Any] | None = None,
    path: str = "/orders",
) -> Path:
    url = server.url(path)
    air = plan_world(
        folder,
        schemas={ORDER: ORDER_TYPE, OTHER: ORDER_TYPE},
        plans=[posting_plan("t/post@1", ORDER, url), posting_plan("t/other@1", OTHER, url)],
        triggers=[{"event": ORDER, "plan": "t/post@1"}, {"event": OTHER, "plan": "t/other@1"}],
        grants=[
            {
                "name": "http",
                "cap": "sys/http.out@1",
                "params": {"hosts": ["127.0.0.1"], "verbs": ["POST"]},
            }
        ],
    )
    doc = {
        "$kind": "defsecret",
        "name": "acme/token@1",
        "binding_id": "acme-token",
        "allowed_plans": ["t/post@1"],
        **(secret or {}),
    }
    (air / "secret.air.json").write_text(json.dumps(doc))
    return air


def bind_env(world_dir: Path) -> None:
    local = {"secrets": {"acme-token": {"env": ENV}}}
    (world_dir / "local.json").write_text(json.dumps(local))


def drive(world: World) -> LoopReport:
    with Engine(world) as loop:
        return loop.run()


def every_byte(folder: Path) -> Iterator[tuple[Path, bytes]]:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path, path.read_bytes()


def assert_nowhere(folder: Path, needle: str = TOKEN) -> None:
    for path, data in every_byte(folder):
        for form in (needle.encode(), needle.encode("utf-16-le")):
            assert form not in data, f"{form!r} found in {path}"


# --- 1. end to end ---------------------------------------------------------------------------


def test_a_plan_posts_json_with_a_secret_header_and_the_token_is_nowhere_after(
    tmp_path: Path, server: Loopback, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, BEARER)
    server.routes["/orders"] = Answer(200, b"accepted")
    w = tmp_path / "w"
    air = secret_world(tmp_path / "air", server)
    with World.create(w, air) as world:
        bind_env(w)
        world.send(ORDER, {"id": "o-1", "amount": 42})
        report = drive(world)
        manifest = world.kernel.effects.air
    assert report.receipts == 1
    assert len(server.seen) == 1
    [seen] = server.seen
    assert seen.path == "/orders"
    assert seen.headers["authorization"] == BEARER
    assert seen.headers["content-type"] == "application/json"
    assert json.loads(seen.body) == {"amount": 42, "id": "o-1"}
    recs = records(w)
    assert [e["status"] for e in ended(recs).values()] == ["ok"]
    queued = of_kind(recs, "effect.queued")
    params = cbor.loads(queued[0].body["params"])
    assert params["headers"]["authorization"] == {
        "$tag": "secret",
        "$value": {"alias": "acme/token", "version": 1},
    }
    assert "sys/HttpRequestParams@2" in manifest.defs
    assert ("acme/token", 1) in manifest.secrets

    # nowhere: the world, an export, a fork, the journal as the CLI prints it
    assert_nowhere(w)
    out = tmp_path / "export.cells"
    done = runner.invoke(app, ["cells", "export", str(w), "t/Sink@1", "--all", "-o", str(out)])
    assert done.exit_code == 0, done.output
    exported = [out] if out.is_file() else [f for f in out.rglob("*") if f.is_file()]
    assert exported
    for file in exported:
        assert TOKEN.encode() not in file.read_bytes()
    with World.open(w, readonly=True) as world:
        last = world.journal.seq_next - 1
    fork_world(w, last, tmp_path / "fork")
    assert_nowhere(tmp_path / "fork")
    tail = runner.invoke(app, ["journal", "tail", str(w), "--from", "0"])
    assert tail.exit_code == 0, tail.output
    assert "acme/token" in tail.stdout  # the reference is journaled ...
    assert TOKEN not in tail.stdout  # ... the value is not
    raw_tail = runner.invoke(app, ["journal", "tail", str(w), "--from", "0", "--raw"])
    assert TOKEN.encode().hex() not in raw_tail.stdout


def test_a_server_echoing_the_token_leaves_no_trace_in_the_receipt_or_blobs(
    tmp_path: Path, server: Loopback, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, BEARER)
    echo = f"you sent {BEARER} ".encode() * 100  # large: goes to the blob store
    server.routes["/orders"] = Answer(200, echo)
    w = tmp_path / "w"
    with World.create(w, secret_world(tmp_path / "air", server)) as world:
        bind_env(w)
        world.send(ORDER, {"id": "o-1", "amount": 1})
        drive(world)
    receipts = of_kind(records(w), "receipt")
    assert len(receipts) == 1
    payload = cbor.loads(receipts[0].body["payload"])
    assert "[redacted secret]" in payload["body_preview"]
    assert payload["body_ref"] is not None
    assert_nowhere(w)


def assert_in_no_form(folder: Path, value: str) -> None:
    """``value`` is nowhere under ``folder``: as written, in either letter case, or escaped as
    ``repr`` quotes it in a library's message."""
    escaped = value.replace("\\", "\\\\")
    forms = {value, value.lower(), value.upper(), escaped, escaped.replace("'", "\\'")}
    for path, data in every_byte(folder):
        for form in forms:
            assert form.encode() not in data, f"{form!r} found in {path}"


def _no_retries(world_dir: Path) -> None:
    local = {"secrets": {"acme-token": {"env": ENV}}, "http": {"retries_max": 0}}
    (world_dir / "local.json").write_text(json.dumps(local))


def _quoting(line: str) -> Script:
    """A server whose answer is malformed so that the HTTP library's error message quotes
    it: ``line`` with ``{auth}`` replaced by the authorization header it was sent."""

    def answer(exchange: Exchange) -> None:
        auth = exchange.seen.headers.get("authorization", "")
        exchange.wfile.write(line.format(auth=auth).encode("latin-1"))
        exchange.close_connection = True

    return answer


TOKENS = [
    pytest.param(BEARER, id="bearer"),
    pytest.param("tok-with-'quote'", id="single-quote"),
    pytest.param('tok-with-"double"', id="double-quote"),
    pytest.param("tok\\with\\backslashes", id="backslash"),
    pytest.param("Tok-'both'-\\-\"", id="quotes-and-backslash"),
]
BAD_ANSWERS = [
    pytest.param("HTTP/1.1 2x0 {auth}\r\n\r\n", id="status-line"),
    pytest.param("HTTP/1.1 200 OK\r\n{auth}\r\ncontent-length: 0\r\n\r\n", id="header-line"),
    pytest.param("{auth} 200 OK\r\n\r\n", id="protocol"),
]


@pytest.mark.parametrize("token", TOKENS)
@pytest.mark.parametrize("answer", BAD_ANSWERS)
def test_a_failure_message_quoting_the_secret_is_journaled_redacted(
    tmp_path: Path, server: Loopback, monkeypatch: pytest.MonkeyPatch, token: str, answer: str
) -> None:
    monkeypatch.setenv(ENV, token)
    server.routes["/orders"] = _quoting(answer)
    w = tmp_path / "w"
    with World.create(w, secret_world(tmp_path / "air", server)) as world:
        _no_retries(w)
        world.send(ORDER, {"id": "o-1", "amount": 1})
        drive(world)
    assert [seen.headers["authorization"] for seen in server.seen] == [token]
    (receipt,) = of_kind(records(w), "receipt")
    preview = cbor.loads(receipt.body["payload"])["body_preview"]
    assert receipt.body["status"] == "error"
    assert "RemoteProtocolError" in preview
    assert "[redacted secret]" in preview
    assert_in_no_form(w, token)


def _echoing(exchange: Exchange) -> None:
    auth = exchange.seen.headers.get("authorization", "")
    exchange.send_response(200)
    exchange.send_header("X-Echo", auth)
    exchange.send_header("X-Echo-Upper", auth.upper())
    exchange.send_header("X-Echo-Framed", f"<{auth}>")
    exchange.send_header(f"X-Name-{auth}", "1")
    exchange.send_header("Set-Cookie", f"session={auth}")
    exchange.send_header("Set-Cookie", "other=1")
    exchange.send_header("content-length", "0")
    exchange.end_headers()


def test_a_secret_echoed_in_response_header_names_and_values_is_journaled_redacted(
    tmp_path: Path, server: Loopback, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, TOKEN)  # a bare token: it can be a header name, too
    server.routes["/orders"] = _echoing
    w = tmp_path / "w"
    with World.create(w, secret_world(tmp_path / "air", server)) as world:
        bind_env(w)
        world.send(ORDER, {"id": "o-1", "amount": 1})
        drive(world)
    (receipt,) = of_kind(records(w), "receipt")
    headers = cbor.loads(receipt.body["payload"])["headers"]
    redacted = "[redacted secret]"
    assert receipt.body["status"] == "ok"
    assert headers["x-echo"] == redacted
    assert headers["x-echo-upper"] == redacted
    assert headers["x-echo-framed"] == f"<{redacted}>"
    assert headers[f"x-name-{redacted}"] == "1"
    assert headers["set-cookie"] == f"session={redacted}, other=1"
    assert_in_no_form(w, TOKEN)


# --- 2. the ACL, the digest, the binding -------------------------------------------------------


def test_a_plan_outside_allowed_plans_is_refused_journaled_and_sends_nothing(
    tmp_path: Path, server: Loopback, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, BEARER)
    server.routes["/orders"] = Answer(200)
    w = tmp_path / "w"
    with World.create(w, secret_world(tmp_path / "air", server)) as world:
        bind_env(w)
        world.send(OTHER, {"id": "o-2", "amount": 1})
        drive(world)
    assert server.seen == []
    recs = records(w)
    assert of_kind(recs, "effect.queued") == []
    (only,) = ended(recs).values()
    assert only["status"] == "error"
    assert only["error"]["code"] == "secret.plan_not_allowed"
    assert "acme/token@1" in only["error"]["detail"]
    assert "t/other@1" in only["error"]["detail"]


def test_an_expected_digest_mismatch_refuses_the_dispatch_with_a_clear_reason(
    tmp_path: Path, server: Loopback, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, BEARER)
    server.routes["/orders"] = Answer(200)
    wrong = "sha256:" + hashlib.sha256(b"another value").hexdigest()
    w = tmp_path / "w"
    with World.create(
        w, secret_world(tmp_path / "air", server, secret={"expected_digest": wrong})
    ) as world:
        bind_env(w)
        world.send(ORDER, {"id": "o-3", "amount": 1})
        drive(world)
    assert server.seen == []
    (receipt,) = of_kind(records(w), "receipt")
    assert receipt.body["status"] == "error"
    preview = cbor.loads(receipt.body["payload"])["body_preview"]
    assert "acme/token@1" in preview
    assert "expected_digest" in preview
    assert_nowhere(w)


@pytest.mark.parametrize("algorithm", ["sha256", "blake3"])
def test_a_matching_expected_digest_sends(
    tmp_path: Path, server: Loopback, monkeypatch: pytest.MonkeyPatch, algorithm: str
) -> None:
    import blake3

    monkeypatch.setenv(ENV, BEARER)
    server.routes["/orders"] = Answer(200)
    digest = (
        hashlib.sha256(BEARER.encode()).hexdigest()
        if algorithm == "sha256"
        else blake3.blake3(BEARER.encode()).hexdigest()
    )
    secret = {"expected_digest": f"{algorithm}:{digest}"}
    w = tmp_path / "w"
    with World.create(w, secret_world(tmp_path / "air", server, secret=secret)) as world:
        bind_env(w)
        world.send(ORDER, {"id": "o-4", "amount": 1})
        drive(world)
    assert len(server.seen) == 1


def test_an_unbound_secret_stops_world_run_naming_it_and_local_json(
    tmp_path: Path, server: Loopback, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    w = tmp_path / "w"
    with World.create(w, secret_world(tmp_path / "air", server)) as world:
        world.send(ORDER, {"id": "o-5", "amount": 1})
        with pytest.raises(UsageError) as info:
            Engine(world)
    text = str(info.value)
    assert "acme/token@1" in text
    assert "acme-token" in text
    assert "local.json" in text
    result = runner.invoke(app, ["run", str(w)])
    assert result.exit_code != 0
    assert "acme/token@1" in result.output
    assert "local.json" in result.output
    bind_env(w)  # bound, but the variable is not set
    result = runner.invoke(app, ["run", str(w)])
    assert result.exit_code != 0
    assert ENV in result.output
    assert "not set" in result.output
    assert server.seen == []


def test_a_secret_file_must_be_private_and_outside_the_world(
    tmp_path: Path, server: Loopback
) -> None:
    server.routes["/orders"] = Answer(200)
    token_file = tmp_path / "token"
    token_file.write_text(BEARER + "\n")
    os.chmod(token_file, 0o644)
    w = tmp_path / "w"
    with World.create(w, secret_world(tmp_path / "air", server)) as world:
        (w / "local.json").write_text(
            json.dumps({"secrets": {"acme-token": {"file": str(token_file)}}})
        )
        with pytest.raises(UsageError, match="0600"):
            Engine(world)
        os.chmod(token_file, 0o600)
        world.send(ORDER, {"id": "o-6", "amount": 1})
        drive(world)
    assert [seen.headers["authorization"] for seen in server.seen] == [BEARER]
    assert_nowhere(w)


def _private_file(folder: Path, mode: int = 0o600) -> Path:
    path = folder / "token"
    path.write_text(BEARER + "\n")
    os.chmod(path, mode)
    return path


def _mode(mode: int) -> Callable[[Path], Path]:
    return lambda folder: _private_file(folder, mode)


def _symlink_to_private(folder: Path) -> Path:
    link = folder / "link"
    link.symlink_to(_private_file(folder))
    return link


def _hard_linked(folder: Path) -> Path:
    path = _private_file(folder)
    os.link(path, folder / "world" / "copy")  # a second name, inside the world
    return path


def _other_owner(folder: Path) -> Path:
    path = _private_file(folder)
    os.chown(path, 65534, 65534)  # nobody
    return path


def _fifo(folder: Path) -> Path:
    path = folder / "fifo"
    os.mkfifo(path, 0o600)
    return path


def _directory(folder: Path) -> Path:
    path = folder / "dir"
    path.mkdir(mode=0o700)
    return path


def _inside_the_world(folder: Path) -> Path:
    return _private_file(folder / "world")


NOT_ROOT = pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
SECRET_FILES = [  # (make the file, None if accepted, else what the refusal says)
    pytest.param(_mode(0o600), None, id="0600"),
    pytest.param(_mode(0o400), None, id="0400"),
    pytest.param(_mode(0o700), None, id="0700-owner-exec"),
    pytest.param(_mode(0o640), "mode 0o640", id="0640-group-read"),
    pytest.param(_mode(0o660), "mode 0o660", id="0660-group-read-write"),
    pytest.param(_mode(0o620), "mode 0o620", id="0620-group-write"),
    pytest.param(_mode(0o610), "mode 0o610", id="0610-group-exec"),
    pytest.param(_mode(0o604), "mode 0o604", id="0604-other-read"),
    pytest.param(_mode(0o602), "mode 0o602", id="0602-other-write"),
    pytest.param(_mode(0o601), "mode 0o601", id="0601-other-exec"),
    pytest.param(_mode(0o644), "mode 0o644", id="0644"),
    pytest.param(_mode(0o666), "mode 0o666", id="0666"),
    pytest.param(_mode(0o777), "mode 0o777", id="0777"),
    pytest.param(_symlink_to_private, "cannot be opened", id="symlink-to-a-0600-file"),
    pytest.param(_hard_linked, "2 hard links", id="hard-link-inside-the-world"),
    pytest.param(_inside_the_world, "inside the world directory", id="inside-the-world"),
    pytest.param(_fifo, "not a regular file", id="fifo"),
    pytest.param(_directory, "not a regular file", id="directory"),
    pytest.param(_other_owner, "another user owns", id="other-owner", marks=NOT_ROOT),
]


@pytest.mark.parametrize(("make", "refusal"), SECRET_FILES)
def test_a_secret_file_is_used_only_when_private_to_its_owner(
    tmp_path: Path, make: Callable[[Path], Path], refusal: str | None
) -> None:
    (tmp_path / "world").mkdir()
    path = make(tmp_path)
    declared = {("acme/token", 1): SimpleNamespace(binding_id="b", expected_digest=None)}
    resolver = SecretResolver(
        lambda: declared, {"b": SecretBinding(file=str(path))}, tmp_path / "world"
    )
    problems = resolver.unbound()  # the check world run makes, by stat alone
    if refusal is None:
        assert problems == []
        assert resolver.resolve("acme/token", 1) == BEARER.encode()
        return
    (problem,) = problems
    assert refusal in problem
    with pytest.raises(SecretUnavailable) as info:
        resolver.resolve("acme/token", 1)
    assert str(info.value) == problem
    assert TOKEN not in problem


# --- 3. AIR: on-demand built-ins, defsecret validation, hashes ----------------------------------


def _load(docs: list[dict[str, Any]]) -> Any:
    return load_air([*builtin_sources(), AirSource("w.air.json", json.dumps(docs))])


MANIFEST: dict[str, Any] = {"$kind": "manifest"}


def test_on_demand_built_ins_enter_only_when_referred_to() -> None:
    plain = _load([MANIFEST])
    assert not any(n.startswith("sys/") and "Secret" in n for n in plain.defs)
    assert "sys/HttpRequestParams@2" not in plain.defs
    one = _load(
        [{"$kind": "defschema", "name": "t/A@1", "type": "sys/TextOrSecretRef@1"}, MANIFEST]
    )
    assert {"sys/TextOrSecretRef@1", "sys/SecretRef@1"} <= one.defs.keys()
    assert "sys/HttpRequestParams@2" not in one.defs
    assert one.manifest_hash != plain.manifest_hash


def test_an_effect_kind_brings_its_effect_and_schemas() -> None:
    rule = {"when": {"effect_kind": "http.request.v2"}, "decision": "allow"}
    air = _load([{"$kind": "defpolicy", "name": "t/p@1", "rules": [rule]}, MANIFEST])
    assert {
        "sys/http.request@2",
        "sys/HttpRequestParams@2",
        "sys/TextOrSecretRef@1",
        "sys/BytesOrSecretRef@1",
        "sys/SecretRef@1",
    } <= air.defs.keys()
    assert air.effects["http.request.v2"].params_schema == "sys/HttpRequestParams@2"


def test_an_identical_redefinition_of_an_on_demand_built_in_is_accepted_a_different_one_not() -> (
    None
):
    same = {
        "$kind": "defschema",
        "name": "sys/SecretRef@1",
        "type": {"record": {"alias": {"text": {}}, "version": {"nat": {}}}},
    }
    base = _load([{"$kind": "defschema", "name": "t/A@1", "type": "sys/SecretRef@1"}, MANIFEST])
    again = _load(
        [same, {"$kind": "defschema", "name": "t/A@1", "type": "sys/SecretRef@1"}, MANIFEST]
    )
    assert again.manifest_hash == base.manifest_hash
    other = {**same, "type": {"record": {"alias": "text"}}}
    with pytest.raises(ManifestError) as info:
        _load([other, MANIFEST])
    assert [d.code for d in info.value.diagnostics] == ["air.name.duplicate"]


def _secret_docs(secret: dict[str, Any], **manifest: Any) -> list[dict[str, Any]]:
    return [{"$kind": "defsecret", "binding_id": "b", **secret}, {**MANIFEST, **manifest}]


def test_defsecret_validation() -> None:
    ok = _load(_secret_docs({"name": "acme/token@1"}, secrets=["acme/token@1"]))
    assert ("acme/token", 1) in ok.secrets
    hashed = _load(_secret_docs({"name": "acme/token@1"}))
    assert hashed.manifest_hash == ok.manifest_hash  # the list is filled in either way
    cases = {
        "air.name.invalid": ({"name": "token@0"}, "/0/name"),
        "air.shape": ({"name": "a/t@1", "expected_digest": "md5:00"}, "/0/expected_digest"),
        "air.ref.unknown_cap_grant": (
            {"name": "a/t@1", "allowed_caps": ["nope"]},
            "/0/allowed_caps/0",
        ),
        "air.ref.unknown_plan": (
            {"name": "a/t@1", "allowed_plans": ["t/nope@1"]},
            "/0/allowed_plans/0",
        ),
    }
    for code, (secret, pointer) in cases.items():
        with pytest.raises(ManifestError) as info:
            _load(_secret_docs(secret))
        assert [(d.code, d.pointer) for d in info.value.diagnostics] == [(code, pointer)], code
    with pytest.raises(ManifestError) as info:
        _load(_secret_docs({"name": "a/t@1"}, secrets=["a/other@1"]))
    assert [(d.code, d.pointer) for d in info.value.diagnostics] == [
        ("air.ref.unknown_secret", "/1/secrets/0")
    ]


def test_a_constant_secret_ref_in_a_plan_must_be_declared(tmp_path: Path) -> None:
    step = post_json("post", "http://127.0.0.1:1/x", "req", auth=secret_ref("acme/missing", 2))
    the_plan = plan("t/p@1", ORDER, [step, end()], chain("post", "end"))
    docs = [
        {"$kind": "defschema", "name": ORDER, "type": ORDER_TYPE},
        the_plan,
        {
            **MANIFEST,
            "defaults": {
                "cap_grants": [
                    {
                        "name": "http",
                        "cap": "sys/http.out@1",
                        "params": {"hosts": ["127.0.0.1"], "verbs": ["POST"]},
                    }
                ]
            },
        },
    ]
    with pytest.raises(ManifestError) as info:
        _load(docs)
    found = [(d.code, d.pointer) for d in info.value.diagnostics]
    assert found == [("air.ref.unknown_secret", "/1/steps/0/params")]
    assert "acme/missing@2" in info.value.diagnostics[0].message
