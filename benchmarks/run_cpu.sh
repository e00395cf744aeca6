#!/usr/bin/env bash
# The CPU benchmarks committed under benchmarks/results/ (cpu-12x256, fp32, T=128/512):
#   cpu-quick  dense vs 50% drop + transformers.BertForMaskedLM        (~3-5 min)
#   cpu-quick, like for like: the same with BertForMaskedLM's head on the masked slots only, as ours
#   cpu-full   dense vs {0.25,0.5,0.625,0.75} x {drop,pass} + avg + HF (~8 min)
# then the speedup plot.  The presets run single-threaded (see benchmarks/PROFILE.md: on a shared
# machine two OpenMP threads spin-wait for each other on every op); THREADS=2 runs with two threads
# and OMP_WAIT_POLICY=PASSIVE instead, which avoids that.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=benchmarks/results
MACHINE=$("$PY" -c "from tokendrop.bench import machine_slug; print(machine_slug('cpu'))")
if [[ "${THREADS:-1}" != "1" ]]; then
  export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
  "$PY" -m tokendrop bench --preset cpu-quick --threads "$THREADS" --json "$OUT/$MACHINE-cpu-quick-${THREADS}threads-passive.json"
  exit 0
fi
"$PY" -m tokendrop bench --preset cpu-quick --profile "$OUT/profile-$MACHINE" --json "$OUT/"
"$PY" -m tokendrop bench --preset cpu-quick --set hf_sparse_prediction=true --json "$OUT/$MACHINE-cpu-quick-hf-sparse.json"
"$PY" -m tokendrop bench --preset cpu-full --json "$OUT/"
"$PY" benchmarks/plot_speedup.py
