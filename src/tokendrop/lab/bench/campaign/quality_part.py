"""Parts ``quality`` and ``strong``: time to quality from scratch, sized for one call.

``quality``: a small BERT (the preset's ``quality.overrides``: 8 layers x 512 on the GPU) is
pretrained dense and with token dropping for the *same training wall-clock* on the carried mixed
corpus -- each run's step count comes from a short bench of both steps, and each has its own
warm-up/decay schedule over its steps -- then both are fine-tuned on the SST-2- and QNLI-format
stand-ins.  ``strong`` (the [strong] table): the same pair on top of the strongest dense recipe
(``strong.strong_recipe``: study-strong's WSD with a full decay + batch warm-up + masking 30% -> 15%; the
MLM head on the masked slots only, as every tokendrop model), a 6 x 384 BERT that leaves the
unigram plateau within its minutes on one GPU, no fine-tuning.  Reported: eval MLM loss vs
training wall-clock for both, the unigram plateau they must get well below, the time token
dropping needs to reach the dense run's final loss, downstream accuracy (quality).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokendrop.runs.plotting import pyplot, save_figure
from tokendrop.config import FinetuneConfig, from_dict
from tokendrop.finetune.tasks import get_task
from tokendrop.lab.bench.run import run_bench
from tokendrop.lab.bench.campaign.common import Budget, Log, PartResult, free_device_memory
from tokendrop.lab.bench.campaign.config import CampaignConfig, QualityPart
from tokendrop.lab.bench.campaign.runs import (
    RunSummary,
    Scratch,
    check_inputs,
    data_info,
    keep_log,
    model_bench_config,
    pretrain_config,
    summarize_run,
)
from tokendrop.data import PreparedData
from tokendrop.train.trainer import pretrain
from tokendrop.finetune import finetune

RUN_OVERHEAD = 1.35  # wall time of a run / its training time (evaluation, start-up, the final checkpoint)
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
    """First training time at which the eval-loss curve reaches ``target`` (linear between points)."""
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
    per_run_budget_s: float
    dense_steps: int
    drop_steps: int


def section(cfg: CampaignConfig, part: str) -> QualityPart:
    """The [quality] table for part ``quality``, the [strong] table for part ``strong``."""
    return cfg.strong if part == "strong" else cfg.quality


def _calibrate(cfg: CampaignConfig, q: QualityPart, info: dict, budget: Budget, log: Log) -> Calibration:
    base = pretrain_config(cfg, q.config, q.overrides + q.recipe(), 10, q.batch_size, "cumulative")
    bc = model_bench_config(cfg, base, info["vocab_size"], info["seq_len"], q.batch_size, q.calibrate_rounds, 3, 60.0)
    log(f"  calibration: step times of the {base.model.num_layers}x{base.model.hidden_size} model")
    res = run_bench(bc, log=log, command="tokendrop bench --campaign quality/strong (calibration)")
    free_device_memory()
    t = info["seq_len"]
    dense = res.setting(f"T{t}/dense").time_s.median
    drop = res.setting(f"T{t}/drop-{bc.rates[0]:g}").time_s.median
    per = min(q.train_budget_s, (budget.left() - q.finetune_reserve_s - END_RESERVE_S) / (2 * RUN_OVERHEAD))
    per = max(per, 1.0)
    return Calibration(dense, drop, per, max(2, min(q.max_steps, int(per / dense))),
                       max(2, min(q.max_steps, int(per / drop))))


def _plot(runs: dict[str, RunSummary], plateau: float, target_t: float | None, path: Path, title: str = "") -> bool:
    try:
        plt = pyplot()
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for s in runs.values():
        ax.plot([t for t, _ in s.eval_curve], [v for _, v in s.eval_curve], marker="o", label=f"{s.name} ({s.steps} steps)")
    ax.axhline(plateau, color="grey", ls="--", lw=0.9, label=f"unigram plateau {plateau:.2f}")
    if target_t is not None:
        ax.axvline(target_t, color="tab:orange", ls=":", lw=0.9, label="token drop reaches dense's final loss")
    ax.set_xlabel("training wall-clock (s; evaluation excluded)")
    ax.set_ylabel("eval MLM loss")
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120, tight=False)
    return True


def run_quality_part(cfg: CampaignConfig, out: Path, budget: Budget, r: PartResult, save, log: Log) -> None:
    q = section(cfg, r.part)
    check_inputs(cfg, tuple(q.tasks))
    info = data_info(cfg.data)
    plateau = unigram_plateau(cfg.data)
    r.data.update({"data": info, "unigram_plateau": plateau})
    if q.recipe():
        r.data["recipe"] = q.recipe()
        r.summary.append(f"recipe of both runs: {' '.join(q.recipe())}")
    cal = _calibrate(cfg, q, info, budget, log)
    r.data["calibration"] = cal
    r.summary.append(f"calibration: dense {1e3 * cal.dense_step_s:.1f} ms/step, drop {1e3 * cal.drop_step_s:.1f} ms/step "
                     f"-> {cal.per_run_budget_s:.0f}s each: {cal.dense_steps} vs {cal.drop_steps} steps")
    save()
    gpu = cfg.device == "cuda" and not cfg.dry_run
    with Scratch(f"td-campaign-{r.part}-") as scratch:
        runs: dict[str, RunSummary] = {}
        for method, name, steps in (("none", "dense", cal.dense_steps), ("cumulative", "token-drop", cal.drop_steps)):
            if runs and not budget.allows(cal.per_run_budget_s * RUN_OVERHEAD + END_RESERVE_S):
                r.skip(f"{name} pretraining", log)
                continue
            # the cadences from the calibrated step count; the run's length from q.run_length
            extra = [f"train.eval_every={max(1, steps // q.evals)}", f"train.log_every={max(1, steps // 50)}",
                     f"train.ckpt_every={steps}", f"train.warmup_steps={max(1, round(0.06 * steps))}", "train.keep_checkpoints=1"]
            timed = q.run_length == "time"
            if timed:
                extra += [f"train.time_budget='{cal.per_run_budget_s:.1f}s'", "train.budget_clock='wall'"]
            pc = pretrain_config(cfg, q.config, q.overrides + q.recipe(), 0 if timed else steps, q.batch_size, method, extra)
            log(f"  pretrain {name}: " + (f"{cal.per_run_budget_s:.0f}s of training (~{steps} steps)" if timed else f"{steps} steps")
                + f" ({pc.model.num_layers}x{pc.model.hidden_size}, batch {q.batch_size})")

            t0 = time.perf_counter()
            pretrain(pc, scratch / name, progress=False)
            r.files.append(keep_log(scratch / name, out, f"{r.part}-{name}"))
            s = runs[name] = summarize_run(name, scratch / name)
            r.summary.append(f"{name}: {s.steps} steps, {s.train_seconds:.0f}s training ({time.perf_counter() - t0:.0f}s "
                             f"wall), final eval loss {s.final_eval_loss:.3f}")
            r.check(f"{name}: final eval loss at least {q.plateau_margin:g} nats below the unigram plateau "
                    f"({plateau:.2f})", (s.final_eval_loss is not None and s.final_eval_loss <= plateau - q.plateau_margin)
                    if gpu else None, f"{s.final_eval_loss}")
            free_device_memory()
            r.data["runs"] = runs
            save()
        target_t = None
        if len(runs) == 2:
            d, x = runs["dense"], runs["token-drop"]
            target_t = time_to_loss(x.eval_curve, d.final_eval_loss) if d.final_eval_loss is not None else None
            r.data["time_to_dense_final_loss"] = {"dense_final_eval_loss": d.final_eval_loss, "token_drop_seconds": target_t,
                                                  "dense_seconds": d.train_seconds,
                                                  "fraction": None if target_t is None else target_t / d.train_seconds}
            r.summary.append(f"token drop reaches the dense run's final eval loss {d.final_eval_loss:.3f} "
                             + (f"after {target_t:.0f}s of training = {100 * target_t / d.train_seconds:.0f}% of dense's "
                                f"{d.train_seconds:.0f}s" if target_t is not None else "not within its budget"))
        rows = []
        for s in runs.values():
            rows += [[s.name, round(t, 1), v] for t, v in s.eval_curve]
        r.tables = [("eval MLM loss vs training wall-clock", ["run", "training s", "eval loss"], rows)]
        title = "strong dense recipe vs + token drop" if q.strong_recipe else ""
        if runs and _plot(runs, plateau, target_t, out / f"{r.part}.png", title):
            r.files.append(f"{r.part}.png")
        save()
        if q.tasks:
            _finetune_all(cfg, q, runs, scratch, out, budget, r, save, log)


def _finetune_all(cfg: CampaignConfig, q: QualityPart, runs: dict[str, RunSummary], scratch: Path, out: Path,
                  budget: Budget, r: PartResult, save, log: Log) -> None:
    acc: dict[str, dict[str, float]] = {}
    took = 0.0
    for task in q.tasks:
        for name in runs:
            if not budget.allows(max(took, 10.0) + END_RESERVE_S):
                r.skip(f"fine-tuning {name} on {task}", log)
                continue
            fc = from_dict(FinetuneConfig, {}, [f'task="{task}"', f'data="{Path(cfg.glue) / get_task(task).dirname}"',
                                                f'device="{cfg.device}"', "log_every=0", *q.finetune_overrides])
            log(f"  fine-tune {name} on {task}")
            t0 = time.perf_counter()
            m = finetune(fc, scratch / name, scratch / f"ft-{name}-{task}", log=None)
            took = time.perf_counter() - t0
            acc.setdefault(name, {})[task] = float(m["score"])
            free_device_memory()
        r.data["finetune"] = acc
        r.tables = [t for t in r.tables if not t[0].startswith("fine-tuning")]
        r.tables.append(("fine-tuning (dev score, %)", ["run", *q.tasks],
                         [[n, *[acc.get(n, {}).get(t) for t in q.tasks]] for n in runs]))
        save()
    done = sum(len(v) for v in acc.values())
    r.check("fine-tuned every model on every task", done == len(runs) * len(q.tasks) and done > 0,
            f"{done} of {len(runs) * len(q.tasks)}")
    if acc:
        r.summary.append("fine-tuning: " + "; ".join(
            f"{n} " + ", ".join(f"{t} {v:.1f}" for t, v in a.items() if not math.isnan(v)) for n, a in acc.items()))
