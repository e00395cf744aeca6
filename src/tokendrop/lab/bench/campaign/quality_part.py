"""Parts ``quality``, ``strong`` and ``scratch``: quality from scratch, sized for one call.

``quality``: a small BERT (the preset's ``quality.overrides``: 8 layers x 512 on the GPU) is
pretrained dense and with token dropping for the *same training wall-clock* on the carried mixed
corpus -- each run's step count comes from a short bench of both steps, and each has its own
warm-up/decay schedule over its steps -- then both are fine-tuned on the SST-2- and QNLI-format
stand-ins.  ``strong`` (the [strong] table): the same pair on top of the strongest dense recipe
(``strong.strong_recipe``: study-strong's WSD with a full decay + batch warm-up + masking 30% ->
15%; the MLM head on the masked slots only, as every tokendrop model), a 6 x 384 BERT that leaves
the unigram plateau within its minutes on one GPU, no fine-tuning.  ``scratch`` (the [scratch]
table): the paper's setting at BERT-base width -- a 12 x 768 encoder with the paper's layout (full
layers 0-4 and 11, drop span 5-10), T=128 -- dense, dense for 75% of the steps with its own full
decay (the paper's "baseline (75%)", about token drop's FLOPs) and token drop, at every rate of
``scratch.lrs``, each run the same number of steps (``run_length = "equal-steps"``: the count the
calibration fits into the budget for all runs), step times from short real ``pretrain`` runs
(``calibrate_steps``).  Reported: eval MLM loss vs training wall-clock (vs FLOPs for equal
steps), the unigram plateau they must get well below, the time (and FLOPs) each run needs to reach
the dense runs' final loss (dense at its best rate), downstream accuracy (quality), every run's lr,
arm, steps, final held-out loss, FLOPs and time (``results``), and for equal steps the token drop vs
dense gap at equal steps and at equal FLOPs per rate and at each arm's best rate (``comparison``,
``best_lr``, ``at_best_lr``).
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokendrop.config import STEPS_UNSET, FinetuneConfig, from_dict
from tokendrop.data import PreparedData
from tokendrop.dropping.methods import METHODS
from tokendrop.errors import ConfigError, TrainingError
from tokendrop.finetuning import finetune
from tokendrop.finetuning.tasks import get_task
from tokendrop.lab.bench.campaign.common import Budget, Log, PartResult, free_device_memory
from tokendrop.lab.bench.campaign.config import (
    QUALITY_ARMS,
    CampaignConfig,
    QualityPart,
    strong_recipe,
)
from tokendrop.lab.bench.campaign.runs import (
    RunSummary,
    Scratch,
    check_inputs,
    data_info,
    keep_log,
    model_bench_config,
    pretrain_config,
    summarize_run,
    trainer_step_ms,
)
from tokendrop.lab.bench.run import run_bench
from tokendrop.lab.inspect import selection_trace
from tokendrop.runs.metrics import read_metrics
from tokendrop.runs.plotting import pyplot, save_figure
from tokendrop.train.trainer import pretrain

# wall time of a run / its training time (evaluation, start-up, the final checkpoint)
RUN_OVERHEAD = 1.35
END_RESERVE_S = 15.0


def unigram_plateau(data_dir: str) -> float:
    """Entropy (nats) of the corpus' token distribution, special tokens excluded: the MLM loss of a
    model that predicts every masked token from frequencies alone."""
    d = PreparedData.open(data_dir)
    counts = np.load(Path(data_dir) / "token_counts.npy").astype(np.float64)
    counts[list(set(d.special_ids.values()))] = 0
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def time_to_loss(curve: list[tuple[float, float]], target: float) -> float | None:
    """First training time (or FLOPs, for an (x, loss) curve) at which the eval-loss curve reaches
    ``target`` (linear between points)."""
    for i, (t, loss) in enumerate(curve):
        if loss <= target:
            if i == 0:
                return t
            t0, l0 = curve[i - 1]
            return t0 + (t - t0) * (l0 - target) / (l0 - loss) if l0 != loss else t
    return None


@dataclass
class Calibration:
    dense_step_s: float
    drop_step_s: float
    # time: each run's training seconds (times its arm's share); equal-steps: a dense run's
    per_run_budget_s: float
    dense_steps: int
    drop_steps: int
    source: str = "bench"  # where the step times come from: "bench" or "trainer" (calibrate_steps)


def section(cfg: CampaignConfig, part: str) -> QualityPart:
    """The part's table: [strong] for ``strong``, [scratch] for ``scratch``, else [quality]."""
    return {"strong": cfg.strong, "scratch": cfg.scratch}.get(part, cfg.quality)


