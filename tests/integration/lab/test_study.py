"""tokendrop study: the method table, study-tiny end to end (every table and figure file), reruns
that skip finished runs and cells, resuming an interrupted run, and refusing a changed config."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from tokendrop.errors import ConfigError
from tokendrop.lab.study import (
    ARMS,
    StudyError,
    _verdict,
    load_study,
    plan_runs,
    reach_target,
    run_study,
    sweep_method,
)
from tokendrop.lab.study.spec import TABLE1

TABLES = ["table1.md", "table3.md", "table4.md", "time-to-quality.md"]
FIGURES = [
    "mlm-loss-vs-wall.png",
    "mlm-loss-vs-flops.png",
    "fig3-importance-hist.png",
    "fig1-examples.png",
    "fig1-examples.html",
]


@pytest.fixture(autouse=True)
def _keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("preset", ["study-tiny", "study-cpu", "study-gpu"])
def test_presets_plan_valid_runs(preset, tmp_path):
    study = load_study(preset)
    runs = plan_runs(study, None, tmp_path)
    assert len(runs) == len(study.all_methods()) * len(study.seeds)
    assert len({r.name for r in runs}) == len(runs)
    by = {r.name: r.cfg for r in runs}
    s0 = study.seeds[0]
    base = by[f"baseline-seed{s0}"]
    assert (
        base.drop.method == "none" and base.train.seed == s0 and base.data.seq_len == study.seq_len
    )
    assert base.data.path.endswith(f"packed-{study.seq_len}")
    if "baseline-75" in study.methods:
        assert by[f"baseline-75-seed{s0}"].train.steps == round(0.75 * base.train.steps)
    if "baseline-unpacked" in study.methods:
        assert by[f"baseline-unpacked-seed{s0}"].data.path.endswith(f"unpacked-{study.seq_len}")
    if "token-drop-stage2" in study.methods:
        c = by[f"token-drop-stage2-seed{s0}"]
        assert (c.drop.method, c.drop.rate, c.drop.stage2_fraction) == ("cumulative", 0.5, 0.1)
    for r in study.drop_rates:
        c = by[f"{sweep_method(r).name}-seed{s0}"]
        assert c.drop.rate == r or (r == 0 and c.drop.method == "none")


def test_method_table_is_the_papers():
    assert TABLE1 == [
        "baseline-unpacked",
        "baseline",
        "baseline-75",
        "token-drop",
        "token-drop-stage2",
        "half-rand",
        "half-rand-stage2",
        "rand-stage2",
        "freq-stage2",
        "avg-stage2",
        "pass-stage2",
        "layer-rearranged-stage2",
    ]
    # then the recipe study's arms (tests/integration/lab/test_study_recipe.py)
    assert list(ARMS)[: len(TABLE1)] == TABLE1
    study = load_study("study-cpu")
    runs = plan_runs(study, None, Path("/x"))
    assert {r.method.name for r in runs} >= set(TABLE1) | {"drop-25", "drop-62.5", "drop-75"}
    assert {
        (r.cfg.drop.method, r.cfg.drop.variant) for r in runs if r.method.name == "avg-stage2"
    } == {("none", "avg")}
    assert all(r.cfg.drop.stage2_fraction == 0.1 for r in runs if r.method.name.endswith("stage2"))
    assert all(
        r.cfg.drop.stage2_fraction == 0.0 for r in runs if not r.method.name.endswith("stage2")
    )


def test_bad_study_configs():
    with pytest.raises(ConfigError, match="unknown method"):
        load_study("study-tiny", ["methods=['baseline', 'token-dorp']"])
    with pytest.raises(ConfigError, match="drop_rates"):
        load_study("study-tiny", ["drop_rates=[1.5]"])
    with pytest.raises(ConfigError, match="did you mean"):
        load_study("study-tiny", ["seed=[1]"])
    with pytest.raises(ConfigError, match="vocab"):
        load_study("study-cpu", ["vocab='x.txt'"])


def test_reach_target_and_verdict():
    curve = [
        {"step": 0, "wall_time": 0.0, "flops": 0.0, "eval_loss": 8.0},
        {"step": 10, "wall_time": 10.0, "flops": 100.0, "eval_loss": 6.0},
        {"step": 20, "wall_time": 20.0, "flops": 200.0, "eval_loss": 4.0},
    ]
    assert reach_target(curve, 5.0) == {"wall_time": 15.0, "flops": 150.0, "step": 15.0}
    assert reach_target(curve, 3.0) is None
    assert "within the seed-to-seed spread" in _verdict(-0.1, 0.2)
    assert _verdict(-0.5, 0.2).startswith("worse")
    assert _verdict(0.5, 0.2, higher_better=False).startswith("worse")
    assert "one seed" in _verdict(0.1, None)


def test_verdict_names_whose_spread_and_uses_the_baselines_own():
    """The study-continue case: +0.63 points, the baseline's seeds 0.39 apart, token drop's 2.2
    apart. Judged by the baseline's own spread it is beyond it; by token drop's inside it; the
    sentence says both and does not call it a match."""
    from tokendrop.lab.study.findings import beyond_noise, judge
    from tokendrop.lab.study.records import Stat

    base, drop = Stat.of([52.05, 51.66]), Stat.of([53.59, 51.39])
    text = judge(drop.mean - base.mean, drop, base, True, " points", "token drop")
    assert "the baseline's 0.39 points" in text and "token drop's 2.2 points" in text
    assert "cannot tell the two apart" in text and "matched" not in text
    assert "not distinguishable" in judge(0.1, drop, base, True)  # inside both
    assert judge(-3.0, drop, base, True).startswith("worse than the baseline by more than either")
    assert judge(-3.0, drop, base, False).startswith("better")  # lower is better (MLM loss)
    assert beyond_noise(-3.0, drop, base, True) and not beyond_noise(-1.0, drop, base, True)
    assert "one seed" in judge(0.5, Stat.of([1.0]), Stat.of([2.0]), True)


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "out"
    n = torch.get_num_threads()
    try:
        report = run_study("study-tiny", out, progress=False)
    finally:
        torch.set_num_threads(n)
    return out, report


def test_study_tiny_end_to_end(tiny_study):
    out, report = tiny_study
    assert report == out / "study.md"
    for f in (
        ["study.md", "study.json", "study.toml", "eval/results.md"]
        + [f"tables/{t}" for t in TABLES]
        + [f"figures/{f}" for f in FIGURES]
    ):
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    for f in ("importance-hist.png", "tokens.md", "examples.html", "examples.png"):
        assert (out / "inspect" / "token-drop-seed0" / f).is_file()
    data = json.loads((out / "study.json").read_text())
    assert set(data["runs"]) == {
        "baseline-unpacked-seed0",
        "baseline-seed0",
        "token-drop-seed0",
        "drop-75-seed0",
    }
    assert data["evaluation"]["computed"] == 2 * 4
    b, td = data["methods"]["baseline"], data["methods"]["token-drop"]
    assert td["rel_flops"] < 0.9 and b["rel_flops"] == pytest.approx(1.0)
    # the unpacked baseline is scored on the packed held-out split as well (comparable losses)
    un = data["runs"]["baseline-unpacked-seed0"]
    cached = json.loads((out / "runs/baseline-unpacked-seed0/study-packed-eval.json").read_text())
    assert un["final_eval_loss"] == cached["eval_loss"] and "own_split_final_eval_loss" in un
    # the tables hold the measured numbers: the baseline's final eval loss from its metrics.jsonl
    recs = [
        json.loads(x) for x in (out / "runs/baseline-seed0/metrics.jsonl").read_text().splitlines()
    ]
    final = [r for r in recs if "eval_loss" in r][-1]["eval_loss"]
    t3 = (out / "tables/table3.md").read_text()
    assert "| baseline | " in t3 and f"{final:.3f}" in t3
    t1 = (out / "tables/table1.md").read_text()
    assert "SST (acc.)" in t1 and "SQuAD v1 (F1)" in t1 and "token drop (proposed)" in t1
    sst = data["runs"]["baseline-seed0"]["eval"]["sst2"]
    assert f"{sst:.2f}" in t1
    t4 = (out / "tables/table4.md").read_text()
    assert "drop 0% (baseline)" in t4 and "drop 50% (token drop)" in t4 and "drop 75%" in t4
    md = report.read_text()
    for s in (
        "tokendrop study --config study-tiny",
        "cores",
        "torch",
        "## Findings",
        "Table 4",
        "fig1-examples.png",
        "not comparable with published",
    ):
        assert s in md, s
    # judgement sentences carry the numbers they judge
    assert f"baseline {b['final_eval_loss']['mean']:.4f}" in md
    assert "<b class='tok kept'>" in (out / "figures/fig1-examples.html").read_text()


def test_refresh_findings_round_trips_a_written_report(tiny_study, tmp_path):
    """study.json holds every number the findings use: rebuilt from it, they are the study's own,
    and refreshing a copy of the report rewrites nothing but the findings."""
    import shutil

    from tokendrop.lab.study.records import results_from_json
    from tokendrop.lab.study.report import refresh_findings

    out, _ = tiny_study
    d = json.loads((out / "study.json").read_text())
    res = results_from_json(d)
    assert list(res.methods) == list(d["methods"]) and set(res.runs) == set(d["runs"])
    copy = tmp_path / "report"
    copy.mkdir()
    for f in ("study.json", "study.toml", "study.md"):
        shutil.copyfile(out / f, copy / f)
    md = (copy / "study.md").read_text()
    md_broken = md.replace(f"- {d['findings'][0]}", "- a stale finding", 1)
    assert md_broken != md
    (copy / "study.md").write_text(md_broken)
    assert refresh_findings(copy) == d["findings"]
    assert (copy / "study.md").read_text() == md


COMMITTED_REPORTS = sorted(
    p.parent.name for p in (Path(__file__).resolve().parents[3] / "docs").glob("*/study.json")
)


@pytest.mark.parametrize("report", COMMITTED_REPORTS)
def test_every_committed_report_says_what_the_current_rules_compute(report):
    """Each committed study report (every docs/*/study.json): its findings, in study.json and in
    study.md, are the ones this version's rules compute from its numbers (after a rule changes,
    ``refresh_findings`` rewrites them)."""
    from tokendrop.lab.study.findings import findings
    from tokendrop.lab.study.records import results_from_json

    where = Path(__file__).resolve().parents[3] / "docs" / report
    d = json.loads((where / "study.json").read_text())
    found = findings(results_from_json(d), load_study(where / "study.toml", recorded=True))
    assert found == d["findings"]
    md = (where / "study.md").read_text()
    assert all(f"- {x}" in md for x in found)


def test_rerun_skips_finished_runs_and_cells(tiny_study):
    out, _ = tiny_study
    stamp = {
        p: p.stat().st_mtime_ns
        for p in (out / "runs").glob("*/checkpoints/step-*/model.safetensors")
    }
    docs = out.parent / "docs" / "study"
    run_study("study-tiny", out, overrides=[f"docs_dir={json.dumps(str(docs))}"], progress=False)
    data = json.loads((out / "study.json").read_text())
    assert data["evaluation"]["computed"] == 0 and data["evaluation"]["skipped"] == 2 * 4
    assert {
        p: p.stat().st_mtime_ns
        for p in (out / "runs").glob("*/checkpoints/step-*/model.safetensors")
    } == stamp
    # the report's copy for docs/: report, tables and figures, no runs or checkpoints
    assert (docs / "study.md").is_file() and (docs / "figures" / "fig1-examples.png").is_file()
    assert (docs / "tables" / "table1.md").is_file() and not (docs / "runs").exists()
    assert (docs / "eval" / "results.md").is_file()  # the report links it
    assert "runs trained at git" in (docs / "study.md").read_text()


