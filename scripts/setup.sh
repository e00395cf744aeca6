#!/usr/bin/env bash
# Create ./.venv (if needed) and install tokendrop with its test extra.
# torch first, unless the venv has it: on a machine where `nvidia-smi -L` lists a GPU, the default
# build from the configured index (PyPI: the CUDA build); otherwise the CPU build from PyTorch's CPU
# wheel index (https://download.pytorch.org/whl/cpu, as pytorch.org's own install command), so pip
# does not pull a multi-GB CUDA build.  If that index cannot be reached, the configured index is
# used and this says so.  The package's own requirement stays open (torch>=2.4).
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
  elif ! "$VPY" -m pip install -q --retries 1 --timeout 20 --index-url https://download.pytorch.org/whl/cpu "torch>=2.4"; then
    echo "setup: PyTorch's CPU wheel index was not reachable; installing torch from the configured index" >&2
    "$VPY" -m pip install -q "torch>=2.4"
  fi
fi
"$VPY" -m pip install -q -e ".[test]"
touch "$stamp"