def _drops(arm: str) -> bool:
    return METHODS[QUALITY_ARMS[arm].method].drops


def arm_steps(q: QualityPart, cal: Calibration, arm: str) -> int:
    """The steps a run of ``arm`` is planned for: the calibrated count of its step kind times the
    arm's share (``Arm.steps_share``), at least 2."""
    base = cal.drop_steps if _drops(arm) else cal.dense_steps
    return max(2, round(QUALITY_ARMS[arm].steps_share * base))


def _run_seconds(q: QualityPart, cal: Calibration, arm: str) -> float:
    """The training seconds a run of ``arm`` is expected to take."""
    if q.run_length == "time":
        return cal.per_run_budget_s * QUALITY_ARMS[arm].steps_share
    return arm_steps(q, cal, arm) * (cal.drop_step_s if _drops(arm) else cal.dense_step_s)


def _bench_step_s(
    cfg: CampaignConfig, q: QualityPart, info: dict, where: str, log: Log
) -> tuple[float, float]:
    """(dense, drop) seconds per step from a bench of the part's model (BERT family)."""
    base = pretrain_config(cfg, q.config, q.overrides + q.recipe(), 10, q.batch_size, "cumulative")
    bc = model_bench_config(
        cfg, base, info["vocab_size"], info["seq_len"], q.batch_size, q.calibrate_rounds, 3, 60.0
    )
    log(f"  calibration: step times of the {base.model.num_layers}x{base.model.hidden_size} model")
    res = run_bench(bc, log=log, command=f"tokendrop bench --campaign {where} (calibration)")
    free_device_memory()
    t = info["seq_len"]
    dense = res.setting(f"T{t}/dense").time_s.median
    drop = res.setting(f"T{t}/drop-{bc.rates[0]:g}").time_s.median
    return dense, drop


def _trainer_step_s(
    cfg: CampaignConfig, q: QualityPart, scratch: Path, where: str, log: Log
) -> tuple[float, float]:
    """(dense, drop) seconds per step of the trainer itself: a ``calibrate_steps``-step real
    ``pretrain`` of each step kind with the part's model, batch and first rate, the log's intervals
    after the first (warm-up)."""
    n = q.calibrate_steps
    every = max(1, n // 6)
    lr = q.rates()[0]
    extra = [
        f"train.log_every={every}",
        f"train.eval_every={10 * n}",
        f"train.ckpt_every={10 * n}",
        "train.keep_checkpoints=1",
        "train.eval_batches=1",
        f"train.warmup_steps={max(1, n // 10)}",
        *([f"train.lr={lr}"] if lr is not None else []),
    ]
    out = []
    for kind, method in (("dense", "none"), ("drop", "cumulative")):
        pc = pretrain_config(
            cfg, q.config, q.overrides + q.recipe(), n, q.batch_size, method, extra
        )
        log(
            f"  calibration: {n} {kind} steps of the trainer ({pc.model.num_layers}x"
            f"{pc.model.hidden_size}, batch {q.batch_size})"
        )
        run_dir = scratch / f"calibrate-{kind}"
        pretrain(pc, run_dir, progress=False)
        ms, _ = trainer_step_ms(run_dir, every)
        shutil.rmtree(run_dir, ignore_errors=True)
        free_device_memory()
        if ms is None:
            raise ConfigError(
                f"{where}.calibrate_steps: {n} steps logged too few intervals to time a "
                "step; expected >= 4"
            )
        out.append(ms / 1000)
    return out[0], out[1]


def _calibrate(
    cfg: CampaignConfig,
    q: QualityPart,
    info: dict,
    budget: Budget,
    scratch: Path,
    where: str,
    log: Log,
) -> Calibration:
    if q.calibrate_steps:
        dense, drop = _trainer_step_s(cfg, q, scratch, where, log)
    else:
        dense, drop = _bench_step_s(cfg, q, info, where, log)
    left = budget.left() - q.finetune_reserve_s - END_RESERVE_S
    groups = len(q.seeds) * len(q.rates())
    source = "trainer" if q.calibrate_steps else "bench"
    if q.run_length == "equal-steps":
        # every run the same n steps times its share: n * sum(share x step time) over all runs
        per_step = groups * sum(
            QUALITY_ARMS[a].steps_share * (drop if _drops(a) else dense) for a in q.arms
        )
        n = min(q.max_steps, int(q.train_budget_s / dense), int(left / (per_step * RUN_OVERHEAD)))
        n = max(2, n)
        return Calibration(dense, drop, n * dense, n, n, source)
    shares = groups * sum(QUALITY_ARMS[a].steps_share for a in q.arms)
    per = max(1.0, min(q.train_budget_s, left / (shares * RUN_OVERHEAD)))
    return Calibration(
        dense,
        drop,
        per,
        max(2, min(q.max_steps, int(per / dense))),
        max(2, min(q.max_steps, int(per / drop))),
        source,
    )


def _plot(
    runs: dict[str, RunSummary],
    plateau: float,
    target_t: float | None,
    path: Path,
    title: str = "",
    by_flops: bool = False,
) -> bool:
    """Eval MLM loss of every run against training wall-clock, or against training FLOPs
    (``by_flops``; ``target_t`` is then FLOPs too)."""
    try:
        plt = pyplot()
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for s in runs.values():
        curve = s.eval_flops if by_flops else s.eval_curve
        ax.plot(
            [t for t, _ in curve],
            [v for _, v in curve],
            marker="o",
            label=f"{s.name} ({s.steps} steps)",
        )
    ax.axhline(plateau, color="grey", ls="--", lw=0.9, label=f"unigram plateau {plateau:.2f}")
    if target_t is not None:
        ax.axvline(
            target_t,
            color="tab:orange",
            ls=":",
            lw=0.9,
            label="token drop reaches dense's final loss",
        )
    ax.set_xlabel(
        "training FLOPs (the FLOP model's)"
        if by_flops
        else "training wall-clock (s; evaluation excluded)"
    )
    ax.set_ylabel("eval MLM loss")
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120, tight=False)
    return True


