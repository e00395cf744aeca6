"""The recipe study (configs/study-recipe*.toml): every arm's config plans and validates with a
time budget on the process clock, the new arms are classed right (random-LTD drops tokens, the
schedule arms are dense), and the tiny preset runs every arm end to end (slow)."""

import json

import pytest
import torch

from test_study import _tiny_hf_bert
from tokendrop.study import run_study
from tokendrop.study.plan import METHODS, load_study, plan_runs

ARMS = ["baseline", "token-drop", "random-ltd", "token-drop-sctd", "mask-schedule", "wsd-batch-warmup",
        "best-combination"]


def test_study_recipe_plans_every_arm_at_equal_time(tmp_path):
    src = _tiny_hf_bert(tmp_path / "src")
    study = load_study("study-recipe", [f"source={json.dumps(str(src))}"])
    assert study.methods == ARMS and study.seeds == [0, 1] and not study.evaluate_source
    assert any(o == "finetune_seeds=[0, 1, 2]" for o in study.suite_overrides)
    runs = plan_runs(study, None, tmp_path / "out")
    assert len(runs) == 14
    for r in runs:
        tc = r.cfg.train
        assert (tc.steps, tc.time_budget, tc.budget_clock) == (0, "3m", "process")
        assert r.cfg.model.init == str(src)
    by = {r.method.name: r.cfg for r in runs}
    assert by["random-ltd"].drop.method == "random_ltd" and METHODS["random-ltd"].dropping
    assert METHODS["best-combination"].dropping and not METHODS["mask-schedule"].dropping
    assert not METHODS["wsd-batch-warmup"].dropping
    assert by["token-drop-sctd"].drop.consistency_weight > 0
    assert by["mask-schedule"].data.mask_prob == [0.3, 0.15] and not by["mask-schedule"].drop.enabled
    w = by["wsd-batch-warmup"].train
    assert w.lr_schedule == "wsd" and 0 < w.batch_warmup_start < w.batch_size
    b = by["best-combination"]
    assert b.drop.method == "cumulative" and b.data.mask_prob == [0.3, 0.15] and b.train.lr_schedule == "wsd"
    assert 0 < b.data.seq_len_start < study.seq_len and study.seq_len % b.data.seq_len_start == 0


@pytest.mark.slow
def test_study_recipe_tiny_runs_every_arm(tmp_path):
    src = _tiny_hf_bert(tmp_path / "src")
    out = tmp_path / "out"
    n = torch.get_num_threads()
    try:
        run_study("study-recipe-tiny", out, overrides=[f"source={json.dumps(str(src))}"], progress=False)
    finally:
        torch.set_num_threads(n)
    data = json.loads((out / "study.json").read_text())
    assert set(data["runs"]) == {f"{m}-seed0" for m in ARMS}
    for name, r in data["runs"].items():
        assert r["steps"] > 0 and r["total_flops"] > 0, name
    assert data["evaluation"]["computed"] == len(ARMS) * 3 * 3  # 7 models x 3 tasks x 3 fine-tuning seeds
