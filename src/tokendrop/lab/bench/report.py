"""A benchmark's outputs: the terminal table, ``OUT.json`` + ``OUT.md``, and the speedup plot."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tokendrop.errors import ConfigError
from tokendrop.lab.bench.records import ArmRatio, BenchResult, HFThree, TimeStats
from tokendrop.runs.files import atomic_write_text, json_text
from tokendrop.runs.plotting import pyplot, save_figure


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _mib(x: int | None) -> str:
    return "-" if x is None else f"{x / 2**20:.0f}"


def _ms(x: TimeStats | None, key: str = "median") -> str:
    return "-" if x is None else f"{getattr(x, key) * 1e3:.0f}"


def _census(row, key: str) -> str:
    return "-" if row.census is None else str(getattr(row.census, key))


def _noise_line(res: BenchResult) -> str:
    n = res.noise
    return (
        f"wall IQR/median median {100 * n.median_rel_iqr:.1f}% (max {100 * n.max_rel_iqr:.1f}%)"
        + (
            f", cpu-time IQR/median median {100 * n.median_rel_iqr_cpu:.1f}%"
            if n.median_rel_iqr_cpu is not None
            else ""
        )
        + f"; median cpu_util {n.median_cpu_util:.2f}; load average {n.loadavg_start} -> "
        f"{n.loadavg_end}"
    )


def format_text(res: BenchResult) -> str:
    env, cfg = res.env, res.config
    lines = [
        f"{res.preset} on {env.where} ({env.torch_threads} threads), torch {env.torch}, "
        f"transformers {env.transformers}, {cfg.precision}" + (", compiled" if cfg.compile else ""),
        f"{'setting':<16} {'B':>4} {'M':>4} {'wall ms':>9} {'IQR %':>6} {'cpu ms':>8} {'syncs':>5} "
        f"{'ops':>6} {'tok/s':>9} {'TFLOP/s':>8} {'MFU':>6} {'util':>5} "
        f"{'peak MiB':>9} {'sdpa':>10}",
    ]
    for row in res.settings:
        peak = row.memory.peak_bytes if row.memory is not None else None
        lines.append(
            f"{row.name:<16} {row.batch_size:>4} {row.kept:>4} {_ms(row.time_s):>9} "
            f"{100 * row.rel_iqr:>6.1f} "
            f"{_ms(row.cpu_time_s):>8} {_census(row, 'syncs'):>5} {_census(row, 'ops'):>6} "
            f"{row.tokens_per_s:>9.0f} {row.achieved_tflops:>8.3f} {_pct(row.mfu):>6} "
            f"{row.cpu_util:>5.2f} {_mib(peak):>9} {','.join(row.sdpa_backend or []) or '-':>10}"
        )
    lines += [
        "",
        f"{'speedup over our dense':<22} {'wall':>7} {'(paired min-max)':>16} {'cpu-time':>9} "
        f"{'FLOP bound':>11} {'achieved wall / cpu':>20}",
    ]
    for x in res.speedups:
        cpu = f"{x.speedup_cpu:.3f}x" if x.speedup_cpu is not None else "-"
        lines.append(
            f"{x.setting:<22} {x.speedup:>6.3f}x "
            f"{x.speedup_paired_min:>7.3f}-{x.speedup_paired_max:<7.3f}"
            f" {cpu:>9} {x.flop_bound:>10.3f}x {_pct(x.fraction_of_bound):>9} / "
            f"{_pct(x.fraction_of_bound_cpu):<8}"
        )
    if res.vs_hf:
        lines += [
            "",
            f"our dense vs {res.info.hf_model}: tokens/s ratio (wall, paired min-max; "
            "cpu-time), peak memory",
        ]
        for v in res.vs_hf:
            memr = v.memory_ratio_dense_over_hf
            lines.append(
                f"  T={v.seq_len}: {v.dense_tokens_per_s:.0f} vs {v.hf_tokens_per_s:.0f} tok/s -> "
                f"{v.ratio:.2f}x ({v.ratio_paired_min:.2f}-{v.ratio_paired_max:.2f})"
                + (f"; cpu-time {v.ratio_cpu:.2f}x" if v.ratio_cpu is not None else "")
                + (f"; memory ours/HF {memr:.2f}" if memr else "")
            )
    if res.hf_patched:
        lines += [
            "",
            f"{res.info.hf_model} patched by tokendrop.transformers: speedup over the unpatched "
            "model (wall, paired min-max; cpu-time), FLOP bound, step time / ours at "
            "the same setting",
        ]
        for p in res.hf_patched:
            cpu = (
                f"; cpu-time {p.speedup_over_hf_cpu:.3f}x, {p.time_over_ours_cpu:.3f}"
                if p.speedup_over_hf_cpu
                else ""
            )
            lines.append(
                f"  {p.setting:<20} {p.speedup_over_hf:.3f}x ({p.speedup_over_hf_paired_min:.3f}-"
                f"{p.speedup_over_hf_paired_max:.3f}), bound {p.flop_bound:.3f}x; / {p.ours} "
                f"{p.time_over_ours:.3f} "
                f"({p.time_over_ours_paired_min:.3f}-{p.time_over_ours_paired_max:.3f}){cpu}"
            )
    if res.hf_three:
        lines += [
            "",
            "the integration's three numbers: step-time ratio (wall, paired min-max; "
            "cpu-time), FLOP bound",
        ]
        for h in res.hf_three:
            for label, x in _three(h):
                cpu = f"; cpu-time {x.speedup_cpu:.3f}x" if x.speedup_cpu is not None else ""
                lines.append(
                    f"  {label:<38} {x.speedup:.3f}x ({x.speedup_paired_min:.3f}-"
                    f"{x.speedup_paired_max:.3f}){cpu}, bound {x.flop_bound:.3f}x"
                )
    if res.memory:
        lines += ["", "peak training memory, setting / dense: state + step peak (step peak only)"]
        lines += [
            f"  {m.setting:<20} {m.peak_ratio:.3f}  ({m.step_peak_ratio:.3f})" for m in res.memory
        ]
    lines += ["", "noise: " + _noise_line(res)]
    if res.rounds_done < cfg.rounds:
        lines.append(f"time budget: {res.rounds_done} of {cfg.rounds} rounds ran")
    return "\n".join(lines)


def format_markdown(res: BenchResult) -> str:
    """The result as a Markdown report: the setup, the speedups against the FLOP bound, our dense
    step against transformers', peak memory, every setting, host-device synchronisations, and how
    memory was measured.  ``cpu-time`` columns appear when the settings have CPU times."""
    cpu_clock = any(row.cpu_time_s is not None for row in res.settings)
    out = _md_setup(res, cpu_clock)
    out += _md_speedups(res, cpu_clock)
    out += _md_vs_hf(res, cpu_clock)
    out += _md_hf_patched(res, cpu_clock)
    out += _md_hf_three(res, cpu_clock)
    out += _md_memory(res)
    out += _md_settings(res)
    out += _md_host_syncs(res)
    first = res.settings[0].memory if res.settings else None
    out += ["", "Memory: " + (first.method if first is not None else "not measured") + ".", ""]
    return "\n".join(out)


def _md_setup(res: BenchResult, cpu_clock: bool) -> list[str]:
    """The title and the bullet list: command, machine, software, model, protocol, noise."""
    env, cfg, info, n = res.env, res.config, res.info, res.noise
    m = info.model
    out = [f"# tokendrop bench: `{res.preset}` on {env.where}", ""]
    out += [
        f"- command: `{res.command}`",
        f"- date: {res.date}; wall time {res.wall_s:.0f} s",
        f"- machine: `{env.machine}`; CPU: {env.cpu_model} ({env.cpu_count} cores), torch threads "
        f"{env.torch_threads}, OMP_WAIT_POLICY={env.OMP_WAIT_POLICY}"
        + (f"; GPU: {env.gpu_name} (CUDA {env.cuda}, cuDNN {env.cudnn})" if env.gpu_name else ""),
        f"- torch {env.torch}, transformers {env.transformers}, Python "
        f"{env.python}, {env.platform}",
        f"- model: {m['preset']} ({m['num_layers']} layers, d={m['hidden_size']}, {m['num_heads']} "
        f"heads, V={m['vocab_size']}, dropout {m['hidden_dropout']}/{m['attention_dropout']}, "
        f"{info.num_parameters / 1e6:.1f}M params"
        + (
            f"; ModernBERT architecture: GeGLU width {m['intermediate_size']}, global attention in "
            f"layers {m['global_layers']}, the others a {m['local_attention']}-token sliding "
            f"window, document attention {m['document_attention']}"
            if "local_attention" in m
            else ""
        )
        + "); "
        f"{cfg.precision}; compile={cfg.compile}"
        + (f" ({cfg.compile_backend})" if cfg.compile else "")
        + f"; AdamW fused={cfg.fused_adamw}; drop method {cfg.method}",
        f"- protocol: warm-up {cfg.warmup} steps per setting, then {res.rounds_done} interleaved "
        f"rounds x {cfg.reps} step(s)"
        + (f" (of {cfg.rounds}: time budget)" if res.rounds_done < cfg.rounds else "")
        + "; speedups = median of per-round paired ratios (min-max over rounds in brackets)",
        f"- noise: load average {n.loadavg_start} -> {n.loadavg_end}; wall IQR/median: median "
        f"{100 * n.median_rel_iqr:.1f}% (max {100 * n.max_rel_iqr:.1f}%)"
        + (
            f"; CPU-time IQR/median: median {100 * n.median_rel_iqr_cpu:.1f}%"
            if n.median_rel_iqr_cpu is not None
            else ""
        )
        + f"; median cpu_util (CPU s / wall s) {n.median_cpu_util:.2f} with "
        f"{env.torch_threads} thread(s)",
    ]
    if res.peak_flops:
        out.append(f"- MFU against a peak of {res.peak_flops / 1e12:.0f} TFLOP/s (dense bf16)")
    if cpu_clock:
        out.append(
            "- `cpu-time` columns: process CPU seconds per step; with 1 thread on a shared machine "
            "this is the step's compute time without the time spent waiting for a core (wall = "
            "cpu / cpu_util)"
        )
    return out


def _md_speedups(res: BenchResult, cpu_clock: bool) -> list[str]:
    """Section: each setting's speedup over our dense step against its FLOP bound (and, for sliding-
    window layers, the bound of the masked dense attention)."""
    out = [
        "",
        "## Speedup over our dense step vs the FLOP bound",
        "",
        "| setting | wall speedup | paired min-max | of medians |"
        + (" CPU-time speedup | paired min-max |" if cpu_clock else "")
        + " FLOP bound | achieved (wall) |"
        + (" achieved (CPU time) |" if cpu_clock else ""),
        "|---|---:|---:|---:|"
        + ("---:|---:|" if cpu_clock else "")
        + "---:|---:|"
        + ("---:|" if cpu_clock else ""),
    ]
    for x in res.speedups:
        line = (
            f"| {x.setting} | {x.speedup:.3f}x | "
            f"{x.speedup_paired_min:.3f}-{x.speedup_paired_max:.3f} | {x.speedup_of_medians:.3f}x |"
        )
        if cpu_clock:
            line += (
                f" {x.speedup_cpu:.3f}x | "
                f"{x.speedup_cpu_paired_min:.3f}-{x.speedup_cpu_paired_max:.3f} |"
                if x.speedup_cpu is not None
                else " - | - |"
            )
        line += f" {x.flop_bound:.3f}x | {_pct(x.fraction_of_bound)} |"
        if cpu_clock:
            line += f" {_pct(x.fraction_of_bound_cpu)} |"
        out.append(line)
    masked = [x for x in res.speedups if x.flop_bound_masked_dense is not None]
    if masked:
        out += [
            "",
            "FLOP bound with the sliding-window layers counted as the masked dense attention an "
            "SDPA kernel with a mask executes (the table's bound counts only the keys "
            "inside the window): "
            + ", ".join(
                f"{x.setting} {x.flop_bound_masked_dense:.3f}x (achieved "
                f"{_pct(x.speedup / x.flop_bound_masked_dense)})"
                for x in masked
            ),
        ]
    return out


def _md_vs_hf(res: BenchResult, cpu_clock: bool) -> list[str]:
    """Section (when measured): our dense step's throughput and memory against transformers'
    model."""
    if not res.vs_hf:
        return []
    info = res.info
    out = [
        "",
        f"## Our dense step vs `{info.hf_model}` (attention `{info.hf_attn_implementation}`, same "
        "config, batch, dtype, AdamW)",
        "",
        "| T | ours tok/s | HF tok/s | ratio (wall) | paired min-max |"
        + (" ratio (CPU time) |" if cpu_clock else "")
        + " peak memory ours/HF |",
        "|---:|---:|---:|---:|---:|" + ("---:|" if cpu_clock else "") + "---:|",
    ]
    for v in res.vs_hf:
        memr = v.memory_ratio_dense_over_hf
        line = (
            f"| {v.seq_len} | {v.dense_tokens_per_s:.0f} | {v.hf_tokens_per_s:.0f} | "
            f"{v.ratio:.2f}x | "
            f"{v.ratio_paired_min:.2f}-{v.ratio_paired_max:.2f} |"
        )
        if cpu_clock:
            line += f" {v.ratio_cpu:.2f}x |" if v.ratio_cpu is not None else " - |"
        out.append(line + f" {'-' if not memr else f'{memr:.2f}'} |")
    return out


def _md_hf_patched(res: BenchResult, cpu_clock: bool) -> list[str]:
    """Section (when measured): transformers' model patched by tokendrop.transformers against the
    unpatched one and against our model at the same setting."""
    if not res.hf_patched:
        return []
    head = (
        "on the masked positions only" if res.config.hf_sparse_prediction else "on all T positions"
    )
    out = [
        "",
        f"## `{res.info.hf_model}` patched by `tokendrop.transformers` (its MLM head {head})",
        "",
        "Speedup = the unpatched model's step time / the patched model's; time / ours = the "
        "patched model's step time / our model's at the same setting (1.10 = 10% slower); medians "
        "of per-round paired ratios.",
        "",
        "| setting | speedup over unpatched | paired min-max | FLOP bound | time / ours | paired "
        "min-max |" + (" speedup (CPU time) | time / ours (CPU time) |" if cpu_clock else ""),
        "|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if cpu_clock else ""),
    ]
    for p in res.hf_patched:
        line = (
            f"| {p.setting} | {p.speedup_over_hf:.3f}x | {p.speedup_over_hf_paired_min:.3f}-"
            f"{p.speedup_over_hf_paired_max:.3f} | {p.flop_bound:.3f}x | {p.time_over_ours:.3f} | "
            f"{p.time_over_ours_paired_min:.3f}-{p.time_over_ours_paired_max:.3f} |"
        )
        if cpu_clock:
            line += (
                f" {p.speedup_over_hf_cpu:.3f}x | {p.time_over_ours_cpu:.3f} |"
                if p.speedup_over_hf_cpu
                else " - | - |"
            )
        out.append(line)
    return out


def _three(h: HFThree) -> list[tuple[str, ArmRatio]]:
    """The three comparisons of ``h``, each labelled with its arms."""
    return [
        (f"{h.setting} vs released", h.patched_vs_released),
        (f"T{h.seq_len} sparse head alone", h.sparse_head_alone),
        (f"{h.setting} dropping alone", h.dropping_alone),
    ]


def _md_hf_three(res: BenchResult, cpu_clock: bool) -> list[str]:
    """Section (when the released model was timed): the patched model against transformers' model as
    released, split into the sparse head alone and dropping alone, each next to its FLOP bound."""
    if not res.hf_three:
        return []
    out = [
        "",
        "## The integration's three numbers: patched vs released, the sparse head "
        "alone, dropping alone",
        "",
        "`hf-released` is transformers' MLM class as released (its head on all T positions, "
        "labels -100 elsewhere); `hf` is the same model with its head on the masked positions "
        "only; `hf-<variant>` is it patched by `apply_token_dropping`. Speedup = the base's "
        "step time / the arm's, medians of per-round paired ratios; FLOP bound = the base's "
        "FLOPs / the arm's.",
        "",
        "| comparison | arm | base | speedup (wall) | paired min-max |"
        + (" speedup (CPU time) | paired min-max |" if cpu_clock else "")
        + " FLOP bound |",
        "|---|---|---|---:|---:|" + ("---:|---:|" if cpu_clock else "") + "---:|",
    ]
    names = ("patched vs released", "the sparse head alone", "dropping alone")
    for h in res.hf_three:
        for name, (_, x) in zip(names, _three(h)):
            line = (
                f"| {name} | {x.arm} | {x.base} | {x.speedup:.3f}x | "
                f"{x.speedup_paired_min:.3f}-{x.speedup_paired_max:.3f} |"
            )
            if cpu_clock and x.speedup_cpu is not None:
                line += (
                    f" {x.speedup_cpu:.3f}x | "
                    f"{x.speedup_cpu_paired_min:.3f}-{x.speedup_cpu_paired_max:.3f} |"
                )
            elif cpu_clock:
                line += " - | - |"
            out.append(line + f" {x.flop_bound:.3f}x |")
    return out


def _md_memory(res: BenchResult) -> list[str]:
    """Section (when measured): each setting's peak training memory relative to the dense step's."""
    if not res.memory:
        return []
    out = [
        "",
        "## Peak training memory, setting / dense",
        "",
        "| setting | peak (state + step) | step peak only |",
        "|---|---:|---:|",
    ]
    out += [f"| {x.setting} | {x.peak_ratio:.3f} | {x.step_peak_ratio:.3f} |" for x in res.memory]
    return out


def _md_settings(res: BenchResult) -> list[str]:
    """Section: every setting's times, throughput, MFU, memory and attention kernels."""
    out = [
        "",
        "## All settings",
        "",
        "| setting | B | M | wall ms median | q25-q75 | min-max | CPU ms median | host syncs | "
        "aten ops | tok/s "
        "| TFLOP/s | MFU | cpu_util | peak MiB | step peak MiB | RSS delta MiB | SDPA |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in res.settings:
        t, mem = row.time_s, row.memory
        out.append(
            f"| {row.name} | {row.batch_size} | {row.kept} | {_ms(t)} | "
            f"{_ms(t, 'q25')}-{_ms(t, 'q75')} | "
            f"{_ms(t, 'min')}-{_ms(t, 'max')} | {_ms(row.cpu_time_s)} | {_census(row, 'syncs')} | "
            f"{_census(row, 'ops')} | {row.tokens_per_s:.0f} | "
            f"{row.achieved_tflops:.3f} | {_pct(row.mfu)} | {row.cpu_util:.2f} | "
            f"{_mib(mem.peak_bytes if mem else None)} | "
            f"{_mib(mem.peak_step_bytes if mem else None)} | "
            f"{_mib(mem.rss_peak_delta_bytes if mem else None)} | "
            f"{', '.join(row.sdpa_backend or []) or '-'} |"
        )
    return out


def _md_host_syncs(res: BenchResult) -> list[str]:
    """Section (when counted): host-device synchronisations inside one step, per setting: where the
    census found them, and CUDA's own count."""
    out = []
    found = [
        (row.name, row.census)
        for row in res.settings
        if row.census is not None and row.census.syncs
    ]
    if any(row.census is not None for row in res.settings):
        out += [
            "",
            "Host syncs and aten ops per step: one untimed step under `tokendrop.train.census` "
            "(CUDA's sync-debug rules applied to the ops on any device)"
            + (
                ": " + "; ".join(f"{n} at {', '.join(c.locations)}" for n, c in found)
                if found
                else "; no setting has a sync."
            ),
        ]
    syncs = [(row.name, row.host_syncs) for row in res.settings if row.host_syncs is not None]
    if not syncs:
        return out
    out += [
        "",
        "## Host-device synchronisations inside one step (`torch.cuda.set_sync_debug_mode`)",
        "",
    ]
    out += [
        f"- {name}: {h.count}"
        + (f" at {', '.join(h.locations)}" if h.locations else "")
        + (f" ({'; '.join(h.examples)})" if h.examples else "")
        for name, h in syncs
    ]
    return out


def check_results_path(path: str | os.PathLike) -> None:
    """Refuse, before any timing, a ``--json`` target that :func:`write_results` could not write: a
    directory where the file would go, or a location whose nearest existing folder is a file or not
    writable.  ``ConfigError`` naming the path."""
    p = Path(path)
    as_dir = p.is_dir() or str(path).endswith(("/", os.sep))
    targets = [] if as_dir else [p, p.with_suffix(".md")]
    for t in targets:
        if t.is_dir():
            raise ConfigError(
                f"bench --json: {t} is a directory; give a file name (or the directory "
                "with a trailing /)"
            )
    parent = p if as_dir else p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(
            f"bench --json: cannot write {p}: {parent} is not a directory; choose another path"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"bench --json: cannot write {p}: {parent} is not writable; choose another path"
        )


def write_json_and_markdown(
    path: str | os.PathLike, machine: str, preset: str, data: dict, markdown: str
) -> tuple[Path, Path]:
    """Write ``path`` (.json) and the Markdown beside it, each atomically; a directory ``path``: the
    files are ``<machine>-<preset>.json`` / ``.md`` in it.  Every benchmark result goes through
    here."""
    p = Path(path)
    if p.is_dir() or str(path).endswith(("/", os.sep)):
        p = p / f"{machine}-{preset}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    md = p.with_suffix(".md")
    atomic_write_text(p, json_text(data))
    atomic_write_text(md, markdown)
    return p, md


def write_results(res: BenchResult, path: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``path`` (.json) and the Markdown table beside it.  A directory ->
    <machine>-<preset>.json in it."""
    return write_json_and_markdown(
        path, res.env.machine, res.preset, res.to_dict(), format_markdown(res)
    )


COLORS = {"drop": "tab:blue", "pass": "tab:orange", "avg": "tab:green", "random_ltd": "tab:red"}


def plot_speedup(
    paths: list[str | os.PathLike], out: str | os.PathLike, clock: str = "auto"
) -> Path:
    """Measured step-time speedup vs drop rate per variant, with the FLOP bound, from results JSON
    files.

    One row of panels per file, one panel per T.  ``clock="auto"``: process-CPU-time speedups for
    CPU runs (a shared machine's wall clock includes waiting for a core), wall clock for GPU runs.
    """
    plt = pyplot()
    runs = [json.loads(Path(p).read_text()) for p in paths]
    if not runs:
        raise ValueError(
            "no results JSON given (run `tokendrop bench --json benchmarks/results/` first)"
        )
    ncols = max(len(r["config"]["seq_lens"]) for r in runs)
    fig, axes = plt.subplots(
        len(runs), ncols, figsize=(5.2 * ncols, 4.0 * len(runs)), squeeze=False
    )
    for i, res in enumerate(runs):
        env = res["env"]
        where = env.get("gpu_name") or f"{env['cpu_model']}, {env['torch_threads']} thr"
        m = res["info"]["model"]
        for j, t in enumerate(res["config"]["seq_lens"]):
            ax = axes[i][j]
            rows = [x for x in res["speedups"] if x["seq_len"] == t]
            use_cpu = clock == "cpu" or (clock == "auto" and any("speedup_cpu" in x for x in rows))
            key = "speedup_cpu" if use_cpu else "speedup"
            for variant in COLORS:
                vr = sorted((x for x in rows if x["variant"] == variant), key=lambda x: x["rate"])
                if not vr:
                    continue
                rates = [0.0] + [x["rate"] for x in vr]
                # keep the error bars apart
                shift = {"drop": -0.006, "pass": 0.006, "avg": 0.0, "random_ltd": 0.012}[variant]
                meas = [1.0] + [x[key] for x in vr]
                lo = [0.0] + [x[key] - x[f"{key}_paired_min"] for x in vr]
                hi = [0.0] + [x[f"{key}_paired_max"] - x[key] for x in vr]
                bound = [1.0] + [x["flop_bound"] for x in vr]
                c = COLORS[variant]
                ax.errorbar(
                    [r + shift for r in rates],
                    meas,
                    yerr=[lo, hi],
                    fmt="o" if variant == "avg" else "o-",
                    color=c,
                    capsize=3,
                    label=f"{variant}: measured ({'CPU time' if use_cpu else 'wall'})",
                )
                ax.plot(
                    rates,
                    bound,
                    "--" if variant != "avg" else "s",
                    color=c,
                    mfc="none",
                    alpha=0.8,
                    label=f"{variant}: FLOP bound",
                )
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_xlabel("drop rate (fraction of tokens dropped in the span)")
            ax.set_ylabel("step-time speedup over dense")
            comp = ", compiled" if res["config"].get("compile") else ""
            ax.set_title(
                f"{m['preset']} T={t}, {res['config']['precision']}{comp} - {where}", fontsize=9
            )
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out, dpi=120, tight=False)
    return out