def run_quality_part(
    cfg: CampaignConfig, out: Path, budget: Budget, r: PartResult, save, log: Log
) -> None:
    q = section(cfg, r.part)
    check_inputs(cfg, tuple(q.tasks))
    info = data_info(cfg.data)
    plateau = unigram_plateau(cfg.data)
    r.data.update({"data": info, "unigram_plateau": plateau, "arms": q.arms, "seeds": q.seeds})
    if q.lrs:
        r.data["lrs"] = q.lrs
    if q.recipe():
        r.data["recipe"] = q.recipe()
        r.summary.append(f"recipe of every run: {' '.join(q.recipe())}")
    gpu = cfg.device == "cuda" and not cfg.dry_run
    _layout(cfg, q, r)
    with Scratch(f"td-campaign-{r.part}-") as scratch:
        if q.rate0_steps:
            _rate0_check(cfg, q, scratch, r, log)
            save()
        if q.agreement_steps:
            _agreement_check(cfg, q, scratch, r, log)
            save()
        cal = _calibrate(cfg, q, info, budget, scratch, r.part, log)
        r.data["calibration"] = cal
        if q.run_length == "equal-steps":
            planned = ", ".join(f"{a} {arm_steps(q, cal, a)}" for a in q.arms)
            r.summary.append(
                f"calibration ({cal.source}): dense {1e3 * cal.dense_step_s:.1f} ms/step, drop "
                f"{1e3 * cal.drop_step_s:.1f} ms/step -> steps per run: {planned} "
                f"(x {len(q.rates()) * len(q.seeds)} rate/seed groups)"
            )
        else:
            r.summary.append(
                f"calibration ({cal.source}): dense {1e3 * cal.dense_step_s:.1f} ms/step, drop "
                f"{1e3 * cal.drop_step_s:.1f} ms/step -> {cal.per_run_budget_s:.0f}s "
                f"each: {cal.dense_steps} vs {cal.drop_steps} steps"
            )
        save()
        runs: dict[str, RunSummary] = {}
        meta: dict[str, tuple[str, float | None, int]] = {}
        r.data["results"] = []
        # rate by rate, seed by seed: a part cut short keeps every arm of its finished groups
        for lr in q.rates():
            for seed in q.seeds:
                for arm in q.arms:
                    name = q.run_name(arm, seed, lr)
                    need = _run_seconds(q, cal, arm) * RUN_OVERHEAD + END_RESERVE_S
                    if runs and not budget.allows(need):
                        r.skip(f"{name} pretraining", log)
                        continue
                    t0 = time.perf_counter()
                    try:
                        runs[name], used_lr = _arm_run(
                            cfg, q, cal, scratch, out, r, arm, seed, lr, log
                        )
                    except TrainingError as e:  # diverged (non-finite steps): a result, not a stop
                        why = " ".join(str(e).split())[:300]
                        r.data["results"].append(
                            {"run": name, "arm": arm, "lr": lr, "seed": seed, "error": why}
                        )
                        r.summary.append(f"{name}: stopped: {why}")
                        log(f"  {name}: stopped: {why}")
                        free_device_memory()
                        save()
                        continue
                    meta[name] = (arm, used_lr, seed)
                    s = runs[name]
                    r.data["results"].append(
                        {
                            "run": name,
                            "arm": arm,
                            "lr": used_lr,
                            "seed": seed,
                            "steps": s.steps,
                            "final_eval_loss": s.final_eval_loss,
                            "flops": s.flops,
                            "train_s": s.train_seconds,
                            "wall_s": time.perf_counter() - t0,
                        }
                    )
                    r.check(
                        f"{name}: final eval loss at least {q.plateau_margin:g} nats below the "
                        f"unigram plateau ({plateau:.2f})",
                        (
                            s.final_eval_loss is not None
                            and s.final_eval_loss <= plateau - q.plateau_margin
                        )
                        if gpu
                        else None,
                        f"{s.final_eval_loss}",
                    )
                    free_device_memory()
                    r.data["runs"] = runs
                    save()
        target = _time_to_dense(q, runs, meta, r)
        _tables(r, runs)
        if q.run_length == "equal-steps":
            equal_steps_comparison(q, cal, runs, meta, r)
        if q.strong_recipe:
            title = "strong dense recipe vs + token drop"
        elif r.part == "scratch":
            title = "from scratch: dense, dense (75% of the steps), token drop"
        else:
            title = ""
        by_flops = q.run_length == "equal-steps"
        marker = None if target is None else target[1 if by_flops else 0]
        if runs and _plot(runs, plateau, marker, out / f"{r.part}.png", title, by_flops):
            r.files.append(f"{r.part}.png")
        save()
        if q.tasks:
            _finetune_all(cfg, q, runs, scratch, out, budget, r, save, log)


