"""What the ladder's rung drivers share: the ``Rung`` record, ``RungFailed``, making a rung's
world from its bundled example, checking an end state, and a loopback HTTP server that stands
in for the service a rung calls (``FakeHttp``), reached through ``local.json``'s
``http.resolve`` so the rung's AIR and events keep AgentOS's host names.

A driver checks only what the journal fixes (states, receipts, what the fake was sent), never
time or randomness, so a rung either reaches its README's end or fails naming what differs.
"""

from __future__ import annotations

import datetime
import json
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Final

from world._localconfig import LOCAL_CONFIG

if TYPE_CHECKING:
    from world import World

__all__ = [
    "Answer",
    "FakeHttp",
    "Rung",
    "RungFailed",
    "Say",
    "Seen",
    "create",
    "expect",
    "quiet",
    "resolve",
    "self_signed",
]

Say = Callable[[str], None]
"""Where a driver tells the user what it does: one short line per step."""


def quiet(line: str) -> None:
    """A ``Say`` that says nothing (the tests' default)."""


class RungFailed(Exception):
    """A rung did not reach its README's end: the message says what differs."""


@dataclass(frozen=True)
class Rung:
    """One rung of AgentOS's ladder: its bundled example, a line saying what it proves, and
    its driver, which makes the world at the path it is given and runs it to the end."""

    example: str
    title: str
    drive: Callable[[Path, Say], None]


def create(path: Path, example: str) -> World:
    """A new world at ``path`` from the bundled ``example`` with its bound modules, open."""
    from world import World
    from world.sdk import example_modules, example_path

    return World.create(path, example_path(example), modules=example_modules(example))


def expect(what: str, got: object, wanted: object) -> None:
    """Raises ``RungFailed`` naming ``what`` when ``got`` is not ``wanted``."""
    if got != wanted:
        raise RungFailed(f"{what}: got {got!r}, wanted {wanted!r}")


def resolve(path: Path, mapping: dict[str, str], ca_file: Path | None = None) -> None:
    """Points host names at addresses in the world's ``local.json`` (``http.resolve``, merged
    with what the file holds), trusting ``ca_file`` too (``http.ca_file``, a TLS fake's
    certificate): the world's AIR and events keep the names, ``https`` ones too."""
    file = path / LOCAL_CONFIG
    settings = json.loads(file.read_text()) if file.exists() else {}
    http = settings.setdefault("http", {})
    http["resolve"] = {**http.get("resolve", {}), **mapping}
    if ca_file is not None:
        http["ca_file"] = str(ca_file.absolute())
    file.write_text(json.dumps(settings, indent=2) + "\n")


@dataclass(frozen=True)
class Seen:
    """One request as the fake received it (header names lower-cased)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Answer = Callable[[Seen], tuple[int, dict[str, str], bytes]]
"""What the fake answers a request: status, headers and body."""

_BODY_BYTES_MAX: Final = 1 << 20


def self_signed(names: tuple[str, ...], pem: Path) -> ssl.SSLContext:
    """A server TLS context for ``names`` with a new self-signed certificate, whose PEM is
    written to ``pem`` (what a client trusts: ``resolve``'s ``ca_file``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    secret = pem.with_name(pem.name + ".key")
    secret.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(pem, secret)
    finally:
        secret.unlink()
    return context


class FakeHttp:
    """A loopback HTTP server on 127.0.0.1 (a port the OS picks) answering every request with
    ``answer``, and recording each in ``seen``, in the order they arrived; with ``tls`` (a
    server context, ``self_signed``) it speaks HTTPS. Use it as a context manager; leaving
    joins the handlers, so ``seen`` is complete then."""

    def __init__(self, answer: Answer, tls: ssl.SSLContext | None = None) -> None:
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def do_PUT(self) -> None:
                self._answer()

            def do_DELETE(self) -> None:
                self._answer()

            def _answer(self) -> None:
                length = min(int(self.headers.get("content-length") or 0), _BODY_BYTES_MAX)
                headers = {k.lower(): v for k, v in self.headers.items()}
                seen = Seen(self.command, self.path, headers, self.rfile.read(length))
                with fake._lock:
                    fake.seen.append(seen)
                status, extra, body = answer(seen)
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def version_string(self) -> str:
                return "FakeHttp"  # no Python version in a receipt's headers

            def date_time_string(self, timestamp: float | None = None) -> str:
                return "Thu, 01 Jan 1970 00:00:00 GMT"  # the same receipt on every run

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = False
        self._server.block_on_close = True
        if tls is not None:
            self._server.socket = tls.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, what ``resolve`` maps a name to."""
        return f"127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHttp:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
