"""Re-score the final checkpoint of pretraining runs on one held-out set: the first
``train.eval_batches x train.batch_size`` held-out sequences of each run's prepared data, masked at
its final masking rate, the full model (no dropping).

Before the fix of 2026-11-28 an evaluation read ``train.eval_batches`` *micro*-batches, and a run
with a batch warm-up had micro-batches of the warm-up's starting batch: its held-out loss was taken
over half the sequences of a run without one.  This script puts every run of a study on the same
sequences, from the checkpoints, without re-training:

    python scripts/rescore_heldout.py runs/study-strong/runs/* \\
        --json docs/study-strong/heldout-rescored.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import torch

from tokendrop.config import load_config
from tokendrop.data.prepared import PreparedData
from tokendrop.models.bert.model import BertForMaskedLM
from tokendrop.models.source import load_pretrained
from tokendrop.runs.files import atomic_write_json
from tokendrop.train.step import evaluate_mlm
from tokendrop.train.trainer import heldout_batches


def rescore(run: Path) -> dict:
    cfg = load_config(run / "config.toml")
    model, _ = load_pretrained(run, BertForMaskedLM)
    data = PreparedData.open(cfg.data.path)
    tc = cfg.train
    batches = heldout_batches(data, tc.batch_size, seed=tc.seed, mask_prob=cfg.data.mask_prob_end)
    ev = evaluate_mlm(model, batches, torch.device("cpu"), None, tc.eval_batches)
    logged = [
        json.loads(x)
        for x in (run / "metrics.jsonl").read_text().splitlines()
        if '"eval_loss"' in x
    ]
    return {
        "run": run.name,
        "eval_loss": ev["eval_loss"],
        "eval_slots": ev["eval_slots"],
        "logged_eval_loss": logged[-1]["eval_loss"],
        "logged_eval_slots": logged[-1]["eval_slots"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--json", type=Path, help="write the rows and the per-arm means here")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = [rescore(r) for r in sorted(a.runs) if (r / "config.toml").is_file()]
    arms: dict[str, list[float]] = {}
    for r in rows:
        arms.setdefault(re.sub(r"-seed\d+$", "", r["run"]), []).append(r["eval_loss"])
        print(
            f"{r['run']:36s} {r['eval_loss']:.4f} on {r['eval_slots']} slots (logged "
            f"{r['logged_eval_loss']:.4f} "
            f"on {r['logged_eval_slots']})"
        )
    summary = {
        k: {"mean": statistics.fmean(v), "spread": max(v) - min(v), "seeds": v}
        for k, v in arms.items()
    }
    for k, s in summary.items():
        print(f"{k:30s} mean {s['mean']:.4f}  spread {s['spread']:.4f}")
    if a.json:
        atomic_write_json(
            a.json,
            {
                "command": " ".join(["python", "scripts/rescore_heldout.py", *sys.argv[1:]]),
                "rows": rows,
                "arms": summary,
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