def _layout(cfg: CampaignConfig, q: QualityPart, r: PartResult) -> None:
    """The model every run trains and, for a part with a dropping arm, its layer layout: the full
    layers and the drop span (``r.data["layout"]``, a summary line)."""
    pc = pretrain_config(cfg, q.config, q.overrides + q.recipe(), 10, q.batch_size, "cumulative")
    m = pc.model
    n = m.num_layers
    start, end = pc.drop.span(n)
    full = [i for i in range(n) if not start <= i < end]
    r.data["layout"] = {
        "family": m.family,
        "num_layers": n,
        "hidden_size": m.hidden_size,
        "num_heads": m.num_heads,
        "intermediate_size": m.intermediate_size,
        "drop_span": [start, end - 1],
        "full_layers": full,
        "drop_rate": pc.drop.rate,
    }
    if any(_drops(a) for a in q.arms):
        r.summary.append(
            f"model: {n} x {m.hidden_size} {m.family}; token drop keeps {1 - pc.drop.rate:.0%} of "
            f"the rows in layers {start}-{end - 1}, full layers {_ranges(full)}"
        )


def _ranges(xs: list[int]) -> str:
    """[0, 1, 2, 3, 4, 11] -> '0-4 and 11'."""
    spans: list[list[int]] = []
    for x in xs:
        if spans and x == spans[-1][1] + 1:
            spans[-1][1] = x
        else:
            spans.append([x, x])
    words = [f"{a}-{b}" if b > a else f"{a}" for a, b in spans]
    return " and ".join([", ".join(words[:-1]), words[-1]]) if len(words) > 1 else "".join(words)


