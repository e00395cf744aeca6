"""Part ``step``: the training step measured eager, compiled and graph-captured; the campaign's
first priority.

The trainer's own step (``tokendrop.train.step.MLMStep``: selection, forward, loss, backward, clip,
fused AdamW, importance update) under each ``train.compile`` mode (``step.modes``: eager ``off``,
compiled ``step``, CUDA-graph-captured ``graphs``), dense and at ``step.rate`` token dropping, for
each (family, T, tokens per step) of ``step.settings`` in order: ms per step (median of rounds of
``reps`` steps), MFU against the GPU's bf16 peak (``tokendrop.dropping.flops``), the drop step's
speed-up next to its FLOP bound, and the GPU-busy fraction (GPU kernel time over wall time of
``reps`` profiled steps: what the host leaves idle).  One micro-batch per step (the trainer's
default when the batch fits).  Rows run in the order given, modes inside a row in the order given;
the part's JSON / Markdown are rewritten after every row, so a cut-off loses only the row under way.
A row the budget cannot start is named as skipped.

After the first setting: the trainer's step against this bench's at the same micro-batch (the
H100's from-scratch runs took 1.5-1.7x the bench's step).  Per mode of ``step.trainer_modes``,
dense and at ``step.rate`` dropping: a short real ``pretrain`` of ``step.trainer_config`` on the
carried data (its T) at ``step.trainer_batch`` sequences per step (one micro-batch when it fits),
ms per step from the metrics log's training clock (the intervals after the first, which holds the
compilation; logging every ``step.trainer_log_every`` steps, as a run would), beside the bench's
step of the resolved model, T, batch and precision; the ratio is written as each pair finishes.

Last, after every setting, AdamW's update alone, of the first setting's model (random gradients):
ATen's fused kernel with its skip flag (the eager step's update) against ``CompiledAdamW`` under
each compiled mode of ``step.modes`` (what ``step`` / ``graphs`` compile on CUDA), ms per update
and the ratio to the fused kernel.  On CPU inductor's update takes about twice the fused kernel's
time, so the compiled step keeps the fused AdamW there (``tokendrop.train.step``); this says which
is faster on the GPU.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from tokendrop.config import Config, ModelConfig, TrainConfig
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.flops import gpu_peak_flops, step_flops
from tokendrop.dropping.plan import DropPlan, DropStep
from tokendrop.lab.bench.campaign.common import Budget, Log, PartResult, free_device_memory
from tokendrop.lab.bench.campaign.config import CampaignConfig
from tokendrop.lab.bench.campaign.runs import Scratch, data_info, pretrain_config, trainer_step_ms
from tokendrop.lab.bench.profiling import kineto_events
from tokendrop.lab.bench.workload import synthetic_batch
from tokendrop.lab.machine import loadavg
from tokendrop.lab.sizes import DOCUMENT_ROW
from tokendrop.models.families import build_model
from tokendrop.train.compiled import CompiledAdamW, adamw_update, compiled_shapes
from tokendrop.train.resume import load_run_config
from tokendrop.train.runtime import adamw, autocast_dtype
from tokendrop.train.step import MLMStep
from tokendrop.train.trainer import pretrain

HEADER = [
    "family",
    "T",
    "tokens/step",
    "B",
    "mode",
    "dense ms",
    "drop ms",
    "speed-up",
    "FLOP bound",
    "% of bound",
    "dense MFU %",
    "drop MFU %",
    "GPU busy dense / drop",
]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _rounds_ms(run, sp, device: torch.device) -> list[float]:
    """ms per call over ``sp.rounds`` rounds of ``run(sp.reps)``, after ``run(sp.warmup)`` untimed
    (compilation and CUDA graph capture happen there)."""
    run(sp.warmup)
    _sync(device)
    times = []
    for _ in range(sp.rounds):
        t0 = time.perf_counter()
        run(sp.reps)
        _sync(device)
        times.append((time.perf_counter() - t0) * 1000 / sp.reps)
    return times


def _model_config(family: str, sp, seq_len: int) -> ModelConfig:
    shapes = {
        "bert": (sp.bert_model, sp.bert_vocab_size),
        "modernbert": (sp.modern_model, sp.modern_vocab_size),
    }
    preset, vocab_size = shapes[family]
    return ModelConfig(
        family=family,
        preset=preset,
        vocab_size=vocab_size,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        max_position_embeddings=max(512, seq_len),
        document_attention="off",
    )


def _measure(
    mc: ModelConfig,
    t: int,
    b: int,
    mode: str,
    dropping: bool,
    sp,
    device: torch.device,
    amp: torch.dtype | None,
    drop: DropConfig | None = None,
) -> tuple[float, float | None]:
    """(median ms per step, GPU-busy fraction or None off CUDA) of the trainer's step."""
    drop = drop or DropConfig(method="cumulative", rate=sp.rate)
    cfg = Config(
        model=mc, drop=drop, train=TrainConfig(steps=1000, batch_size=b, lr=1e-4, warmup_steps=0)
    ).validate()
    torch.manual_seed(0)
    model = build_model(mc, drop).to(device).train()
    plan = DropPlan.for_model(
        drop, mc, t, SPECIAL_IDS, seed=0, total_steps=cfg.train.fixed_steps, device=device
    )
    opt = adamw(model, 1e-4, 0.01, (0.9, 0.999), 1e-6, fused=True)
    step = MLMStep(
        model,
        plan,
        opt,
        cfg.train.grad_clip,
        amp,
        use_attention_mask=False,
        compile=mode,
        compile_backend=sp.compile_backend,
        shapes=compiled_shapes(plan, [t]),
    )
    batch = synthetic_batch(b, t, mc.vocab_size, device, document_tokens=DOCUMENT_ROW)
    mb = {k: v.to(device) for k, v in batch.items()}

    def run(n: int, step=step, plan=plan) -> None:
        for i in range(n):
            step([mb], 1e-4, plan.at(i, t) if dropping else DropStep.dense(i, t))

    times = _rounds_ms(run, sp, device)
    busy = None
    if device.type == "cuda":
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as prof:
            t0 = time.perf_counter()
            run(sp.reps)
            _sync(device)
            wall = time.perf_counter() - t0
        kernels = sum(
            e.duration_ns()
            for e in kineto_events(prof)
            if str(e.device_type()).upper().endswith("CUDA") and e.name() != "[memory]"
        )
        busy = min(1.0, kernels / 1e9 / wall)
    del run, step, opt, model, plan
    free_device_memory()
    return statistics.median(times), busy


