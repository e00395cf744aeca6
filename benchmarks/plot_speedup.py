#!/usr/bin/env python
"""Plot measured step-time speedup vs drop rate, per variant, with the FLOP bound drawn.

    python benchmarks/plot_speedup.py      # every *-full.json (else *-quick.json) in results/
    python benchmarks/plot_speedup.py A.json B.json --out benchmarks/results/speedup.png

One row of panels per results file (machine/preset), one panel per sequence length T.  Solid
markers: measured speedup over our dense step (median of per-round paired ratios, bars = paired
min-max); dashed lines/hollow markers: the FLOP bound (1 / analytic FLOP ratio) of the same setting.
``--clock auto`` (default) plots process-CPU-time speedups for CPU runs (the wall clock of a shared
machine includes time spent waiting for a core) and wall-clock speedups for GPU runs.
The plotting is ``tokendrop.lab.bench.plot_speedup``; this script only picks the files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def default_inputs() -> list[Path]:
    full = sorted(RESULTS.glob("*-full.json"))
    return full or sorted(RESULTS.glob("*-quick.json"))


def main() -> None:
    from tokendrop.lab.bench import plot_speedup

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "results",
        nargs="*",
        type=Path,
        help="results JSON files (default: benchmarks/results/*-full.json)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS / "speedup.png")
    ap.add_argument(
        "--clock",
        choices=["auto", "wall", "cpu"],
        default="auto",
        help="auto: CPU-time speedups for CPU runs, wall-clock for GPU runs",
    )
    a = ap.parse_args()
    paths = a.results or default_inputs()
    if not paths:
        raise SystemExit(
            "no results JSON found (run `tokendrop bench --json benchmarks/results/` first)"
        )
    print(f"wrote {plot_speedup(paths, a.out, a.clock)}")


if __name__ == "__main__":
    main()