def _arm_run(
    cfg: CampaignConfig,
    q: QualityPart,
    cal: Calibration,
    scratch: Path,
    out: Path,
    r: PartResult,
    arm: str,
    seed: int,
    lr: float | None,
    log: Log,
) -> tuple[RunSummary, float]:
    """One pretraining run of ``arm`` with ``seed`` at peak rate ``lr`` (None: the config's); its
    metrics log kept under OUT and, for a dropping run with ``q.diagnostics``, its selection trace
    in ``r.data["selection"]``.  -> its summary and the peak rate it ran at."""
    name = q.run_name(arm, seed, lr)
    spec = QUALITY_ARMS[arm]
    drops = _drops(arm)
    steps = arm_steps(q, cal, arm)
    rate0 = "drop.rate=0.0" in spec.overrides
    trace = q.diagnostics if drops and not rate0 else 0
    # the cadences from the calibrated step count; the run's length from q.run_length
    extra = [
        f"train.eval_every={max(1, steps // q.evals)}",
        f"train.log_every={max(1, steps // 50)}",
        f"train.ckpt_every={max(1, steps // trace) if trace else steps}",
        f"train.keep_checkpoints={trace + 1 if trace else 1}",
        f"train.warmup_steps={max(1, round(0.06 * steps))}",
        f"train.seed={seed}",
        *([f"train.lr={lr}"] if lr is not None else []),
        *spec.overrides,
    ]
    timed = q.run_length == "time"
    seconds = cal.per_run_budget_s * spec.steps_share
    if timed:
        extra += [f"train.time_budget='{seconds:.1f}s'", "train.budget_clock='wall'"]
    length_steps = STEPS_UNSET if timed else steps
    pc = pretrain_config(
        cfg, q.config, q.overrides + q.recipe(), length_steps, q.batch_size, spec.method, extra
    )
    length = f"{seconds:.0f}s of training (~{steps} steps)" if timed else f"{steps} steps"
    log(
        f"  pretrain {name}: {length} ({pc.model.num_layers}x{pc.model.hidden_size}, "
        f"batch {q.batch_size}, lr {pc.train.lr:g})"
    )
    t0 = time.perf_counter()
    pretrain(pc, scratch / name, progress=False)
    r.files.append(keep_log(scratch / name, out, f"{r.part}-{name}"))
    s = summarize_run(name, scratch / name)
    r.summary.append(
        f"{name}: {s.steps} steps, {s.train_seconds:.0f}s training "
        f"({time.perf_counter() - t0:.0f}s wall), final eval loss "
        f"{s.final_eval_loss:.3f}"
    )
    if trace:
        r.data.setdefault("selection", {})[name] = selection_trace(scratch / name)
    if trace or not q.tasks:  # no fine-tuning reads them (a bert-base-size checkpoint: ~1 GB)
        shutil.rmtree(scratch / name / "checkpoints", ignore_errors=True)
    return s, float(pc.train.lr)


def _tables(r: PartResult, runs: dict[str, RunSummary]) -> None:
    rows = [[s.name, round(t, 1), v] for s in runs.values() for t, v in s.eval_curve]
    r.tables = [("eval MLM loss vs training wall-clock", ["run", "training s", "eval loss"], rows)]
    if r.data.get("selection"):
        r.tables.append(
            (
                "what the selector keeps, through training (held-out sequences masked at the run's "
                "rate at that step; tokendrop.lab.inspect.selection_trace)",
                [
                    "run",
                    "step",
                    "masking rate",
                    "[MASK] share of kept rows",
                    "target share of kept rows",
                    "ordinary tokens kept per sequence",
                    "Spearman importance vs rarity",
                ],
                [
                    [
                        n,
                        d["step"],
                        d["mask_prob"],
                        d.get("kept_mask_share"),
                        d.get("kept_target_share"),
                        d.get("ordinary_kept_per_sequence"),
                        d.get("spearman_score_vs_rarity"),
                    ]
                    for n, tr in r.data["selection"].items()
                    for d in tr
                ],
            )
        )
    for title, t in (
        ("rate 0 vs dense, step by step", r.data.get("rate0")),
        ("CPU fp32 vs device bf16, first steps of a token-drop run", r.data.get("agreement")),
    ):
        if t:
            r.tables.append(
                (title, ["step", *t["columns"]], [[k, *v] for k, v in zip(t["steps"], t["losses"])])
            )


