"""Peak memory of `tokendrop prepare` on one huge document: a single Parquet cell, an Arrow cell or
a text line (docs/design.md "Data and masking", "Memory does not grow with the longest line").

    python benchmarks/long_cell_memory.py --vocab VOCAB --mb 2 50 --formats parquet arrow txt

For each size and format, writes one file holding a single document of that many MB of random
words of VOCAB (``--seed``; no newline inside), then runs ``/usr/bin/time -v python -m tokendrop
prepare --corpus FILE --out OUT --seq-len 128 --workers 1 --quiet --vocab VOCAB --eval-fraction 0``
and prints the peak RSS (``Maximum resident set size``), the wall seconds and the exit status,
one line each.  Files go under ``--dir`` (a temp dir by default) and are removed afterwards.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def write_document(path: Path, fmt: str, words: list[str], size: int, seed: int) -> None:
    rng = random.Random(seed)
    text = " ".join(rng.choice(words) for _ in range(size // 4 + 16))[:size].rstrip()
    if fmt == "txt":
        path.write_text(text + "\n", encoding="utf-8")
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"text": [text]})
    if fmt == "parquet":
        pq.write_table(table, path)
    else:
        with pa.ipc.new_file(path, table.schema) as w:
            w.write_table(table)


def measure(corpus: Path, out: Path, vocab: str) -> tuple[float, float, int]:
    """(peak RSS in GB, wall seconds, exit status) of one prepare."""
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "tokendrop",
        "prepare",
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--seq-len",
        "128",
        "--workers",
        "1",
        "--quiet",
        "--vocab",
        vocab,
        "--eval-fraction",
        "0",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    kb = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", r.stderr)
    secs = 0.0
    if wall:
        for part in wall.group(1).split(":"):
            secs = secs * 60 + float(part)
    return (int(kb.group(1)) / 1e6 if kb else float("nan")), secs, r.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", required=True, help="a WordPiece vocab.txt")
    ap.add_argument("--mb", type=float, nargs="+", default=[2, 50])
    ap.add_argument("--formats", nargs="+", default=["parquet", "arrow", "txt"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    words = [
        w
        for w in Path(a.vocab).read_text(encoding="utf-8").split()
        if w.isalpha() and not w.startswith("[")
    ]
    top = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="long-cell-"))
    top.mkdir(parents=True, exist_ok=True)
    try:
        for mb in a.mb:
            for fmt in a.formats:
                f = top / f"doc-{mb:g}mb.{fmt}"
                write_document(f, fmt, words, int(mb * 1e6), a.seed)
                gb, secs, rc = measure(f, top / f"out-{mb:g}-{fmt}", a.vocab)
                print(f"{fmt:8s} {mb:g} MB: peak RSS {gb:.2f} GB, {secs:.0f} s, exit {rc}")
                f.unlink()
                shutil.rmtree(top / f"out-{mb:g}-{fmt}", ignore_errors=True)
    finally:
        if not a.dir:
            shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
