#!/usr/bin/env bash
# The GPU campaign on a lent GPU machine.  In priority order, within the device time (one call of at
# most 10 minutes; a second call into the same OUT continues with the parts the first did not finish):
#   bash benchmarks/gpu_campaign.sh priority -- --set total_s=540   # step, scratch, strong, pretrain, env, ...
# Or one part per call (each stops itself within
# budget_s = 8 min; the `timeout` below is the hard stop):
#   bash benchmarks/gpu_campaign.sh step            # the trainer's step: eager / compiled / CUDA graphs, dense vs drop, both families
#   bash benchmarks/gpu_campaign.sh env             # GPU, driver, versions, SDPA backends at bf16, pytest -m gpu
#   bash benchmarks/gpu_campaign.sh bench           # bert-base eager T=128/512: dense, 50% drop, HF; MFU, memory, largest batch
#   bash benchmarks/gpu_campaign.sh bench-compile   # the same with torch.compile
#   bash benchmarks/gpu_campaign.sh pretrain        # bert-base-128 runs from carried data, resume, torchrun (NCCL)
#   bash benchmarks/gpu_campaign.sh quality         # time to quality, small BERT, dense vs token drop, SST-2/QNLI
#   bash benchmarks/gpu_campaign.sh bench-modern    # ModernBERT family (modern-base) eager T=512/1024: dense, 50% drop, HF ModernBERT
#   bash benchmarks/gpu_campaign.sh strong          # time to loss on top of the strong dense recipe, 6x384 BERT, dense vs + token drop
#   bash benchmarks/gpu_campaign.sh scratch         # the paper's setting from scratch: 12x768, T=128, dense / dense 75% / token drop at 2 lrs
#   bash benchmarks/gpu_campaign.sh bench-longctx   # long context: bert-base and modern-base at T=512..8192, dense vs 50% drop
#   DRY_RUN=1 bash benchmarks/gpu_campaign.sh all   # every part with tiny sizes on CPU (tests/integration/lab/test_gpu_campaign.py)
# Each part writes $OUT/PART.json + $OUT/PART.md (rewritten after every phase) and prints a summary.
# It runs `tokendrop bench --campaign PART --out $OUT` (configs/bench-campaign-gpu.toml; dry run:
# bench-campaign-dry.toml); arguments after `--` go to it (e.g. -- --set bench.seq_lens=[512]).
# Environment: OUT (default runs/gpu-campaign), DATA / GLUE (default runs/gpu-carry/data-128 and
# runs/gpu-carry/glue, made by benchmarks/gpu_campaign_prepare.sh), PY, PART_TIMEOUT (s per part, 540).
set -euo pipefail
cd "$(dirname "$0")/.."
# .venv if set up; else the machine's python3 with this checkout on PYTHONPATH (a lent GPU machine has
# torch, transformers and triton preinstalled but no network to pip install from)
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python
  else PY=$(command -v python3 || command -v python); export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"; fi
fi
# pytest (for `env`): the machine's, else the copy gpu_campaign_prepare.sh carried (appended: installed packages win)
if ! "$PY" -c "import pytest" 2>/dev/null && [ -d runs/gpu-carry/pylib ]; then
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD/runs/gpu-carry/pylib"
fi
parts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do parts+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
if [ ${#parts[@]} -eq 0 ]; then
  echo "usage: [DRY_RUN=1] [OUT=DIR] bash benchmarks/gpu_campaign.sh PART... [-- tokendrop bench args]" >&2
  echo "       PART: step env bench bench-compile pretrain quality bench-modern strong scratch bench-longctx all priority" >&2
  exit 2
fi
n=${#parts[@]}
for p in "${parts[@]}"; do [ "$p" = "all" ] && n=$((n + 9)); done  # all = the 10 parts
for p in "${parts[@]}"; do [ "$p" = "priority" ] && n=$((n + 9)); done  # bounded by total_s inside
OUT=${OUT:-runs/gpu-campaign}
args=(--out "$OUT")
[ "${DRY_RUN:-0}" = "1" ] && args+=(--dry-run)
[ -n "${DATA:-}" ] && args+=(--set "data=\"$DATA\"")
[ -n "${GLUE:-}" ] && args+=(--set "glue=\"$GLUE\"")
mkdir -p "$OUT"
exec timeout -k 20 $((n * ${PART_TIMEOUT:-540})) "$PY" -m tokendrop bench --campaign "${parts[@]}" "${args[@]}" "$@"
