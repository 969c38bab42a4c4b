"""The one build step pyproject.toml cannot declare: bundle the examples and the reducer SDK.

The repository's top-level ``manifests/`` and ``reducers/`` are the only copy to edit. Building a
wheel (``pip install .``, ``pip wheel .``, ``python -m build``) copies both into the package as
``world/_bundle/manifests`` and ``world/_bundle/reducers``, keeping their layout, so the
examples' relative ``wasm`` paths (``../../reducers/counter/counter.wasm``) hold in the package;
``world.sdk.bundle_root`` finds them there. An editable install (``pip install -e .``) copies
nothing: ``world.sdk`` reads the checkout's folders next to the ``world`` package.

Rejected: a committed copy inside ``world/`` (two copies to keep in step), symlinks (wheels do
not carry them), and ``package_data`` (it only takes files inside a package folder). Everything
else is in ``pyproject.toml``; the sdist carries the two folders through ``MANIFEST.in``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLED = ("manifests", "reducers")
BUNDLE = Path("world") / "_bundle"


class BuildPyWithBundle(build_py):
    """``build_py`` plus a fresh copy of ``manifests/`` and ``reducers/`` into the build."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / BUNDLE
        shutil.rmtree(target, ignore_errors=True)  # no stale files from an earlier build
        for name in BUNDLED:
            shutil.copytree(
                ROOT / name,
                target / name,
                ignore=shutil.ignore_patterns("__pycache__", "*.py[cod]", ".*"),
            )


setup(cmdclass={"build_py": BuildPyWithBundle})
