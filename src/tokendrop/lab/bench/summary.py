"""From timed runners to a ``BenchResult``: per-setting statistics, speedups against our dense step
next to the FLOP bound, our dense step against transformers', memory ratios, noise."""

from __future__ import annotations

import datetime as _dt
import statistics

import torch

from tokendrop.dropping.flops import SLIDING, flop_ratio, gpu_peak_flops, layer_types
from tokendrop.lab.bench.environment import Environment
from tokendrop.lab.bench.presets import BENCH_VARIANTS, BenchConfig
from tokendrop.lab.bench.records import (
    ArmRatio,
    BenchResult,
    HFPatched,
    HFThree,
    MemoryRatio,
    ModelInfo,
    Noise,
    SettingResult,
    Speedup,
    TimeStats,
    VsHF,
)
from tokendrop.lab.bench.steps import Runner
from tokendrop.lab.sizes import PEAK_TABLE


def paired(num: list[float], den: list[float]) -> list[float]:
    """Per-round ratios num/den (the two settings were measured seconds apart in each round)."""
    return [a / b for a, b in zip(num, den) if b > 0]


def _med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def peak_flops_for(cfg: BenchConfig, env: Environment, device: torch.device) -> float | None:
    """The peak MFU is measured against: ``peak_tflops`` if given, else ("table") the GPU's bf16
    peak (bf16 runs only)."""
    if cfg.peak_tflops != PEAK_TABLE:
        return float(cfg.peak_tflops) * 1e12
    if device.type != "cuda" or cfg.precision != "bf16":
        return None  # the table is bf16 tensor-core peaks; none on CPU
    return gpu_peak_flops(env.gpu_name or "")


def setting_result(r: Runner, peak: float | None, cpu_clock: bool) -> SettingResult:
    s = r.setting
    t = TimeStats.of(r.samples)
    tok = s.batch_size * s.seq_len
    row = SettingResult(
        name=s.name,
        impl=s.impl,
        variant=s.variant,
        rate=s.rate,
        seq_len=s.seq_len,
        batch_size=s.batch_size,
        kept=r.kept,
        tokens_per_step=tok,
        flops_per_step=r.flops,
        time_s=t,
        samples_s=r.samples,
        round_median_s=r.round_median,
        tokens_per_s=tok / t.median,
        achieved_tflops=r.flops / t.median / 1e12,
        mfu=(r.flops / t.median / peak) if peak else None,
        rel_iqr=t.rel_iqr,
        cpu_util=statistics.median(paired(r.cpu, r.samples)),
    )
    c = TimeStats.of(r.cpu)
    if cpu_clock and c.median > 0:
        row.cpu_time_s, row.cpu_samples_s, row.round_median_cpu_s = c, r.cpu, r.round_median_cpu
        row.tokens_per_cpu_s, row.rel_iqr_cpu = tok / c.median, c.rel_iqr
    row.census = r.census
    if r.extras is not None:
        x = r.extras
        row.memory, row.sdpa_ops, row.sdpa_backend, row.profile, row.host_syncs = (
            x.memory,
            x.sdpa_ops,
            x.sdpa_backend,
            x.profile,
            x.host_syncs,
        )
    return row


