"""``docs/CLI.md`` is the reference ``tools/gen_cli_docs.py`` generates from the typer app, as
it is now: a command, argument, option, help text or default changed without regenerating the
page fails here, with the one command that regenerates it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "gen_cli_docs.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_cli_docs", TOOL)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_is_current() -> None:
    tool = _tool()
    written = (ROOT / "docs" / "CLI.md").read_text()
    assert written == tool.render(), (
        f"docs/CLI.md is out of date with the CLI; regenerate it with: {tool.REGENERATE}"
    )


def test_the_reference_names_every_command() -> None:
    tool = _tool()
    page = tool.render()
    for command in ("world send", "world cells show", "world upgrade apply", "world journal tail"):
        assert f"`{command}`" in page
    assert "`--json`" in page
    assert "(default: `app`)" in page  # world reducer new --namespace


def test_check_exits_1_naming_the_command_when_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = _tool()
    doc = tmp_path / "CLI.md"
    doc.write_text("# stale\n")
    assert tool.main(["gen_cli_docs.py", "--check"], doc) == 1
    assert "tools/gen_cli_docs.py > docs/CLI.md" in capsys.readouterr().err
    doc.write_text(tool.render())
    assert tool.main(["gen_cli_docs.py", "--check"], doc) == 0


def test_check_from_the_command_line() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