def test_interrupted_runs_resume_in_parallel_and_changed_config_is_refused(tiny_study):
    out, _ = tiny_study
    names = ["token-drop-seed0", "drop-75-seed0"]
    before = json.loads((out / "study-state.json").read_text())["runs"]
    # simulate runs killed after their step-4 checkpoint: no final checkpoint, no report
    for n in names:
        shutil.rmtree(out / "runs" / n / "checkpoints" / "step-00000008")
        (out / "runs" / n / "report.md").unlink()
    run_study(
        "study-tiny", out, overrides=["parallel=2"], only=["token-drop", "drop-75"], progress=False
    )
    state = json.loads((out / "study-state.json").read_text())["runs"]
    for n in names:
        rd = out / "runs" / n
        assert (rd / "report.md").is_file() and (rd / "checkpoints" / "step-00000008").is_dir()
        recs = [json.loads(x) for x in (rd / "metrics.jsonl").read_text().splitlines()]
        assert sum(1 for r in recs if r.get("event") == "start") == 1  # resumed, not restarted
        assert state[n]["elapsed_s"] > before[n]["elapsed_s"] and state[n]["parallel"] == 2
    data = json.loads((out / "study.json").read_text())
    assert data["evaluation"]["computed"] == 2 * 2  # the retrained models' cells only
    assert "2 runs / fine-tuning jobs at a time" in (out / "study.md").read_text()
    # a run config that changed under an existing OUT is an error, not a silent reuse
    cfg = load_study("study-tiny")
    with pytest.raises(StudyError, match="different config"):
        run_study(
            "study-tiny",
            out,
            overrides=[f"base_overrides={json.dumps(cfg.base_overrides + ['train.lr=5e-3'])}"],
            only=["baseline"],
            progress=False,
        )
    with pytest.raises(StudyError, match="prepared for a different study config"):
        run_study("study-tiny", out, overrides=["seq_len=16"], only=["baseline"], progress=False)
    with pytest.raises(StudyError, match="--only"):
        run_study("study-tiny", out, only=["half-rand"], progress=False)