def summarise(
    cfg: BenchConfig, runners: list[Runner], info: ModelInfo, env: Environment, device: torch.device
) -> BenchResult:
    peak = peak_flops_for(cfg, env, device)
    cpu_clock = device.type == "cpu"  # CPU time is meaningful only when the step runs on the host
    rows = {r.setting.name: setting_result(r, peak, cpu_clock) for r in runners}
    by_name = {r.setting.name: r for r in runners}
    speedups: list[Speedup] = []
    vs_hf: list[VsHF] = []
    memory: list[MemoryRatio] = []
    for t in cfg.seq_lens:
        dense, d_row = by_name[f"T{t}/dense"], rows[f"T{t}/dense"]
        for r in runners:
            s = r.setting
            if s.seq_len != t or s.impl != "tokendrop" or s.variant == "dense":
                continue
            row = rows[s.name]
            pr = paired(dense.round_median, r.round_median)
            bound = d_row.flops_per_step / row.flops_per_step
            x = Speedup(
                seq_len=t,
                setting=s.name,
                variant=s.variant,
                rate=s.rate,
                speedup=_med(pr),
                speedup_paired_min=min(pr),
                speedup_paired_max=max(pr),
                speedup_of_medians=d_row.time_s.median / row.time_s.median,
                flop_bound=bound,
                fraction_of_bound=_med(pr) / bound,
            )
            if cpu_clock and d_row.cpu_time_s is not None and row.cpu_time_s is not None:
                pc = paired(dense.round_median_cpu, r.round_median_cpu)
                x.speedup_cpu, x.speedup_cpu_paired_min, x.speedup_cpu_paired_max = (
                    _med(pc),
                    min(pc),
                    max(pc),
                )
                x.fraction_of_bound_cpu = _med(pc) / bound
            mc = cfg.model_config()
            if SLIDING in layer_types(mc):
                x.flop_bound_masked_dense = 1.0 / flop_ratio(
                    mc, t, s.drop_config(cfg.method), masked_dense_local=True
                )
            speedups.append(x)
            dm, sm = d_row.memory, row.memory
            if dm is not None and sm is not None and dm.peak_bytes and sm.peak_bytes:
                memory.append(
                    MemoryRatio(
                        seq_len=t,
                        setting=s.name,
                        peak_ratio=sm.peak_bytes / dm.peak_bytes,
                        step_peak_ratio=(sm.peak_step_bytes or 0) / max(1, dm.peak_step_bytes or 0),
                    )
                )
        if f"T{t}/hf" in by_name:
            hf, h_row = by_name[f"T{t}/hf"], rows[f"T{t}/hf"]
            pr = paired(hf.round_median, dense.round_median)
            v = VsHF(
                seq_len=t,
                dense_tokens_per_s=d_row.tokens_per_s,
                hf_tokens_per_s=h_row.tokens_per_s,
                ratio=_med(pr),
                ratio_paired_min=min(pr),
                ratio_paired_max=max(pr),
                ratio_of_medians=d_row.tokens_per_s / h_row.tokens_per_s,
            )
            if cpu_clock and d_row.cpu_time_s is not None and h_row.cpu_time_s is not None:
                pc = paired(hf.round_median_cpu, dense.round_median_cpu)
                v.ratio_cpu, v.ratio_cpu_paired_min, v.ratio_cpu_paired_max = (
                    _med(pc),
                    min(pc),
                    max(pc),
                )
            if (
                h_row.memory is not None
                and h_row.memory.peak_bytes
                and d_row.memory is not None
                and d_row.memory.peak_bytes
            ):
                v.memory_ratio_dense_over_hf = d_row.memory.peak_bytes / h_row.memory.peak_bytes
            vs_hf.append(v)
    hf_patched = patched_vs_hf(cfg, runners, rows, cpu_clock)
    hf_three = three_numbers(runners, rows, cpu_clock)
    settings = list(rows.values())
    noise = Noise(
        median_rel_iqr=statistics.median(s.rel_iqr for s in settings),
        max_rel_iqr=max(s.rel_iqr for s in settings),
        median_rel_iqr_cpu=_med([s.rel_iqr_cpu for s in settings if s.rel_iqr_cpu is not None]),
        median_cpu_util=statistics.median(s.cpu_util for s in settings),
        loadavg_start=env.loadavg_start,
        loadavg_end=env.loadavg_end,
    )
    return BenchResult(
        preset=cfg.name,
        date=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        env=env,
        config=cfg,
        info=info,
        peak_flops=peak,
        settings=settings,
        speedups=speedups,
        vs_hf=vs_hf,
        memory=memory,
        headline=headline(speedups, vs_hf, memory, hf_patched, hf_three),
        noise=noise,
        hf_patched=hf_patched,
        hf_three=hf_three,
    )


def patched_vs_hf(
    cfg: BenchConfig, runners: list[Runner], rows: dict, cpu_clock: bool
) -> list[HFPatched]:
    """Every patched transformers setting against the unpatched model and against ours at the same
    variant and rate (per-round paired ratios, as the other comparisons)."""
    by_name = {r.setting.name: r for r in runners}
    out = []
    for r in runners:
        s = r.setting
        if s.impl != "hf_td":
            continue
        hf, mine = by_name[f"T{s.seq_len}/hf"], by_name[s.name.replace("/hf-", "/")]
        over_hf, over_ours = (
            paired(hf.round_median, r.round_median),
            paired(r.round_median, mine.round_median),
        )
        row, h_row = rows[s.name], rows[hf.setting.name]
        x = HFPatched(
            seq_len=s.seq_len,
            setting=s.name,
            ours=mine.setting.name,
            variant=s.variant,
            rate=s.rate,
            speedup_over_hf=_med(over_hf),
            speedup_over_hf_paired_min=min(over_hf),
            speedup_over_hf_paired_max=max(over_hf),
            speedup_over_hf_of_medians=h_row.time_s.median / row.time_s.median,
            flop_bound=h_row.flops_per_step / row.flops_per_step,
            time_over_ours=_med(over_ours),
            time_over_ours_paired_min=min(over_ours),
            time_over_ours_paired_max=max(over_ours),
        )
        if cpu_clock and row.cpu_time_s is not None and h_row.cpu_time_s is not None:
            x.speedup_over_hf_cpu = _med(paired(hf.round_median_cpu, r.round_median_cpu))
            x.time_over_ours_cpu = _med(paired(r.round_median_cpu, mine.round_median_cpu))
        out.append(x)
    return out