def _time_to_dense(
    q: QualityPart,
    runs: dict[str, RunSummary],
    meta: dict[str, tuple[str, float | None, int]],
    r: PartResult,
) -> tuple[float | None, float | None] | None:
    """Every run's training time and FLOPs to the dense runs' mean final eval loss -- with several
    rates, the dense runs' at their best rate (the lowest mean) -- in r.data; -> the first
    token-drop run's (seconds, FLOPs) (the plot's marker), None without a target."""
    by_lr: dict[float | None, list[float]] = {}
    for n, (arm, lr, _) in meta.items():
        if arm == "dense" and runs[n].final_eval_loss is not None:
            by_lr.setdefault(lr, []).append(runs[n].final_eval_loss)
    if not by_lr or len(runs) < 2:
        return None
    dense_lr, finals = min(by_lr.items(), key=lambda kv: sum(kv[1]) / len(kv[1]))
    target = sum(finals) / len(finals)
    times = {n: time_to_loss(s.eval_curve, target) for n, s in runs.items()}
    flops = {n: time_to_loss(s.eval_flops, target) for n, s in runs.items()}
    seconds = {n: s.train_seconds for n, s in runs.items()}
    r.data["time_to_dense_final_loss"] = {
        "dense_final_eval_loss": target,
        "dense_final_eval_losses": finals,
        "dense_lr": dense_lr,
        "seconds": times,
        "flops": flops,
        "train_seconds": seconds,
    }
    drops = [n for n in runs if meta[n][0] == "token-drop"]
    at = f" (dense at lr {dense_lr:g})" if len(by_lr) > 1 or q.lrs else ""
    for n in drops:
        t = times[n]
        r.summary.append(
            f"{n} reaches the dense runs' mean final eval loss {target:.3f}{at} "
            + (
                f"after {t:.0f}s of training = {100 * t / seconds[n]:.0f}% of its {seconds[n]:.0f}s"
                if t is not None
                else "not within its budget"
            )
        )
    return (times[drops[0]], flops[drops[0]]) if drops else None


