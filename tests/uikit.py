"""``world ui`` as a child process, for the tests that talk to it over HTTP or in a browser."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path


class Inspector:
    """``WORLD ui DIR --json ARGS`` started in a session of its own; ``url`` (with the token),
    ``base`` (without), ``port`` and ``token`` from the line it printed; ``close`` stops it with
    a SIGINT, as Ctrl-C would, and returns what it wrote to stderr."""

    def __init__(self, world: str | Path, path: Path, *args: str, **popen: object) -> None:
        self.child = subprocess.Popen(
            [str(world), "ui", str(path), "--json", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            **popen,  # type: ignore[call-overload]
        )
        assert self.child.stdout is not None
        line = self.child.stdout.readline()
        try:
            said = json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(f"world ui printed {line!r}; {self.close()}") from None
        self.url: str = said["url"]
        self.port: int = said["port"]
        self.token: str = said["token"]
        self.base = f"http://127.0.0.1:{self.port}"

    def close(self) -> str:
        if self.child.poll() is None:
            os.killpg(self.child.pid, signal.SIGINT)
        _out, err = self.child.communicate(timeout=60)
        return err

    def __enter__(self) -> Inspector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
