"""evaluate(): the paper's protocol (grid, best dev score, mean over pretraining seeds), Table 1
layout, resumability (finished cells are not recomputed)."""

import json

import pytest
from toydata import write_checkpoint, write_glue_examples, write_squad_examples

from tokendrop.errors import ConfigError
from tokendrop.finetuning import FinetuneError, evaluate, load_suite
from tokendrop.finetuning.columns import COLUMNS
from tokendrop.finetuning.suite import SuiteConfig, cells_for, merged_seeds, parse_models
from tokendrop.finetuning.tasks import TASKS

TABLE_HEAD = (
    "| Methods | AX (corr.) | MNLI-mm (acc.) | MNLI-m (acc.) | QNLI (acc.) | QQP (F1) | SST (acc.) "
    "| GLUE-avg | SQuAD v1 (F1) | SQuAD v2 (F1) | SQuAD-avg |"
)


def test_presets_load():
    paper = load_suite("suite-paper")
    assert paper.glue_epochs == [3.0, 6.0] and paper.glue_lrs == [1e-5, 2e-5]
    assert paper.squad_epochs == [4.0, 8.0] and paper.squad_lrs == [2e-5, 4e-5]
    assert (
        paper.squad.max_seq_len_qa == 384
        and paper.squad.doc_stride == 128
        and paper.squad.max_query_len == 64
    )
    assert len(cells_for(paper)) == 6 * 4
    for name in ("suite-cpu", "suite-tiny"):
        load_suite(name)
    glue = load_suite("suite-glue")  # every GLUE task
    # the GLUE benchmark's trainable tasks (a fact of the benchmark, not of the column table)
    assert set(glue.tasks) == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"}
    assert len(cells_for(glue)) == 9 * 4
    with pytest.raises(ConfigError, match="did you mean 'glue_lrs'"):
        load_suite("suite-tiny", ["glue_lr=[1e-3]"])
    with pytest.raises(ConfigError, match="suite.tasks"):
        load_suite("suite-tiny", ['tasks=["colab"]'])


def test_data_dirs_have_no_default():
    with pytest.raises(
        ConfigError,
        match=r"suite.glue_data: no data directory given for task 'mnli'.*--set glue_data=DIR",
    ):
        SuiteConfig().validate()
    with pytest.raises(ConfigError, match="suite.squad_data"):
        SuiteConfig(glue_data="glue").validate()
    # only the data of the suite's tasks is needed
    SuiteConfig(tasks=["squad1"], squad_data="squad").validate()


def test_model_labels(tmp_path):
    names = ("base-seed0", "base_seed1", "drop", "drop-steps1000", "drop-s2000", "layers6")
    for n in names:
        (tmp_path / n).mkdir()
    ms = parse_models([str(tmp_path / n) for n in names[:2]] + [f"tok={tmp_path / 'drop'}"])
    assert [m.label for m in ms] == ["base", "base", "tok"]
    assert len({m.key for m in ms}) == 3
    assert merged_seeds(ms) == [
        "note: base: 2 models averaged as its seeds (base-seed0, base_seed1)"
    ]
    # only a spelled-out seed suffix groups: sizes, step counts and layer counts stay models
    ms = parse_models([str(tmp_path / n) for n in names[2:]])
    assert [m.label for m in ms] == ["drop", "drop-steps1000", "drop-s2000", "layers6"]
    assert merged_seeds(ms) == []
    with pytest.raises(FinetuneError, match="no such model directory"):
        parse_models([str(tmp_path / "nope")])
    with pytest.raises(FinetuneError, match="listed twice"):
        parse_models([str(tmp_path / "drop"), str(tmp_path / "drop")])


def _fake_finetune(offsets):
    calls = []

    def fn(cfg, model_path, out_dir, log=None):
        calls.append((model_path, cfg.task, cfg.epochs, cfg.lr, cfg.seed))
        v = (
            offsets[model_path.rsplit("/", 1)[-1]]
            + (1.0 if cfg.lr in (2e-5, 4e-5) else 0.0)
            + (2.0 if cfg.epochs in (6.0, 8.0) else 0.0)
            + 0.5 * cfg.seed
        )
        if cfg.task == "mnli":
            # MNLI-m best at (3, 2e-5) and AX best at (6, 1e-5): per-column vs per-task selection
            # differ
            m = v + (5.0 if (cfg.epochs, cfg.lr) == (3.0, 2e-5) else 0.0)
            scores = {
                "mnli_m": m,
                "mnli_mm": v,
                "ax": v + (7.0 if (cfg.epochs, cfg.lr) == (6.0, 1e-5) else 0.0),
            }
        elif cfg.task.startswith("squad"):
            scores = {cfg.task: v, f"{cfg.task}_em": v - 1}
        else:
            scores = {cfg.task: v}
        r = {"scores": scores, "config": __import__("dataclasses").asdict(cfg)}
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "metrics.json").write_text(json.dumps(r))
        return r

    return fn, calls


