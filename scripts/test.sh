#!/usr/bin/env bash
# The test command: installs everything from nothing into ./.venv, then runs the default suite
# (slow tests excluded; run them with: scripts/test.sh -m slow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# busy-waiting OpenMP threads stall each other on small shared machines
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# the house style: ruff's linter and formatter (pyproject.toml [tool.ruff]), before any test
.venv/bin/ruff check --quiet . || { echo "ruff check failed: run .venv/bin/ruff check --fix . (see above)" >&2; exit 1; }
.venv/bin/ruff format --check --quiet . || { echo "ruff format: run .venv/bin/ruff format ." >&2; exit 1; }
exec .venv/bin/python -m pytest -q "$@"
