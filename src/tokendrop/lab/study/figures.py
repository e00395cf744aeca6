"""The study's figures: held-out MLM loss vs wall-clock and vs FLOPs for every run, and the paper's
Figures 1 and 3 from ``tokendrop inspect`` of one run."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

from tokendrop.lab.inspect import InspectError, inspect_run
from tokendrop.lab.study.common import isnum, log
from tokendrop.lab.study.records import StudyResults
from tokendrop.lab.study.spec import StudyConfig
from tokendrop.lab.study.tables import time_word
from tokendrop.runs.files import atomic_file, read_json
from tokendrop.runs.plotting import pyplot, save_figure


def plot_curves(res: StudyResults, out: Path) -> list[Path]:
    plt = pyplot()
    names = res.order
    cmap = plt.get_cmap("tab20")
    paths = []
    clock = "process CPU time" if time_word(res) == "CPU time" else "wall-clock"
    for xkey, xlabel, fname in (
        ("wall_time", f"pretraining {clock} (s, training steps only)", "mlm-loss-vs-wall.png"),
        ("flops", "pretraining FLOPs (analytic, cumulative)", "mlm-loss-vs-flops.png"),
    ):
        fig, axes = plt.subplots(1, 2, figsize=(15, 5.2))
        finals = []
        for i, n in enumerate(names):
            d = res.methods[n]
            # the 10 dark hues first, then the light ones
            color = cmap((2 * i) % 20 + (2 * i) // 20 % 2)
            for j, rname in enumerate(d.runs):
                c = res.runs[rname].curve
                xs, ys = [p[xkey] for p in c], [p["eval_loss"] for p in c]
                finals += ys[len(ys) // 2 :]
                for ax in axes:
                    own = " (its own, unpacked eval split)" if res.runs[rname].curve_split else ""
                    ax.plot(
                        xs,
                        ys,
                        color=color,
                        ls="-" if j == 0 else (0, (4, 2 + j)),
                        lw=1.4,
                        marker=".",
                        label=d.label + own if j == 0 else None,
                    )
        src = res.source
        if src is not None and isnum(src.final_eval_loss):
            for ax in axes:
                ax.axhline(
                    src.final_eval_loss,
                    color="0.5",
                    lw=0.8,
                    ls="--",
                    label=src.label if ax is axes[0] else None,
                )
        for ax in axes:
            ax.set_xlabel(xlabel)
            ax.set_ylabel("held-out MLM loss (full model)")
            ax.grid(alpha=0.3)
        axes[0].set_title("all evaluations")
        if finals:
            lo, hi = min(finals), sorted(finals)[int(0.8 * (len(finals) - 1))]
            pad = 0.05 * max(hi - lo, 1e-3)
            axes[1].set_ylim(lo - pad, hi + pad)
            xmax = max((p[xkey] for r in res.runs.values() for p in r.curve), default=1.0)
            axes[1].set_xlim(0.4 * xmax, 1.02 * xmax)
        axes[1].set_title("zoom: second half")
        t = res.target_eval_loss
        if isnum(t):
            for ax in axes:
                ax.axhline(t, color="k", lw=0.8, ls=":")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(
            handles,
            labels,
            loc="lower center",
            ncol=min(4, max(1, len(labels))),
            fontsize=8,
            bbox_to_anchor=(0.5, -0.02 - 0.035 * math.ceil(len(labels) / 4)),
        )
        fig.suptitle(
            "Held-out MLM loss vs "
            + ("wall-clock" if xkey == "wall_time" else "FLOPs")
            + f" (seed 0 solid, other seeds dashed; dotted line: {res.reference()}'s final loss)",
            fontsize=11,
        )
        fig.tight_layout()
        p = out / "figures" / fname
        p.parent.mkdir(parents=True, exist_ok=True)
        save_figure(fig, p)
        paths.append(p)
    return paths


def inspect_figures(study: StudyConfig, res: StudyResults, out: Path) -> dict[str, Any] | None:
    """``inspect_run`` of the inspected method's first finished seed; Figures 1 and 3 copied to
    figures/."""
    d = res.methods.get(study.inspect_method)
    if not d:
        return None
    rname = d.runs[0]
    rd = out / "runs" / rname
    try:
        ins = inspect_run(
            rd, out / "inspect" / rname, num_examples=study.num_examples, overwrite=True
        )
    except InspectError as e:
        log(f"figures 1 and 3 skipped: {e}")
        return {"run": rname, "error": str(e)}
    figs = out / "figures"
    for src, dst in (
        ("importance-hist.png", "fig3-importance-hist.png"),
        ("examples.png", "fig1-examples.png"),
        ("examples.html", "fig1-examples.html"),
    ):
        with atomic_file(figs / dst) as tmp:
            shutil.copyfile(ins / src, tmp)
    return {
        "run": rname,
        "dir": str(ins),
        "summary": read_json(ins / "summary.json", expect=None, default=None),
        "tokens": read_json(ins / "tokens.json", expect=None, default=None),
    }
