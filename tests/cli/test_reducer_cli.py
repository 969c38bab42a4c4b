"""``world reducer new|build|check``, ``world sdk include`` and ``world examples`` as a user
drives them: scaffold a reducer, build it, wire it into a world and run events through it;
reproducible bytes; refusals as one line and exit 1.

The build tests need the pinned toolchain (``ziglang``, in the ``sdk`` and ``dev`` extras) and
are skipped without it; the rest run anywhere.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
import wasmtime
from typer.testing import CliRunner

from air.errors import UnknownName
from cli.main import app
from world import sdk

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

needs_toolchain = pytest.mark.skipif(
    sdk._ziglang_version() is None, reason="the reducer toolchain (ziglang) is not installed"
)

EXPORT = "#define EXPORT(name) __attribute__((export_name(name)))\n"


def world_cli(*args: object) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def _one_line(stderr: str) -> str:
    assert stderr.startswith("error: ")
    assert "\n" not in stderr.strip(), stderr
    return stderr.strip()


def _build(source: Path, *extra: object) -> dict[str, object]:
    code, out, err = world_cli("reducer", "build", source, "--json", *extra)
    assert code == 0, err
    return json.loads(out)


@needs_toolchain
def test_a_scaffolded_reducer_builds_and_runs_events_in_a_world(tmp_path: Path) -> None:
    folder = tmp_path / "tally"
    code, out, _ = world_cli("reducer", "new", "tally", folder)
    assert code == 0
    assert sorted(p.name for p in folder.iterdir()) == ["tally.air.json", "tally.c"]
    assert "WORLD_CELL_REDUCER(tally_step, tally_key)" in (folder / "tally.c").read_text()
    built = _build(folder / "tally.c")
    assert built["wasm"] == str(folder / "tally.wasm")
    assert world_cli("validate", folder)[0] == 0

    w = tmp_path / "w"
    assert world_cli("init", w, "--air", folder)[0] == 0
    events = tmp_path / "events.jsonl"
    events.write_text(
        '{"key": "a", "amount": 2}\n{"key": "b", "amount": 10}\n{"key": "a", "amount": 5}\n'
    )
    assert world_cli("send", w, "app/TallyEvent@1", "--file", events)[0] == 0
    code, out, _ = world_cli("run", w, "--until-idle", "--json")
    assert (code, json.loads(out)["steps"]) == (0, 3)
    code, out, _ = world_cli("state", w, "app/Tally@1", "--key", "a", "--json")
    assert json.loads(out)["state"] == {"total": 7, "events": 2}
    code, out, _ = world_cli("state", w, "app/Tally@1", "--key", "b", "--json")
    assert json.loads(out)["state"] == {"total": 10, "events": 1}


@needs_toolchain
def test_building_the_same_source_twice_anywhere_gives_the_same_bytes(tmp_path: Path) -> None:
    world_cli("reducer", "new", "tally", tmp_path / "one")
    shutil.copytree(tmp_path / "one", tmp_path / "elsewhere" / "deeper" / "two")
    first = _build(tmp_path / "one" / "tally.c", "-o", tmp_path / "a.wasm")
    again = _build(tmp_path / "one" / "tally.c", "-o", tmp_path / "b.wasm")
    moved = _build(tmp_path / "elsewhere" / "deeper" / "two" / "tally.c")
    assert (tmp_path / "a.wasm").read_bytes() == (tmp_path / "b.wasm").read_bytes()
    assert first["wasm_hash"] == again["wasm_hash"] == moved["wasm_hash"]


@needs_toolchain
def test_a_copied_example_rebuilds_to_the_bundled_bytes(tmp_path: Path) -> None:
    assert world_cli("examples", "copy", "counter", tmp_path / "c")[0] == 0
    source = tmp_path / "c" / "reducers" / "counter" / "counter.c"
    _build(source, "-o", tmp_path / "rebuilt.wasm")
    bundled = sdk.bundle_root() / "reducers" / "counter" / "counter.wasm"
    assert (tmp_path / "rebuilt.wasm").read_bytes() == bundled.read_bytes()


@needs_toolchain
@pytest.mark.parametrize(
    ("source", "error_code", "reason"),
    [
        pytest.param(
            '__attribute__((import_module("env"), import_name("host_fn"))) int host_fn(int);\n'
            'EXPORT("alloc") int a(int n) { return n; }\n'
            'EXPORT("step") void s(int r, int p, int n) { host_fn(r + p + n); }\n',
            "imports",
            "bad: reducers import nothing; found env::host_fn",
            id="an_import",
        ),
        pytest.param(
            'EXPORT("step") int s(int p) { return undeclared_host_fn(p); }\n',
            "compile",
            "does not compile: bad.c:2:",
            id="an_undeclared_extern_function",
        ),
        pytest.param(
            'extern int host_fn(int);\nEXPORT("step") int s(int p) { return host_fn(p); }\n',
            "compile",
            "undefined symbol: host_fn",
            id="an_undefined_extern_function",
        ),
        pytest.param(
            'EXPORT("alloc") int a(int n) { return n; }\n',
            "export_missing",
            "bad: no export named 'step'",
            id="a_missing_export",
        ),
    ],
)
def test_a_source_that_breaks_the_abi_is_refused_in_one_line(
    tmp_path: Path, source: str, error_code: str, reason: str
) -> None:
    (tmp_path / "bad.c").write_text(EXPORT + source)
    code, _, err = world_cli("reducer", "build", tmp_path / "bad.c")
    assert code == 1
    assert reason in _one_line(err)
    assert not (tmp_path / "bad.wasm").exists()  # a refused module is not written
    code, out, _ = world_cli("reducer", "build", tmp_path / "bad.c", "--json")
    refused = json.loads(out)
    assert (code, refused["code"], refused["fields"]["reducer"]) == (1, error_code, "bad")


def test_without_the_toolchain_build_says_which_command_installs_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sdk, "_ziglang_version", lambda: None)
    (tmp_path / "r.c").write_text("int x;\n")
    code, _, err = world_cli("reducer", "build", tmp_path / "r.c")
    assert code == 1
    assert _one_line(err).endswith(f"install it with: {sdk.toolchain_install_command()}")
    assert "-m pip install 'world-kernel[sdk]'" in err


def test_another_toolchain_version_is_refused_with_the_pinned_one(tmp_path, monkeypatch):
    monkeypatch.setattr(sdk, "_ziglang_version", lambda: "0.99.0")
    (tmp_path / "r.c").write_text("int x;\n")
    code, _, err = world_cli("reducer", "build", tmp_path / "r.c")
    assert code == 1
    assert f"'ziglang=={sdk.ZIGLANG_VERSION}'" in _one_line(err)


def test_the_toolchain_pin_is_the_same_in_the_extras_and_the_sdk() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    pin = f"ziglang=={sdk.ZIGLANG_VERSION}"
    assert pin in extras["sdk"]
    assert pin in extras["dev"]


_GOOD_WAT = """(module (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) i32.const 0)
  (func (export "step") (param i32 i32) (result i32 i32) i32.const 0 i32.const 0))"""


def test_check_accepts_a_module_built_by_another_toolchain(tmp_path: Path) -> None:
    wasm = tmp_path / "elsewhere.wasm"
    wasm.write_bytes(bytes(wasmtime.wat2wasm(_GOOD_WAT)))
    code, out, _ = world_cli("reducer", "check", wasm, "--json")
    assert code == 0
    assert json.loads(out)["step_abi"] == "multi_value"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        pytest.param(
            _GOOD_WAT.replace("(module", '(module (import "env" "f" (func))'),
            "reducers import nothing; found env::f",
            id="an_import",
        ),
        pytest.param(
            _GOOD_WAT.replace('(export "alloc")', ""),
            "no export named 'alloc'",
            id="a_missing_export",
        ),
        pytest.param(None, "missing the \\0asm magic number", id="not_wasm_at_all"),
    ],
)
def test_check_refuses_a_module_off_the_abi_in_one_line(tmp_path, content, reason) -> None:
    wasm = tmp_path / "m.wasm"
    wasm.write_bytes(bytes(wasmtime.wat2wasm(content)) if content else b"(module)")
    code, _, err = world_cli("reducer", "check", wasm)
    assert code == 1
    assert reason in _one_line(err)


def test_sdk_include_prints_the_folder_of_the_header() -> None:
    code, out, _ = world_cli("sdk", "include")
    assert code == 0
    assert (Path(out.strip()) / "world.h").is_file()


@pytest.mark.parametrize("name", ["Bad-Name", "9lives", "cbor_map", "world"])
def test_reducer_new_refuses_a_name_that_is_not_a_plain_c_prefix(tmp_path, name) -> None:
    code, _, err = world_cli("reducer", "new", name, tmp_path / "x")
    assert code == 1
    assert "InvalidArgument: NAME" in _one_line(err)
    assert not (tmp_path / "x").exists()


def test_reducer_new_refuses_to_overwrite_a_file(tmp_path: Path) -> None:
    assert world_cli("reducer", "new", "ok", tmp_path / "y")[0] == 0
    code, _, err = world_cli("reducer", "new", "ok", tmp_path / "y")
    assert code == 1
    assert "not overwriting" in _one_line(err)


def test_examples_lists_every_bundled_world_and_init_takes_one_by_name(tmp_path: Path) -> None:
    code, out, _ = world_cli("examples", "--json")
    assert code == 0
    names = [e["name"] for e in json.loads(out)["examples"]]
    assert names == sorted(p.name for p in (ROOT / "manifests").iterdir() if p.is_dir())
    assert world_cli("init", tmp_path / "w", "--example", "counter")[0] == 0
    code, _, err = world_cli("init", tmp_path / "w2", "--example", "nope")
    assert code == 1
    assert "UnknownName: unknown example nope" in _one_line(err)
    with pytest.raises(UnknownName) as info:
        sdk.example_path("nope")
    assert (info.value.kind, info.value.name) == ("example", "nope")
    assert "counter" in info.value.known
    code, _, err = world_cli("init", tmp_path / "w3")
    assert (code, _one_line(err)) == (1, "error: give exactly one of --air PATH or --example NAME")


@pytest.mark.parametrize("name", sdk.example_names())
def test_every_example_copy_validates_on_its_own(tmp_path: Path, name: str) -> None:
    dest = tmp_path / "copy"
    assert world_cli("examples", "copy", name, dest)[0] == 0
    assert all(not p.is_symlink() for p in dest.rglob("*"))
    code, out, _ = world_cli("validate", dest, "--json")
    assert code == 0
    original = json.loads(world_cli("validate", ROOT / "manifests" / name, "--json")[1])
    assert json.loads(out)["manifest_hash"] == original["manifest_hash"]


def test_examples_copy_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    code, _, err = world_cli("examples", "copy", "counter", tmp_path)
    assert code == 1
    assert "not an empty folder" in _one_line(err)


def test_version_names_the_package() -> None:
    code, out, _ = world_cli("--version")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert code == 0
    assert out.startswith(f"world-kernel {version}; native step path: ")
    from kernel import native

    assert ("not built" in out) == (not native.available())
