"""Each arm at its own best learning rate (``study.lr_sweep``, tokendrop.lab.study.sweep): the
sweep's runs, the rate each arm keeps, the arms' runs at their rates, the table; and the
study-paper presets built on it."""

import json
import math

import pytest

from tokendrop.errors import ConfigError
from tokendrop.lab.study import load_study, plan_runs
from tokendrop.lab.study.spec import lr_tag, method_spec, sweep_order
from tokendrop.lab.study.sweep import (
    SweepRow,
    arm_runs,
    choose_lrs,
    sweep_rows,
    table_lr_sweep,
)

PAPER_PRESETS = ["study-paper", "study-paper-512", "study-paper-l4", "study-paper-l8"]


def test_lr_tags_name_the_rate_exactly():
    assert [lr_tag(x) for x in (1e-3, 2e-3, 0.0015, 4e-4, 0.1)] == [
        "1e-3",
        "2e-3",
        "1.5e-3",
        "4e-4",
        "1e-1",
    ]


def test_the_sweep_runs_every_arm_at_every_rate_with_the_first_seed_then_the_chosen_rate(tmp_path):
    study = load_study("study-paper")
    lrs, arms = study.lr_sweep, study.methods
    runs = plan_runs(study, None, tmp_path)
    assert len(runs) == len(arms) * len(lrs)
    assert {r.seed for r in runs} == {study.seeds[0]}
    by = {r.name: r for r in runs}
    for arm in arms:
        for lr in lrs:
            r = by[f"{arm}-lr{lr_tag(lr)}-seed0"]
            assert r.cfg.train.lr == lr and r.method.arm_name == arm and r.method.lr == lr
    # rate by rate, the middle rate first: a sweep cut short compares every arm at one rate
    arms_first = [r.method.arm_name for r in runs[: len(arms)]]
    assert arms_first == arms and {r.method.lr for r in runs[: len(arms)]} == {sorted(lrs)[1]}
    assert sweep_order([4e-3, 1e-3, 2e-3]) == [2e-3, 1e-3, 4e-3]
    assert sweep_order([1, 2, 3, 4]) == [2, 1, 3, 4] and sweep_order([5]) == [5]
    # once an arm's rate is chosen its other seeds follow at that rate only
    chosen = {"baseline": lrs[0], "token-drop": lrs[1]}
    more = plan_runs(study, None, tmp_path, chosen=chosen)
    extra = [r for r in more if r.seed != study.seeds[0]]
    assert sorted(r.name for r in extra) == sorted(
        f"{a}-lr{lr_tag(chosen[a])}-seed{s}" for a in chosen for s in study.seeds[1:]
    )
    # a swept name resolves to its arm at its rate
    m = method_spec(f"token-drop-lr{lr_tag(lrs[2])}", study)
    assert (m.arm_name, m.lr) == ("token-drop", lrs[2])
    assert m.overrides[-1] == f"train.lr={lrs[2]!r}"


def test_the_lowest_final_loss_is_chosen_a_nonfinite_one_loses_and_an_unfinished_arm_waits():
    rows = [
        SweepRow("baseline", 1e-3, "b1", 4.2),
        SweepRow("baseline", 2e-3, "b2", 3.9),
        SweepRow("baseline", 4e-3, "b4", math.nan),
        SweepRow("token-drop", 1e-3, "t1", 4.0),
        SweepRow("token-drop", 2e-3, "t2", None),
    ]
    assert choose_lrs(rows) == {"baseline": 2e-3}
    rows[-1] = SweepRow("token-drop", 2e-3, "t2", 4.0)
    assert choose_lrs(rows) == {"baseline": 2e-3, "token-drop": 1e-3}  # a tie keeps the first
    table = table_lr_sweep(rows, {"baseline": 2e-3, "token-drop": 1e-3}, "baseline")
    line = next(x for x in table.splitlines() if x.startswith("| token-drop"))
    assert "**4.000**" in line and line.rstrip(" |").endswith("4.000")  # at baseline's rate 2e-3
    assert "| nan |" in next(x for x in table.splitlines() if x.startswith("| baseline"))


