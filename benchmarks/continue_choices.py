"""Measure the two start-up choices of continued pretraining (tokendrop.train.continued) on the
demo's setting.

1. MLM-head warm-up: all-MiniLM-L6-v2 has no MLM head; continue it dense with the fresh head trained
   alone first (``train.head_warmup_steps`` > 0) or not (0), then fine-tune on the sentiment task.
2. Importance warm start (``drop.importance_init``): continue it with token dropping whose
   cumulative-loss vector starts constant (the paper from scratch), from a dense no-update pass, or
   from unigram surprisal; compare eval MLM loss and fine-tuned accuracy.

Every run uses the demo's presets (``demo-continue``, ``finetune-demo-continue``) and data, so the
demo's own baseline and token-drop runs are reused when ``--demo`` points at a finished demo dir.

    python benchmarks/continue_choices.py --out runs/continue-choices --demo runs/demo \
        --docs docs/continue-choices

Writes ``OUT/results.json`` and ``OUT/results.md`` (copied to ``--docs``), with the command,
machine and per-seed accuracies.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {
    # name: (overrides, demo run it equals)
    "dense, head warm-up": (["drop.method=none"], "baseline"),
    "dense, no head warm-up": (["drop.method=none", "train.head_warmup_steps=0"], None),
    "drop, importance dense_pass": (
        ["drop.method=cumulative", "drop.importance_init=dense_pass"],
        "token-drop",
    ),
    "drop, importance constant": (
        ["drop.method=cumulative", "drop.importance_init=constant"],
        None,
    ),
    "drop, importance frequency": (
        ["drop.method=cumulative", "drop.importance_init=frequency"],
        None,
    ),
}


def _slug(name: str) -> str:
    return name.replace(",", "").replace(" ", "-")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/continue-choices")
    ap.add_argument(
        "--demo",
        default="runs/demo",
        help="a finished `tokendrop demo` dir: its data and runs are reused",
    )
    ap.add_argument("--cache", default=".cache")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--docs", help="also copy results.md/json here")
    a = ap.parse_args(argv)

    from tokendrop.config import FinetuneConfig, load_config
    from tokendrop.finetuning import finetune
    from tokendrop.lab import demo
    from tokendrop.runs.metrics import read_metrics
    from tokendrop.train.trainer import pretrain

    out, demo_dir, cache = Path(a.out), Path(a.demo), Path(a.cache)
    out.mkdir(parents=True, exist_ok=True)
    source = demo.fetch_minilm(cache)
    task = demo.fetch_sentiment_task(cache)
    data = demo_dir / "data-T128"
    if not (data / "meta.json").is_file():
        raise SystemExit(
            f"error: {data}: run `tokendrop demo --out {demo_dir}` first (its prepared "
            "data is reused)"
        )
    results = {}
    t0 = time.perf_counter()
    for name, (ov, demo_run) in VARIANTS.items():
        run = (
            demo_dir / demo_run
            if demo_run and (demo_dir / demo_run / "report.md").is_file()
            else out / _slug(name)
        )
        if not (run / "report.md").is_file():
            if run.exists():
                shutil.rmtree(run)
            print(f"pretraining: {name}", flush=True)
            cfg = load_config(
                "demo-continue",
                [
                    f"model.init={json.dumps(str(source))}",
                    f"data.path={json.dumps(str(data))}",
                    *ov,
                ],
            )
            pretrain(cfg, run)
        recs = read_metrics(run)
        ev = [r["eval_loss"] for r in recs if "eval_loss" in r]
        accs = []
        for seed in range(a.seeds):
            cell = out / "finetune" / f"{_slug(name)}-s{seed}"
            demo_cell = demo_dir / "finetune" / f"{demo_run}-s{seed}" if demo_run else None
            if demo_cell is not None and (demo_cell / "metrics.json").is_file():
                m = json.loads((demo_cell / "metrics.json").read_text())
            elif (cell / "metrics.json").is_file():
                m = json.loads((cell / "metrics.json").read_text())
            else:
                if cell.exists():
                    shutil.rmtree(cell)
                fcfg = load_config(
                    "finetune-demo-continue",
                    [f"data={json.dumps(str(task))}", f"seed={seed}"],
                    cls=FinetuneConfig,
                )
                m = finetune(fcfg, run, cell)
            accs.append(next(iter(m["scores"].values())))
        init = [r for r in recs if r.get("event") in ("head_warmup", "importance_init")]
        results[name] = {
            "run": str(run),
            "overrides": ov,
            "eval_loss_start": ev[0],
            "eval_loss_end": ev[-1],
            "accuracy": accs,
            "accuracy_mean": statistics.fmean(accs),
            "accuracy_spread": max(accs) - min(accs),
            "init_events": init,
        }
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    meta = {
        "command": "python "
        + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "threads": os.environ.get("OMP_NUM_THREADS", ""),
        "git_revision": rev,
        "seconds": time.perf_counter() - t0,
    }
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    lines = [
        "# Continued pretraining: head warm-up and importance warm start",
        "",
        f"Command: `{meta['command']}` at git {rev}; {meta['machine']}. The demo's setting: "
        "all-MiniLM-L6-v2 "
        "continued for the `demo-continue` steps on the review corpus, then fine-tuned on the "
        "sentiment task "
        f"(`finetune-demo-continue`), {a.seeds} seeds.",
        "",
        "| variant | eval MLM loss at step 0 | at the end | sentiment acc, mean | spread "
        "(max-min) | per seed |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['eval_loss_start']:.4f} | {r['eval_loss_end']:.4f} | "
            f"{r['accuracy_mean']:.2f} | "
            f"{r['accuracy_spread']:.2f} | {', '.join(f'{x:.2f}' for x in r['accuracy'])} |"
        )
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    print(text)
    if a.docs:
        Path(a.docs).mkdir(parents=True, exist_ok=True)
        for f in ("results.md", "results.json"):
            shutil.copyfile(out / f, Path(a.docs) / f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