def value_at(curve: list[tuple[float, float]], x: float) -> float | None:
    """The curve's value at ``x`` (linear between points), None outside it."""
    for (x0, y0), (x1, y1) in zip(curve[:-1], curve[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return curve[-1][1] if curve and curve[-1][0] == x else None


COMPARISON_HEADER = [
    "lr",
    "seed",
    "dense",
    "token drop",
    "dense (75%)",
    "gap, equal steps",
    "gap, equal FLOPs (vs dense 75%)",
    "dense's curve at token drop's FLOPs",
    "gap vs that",
    "token drop FLOPs / dense",
    "dense 75% FLOPs / dense",
]


def _gap(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def equal_steps_comparison(
    q: QualityPart,
    cal: Calibration,
    runs: dict[str, RunSummary],
    meta: dict[str, tuple[str, float | None, int]],
    r: PartResult,
) -> None:
    """Runs of equal steps: per rate and seed, token drop's final held-out loss minus dense's (equal
    steps) and minus dense (75%)'s (about equal FLOPs; also minus dense's own eval curve read at
    token drop's FLOPs), and the same with each arm at its best rate (r.data ``comparison``,
    ``best_lr``, ``at_best_lr``; a table, summary lines).  A gap > 0: token drop is behind."""
    by = {(arm, lr, seed): runs[n] for n, (arm, lr, seed) in meta.items()}
    r.check(
        "equal steps: every arm ran its planned step count (dense and token drop the same, dense "
        "(75%) 0.75 of it)",
        all(runs[n].steps == arm_steps(q, cal, meta[n][0]) for n in runs) and bool(runs),
        ", ".join(f"{n} {s.steps}" for n, s in runs.items()),
    )
    rows, out = [], []
    for lr in sorted({lr for _, lr, _ in meta.values()}):
        for seed in q.seeds:
            d, t, c = (by.get((a, lr, seed)) for a in ("dense", "token-drop", "dense-75"))
            if d is None or t is None:
                continue
            curve = value_at(d.eval_flops, t.flops) if t.flops is not None else None
            x = {
                "lr": lr,
                "seed": seed,
                "dense": d.final_eval_loss,
                "token_drop": t.final_eval_loss,
                "dense_75": c.final_eval_loss if c else None,
                "gap_equal_steps": _gap(t.final_eval_loss, d.final_eval_loss),
                "gap_equal_flops": _gap(t.final_eval_loss, c.final_eval_loss) if c else None,
                "dense_curve_at_drop_flops": curve,
                "gap_vs_dense_curve": _gap(t.final_eval_loss, curve),
                "drop_flops_ratio": t.flops / d.flops if t.flops and d.flops else None,
                "dense_75_flops_ratio": c.flops / d.flops if c and c.flops and d.flops else None,
            }
            out.append(x)
            rows.append(list(x.values()))
    r.data["comparison"] = out
    r.tables.append(
        (
            "token drop vs dense: final held-out MLM loss at equal steps and at equal FLOPs (gap = "
            "token drop - the other; > 0: token drop behind)",
            COMPARISON_HEADER,
            rows,
        )
    )
    best: dict[str, float] = {}
    for arm in q.arms:
        got: dict[float, list[float]] = {}
        for (a, lr, _), s in by.items():
            if a == arm and s.final_eval_loss is not None and lr is not None:
                got.setdefault(lr, []).append(s.final_eval_loss)
        if got:
            best[arm] = min(got, key=lambda lr: sum(got[lr]) / len(got[lr]))
    r.data["best_lr"] = best
    mean = {
        arm: _mean([s.final_eval_loss for (a, lr, _), s in by.items() if a == arm and lr == b])
        for arm, b in best.items()
    }
    at_best = {
        "final_eval_loss": mean,
        "gap_equal_steps": _gap(mean.get("token-drop"), mean.get("dense")),
        "gap_equal_flops": _gap(mean.get("token-drop"), mean.get("dense-75")),
    }
    r.data["at_best_lr"] = at_best
    for x in out:
        r.summary.append(
            f"lr {x['lr']:g}, seed {x['seed']}: token drop - dense {_fmt(x['gap_equal_steps'])} "
            f"at equal steps, - dense (75%) {_fmt(x['gap_equal_flops'])} at ~equal FLOPs "
            f"({_fmt(x['drop_flops_ratio'], '.2f')} vs "
            f"{_fmt(x['dense_75_flops_ratio'], '.2f')} of dense's)"
        )
    if len(best) > 1 and len({lr for _, lr, _ in meta.values()}) > 1:
        r.summary.append(
            "each arm at its best rate ("
            + ", ".join(f"{a} {lr:g}" for a, lr in best.items())
            + f"): token drop - dense {_fmt(at_best['gap_equal_steps'])}, - dense (75%) "
            f"{_fmt(at_best['gap_equal_flops'])}"
        )


def _mean(xs: list[float | None]) -> float | None:
    ys = [x for x in xs if x is not None]
    return sum(ys) / len(ys) if ys else None


def _fmt(x: float | None, spec: str = "+.3f") -> str:
    return "-" if x is None else format(x, spec)


def _short_run(
    cfg: CampaignConfig,
    q: QualityPart,
    scratch: Path,
    name: str,
    method: str,
    steps: int,
    batch: int,
    extra: list[str],
) -> list[tuple[int, float]]:
    """A short run logged every step: -> (step, training loss) pairs."""
    recipe = strong_recipe(batch) if q.strong_recipe else []
    cadence = [
        "train.log_every=1",
        f"train.eval_every={steps}",
        f"train.ckpt_every={steps}",
        "train.keep_checkpoints=1",
        f"train.warmup_steps={max(1, steps // 10)}",
    ]
    pc = pretrain_config(cfg, q.config, q.overrides + recipe, steps, batch, method, cadence + extra)
    pretrain(pc, scratch / name, progress=False)
    return [
        (int(x["step"]), float(x["loss"]))
        for x in read_metrics(scratch / name)
        if "loss" in x and "lr" in x
    ]


def _rate0_check(
    cfg: CampaignConfig, q: QualityPart, scratch: Path, r: PartResult, log: Log
) -> None:
    """Dense and token drop at rate 0 (the dropping path, every row kept), same seed and data, for
    ``rate0_steps`` steps: the per-step training losses must agree (a check of the device's
    dropping path)."""
    n = q.rate0_steps
    log(f"  rate 0 vs dense: {n} steps each, batch {q.batch_size}")
    a = _short_run(cfg, q, scratch, "rate0-dense", "none", n, q.batch_size, [])
    b = _short_run(cfg, q, scratch, "rate0-drop", "cumulative", n, q.batch_size, ["drop.rate=0.0"])
    _compare(
        r,
        "rate0",
        a,
        b,
        ["dense", "token drop, rate 0"],
        q.rate0_tolerance,
        relative=False,
        name=f"token drop at rate 0 tracks dense step for step ({n} steps, max |loss "
        f"difference| <= {q.rate0_tolerance:g})",
    )


def _agreement_check(
    cfg: CampaignConfig, q: QualityPart, scratch: Path, r: PartResult, log: Log
) -> None:
    """The first ``agreement_steps`` of a token-drop run, dropout off: on the CPU in fp32 and on
    the part's device in bf16 (on a CPU dry run: the CPU in bf16), per-step losses compared."""
    n, batch, dev = q.agreement_steps, q.agreement_batch, cfg.device
    log(f"  CPU fp32 vs {dev} bf16: {n} token-drop steps, batch {batch}")
    quiet = ["model.hidden_dropout=0.0", "model.attention_dropout=0.0", "data.num_workers=0"]
    a = _short_run(
        cfg,
        q,
        scratch,
        "agree-cpu",
        "cumulative",
        n,
        batch,
        quiet + ['train.device="cpu"', 'train.precision="fp32"'],
    )
    b = _short_run(
        cfg,
        q,
        scratch,
        "agree-device",
        "cumulative",
        n,
        batch,
        quiet + [f'train.device="{dev}"', 'train.precision="bf16"'],
    )
    _compare(
        r,
        "agreement",
        a,
        b,
        ["CPU fp32", f"{dev} bf16"],
        q.agreement_tolerance,
        relative=True,
        name=f"token drop: CPU fp32 and {dev} bf16 agree over the first {n} "
        "steps (max relative loss difference <= "
        f"{q.agreement_tolerance:g})",
    )


def _compare(
    r: PartResult,
    key: str,
    a: list[tuple[int, float]],
    b: list[tuple[int, float]],
    columns: list[str],
    tol: float,
    relative: bool,
    name: str,
) -> None:
    bs = dict(b)
    common = [(s, la, bs[s]) for s, la in a if s in bs]
    diffs = [abs(la - lb) / (abs(la) if relative else 1.0) for _, la, lb in common]
    worst = max(diffs) if diffs else None
    avg = sum(diffs) / len(diffs) if diffs else None
    r.data[key] = {
        "columns": columns,
        "steps": [s for s, _, _ in common],
        "losses": [[la, lb] for _, la, lb in common],
        "max_diff": worst,
        "mean_diff": avg,
        "relative": relative,
    }
    r.check(
        name,
        worst is not None and len(common) == len(a) and worst <= tol,
        f"{len(common)} steps, max {worst:.3g}, mean {avg:.3g}" if diffs else "no common steps",
    )


def _finetune_all(
    cfg: CampaignConfig,
    q: QualityPart,
    runs: dict[str, RunSummary],
    scratch: Path,
    out: Path,
    budget: Budget,
    r: PartResult,
    save,
    log: Log,
) -> None:
    acc: dict[str, dict[str, float]] = {}
    took = 0.0
    for task in q.tasks:
        for name in runs:
            if not budget.allows(max(took, 10.0) + END_RESERVE_S):
                r.skip(f"fine-tuning {name} on {task}", log)
                continue
            fc = from_dict(
                FinetuneConfig,
                {},
                [
                    f'task="{task}"',
                    f'data="{Path(cfg.glue) / get_task(task).dirname}"',
                    f'device="{cfg.device}"',
                    "log_every=0",
                    *q.finetune_overrides,
                ],
            )
            log(f"  fine-tune {name} on {task}")
            t0 = time.perf_counter()
            m = finetune(fc, scratch / name, scratch / f"ft-{name}-{task}", log=None)
            took = time.perf_counter() - t0
            acc.setdefault(name, {})[task] = float(m["score"])
            free_device_memory()
        r.data["finetune"] = acc
        r.tables = [t for t in r.tables if not t[0].startswith("fine-tuning")]
        r.tables.append(
            (
                "fine-tuning (dev score, %)",
                ["run", *q.tasks],
                [[n, *[acc.get(n, {}).get(t) for t in q.tasks]] for n in runs],
            )
        )
        save()
    done = sum(len(v) for v in acc.values())
    r.check(
        "fine-tuned every model on every task",
        done == len(runs) * len(q.tasks) and done > 0,
        f"{done} of {len(runs) * len(q.tasks)}",
    )
    if acc:
        r.summary.append(
            "fine-tuning: "
            + "; ".join(
                f"{n} " + ", ".join(f"{t} {v:.1f}" for t, v in a.items() if not math.isnan(v))
                for n, a in acc.items()
            )
        )