def test_sweep_rows_read_the_runs_last_eval_loss_and_arm_runs_keep_the_chosen_rate(tmp_path):
    study = load_study("study-paper", ["seeds=[0, 1]", "methods=['baseline', 'token-drop']"])
    for name, loss in [("baseline-lr1e-3-seed0", 4.5), ("baseline-lr2e-3-seed0", 4.1)]:
        rd = tmp_path / "runs" / name
        rd.mkdir(parents=True)
        (rd / "report.md").write_text("done\n")
        recs = [{"step": 1000, "eval_loss": 5.0}, {"step": 2000, "eval_loss": loss}]
        (rd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    rows = sweep_rows(study, tmp_path)
    got = {(r.arm, r.lr): r.final_eval_loss for r in rows}
    assert got[("baseline", 1e-3)] == 4.5 and got[("baseline", 2e-3)] == 4.1
    assert got[("baseline", 4e-3)] is None and got[("token-drop", 1e-3)] is None
    assert choose_lrs(rows) == {}  # baseline's 4e-3 has not finished
    chosen = {"baseline": 2e-3}
    runs = arm_runs(plan_runs(study, None, tmp_path, chosen=chosen), chosen, study)
    assert [(r.name, r.method.name) for r in runs] == [
        ("baseline-lr2e-3-seed0", "baseline"),
        ("baseline-lr2e-3-seed1", "baseline"),
    ]
    assert runs[0].method.label.endswith("(lr 2e-3)")


def test_lr_sweep_values_are_checked():
    with pytest.raises(ConfigError, match=r"study.lr_sweep: expected learning rates in \(0, 1\)"):
        load_study("study-paper", ["lr_sweep=[0.001, 0]"])
    with pytest.raises(ConfigError, match="study.lr_sweep: a rate is listed twice"):
        load_study("study-paper", ["lr_sweep=[0.001, 1e-3]"])


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_the_paper_presets_train_the_papers_layout_from_scratch(name, tmp_path):
    study = load_study(name)
    assert not study.source and study.lr_sweep and len(study.lr_sweep) >= 3
    assert study.baseline_arm == "baseline" and {"baseline", "token-drop"} <= set(study.methods)
    runs = plan_runs(study, None, tmp_path)
    cfg = {r.method.arm_name: r.cfg for r in runs}
    base, td = cfg["baseline"], cfg["token-drop"]
    L = base.model.num_layers
    assert base.model.family == "modernbert" and base.model.global_attn_every_n_layers == 1
    assert set(base.model.resolved_layer_types()) == {"full_attention"}
    assert td.drop.span(L) == (L // 2 - 1, L - 1)  # the paper's layout
    assert base.train.lr_schedule == "linear" and base.data.mask_prob_end == 0.15
    assert base.data.seq_len * base.train.batch_size == 16 * 128  # equal tokens per step
    if "baseline-75" in cfg:
        assert cfg["baseline-75"].train.steps == round(0.75 * base.train.steps)
    if "token-drop-stage2" in cfg:
        assert cfg["token-drop-stage2"].drop.stage2_fraction == 0.1


def test_a_swept_study_end_to_end_reports_each_arm_at_its_rate(tmp_path):
    torch = pytest.importorskip("torch")
    n = torch.get_num_threads()
    from tokendrop.lab.study import run_study

    out = tmp_path / "sw"
    try:
        run_study(
            "study-tiny",
            out,
            [
                "lr_sweep=[1e-3, 3e-3]",
                "methods=['baseline', 'token-drop']",
                "drop_rates=[]",
                "seeds=[0, 1]",
                "evaluate=false",
            ],
            progress=False,
        )
    finally:
        torch.set_num_threads(n)
    d = json.loads((out / "study.json").read_text())
    assert {(r["arm"], r["lr"]) for r in d["lr_sweep"]} == {
        (a, lr) for a in ("baseline", "token-drop") for lr in (1e-3, 3e-3)
    }
    assert all(r["final_eval_loss"] is not None for r in d["lr_sweep"])
    chosen = d["chosen_lr"]
    assert set(chosen) == {"baseline", "token-drop"}
    for arm, lr in chosen.items():
        best = min(
            (r for r in d["lr_sweep"] if r["arm"] == arm), key=lambda r: r["final_eval_loss"]
        )
        assert best["lr"] == lr
        # the arm's row is its two seeds at that rate
        assert d["methods"][arm]["runs"] == [f"{arm}-lr{lr_tag(lr)}-seed{s}" for s in (0, 1)]
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(
        [f"{a}-lr{t}-seed0" for a in chosen for t in ("1e-3", "3e-3")]
        + [f"{a}-lr{lr_tag(chosen[a])}-seed1" for a in chosen]
    )
    assert "# Learning-rate sweep" in (out / "tables" / "lr-sweep.md").read_text()
    assert "### Learning-rate sweep" in (out / "study.md").read_text()


def test_study_long_compares_at_equal_process_time_at_512_judged_on_long_contexts():
    from tokendrop.lab.study.evaluation import suite_config

    study = load_study("study-long")
    assert study.source == "minilm" and study.seq_len == 512 and len(study.lr_sweep) >= 3
    assert len(study.seeds) >= 3 and study.methods == ["baseline", "token-drop"]
    assert any(o.startswith("train.time_budget=") for o in study.base_overrides)
    assert "train.budget_clock='process'" in study.base_overrides
    suite = suite_config(study, {})
    assert "squad1" in suite.tasks and suite.squad.max_seq_len_qa == 512
    assert len(suite.glue_epochs) * len(suite.glue_lrs) == 4  # the paper's 2 x 2 grid


CHOSEN = ["lr_sweep=[]", "lr_chosen={baseline = 2e-3, token-drop = 1e-3}"]


def test_rates_chosen_by_an_earlier_sweep_run_every_seed_at_the_arms_own_rate(tmp_path):
    study = load_study("study-paper", [*CHOSEN, "seeds=[1, 2]"])
    runs = plan_runs(study, None, tmp_path)
    want = {"baseline": 2e-3, "token-drop": 1e-3}
    assert len(runs) == len(study.methods) * 2
    for r in runs:
        arm = r.method.arm_name
        if arm in want:
            assert r.name == f"{arm}-lr{lr_tag(want[arm])}-seed{r.seed}"
            assert r.cfg.train.lr == want[arm] and r.method.lr == want[arm]
            # a worker rebuilds the method from its run name
            assert method_spec(r.method.name, study).lr == want[arm]
        else:  # an arm left out trains at the base config's rate, under its own name
            assert r.method.lr is None and r.name == f"{arm}-seed{r.seed}"
    kept = arm_runs(runs, want, study)
    assert len(kept) == len(runs)
    assert {r.method.name for r in kept} == set(study.methods)


def test_chosen_rates_are_checked_and_survive_the_studys_own_record(tmp_path):
    from tokendrop.config import to_toml

    with pytest.raises(ConfigError, match="study.lr_chosen: not with study.lr_sweep"):
        load_study("study-paper", [CHOSEN[1]])
    with pytest.raises(ConfigError, match="study.lr_chosen: 'dense' is not one of"):
        load_study("study-paper", ["lr_sweep=[]", "lr_chosen={dense = 1e-3}"])
    with pytest.raises(ConfigError, match=r"study.lr_chosen.baseline: expected a rate in \(0, 1\)"):
        load_study("study-paper", ["lr_sweep=[]", "lr_chosen={baseline = 2}"])
    with pytest.raises(ConfigError, match="lr_chosen: expected a table"):
        load_study("study-paper", ["lr_sweep=[]", "lr_chosen=[1e-3]"])
    with pytest.raises(ConfigError, match="lr_chosen.baseline: expected a number"):
        load_study("study-paper", ["lr_sweep=[]", "lr_chosen={baseline = 'fast'}"])
    study = load_study("study-paper", CHOSEN)
    (tmp_path / "study.toml").write_text(to_toml(study))
    again = load_study(tmp_path / "study.toml", recorded=True)
    assert again.lr_chosen == study.lr_chosen and again == study


def test_the_resolution_note_a_run_records_is_not_a_changed_config():
    """A time-budgeted run with a warm-up share records how its length was resolved
    (train.resolved_from); the study's own config, not yet resolved, must still match it."""
    from tokendrop.config import Config, TrainConfig, to_dict
    from tokendrop.lab.study.run import config_changes

    want = Config(train=TrainConfig(time_budget="20m", warmup_ratio=0.05))
    saved = to_dict(want)
    saved["train"]["resolved_from"] = "train.warmup_ratio = 0.05 of the time budget"
    assert config_changes(want, saved) == []
    saved["train"]["warmup_ratio"] = 0.1
    assert config_changes(want, saved) == ["train.warmup_ratio: 0.1 -> 0.05"]
