"""The trainer's step on CPU under each ``train.compile`` mode, side by side in one process.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/compiled_cpu.py --processes 5 --rounds 9
    # ~5 min on 2 loaded cores with inductor's on-disk cache warm, ~10 min more without

``MLMStep`` (selection, forward, loss, backward, clip, AdamW, importance update) of a small BERT
(4 layers x 128 wide, 2 heads, FFN 512, V = 30,522), fp32, one thread, T = 128, B = 8 synthetic
packed rows, dense and at 50% token dropping (cumulative), under ``train.compile`` = off (eager,
fused AdamW), forward and step (inductor; on CPU the fused AdamW stays eager: ``MLMStep``).  Six
arms, each with its own model and optimizer, compiled and warmed up first, and two more: AdamW's
update alone of the same model, ATen's fused kernel against ``CompiledAdamW`` (inductor, what
``step`` compiles on CUDA); then ``--rounds`` rounds, each timing ``--reps`` steps (updates) of
every arm in an order rotated by one arm per round (drift and load changes fall on every arm
alike).  The time is the process's CPU time (``time.process_time``: the other engineers' processes
on a shared machine do not count, the waiting for a core does not either), the median over rounds
per step.  ``--processes`` repeats all of it in that many fresh processes, one after another (one
process's medians move by up to 10% from another's: load, and where its tensors landed), and
reports per arm the median over processes of its time / eager's in the same process, with the
range.  Writes ``benchmarks/results/compiled_cpu.json`` and ``.md`` with the command, the machine
and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

from tokendrop.config import Config, ModelConfig, TrainConfig
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.plan import DropPlan, DropStep
from tokendrop.lab.bench.workload import synthetic_batch
from tokendrop.lab.machine import cpu_model, loadavg
from tokendrop.lab.sizes import DOCUMENT_ROW
from tokendrop.models.families import build_model
from tokendrop.runs.files import atomic_write_text
from tokendrop.train.compiled import CompiledAdamW, adamw_update, compiled_shapes
from tokendrop.train.runtime import adamw
from tokendrop.train.step import MLMStep

OUT = Path(__file__).resolve().parent / "results"
MODES = ("off", "forward", "step")
UPDATES = {"fused AdamW": False, "CompiledAdamW": True}  # the update alone: compiled?


MC = ModelConfig(
    family="bert",
    num_layers=4,
    hidden_size=128,
    num_heads=2,
    intermediate_size=512,
    hidden_dropout=0.0,
    attention_dropout=0.0,
)
DROP = DropConfig(method="cumulative", rate=0.5)


def _arm_model() -> torch.nn.Module:
    return build_model(MC, DROP).train()


def _arm(mode: str, dropping: bool, t: int, b: int):
    cfg = Config(
        model=MC, drop=DROP, train=TrainConfig(steps=10**6, batch_size=b, lr=1e-4, warmup_steps=0)
    ).validate()
    torch.manual_seed(0)
    model = _arm_model()
    plan = DropPlan.for_model(DROP, MC, t, SPECIAL_IDS, seed=0, total_steps=cfg.train.fixed_steps)
    opt = adamw(model, 1e-4, 0.01, (0.9, 0.999), 1e-6, fused=True)
    step = MLMStep(
        model, plan, opt, cfg.train.grad_clip, None, use_attention_mask=False, compile=mode,
        shapes=compiled_shapes(plan, [t]),
    )  # fmt: skip
    cpu = torch.device("cpu")
    mb = synthetic_batch(b, t, MC.vocab_size, cpu, document_tokens=DOCUMENT_ROW)
    state = {"i": 0}

    def run(n: int) -> None:
        for _ in range(n):
            i = state["i"]
            step([mb], 1e-4, plan.at(i, t) if dropping else DropStep.dense(i, t))
            state["i"] += 1

    return run


def _update_arm(compiled: bool):
    """AdamW's update alone of the step's model (random gradients): ATen's fused kernel with its
    skip flag (what ``step`` keeps on CPU), or :class:`CompiledAdamW` (inductor; what ``step``
    compiles on CUDA)."""
    torch.manual_seed(0)
    model = _arm_model()
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    opt = adamw(model, 1e-4, 0.01, (0.9, 0.999), 1e-6, fused=True)
    finite = torch.tensor(True)
    update = CompiledAdamW(opt) if compiled else None

    def run(n: int) -> None:
        for _ in range(n):
            adamw_update(opt, update, 1e-4, finite)

    return run


def _measure(a: argparse.Namespace) -> dict[tuple[str, str], dict]:
    """One process's measurement: per arm, its warm-up CPU seconds and per-round ms per step (the
    AdamW update arms: per update)."""
    torch.set_num_threads(1)
    torch._dynamo.config.recompile_limit = 64  # six arms' graphs in one process
    arms = {}
    for mode in MODES:
        for kind in ("dense", "drop"):
            print(f"compiling / warming up {mode} {kind}", flush=True)
            run = _arm(mode, kind == "drop", a.seq_len, a.batch)
            c0 = time.process_time()
            run(a.warmup)
            arms[(mode, kind)] = {"run": run, "warmup_cpu_s": time.process_time() - c0, "ms": []}
    for name, compiled in UPDATES.items():
        run = _update_arm(compiled)
        c0 = time.process_time()
        run(a.warmup)
        arms[(name, "update")] = {"run": run, "warmup_cpu_s": time.process_time() - c0, "ms": []}
    keys = list(arms)
    for r in range(a.rounds):
        for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
            c0 = time.process_time()
            arms[k]["run"](a.reps)
            arms[k]["ms"].append((time.process_time() - c0) * 1000 / a.reps)
        print(f"round {r + 1}/{a.rounds}", flush=True)
    return {k: {"warmup_cpu_s": v["warmup_cpu_s"], "ms": v["ms"]} for k, v in arms.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)  # one process's measurement
    a = ap.parse_args(argv)
    if a.child_out is not None:
        got = _measure(a)
        a.child_out.write_text(json.dumps([[m, k, v] for (m, k), v in got.items()]))
        return
    torch.set_num_threads(1)
    load0, t_start = loadavg(), datetime.now(UTC)
    procs: list[dict[tuple[str, str], dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.processes):
            print(f"process {i + 1}/{a.processes}", flush=True)
            f = Path(tmp) / f"p{i}.json"
            child = [sys.executable, __file__, "--child-out", str(f)]
            for opt in ("rounds", "reps", "warmup", "seq_len", "batch"):
                child += [f"--{opt.replace('_', '-')}", str(getattr(a, opt))]
            subprocess.run(child, check=True)
            procs.append({(m, k): v for m, k, v in json.loads(f.read_text())})
    load1 = loadavg()
    rows = []
    for mode, kind in procs[0]:
        ms = [x for p in procs for x in p[(mode, kind)]["ms"]]
        base = (next(iter(UPDATES)), kind) if kind == "update" else ("off", kind)
        ratios = [
            statistics.median(p[(mode, kind)]["ms"]) / statistics.median(p[base]["ms"])
            for p in procs
        ]
        rows.append(
            {
                "mode": mode,
                "step": kind,
                "cpu_ms_median": statistics.median(ms),
                "cpu_ms_min": min(ms),
                "cpu_ms_max": max(ms),
                "vs_eager": statistics.median(ratios),
                "vs_eager_per_process": ratios,
                "warmup_cpu_s": max(p[(mode, kind)]["warmup_cpu_s"] for p in procs),
                "rounds_ms": [p[(mode, kind)]["ms"] for p in procs],
            }
        )
    cmd = "OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/compiled_cpu.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    env = {
        "machine": cpu_model() or platform.machine(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "started_utc": t_start.isoformat(timespec="seconds"),
        "ended_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "loadavg_start": load0,
        "loadavg_end": load1,
    }
    cfg = {
        "model": "bert 4x128, 2 heads, FFN 512, V=30522",
        "seq_len": a.seq_len,
        "batch": a.batch,
        "precision": "fp32",
        "drop": "cumulative, rate 0.5",
        "processes": a.processes,
        "rounds": a.rounds,
        "reps": a.reps,
        "warmup": a.warmup,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        a.out / "compiled_cpu.json",
        json.dumps({"command": cmd.strip(), "env": env, "config": cfg, "rows": rows}, indent=1),
    )
    lines = [
        "# train.compile on CPU: the trainer's step per mode, side by side",
        "",
        f"Command: `{cmd.strip()}` (benchmarks/compiled_cpu.py says how it measures).",
        "",
        f"Machine: {env['machine']}, {env['cpus']} cores, torch {env['torch']}, 1 thread; "
        f"{env['started_utc']} to {env['ended_utc']}; load average (1, 5, 15 min) "
        f"{load0} at the start, {load1} at the end.",
        "",
        f"Step: {cfg['model']}, fp32, T={a.seq_len}, B={a.batch}, 50% drop = cumulative; process "
        f"CPU time per step; {a.processes} process(es) one after another, each timing "
        f"{a.rounds} rounds of {a.reps} steps (arms rotated per round) after {a.warmup} warm-up "
        "steps (compilation). CPU ms: median and range over all rounds of all processes; / eager: "
        "the median over processes of the arm's median / eager's in the same process, with the "
        "range over processes; warm-up: the largest over processes (a later process reads "
        "inductor's on-disk cache).",
        "",
        "| mode | step | CPU ms / step (median) | min - max | / eager | / eager per process "
        "(min - max) | warm-up CPU s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for x in rows:
        if x["step"] == "update":
            continue
        lines.append(
            f"| {x['mode']} | {x['step']} | {x['cpu_ms_median']:.1f} | "
            f"{x['cpu_ms_min']:.1f} - {x['cpu_ms_max']:.1f} | {x['vs_eager']:.3f} | "
            f"{min(x['vs_eager_per_process']):.3f} - {max(x['vs_eager_per_process']):.3f} | "
            f"{x['warmup_cpu_s']:.0f} |"
        )
    lines += [
        "",
        "AdamW's update alone, of the same model's parameters (random gradients), side by side in "
        "the same rounds: ATen's fused kernel with its skip flag (what `step` keeps on CPU) and "
        "`CompiledAdamW` (inductor: what `step` compiles on CUDA). / fused: as / eager above.",
        "",
        "| update | CPU ms / update (median) | min - max | / fused | / fused per process "
        "(min - max) | warm-up CPU s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for x in rows:
        if x["step"] != "update":
            continue
        lines.append(
            f"| {x['mode']} | {x['cpu_ms_median']:.2f} | "
            f"{x['cpu_ms_min']:.2f} - {x['cpu_ms_max']:.2f} | {x['vs_eager']:.3f} | "
            f"{min(x['vs_eager_per_process']):.3f} - {max(x['vs_eager_per_process']):.3f} | "
            f"{x['warmup_cpu_s']:.0f} |"
        )
    atomic_write_text(a.out / "compiled_cpu.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
