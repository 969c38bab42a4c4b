"""A child process that answers each request line with one line: the fork servers the kill -9
tests start once per module (``world_fault_child.py --serve``, ``cellstore_crash_child.py``)."""

from __future__ import annotations

import subprocess
import sys
from typing import IO


class LineServer:
    def __init__(self, *argv: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def ask(self, line: str) -> str:
        stdin, stdout = self._pipes()
        stdin.write(line + "\n")
        stdin.flush()
        return stdout.readline().strip()

    def close(self) -> None:
        stdin, stdout = self._pipes()
        stdin.close()
        self.proc.wait(timeout=60)
        stdout.close()

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None
        assert stdout is not None
        return stdin, stdout
