#!/usr/bin/env python
"""Plot measured step-time speedup vs drop rate, per variant, with the FLOP bound drawn.

    python benchmarks/plot_speedup.py                       # every *-full.json (else *-quick.json) in results/
    python benchmarks/plot_speedup.py A.json B.json --out benchmarks/results/speedup.png

One row of panels per results file (machine/preset), one panel per sequence length T.  Solid
markers: measured speedup over our dense step (median of per-round paired ratios, bars = paired
min-max); dashed lines/hollow markers: the FLOP bound (1 / analytic FLOP ratio) of the same setting.
``--clock auto`` (default) plots process-CPU-time speedups for CPU runs (the wall clock of a shared
machine includes time spent waiting for a core) and wall-clock speedups for GPU runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
COLORS = {"drop": "tab:blue", "pass": "tab:orange", "avg": "tab:green"}


def default_inputs() -> list[Path]:
    full = sorted(RESULTS.glob("*-full.json"))
    return full or sorted(RESULTS.glob("*-quick.json"))


def plot(paths: list[Path], out: Path, clock: str = "auto") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.loads(Path(p).read_text()) for p in paths]
    if not runs:
        raise SystemExit("no results JSON found (run `tokendrop bench --json benchmarks/results/` first)")
    ncols = max(len(r["config"]["seq_lens"]) for r in runs)
    fig, axes = plt.subplots(len(runs), ncols, figsize=(5.2 * ncols, 4.0 * len(runs)), squeeze=False)
    for i, res in enumerate(runs):
        env = res["env"]
        where = env.get("gpu_name") or f"{env['cpu_model']}, {env['torch_threads']} thr"
        m = res["info"]["model"]
        for j, t in enumerate(res["config"]["seq_lens"]):
            ax = axes[i][j]
            rows = [x for x in res["speedups"] if x["seq_len"] == t]
            use_cpu = clock == "cpu" or (clock == "auto" and any("speedup_cpu" in x for x in rows))
            key = "speedup_cpu" if use_cpu else "speedup"
            for variant in ("drop", "pass", "avg"):
                vr = sorted((x for x in rows if x["variant"] == variant), key=lambda x: x["rate"])
                if not vr:
                    continue
                rates = [0.0] + [x["rate"] for x in vr]
                shift = {"drop": -0.006, "pass": 0.006, "avg": 0.0}[variant]  # keep the error bars apart
                meas = [1.0] + [x[key] for x in vr]
                lo = [0.0] + [x[key] - x[f"{key}_paired_min"] for x in vr]
                hi = [0.0] + [x[f"{key}_paired_max"] - x[key] for x in vr]
                bound = [1.0] + [x["flop_bound"] for x in vr]
                c = COLORS[variant]
                style = "o" if variant == "avg" else "o-"
                ax.errorbar([r + shift for r in rates], meas, yerr=[lo, hi], fmt=style, color=c, capsize=3,
                            label=f"{variant}: measured ({'CPU time' if use_cpu else 'wall'})")
                ax.plot(rates, bound, "--" if variant != "avg" else "s", color=c, mfc="none", alpha=0.8,
                        label=f"{variant}: FLOP bound")
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_xlabel("drop rate (fraction of tokens dropped in the span)")
            ax.set_ylabel("step-time speedup over dense")
            ax.set_title(f"{m['preset']} T={t}, {res['config']['precision']} - {where}", fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="*", type=Path, help="results JSON files (default: benchmarks/results/*-full.json)")
    ap.add_argument("--out", type=Path, default=RESULTS / "speedup.png")
    ap.add_argument("--clock", choices=["auto", "wall", "cpu"], default="auto",
                    help="auto: CPU-time speedups for CPU runs, wall-clock for GPU runs")
    a = ap.parse_args()
    print(f"wrote {plot(a.results or default_inputs(), a.out, a.clock)}")


if __name__ == "__main__":
    main()
