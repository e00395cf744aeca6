"""Parts ``quality`` and ``strong``: time to quality from scratch, sized for one call.

``quality``: a small BERT (the preset's ``quality.overrides``: 8 layers x 512 on the GPU) is
pretrained dense and with token dropping for the *same training wall-clock* on the carried mixed
corpus -- each run's step count comes from a short bench of both steps, and each has its own
warm-up/decay schedule over its steps -- then both are fine-tuned on the SST-2- and QNLI-format
stand-ins.  ``strong`` (the [strong] table): the same pair on top of the strongest dense recipe
(``strong.strong_recipe``: study-strong's WSD with a full decay + batch warm-up + masking 30% ->
15%; the MLM head on the masked slots only, as every tokendrop model), a 6 x 384 BERT that leaves
the unigram plateau within its minutes on one GPU, no fine-tuning.  Reported: eval MLM loss vs
training wall-clock for both, the unigram plateau they must get well below, the time token
dropping needs to reach the dense run's final loss, downstream accuracy (quality).
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
    """First training time at which the eval-loss curve reaches ``target`` (linear between
    points)."""
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


def _calibrate(
    cfg: CampaignConfig, q: QualityPart, info: dict, budget: Budget, log: Log
) -> Calibration:
    base = pretrain_config(cfg, q.config, q.overrides + q.recipe(), 10, q.batch_size, "cumulative")
    bc = model_bench_config(
        cfg, base, info["vocab_size"], info["seq_len"], q.batch_size, q.calibrate_rounds, 3, 60.0
    )
    log(f"  calibration: step times of the {base.model.num_layers}x{base.model.hidden_size} model")
    res = run_bench(bc, log=log, command="tokendrop bench --campaign quality/strong (calibration)")
    free_device_memory()
    t = info["seq_len"]
    dense = res.setting(f"T{t}/dense").time_s.median
    drop = res.setting(f"T{t}/drop-{bc.rates[0]:g}").time_s.median
    runs = len(q.arms) * len(q.seeds)
    left = budget.left() - q.finetune_reserve_s - END_RESERVE_S
    per = min(q.train_budget_s, left / (runs * RUN_OVERHEAD))
    per = max(per, 1.0)
    return Calibration(
        dense,
        drop,
        per,
        max(2, min(q.max_steps, int(per / dense))),
        max(2, min(q.max_steps, int(per / drop))),
    )


def _plot(
    runs: dict[str, RunSummary], plateau: float, target_t: float | None, path: Path, title: str = ""
) -> bool:
    try:
        plt = pyplot()
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for s in runs.values():
        ax.plot(
            [t for t, _ in s.eval_curve],
            [v for _, v in s.eval_curve],
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
    ax.set_xlabel("training wall-clock (s; evaluation excluded)")
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
    if q.recipe():
        r.data["recipe"] = q.recipe()
        r.summary.append(f"recipe of every run: {' '.join(q.recipe())}")
    gpu = cfg.device == "cuda" and not cfg.dry_run
    with Scratch(f"td-campaign-{r.part}-") as scratch:
        if q.rate0_steps:
            _rate0_check(cfg, q, scratch, r, log)
            save()
        if q.agreement_steps:
            _agreement_check(cfg, q, scratch, r, log)
            save()
        cal = _calibrate(cfg, q, info, budget, log)
        r.data["calibration"] = cal
        r.summary.append(
            f"calibration: dense {1e3 * cal.dense_step_s:.1f} ms/step, drop "
            f"{1e3 * cal.drop_step_s:.1f} ms/step -> {cal.per_run_budget_s:.0f}s "
            f"each: {cal.dense_steps} vs {cal.drop_steps} steps"
        )
        save()
        runs: dict[str, RunSummary] = {}
        for seed in q.seeds:  # seed by seed: a part cut short keeps every arm of its finished seeds
            for arm in q.arms:
                name = q.run_name(arm, seed)
                if runs and not budget.allows(cal.per_run_budget_s * RUN_OVERHEAD + END_RESERVE_S):
                    r.skip(f"{name} pretraining", log)
                    continue
                runs[name] = _arm_run(cfg, q, cal, scratch, out, r, arm, seed, log)
                s = runs[name]
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
        target_t = _time_to_dense(q, runs, r)
        _tables(r, runs)
        title = "strong dense recipe vs + token drop" if q.strong_recipe else ""
        if runs and _plot(runs, plateau, target_t, out / f"{r.part}.png", title):
            r.files.append(f"{r.part}.png")
        save()
        if q.tasks:
            _finetune_all(cfg, q, runs, scratch, out, budget, r, save, log)


def _arm_run(
    cfg: CampaignConfig,
    q: QualityPart,
    cal: Calibration,
    scratch: Path,
    out: Path,
    r: PartResult,
    arm: str,
    seed: int,
    log: Log,
) -> RunSummary:
    """One pretraining run of ``arm`` with ``seed``; its metrics log kept under OUT and, for a
    dropping run with ``q.diagnostics``, its selection trace in ``r.data["selection"]``."""
    name = q.run_name(arm, seed)
    method, arm_overrides = QUALITY_ARMS[arm]
    drops = METHODS[method].drops
    steps = cal.drop_steps if drops else cal.dense_steps
    rate0 = "drop.rate=0.0" in arm_overrides
    trace = q.diagnostics if drops and not rate0 else 0
    # the cadences from the calibrated step count; the run's length from q.run_length
    extra = [
        f"train.eval_every={max(1, steps // q.evals)}",
        f"train.log_every={max(1, steps // 50)}",
        f"train.ckpt_every={max(1, steps // trace) if trace else steps}",
        f"train.keep_checkpoints={trace + 1 if trace else 1}",
        f"train.warmup_steps={max(1, round(0.06 * steps))}",
        f"train.seed={seed}",
        *arm_overrides,
    ]
    timed = q.run_length == "time"
    if timed:
        extra += [f"train.time_budget='{cal.per_run_budget_s:.1f}s'", "train.budget_clock='wall'"]
    length_steps = STEPS_UNSET if timed else steps
    pc = pretrain_config(
        cfg, q.config, q.overrides + q.recipe(), length_steps, q.batch_size, method, extra
    )
    length = (
        f"{cal.per_run_budget_s:.0f}s of training (~{steps} steps)" if timed else f"{steps} steps"
    )
    log(
        f"  pretrain {name}: {length} ({pc.model.num_layers}x{pc.model.hidden_size}, "
        f"batch {q.batch_size})"
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
        shutil.rmtree(scratch / name / "checkpoints", ignore_errors=True)
    return s


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


def _time_to_dense(q: QualityPart, runs: dict[str, RunSummary], r: PartResult) -> float | None:
    """Every run's training time to the dense runs' mean final eval loss (r.data); -> the first
    token-drop run's (the plot's marker)."""
    dense = [runs[q.run_name("dense", s)] for s in q.seeds if q.run_name("dense", s) in runs]
    finals = [d.final_eval_loss for d in dense if d.final_eval_loss is not None]
    if not finals or len(runs) < 2:
        return None
    target = sum(finals) / len(finals)
    times = {n: time_to_loss(s.eval_curve, target) for n, s in runs.items()}
    seconds = {n: s.train_seconds for n, s in runs.items()}
    r.data["time_to_dense_final_loss"] = {
        "dense_final_eval_loss": target,
        "dense_final_eval_losses": finals,
        "seconds": times,
        "train_seconds": seconds,
    }
    drops = [n for n in runs if n.startswith("token-drop") and not n.startswith("token-drop-rate0")]
    for n in drops:
        t = times[n]
        r.summary.append(
            f"{n} reaches the dense runs' mean final eval loss {target:.3f} "
            + (
                f"after {t:.0f}s of training = {100 * t / seconds[n]:.0f}% of its {seconds[n]:.0f}s"
                if t is not None
                else "not within its budget"
            )
        )
    return times[drops[0]] if drops else None


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
