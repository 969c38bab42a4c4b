"""Secrets at dispatch: where a ``defsecret``'s value comes from on this machine, read only by
the HTTP adapter as it sends, checked against ``expected_digest``, and kept out of everything
the world writes.

The kernel and the journal hold references only (``sys/SecretRef@1``: ``{alias, version}``), so
an intent hash is over the reference and a replay, a fork, an export or an archive never needs
(or has) the value. ``SecretResolver.resolve`` reads it when an ``http.request.v2`` intent is
dispatched, from the binding ``<world>/local.json`` gives the secret's ``binding_id``
(``world._localconfig``):

* ``{"env": NAME}``: the environment variable of the process that runs the world, as bytes
  (``os.environb``). Unset or empty: unavailable.
* ``{"file": ABS_PATH}``: the file's bytes, less one trailing ``\\n`` (or ``\\r\\n``), as a
  token file is usually written. The file must be a regular file (a symlink is not followed,
  even to a private file; a FIFO or a device is refused), owned by this user, of mode ``0600``
  or stricter (no group or other bit at all: ``0640``, ``0604``, ``0610`` are refused; the
  owner's own bits, ``0400`` or ``0700``, are free), outside the world directory (so no copy,
  fork, export or archive of the world can carry it) and with one hard link (another link could
  be a name inside the world that ``realpath`` does not see), and at most
  ``SECRET_BYTES_MAX`` bytes. It is read again at each dispatch (a rotated file takes effect at
  once) and never copied.

``expected_digest`` (``sha256:<hex>`` as AgentOS writes it, or ``blake3:<hex>``) is computed
over those bytes: a mismatch refuses the dispatch (an ``error`` receipt saying so, naming the
secret and the digest's algorithm, never the value or its digest), and nothing is sent.

``unbound`` is the check ``world run`` makes before any effect goes out (``EffectPump``, live
effects only): every declared secret has a binding, its variable is set or its file is usable
(by ``stat`` alone: the value is not read). Each problem names the secret, its ``binding_id``
and how to bind it.

Every message here names a secret by ``alias@version`` and its binding by id, variable name or
path, never by value: ``SecretUnavailable`` and its text go into receipts.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import blake3

__all__ = ["SECRET_BYTES_MAX", "SecretResolver", "SecretUnavailable", "bind_hint"]

SECRET_BYTES_MAX: Final = 64 * 1024
"""The largest secret file read."""


class SecretUnavailable(Exception):
    """A secret cannot be used for this dispatch; ``str`` says why, never with the value."""


def bind_hint(binding_id: str, world_dir: Path) -> str:
    return (
        f'bind it in {world_dir / "local.json"}: "secrets": {{"{binding_id}": '
        '{"env": "VARIABLE"}} or {"file": "/absolute/path"} (mode 0600)'
    )


class SecretResolver:
    """Reads secret values for the HTTP adapter. ``declared`` gives the world's current
    ``defsecret``s by ``(alias, version)`` (``LoadedAir.secrets``, looked up at each use: an
    upgrade may change them); ``bindings`` is ``local.json``'s ``secrets``."""

    def __init__(
        self,
        declared: Callable[[], Mapping[tuple[str, int], Any]],
        bindings: Mapping[str, Any],
        world_dir: Path,
        environ: Mapping[bytes, bytes] | None = None,
    ) -> None:
        self._declared = declared
        self._bindings = dict(bindings)
        self._world_dir = Path(os.path.realpath(world_dir))
        self._environ = environ if environ is not None else os.environb

    def unbound(self) -> list[str]:
        """A line per declared secret this machine cannot supply (checked without reading)."""
        problems = []
        for (alias, version), secret in sorted(self._declared().items()):
            try:
                self._source(f"{alias}@{version}", secret.binding_id, read=False)
            except SecretUnavailable as exc:
                problems.append(str(exc))
        return problems

    def resolve(self, alias: str, version: int) -> bytes:
        """The value of ``alias@version``; ``SecretUnavailable`` naming why not."""
        name = f"{alias}@{version}"
        secret = self._declared().get((alias, version))
        if secret is None:
            raise SecretUnavailable(f"secret {name} is not declared (no defsecret)")
        value = self._source(name, secret.binding_id, read=True)
        expected = secret.expected_digest
        if expected is not None:
            algorithm = expected.partition(":")[0]
            if not hmac.compare_digest(_digest(algorithm, value), expected):
                raise SecretUnavailable(
                    f"secret {name}: the value bound to {secret.binding_id!r} does not match "
                    f"its expected_digest ({algorithm}); nothing was sent"
                )
        return value

    def _source(self, name: str, binding_id: str, *, read: bool) -> bytes:
        binding = self._bindings.get(binding_id)
        if binding is None:
            raise SecretUnavailable(
                f"secret {name} has no binding for binding_id {binding_id!r} on this machine; "
                + bind_hint(binding_id, self._world_dir)
            )
        if binding.env is not None:
            value = self._environ.get(os.fsencode(binding.env))
            if not value:
                raise SecretUnavailable(
                    f"secret {name} is bound to the environment variable {binding.env}, "
                    "which is not set (or empty) in this process"
                )
            return value
        return self._file(name, Path(binding.file), read=read)

    def _file(self, name: str, path: Path, *, read: bool) -> bytes:
        where = f"secret {name} is bound to the file {path}"
        real = Path(os.path.realpath(path))
        if real == self._world_dir or self._world_dir in real.parents:
            raise SecretUnavailable(f"{where}, inside the world directory: keep it outside")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            raise SecretUnavailable(f"{where}, which cannot be opened: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SecretUnavailable(f"{where}, which is not a regular file")
            if info.st_uid != os.getuid():
                raise SecretUnavailable(f"{where}, which another user owns")
            if info.st_mode & 0o077:
                mode = oct(stat.S_IMODE(info.st_mode))
                raise SecretUnavailable(f"{where}, of mode {mode}: make it 0600 or stricter")
            if info.st_nlink != 1:
                raise SecretUnavailable(
                    f"{where}, which has {info.st_nlink} hard links: another name for it may "
                    "be inside the world; keep one link"
                )
            if info.st_size > SECRET_BYTES_MAX:
                raise SecretUnavailable(f"{where}, larger than {SECRET_BYTES_MAX} bytes")
            if not read:
                return b""
            data = b""
            while len(data) <= SECRET_BYTES_MAX:
                chunk = os.read(fd, SECRET_BYTES_MAX + 1 - len(data))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
        if len(data) > SECRET_BYTES_MAX:
            raise SecretUnavailable(f"{where}, larger than {SECRET_BYTES_MAX} bytes")
        data = data.removesuffix(b"\n").removesuffix(b"\r") if data.endswith(b"\n") else data
        if not data:
            raise SecretUnavailable(f"{where}, which is empty")
        return data


def _digest(algorithm: str, value: bytes) -> str:
    if algorithm == "sha256":
        return "sha256:" + hashlib.sha256(value).hexdigest()
    return "blake3:" + blake3.blake3(value).hexdigest()