def test_protocol_best_of_grid_mean_over_seeds(tmp_path):
    for n in ("base-seed0", "base-seed1", "drop-seed0"):
        (tmp_path / n).mkdir()
    models = [str(tmp_path / n) for n in ("base-seed0", "base-seed1", "drop-seed0")]
    fn, calls = _fake_finetune({"base-seed0": 80.0, "base-seed1": 82.0, "drop-seed0": 90.0})
    # not read: fake fine-tuning
    data = {
        "glue_data": str(tmp_path / "glue"),
        "squad_data": str(tmp_path / "squad"),
    }
    cfg = SuiteConfig(finetune_seeds=[0, 1], **data)
    s = evaluate(models, cfg, tmp_path / "eval", finetune_fn=fn, log=lambda m: None)
    assert len(calls) == 3 * 6 * 4 * 2 and s["computed"] == len(calls) and s["skipped"] == 0
    base = s["methods"]["base"]["columns"]
    # best cell (6 epochs, lr 2e-5): offset + 3, plus the mean over fine-tuning seeds 0/1 (+0.25)
    assert base["qnli"]["per_seed"] == [83.25, 85.25]
    assert base["qnli"]["mean"] == pytest.approx(84.25) and base["qnli"]["std"] == pytest.approx(
        2**0.5
    )
    assert base["mnli_m"]["per_seed"] == [80.0 + 6.25, 82.0 + 6.25]  # (3, 2e-5): 1 + 5 + 0.25
    assert base["ax"]["per_seed"] == [80.0 + 9.25, 82.0 + 9.25]  # (6, 1e-5): 2 + 7 + 0.25
    # ax, mnli_mm, mnli_m, qnli, qqp, sst2 for base-seed0
    glue0 = [
        89.25,
        83.25,
        86.25,
        83.25,
        83.25,
        83.25,
    ]
    assert base["glue_avg"]["per_seed"][0] == pytest.approx(sum(glue0) / 6)
    assert base["squad_avg"]["per_seed"] == [83.25, 85.25]
    assert s["methods"]["drop"]["columns"]["sst2"]["n"] == 1
    md = (tmp_path / "eval" / "results.md").read_text()
    assert TABLE_HEAD in md and "| base (n=2) |" in md and "**93.25**" in md
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert saved["methods"]["base"]["columns"]["qnli"]["per_seed"] == [83.25, 85.25]

    # per-task selection: the MNLI cell is chosen by MNLI-m and its AX is reported
    fn2, calls2 = _fake_finetune({"base-seed0": 80.0, "base-seed1": 82.0, "drop-seed0": 90.0})
    cfg2 = SuiteConfig(finetune_seeds=[0, 1], selection="task", **data)
    s2 = evaluate(models, cfg2, tmp_path / "eval", finetune_fn=fn2, log=lambda m: None)
    # cells are shared: selection is not a cell setting
    assert calls2 == [] and s2["skipped"] == len(calls)
    assert s2["methods"]["base"]["columns"]["ax"]["per_seed"] == [80.0 + 1.25, 82.0 + 1.25]


def test_a_cell_recorded_with_zero_sizes_is_reused(tmp_path):
    """A cell an older tokendrop finished recorded 0 for max_train_examples / max_eval_examples /
    threads ("all" / "auto" now): it is reused, not recomputed; a cell recorded with a cap the
    suite does not have is recomputed."""
    (tmp_path / "m").mkdir()
    models = [str(tmp_path / "m")]
    cfg = SuiteConfig(
        tasks=["sst2"], glue_epochs=[3.0], glue_lrs=[2e-5], glue_data=str(tmp_path / "glue")
    )
    assert cfg.glue.max_train_examples == "all" and cfg.glue.threads == "auto"
    fn, calls = _fake_finetune({"m": 80.0})
    s = evaluate(models, cfg, tmp_path / "eval", finetune_fn=fn, log=lambda m: None)
    assert s["computed"] == len(calls) == 1
    (mj,) = (tmp_path / "eval" / "cells").rglob("metrics.json")
    r = json.loads(mj.read_text())
    r["config"].update(max_train_examples=0, max_eval_examples=0, threads=0)
    mj.write_text(json.dumps(r))
    s = evaluate(models, cfg, tmp_path / "eval", finetune_fn=fn, log=lambda m: None)
    assert (s["computed"], s["skipped"], len(calls)) == (0, 1, 1)
    r["config"].update(max_train_examples=8)
    mj.write_text(json.dumps(r))
    s = evaluate(models, cfg, tmp_path / "eval", finetune_fn=fn, log=lambda m: None)
    assert (s["computed"], s["skipped"], len(calls)) == (1, 0, 2)


