"""The recipe study (configs/study-recipe*.toml): every arm's config plans and validates with a
time budget on the process clock, the new arms are classed right (random-LTD drops tokens, the
schedule arms are dense), and the tiny preset runs every arm end to end (slow)."""

import json

import pytest
import torch
from test_study import _tiny_hf_bert

from tokendrop.lab.study import run_study
from tokendrop.lab.study.spec import ARMS as ARM_SPECS, load_study, plan_runs

ARMS = [
    "baseline",
    "token-drop",
    "random-ltd",
    "token-drop-sctd",
    "mask-schedule",
    "wsd-batch-warmup",
    "best-combination",
]


def test_study_recipe_plans_every_arm_at_equal_time(tmp_path):
    src = _tiny_hf_bert(tmp_path / "src")
    study = load_study("study-recipe", [f"source={json.dumps(str(src))}"])
    assert study.methods == ARMS and study.seeds == [0, 1] and not study.evaluate_source
    assert any(o == "finetune_seeds=[0, 1, 2]" for o in study.suite_overrides)
    runs = plan_runs(study, None, tmp_path / "out")
    assert len(runs) == 14
    for r in runs:
        tc = r.cfg.train
        assert (tc.steps, tc.time_budget, tc.budget_clock) == ("unset", "3m", "process")
        assert r.cfg.model.init == str(src)
    by = {r.method.name: r.cfg for r in runs}
    assert by["random-ltd"].drop.method == "random_ltd" and ARM_SPECS["random-ltd"].dropping
    assert ARM_SPECS["best-combination"].dropping and not ARM_SPECS["mask-schedule"].dropping
    assert not ARM_SPECS["wsd-batch-warmup"].dropping
    assert by["token-drop-sctd"].drop.consistency_weight > 0
    assert (
        by["mask-schedule"].data.mask_prob == [0.3, 0.15] and not by["mask-schedule"].drop.enabled
    )
    w = by["wsd-batch-warmup"].train
    assert w.lr_schedule == "wsd" and 0 < w.batch_warmup_start < w.batch_size
    b = by["best-combination"]
    assert (
        b.drop.method == "cumulative"
        and b.data.mask_prob == [0.3, 0.15]
        and b.train.lr_schedule == "wsd"
    )
    assert 0 < b.data.seq_len_start < study.seq_len and study.seq_len % b.data.seq_len_start == 0


@pytest.mark.slow
def test_study_recipe_tiny_runs_every_arm(tmp_path):
    src = _tiny_hf_bert(tmp_path / "src")
    out = tmp_path / "out"
    n = torch.get_num_threads()
    try:
        run_study(
            "study-recipe-tiny", out, overrides=[f"source={json.dumps(str(src))}"], progress=False
        )
    finally:
        torch.set_num_threads(n)
    data = json.loads((out / "study.json").read_text())
    assert set(data["runs"]) == {f"{m}-seed0" for m in ARMS}
    for name, r in data["runs"].items():
        assert r["steps"] > 0 and r["total_flops"] > 0, name
    # 7 models x 3 tasks x 3 fine-tuning seeds
    assert data["evaluation"]["computed"] == len(ARMS) * 3 * 3


def test_equal_time_findings_judge_every_arm_from_the_committed_report():
    """The committed study-recipe report (docs/study-recipe): an equal-time study, so time saved is
    judged on the way to the baseline's loss, and every recipe/schedule arm gets its own sentence
    with the MLM-loss difference from study.json; a fixed-steps study keeps the time-saved
    sentence."""
    from pathlib import Path

    from tokendrop.lab.study.findings import equal_time, findings, paper_comparison
    from tokendrop.lab.study.records import results_from_json

    report = Path(__file__).resolve().parents[3] / "docs" / "study-recipe"
    d = json.loads((report / "study.json").read_text())
    res, study = results_from_json(d), load_study(report / "study.toml", recorded=True)
    assert equal_time(study) and not equal_time(load_study("study-cpu"))
    found = findings(res, study)
    base = res.methods["baseline"].final_eval_loss.mean
    for n in ARMS[2:]:
        line = next(s for s in found if s.startswith(f"**{res.methods[n].label}**"))
        assert f"{res.methods[n].final_eval_loss.mean - base:+.4f}" in line
    claim = paper_comparison(res, study)[0]
    assert claim.startswith("Time saved by token drop (equal time budgets)")
    hits = [
        res.runs[r].to_target.rel_wall
        for r in res.methods["token-drop"].runs
        if res.runs[r].to_target
    ]
    assert f"{100 * sum(hits) / len(hits):.1f}%" in claim
    assert found == d["findings"]  # the committed report says what the current rules compute
