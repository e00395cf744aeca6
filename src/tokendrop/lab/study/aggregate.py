"""Measurements of finished runs and their aggregation over seeds: per run, per method, the source
checkpoint's row, and time to the reference arm's (study.baseline_arm) quality."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import statistics
from pathlib import Path
from typing import Any

import torch

from tokendrop.config import EVAL_ALL, MICRO_BATCH_AUTO, Config
from tokendrop.data import MLMLoader, PreparedData
from tokendrop.dropping.flops import dropping_step_flops, step_flops
from tokendrop.errors import DataError
from tokendrop.finetuning.columns import DOWNSTREAM_KEYS
from tokendrop.lab.inspect import selection_trace
from tokendrop.lab.study.common import isnum, mean
from tokendrop.lab.study.records import (
    EvalSummary,
    MethodResult,
    RunResult,
    SourceResult,
    Stat,
    StudyResults,
    TargetHit,
)
from tokendrop.lab.study.spec import RunSpec, StudyConfig
from tokendrop.models.bert.model import BertForMaskedLM
from tokendrop.models.source import load_pretrained
from tokendrop.runs import checkpoint as ckpt_mod
from tokendrop.runs.files import atomic_write_json, read_json
from tokendrop.runs.metrics import read_metrics
from tokendrop.train.resume import load_run_config
from tokendrop.train.step import evaluate_mlm


def _dedupe(recs: list[dict[str, Any]]) -> tuple[list[dict], list[dict], list[dict]]:
    """(train, eval, events), one record per step each (the last written wins: a resumed run
    re-logs the steps after its checkpoint)."""
    train: dict[int, dict] = {}
    evals: dict[int, dict] = {}
    events = []
    for r in recs:
        if "eval_loss" in r:
            evals[r["step"]] = r
        elif "loss" in r:
            train[r["step"]] = r
        elif "event" in r:
            events.append(r)
    return [train[k] for k in sorted(train)], [evals[k] for k in sorted(evals)], events


def seeds_note(finished: int, planned: int) -> str:
    """An arm's label suffix when fewer of its seeds finished than the study plans (its means and
    spreads are over those alone): " (1 of 3 seeds)"; "" when all did."""
    return f" ({finished} of {planned} seeds)" if finished < planned else ""


def run_measurements(run_dir: Path, method: str = "", seed: int = 0) -> RunResult:
    """Measured numbers of a finished run (metrics.jsonl + config; FLOPs from the analytic
    model)."""
    cfg = load_run_config(run_dir)
    train, evals, events = _dedupe(read_metrics(run_dir))
    start = next((e for e in events if e.get("event") == "start"), {})
    T = start.get("seq_len", cfg.data.seq_len)
    if not isinstance(T, int):  # data.seq_len = "data" and no start record naming the T trained
        raise DataError(
            f"{run_dir / 'metrics.jsonl'}: no 'start' record with the run's seq_len, and its "
            f"config's data.seq_len is {T!r}; re-run it, or leave it out of the study"
        )
    bs = cfg.train.batch_size
    f_drop = step_flops(cfg.model, T, bs, cfg.drop if cfg.drop.enabled else None).total
    f_dense = step_flops(cfg.model, T, bs, None).total
    n = cfg.train.fixed_steps
    s2 = cfg.drop.stage2_start(n)  # 0 when nothing drops
    cum = None  # per-step FLOPs, summed: random_ltd's schedule, ScTD's passes, a dense start
    if cfg.drop.enabled and (
        cfg.drop.per_layer or cfg.drop.consistency_weight > 0 or cfg.drop.dense_start_share > 0
    ):
        per = (
            dropping_step_flops(cfg.model, T, bs, cfg.drop, n)
            if cfg.drop.per_layer or cfg.drop.consistency_weight > 0
            else [f_drop] * n
        )
        cum = [
            0,
            *itertools.accumulate(
                f if cfg.drop.dropping_at(k, n) else f_dense for k, f in enumerate(per)
            ),
        ]

    # the run's own count
    logged = {r["step"]: r["flops"] for r in train + evals + events if "flops" in r}

    def cum_flops(step: float) -> float:
        # every step at its own length, batch and kept count (warm-ups, time budgets)
        if step in logged:
            return logged[step]
        if cum is not None:
            return cum[min(int(step), n)] + f_dense * max(0.0, step - n)
        return f_drop * min(step, s2) + f_dense * max(0.0, step - s2)

    ends = [e for e in events if e.get("event") == "end"]
    steps = max([r["step"] for r in train] + [0])
    wall = ends[-1]["wall_time"] if ends else (train[-1]["wall_time"] if train else 0.0)
    tail = train[len(train) // 10 :]
    tps = statistics.median([r["tokens_per_s"] for r in tail]) if tail else float("nan")
    curve = [
        {
            "step": r["step"],
            "wall_time": r["wall_time"],
            "flops": cum_flops(r["step"]),
            "eval_loss": r["eval_loss"],
            "eval_acc": r.get("eval_acc"),
        }
        for r in evals
    ]
    final = curve[-1] if curve else {}
    metas = sorted((run_dir / "checkpoints").glob("step-*/meta.json"))
    trained_at = (
        (read_json(metas[-1], expect=None, default=None) or {}).get("git_revision")
        if metas
        else None
    )
    init_s = sum(float(e.get("seconds", 0.0)) for e in events if e.get("event") == "init_done")
    return RunResult(
        run_dir=str(run_dir),
        method=method,
        seed=seed,
        steps=steps,
        git_revision=trained_at,
        seq_len=T,
        batch_size=bs,
        tokens=int(ends[-1].get("tokens", steps * bs * T)) if ends else steps * bs * T,
        wall_time_s=wall,
        tokens_per_s=tps,
        flops_per_step={"dropping": f_drop, "dense": f_dense},
        stage2_start=s2,
        total_flops=cum_flops(steps),
        final_eval_loss=final.get("eval_loss", float("nan")),
        final_eval_acc=final.get("eval_acc", float("nan")),
        curve=curve,
        params=start.get("params"),
        drop=dataclasses.asdict(cfg.drop),
        model={
            "num_layers": cfg.model.num_layers,
            "hidden_size": cfg.model.hidden_size,
            "num_heads": cfg.model.num_heads,
            "vocab_size": cfg.model.vocab_size,
        },
        init=cfg.model.init,
        init_sha256=cfg.model.init_sha256,
        init_s=init_s,
        clock=cfg.train.budget_clock,
        unigram_entropy=start.get("unigram_entropy"),
    )


def run_selection(run_dir: Path) -> list[dict[str, Any]]:
    """``selection_trace`` of a run's kept checkpoints, cached in ``RUN_DIR/study-selection.json``
    (keyed by the checkpoints' names)."""
    ck = run_dir / "checkpoints"
    names = sorted(d.name for d in ck.glob("step-*") if (d / "meta.json").is_file())
    cache = run_dir / "study-selection.json"
    old = read_json(cache, expect=None, default=None) or {}
    if old.get("checkpoints") == names:
        return old.get("trace", [])
    trace = selection_trace(run_dir)
    atomic_write_json(cache, {"checkpoints": names, "trace": trace})
    return trace


def mlm_eval(
    model_dir: Path,
    packed: str,
    seed: int,
    batch_size: int,
    mask_prob: float,
    eval_batches: int,
    cache: Path,
) -> dict[str, Any]:
    """Held-out MLM loss of a model dir (a run's latest checkpoint, or a Hugging Face dir) on the
    *packed* split, with the batches and masks a packed run of ``seed`` evaluates on.  Cached in
    ``cache`` (keyed by checkpoint and data); ``fresh_head``: the model had no MLM head."""
    # a run's newest checkpoint, held while read (a run that is training rotates around it)
    with (
        ckpt_mod.reading_latest(model_dir)
        if (model_dir / "checkpoints").is_dir()
        else contextlib.nullcontext()
    ) as last:
        old = read_json(cache, expect=None, default=None) or {}
        name = last.name if last else ""
        if old.get("checkpoint") == name and old.get("data") == str(packed):
            return old
        model, info = load_pretrained(last or model_dir, BertForMaskedLM)
    pd = PreparedData.open(packed)
    batches = MLMLoader(
        pd,
        split="eval",
        batch_size=batch_size,
        seed=seed,
        mask_prob=mask_prob,
        num_workers=0,
        shuffle=False,
        loop=False,
    )
    with torch.no_grad():
        r = evaluate_mlm(model, batches, torch.device("cpu"), None, eval_batches)
    r.update(
        checkpoint=name,
        data=str(packed),
        fresh_head=any(k.startswith("mlm.") for k in info.get("fresh", [])),
    )
    atomic_write_json(cache, r)
    return r


def micro_batch(cfg: Config) -> int:
    """The batch a run's evaluation read in one pass (``train.micro_batch_size``, or its batch)."""
    mb = cfg.train.micro_batch_size
    return cfg.train.batch_size if mb == MICRO_BATCH_AUTO else int(mb)


def eval_limit(cfg: Config) -> int:
    """The batches a run's evaluation read (``train.eval_batches``), 0 for all of them (as
    ``evaluate_mlm`` reads it)."""
    return 0 if cfg.train.eval_batches == EVAL_ALL else int(cfg.train.eval_batches)


def packed_split_eval(run_dir: Path, packed: str) -> dict[str, Any]:
    """The final model's MLM loss on the *packed* held-out split, with the batches and masks a
    packed run of the same seed evaluates on (for runs trained on other data: the unpacked
    baseline). Cached in ``RUN_DIR/study-packed-eval.json`` (keyed by checkpoint and data)."""
    cfg = load_run_config(run_dir)
    return mlm_eval(
        run_dir,
        packed,
        cfg.train.seed,
        micro_batch(cfg),
        cfg.data.mask_prob_end,
        eval_limit(cfg),
        run_dir / "study-packed-eval.json",
    )


def reach_target(curve: list[dict[str, Any]], target: float) -> dict[str, float] | None:
    """First point (linear interpolation between evals) where eval loss <= target: wall, FLOPs,
    step."""
    prev = None
    for p in curve:
        if p["eval_loss"] <= target:
            if prev is None or prev["eval_loss"] == p["eval_loss"]:
                return {k: float(p[k]) for k in ("wall_time", "flops", "step")}
            a = (prev["eval_loss"] - target) / (prev["eval_loss"] - p["eval_loss"])
            return {
                k: float(prev[k] + a * (p[k] - prev[k])) for k in ("wall_time", "flops", "step")
            }
        prev = p
    return None


def _eval_columns(
    evaluation: EvalSummary | None, path: Path
) -> tuple[dict[str, float], float | None] | None:
    ev = (evaluation.models if evaluation else {}).get(str(path.resolve()))
    if not ev:
        return None
    cols = {k: v for k, v in ev.columns.items() if isnum(v)}
    down = [cols[k] for k in DOWNSTREAM_KEYS if k in cols]
    cols["downstream_avg"] = mean(down) if down else float("nan")
    return cols, ev.seconds


def source_result(
    study: StudyConfig,
    source: Path,
    out: Path,
    evaluation: EvalSummary | None,
    packed: str | None,
    runs: list[RunSpec],
) -> SourceResult:
    """The source checkpoint's row: its suite columns and (when it has an MLM head) its held-out MLM
    loss on the packed split, with the first seed's batches and masks."""
    sha = next((r.cfg.model.init_sha256 for r in runs if r.cfg.model.init_sha256), "")
    res = SourceResult(label=study.source_label, path=str(source), sha256=sha)
    if packed and Path(packed).is_dir() and runs:
        c = runs[0].cfg
        r = mlm_eval(
            source,
            packed,
            study.seeds[0],
            micro_batch(c),
            c.data.mask_prob_end,
            eval_limit(c),
            out / "source-packed-eval.json",
        )
        if r.get("fresh_head"):
            res.mlm_note = "the source has no MLM head, so its MLM loss is not defined"
        else:
            res.final_eval_loss, res.final_eval_acc = r["eval_loss"], r["eval_acc"]
    ev = _eval_columns(evaluation, source)
    if ev:
        res.eval, res.finetune_seconds = ev
    return res


def aggregate(
    study: StudyConfig,
    runs: list[RunSpec],
    out: Path,
    evaluation: EvalSummary | None,
    state: dict[str, Any],
    packed: str | None = None,
    source: Path | None = None,
) -> StudyResults:
    """Per run and per method (and the source's row): everything the tables, figures and report
    use."""
    per_run: dict[str, RunResult] = {}
    for spec in runs:
        rd = out / "runs" / spec.name
        if not (rd / "report.md").is_file():
            continue
        m = run_measurements(rd, spec.method.name, spec.seed)
        if spec.method.unpacked and packed and Path(packed).is_dir():
            # its own eval split is the unpacked one: score it on the packed split the other runs
            # use
            pe = packed_split_eval(rd, packed)
            m.own_split_final_eval_loss = m.final_eval_loss
            m.final_eval_loss, m.final_eval_acc = pe["eval_loss"], pe["eval_acc"]
            m.curve_split = "unpacked"
        rec = state.get("runs", {}).get(spec.name, {})
        m.elapsed_s, m.loadavg, m.cpu_s = rec.get("elapsed_s"), rec.get("loadavg"), rec.get("cpu_s")
        ev = _eval_columns(evaluation, rd)
        if ev:
            m.eval, m.finetune_seconds = ev
        tc, drop = spec.cfg.train, spec.cfg.drop
        if study.selection_checkpoints and tc.keep_checkpoints > 1 and drop.selection.drops:
            m.selection = run_selection(rd)
        per_run[spec.name] = m
    methods: dict[str, MethodResult] = {}
    grouped: dict[str, list[RunSpec]] = {}
    for spec in runs:
        if spec.name in per_run:
            grouped.setdefault(spec.method.name, []).append(spec)
    for name, specs in grouped.items():
        rs = [per_run[s.name] for s in specs]

        def stat(key: str) -> Stat:
            return Stat.of([getattr(r, key) for r in rs])  # noqa: B023 (called in this iteration)

        ecols = sorted({k for r in rs for k in r.eval})
        methods[name] = MethodResult(
            name=name,
            label=specs[0].method.label + seeds_note(len(rs), len(study.seeds)),
            group=specs[0].method.group,
            runs=[s.name for s in specs],
            seeds=[r.seed for r in rs],
            final_eval_loss=stat("final_eval_loss"),
            final_eval_acc=stat("final_eval_acc"),
            wall_time_s=stat("wall_time_s"),
            total_flops=stat("total_flops"),
            tokens_per_s=stat("tokens_per_s"),
            steps=stat("steps"),
            elapsed_s=stat("elapsed_s"),
            cpu_s=stat("cpu_s"),
            finetune_seconds=stat("finetune_seconds"),
            init_s=stat("init_s"),
            eval={k: Stat.of([r.eval.get(k) for r in rs]) for k in ecols},
        )
    base = methods.get(study.baseline_arm)
    target = base.final_eval_loss.mean if base else None
    if base:
        bw, bf = base.wall_time_s.mean, base.total_flops.mean
        for d in methods.values():
            d.rel_wall = d.wall_time_s.mean / bw if bw else float("nan")
            d.rel_flops = d.total_flops.mean / bf if bf else float("nan")
        for r in per_run.values():
            hit = reach_target(r.curve, target) if isnum(target) and not r.curve_split else None
            r.to_target = TargetHit(**hit) if hit else None
            if r.to_target:
                r.to_target.rel_wall = hit["wall_time"] / bw if bw else float("nan")
                r.to_target.rel_flops = hit["flops"] / bf if bf else float("nan")
    src = (
        source_result(study, source, out, evaluation, packed, runs) if source is not None else None
    )
    return StudyResults(
        runs=per_run,
        methods=methods,
        target_eval_loss=target,
        order=[m for m in study.all_methods() if m in methods],
        source=src,
        baseline=study.baseline_arm,
    )
