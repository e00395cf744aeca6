"""``run_bench(cfg) -> BenchResult``: build every setting, warm up, time in interleaved rounds,
measure memory/kernels on extra untimed steps, summarise."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

from tokendrop.config import THREADS_AUTO
from tokendrop.errors import ConfigError
from tokendrop.lab.bench.environment import environment
from tokendrop.lab.bench.presets import BenchConfig
from tokendrop.lab.bench.records import BenchResult
from tokendrop.lab.bench.steps import build_runners
from tokendrop.lab.bench.summary import summarise
from tokendrop.lab.bench.timing import measure_extras, run_rounds, step_census, warm_up
from tokendrop.lab.machine import loadavg
from tokendrop.lab.sizes import BUDGET_NONE
from tokendrop.train.runtime import resolve_device


def bench_device(cfg: BenchConfig) -> torch.device:
    # this process's GPU
    gpu = torch.cuda.current_device() if cfg.device == "cuda" and torch.cuda.is_available() else 0
    return resolve_device(cfg.device, gpu, "bench.device", ConfigError)


def run_bench(
    cfg: BenchConfig,
    *,
    profile_dir: str | os.PathLike | None = None,
    log: Callable[[str], None] | None = None,
    command: str = "",
) -> BenchResult:
    """Run one benchmark.  Leaves the process as it found it (threads, TF32 flags): the test suite
    and the GPU campaign call it in-process."""
    cfg.validate()
    dev = bench_device(cfg)
    threads_before = torch.get_num_threads()
    tf32_before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    if cfg.threads != THREADS_AUTO:
        torch.set_num_threads(cfg.threads)
    try:
        return _run(
            cfg, dev, Path(profile_dir) if profile_dir else None, log or (lambda s: None), command
        )
    finally:
        torch.set_num_threads(threads_before)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32_before


def _run(
    cfg: BenchConfig,
    dev: torch.device,
    profile_dir: Path | None,
    say: Callable[[str], None],
    command: str,
) -> BenchResult:
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    t_start = time.perf_counter()
    deadline = None if cfg.time_budget_s == BUDGET_NONE else t_start + float(cfg.time_budget_s)
    env = environment(dev)
    runners, info = build_runners(cfg, dev)
    say(
        f"bench {cfg.name}: {len(runners)} settings on {env.where} ({torch.get_num_threads()} "
        f"threads), {info.model['preset']}, "
        f"{cfg.precision}{', compiled' if cfg.compile else ''}, warm-up {cfg.warmup}, {cfg.rounds} "
        f"rounds x {cfg.reps}"
    )
    warm_up(runners, cfg, dev)
    say(f"  warm-up done ({time.perf_counter() - t_start:.0f}s)")
    rounds = run_rounds(runners, cfg, dev, say, t_start, deadline)
    if cfg.memory:
        gc.collect()  # once: with transformers imported a collection costs ~0.5 s
        for r in runners:
            r.extras = measure_extras(r, dev, cfg, profile_dir)
    if cfg.sync_check:
        for r in runners:
            r.census = step_census(r.step, dev)
    env.loadavg_end = loadavg()
    res = summarise(cfg, runners, info, env, dev)
    res.rounds_done = rounds
    res.wall_s = time.perf_counter() - t_start
    res.command = command or f"tokendrop bench --device {cfg.device} --preset {cfg.name}"
    return res
