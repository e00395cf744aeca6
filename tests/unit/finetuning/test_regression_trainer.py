"""Regression fine-tuning (STS-B's kind): one output trained with mean squared error learns a
target it can see, and its dev predictions are the output itself (floats on the target's scale)."""

from __future__ import annotations

import random

import pytest
from toydata import sentiment_examples, write_checkpoint

from tokendrop.config import FinetuneConfig
from tokendrop.finetuning import finetune

HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"


def test_regression_learns_a_visible_score(tmp_path):
    rng = random.Random(0)
    d = tmp_path / "STS-B"
    d.mkdir()
    for seed, (name, n) in enumerate((("train.tsv", 240), ("dev.tsv", 60))):
        rows = []
        # score 1 +- 1 for a negative first sentence, 4 +- 1 for a positive one
        for i, (text, lab) in enumerate(sentiment_examples(tmp_path / f"sst-{name}", n, seed)):
            rows.append(
                f"{i}\tg\tf\t2012\t{i}\tnone\tnone\t{text}\tthe movie was a film\t"
                f"{1.0 + 3.0 * lab + rng.uniform(-1, 1):.3f}"
            )
        (d / name).write_text("\n".join([HEADER, *rows]) + "\n")
    cfg = FinetuneConfig(
        task="stsb",
        data=str(tmp_path),
        epochs=8,
        lr=3e-3,
        batch_size=16,
        log_every=0,
        device="cpu",
        threads=1,
    )
    r = finetune(cfg, write_checkpoint(tmp_path / "model"), tmp_path / "out", log=None)
    m = r["metrics"]["dev"]
    assert m["pearson"] >= 80.0 and m["spearman"] >= 60.0, m  # the untrained model: about 0
    assert (
        r["scores"] == {"stsb": m["spearman"], "stsb_pearson": m["pearson"]}
        and r["score"] == m["spearman"]
    )
    assert "accuracy" not in r and r["labels"] == []
    rows = [
        line.split("\t")
        for line in (tmp_path / "out" / "predictions" / "dev.tsv").read_text().splitlines()[1:]
    ]
    preds, gold = [float(p) for _, p, _ in rows], [float(g) for _, _, g in rows]
    lo = [p for p, g in zip(preds, gold) if g < 2.5]
    hi = [p for p, g in zip(preds, gold) if g >= 2.5]
    # on the target's scale
    assert sum(hi) / len(hi) - sum(lo) / len(lo) == pytest.approx(3.0, abs=1.0)
