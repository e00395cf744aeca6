"""The strong-baseline study (configs/study-strong*.toml): both presets plan, every arm differs from
the arm it is defined against in exactly the settings of the parts it adds or removes (derived from
the plan's building blocks), the reference arm is configurable and judged against, and the tiny
preset runs every arm end to end (slow)."""

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from test_study import _tiny_hf_bert

from tokendrop.errors import ConfigError
from tokendrop.lab.study import spec as P
from tokendrop.lab.study.spec import ARMS as ARM_SPECS, load_study, plan_runs
from tokendrop.runs.trackers import flat as dotted

ARMS = [
    "strong-baseline",
    "strong-token-drop",
    "strong-random-ltd",
    "strong-token-drop-sctd",
    "baseline",
    "best-combination",
    "combination-no-seq-warmup",
    "combination-no-mask-decay",
]
TOKEN_DROP, RANDOM_LTD, DENSE = P._drop("cumulative"), P._drop("random_ltd"), P._drop("none")
# arm -> (the arm it is defined against, the parts it adds, the parts it removes)
INTENDED = {
    "strong-token-drop": ("strong-baseline", [TOKEN_DROP], []),
    "strong-random-ltd": ("strong-baseline", [RANDOM_LTD], []),
    "strong-token-drop-sctd": ("strong-baseline", [TOKEN_DROP, P.SCTD], []),
    "baseline": ("strong-baseline", [], [P.WSD, P.BATCH_WARMUP, P.MASK_DECAY]),
    "combination-no-seq-warmup": ("best-combination", [], [P.SEQ_WARMUP]),
    "combination-no-mask-decay": ("best-combination", [], [P.MASK_DECAY]),
}


def _keys(parts: list[tuple[str, ...]]) -> set[str]:
    return {o.split("=", 1)[0] for part in parts for o in part}


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return _tiny_hf_bert(tmp_path_factory.mktemp("study-strong") / "src")


@pytest.mark.parametrize("preset", ["study-strong", "study-strong-tiny"])
def test_arms_differ_from_their_reference_in_exactly_the_intended_settings(preset, src, tmp_path):
    study = load_study(preset, [f"source={json.dumps(str(src))}"])
    assert (
        study.methods == ARMS
        and study.baseline_arm == "strong-baseline"
        and not study.evaluate_source
    )
    runs = plan_runs(study, None, tmp_path / "out")
    assert len(runs) == len(ARMS) * len(study.seeds)
    if preset == "study-strong":
        assert len(study.seeds) >= 3 and "finetune_seeds=[0, 1, 2]" in study.suite_overrides
    by = {r.method.name: r.cfg for r in runs if r.seed == study.seeds[0]}
    flat = {n: {k: v for k, v in dotted(asdict(c)).items() if k != "name"} for n, c in by.items()}
    for r in runs:
        tc = r.cfg.train
        assert (
            tc.steps == "unset"
            and tc.time_budget
            and tc.budget_clock == "process"
            and r.cfg.model.init == str(src)
        )
    # the strong baseline is dense with the strong recipe's every part; the combination is as
    # study-recipe's
    s = by["strong-baseline"]
    assert (
        not s.drop.enabled
        and s.train.lr_schedule == "wsd"
        and s.data.mask_prob_start > s.data.mask_prob_end
    )
    assert 0 < s.train.batch_warmup_start < s.train.batch_size
    assert (
        ARM_SPECS["best-combination"].overrides == TOKEN_DROP + P.MASK_DECAY + P.WSD + P.SEQ_WARMUP
    )
    for arm, (ref, add, remove) in INTENDED.items():
        diff = {k for k in flat[arm] if flat[arm][k] != flat[ref][k]}
        allowed = _keys(add + remove)
        assert diff and diff <= allowed, (arm, diff, allowed)
    assert {"drop.method"} <= {
        k
        for k in flat["strong-token-drop"]
        if flat["strong-token-drop"][k] != flat["strong-baseline"][k]
    }
    assert (
        by["strong-random-ltd"].drop.method == "random_ltd"
        and by["strong-token-drop-sctd"].drop.consistency_weight > 0
    )
    assert (
        by["combination-no-seq-warmup"].data.seq_len_start == "off"
        and by["best-combination"].data.seq_len_warmup_from > 0
    )
    assert (
        by["combination-no-mask-decay"].data.mask_prob_start
        == by["combination-no-mask-decay"].data.mask_prob_end
    )
    b = by["baseline"]
    assert (
        b.train.lr_schedule == "linear"
        and b.train.batch_warmup_start == "off"
        and not b.data.mask_scheduled
    )


