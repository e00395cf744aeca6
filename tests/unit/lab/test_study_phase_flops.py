"""A study's FLOP count of a run with a dense start (``tokendrop.lab.study.aggregate``): from the
run's log, and from its config alone (a log without FLOPs), the dense steps count dense."""

from __future__ import annotations

import json

import pytest
import torch

from tokendrop.config import load_config
from tokendrop.dropping.flops import step_flops
from tokendrop.errors import DataError
from tokendrop.lab.study.aggregate import run_measurements
from tokendrop.runs.metrics import read_metrics
from tokendrop.train.resume import load_run_config
from tokendrop.train.trainer import pretrain


def test_a_dense_start_counts_dense_in_the_studys_flops(tiny_data, tmp_path):
    run = tmp_path / "r"
    cfg = load_config(
        "tiny",
        [
            f'data.path="{tiny_data}"',
            "train.steps=10",
            "train.eval_every=5",
            "train.eval_batches=1",
            "train.threads=1",
            "drop.method=cumulative",
            "drop.dense_start_share=0.3",
        ],
    )
    n = torch.get_num_threads()
    try:
        pretrain(cfg, run, progress=False)
    finally:
        torch.set_num_threads(n)
    saved = load_run_config(run)
    start = next(r for r in read_metrics(run) if r.get("event") == "start")
    t, b = int(start["seq_len"]), saved.train.batch_size
    dense = step_flops(saved.model, t, b, None).total
    drop = step_flops(saved.model, t, b, saved.drop).total
    want = 3 * dense + 7 * drop
    assert run_measurements(run).total_flops == want  # the run's own count
    log = run / "metrics.jsonl"
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    log.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "flops"}) + "\n" for r in rows)
    )
    m = run_measurements(run)
    assert m.total_flops == want
    assert [p["flops"] for p in m.curve] == [0, 3 * dense + 2 * drop, want]  # steps 0, 5, 10
    assert saved.data.seq_len == "data"  # the T the data was prepared with
    log.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "seq_len"}) + "\n" for r in rows)
    )
    with pytest.raises(
        DataError, match=r"metrics\.jsonl: no 'start' record with the run's seq_len"
    ):
        run_measurements(run)
