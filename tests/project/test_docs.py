"""The command blocks of ``README.md`` and ``docs/*.md`` run as written and succeed.

Each block fenced as ``sh`` runs in ``bash`` under ``set -euo pipefail``, from a scratch folder
that looks like the checkout from inside: ``.venv`` leads to this interpreter's environment (the
one the suite runs in, so a command is the one this checkout installs), ``manifests``,
``reducers`` and ``tools`` to the checkout's. So that a block touches nothing outside its
scratch folder: paths under ``/tmp/`` move into it (and ``TMPDIR`` points there, for
``mktemp``), ``~/wk/bin/`` (the README's install of the package elsewhere) is this environment's
``bin/`` too, a port the docs write (8000) becomes a free one, and jobs a block left in the
background are killed when it ends. Nothing else is given to a block: it makes every world and
file it uses (``set -u`` fails one that reads a variable it never set), so a reader who runs it
alone, or the README from the top, gets what the test got. ``world`` itself is the
``world_bin`` fixture's (``tests/zygote.py``: the same script, forked from a process that has
imported what it needs, unless ``WORLD_TEST_ZYGOTE=0``); every other program of ``bin/`` is this
environment's.

A block that starts a Ray instance runs in the long variants (``LONG_BLOCKS``), every other in
the main suite. A few lines are not run as written; ``NOT_RUN`` says which and why (installing is what CI does
before the suite; the suite itself). A test checks that each of them is still in the docs, so
the list cannot hide a line that changed.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent

NOT_RUN: dict[str, tuple[str | None, str]] = {
    "python3.11 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/world demo": (
        ".venv/bin/world demo",
        "installing into .venv is what .ci/run does before the suite; the demo is run",
    ),
    "bash tools/check.sh": (None, "the suite itself"),
    "python3.11 -m venv ~/wk && ~/wk/bin/pip install -q '.[sdk]'": (
        None,
        "tests/project/test_package.py builds the wheel and installs it into a fresh venv",
    ),
    "WORLD_NATIVE_BUILD=0 .venv/bin/pip install -e .": (
        None,
        "it would reinstall the package under test; tests/project/test_package.py installs it",
    ),
}

PREAMBLE = """\
set -euo pipefail
trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT
"""


def _blocks() -> list[tuple[str, int, list[str]]]:
    """(file, line of the fence, the block's lines) for every ``sh`` block."""
    found = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        start: int | None = None
        for number, line in enumerate(lines, 1):
            if start is None and line.strip() == "```sh":
                start = number
            elif start is not None and line.strip() == "```":
                found.append((doc.name, start, lines[start : number - 1]))
                start = None
    return found


BLOCKS = _blocks()
LONG_BLOCKS: dict[str, str] = {
    "world cluster up": "it starts a Ray instance of its own (~25 s): the long variants run it",
}
"""A block with one of these commands runs with ``-m long`` (``.ci/run`` runs both), and why."""


def _marks(lines: list[str]) -> list[pytest.MarkDecorator]:
    return [pytest.mark.long] if any(c in "\n".join(lines) for c in LONG_BLOCKS) else []


def _code(line: str) -> str:
    """The command of a doc line: without its trailing comment (two spaces, then ``#``)."""
    return re.split(r"\s{2,}#", line, maxsplit=1)[0].rstrip()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bin(match: re.Match[str], world_bin: Path) -> str:
    """``.venv/bin/`` or ``~/wk/bin/`` made this environment's, ``world`` ``world_bin``'s."""
    return f"{world_bin}/world" if match.group(2) else f"{BIN}/"


def _script(lines: list[str], scratch: Path, world_bin: Path = BIN) -> str:
    port = str(_free_port())
    out = [PREAMBLE]
    for line in lines:
        code = _code(line)
        if not code or code.startswith("#"):
            continue
        if code in NOT_RUN:
            replacement, _why = NOT_RUN[code]
            if replacement is None:
                continue
            code = replacement
        # On the line as written, before any path goes in: the checkout (so BIN) and the
        # scratch folder may themselves be under /tmp, or have 8000 in their names.
        code = re.sub(r"\b8000\b", port, code).replace("/tmp/", f"{scratch}/tmp/")
        code = re.sub(r"(~/wk|\.venv)/bin/(world(?![\w.-]))?", lambda m: _bin(m, world_bin), code)
        out.append(code)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    ("doc", "fence", "lines"),
    [pytest.param(*block, marks=_marks(block[2])) for block in BLOCKS],
    ids=[f"{doc}:{fence}" for doc, fence, _ in BLOCKS],
)
def test_the_command_block_runs(
    doc: str, fence: int, lines: list[str], tmp_path: Path, world_bin: Path
) -> None:
    scratch = tmp_path
    (scratch / "tmp").mkdir()
    for name in ("manifests", "reducers", "tools"):
        (scratch / name).symlink_to(ROOT / name)
    (scratch / ".venv").symlink_to(BIN.parent)
    env = {**os.environ, "TMPDIR": str(scratch / "tmp"), "HOME": str(scratch)}
    env.pop("WORLD_PROGRESS", None)
    done = subprocess.run(
        ["bash", "-c", _script(lines, scratch, world_bin)],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (
        f"{doc}:{fence}: the block failed (exit {done.returncode})\n"
        f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )


def test_every_line_not_run_is_still_in_the_docs() -> None:
    written = {_code(line) for _doc, _fence, lines in BLOCKS for line in lines}
    assert set(NOT_RUN) <= written, set(NOT_RUN) - written


def test_the_readme_starts_with_the_two_commands() -> None:
    """The README's first block: install and run the demo, then every check CI runs."""
    doc, _fence, lines = BLOCKS[0]
    commands = [_code(line) for line in lines if _code(line) and not line.startswith("#")]
    assert doc == "README.md"
    assert commands == [*list(NOT_RUN)[:2]]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash tools/check.sh" in ci
