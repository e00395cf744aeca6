#!/usr/bin/env bash
# The test command: installs everything from nothing into ./.venv, then runs the default suite
# (slow tests excluded; run them with: scripts/test.sh -m slow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# busy-waiting OpenMP threads stall each other on small shared machines
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
exec .venv/bin/python -m pytest -q "$@"