# ----------------------------------------------------------------------------------------------
# continued pretraining (study.source): every run starts from one checkpoint, which is a row too


def _tiny_hf_bert(out: Path, seed: int = 0) -> Path:
    """A tiny randomly initialised BertForMaskedLM saved by ``transformers`` (no network), with a
    vocabulary that spells the toy tasks' words."""
    transformers = pytest.importorskip("transformers")
    from toydata import write_vocab

    out.mkdir(parents=True, exist_ok=True)
    n = len(write_vocab(out / "vocab.txt").read_text().splitlines())
    (out / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": True, "tokenizer_class": "BertTokenizer"})
    )
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(
        vocab_size=n,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    transformers.BertForMaskedLM(cfg).save_pretrained(out, safe_serialization=True)
    return out


def _sha256(p: Path) -> str:
    import hashlib

    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_study_continue_preset_plans_continued_runs(tmp_path):
    study = load_study("study-continue")
    assert study.source == "minilm" and study.base == "continue-plain" and len(study.seeds) == 2
    # the paper's study's methods: baseline, baseline at 75% of the steps, token drop (+ stage 2),
    # >= 2 other selections
    assert {"baseline", "baseline-75", "token-drop", "token-drop-stage2"} <= set(study.methods)
    assert len({ARMS[m].overrides[0] for m in study.methods if ARMS[m].group == "selection"}) >= 2
    assert study.drop_rates == []
    # the tasks and every data path come from the preset
    assert any("tasks=['sst2', 'qnli', 'squad1']" in o for o in study.suite_overrides)
    assert any(o.startswith("glue_data=") for o in study.suite_overrides)
    assert any(o.startswith("squad_data=") for o in study.suite_overrides)
    assert study.corpus and not study.vocab and study.vocab_size == "source"
    src = _tiny_hf_bert(tmp_path / "src")
    study = load_study("study-continue", [f"source={json.dumps(str(src))}"])
    runs = plan_runs(study, None, tmp_path / "out")
    assert len(runs) == len(study.methods) * 2
    sha = _sha256(src / "model.safetensors")
    for r in runs:
        assert r.cfg.model.init == str(src) and r.cfg.model.init_sha256 == sha
        # the shape comes from the source
        assert (r.cfg.model.num_layers, r.cfg.model.hidden_size) == (
            4,
            32,
        )
    with pytest.raises(ConfigError, match="study.source"):
        load_study("study-continue", ["vocab_size=8192"])
    with pytest.raises(StudyError, match="no such checkpoint"):
        plan_runs(
            load_study("study-continue", [f"source={json.dumps(str(tmp_path / 'nope'))}"]),
            None,
            tmp_path,
        )


@pytest.fixture(scope="module")
def continue_study(tmp_path_factory):
    root = tmp_path_factory.mktemp("study-continue")
    src = _tiny_hf_bert(root / "src")
    out = root / "out"
    n = torch.get_num_threads()
    try:
        run_study(
            "study-continue-tiny",
            out,
            overrides=[f"source={json.dumps(str(src))}", "methods=['baseline', 'token-drop']"],
            progress=False,
        )
    finally:
        torch.set_num_threads(n)
    return src, out


def test_study_continue_tiny_end_to_end(continue_study):
    import tomllib

    src, out = continue_study
    sha = _sha256(src / "model.safetensors")
    data = json.loads((out / "study.json").read_text())
    assert set(data["runs"]) == {"baseline-seed0", "token-drop-seed0"}
    # every run continued from the source, and its config records it
    for name in data["runs"]:
        cfg = tomllib.loads((out / "runs" / name / "config.toml").read_text())
        assert cfg["model"]["init"] == str(src) and cfg["model"]["init_sha256"] == sha
        assert data["runs"][name]["init"] == str(src) and data["runs"][name]["init_sha256"] == sha
    # the data was tokenized with the source's tokenizer
    assert (out / "data" / "packed-32" / "vocab.txt").read_text() == (src / "vocab.txt").read_text()
    # the source itself is a row: fine-tuned on every task, its MLM loss on the same held-out split
    s = data["source"]
    assert s["path"] == str(src) and s["sha256"] == sha and s["label"] == "source, not continued"
    assert {"sst2", "qnli", "squad1", "downstream_avg"} <= set(s["eval"])
    assert s["final_eval_loss"] > 0 and data["evaluation"]["computed"] == 3 * 3
    t1 = (out / "tables/table1.md").read_text().splitlines()
    row = next(ln for ln in t1 if ln.startswith("| source, not continued |"))
    assert f"{s['eval']['sst2']:.2f}" in row and f"{s['final_eval_loss']:.3f}" in row
    assert t1.index(row) < next(i for i, ln in enumerate(t1) if ln.startswith("| baseline |"))
    assert "| source, not continued |" in (out / "tables/table3.md").read_text()
    md = (out / "study.md").read_text()
    assert f"every run starts from `{src}`" in md and "Continued, not from scratch" in md
    assert "Claim by claim" in md and "Time saved by token drop" in md
    assert f"Held-out MLM loss of the source itself: {s['final_eval_loss']:.4f}" in md


def test_study_continue_refuses_another_source(continue_study, tmp_path):
    src, out = continue_study
    other = _tiny_hf_bert(tmp_path / "other", seed=1)  # same shape and vocabulary, other weights
    with pytest.raises(StudyError, match="different config.*init_sha256"):
        run_study(
            "study-continue-tiny",
            out,
            overrides=[f"source={json.dumps(str(other))}", "methods=['baseline', 'token-drop']"],
            progress=False,
        )
