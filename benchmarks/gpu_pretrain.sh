#!/usr/bin/env bash
# Issue-4 GPU check: bert-base, T=128, bf16, a few hundred steps, dense baseline vs token dropping;
# records tokens/s and MFU (metrics.jsonl "mfu") and writes a comparison report.
#   bash benchmarks/gpu_pretrain.sh [CORPUS] [VOCAB]
# Defaults use the offline corpus and bert-base-uncased vocab beside this repository (../shared/data).
# On a machine without them (a lent GPU box), prepare the data where they are and bring it along:
#   tokendrop prepare --corpus ../shared/data/corpus/mixed-english.txt.gz --seq-len 128 \
#       --vocab ../shared/data/vocab/bert-base-uncased-vocab.txt --out runs/gpu-data-128   # 44 MB, ~20 s
#   DATA=runs/gpu-data-128 bash benchmarks/gpu_pretrain.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS=${1:-../shared/data/corpus/mixed-english.txt.gz}
VOCAB=${2:-../shared/data/vocab/bert-base-uncased-vocab.txt}
OUT=${OUT:-runs/gpu-pretrain}
STEPS=${STEPS:-300}
BATCH=${BATCH:-256}
# .venv if set up, else the machine's python3 with this checkout on PYTHONPATH (no pip needed)
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"; fi
TD="$PY -m tokendrop"
DATA=${DATA:-$OUT/data-128}
if [ ! -f "$DATA/meta.json" ]; then
  [ -e "$CORPUS" ] || { echo "gpu_pretrain.sh: no corpus at $CORPUS and no prepared data at $DATA (set DATA=, see the header)" >&2; exit 2; }
  $TD prepare --corpus "$CORPUS" --out "$DATA" --seq-len 128 --vocab "$VOCAB" --quiet
fi
for method in none cumulative; do
  [ -f "$OUT/$method/report.md" ] && continue
  rm -rf "$OUT/$method"
  $TD pretrain --config bert-base-128 --out "$OUT/$method" --quiet \
    --set data.path="\"$DATA\"" --set drop.method=$method --set train.steps=$STEPS \
    --set train.warmup_steps=30 --set train.batch_size=$BATCH --set train.eval_every=100 \
    --set train.log_every=10 --set train.ckpt_every=100000
done
"$PY" - "$OUT" <<'PY'
import sys, json
from pathlib import Path
from tokendrop.report import compare_runs
out = Path(sys.argv[1])
report, rows = compare_runs({"baseline": out / "none", "token-drop": out / "cumulative"}, out, "bert-base T=128 bf16")
for name in ("none", "cumulative"):
    recs = [json.loads(l) for l in (out / name / "metrics.jsonl").read_text().splitlines()]
    mfu = sorted(r["mfu"] for r in recs if "mfu" in r)
    print(name, "median MFU", mfu[len(mfu) // 2] if mfu else "n/a")
print(report.read_text())
PY