def arm_ratio(arm: Runner, base: Runner, rows: dict, cpu_clock: bool) -> ArmRatio:
    """``base``'s step time over ``arm``'s (medians of per-round paired ratios, wall and CPU time)
    next to ``base``'s FLOPs over ``arm``'s."""
    a, b = rows[arm.setting.name], rows[base.setting.name]
    pr = paired(base.round_median, arm.round_median)
    x = ArmRatio(
        arm=arm.setting.name,
        base=base.setting.name,
        speedup=_med(pr),
        speedup_paired_min=min(pr),
        speedup_paired_max=max(pr),
        flop_bound=b.flops_per_step / a.flops_per_step,
    )
    if cpu_clock and a.cpu_time_s is not None and b.cpu_time_s is not None:
        pc = paired(base.round_median_cpu, arm.round_median_cpu)
        x.speedup_cpu, x.speedup_cpu_paired_min = _med(pc), min(pc)
        x.speedup_cpu_paired_max = max(pc)
    return x


def three_numbers(runners: list[Runner], rows: dict, cpu_clock: bool) -> list[HFThree]:
    """Per patched setting, when the released model was timed: patched over released, the sparse
    head alone (sparse-head baseline over released), dropping alone (patched over the baseline)."""
    by_name = {r.setting.name: r for r in runners}
    out = []
    for r in runners:
        s = r.setting
        released = by_name.get(f"T{s.seq_len}/hf-released")
        if s.impl != "hf_td" or released is None:
            continue
        sparse = by_name[f"T{s.seq_len}/hf"]
        out.append(
            HFThree(
                seq_len=s.seq_len,
                setting=s.name,
                variant=s.variant,
                rate=s.rate,
                patched_vs_released=arm_ratio(r, released, rows, cpu_clock),
                sparse_head_alone=arm_ratio(sparse, released, rows, cpu_clock),
                dropping_alone=arm_ratio(r, sparse, rows, cpu_clock),
            )
        )
    return out


def headline(
    speedups: list[Speedup],
    vs_hf: list[VsHF],
    memory: list[MemoryRatio],
    hf_patched: list[HFPatched] = (),
    hf_three: list[HFThree] = (),
) -> dict[str, float]:
    """The numbers a README quotes: 50% drop speedup / bound / memory, dense over HF, the patched
    transformers model over the unpatched one and against ours, and the integration's three numbers
    (patched vs released, the sparse head alone, dropping alone) with their bounds, per T."""
    out: dict[str, float] = {}
    for x in speedups:
        if BENCH_VARIANTS[x.variant].headline and x.rate == 0.5:
            k = f"T{x.seq_len}_{x.variant}50"
            out[f"{k}_speedup"] = x.speedup
            if x.speedup_cpu is not None:
                out[f"{k}_speedup_cpu_time"] = x.speedup_cpu
            out[f"{k}_flop_bound"] = x.flop_bound
            out[f"{k}_fraction_of_bound"] = x.fraction_of_bound
            if x.fraction_of_bound_cpu is not None:
                out[f"{k}_fraction_of_bound_cpu_time"] = x.fraction_of_bound_cpu
    for v in vs_hf:
        out[f"T{v.seq_len}_dense_over_hf_tokens_per_s"] = v.ratio
        if v.ratio_cpu is not None:
            out[f"T{v.seq_len}_dense_over_hf_cpu_time"] = v.ratio_cpu
    for m in memory:
        if m.setting.endswith("/drop-0.5"):
            out[f"T{m.seq_len}_drop50_memory_ratio"] = m.peak_ratio
    for p in hf_patched:
        if BENCH_VARIANTS[p.variant].headline and p.rate == 0.5:
            k = f"T{p.seq_len}_hf_{p.variant}50"
            out[f"{k}_speedup_over_hf"] = p.speedup_over_hf
            out[f"{k}_time_over_ours"] = p.time_over_ours
            if p.speedup_over_hf_cpu is not None:
                out[f"{k}_speedup_over_hf_cpu_time"] = p.speedup_over_hf_cpu
                out[f"{k}_time_over_ours_cpu_time"] = p.time_over_ours_cpu
    for h in hf_three:
        k = f"hf_{h.variant}{round(100 * h.rate)}"
        for part in ("patched_vs_released", "sparse_head_alone", "dropping_alone"):
            x: ArmRatio = getattr(h, part)
            out[f"T{h.seq_len}_{k}_{part}"] = x.speedup
            out[f"T{h.seq_len}_{k}_{part}_flop_bound"] = x.flop_bound
            if x.speedup_cpu is not None:
                out[f"T{h.seq_len}_{k}_{part}_cpu_time"] = x.speedup_cpu
    return out
