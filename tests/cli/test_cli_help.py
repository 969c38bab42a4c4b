"""What ``world ... --help`` prints, for every command and group of the app: each paragraph of a
docstring re-flowed to the width it is shown at (a line is followed by the next line of its text
only when the next word would not fit on it), a paragraph opened by a ``\\b`` line kept as
written, no ``<bool>`` (or any type) beside a flag, every group's commands listed by their whole
first sentence, and ``world --help`` loading neither rich nor typer's rich help (what kept its
start-up at three times Python's with typer and rich; measured by hand, in ``BENCHMARKS.md``).
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from cli.app import HELP_MARKUP, app

ROOT = Path(__file__).resolve().parents[2]
WIDTHS = (60, 80, 120)  # narrower and wider than the ~96 columns docstrings are written at


def _commands(command: Any, path: list[str], parent: Any = None) -> Iterator[tuple[str, Any]]:
    """(``world cells ls``, its context) for the root and every command and group under it."""
    ctx = typer.Context(command, info_name=path[-1], parent=parent)
    yield " ".join(path), ctx
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            yield from _commands(sub, [*path, name], ctx)


RUNNER = CliRunner()
ROOT_COMMAND = typer.main.get_command(app)
COMMANDS = dict(_commands(ROOT_COMMAND, ["world"]))


def _help(ctx: Any, width: int) -> str:
    """What ``world ... --help`` prints on a terminal ``width`` columns wide (click reads the
    width it is given, rich ``COLUMNS``)."""
    path = ctx.command_path.split()[1:]
    done = RUNNER.invoke(app, [*path, "--help"], terminal_width=width, env={"COLUMNS": str(width)})
    assert done.exit_code == 0, done.output
    return done.stdout


def _text_column(line: str) -> int:
    """Where the text of ``line`` starts: after its first gap of two spaces or more (a definition
    list's second column), else at its indent."""
    gap = re.search(r"\S {2,}(?=\S)", line)
    return gap.end() if gap else len(line) - len(line.lstrip(" "))


def _broken_early(text: str, width: int) -> list[tuple[str, str]]:
    """Each pair of lines where the second goes on the first's text although its first word
    would have fitted on the first (the widest a line of click's text may be: ``width - 2``
    for an indented paragraph, more in a definition list)."""
    lines = text.splitlines()
    early = []
    for line, following in itertools.pairwise(lines):
        if not line.strip() or not following.strip():
            continue
        indent = len(following) - len(following.lstrip(" "))
        if indent == 0 or indent != _text_column(line) or re.search(r"\S {2,}\S", following):
            continue  # a new row, option or heading: not the text of ``line`` going on
        word = following.split()[0]
        if len(line.rstrip()) + 1 + len(word) <= width - 2:
            early.append((line, following))
    return early


@pytest.mark.parametrize("width", WIDTHS)
def test_no_help_line_of_any_command_ends_before_the_width_it_is_shown_at(width: int) -> None:
    problems = {
        name: early
        for name, ctx in COMMANDS.items()
        if (early := _broken_early(_help(ctx, width), width))
    }
    assert not problems, problems


def test_a_docstring_broken_mid_sentence_reads_as_one_paragraph() -> None:
    """The break the issue found: "...size, mtime, ctime" at a line's end and "and inode" on the
    next, because the docstring's line ended there."""
    ctx = COMMANDS["world journal verify"]
    assert "ctime\n" in (ctx.command.help or "")  # the docstring's own hard break
    lines = _help(ctx, 120).splitlines()
    assert any("size, mtime, ctime and inode: the cache" in line for line in lines)


def test_blank_lines_still_part_paragraphs() -> None:
    ctx = COMMANDS["world journal tail"]
    first, _, rest = (ctx.command.help or "").partition("\n\n")
    assert rest  # the docstring has a second paragraph
    shown = _help(ctx, 80)
    said = shown.split("\n\n")
    assert any(" ".join(first.split()) == " ".join(part.split()) for part in said)


def test_a_paragraph_opened_by_b_is_kept_as_written() -> None:
    """For a list or an example: click's ``\\b`` (a line holding only it) before the paragraph."""
    small = typer.Typer(rich_markup_mode=HELP_MARKUP)

    @small.command()
    def listing() -> None:
        """Lists.

        \b
        - one line
        - another line, kept under it
        """

    shown = CliRunner().invoke(small, ["--help"], terminal_width=80).stdout
    assert "  - one line\n  - another line, kept under it\n" in shown


@pytest.mark.parametrize("width", WIDTHS)
def test_no_flag_shows_a_type(width: int) -> None:
    for name, ctx in COMMANDS.items():
        shown = _help(ctx, width)
        assert "<bool>" not in shown, name
        for param in ctx.command.params:
            if getattr(param, "is_flag", False) and not param.hidden:
                row = next(line for line in shown.splitlines() if param.opts[0] in line)
                assert "<" not in row.split(param.opts[-1], 1)[1].split("  ")[0], (name, row)


def test_every_group_lists_its_commands_by_their_whole_first_sentence() -> None:
    for name, ctx in COMMANDS.items():
        subs = getattr(ctx.command, "commands", None)
        if not subs:
            continue
        listed = _help(ctx, 80).split("Commands:")[1]
        assert "..." not in listed, name
        for sub_name, sub in subs.items():
            first = (sub.help or "").split("\n\n")[0]
            sentence = re.split(r"(?<=\.)\s", " ".join(first.split()), maxsplit=1)[0]
            # spaces aside: the formatter may break a line after a hyphen ("in-" / "flight")
            assert re.sub(r"\s", "", f"{sub_name}{sentence}") in re.sub(r"\s", "", listed)


def _world_process(argv: list[str]) -> tuple[str, set[str]]:
    """What ``world ARGV`` prints in a process of its own, and the modules it loaded."""
    code = (
        f"import sys; sys.argv = ['world', *{argv!r}]\n"
        "from cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('MODULES', *sorted(sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    shown, _, modules = out.stdout.rpartition("MODULES ")
    return shown, set(modules.split())


@pytest.mark.parametrize("argv", [["--help"], [], ["cells"]], ids=["help", "alone", "group"])
def test_world_help_loads_neither_rich_nor_typers_rich_help(argv: list[str]) -> None:
    """``world`` alone and ``world cells`` alone print what ``--help`` prints, as plainly."""
    shown, loaded = _world_process(argv)
    assert shown.startswith("Usage: world ")
    if "--help" not in argv:
        assert shown == _world_process([*argv, "--help"])[0]
    assert not {"rich.console", "typer.rich_utils", "markdown_it", "pygments"} & loaded


def _shape(command: Any) -> Any:
    """Every parameter of every command under ``command``, as click holds it."""
    ctx = typer.Context(command)
    params = [
        [p.name, p.opts, p.secondary_opts, repr(p.default), p.required, p.nargs]
        + [getattr(p, name, None) for name in ("help", "is_flag", "multiple", "count")]
        + [p.get_help_record(ctx)]
        for p in command.params
    ]
    subs = {name: _shape(sub) for name, sub in getattr(command, "commands", {}).items()}
    return (command.name, command.help, params, subs)


def test_annotations_evaluated_once_build_the_same_commands() -> None:
    """``cli.app.run`` evaluates the command functions' annotations before typer reads them
    (typer would evaluate each string four times): the commands built are the same."""
    from cli.app import _annotations_evaluated

    before = _shape(typer.main.get_command(app))
    _annotations_evaluated(app)
    assert all(
        not isinstance(hint, str)
        for info in app.registered_commands
        if info.callback is not None
        for hint in info.callback.__annotations__.values()
    )
    assert _shape(typer.main.get_command(app)) == before


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"]], ids=["alone", "help", "h"])
def test_the_roots_help_from_its_outline_is_the_whole_apps(argv: list[str]) -> None:
    """``cli.app.app_for`` gives the root's own help the app with each group emptied of its
    commands (typer need not build them to list the groups): the page is the same."""
    from cli.app import app_for

    outline = app_for(["world", *argv])
    assert outline is not app
    built = typer.main.get_command(outline)
    whole = typer.main.get_command(app)
    assert list(built.commands) == list(whole.commands)  # type: ignore[attr-defined]
    for name, command in whole.commands.items():  # type: ignore[attr-defined]
        shown = built.commands[name]  # type: ignore[attr-defined]
        assert (shown.help, shown.short_help, shown.hidden) == (
            command.help,
            command.short_help,
            command.hidden,
        )
    page = RUNNER.invoke(outline, ["--help"], terminal_width=80).stdout
    assert page == RUNNER.invoke(app, ["--help"], terminal_width=80).stdout


def test_every_argument_and_option_says_what_it_is() -> None:
    unsaid = [
        (name, param.name)
        for name, ctx in COMMANDS.items()
        for param in ctx.command.params
        if not param.hidden and not getattr(param, "help", None)
    ]
    assert not unsaid
