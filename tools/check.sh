#!/usr/bin/env bash
# One command for what a change must pass: install into .venv (if needed), then format check,
# lint, types and the main suite. Usage: bash tools/check.sh [--long] [extra pytest args]
#
# --long runs the long variants instead (-m long: the wheel installed in a fresh venv, the
# native tests under AddressSanitizer, the crash and power-loss matrices at every point, the
# longer fuzz run). .ci/run runs both, the main suite first.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
# The suite starts hundreds of `world` processes and pytest rewrites every test module: with
# bytecode caching off (PYTHONDONTWRITEBYTECODE, set on some machines) each one compiles from
# source again, which costs the main suite about a fifth of its time.
unset PYTHONDONTWRITEBYTECODE
if [ "${1:-}" = "--long" ]; then
  shift
  .venv/bin/python -m pytest -n 2 -m long "$@" || test $? -eq 5  # 5: none selected by "$@"
  exit 0
fi
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest -n 2 -m "not long" "$@"
