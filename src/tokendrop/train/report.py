"""Run reports: PNG plots and a Markdown page from a run's ``metrics.jsonl``.

``write_run_report(run_dir)`` -> ``run_dir/report.md`` with training/eval loss vs step and vs
wall-clock and throughput.  ``compare_runs({name: run_dir}, out_dir)`` overlays several runs (the
demo's baseline vs token dropping) and returns the summary rows it tabulates.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tokendrop.data.masking import unigram_note
from tokendrop.runs.files import atomic_write_text
from tokendrop.runs.metrics import read_metrics
from tokendrop.runs.plotting import pyplot, save_figure


def _pyplot():
    """matplotlib's pyplot (Agg), or None where matplotlib is not installed (reports without
    plots)."""
    try:
        return pyplot()
    except ImportError:
        return None


def _read(run_dir: Path) -> list[dict[str, Any]]:
    return read_metrics(run_dir)


def _series(
    recs: list[dict[str, Any]], key: str, x: str = "step"
) -> tuple[list[float], list[float]]:
    pts = [(r[x], r[key]) for r in recs if key in r and x in r]
    return [p[0] for p in pts], [p[1] for p in pts]


_save = save_figure


def summarize(run_dir: Path) -> dict[str, Any]:
    """Final numbers of a run from its metrics: throughput is the run's tokens over its training
    wall time (runs written before the tokens were logged: the median of the logged intervals'
    rates, the first 10% left out)."""
    recs = _read(run_dir)
    train = [r for r in recs if "loss" in r]
    evals = [r for r in recs if "eval_loss" in r]
    tps = sorted(r["tokens_per_s"] for r in train[len(train) // 10 :]) if train else []
    step_t = sorted(r["step_time"] for r in train[len(train) // 10 :]) if train else []
    end = [r for r in recs if r.get("event") in ("end", "interrupted")]
    flops = sum(r.get("flops_per_step", 0) for r in train) / max(1, len(train))
    start = next((r for r in recs if r.get("event") == "start"), {})
    cpu = end[-1].get("cpu_time") if end else (train[-1].get("cpu_time") if train else None)
    last = train[-1] if train else {}
    if last.get("tokens") and last.get("wall_time"):
        tokens_per_s = last["tokens"] / last["wall_time"]
    else:
        tokens_per_s = tps[len(tps) // 2] if tps else 0.0
    return {
        "steps": train[-1]["step"] if train else 0,
        "wall_time_s": end[-1]["wall_time"] if end else (train[-1]["wall_time"] if train else 0.0),
        # CPU seconds of the training process over the same steps (runs written before it was
        # recorded: None)
        "cpu_time_s": cpu,
        "unigram_entropy": start.get("unigram_entropy"),
        "tokens_per_s": tokens_per_s,
        "step_time_s": step_t[len(step_t) // 2] if step_t else 0.0,
        "final_train_loss": train[-1]["loss"] if train else float("nan"),
        "final_eval_loss": evals[-1]["eval_loss"] if evals else float("nan"),
        "final_eval_acc": evals[-1]["eval_acc"] if evals else float("nan"),
        "mean_flops_per_step": flops,
        "total_flops": flops * (train[-1]["step"] if train else 0),
    }


def write_run_report(run_dir: str | os.PathLike) -> Path:
    run_dir = Path(run_dir)
    recs = _read(run_dir)
    plt = _pyplot()
    if plt is not None:
        fig, ax = plt.subplots(1, 3, figsize=(15, 4))
        for key, label in (("loss", "train MLM loss"), ("eval_loss", "eval MLM loss")):
            ax[0].plot(*_series(recs, key), label=label, marker="o" if key == "eval_loss" else None)
            ax[1].plot(
                *_series(recs, key, "wall_time"),
                label=label,
                marker="o" if key == "eval_loss" else None,
            )
        ax[0].set_xlabel("step")
        ax[1].set_xlabel("wall-clock (s)")
        for a in ax[:2]:
            a.set_ylabel("loss")
            a.legend()
        ax[2].plot(*_series(recs, "tokens_per_s"))
        ax[2].set_xlabel("step")
        ax[2].set_ylabel("tokens / s")
        _save(fig, run_dir / "curves.png")
    s = summarize(run_dir)
    cfg = (run_dir / "config.toml").read_text() if (run_dir / "config.toml").is_file() else ""
    lines = [
        f"# Pretraining run `{run_dir.name}`",
        "",
        "| steps | wall time (s) | tokens/s | step time (s) | final train loss | final eval loss "
        "| eval acc | FLOPs |",
        "|---|---|---|---|---|---|---|---|",
        f"| {s['steps']} | {s['wall_time_s']:.1f} | {s['tokens_per_s']:.0f} | "
        f"{s['step_time_s']:.3f} | "
        f"{s['final_train_loss']:.4f} | {s['final_eval_loss']:.4f} | {s['final_eval_acc']:.4f} | "
        f"{s['total_flops']:.3g} |",
        "",
        *(
            [
                f"Unigram entropy of the data: {s['unigram_entropy']:.3f} nats ("
                + unigram_note(s["final_eval_loss"], s["unigram_entropy"]).split(": ", 1)[1]
                + ").",
                "",
            ]
            if s.get("unigram_entropy") and s["final_eval_loss"] == s["final_eval_loss"]
            else []
        ),
        "![curves](curves.png)" if plt is not None else "(no plots: matplotlib is not installed)",
        "",
        "Training loss vs step and vs wall-clock, eval MLM loss (full model, held-out "
        "split), throughput.",
        "",
        "## Config",
        "",
        "```toml",
        cfg.strip(),
        "```",
        "",
    ]
    out = run_dir / "report.md"
    atomic_write_text(out, "\n".join(lines))
    return out


def compare_runs(
    runs: dict[str, Path], out_dir: str | os.PathLike, title: str = "Comparison"
) -> tuple[Path, list[dict[str, Any]]]:
    """Overlay runs: eval loss vs step / wall-clock / FLOPs; -> (report path, summary rows)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plt = _pyplot()
    rows = []
    curves = []
    for name, rd in runs.items():
        recs = _read(Path(rd))
        flops_per = {r["step"]: r["flops_per_step"] for r in recs if "flops_per_step" in r}
        ev = [r for r in recs if "eval_loss" in r]
        steps = sorted(flops_per)
        cum = []
        # cumulative FLOPs up to each eval (logged steps stand for the steps before them)
        for r in ev:
            cum.append(
                sum(
                    flops_per[s] * (s - (steps[i - 1] if i else 0))
                    for i, s in enumerate(steps)
                    if s <= r["step"]
                )
            )
        curves.append((name, ev, cum))
        rows.append({"name": name, "run_dir": str(rd), **summarize(Path(rd))})
    if plt is not None:
        fig, ax = plt.subplots(1, 3, figsize=(15, 4))
        for name, ev, cum in curves:
            loss = [r["eval_loss"] for r in ev]
            ax[0].plot([r["step"] for r in ev], loss, marker="o", label=name)
            ax[1].plot([r["wall_time"] for r in ev], loss, marker="o", label=name)
            ax[2].plot(cum, loss, marker="o", label=name)
        for a, xl in zip(ax, ("step", "wall-clock (s)", "training FLOPs")):
            a.set_xlabel(xl)
            a.set_ylabel("eval MLM loss")
            a.legend()
        _save(fig, out_dir / "comparison.png")
    lines = [
        f"# {title}",
        "",
        "| run | steps | wall time (s) | tokens/s | final eval MLM loss | eval acc | FLOPs |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['steps']} | {r['wall_time_s']:.1f} | {r['tokens_per_s']:.0f} | "
            f"{r['final_eval_loss']:.4f} | {r['final_eval_acc']:.4f} | {r['total_flops']:.3g} |"
        )
    lines += [
        "",
        "![comparison](comparison.png)"
        if plt is not None
        else "(no plots: matplotlib is not installed)",
        "",
    ]
    out = out_dir / "report.md"
    atomic_write_text(out, "\n".join(lines))
    return out, rows
