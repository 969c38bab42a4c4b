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

The native step path (``kernel/native/*.c``, see ``kernel/native/__init__.py``) is a C extension built
here too. It is optional by design: where no compiler (or no Python headers) is found, the
build prints one line, ``notice: native step path not built (...); using pure Python``, and
installs the package without it; ``kernel.native.available()`` is then False and every native
function runs its pure-Python reference. ``WORLD_NATIVE_CFLAGS`` adds compiler flags (the
AddressSanitizer test builds with it); ``WORLD_NATIVE_BUILD=0`` skips the extension.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
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


NATIVE = Extension(
    "kernel.native._native",
    sources=[
        "kernel/native/module.c",
        "kernel/native/cbor.c",
        "kernel/native/abi.c",
        "kernel/native/wasm.c",
        "kernel/native/norm.c",
        "kernel/native/shard.c",
    ],
    depends=["kernel/native/native.h"],
    extra_compile_args=["-O2", "-std=c11", *os.environ.get("WORLD_NATIVE_CFLAGS", "").split()],
    extra_link_args=os.environ.get("WORLD_NATIVE_CFLAGS", "").split(),
    optional=True,
)


class OptionalBuildExt(build_ext):
    """``build_ext`` that never fails the install: without a compiler it says so once."""

    def run(self) -> None:
        if os.environ.get("WORLD_NATIVE_BUILD", "1") == "0":
            self._notice("WORLD_NATIVE_BUILD=0")
            return
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers: CCompilerError, PlatformError, ...
            self._notice(f"{type(exc).__name__}: {exc}".splitlines()[0])

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._notice(f"{type(exc).__name__}: {exc}".splitlines()[0])

    @staticmethod
    def _notice(reason: str) -> None:
        print(f"notice: native step path not built ({reason}); using pure Python", file=sys.stderr)


setup(
    cmdclass={"build_py": BuildPyWithBundle, "build_ext": OptionalBuildExt},
    ext_modules=[NATIVE],
)
