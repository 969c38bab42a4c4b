"""A plain (non-editable) install works outside the checkout: the wheel carries the example
worlds and the SDK header (setup.py's build step copies manifests/ and reducers/ into
``world/_bundle``), and ``world`` drives them from an empty folder.

Long (marked ``long``, run after the main suite by ``tools/check.sh``; about 30 s here): the module fixture builds the wheel from a copy of the
checkout (so no ``build/`` folder appears in the tree and two runs cannot race on it), makes a
fresh venv in tmp_path and installs the wheel with its dependencies from the package index; one
venv serves the module, and the user's path is one test so that xdist never builds two.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import httpx
import pytest

from world import sdk

ROOT = Path(__file__).resolve().parents[2]
EVENT = "demo/CounterEvent@1"
REDUCER = "demo/Counter@1"
PIP_QUIET = ("--disable-pip-version-check", "-q")

_NOT_SOURCE = shutil.ignore_patterns(
    ".venv",
    ".git",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
    ".world-cache",
    "_bundle",
)


def _run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{command}: {result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the venv, the wheel): the wheel built from a copy of this checkout, installed."""
    base = tmp_path_factory.mktemp("package")
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    wheels = base / "wheels"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *PIP_QUIET, "-w", str(wheels), "."],
        cwd=source,
    )
    (wheel,) = wheels.glob("world_kernel-*.whl")
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", *PIP_QUIET, str(wheel)])
    return venv, wheel


def test_every_package_of_the_tree_is_in_the_wheel_list() -> None:
    """A package left out of ``[tool.setuptools] packages`` is missing from every plain
    install (``world.gov`` and ``world.operate`` once were: `world upgrade` and `world runs`
    failed there with ``ModuleNotFoundError``)."""
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = set()
    for top in ("air", "kernel", "world", "cli"):
        for init in (ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT).parts
            if "_bundle" not in parts:
                found.add(".".join(parts))
    assert found == listed


def test_the_checkout_is_read_directly_when_nothing_is_bundled() -> None:
    if (ROOT / "world" / "_bundle").exists():
        pytest.skip("this checkout holds a world/_bundle from an in-place build")
    assert sdk.bundle_root() == ROOT
    assert sdk.sdk_include_dir() == ROOT / "reducers" / "sdk"


@pytest.mark.long
def test_a_plain_install_runs_the_examples_from_an_empty_folder(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    venv, wheel = installed
    here = tmp_path / "empty"
    here.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["COLUMNS"] = "250"  # rich wraps at 80 columns when not on a terminal

    def world(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(venv / "bin" / "world"), *args],
            cwd=here,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == code, f"world {' '.join(args)}: {result.stderr}"
        return result

    # The wheel carries every example, its modules and the header, byte for byte.
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for path in [*ROOT.glob("manifests/**/*.air.json"), *ROOT.glob("reducers/*/*.wasm")]:
            inside = f"world/_bundle/{path.relative_to(ROOT).as_posix()}"
            assert archive.read(inside) == path.read_bytes()
        assert "world/_bundle/reducers/sdk/world.h" in names

    # The installed package answers, not the checkout.
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    # The wheel was built here, with gcc: the native step path is in it.
    assert world("--version").stdout.strip() == f"world-kernel {version}; native step path: on"
    include = Path(world("sdk", "include").stdout.strip())
    assert include.is_relative_to(venv)
    assert (include / "world.h").read_bytes() == (ROOT / "reducers/sdk/world.h").read_bytes()

    demo = world("demo").stdout
    assert "ran 14 steps until idle" in demo
    assert "identical outputs and state" in demo
    listed = json.loads(world("examples", "--json").stdout)["examples"]
    assert {"counter", "order", "timer"} <= {e["name"] for e in listed}

    # Start from an example, run it, read its state.
    assert "copied example 'counter'" in world("examples", "copy", "counter", "./c").stdout
    assert (here / "c/reducers/counter/counter.c").is_file()
    world("init", "./w", "--air", "./c")
    for value in (3, 4):
        event = {"key": "order-1", "op": {"$tag": "Add", "$value": value}}
        world("send", "./w", EVENT, json.dumps(event))
    assert json.loads(world("run", "./w", "--until-idle", "--json").stdout)["steps"] == 2
    state = world("state", "./w", REDUCER, "--key", "order-1", "--json").stdout
    assert json.loads(state)["state"] == {"count": 7, "events": 2}
    world("init", "./from-name", "--example", "counter")

    # The built-in reducers' code comes from the wheel (<builtin>/ paths): a workspace world runs.
    world("init", "./ws", "--example", "agentos-09-workspaces")
    world(
        "send",
        "./ws",
        "demo/WorkspaceEvent@1",
        '{"Start": {"workspaces": ["alpha"], "owner": "o"}}',
    )
    world("run", "./ws", "--until-idle")
    history = world("state", "./ws", "sys/Workspace@1", "--key", "alpha", "--json").stdout
    assert json.loads(history)["state"]["latest"] == 1

    # The inspector's templates are in the wheel: its pages render from the install.
    inspector = subprocess.Popen(
        [str(venv / "bin" / "world"), "ui", "./w", "--json"],
        cwd=here,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert inspector.stdout is not None
        url = json.loads(inspector.stdout.readline())["url"]
        base = url.split("/?")[0]
        with httpx.Client(timeout=60) as client:
            assert client.get(url).status_code == 200
            cell = client.get(f"{base}/cell", params={"reducer": REDUCER, "key": "order-1"})
        assert cell.status_code == 200
        assert "Timeline" in cell.text
    finally:
        os.killpg(inspector.pid, signal.SIGINT)
        inspector.communicate(timeout=60)

    # Without the [sdk] extra, a build says which command installs the toolchain.
    refused = world("reducer", "build", "c/reducers/counter/counter.c", code=1).stderr.strip()
    assert "\n" not in refused
    assert refused.endswith(f"{venv / 'bin' / 'python'} -m pip install 'world-kernel[sdk]'")
