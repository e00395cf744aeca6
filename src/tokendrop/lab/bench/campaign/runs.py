"""Pretraining runs inside campaign parts: configs from the carried data, a scratch directory for
checkpoints (never under OUT: bert-base checkpoints are GBs), and what the metrics log says."""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tokendrop.config import Config, load_config
from tokendrop.data import PreparedData
from tokendrop.errors import ConfigError
from tokendrop.finetuning.tasks import get_task
from tokendrop.lab.bench.campaign.config import CampaignConfig
from tokendrop.lab.bench.presets import BenchConfig, bench_config
from tokendrop.runs.files import atomic_write_bytes
from tokendrop.runs.metrics import read_metrics
from tokendrop.train.compiled import resolve_mode


def check_inputs(cfg: CampaignConfig, glue_tasks: tuple[str, ...] = ()) -> None:
    """A clear one-line error when the carried data is not where the config says."""
    if not (Path(cfg.data) / "meta.json").is_file():
        raise ConfigError(
            f"campaign.data: no prepared data at {cfg.data} (run "
            "benchmarks/gpu_campaign_prepare.sh "
            "and carry runs/gpu-carry, or --set data=DIR)"
        )
    for t in glue_tasks:
        d = Path(cfg.glue) / get_task(t).dirname
        if not (d / "train.tsv").is_file():
            raise ConfigError(
                f"campaign.glue: no {d}/train.tsv for task {t} (carry runs/gpu-carry/glue, or "
                "--set glue=DIR)"
            )


def pretrain_config(
    cfg: CampaignConfig,
    base: str,
    overrides: list[str],
    steps: int | str,  # or "unset" (config.STEPS_UNSET): a time budget in extra
    batch_size: int,
    method: str,
    extra: list[str] = (),
) -> Config:
    ov = [
        f"data.path={json.dumps(str(cfg.data))}",
        f"train.steps={steps}",
        f"train.batch_size={batch_size}",
        f'train.device="{cfg.device}"',
        *overrides,
        f'drop.method="{method}"',
        *extra,
    ]
    return load_config(base, ov)


class Scratch:
    """A directory for run directories, removed when the part ends."""

    def __init__(self, prefix: str):
        self.path = Path(tempfile.mkdtemp(prefix=prefix))

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


@dataclass
class RunSummary:
    name: str
    steps: int
    train_seconds: (
        float  # the log's wall_time: training steps only, evaluation and checkpoints excluded
    )
    # median over log records after the first (which holds warm-up / compilation)
    tokens_per_s: float | None
    mfu: float | None
    first_loss: float | None
    final_loss: float | None
    eval0_loss: float | None  # before any step
    final_eval_loss: float | None
    eval_curve: list[tuple[float, float]]  # (wall_time, eval_loss)
    flops: float | None = None  # the run's training FLOPs (the FLOP model's, at its last record)
    eval_flops: list[tuple[float, float]] = field(default_factory=list)  # (flops, eval_loss)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summarize_run(name: str, run_dir: Path) -> RunSummary:
    recs = read_metrics(run_dir)
    train = [r for r in recs if "loss" in r and "tokens_per_s" in r]
    evals = [r for r in recs if "eval_loss" in r]
    end = [r for r in recs if r.get("event") in ("end", "interrupted")]
    steady = train[1:] or train
    flopped = [r for r in recs if "flops" in r]
    return RunSummary(
        name=name,
        steps=train[-1]["step"] if train else 0,
        train_seconds=end[-1]["wall_time"] if end else (train[-1]["wall_time"] if train else 0.0),
        tokens_per_s=_median([r["tokens_per_s"] for r in steady]),
        mfu=_median([r["mfu"] for r in steady if "mfu" in r]),
        first_loss=train[0]["loss"] if train else None,
        final_loss=train[-1]["loss"] if train else None,
        eval0_loss=evals[0]["eval_loss"] if evals and evals[0]["step"] == 0 else None,
        final_eval_loss=evals[-1]["eval_loss"] if evals else None,
        eval_curve=[(float(r["wall_time"]), float(r["eval_loss"])) for r in evals],
        flops=float(max(r["flops"] for r in flopped)) if flopped else None,
        eval_flops=[(float(r["flops"]), float(r["eval_loss"])) for r in evals if "flops" in r],
    )


def trainer_step_ms(run_dir: Path, every: int) -> tuple[float | None, int]:
    """A run's training step from its metrics log: (median ms per step over the log's intervals
    of ``every`` steps after the first, which holds warm-up; micro-batches per step)."""
    recs = read_metrics(run_dir)
    logged = [x for x in recs if "loss" in x and "wall_time" in x]
    per = [
        (b["wall_time"] - a["wall_time"]) / (b["step"] - a["step"])
        for a, b in zip(logged[:-1], logged[1:])
        if b["step"] - a["step"] == every
    ][1:] or [
        (b["wall_time"] - a["wall_time"]) / (b["step"] - a["step"])
        for a, b in zip(logged[:-1], logged[1:])
    ]
    start = next((x for x in recs if x.get("event") == "start"), {})
    return (1000 * statistics.median(per) if per else None), int(start.get("accum", 1))


def keep_log(run_dir: Path, out: Path, name: str) -> str:
    """Copy a run's metrics.jsonl under OUT (small); -> the file name."""
    dst = out / f"{name}-metrics.jsonl"
    atomic_write_bytes(dst, (run_dir / "metrics.jsonl").read_bytes())
    return dst.name


def model_bench_config(
    cfg: CampaignConfig,
    pc: Config,
    vocab_size: int,
    seq_len: int,
    batch_size: int,
    rounds: int,
    reps: int,
    budget_s: float,
) -> BenchConfig:
    """A short bench of exactly the pretraining model and batch (dense and 50% drop, no HF)."""
    m = pc.model
    return bench_config(
        {
            "name": "campaign-model",
            "device": cfg.device,
            "model": "bert-base",
            "num_layers": m.num_layers,
            "hidden_size": m.hidden_size,
            "num_heads": m.num_heads,
            "vocab_size": vocab_size,
            "seq_lens": [seq_len],
            "batch_sizes": [batch_size],
            "rates": [pc.drop.rate if pc.drop.enabled else 0.5],
            "variants": ["drop"],
            "hf": False,
            "memory": False,
            "precision": "bf16" if cfg.device == "cuda" else "fp32",
            "compile": resolve_mode(pc.train.compile, torch.device(cfg.device)) != "off",
            "warmup": 3,
            "rounds": rounds,
            "reps": reps,
            "time_budget_s": max(1.0, budget_s),
            "threads": pc.train.threads,
        }
    )


def data_info(path: str) -> dict[str, Any]:
    d = PreparedData.open(path)
    return {
        "vocab_size": d.vocab_size,
        "seq_len": d.seq_len,
        "train_sequences": d.num_sequences("train"),
        "eval_sequences": d.num_sequences("eval"),
    }
