#!/usr/bin/env bash
# One command for everything CI checks: install into .venv (if needed), then format check,
# lint, types and tests. Usage: bash tools/check.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/mypy
# The main suite, then the long variants (-m long: the wheel installed in a fresh venv, the
# native tests under AddressSanitizer), so the main suite's time stays what a change costs.
.venv/bin/python -m pytest -n 2 -m "not long" "$@"
.venv/bin/python -m pytest -n 2 -m long "$@" || test $? -eq 5  # 5: none selected by "$@"
