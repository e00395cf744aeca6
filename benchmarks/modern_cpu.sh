#!/usr/bin/env bash
# The ModernBERT-architecture family on CPU: configs/bench-modern-cpu.toml
# (the modern-base shape scaled to a 2-core machine: 12 x 256, 4 heads, GeGLU 384, 128-token window,
# every third layer global, V=50368; fp32, one thread, T=512 and T=1024, 7 interleaved rounds):
#   benchmarks/modern_cpu.json/.md            our dense / 50% drop / transformers.ModernBertForMaskedLM
#                                             as released (sparse_prediction off: its head on all T)
#   benchmarks/modern_cpu_hf_sparse.json/.md  the same with transformers' sparse_prediction on (its head
#                                             on the masked positions only, as ours)
# transformers runs ModernBERT with SDPA here (no flash_attn on CPU): padded, the window as a mask.
# ~4 min each on an idle 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$PY" -m tokendrop bench --preset modern-cpu --json benchmarks/modern_cpu.json
"$PY" -m tokendrop bench --preset modern-cpu --set hf_sparse_prediction=true --json benchmarks/modern_cpu_hf_sparse.json
