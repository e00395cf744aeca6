#!/usr/bin/env bash
# Prepare, on this machine, exactly what the GPU campaign carries to the GPU machine: one folder,
# runs/gpu-carry/ (< 64 MiB; pass it as the device call's `carry`):
#   data-128/            tokendrop prepare of the mixed corpus at T=128, bert-base-uncased vocab (~44 MB)
#   glue/SST-2, glue/QNLI   the GLUE-format stand-ins the quality part fine-tunes on (~2 MB)
#   pylib/               pytest and its pure-Python dependencies (no __pycache__), used by
#                        gpu_campaign.sh only where the machine has no pytest (~10 MB)
#   bash benchmarks/gpu_campaign_prepare.sh     # SHARED=../shared/data CARRY=runs/gpu-carry PY=.venv/bin/python
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared/data}
CARRY=${CARRY:-runs/gpu-carry}
PY=${PY:-.venv/bin/python}
LIMIT=$((64 * 1024 * 1024))
for f in corpus/mixed-english.txt.gz vocab/bert-base-uncased-vocab.txt glue/SST-2/train.tsv glue/QNLI/train.tsv; do
  [ -f "$SHARED/$f" ] || { echo "gpu_campaign_prepare.sh: $SHARED/$f not found (set SHARED=DIR)" >&2; exit 2; }
done
mkdir -p "$CARRY"
if [ ! -f "$CARRY/data-128/meta.json" ]; then
  "$PY" -m tokendrop prepare --corpus "$SHARED/corpus/mixed-english.txt.gz" --seq-len 128 \
    --vocab "$SHARED/vocab/bert-base-uncased-vocab.txt" --out "$CARRY/data-128" --quiet > /dev/null
fi
rm -rf "$CARRY/glue"
mkdir -p "$CARRY/glue"
cp -r "$SHARED/glue/SST-2" "$SHARED/glue/QNLI" "$CARRY/glue/"
chmod -R u+w "$CARRY/glue"
rm -rf "$CARRY/pylib"
"$PY" - "$CARRY/pylib" <<'PY'
import shutil, sys
from importlib.metadata import distribution
from pathlib import Path

dst = Path(sys.argv[1])
for name in ("pytest", "pluggy", "iniconfig", "pygments", "packaging"):
    dist = distribution(name)
    for f in dist.files or []:
        if f.parts[0] == ".." or "__pycache__" in f.parts or f.suffix == ".pyc":
            continue  # console scripts outside site-packages, byte code
        src = Path(dist.locate_file(f))
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)
PY
size=$(du -sb "$CARRY" | cut -f1)
du -sh "$CARRY"/* | sed 's/^/  /'
if [ "$size" -ge "$LIMIT" ]; then
  echo "gpu_campaign_prepare.sh: $CARRY is $((size / 1048576)) MiB, over the 64 MiB a device call carries" >&2
  exit 1
fi
echo "ready: $CARRY ($((size / 1048576)) MiB); carry it and run bash benchmarks/gpu_campaign.sh PART (benchmarks/README.md)"
