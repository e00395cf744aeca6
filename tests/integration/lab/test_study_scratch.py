"""The from-scratch study (configs/study-scratch.toml): its arms, the equal-compute control's steps,
the seed-by-seed run order, the selection trace through training and the CPU-time clock; a small
study with those settings end to end, rerun (everything skipped) and resumed after an
interruption."""

import dataclasses
import json
import shutil

import pytest
import torch

from tokendrop.config import to_dict
from tokendrop.dropping.flops import flop_ratio
from tokendrop.errors import ConfigError
from tokendrop.lab.study import load_study, plan_runs, run_study
from tokendrop.lab.study.data import data_fingerprint
from tokendrop.lab.study.run import config_changes
from tokendrop.lab.study.spec import ARMS, flops_fraction
from tokendrop.train.resume import load_run_config

SELECTING = {"token-drop", "freq", "rand", "strong-token-drop"}


@pytest.fixture(autouse=True)
def _keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_study_scratch_preset_plans_its_arms(tmp_path):
    study = load_study("study-scratch")
    assert study.source == "" and study.seeds == [0, 1, 2] and study.baseline_arm == "baseline"
    assert not study.evaluate and study.run_order == "seed" and study.selection_checkpoints == 4
    runs = plan_runs(study, None, tmp_path)
    n = len(study.methods)
    assert len(runs) == 3 * n
    # seed by seed: every arm's seed 0 before any seed 1
    assert [r.seed for r in runs] == [s for s in (0, 1, 2) for _ in range(n)]
    assert [r.method.name for r in runs[:n]] == study.methods
    by = {r.name: r.cfg for r in runs}
    base, td = by["baseline-seed0"], by["token-drop-seed0"]
    assert base.drop.method == "none" and base.train.lr_schedule == "wsd"
    assert base.train.budget_clock == "process"
    # the calibrated model (docs/study-scratch/calibration.md): ModernBERT's layer pattern, the
    # drop span on the two sliding-window layers
    assert base.model.family == "modernbert" and base.model.hidden_dropout == 0.0
    types = base.model.resolved_layer_types()
    start, end = td.drop.span(base.model.num_layers)
    assert (start, end) == (1, 3) and types[start:end] == ["sliding_attention"] * 2
    assert types[0] == types[-1] == "full_attention"
    # the equal-compute control: dense for the steps that spend token drop's FLOPs, its own schedule
    model = dataclasses.replace(base.model, vocab_size=study.vocab_size)
    ratio = flop_ratio(model, study.seq_len, td.drop)
    eq = by["baseline-equal-flops-seed0"]
    assert 0.7 < ratio < 0.9
    assert eq.train.steps == round(ratio * base.train.steps) < base.train.steps
    assert eq.drop.method == "none" and eq.train.lr_schedule == "wsd"
    assert flops_fraction(study, ARMS["token-drop"]) == pytest.approx(ratio)
    assert (by["freq-seed0"].drop.method, by["rand-seed0"].drop.method) == ("frequency", "random")
    assert by["freq-seed0"].drop.stage2_fraction == 0.0 and by["rand-seed0"].drop.rate == 0.5
    strong, strong_td = by["strong-baseline-seed0"], by["strong-token-drop-seed0"]
    assert strong.train.batch_warmup_start == strong.train.batch_size // 2
    assert strong.data.mask_prob_start == 0.3
    assert strong_td.drop.method == "cumulative" and strong_td.train.batch_warmup_start == 8
    # the selecting arms keep 4 checkpoints through training for the trace; the dense ones one
    for name, cfg in by.items():
        arm = name.rsplit("-seed", 1)[0]
        if arm in SELECTING:
            tc = cfg.train
            assert (tc.keep_checkpoints, tc.ckpt_every) == (5, tc.steps // 4), name
        else:
            assert cfg.train.keep_checkpoints == 1, name


def test_study_run_order_and_selection_checkpoints_are_checked():
    with pytest.raises(ConfigError, match="study.run_order: expected one of method, seed"):
        load_study("study-scratch", ["run_order='arm'"])
    with pytest.raises(ConfigError, match="study.selection_checkpoints: expected >= 0"):
        load_study("study-scratch", ["selection_checkpoints=-1"])


SMALL = [
    "methods=['baseline', 'baseline-equal-flops', 'token-drop', 'rand']",
    "drop_rates=[]",
    "seeds=[0, 1]",
    "run_order='seed'",
    "selection_checkpoints=2",
    "evaluate=false",
    "inspect_method='token-drop'",
]
CHECKPOINTS = "*/checkpoints/step-*/model.safetensors"


@pytest.fixture(scope="module")
def small_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study-scratch") / "out"
    base = load_study("study-tiny").base_overrides + ["train.budget_clock='process'"]
    n = torch.get_num_threads()
    try:
        run_study(
            "study-tiny",
            out,
            overrides=SMALL + [f"base_overrides={json.dumps(base)}"],
            progress=False,
        )
    finally:
        torch.set_num_threads(n)
    return out, base


def test_small_scratch_study_end_to_end(small_study):
    out, _ = small_study
    state = json.loads((out / "study-state.json").read_text())
    arms = ("baseline", "baseline-equal-flops", "token-drop", "rand")
    assert list(state["runs"]) == [f"{m}-seed{s}" for s in (0, 1) for m in arms]
    data = json.loads((out / "study.json").read_text())
    runs = data["runs"]
    assert runs["baseline-equal-flops-seed0"]["steps"] < runs["baseline-seed0"]["steps"]
    eq, td = data["methods"]["baseline-equal-flops"], data["methods"]["token-drop"]
    assert eq["rel_flops"] == pytest.approx(td["rel_flops"], rel=0.05)  # equal compute, to a step
    assert all(r["clock"] == "process" for r in runs.values())
    for name in ("token-drop-seed0", "token-drop-seed1", "rand-seed0"):
        trace = runs[name]["selection"]
        assert [d["step"] for d in trace] == [4, 8]
        for d in trace:
            assert 0 < d["kept_mask_share"] <= d["kept_target_share"] <= 1
            assert d["ordinary_kept_per_sequence"] >= 0
        assert ("spearman_score_vs_rarity" in trace[-1]) == name.startswith("token-drop")
    assert runs["baseline-seed0"]["selection"] == []
    sel = (out / "tables" / "selection.md").read_text()
    assert "| token drop (proposed) | 4 |" in sel and "| token drop (rand) | 8 |" in sel
    ttq = (out / "tables" / "time-to-quality.md").read_text()
    assert "CPU time to target (s)" in ttq
    md = (out / "study.md").read_text()
    assert "What the selector keeps, through training" in md and "CPU time of its own process" in md
    h = runs["baseline-seed0"]["unigram_entropy"]
    below = h - runs["baseline-seed0"]["final_eval_loss"]
    assert (
        f"unigram entropy under the study's tokenizer is {h:.3f} nats" in md
        and f"{below:.2f}, " in md
    )


def test_small_scratch_study_reruns_and_resumes(small_study):
    out, base = small_study
    overrides = SMALL + [f"base_overrides={json.dumps(base)}"]
    stamp = {p: p.stat().st_mtime_ns for p in (out / "runs").glob(CHECKPOINTS)}
    run_study("study-tiny", out, overrides=overrides, progress=False)  # none retrained
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").glob(CHECKPOINTS)} == stamp
    rd = out / "runs" / "token-drop-seed1"  # killed after its step-4 checkpoint
    shutil.rmtree(rd / "checkpoints" / "step-00000008")
    (rd / "report.md").unlink()
    run_study("study-tiny", out, overrides=overrides, progress=False)
    recs = [json.loads(x) for x in (rd / "metrics.jsonl").read_text().splitlines()]
    assert sum(1 for r in recs if r.get("event") == "start") == 1  # resumed, not restarted
    runs = json.loads((out / "study.json").read_text())["runs"]
    assert [d["step"] for d in runs["token-drop-seed1"]["selection"]] == [4, 8]


REMEDIES = {
    "token-drop-dense-start": {"dense_start_share": 0.1},
    "token-drop-random-start": {"random_start_share": 0.1},
    "token-drop-freq-prior": {"importance_init": "frequency"},
    "token-drop-mask-unpinned": {"mask_rows": "ranked"},
}


def test_remedies_preset_is_study_scratch_with_the_four_remedy_arms(tmp_path):
    """configs/study-scratch-remedies.toml: study-scratch's data (the same fingerprint, so its
    prepared directory is reused), model and schedule; each arm is study-scratch's token-drop run
    with one [drop] option changed; the dense start's FLOPs count its dense steps."""
    main, rem = load_study("study-scratch"), load_study("study-scratch-remedies")
    assert data_fingerprint(rem) == data_fingerprint(main)
    assert rem.base_overrides == main.base_overrides and rem.base == main.base
    assert (rem.seeds, rem.parallel, rem.methods) == (main.seeds, 1, list(REMEDIES))
    assert {ARMS[m].group for m in rem.methods} == {"remedy"}
    td = {r.name: r.cfg for r in plan_runs(main, None, tmp_path)}["token-drop-seed0"]
    for run in plan_runs(rem, None, tmp_path):
        arm = run.method.name
        want = dataclasses.replace(td.drop, **REMEDIES[arm])
        assert run.cfg.drop == want, arm
        assert run.cfg.model == td.model and run.cfg.data.seq_len == td.data.seq_len
        assert run.cfg.train.steps == td.train.steps == 3000
        assert (run.cfg.train.keep_checkpoints, run.cfg.train.ckpt_every) == (5, 750)
    ratio = flops_fraction(main, ARMS["token-drop"])
    assert flops_fraction(rem, ARMS["token-drop-dense-start"]) == pytest.approx(0.1 + 0.9 * ratio)
    for arm in ("token-drop-random-start", "token-drop-freq-prior", "token-drop-mask-unpinned"):
        assert flops_fraction(rem, ARMS[arm]) == pytest.approx(ratio)


def test_global_preset_is_study_scratch_with_every_layer_global(tmp_path):
    """configs/study-scratch-global.toml: study-scratch's data (the same fingerprint), schedule and
    arms' drop settings; the model differs only in attending globally in every layer; its 25%
    dense start counts a quarter of the steps dense."""
    main, glob = load_study("study-scratch"), load_study("study-scratch-global")
    assert data_fingerprint(glob) == data_fingerprint(main)
    quarter_arms = ["token-drop-dense-quarter", "baseline-equal-flops-quarter"]
    assert glob.methods == ["baseline", "token-drop", *quarter_arms]
    ref = {r.name: r.cfg for r in plan_runs(main, None, tmp_path)}
    runs = {r.name: r.cfg for r in plan_runs(glob, None, tmp_path)}
    for name in ("baseline-seed0", "token-drop-seed0"):
        a, b = ref[name], runs[name]
        assert b.drop == a.drop and b.train == a.train and b.data == a.data
        assert dataclasses.replace(b.model, global_attn_every_n_layers=1) == b.model
        assert a.model.global_attn_every_n_layers > 1
        assert dataclasses.replace(a.model, global_attn_every_n_layers=1) == b.model
    quarter = runs["token-drop-dense-quarter-seed0"].drop
    assert quarter == dataclasses.replace(runs["token-drop-seed0"].drop, dense_start_share=0.25)
    ratio = flops_fraction(glob, ARMS["token-drop"])
    want = 0.25 + 0.75 * ratio
    assert flops_fraction(glob, ARMS["token-drop-dense-quarter"]) == pytest.approx(want)
    control = runs["baseline-equal-flops-quarter-seed0"]
    dense = runs["baseline-seed0"]
    assert (control.drop, control.model) == (dense.drop, dense.model)
    assert control.train.steps == round(want * 3000) < dense.train.steps


@pytest.mark.slow
def test_remedy_runs_copied_into_a_study_are_reported_beside_its_arms(tmp_path):
    """The preset header's recipe on a small study: a second study on a copy of the first's
    prepared data prepares nothing; its runs copied into the first and the report made with the
    methods extended and ``only=[]`` (nothing trained): the remedy arms appear with their seed
    count in their label, their one seed judged without a spread of its own."""
    base = load_study("study-tiny").base_overrides + ["train.steps=10"]  # a 1-step dense start
    common = [f"base_overrides={json.dumps(base)}", "drop_rates=[]", "evaluate=false"]
    arms, remedies = ["baseline", "token-drop"], ["token-drop-dense-start", "token-drop-freq-prior"]
    main, rem = tmp_path / "main", tmp_path / "rem"
    n = torch.get_num_threads()
    try:
        run_study("study-tiny", main, common + [f"methods={arms}", "seeds=[0, 1]"], progress=False)
        rem.mkdir()
        shutil.copy(main / ".tokendrop.json", rem)
        shutil.copytree(main / "data", rem / "data")
        stamp = rem / "data" / "prepared.json"
        stamp.write_text(
            stamp.read_text().replace(str(main.resolve() / "data"), str(rem.resolve() / "data"))
        )
        bins = {p: p.stat().st_mtime_ns for p in (rem / "data").rglob("*.bin")}
        run_study(
            "study-tiny",
            rem,
            common
            + [
                f"methods={remedies}",
                "seeds=[0]",
                f"baseline_arm='{remedies[0]}'",
                f"inspect_method='{remedies[0]}'",
            ],
            progress=False,
        )
        assert {p: p.stat().st_mtime_ns for p in (rem / "data").rglob("*.bin")} == bins
        cfg = load_run_config(rem / "runs" / f"{remedies[0]}-seed0")
        assert str(rem.resolve() / "data") in cfg.data.path
        for arm in remedies:
            shutil.copytree(rem / "runs" / f"{arm}-seed0", main / "runs" / f"{arm}-seed0")
        before = sorted(p.name for p in (main / "runs").iterdir())
        run_study(
            "study-tiny",
            main,
            common + [f"methods={arms + remedies}", "seeds=[0, 1]"],
            only=[],
            progress=False,
        )
    finally:
        torch.set_num_threads(n)
    assert sorted(p.name for p in (main / "runs").iterdir()) == before  # nothing trained
    data = json.loads((main / "study.json").read_text())
    methods = data["methods"]
    assert methods["token-drop"]["seeds"] == [0, 1]
    assert methods["token-drop"]["label"] == ARMS["token-drop"].label
    dense_start = ARMS["token-drop-dense-start"].label + " (1 of 2 seeds)"
    assert methods["token-drop-dense-start"]["seeds"] == [0]
    assert methods["token-drop-dense-start"]["label"] == dense_start
    # a dense start costs more FLOPs than plain token drop, less than dense
    fl = {k: methods[k]["rel_flops"] for k in ("token-drop", "token-drop-dense-start")}
    assert fl["token-drop"] < fl["token-drop-dense-start"] < 1.0
    t1 = (main / "tables" / "table1.md").read_text()
    row = next(x for x in t1.splitlines() if x.startswith(f"| {dense_start} |"))
    assert "**" not in row  # one seed is no mean to rank among the arms' means
    one = data["runs"]["token-drop-dense-start-seed0"]["final_eval_loss"]
    same = data["runs"]["token-drop-seed0"]["final_eval_loss"]
    md = (main / "study.md").read_text()
    assert f"Remedy **{dense_start}** (1 seed(s)" in md
    assert "one seed, no spread of its own" in md
    assert f"(on the same seed(s) [0]: {one - same:+.4f})" in md


def test_a_run_recorded_before_the_remedy_options_is_not_a_changed_config(tmp_path):
    """study-scratch's runs were trained before drop.dense_start_share, random_start_share and
    mask_rows existed: their saved configs lack them, which reads as the defaults (the study skips
    or resumes them); a saved value that differs is still a change."""
    run = {r.name: r for r in plan_runs(load_study("study-scratch"), None, tmp_path)}
    cfg = run["token-drop-seed0"].cfg
    saved = to_dict(cfg)
    for k in ("dense_start_share", "random_start_share", "mask_rows"):
        del saved["drop"][k]
    assert config_changes(cfg, saved) == []
    saved["drop"]["mask_rows"] = "ranked"
    assert config_changes(cfg, saved) == ["drop.mask_rows: 'ranked' -> 'pinned'"]


@pytest.mark.parametrize("report", ["study-scratch", "study-scratch-global"])
def test_committed_reports_judge_each_arm_against_its_equal_compute_control(report):
    """The committed from-scratch reports: every arm whose equal-compute control (a dense arm with
    ``flops_of`` naming it, from the registry) finished gets a sentence with the mean difference
    and each seed's pair from study.json."""
    from pathlib import Path

    from tokendrop.lab.study.findings import findings
    from tokendrop.lab.study.records import results_from_json

    where = Path(__file__).resolve().parents[3] / "docs" / report
    d = json.loads((where / "study.json").read_text())
    res, study = results_from_json(d), load_study(where / "study.toml", recorded=True)
    found = findings(res, study)
    controls = [c for c in d["methods"] if ARMS[c].flops_of in d["methods"]]
    assert controls  # each report has one
    runs = d["runs"]
    for c in controls:
        x = ARMS[c].flops_of
        line = next(
            s
            for s in found
            if s.startswith(f"Against its equal-compute control, {res.methods[c].label} ")
        )
        mean_x, mean_c = (d["methods"][n]["final_eval_loss"]["mean"] for n in (x, c))
        assert f"is {mean_x - mean_c:+.4f}" in line
        for seed in d["methods"][c]["seeds"]:
            pair = (
                runs[f"{x}-seed{seed}"]["final_eval_loss"]
                - runs[f"{c}-seed{seed}"]["final_eval_loss"]
            )
            assert f"{pair:+.3f} (seed {seed})" in line


def test_selection_table_rows_are_steps_not_checkpoint_indices():
    """The committed study-scratch report: one seed of the random start kept a checkpoint from an
    interrupted invocation (step 20), so its seeds' checkpoints differ; each row of the selection
    table is one step every listed seed was measured at, never a mean of different steps."""
    from pathlib import Path

    from tokendrop.lab.study.records import results_from_json
    from tokendrop.lab.study.tables import table_selection

    where = Path(__file__).resolve().parents[3] / "docs" / "study-scratch"
    res = results_from_json(json.loads((where / "study.json").read_text()))
    rows = [r.split(" | ") for r in table_selection(res).splitlines() if r.startswith("| ")][1:]
    by_label = {}
    for r in rows:
        by_label.setdefault(r[0].lstrip("| "), []).append(int(r[1]))
    assert by_label
    for d in res.methods.values():
        steps = {p["step"] for r in d.runs for p in res.runs[r].selection}
        if steps:
            assert by_label[d.label] == sorted(steps), d.label
    uneven = [
        d for d in res.methods.values() if len({len(res.runs[r].selection) for r in d.runs}) > 1
    ]
    assert uneven  # the case this guards