def test_real_tiny_suite_and_resume(tmp_path):
    ck = write_checkpoint(tmp_path / "models" / "tiny-seed0")
    glue = write_glue_examples(tmp_path / "glue", n_train=48, n_dev=16)
    squad = write_squad_examples(tmp_path / "squad", n_train=24, n_dev=12)
    ov = [f'glue_data="{glue}"', f'squad_data="{squad}"', "glue.threads=1", "squad.threads=1"]
    logs = []
    s = evaluate([str(ck)], "suite-tiny", tmp_path / "eval", overrides=ov, log=logs.append)
    n = len(cells_for(load_suite("suite-tiny", ov)))
    assert s["computed"] == n and s["skipped"] == 0
    cols = s["models"][next(iter(s["models"]))]["columns"]
    assert {c.key for c in COLUMNS if c.group != "extra"} <= set(cols) and {
        "glue_avg",
        "squad_avg",
    } <= set(cols)
    md = (tmp_path / "eval" / "results.md").read_text()
    assert TABLE_HEAD in md and "| tiny (n=1) |" in md
    assert "stand-in" not in md  # generated data, no README saying so
    cell_files = sorted((tmp_path / "eval" / "cells").rglob("metrics.json"))
    assert len(cell_files) == n
    before = {p: p.stat().st_mtime_ns for p in cell_files}

    # rerun: nothing recomputed, same table
    s2 = evaluate([str(ck)], "suite-tiny", tmp_path / "eval", overrides=ov, log=logs.append)
    assert s2["computed"] == 0 and s2["skipped"] == n
    assert {p: p.stat().st_mtime_ns for p in cell_files} == before
    assert s2["methods"] == s["methods"]

    # a lost cell is recomputed alone; a changed setting invalidates the affected cells only
    cell_files[0].unlink()
    s3 = evaluate([str(ck)], "suite-tiny", tmp_path / "eval", overrides=ov, log=logs.append)
    assert s3["computed"] == 1
    s4 = evaluate(
        [str(ck)],
        "suite-tiny",
        tmp_path / "eval",
        overrides=ov + ["squad.max_answer_len=10"],
        log=logs.append,
    )
    assert s4["computed"] == 2 and s4["skipped"] == n - 2


def test_a_task_without_a_row_in_the_column_table_still_gets_its_column(monkeypatch):
    """A task registered with its file only (no row in finetuning/columns.py) carries its main
    metric under its own name: in the fine-tuning scores, the suite's summary and results.md."""
    from pathlib import Path

    from tokendrop.finetuning.columns import task_scores
    from tokendrop.finetuning.suite import ModelEntry, aggregate, render_markdown
    from tokendrop.finetuning.tasks import TaskSpec

    topic = TaskSpec("topic", "classification", ("accuracy",), "accuracy", labels=["a", "b"])
    monkeypatch.setitem(TASKS, "topic", topic)
    assert task_scores("topic", {"dev": {"accuracy": 0.75, "score": 0.75}}) == {"topic": 0.75}
    cfg = load_suite("suite-tiny", ['tasks=["sst2", "topic"]'])
    models = [ModelEntry("m", Path("m"), "m")]
    done = {
        "m": {
            f"{c.task}-{c.epochs}-{c.lr}": {
                "_cell": c,
                "scores": {"topic": 0.5 + c.lr} if c.task == "topic" else {"sst2": 0.6},
            }
            for c in cells_for(cfg)
        }
    }
    summary = aggregate(cfg, models, done)
    best = 0.5 + max(cfg.glue_lrs)
    assert summary["models"]["m"]["columns"]["topic"] == pytest.approx(best)
    assert summary["methods"]["m"]["columns"]["topic"]["mean"] == pytest.approx(best)
    assert summary["models"]["m"]["columns"]["glue_avg"] == pytest.approx(0.6)  # never averaged
    md = render_markdown(cfg, summary, models, len(cells_for(cfg)))
    head = next(line for line in md.splitlines() if line.startswith("| Methods"))
    assert "| topic (accuracy) |" in head and head.index("SST") < head.index("topic")
    row = next(line for line in md.splitlines() if line.startswith("| m (n=1)"))
    assert f"{100 * best:.2f}" in row or f"{best:.2f}" in row


def test_a_long_cell_says_how_far_it_is_at_most_once_a_minute():
    """A suite cell's training steps reach the suite's log once per interval (nothing else of the
    cell's own log: the suite logs the cell's scores), so a 5-minute cell is not silent."""
    from tokendrop.finetuning.suite import step_progress

    now = [0.0]
    lines: list[str] = []
    log = step_progress(lines.append, 60.0, "[3/9]   ", clock=lambda: now[0])
    for t, line in [
        (1, "tokendrop finetune: sst2 ..."),  # a banner line: not passed on
        (30, "step 10/100 loss 0.69"),  # too soon
        (61, "step 20/100 loss 0.60"),
        (90, "step 30/100 loss 0.55"),
        (125, "step 40/100 loss 0.50"),
        (200, "  scores    sst2 80.00"),  # the cell's own summary: not passed on
    ]:
        now[0] = t
        log(line)
    assert lines == ["[3/9]   step 20/100 loss 0.60", "[3/9]   step 40/100 loss 0.50"]
