"""Part ``pretrain``: ``bert-base-128`` for a few hundred steps, dense and token drop, on the data
prepared on CPU and carried.  Checks: the loss falls; the log's tokens/s and MFU match a bench of
the same model and batch; checkpoint + resume continue exactly where an uninterrupted run goes;
``torchrun --nproc-per-node 1`` runs with NCCL (gloo on CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tokendrop.config import to_dict
from tokendrop.dropping.methods import PAPER_METHOD
from tokendrop.lab.bench.campaign.common import Budget, Log, PartResult, free_device_memory
from tokendrop.lab.bench.campaign.config import CampaignConfig
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
from tokendrop.runs.checkpoint import is_sharded, latest, read_meta
from tokendrop.runs.files import atomic_write_text
from tokendrop.runs.metrics import read_metrics
from tokendrop.train.report import compare_runs
from tokendrop.train.trainer import pretrain

RESERVE_S = 20.0


def run_pretrain_part(
    cfg: CampaignConfig, out: Path, budget: Budget, r: PartResult, save, log: Log
) -> None:
    check_inputs(cfg)
    p = cfg.pretrain
    info = data_info(cfg.data)
    r.data["data"] = info
    gpu = cfg.device == "cuda" and not cfg.dry_run
    with Scratch("td-campaign-pretrain-") as scratch:
        runs: dict[str, RunSummary] = {}
        took = 0.0
        for name, method in (("dense", "none"), ("token-drop", PAPER_METHOD)):
            if runs and not budget.allows(took + RESERVE_S):
                r.skip(f"{name} run ({p.steps} steps; the dense run took {took:.0f}s)", log)
                continue
            pc = pretrain_config(cfg, p.config, p.overrides, p.steps, p.batch_size, method)
            log(f"  pretrain {name}: {p.config}, {p.steps} steps, batch {p.batch_size}")
            t0 = time.perf_counter()
            pretrain(pc, scratch / name, progress=False)
            took = time.perf_counter() - t0
            r.files.append(keep_log(scratch / name, out, f"pretrain-{name}"))
            s = runs[name] = summarize_run(name, scratch / name)
            r.data.setdefault("runs", {})[name] = s
            r.check(
                f"{name}: loss falls (eval loss at least {p.min_loss_drop:g} below step 0's)",
                s.final_eval_loss is not None
                and s.eval0_loss is not None
                and s.final_eval_loss <= s.eval0_loss - p.min_loss_drop,
                f"{s.eval0_loss} -> {s.final_eval_loss}",
            )
            r.summary.append(
                f"{name}: {s.steps} steps in {took:.0f}s ({s.train_seconds:.0f}s training), "
                f"{(s.tokens_per_s or 0):.0f} tok/s"
                + (f", MFU {100 * s.mfu:.1f}%" if s.mfu else "")
                + f", eval loss {s.eval0_loss:.3f} -> {s.final_eval_loss:.3f}"
            )
            free_device_memory()
            save()
        if len(runs) == 2:
            rep, _ = compare_runs(
                {k: scratch / k for k in runs},
                out / "pretrain-compare",
                f"{p.config}: dense vs token drop",
            )
            r.files += [
                f"pretrain-compare/{f.name}" for f in sorted((out / "pretrain-compare").iterdir())
            ]
        _table(r, runs)
        save()
        if runs and budget.allows(RESERVE_S + 30):
            _bench_compare(cfg, info, runs, budget, r, gpu, log)
            save()
        else:
            r.skip("bench comparison", log)
        if budget.allows(RESERVE_S + 30):
            _resume_check(cfg, scratch, budget, r, log)
            save()
        else:
            r.skip("checkpoint/resume check", log)
        if budget.allows(RESERVE_S + 30):
            _torchrun_check(cfg, scratch, out, budget, r, log)
        else:
            r.skip("torchrun check", log)


def _table(r: PartResult, runs: dict[str, RunSummary]) -> None:
    r.tables = [
        (
            "pretraining runs (from metrics.jsonl; medians after the first log interval)",
            [
                "run",
                "steps",
                "training s",
                "tokens/s",
                "MFU %",
                "first loss",
                "final loss",
                "eval loss step 0",
                "final eval loss",
            ],
            [
                [
                    s.name,
                    s.steps,
                    s.train_seconds,
                    s.tokens_per_s,
                    None if s.mfu is None else 100 * s.mfu,
                    s.first_loss,
                    s.final_loss,
                    s.eval0_loss,
                    s.final_eval_loss,
                ]
                for s in runs.values()
            ],
        )
    ]


def _bench_compare(
    cfg: CampaignConfig,
    info: dict,
    runs: dict[str, RunSummary],
    budget: Budget,
    r: PartResult,
    gpu: bool,
    log: Log,
) -> None:
    p = cfg.pretrain
    pc = pretrain_config(cfg, p.config, p.overrides, p.steps, p.batch_size, "cumulative")
    bc = model_bench_config(
        cfg,
        pc,
        info["vocab_size"],
        info["seq_len"],
        p.batch_size,
        p.bench_rounds,
        p.bench_reps,
        budget.left() - RESERVE_S - 60,
    )
    log("  bench of the same model and batch (log vs bench)")
    res = run_bench(bc, log=log, command="tokendrop bench --campaign pretrain (log vs bench)")
    free_device_memory()
    t = info["seq_len"]
    pairs = [("dense", f"T{t}/dense"), ("token-drop", f"T{t}/drop-{bc.rates[0]:g}")]
    rows = []
    for run_name, setting in pairs:
        s = runs.get(run_name)
        b = res.setting(setting)
        if s is None or s.tokens_per_s is None:
            continue
        ratio = s.tokens_per_s / b.tokens_per_s
        rows.append(
            [
                run_name,
                s.tokens_per_s,
                b.tokens_per_s,
                ratio,
                None if s.mfu is None else 100 * s.mfu,
                None if b.mfu is None else 100 * b.mfu,
            ]
        )
        r.check(
            f"{run_name}: log tokens/s within 20% of the bench",
            (0.8 <= ratio <= 1.2) if gpu else None,
            f"log/bench {ratio:.3f}",
        )
        if gpu:
            r.check(f"{run_name}: MFU logged", s.mfu is not None, f"{s.mfu}")
    r.data["bench_compare"] = {"rows": rows, "headline": res.headline}
    r.tables.append(
        (
            "the log vs a bench of the same step (tokens/s; the log includes data "
            "loading and logging)",
            ["run", "log tokens/s", "bench tokens/s", "log / bench", "log MFU %", "bench MFU %"],
            rows,
        )
    )


def _resume_check(
    cfg: CampaignConfig, scratch: Path, budget: Budget, r: PartResult, log: Log
) -> None:
    p = cfg.pretrain
    n = p.resume_steps
    extra = [
        f"train.eval_every={n}",
        "train.log_every=1",
        "train.eval_batches=2",
        f"train.ckpt_every={10 * n}",
    ]
    pc = pretrain_config(cfg, p.config, p.overrides, n, p.batch_size, "cumulative", extra)
    log(f"  checkpoint + resume: {n} steps straight vs paused at {n // 2} and resumed")
    straight = pretrain(pc, scratch / "straight", progress=False)
    paused = pretrain(
        pretrain_config(cfg, p.config, p.overrides, n, p.batch_size, "cumulative", extra),
        scratch / "resumed",
        progress=False,
        stop_at=n // 2,
    )
    resumed = pretrain(
        pretrain_config(cfg, p.config, p.overrides, n, p.batch_size, "cumulative", extra),
        scratch / "resumed",
        resume=True,
        progress=False,
    )
    free_device_memory()
    a = {h["step"]: h["loss"] for h in straight.history if "loss" in h}
    b = {h["step"]: h["loss"] for h in resumed.history if "loss" in h}
    common = sorted(set(a) & set(b))
    diff = max((abs(a[s] - b[s]) for s in common), default=float("nan"))
    tol = 2e-2 * abs(a[n]) if cfg.device == "cuda" else 1e-4
    r.data["resume"] = {
        "steps": n,
        "paused_at": paused.steps,
        "paused_interrupted": paused.interrupted,
        "resumed_steps": resumed.steps,
        "compared_steps": common,
        "max_abs_loss_diff": diff,
        "tolerance": tol,
    }
    r.check(
        "checkpoint + resume: paused run resumes to the end",
        paused.interrupted
        and paused.steps == n // 2
        and resumed.steps == n
        and not resumed.interrupted,
        f"paused at {paused.steps}, resumed to {resumed.steps}",
    )
    r.check(
        f"resumed losses equal the uninterrupted run's (steps {n // 2 + 1}-{n}, "
        f"tolerance {tol:.2g})",
        bool(common) and diff <= tol,
        f"max |diff| {diff:.3g} over {len(common)} steps",
    )


def _torchrun_check(
    cfg: CampaignConfig, scratch: Path, out: Path, budget: Budget, r: PartResult, log: Log
) -> None:
    """``torchrun --nproc-per-node 1`` twice, the same run with ``train.parallel`` = ddp and = fsdp
    (FSDP2 with its bf16 policy on CUDA, a sharded checkpoint): both must train; their losses are
    recorded side by side (fp32 on CPU: equal to 1e-5; bf16 on CUDA: the policies round
    differently)."""
    p = cfg.pretrain
    want = "nccl" if cfg.device == "cuda" else "gloo"
    results: dict[str, dict] = {}
    for parallel in ("ddp", "fsdp"):
        if results and not budget.allows(RESERVE_S + 30):
            r.skip(f"torchrun {parallel} run", log)
            break
        pc = pretrain_config(
            cfg,
            p.config,
            p.overrides,
            p.torchrun_steps,
            p.batch_size,
            "cumulative",
            [
                f"train.eval_every={p.torchrun_steps}",
                "train.eval_batches=2",
                "train.log_every=1",
                f"train.ckpt_every={p.torchrun_steps}",
                f'train.parallel="{parallel}"',
            ],
        )
        run = scratch / f"torchrun-{parallel}"
        job, result = (
            scratch / f"torchrun-{parallel}-job.json",
            scratch / f"torchrun-{parallel}-result.json",
        )
        job.write_text(
            json.dumps(
                {
                    "config": to_dict(pc),
                    "run_dir": str(run),
                    "device": cfg.device,
                    "result": str(result),
                }
            )
        )
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "1",
            "-m",
            "tokendrop.lab.bench.campaign.torchrun_worker",
            str(job),
        ]
        timeout = max(20.0, min(p.torchrun_timeout_s, budget.left() - RESERVE_S))
        log(
            f"  torchrun --nproc-per-node 1, train.parallel={parallel} ({p.torchrun_steps} steps, "
            f"timeout {timeout:.0f}s)"
        )
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-3000:]
        except subprocess.TimeoutExpired as e:
            rc, tail = None, f"timed out after {timeout:.0f}s: {str(e.stderr or '')[-2000:]}"
        name = "pretrain-torchrun.log" if parallel == "ddp" else f"pretrain-torchrun-{parallel}.log"
        atomic_write_text(out / name, tail)
        r.files.append(name)
        res = json.loads(result.read_text()) if result.is_file() else {}
        losses = (
            [x["loss"] for x in read_metrics(run) if "loss" in x]
            if (run / "metrics.jsonl").is_file()
            else []
        )
        res = results[parallel] = {
            "command": " ".join(cmd[1:]),
            "returncode": rc,
            "losses": losses,
            **res,
        }
        what = "" if parallel == "ddp" else ", train.parallel=fsdp (sharded checkpoint)"
        r.check(
            f"torchrun --nproc-per-node 1 runs pretraining with {want}{what}",
            rc == 0
            and res.get("backend") == want
            and res.get("all_reduce_ok") is True
            and res.get("steps") == p.torchrun_steps,
            f"exit {rc}, backend {res.get('backend')}, all_reduce {res.get('all_reduce_ok')}, "
            f"steps {res.get('steps')}",
        )
    r.data["torchrun"] = results.get("ddp", {})
    if "fsdp" in results:
        r.data["torchrun_fsdp"] = results["fsdp"]
        a, b = results["ddp"]["losses"], results["fsdp"]["losses"]
        diff = (
            max((abs(x - y) for x, y in zip(a, b)), default=None)
            if len(a) == len(b) and a
            else None
        )
        r.data["torchrun_fsdp"]["max_abs_loss_diff_vs_ddp"] = diff
        last = latest(scratch / "torchrun-fsdp") if (scratch / "torchrun-fsdp").is_dir() else None
        r.check(
            "the FSDP run wrote a sharded checkpoint",
            last is not None and is_sharded(read_meta(last)),
            str(last),
        )
        r.summary.append(
            f"torchrun 1 rank: DDP vs FSDP losses differ by at most {diff} over {len(a)} steps"
            if diff is not None
            else "torchrun 1 rank: DDP and FSDP losses not comparable"
        )
