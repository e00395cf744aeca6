#!/usr/bin/env bash
# Create ./.venv (if needed) and install tokendrop with its test extra.
# On a machine without an NVIDIA GPU, torch is pinned to a CPU-only build range first, so that
# pip does not pull a multi-GB CUDA build; the package's own requirement stays open (torch>=2.4).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
stamp=.venv/.tokendrop-installed
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then
  exit 0
fi
if ! "$VPY" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$VPY" -m pip install -q "torch>=2.4"
  else
    # CPU build (PyTorch's CPU wheel index where reachable; here a local 2.13.0 CPU wheel).
    "$VPY" -m pip install -q "torch>=2.4,<2.14"
  fi
fi
"$VPY" -m pip install -q -e ".[test]"
touch "$stamp"
