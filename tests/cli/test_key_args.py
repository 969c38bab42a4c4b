"""A cell's key on the command line is JSON read through the key schema, so ``--key 5`` is the
number 5: for a reducer keyed by text, every command that reads one cell by its key (``state``,
``cells show``, ``cells tail``, ``why``, ``cells ls --after``) says how to write it as text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from world import World

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

COMMANDS = {
    "state": ["state", "{w}", COUNTER, "--key", "{key}"],
    "cells show": ["cells", "show", "{w}", COUNTER, "{key}"],
    "cells tail": ["cells", "tail", "{w}", COUNTER, "{key}"],
    "why": ["why", "{w}", COUNTER, "{key}"],
    "cells ls --after": ["cells", "ls", "{w}", COUNTER, "--after", "{key}"],
}


@pytest.fixture(scope="module")
def counter_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    w = tmp_path_factory.mktemp("keys") / "w"
    with World.create(w, COUNTER_AIR) as world:
        world.send(EVENT, add("5", 1))
        world.run_until_idle()
    return w


def _invoke(w: Path, command: str, key: str) -> tuple[int, dict]:
    args = [part.format(w=w, key=key) for part in COMMANDS[command]]
    done = CliRunner().invoke(app, [*args, "--json"])
    return done.exit_code, json.loads(done.stdout)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("key", "spelled"), [("5", '"5"'), ("true", '"true"'), ("1.5", '"1.5"')])
def test_a_text_key_given_as_a_number_says_how_to_write_it(
    counter_world: Path, command: str, key: str, spelled: str
) -> None:
    code, answer = _invoke(counter_world, command, key)
    assert code == 1
    assert answer["error"] == "ValueMismatch"
    assert answer["fields"]["detail"].endswith(f"; the key is text: write '{spelled}'")


def test_the_key_written_as_text_reads_the_cell(counter_world: Path) -> None:
    code, answer = _invoke(counter_world, "state", '"5"')
    assert code == 0
    assert answer["state"] == {"count": 1, "events": 1}


def test_a_mismatch_inside_a_key_gets_no_text_hint(counter_world: Path) -> None:
    code, answer = _invoke(counter_world, "state", '{"a": 1}')
    assert code == 1
    assert "the key is text" not in answer["fields"]["detail"]
