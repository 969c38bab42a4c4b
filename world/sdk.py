"""The reducer SDK as a library: where the bundled examples and the C header are, how a C reducer
is built into a reproducible, import-free wasm32 module, and the ABI checks (SPEC section 5).

``world reducer build|check``, ``world sdk include``, ``world examples`` and the repository's
``tools/build_reducers.py`` are thin users of this module; the flags live here and nowhere else.

Where the files are. The repository's top-level ``manifests/`` and ``reducers/`` are the only
copy to edit. A wheel carries them as ``world/_bundle/manifests`` and ``world/_bundle/reducers``
(copied by the build step in ``setup.py``), in the same layout, so an example's relative
``wasm`` path (``../../reducers/counter/counter.wasm``) holds inside the package too. A checkout
or an editable install has no ``_bundle`` (nothing is copied) and reads the checkout's folders
next to this package. ``bundle_root`` prefers the package's copy, so an installed wheel never
reads some checkout that happens to be on disk.

Reproducibility. The toolchain is pinned (PyPI ``ziglang``, run as ``sys.executable -m ziglang
cc``; ``build`` refuses another version rather than give other bytes). The compiler runs in a
root folder on a relative source path, with ``-ffile-prefix-map`` mapping that root to ``.``
and the SDK folder to ``world-sdk``; ``-s`` strips debug info and the producers section, zig
links with ``--build-id=none`` and refuses ``__DATE__``/``__TIME__`` (``-Werror=date-time``).
The bytes therefore depend on the source, the SDK and the flags only: not on the machine, the
folder, or whether the SDK came from a checkout or a wheel. The module is compiled into a
temporary folder and written to its destination only after it passes the ABI checks, so a
refused build leaves nothing behind.

ABI checks. ``check_abi`` is ``world._runner.check_module``, the one reducer check ``world init``
and ``upgrade propose`` refuse with too (the codes and details are the host's, listed in
``kernel.wasm._host``): a core wasm module with no imports, exports ``memory``, ``alloc``
``(i32) -> i32`` and ``step`` ``(i32, i32) -> (i32, i32)`` or ``(i32, i32, i32) -> ()``,
initial memory and table within the default ``HostLimits``, compiled by the kernel's
deterministic engine, and a start function (if any) that returns within a step's fuel. On top
of it, and only here, exports other than those three are refused (code ``exports``), which
is stricter than a world: a world runs a module with extra exports (rustc's ``__heap_base``,
``__data_end``), so ``init`` does not refuse them. What none of this checks: how the steps
behave, their fuel or memory use; those are the host's limits at run time.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import blake3

from air.errors import InputFileError, UnknownName
from kernel.errors import ReducerLoadError
from kernel.wasm import inspect_wasm
from world._runner import check_module
from world.errors import BuildError

__all__ = [
    "CFLAGS",
    "EXAMPLE_MODULES_FILE",
    "STACK_SIZE_BYTES",
    "ZIGLANG_VERSION",
    "Built",
    "build",
    "bundle_root",
    "check_abi",
    "compiler_command",
    "example_modules",
    "example_names",
    "example_path",
    "sdk_include_dir",
    "toolchain_install_command",
]

ZIGLANG_VERSION: Final = "0.17.1"  # the same pin as the [sdk] and [dev] extras in pyproject.toml

# 64 KiB instead of zig's 1 MiB default: the initial memory (stack + data) is allocated and
# zeroed on every step because the host instantiates afresh; the SDK's stack use is small and
# bounded (see reducers/sdk/world.h). zig cc already links with --stack-first (and rejects the
# flag if repeated), so a stack overflow runs below address 0 and traps.
STACK_SIZE_BYTES: Final = 64 * 1024

# Every flag but the per-build paths (-ffile-prefix-map, -I, -o and the source).
CFLAGS: Final[tuple[str, ...]] = (
    "--target=wasm32-freestanding",
    "-mcpu=lime1",  # pinned feature set; bulk-memory-opt lowers memcpy/memset without libc
    "-std=c11",
    "-O2",
    "-nostdlib",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-s",
    "-Wl,--no-entry",
    f"-Wl,-z,stack-size={STACK_SIZE_BYTES}",
)
SDK_PREFIX: Final = "world-sdk"  # what the SDK folder's path becomes inside a build

_PACKAGE_DIR: Final = Path(__file__).resolve().parent
_BUNDLE_DIR: Final = _PACKAGE_DIR / "_bundle"

_ABI_EXPORTS: Final = ("alloc", "memory", "step")


# --- where the bundled files are -----------------------------------------------------------------


def bundle_root() -> Path:
    """The folder holding ``manifests/`` and ``reducers/``: the package's copy, else the
    checkout this package runs from (an editable install)."""
    for root in (_BUNDLE_DIR, _PACKAGE_DIR.parent):
        if (root / "manifests").is_dir() and (root / "reducers" / "sdk").is_dir():
            return root
    raise InputFileError(
        str(_BUNDLE_DIR),
        "the bundled examples and SDK are missing, and no checkout around it holds manifests/ "
        "and reducers/ (this install was built without them)",
    )


def sdk_include_dir() -> Path:
    """The folder holding ``world.h`` (pass it to a C compiler with ``-I``)."""
    return bundle_root() / "reducers" / "sdk"


def example_names() -> list[str]:
    """The bundled example worlds, by folder name."""
    manifests = bundle_root() / "manifests"
    return sorted(p.name for p in manifests.iterdir() if any(p.glob("*.air.json")))


def example_path(name: str) -> Path:
    """The AIR folder of the bundled example ``name``."""
    names = example_names()
    if name not in names:
        raise UnknownName("example", name, names)
    return bundle_root() / "manifests" / name


EXAMPLE_MODULES_FILE: Final = "modules.json"


def example_modules(name: str) -> dict[str, Path]:
    """The wasm each module of the bundled example ``name`` is bound to when its AIR names
    none (AgentOS's AIR, copied unchanged, names no ``wasm``): the example's ``modules.json``,
    ``{"<module>": "<wasm path relative to the example folder>"}``, read as module -> absolute
    path; ``{}`` without the file. ``world init --example`` binds them as ``--module`` does."""
    import json

    folder = example_path(name)
    file = folder / EXAMPLE_MODULES_FILE
    if not file.is_file():
        return {}
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputFileError(str(file), f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise InputFileError(str(file), 'expected {"<module>": "<path to its .wasm>"}')
    return {str(module): (folder / wasm).resolve() for module, wasm in doc.items()}


# --- building -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    """One built module: where it is, and what it is."""

    source: Path
    wasm_path: Path
    size_bytes: int
    content_hash: str


def toolchain_install_command() -> str:
    """The one command that installs the pinned toolchain into this interpreter."""
    return f"{shlex.quote(sys.executable)} -m pip install 'world-kernel[sdk]'"


def _ziglang_version() -> str | None:
    """The installed toolchain's version, or None if ``python -m ziglang`` would not run."""
    if importlib.util.find_spec("ziglang") is None:
        return None
    return importlib.metadata.version("ziglang")


def _require_toolchain(reducer: str) -> None:
    version = _ziglang_version()
    if version is None:
        raise BuildError(
            reducer,
            "toolchain",
            f"the reducer toolchain (ziglang) is not installed; install it with: "
            f"{toolchain_install_command()}",
        )
    if version != ZIGLANG_VERSION:
        raise BuildError(
            reducer,
            "toolchain",
            f"ziglang {version} is installed but builds are pinned to {ZIGLANG_VERSION} "
            f"(other versions give other bytes); install it with: "
            f"{shlex.quote(sys.executable)} -m pip install 'ziglang=={ZIGLANG_VERSION}'",
        )


def _under(path: Path, root: Path) -> str | None:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return None


def compiler_command(
    source: Path, output: Path, *, root: Path, sdk_dir: Path | None = None
) -> list[str]:
    """The exact compiler invocation, to run with ``root`` as the working directory.

    ``source`` must be inside ``root``. The SDK folder is named relative to ``root`` when it is
    inside it (the repository build), else by its absolute path, mapped to ``world-sdk``."""
    root = root.resolve()
    sdk = (sdk_dir or sdk_include_dir()).resolve()
    relative_source = _under(source.resolve(), root)
    if relative_source is None:
        raise BuildError(source.stem, "source", f"{source} is not inside {root}")
    relative_sdk = _under(sdk, root)
    sdk_flags = (
        [f"-I{relative_sdk}"]
        if relative_sdk is not None
        else [f"-ffile-prefix-map={sdk}={SDK_PREFIX}", f"-I{sdk}"]
    )
    return [
        sys.executable,
        "-m",
        "ziglang",
        "cc",
        *CFLAGS,
        f"-ffile-prefix-map={root}=.",
        *sdk_flags,
        "-o",
        str(output.resolve()),
        relative_source,
    ]


def build(
    source: Path, output: Path, *, root: Path | None = None, sdk_dir: Path | None = None
) -> Built:
    """Compile the C reducer ``source`` into ``output`` and check it against the ABI.

    ``root`` is the compiler's working directory (default: the source's folder); ``sdk_dir``
    the folder of ``world.h`` (default: the bundled SDK). ``output`` is written only if the
    module passes the checks."""
    name = source.stem
    if not source.is_file():
        raise BuildError(name, "source", f"no such file: {source}")
    _require_toolchain(name)
    root = (root or source.parent).resolve()
    with tempfile.TemporaryDirectory(prefix="world-reducer-build-") as tmp:
        temp_output = Path(tmp) / f"{name}.wasm"
        command = compiler_command(source, temp_output, root=root, sdk_dir=sdk_dir)
        result = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not temp_output.is_file():
            raise BuildError(name, "compile", result.stderr.strip() or "the compiler failed")
        wasm_bytes = temp_output.read_bytes()
    check_abi(name, wasm_bytes)
    _write(output, wasm_bytes)
    digest = "blake3:" + blake3.blake3(wasm_bytes).hexdigest()
    return Built(source, output, len(wasm_bytes), digest)


def _write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one rename (a reader never sees half a module)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temp.write_bytes(data)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


# --- the ABI checks -------------------------------------------------------------------------------


def check_abi(name: str, wasm_bytes: bytes | bytearray) -> None:
    """Raise ``BuildError`` (the reducer check's code and detail) unless a world runs the
    module, and (``exports``) if it exports more than ``memory``, ``alloc`` and ``step``."""
    try:
        check_module(wasm_bytes)
    except ReducerLoadError as exc:
        raise BuildError(name, exc.code, exc.detail) from exc
    extra = sorted(e for e in inspect_wasm(bytes(wasm_bytes)).exports if e not in _ABI_EXPORTS)
    if extra:
        detail = f"exports must be memory, alloc, step: unexpected {', '.join(extra)}"
        raise BuildError(name, "exports", detail)
