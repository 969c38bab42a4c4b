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
# What pyproject.toml's requires-python says, checked in one line before anything is installed
# (of an existing .venv too: it may have been made by an older interpreter).
for candidate in "$PY" .venv/bin/python; do
  if [ "$candidate" = .venv/bin/python ] && [ ! -x .venv/bin/python ]; then continue; fi
  "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11, 2))' 2>/dev/null || {
    echo "tools/check.sh: needs Python 3.11.2 or newer; $candidate is $("$candidate" -V 2>&1) (set PYTHON=...)" >&2
    exit 1
  }
done
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
# The suite starts hundreds of `world` processes and pytest rewrites every test module: with
# bytecode caching off (PYTHONDONTWRITEBYTECODE, set on some machines) each one compiles from
# source again, which costs the main suite about a fifth of its time.
unset PYTHONDONTWRITEBYTECODE
# The tests' worlds are real files, written with fsync (creating one is ~130 fsyncs): ~0.1 s on
# this kind of virtual disk when idle, 0.4 s beside another suite, 6 ms on tmpfs. No test's
# promise rests on the disk's fsync (process death is real kills, power loss the fake file layer
# of tests/powerloss.py), so the scratch folders go to a tmpfs when /dev/shm is one with room
# (8 GiB free), else where pytest puts them. WORLD_TEST_BASETEMP=DIR chooses; "default" opts out.
BASETEMP=${WORLD_TEST_BASETEMP:-}
if [ -z "$BASETEMP" ] && df --output=fstype,avail -k /dev/shm 2>/dev/null \
    | awk 'NR == 2 && $1 == "tmpfs" && $2 > 8 * 1024 * 1024 { ok = 1 } END { exit !ok }'; then
  BASETEMP=$(mktemp -d /dev/shm/world-tests.XXXXXX)
  trap 'rm -rf "$BASETEMP"' EXIT
fi
TEMP_ARGS=()
if [ -n "$BASETEMP" ] && [ "$BASETEMP" != default ]; then
  TEMP_ARGS=(--basetemp "$BASETEMP/t")
fi
if [ "${1:-}" = "--long" ]; then
  shift
  .venv/bin/python -m pytest -n 2 -m long "${TEMP_ARGS[@]}" "$@" || test $? -eq 5  # 5: none selected
  exit 0
fi
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest -n 2 -m "not long" "${TEMP_ARGS[@]}" "$@"
