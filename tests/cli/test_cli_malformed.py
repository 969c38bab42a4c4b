"""Every ``world`` command given malformed input: exit 1, one line on stderr, never a traceback.

A table of (command line, what is wrong with it) walks every command but ``demo`` through the
ways input goes wrong: a missing directory, a file where a directory belongs, a directory that
is not a world, JSON that is malformed, a 5,000-digit integer, a lone surrogate, a value nested
10,000 deep, empty, blank and binary ``--file``s, unknown reducers and schemas, and bad
``--subject`` patterns. Each case runs through ``typer.testing.CliRunner`` on ``cli.main.app``;
a few run through a real ``world`` process as well (that is where ``cli.main.main``'s last-resort
handler and the interpreter's own error printing would show).

``validate PATH`` is left out of the file-content cases on purpose: for a file that is not AIR
its contract is every diagnostic, one per line, then a count (``test_cli.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from air import jsontext
from air.errors import JsonError
from cli.main import app
from world import World

from worldkit import COUNTER, COUNTER_AIR, EVENT, add

WORLD_BIN = Path(sys.executable).with_name("world")
runner = CliRunner()

BAD_JSON = '{"key": '
HUGE_INT = "1" + "0" * 4999
SURROGATE = '"\\ud800"'
DEEP = "[" * 10_000 + "]" * 10_000


def _event_json(key: str, n: str) -> str:
    return '{"key": ' + key + ', "op": {"$tag": "Add", "$value": ' + n + "}}"


def _dir_commands(d: str) -> list[tuple[str, list[str]]]:
    """Every command that takes a world directory, given ``d`` as that directory."""
    return [
        ("send", ["send", d, EVENT, json.dumps(add("a", 1))]),
        ("step", ["step", d]),
        ("run", ["run", d]),
        ("state", ["state", d, COUNTER, "--key", "a"]),
        ("info", ["info", d]),
        ("snapshot", ["snapshot", d]),
        ("replay", ["replay", d]),
        ("cells-ls", ["cells", "ls", d, COUNTER]),
        ("cells-show", ["cells", "show", d, COUNTER, "a"]),
        ("journal-tail", ["journal", "tail", d]),
        ("journal-verify", ["journal", "verify", d]),
    ]


def _cases() -> list[tuple[str, list[str]]]:
    cases: list[tuple[str, list[str]]] = []
    for where, d in [
        ("missing-dir", "{missing}"),
        ("file-as-dir", "{file}"),
        ("not-a-world", "{empty_dir}"),
    ]:
        cases += [(f"{where}/{name}", args) for name, args in _dir_commands(d)]
    cases += [
        ("missing-dir/init-air", ["init", "{new}", "--air", "{missing}"]),
        ("missing-dir/validate", ["validate", "{missing}"]),
        ("file-as-dir/init", ["init", "{file}", "--air", str(COUNTER_AIR)]),
        ("not-a-world/init-into-a-full-folder", ["init", "{full_dir}", "--air", str(COUNTER_AIR)]),
        ("not-a-world/init-air", ["init", "{new}", "--air", "{empty_dir}"]),
        ("not-a-world/validate", ["validate", "{empty_dir}"]),
        ("bad-json/send", ["send", "{w}", EVENT, BAD_JSON]),
        ("bad-json/state-key", ["state", "{w}", COUNTER, "--key", BAD_JSON]),
        ("bad-json/cells-show-key", ["cells", "show", "{w}", COUNTER, BAD_JSON]),
        ("bad-json/send-file", ["send", "{w}", EVENT, "--file", "{bad_json_file}"]),
        ("huge-int/send", ["send", "{w}", EVENT, _event_json('"a"', HUGE_INT)]),
        ("huge-int/state-key", ["state", "{w}", COUNTER, "--key", HUGE_INT]),
        ("huge-int/cells-show-key", ["cells", "show", "{w}", COUNTER, HUGE_INT]),
        ("huge-int/journal-tail-from", ["journal", "tail", "{w}", "--from", HUGE_INT]),
        ("surrogate/send", ["send", "{w}", EVENT, _event_json(SURROGATE, "1")]),
        ("surrogate/state-key", ["state", "{w}", COUNTER, "--key", SURROGATE]),
        ("surrogate/cells-show-key", ["cells", "show", "{w}", COUNTER, SURROGATE]),
        ("surrogate/send-file", ["send", "{w}", EVENT, "--file", "{surrogate_file}"]),
        ("deep/send", ["send", "{w}", EVENT, DEEP]),
        ("deep/state-key", ["state", "{w}", COUNTER, "--key", DEEP]),
        ("deep/cells-show-key", ["cells", "show", "{w}", COUNTER, DEEP]),
        ("deep/send-file", ["send", "{w}", EVENT, "--file", "{deep_file}"]),
        ("file/empty", ["send", "{w}", EVENT, "--file", "{empty_file}"]),
        ("file/blank", ["send", "{w}", EVENT, "--file", "{blank_file}"]),
        ("file/binary", ["send", "{w}", EVENT, "--file", "{binary_file}"]),
        ("file/missing", ["send", "{w}", EVENT, "--file", "{missing}"]),
        ("file/a-directory", ["send", "{w}", EVENT, "--file", "{empty_dir}"]),
        ("file/and-a-value", ["send", "{w}", EVENT, "{}", "--file", "{blank_file}"]),
        ("unknown-reducer/state", ["state", "{w}", "demo/Nope@1"]),
        ("unknown-reducer/cells-ls", ["cells", "ls", "{w}", "demo/Nope@1"]),
        ("unknown-reducer/cells-show", ["cells", "show", "{w}", "demo/Nope@1", "a"]),
        ("keyed-reducer-without-key/state", ["state", "{w}", COUNTER]),
        ("unknown-schema/send", ["send", "{w}", "demo/Nope@1", "{}"]),
        ("unknown-schema/send-file", ["send", "{w}", "demo/Nope@1", "--file", "{event_file}"]),
        ("bad-subject/relative", ["journal", "tail", "{w}", "--subject", "world/event/**"]),
        (
            "bad-subject/double-star-inside",
            ["journal", "tail", "{w}", "--subject", "/world/**/step"],
        ),
        ("bad-subject/empty-segment", ["journal", "tail", "{w}", "--subject", "/world//step"]),
        ("huge-int/step-ticks", ["step", "{w}", "--ticks", HUGE_INT]),
        ("markup-in-name/send-schema", ["send", "{w}", "[/x]", "{}"]),
        ("markup-in-name/state-reducer", ["state", "{w}", "[/red]"]),
    ]
    return cases


CASES = _cases()


def _params(names: set[str] | None = None) -> list[object]:
    return [
        pytest.param(
            args,
            id=name,
        )
        for name, args in CASES
        if names is None or name in names
    ]


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The paths the table's placeholders stand for (the world is shared: no case changes it)."""
    root = tmp_path_factory.mktemp("malformed")
    with World.create(root / "w", COUNTER_AIR) as world:
        world.send(EVENT, add("a", 1))
        world.run_until_idle()
    (root / "file").write_text("not a directory\n")
    (root / "empty_dir").mkdir()
    (root / "full_dir").mkdir()
    (root / "full_dir" / "notes.txt").write_text("mine\n")
    files = {
        "bad_json_file": json.dumps(add("a", 1)) + "\n" + BAD_JSON + "\n",
        "surrogate_file": _event_json(SURROGATE, "1") + "\n",
        "deep_file": DEEP + "\n",
        "empty_file": "",
        "blank_file": "  \n\n\t\n",
        "event_file": json.dumps({}) + "\n",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    (root / "binary_file").write_bytes(bytes(range(256)) * 4)
    names = ["w", "file", "empty_dir", "full_dir", "binary_file", *files]
    found = {name: str(root / name) for name in names}
    return found | {"missing": str(root / "missing"), "new": str(root / "new")}


def _fill(args: list[str], places: dict[str, str]) -> list[str]:
    return [places[a[1:-1]] if a.startswith("{") and a[1:-1] in places else a for a in args]


def _assert_one_error_line(code: int, out: str, err: str) -> None:
    assert code == 1
    assert "Traceback" not in out + err
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error:"), lines[0]


@pytest.mark.parametrize("args", _params())
def test_malformed_input_exits_1_with_one_error_line(
    args: list[str], places: dict[str, str]
) -> None:
    result = runner.invoke(app, _fill(args, places))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    _assert_one_error_line(result.exit_code, result.stdout, result.stderr)
    assert not Path(places["new"]).exists(), "a failed init left something behind"


SUBPROCESS_CASES = {
    "missing-dir/info",
    "not-a-world/run",
    "bad-json/send",
    "surrogate/state-key",
    "deep/send",
    "file/binary",
    "unknown-schema/send",
    "bad-subject/relative",
    "markup-in-name/send-schema",
}


@pytest.mark.parametrize("args", _params(SUBPROCESS_CASES))
def test_malformed_input_through_a_real_world_process(
    args: list[str], places: dict[str, str]
) -> None:
    proc = subprocess.run(
        [str(WORLD_BIN), *_fill(args, places)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    _assert_one_error_line(proc.returncode, proc.stdout, proc.stderr)


def test_an_error_line_keeps_the_error_code(places: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(JsonError) as bad_json:
        jsontext.loads(BAD_JSON, source="VALUE")
    sent = runner.invoke(app, ["send", places["w"], EVENT, BAD_JSON])
    bad_air = tmp_path / "bad.air.json"
    bad_air.write_text(json.dumps([{"$kind": "defschema", "name": "a/b@1", "type": "float"}]))
    validated = runner.invoke(app, ["validate", str(bad_air), "--json"])
    codes = [d["code"] for d in json.loads(validated.stdout)["diagnostics"]]
    validated = runner.invoke(app, ["validate", str(bad_air)])
    assert f"[{bad_json.value.code}]" in sent.stderr
    assert all(f"[{code}]" in validated.stderr for code in codes)
