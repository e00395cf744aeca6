#!/usr/bin/env bash
# The main job: set up ./.venv from nothing, fetch a small real corpus (the Wikipedia dump sample in
# gensim's wheel) and a sentiment task (vaderSentiment's sdist) from PyPI, pretrain the `demo`
# preset as dense baseline and with token dropping, fine-tune both, print the comparison and
# write runs/demo/report.md.  Extra arguments go to `tokendrop demo` (e.g. --out DIR --steps N).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# busy-waiting OpenMP threads stall each other on small shared machines
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
exec .venv/bin/tokendrop demo "$@"
