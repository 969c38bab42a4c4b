"""A world's local settings: ``<world>/local.json``, what this machine runs it with.

Not part of the world's history: nothing here is journaled, hashed, exported, archived or
copied by a fork (a fork, an import or a restore on another machine is set up there). It says
how the effect adapters reach the outside world on this machine:

    {
      "http": {"connect_timeout_s": 5, "read_timeout_s": 30, "attempt_deadline_s": 120,
               "retries_max": 3, "backoff_base_s": 0.05, "backoff_max_s": 2,
               "resolve": {"api.example.com": "127.0.0.1:8080"},
               "ca_file": "/etc/acme/ca.pem"},
      "llm": {"providers": {"openai": {"base_url": "https://api.openai.com/v1"}},
              "read_timeout_s": 120, "attempt_deadline_s": 300},
      "secrets": {"<binding_id>": {"env": "API_TOKEN"} | {"file": "/etc/acme/token"}}
    }

Every key is optional; an absent file is every default (the adapter's own).
``http``: the HTTP adapter's timeouts, retries and backoff (``world.effects._http``), shown by
``world info``, and ``resolve``: host names the adapter connects to at another address
(``host:port``, as ``curl --resolve`` does) while the URL, the capability check, the ``Host``
header and TLS's server name keep the name: a test or a staging machine points a world's AIR,
unchanged, at a local server; ``ca_file``: a PEM file of certificate authorities (an absolute
path) trusted beside the usual ones, for a private CA or a test server's own certificate.
``llm``: where each ``llm.generate`` provider answers (an OpenAI-compatible chat-completions
API: ``base_url``; ``world.effects._llm``), and the LLM adapter's own timeouts.
``secrets``: where each ``defsecret``'s ``binding_id`` gets its value: an
environment variable of the process that runs the world, or a file (an absolute path, outside
the world directory, of mode ``0600`` or stricter, owned by the user). The value is read by the
effect adapter when it dispatches, and never written anywhere (``world.effects._secrets``).

A file that is not what this says is refused with ``InvalidArgument`` naming the file and the
field: a world never runs on settings it did not understand.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from air import jsontext
from air.errors import InvalidArgument, JsonError
from world import _fileio as fileio

__all__ = [
    "LOCAL_CONFIG",
    "LOCAL_CONFIG_BYTES_MAX",
    "HttpSettings",
    "LlmProvider",
    "LlmSettings",
    "LocalConfig",
    "SecretBinding",
    "read_local_config",
]

LOCAL_CONFIG: Final = "local.json"
LOCAL_CONFIG_BYTES_MAX: Final = 1 << 20


_HOST: Final = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")
_ADDRESS: Final = re.compile(r"[a-z0-9.-]{1,253}|\[[0-9a-f:.]{2,45}\]")
"""A ``resolve`` address's host: a name, an IPv4 address or a bracketed IPv6 address."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HttpSettings(_Strict):
    """The HTTP adapter's settings; None (absent) is the adapter's default
    (``world.effects.http_settings`` gives them filled in)."""

    connect_timeout_s: float | None = Field(None, gt=0, le=3600)
    read_timeout_s: float | None = Field(None, gt=0, le=3600)
    attempt_deadline_s: float | None = Field(None, gt=0, le=86400)
    retries_max: int | None = Field(None, ge=0, le=100)
    backoff_base_s: float | None = Field(None, ge=0, le=3600)
    backoff_max_s: float | None = Field(None, ge=0, le=86400)
    resolve: dict[str, str] | None = Field(None, max_length=1024)
    ca_file: str | None = Field(None, min_length=1, max_length=4096)

    @field_validator("resolve")
    @classmethod
    def _addresses(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for name, address in (value or {}).items():
            if not _HOST.fullmatch(name):
                raise ValueError(f"resolve: {name!r} is not a lower-case host name")
            host, _, port = address.rpartition(":")
            if not (host and port.isdigit() and 0 < int(port) < 65536 and _ADDRESS.fullmatch(host)):
                raise ValueError(f"resolve: {name!r} maps to {address!r}, not host:port")
        return value

    @field_validator("ca_file")
    @classmethod
    def _pem_file(cls, value: str | None) -> str | None:
        if value is not None and not (os.path.isabs(value) and os.path.isfile(value)):
            raise ValueError(f"ca_file: {value!r} is not an absolute path to a file")
        return value

    def given(self) -> dict[str, Any]:
        """The settings the file gives (the adapter's keyword arguments)."""
        return self.model_dump(exclude_none=True)


class SecretBinding(_Strict):
    """Where one binding's value comes from: exactly one of ``env`` and ``file``."""

    env: str | None = Field(None, min_length=1, max_length=256)
    file: str | None = Field(None, min_length=1, max_length=4096)

    @model_validator(mode="after")
    def _one(self) -> SecretBinding:
        if (self.env is None) == (self.file is None):
            raise ValueError('give exactly one of "env" and "file"')
        if self.file is not None and not os.path.isabs(self.file):
            raise ValueError("file must be an absolute path")
        return self


class LlmProvider(_Strict):
    """Where one ``llm.generate`` provider (the params' ``provider``) answers: an
    OpenAI-compatible API's base URL, to which ``/chat/completions`` is added."""

    base_url: str = Field(min_length=1, max_length=2048)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
            raise ValueError(f"base_url: {value!r} is not an http(s) URL without query")
        return value.rstrip("/")


class LlmSettings(_Strict):
    """The LLM adapter's settings (``world.effects._llm``): its providers, and its own read
    timeout and attempt deadline (a model takes longer than most servers); the rest of the
    HTTP settings (connect timeout, retries, ``resolve``, ``ca_file``) are ``http``'s."""

    providers: dict[str, LlmProvider] = Field(default_factory=dict, max_length=256)
    read_timeout_s: float | None = Field(None, gt=0, le=3600)
    attempt_deadline_s: float | None = Field(None, gt=0, le=86400)


class LocalConfig(_Strict):
    http: HttpSettings = HttpSettings()
    llm: LlmSettings = LlmSettings()
    secrets: dict[str, SecretBinding] = {}


def read_local_config(world_dir: str | os.PathLike[str]) -> LocalConfig:
    """The settings in ``<world_dir>/local.json`` (every default when there is none);
    ``InvalidArgument`` naming the file and the field when it is not a settings file."""
    path = Path(world_dir) / LOCAL_CONFIG
    data = fileio.read_regular(path, LOCAL_CONFIG_BYTES_MAX, operation="read local settings")
    if data is None:
        return LocalConfig()
    try:
        doc: Any = jsontext.loads(data.decode("utf-8", errors="strict"), source=str(path))
        return LocalConfig.model_validate(doc)
    except (JsonError, UnicodeDecodeError) as exc:
        raise InvalidArgument(str(path), "(the file)", f"not JSON: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "/" + "/".join(str(p) for p in first["loc"])
        raise InvalidArgument(str(path), where, first["msg"]) from exc