def run_step_part(
    cfg: CampaignConfig, out: Path, budget: Budget, r: PartResult, save, log: Log
) -> None:
    sp = cfg.step
    device = torch.device(cfg.device)
    amp = torch.bfloat16 if sp.precision == "bf16" else None
    peak = gpu_peak_flops(torch.cuda.get_device_name(0)) if device.type == "cuda" else None
    rows: list[list[object]] = []
    r.tables = [
        (
            f"the trainer's step per train.compile mode ({sp.precision}, {sp.rate:.0%} drop)",
            HEADER,
            rows,
        )
    ]
    r.data["rows"] = []
    r.data["loadavg_start"] = loadavg()
    r.summary.append(
        f"load average at the start: {r.data['loadavg_start']}; torch threads "
        f"{torch.get_num_threads()}"
    )
    for i, (family, t, tokens) in enumerate(sp.rows()):
        if i == 1:
            _trainer_vs_bench(cfg, budget, r, save, log, device)
        b = max(1, tokens // t)
        mc = _model_config(family, sp, t)
        drop = DropConfig(method="cumulative", rate=sp.rate)
        dense_f = step_flops(mc, t, b).total
        drop_f = step_flops(mc, t, b, drop).total
        for mode in sp.modes:
            what = f"{family} T={t} B={b} {mode}"
            if not budget.allows(sp.row_reserve_s):
                r.skip(
                    f"{what} (rerun with --set 'step.settings=[\"{family}:{t}:{tokens}\"]')", log
                )
                continue
            log(f"  [step] {what}")
            try:
                dense_ms, dense_busy = _measure(mc, t, b, mode, False, sp, device, amp)
                drop_ms, drop_busy = _measure(mc, t, b, mode, True, sp, device, amp)
            except torch.cuda.OutOfMemoryError:
                free_device_memory()
                r.summary.append(f"{what}: out of memory")
                continue
            mfu = [
                None if peak is None else 100 * f / (ms / 1000) / peak
                for f, ms in ((dense_f, dense_ms), (drop_f, drop_ms))
            ]
            speedup, bound = dense_ms / drop_ms, dense_f / drop_f
            busy = (
                None if dense_busy is None else f"{100 * dense_busy:.0f}% / {100 * drop_busy:.0f}%"
            )
            rows.append(
                [
                    family,
                    t,
                    tokens,
                    b,
                    mode,
                    dense_ms,
                    drop_ms,
                    speedup,
                    bound,
                    100 * speedup / bound,
                    mfu[0],
                    mfu[1],
                    busy,
                ]
            )
            r.data["rows"].append(
                {
                    "family": family,
                    "seq_len": t,
                    "tokens": tokens,
                    "batch_size": b,
                    "mode": mode,
                    "dense_ms": dense_ms,
                    "drop_ms": drop_ms,
                    "flop_bound": bound,
                    "dense_flops": dense_f,
                    "drop_flops": drop_f,
                    "dense_mfu": mfu[0],
                    "drop_mfu": mfu[1],
                    "dense_busy": dense_busy,
                    "drop_busy": drop_busy,
                }
            )
            save()
    if len(sp.rows()) == 1:
        _trainer_vs_bench(cfg, budget, r, save, log, device)
    _update_alone(cfg, budget, r, save, log, device)  # last: a detail of the step's time
    r.data["loadavg_end"] = loadavg()
    r.summary.append(f"load average at the end: {r.data['loadavg_end']}")
    r.check(
        "every mode of the first setting measured",
        len(rows) >= min(len(sp.modes), 1)
        and {x[4] for x in rows if (x[0], x[1], x[2]) == sp.rows()[0]} == set(sp.modes),
    )
    save()


TRAINER_HEADER = [
    "mode",
    "step",
    "T",
    "B",
    "micro-batches",
    "trainer ms",
    "bench ms",
    "trainer / bench",
]


def _trainer_vs_bench(
    cfg: CampaignConfig, budget: Budget, r: PartResult, save, log: Log, device: torch.device
) -> None:
    """The trainer's step (a short real pretrain) beside the bench's at the same micro-batch (see
    the module doc)."""
    sp = cfg.step
    if not (Path(cfg.data) / "meta.json").is_file():
        r.skip(f"the trainer's step vs the bench's (no prepared data at {cfg.data})", log)
        return
    t = data_info(cfg.data)["seq_len"]
    rows: list[list[object]] = []
    r.tables.append(
        (
            f"the trainer's step vs the bench's at the same micro-batch ({sp.trainer_config}, "
            f"{sp.trainer_steps} steps, logged every {sp.trainer_log_every})",
            TRAINER_HEADER,
            rows,
        )
    )
    r.data["trainer_vs_bench"] = []
    every = sp.trainer_log_every
    extra = [
        f"train.log_every={every}",
        f"train.eval_every={10 * sp.trainer_steps}",
        f"train.ckpt_every={10 * sp.trainer_steps}",
        "train.eval_batches=1",
    ]
    with Scratch("td-campaign-step-") as scratch:
        for mode in sp.trainer_modes:
            for kind, method in (("dense", "none"), ("drop", "cumulative")):
                what = f"trainer vs bench {mode} {kind}"
                if not budget.allows(sp.row_reserve_s):
                    r.skip(what, log)
                    continue
                log(f"  [step] {what}: {sp.trainer_config}, batch {sp.trainer_batch}, T={t}")
                more = [f"train.compile={json.dumps(mode)}"]
                if kind == "drop":
                    more.append(f"drop.rate={sp.rate}")
                pc = pretrain_config(
                    cfg,
                    sp.trainer_config,
                    sp.trainer_overrides,
                    sp.trainer_steps,
                    sp.trainer_batch,
                    method,
                    [*extra, *more],
                )
                run_dir = scratch / f"{mode}-{kind}"
                try:
                    pretrain(pc, run_dir, progress=False)
                    trainer_ms, micro = trainer_step_ms(run_dir, every)
                    rc = load_run_config(run_dir)  # resolved: the data's vocabulary
                    amp = autocast_dtype(rc.train.precision, device)
                    drop = DropConfig(method="cumulative", rate=sp.rate)
                    bench_ms, _ = _measure(
                        rc.model, t, sp.trainer_batch, mode, kind == "drop", sp, device, amp, drop
                    )
                except torch.cuda.OutOfMemoryError:
                    free_device_memory()
                    r.summary.append(f"{what}: out of memory")
                    continue
                free_device_memory()
                ratio = None if trainer_ms is None else trainer_ms / bench_ms
                rows.append([mode, kind, t, sp.trainer_batch, micro, trainer_ms, bench_ms, ratio])
                r.data["trainer_vs_bench"].append(
                    {
                        "mode": mode,
                        "step": kind,
                        "seq_len": t,
                        "batch_size": sp.trainer_batch,
                        "micro_batches": micro,
                        "trainer_ms": trainer_ms,
                        "bench_ms": bench_ms,
                        "ratio": ratio,
                        "precision": rc.train.precision,
                    }
                )
                save()
    got = r.data["trainer_vs_bench"]
    r.check(
        "the trainer's step measured beside the bench's",
        bool(got) and all(x["ratio"] is not None for x in got),
    )
    if got:
        r.summary.append(
            "the trainer's step / the bench's at the same micro-batch (goal: <= 1.05 on a GPU): "
            + ", ".join(f"{x['mode']} {x['step']} {x['ratio']:.3f}" for x in got if x["ratio"])
        )


UPDATE_HEADER = ["family", "parameters", "update", "ms / update", "/ fused"]


def _update_ms(mc: ModelConfig, mode: str, sp, device: torch.device) -> tuple[float, int]:
    """(median ms per update, parameter count) of AdamW's update of ``mc``'s parameters with random
    gradients: ATen's fused kernel and its skip flag (``mode`` off) or ``CompiledAdamW`` (step,
    graphs)."""
    torch.manual_seed(0)
    model = build_model(mc, DropConfig(method="cumulative", rate=sp.rate)).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    opt = adamw(model, 1e-4, 0.01, (0.9, 0.999), 1e-6, fused=True)
    finite = torch.ones((), dtype=torch.bool, device=device)
    update = None if mode == "off" else CompiledAdamW(opt, mode, sp.compile_backend)

    def run(n: int, opt=opt, update=update) -> None:
        for _ in range(n):
            adamw_update(opt, update, 1e-4, finite)

    times = _rounds_ms(run, sp, device)
    n = sum(p.numel() for p in model.parameters())
    del run, update, opt, model
    free_device_memory()
    return statistics.median(times), n


def _update_alone(
    cfg: CampaignConfig, budget: Budget, r: PartResult, save, log: Log, device: torch.device
) -> None:
    """AdamW's update alone, fused against compiled (see the module doc)."""
    sp = cfg.step
    family, t, _ = sp.rows()[0]
    mc = _model_config(family, sp, t)
    rows: list[list[object]] = []
    r.tables.append(
        (
            f"AdamW's update alone ({family}, fp32 weights and moments): ATen's fused kernel "
            "against CompiledAdamW",
            UPDATE_HEADER,
            rows,
        )
    )
    r.data["update_alone"] = []
    fused_ms = None
    for mode in ["off", *(m for m in sp.modes if m in ("step", "graphs"))]:
        name = "fused AdamW (eager)" if mode == "off" else f"CompiledAdamW ({mode})"
        what = f"AdamW's update alone: {name}"
        if not budget.allows(sp.row_reserve_s):
            r.skip(what, log)
            continue
        log(f"  [step] {what}")
        try:
            ms, n = _update_ms(mc, mode, sp, device)
        except torch.cuda.OutOfMemoryError:
            free_device_memory()
            r.summary.append(f"{what}: out of memory")
            continue
        if mode == "off":
            fused_ms = ms
        ratio = None if fused_ms is None else ms / fused_ms
        rows.append([family, n, name, ms, ratio])
        r.data["update_alone"].append(
            {"family": family, "parameters": n, "mode": mode, "ms": ms, "vs_fused": ratio}
        )
        save()