def test_baseline_arm_must_be_one_of_the_methods():
    with pytest.raises(ConfigError, match="study.baseline_arm"):
        load_study("study-strong", ["baseline_arm='token-drop'"])
    assert load_study("study-recipe").baseline_arm == "baseline"


def test_findings_judge_against_the_named_reference_arm():
    """The committed study-recipe results, read with another arm as the reference: the differences
    in the findings are taken from that arm's loss, and the plain baseline gets its own sentence."""
    from tokendrop.lab.study.findings import findings
    from tokendrop.lab.study.records import results_from_json
    from tokendrop.lab.study.spec import StudyConfig

    d = json.loads(
        (Path(__file__).resolve().parents[3] / "docs" / "study-recipe" / "study.json").read_text()
    )
    res = results_from_json({**d, "baseline": "wsd-batch-warmup"})
    assert res.baseline == "wsd-batch-warmup" and res.reference() == "the WSD + batch warm-up"
    study = StudyConfig(methods=list(res.methods), baseline_arm="wsd-batch-warmup", toy_data=True)
    found = findings(res, study)
    ref = res.methods["wsd-batch-warmup"].final_eval_loss.mean
    for n in ("baseline", "mask-schedule", "best-combination"):
        line = next(s for s in found if s.startswith(f"**{res.methods[n].label}**"))
        assert (
            f"{res.methods[n].final_eval_loss.mean - ref:+.4f}" in line
            and "the WSD + batch warm-up" in line
        )
    # the reference is not judged against itself
    assert not any(s.startswith("**WSD + batch warm-up**") for s in found)
    assert any(s.startswith("Time to the WSD + batch warm-up's final MLM loss") for s in found)
    assert results_from_json({k: v for k, v in d.items() if k != "baseline"}).baseline == "baseline"


@pytest.mark.slow
def test_study_strong_tiny_runs_every_arm_against_the_strong_baseline(src, tmp_path):
    from tokendrop.lab.study import run_study

    out = tmp_path / "out"
    n = torch.get_num_threads()
    try:
        run_study(
            "study-strong-tiny", out, overrides=[f"source={json.dumps(str(src))}"], progress=False
        )
    finally:
        torch.set_num_threads(n)
    data = json.loads((out / "study.json").read_text())
    assert (
        set(data["runs"]) == {f"{m}-seed0" for m in ARMS} and data["baseline"] == "strong-baseline"
    )
    for name, r in data["runs"].items():
        assert r["steps"] > 0 and r["total_flops"] > 0, name
    ref = data["methods"]["strong-baseline"]
    assert data["target_eval_loss"] == pytest.approx(ref["final_eval_loss"]["mean"])
    assert ref["rel_wall"] == pytest.approx(1.0) and data["methods"]["baseline"][
        "rel_wall"
    ] == pytest.approx(
        data["methods"]["baseline"]["wall_time_s"]["mean"] / ref["wall_time_s"]["mean"]
    )
    # 8 models x 3 tasks x 3 fine-tuning seeds
    assert data["evaluation"]["computed"] == len(ARMS) * 3 * 3
    ttq = (out / "tables" / "time-to-quality.md").read_text()
    assert "the strong baseline's final held-out MLM loss" in ttq
