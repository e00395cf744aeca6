#!/usr/bin/env bash
# One command for a GPU machine: bert-base, bf16, T=128/512, the `gpu-full` preset (dense vs drop
# rates {0.25, 0.5, 0.625, 0.75} x {drop, pass} + avg, and transformers.BertForMaskedLM side by side,
# B=128 at T=128 and B=32 at T=512), eager and then torch.compile'd.  Writes, under benchmarks/results/:
#   <gpu>-gpu-full.json/.md            eager, with the SDPA kernel that ran and host-sync counts per setting
#   profile-<gpu>/                     one torch.profiler table per setting (eager): where the GPU time goes
#   speedup.png                        speedup vs drop rate with the FLOP bound (all *-full.json results)
#   <gpu>-gpu-full-compile.json/.md    torch.compile(dynamic=False), ours and HF's (compiling ~22 graphs takes a while)
#
#   bash benchmarks/run_gpu.sh                 # everything
#   QUICK=1 bash benchmarks/run_gpu.sh         # gpu-quick only: dense vs 50% drop + HF, eager (~1 min)
#
# Needs a CUDA build of torch (scripts/setup.sh picks it where a GPU is present, or the machine's own).
set -euo pipefail
cd "$(dirname "$0")/.."
# .venv if set up; else the machine's python3 with this checkout on PYTHONPATH (a lent GPU machine
# has torch, transformers and their dependencies preinstalled but no network to pip install from)
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"; fi
fi
OUT=benchmarks/results
mkdir -p "$OUT"
"$PY" - <<'PYEOF'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit("run_gpu.sh: CUDA is not available (torch %s)" % torch.__version__)
print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
PYEOF
GPU=$("$PY" -c "from tokendrop.bench import machine_slug; print(machine_slug('cuda'))")
if [[ "${QUICK:-0}" == "1" ]]; then
  "$PY" -m tokendrop bench --device cuda --preset gpu-quick --json "$OUT/$GPU-gpu-quick.json"
  "$PY" benchmarks/plot_speedup.py "$OUT/$GPU-gpu-quick.json" --out "$OUT/speedup-$GPU-quick.png"
  exit 0
fi
"$PY" -m tokendrop bench --device cuda --preset gpu-full --profile "$OUT/profile-$GPU" --json "$OUT/$GPU-gpu-full.json"
"$PY" benchmarks/plot_speedup.py
"$PY" -m tokendrop bench --device cuda --preset gpu-full --compile --warmup 20 --json "$OUT/$GPU-gpu-full-compile.json" \
  || echo "run_gpu.sh: the torch.compile run failed; the eager results above stand" >&2
echo "done: $OUT/$GPU-gpu-full.{json,md}, $OUT/speedup.png, $OUT/profile-$GPU/, $OUT/$GPU-gpu-full-compile.{json,md}"
